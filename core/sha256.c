/* sha256.c: SHA-256 as FIPS 180-4 defines it (sections 4.1.2, 4.2.2, 5.1.1, 6.2), written from the
 * standard. flashgen hashes kernel sources into cache keys and checksums cache entries and bundles with
 * it; speed matters little (inputs are kilobytes to megabytes), portability and exactness do, so the
 * code is plain C with no endianness or alignment assumptions. */
#include <string.h>
#include "core/sha256.h"

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes (FIPS 180-4 4.2.2). */
static const uint32_t sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

/* Rotate right; n is always in 1..31 here, so neither shift is by the full width. */
static uint32_t rotr(uint32_t x, unsigned n) {
    return (x >> n) | (x << (32u - n));
}

/* Reads a big-endian 32-bit word from 4 bytes. */
static uint32_t load_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Writes a 32-bit word as 4 big-endian bytes. */
static void store_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Folds one 64-byte message block into the chaining state (FIPS 180-4 6.2.2, steps 1-4). */
static void sha256_compress(uint32_t h[8], const uint8_t block[64]) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + big_s1 + ch + sha256_k[t] + w[t];
        uint32_t big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = big_s0 + maj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

/* Starts a new hash: the initial state is the first 32 bits of the fractional parts of the square roots
 * of the first 8 primes (FIPS 180-4 5.3.3). Cannot fail. */
void sha256_init(fg_sha256 *s) {
    static const uint32_t iv[8] = {
        0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
    };
    memcpy(s->h, iv, sizeof iv);
    s->length = 0;
    s->fill = 0;
    memset(s->block, 0, sizeof s->block);
}

/* Appends n bytes (data may be NULL when n is 0). Whole blocks are compressed straight from the caller's
 * buffer; only a trailing partial block is copied. Cannot fail; messages past 2^61 bytes (the limit of
 * the 64-bit bit count) are outside the standard and not expected. */
void sha256_update(fg_sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    if (n == 0)
        return; /* also keeps a NULL data pointer away from memcpy */
    s->length += (uint64_t)n;
    if (s->fill > 0) {
        size_t take = 64 - s->fill;
        if (take > n)
            take = n;
        memcpy(s->block + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill < 64)
            return;
        sha256_compress(s->h, s->block);
        s->fill = 0;
    }
    while (n >= 64) {
        sha256_compress(s->h, p);
        p += 64;
        n -= 64;
    }
    if (n > 0) {
        memcpy(s->block, p, n);
        s->fill = n;
    }
}

/* Pads (a 1 bit, zeros, the 64-bit big-endian bit length: FIPS 180-4 5.1.1), writes the digest to out
 * and wipes the state, which must be re-initialized before reuse. Cannot fail. */
void sha256_final(fg_sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->length * 8u;
    s->block[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->block + s->fill, 0, 64 - s->fill);
        sha256_compress(s->h, s->block);
        s->fill = 0;
    }
    memset(s->block + s->fill, 0, 56 - s->fill);
    for (int i = 0; i < 8; i++)
        s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_compress(s->h, s->block);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, s->h[i]);
    memset(s, 0, sizeof *s);
}

/* Hashes one buffer in a single call. Cannot fail. */
void sha256(const void *data, size_t n, uint8_t out[32]) {
    fg_sha256 s;
    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_final(&s, out);
}

/* Formats a digest as 64 lower-case hex digits plus a NUL. Cannot fail. */
void sha256_hex(const uint8_t digest[32], char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[64] = '\0';
}
