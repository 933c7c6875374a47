/* sha256.h: SHA-256 (FIPS 180-4), used for cache keys, cache entry checksums and bundle checksums. */
#ifndef FG_SHA256_H
#define FG_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct fg_sha256 {
    uint32_t h[8];      /* chaining state */
    uint64_t length;    /* bytes hashed so far */
    uint8_t block[64];  /* pending partial block */
    size_t fill;        /* bytes in block */
} fg_sha256;

void sha256_init(fg_sha256 *s);
void sha256_update(fg_sha256 *s, const void *data, size_t n);
void sha256_final(fg_sha256 *s, uint8_t out[32]);
/* One-shot convenience. */
void sha256(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of a 32-byte digest into out (65 bytes with the NUL). */
void sha256_hex(const uint8_t digest[32], char out[65]);

#endif
