/*
 * The project's hash and RNG helpers, in one place: splitmix64 (a tiny RNG used to seed bigger
 * ones and to make test data), its finalizer as a 64-bit mixer, xorshift64* and xoshiro256**,
 * and FNV-1a over bytes and over 32-bit words.
 *
 * Why these: splitmix64 (Steele, Lea, Flood 2014) turns any 64-bit seed, 0 included, into a
 * well-spread stream and its finalizer is a bijection of uint64_t, so a mixed integer key never
 * collides with another. FNV-1a is simple and byte-at-a-time, which suits the short strings
 * hashed here (vocabulary pieces, GGUF key and tensor names); tl_hash_bytes adds the finalizer
 * so that the low bits a table masks with depend on every input byte. Keys that are arrays of
 * 32-bit ids (the grammar's parse stacks) hash word-wise (tl_fnv1a64_u32, tl_hash_u32s): one
 * step per id instead of four.
 *
 * Outputs are part of the project's behaviour (sampler seeds, synthetic models, test data): the
 * published splitmix64 sequence is checked in test_hashmap.c, so these functions must not change.
 *
 * xorshift64* is the project's fast RNG for test data and load generators (tl_xorshift64s);
 * xoshiro256** (struct tl_rng) is the sampler's, one stream per request.
 *
 * Thread model: pure functions (tl_splitmix64 advances only the caller's state).
 */
#ifndef TL_CORE_HASH_H
#define TL_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

// splitmix64's golden-ratio increment (also a good odd multiplier for Fibonacci hashing).
#define TL_GOLDEN64 0x9e3779b97f4a7c15ull

// splitmix64's output function: a bijective avalanche of x.
static inline uint64_t tl_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Advances *state and returns the next splitmix64 output.
static inline uint64_t tl_splitmix64(uint64_t *state)
{
    return tl_mix64(*state += TL_GOLDEN64);
}

// Advances the xorshift64* state *state (Vigna 2016; shifts 12, 25, 27) and returns the next
// output, the state times 0x2545f4914f6cdd1d. The state must never be 0 (0 stays 0).
static inline uint64_t tl_xorshift64s(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

// Uniform double in [0, 1) from xorshift64*'s top 53 bits.
static inline double tl_xorshift64s_unit(uint64_t *state)
{
    return (double)(tl_xorshift64s(state) >> 11) / 9007199254740992.0;
}

// xoshiro256** (Blackman & Vigna 2018): the sampler's RNG, one per request (its state survives
// preemption), seeded through splitmix64 so any 64-bit seed works. Its outputs are part of the
// project's behaviour (a seeded request's tokens): test_sampler.c checks published vectors.
struct tl_rng {
    uint64_t s[4];
};

static inline void tl_rng_seed(struct tl_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = tl_splitmix64(&x);
}

static inline uint64_t tl__rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t tl_rng_next(struct tl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = tl__rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = tl__rotl64(s[3], 45);
    return result;
}

// Uniform double in [0, 1) from the top 53 bits.
static inline double tl_rng_uniform(struct tl_rng *r)
{
    return (double)(tl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

// FNV-1a's 64-bit offset basis and prime.
#define TL_FNV64_OFFSET 0xcbf29ce484222325ull
#define TL_FNV64_PRIME 0x100000001b3ull

// FNV-1a continued: hash h (TL_FNV64_OFFSET to start) over n more bytes, so that several
// pieces hash as their concatenation.
static inline uint64_t tl_fnv1a64_more(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= TL_FNV64_PRIME;
    }
    return h;
}

// 64-bit FNV-1a of n bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
static inline uint64_t tl_fnv1a64(const void *p, size_t n)
{
    return tl_fnv1a64_more(TL_FNV64_OFFSET, p, n);
}

// FNV-1a word-wise: continues hash h over n 32-bit words, one xor and one multiply per word
// (a quarter of the byte-wise steps; not the published byte-wise values). For keys that are
// arrays of ids (the grammar's parse stacks and their sets).
static inline uint64_t tl_fnv1a64_u32(uint64_t h, const uint32_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ w[i]) * TL_FNV64_PRIME;
    return h;
}

// A hash of n bytes for tables: FNV-1a, mixed, and never 0 (tl_hmap reserves key 0).
static inline uint64_t tl_hash_bytes(const void *p, size_t n)
{
    uint64_t h = tl_mix64(tl_fnv1a64(p, n));
    return h ? h : 1;
}

// A hash of n 32-bit words for tl_hmap keys, never 0: word-wise FNV-1a from the offset basis
// xor salt (so keys of different shapes, e.g. lengths or flags, hash apart). Not mixed further
// (unlike tl_hash_bytes): tl_hmap takes a key's slot from the top bits of key * 2^64/phi,
// which every bit of the key reaches, and these keys are short and hashed on the grammar's hot
// path.
static inline uint64_t tl_hash_u32s(const uint32_t *w, size_t n, uint64_t salt)
{
    uint64_t h = tl_fnv1a64_u32(TL_FNV64_OFFSET ^ salt, w, n);
    return h ? h : 1;
}

#endif
