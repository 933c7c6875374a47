/* little_endian.h: little-endian integers in byte buffers, for the on-disk formats (cache entries, bundles).
 * Byte by byte, so the files read the same on any host and alignment never matters. */
#ifndef FG_LITTLE_ENDIAN_H
#define FG_LITTLE_ENDIAN_H

#include <stdint.h>

static inline void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t get_le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#endif
