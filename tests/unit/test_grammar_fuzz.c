/*
 * A deterministic mutation fuzzer for the grammar compilers (GBNF, JSON Schema, regex, choices)
 * and the matcher, in the style of tests/fuzz/fuzz_openai.c: seeds are the shared GBNF grammars
 * and a set of schemas and regexes; each case splices in hostile fragments, flips, deletes or
 * duplicates bytes. Invariants: compiling returns either a grammar or an error with a message
 * (never crashes or hangs: each case is timed); an accepted grammar survives a few steps of
 * masks over a small vocabulary, and every mask bit agrees with the per-token check.
 */
#include "tl_test.h"

#include "core/error.h"
#include "grammar/grammar.h"

#include <time.h>

static const char *const FRAGS[] = {"(",
                                    ")",
                                    "|",
                                    "*",
                                    "+",
                                    "?",
                                    "{0,99}",
                                    "{5,2}",
                                    "{999999}",
                                    "[",
                                    "]",
                                    "[^",
                                    "\\",
                                    "\\x",
                                    "\\u12",
                                    "\\U0010FFFF",
                                    "\"",
                                    "::=",
                                    "root",
                                    " root ::= ",
                                    "\n",
                                    "#",
                                    "x ::= x",
                                    "..",
                                    "\xff",
                                    "\xe6\x97",
                                    "{",
                                    "}",
                                    "\"$ref\":\"#\"",
                                    "\"type\":",
                                    "\"items\":",
                                    "\"maxItems\":100000",
                                    "\"minimum\":1e308",
                                    "\"pattern\":\"(a|\"",
                                    "\"enum\":[]",
                                    "\"anyOf\":[{}]",
                                    "[1,2",
                                    "null",
                                    "true",
                                    "\"format\":\"uuid\"",
                                    "(?:",
                                    "(?=",
                                    "\\1",
                                    "\\d{3,}",
                                    "^",
                                    "$"};
#define N_FRAGS (sizeof(FRAGS) / sizeof(FRAGS[0]))

static const char *const SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":4},\"b\":{"
    "\"type\":\"integer\",\"minimum\":-3,\"maximum\":12}},\"required\":[\"a\"]}",
    "{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},"
    "\"$ref\":\"#/$defs/n\"}",
    "{\"anyOf\":[{\"type\":\"number\",\"exclusiveMinimum\":0.5},{\"enum\":[\"x\",null]}]}",
    "{\"type\":\"string\",\"pattern\":\"^[a-c]+(-[0-9]{2})?$\"}"};
static const char *const REGEXES[] = {"[A-Z][a-z]{1,4}( \\d+)?", "(ab|cd)*e?", "^.{2,3}$"};

static uint64_t rng_state = 0x5eed5eedull;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(tl_xorshift64s(&rng_state) >> 32) % n;
}

static size_t mutate(char *buf, size_t len, size_t cap)
{
    int n_ops = 1 + (int)rnd(4);
    for (int k = 0; k < n_ops; k++) {
        size_t at = len ? rnd((uint32_t)len + 1) : 0;
        switch (rnd(4)) {
        case 0: { // splice a fragment
            const char *f = FRAGS[rnd(N_FRAGS)];
            size_t fl = strlen(f);
            if (len + fl >= cap) break;
            memmove(buf + at + fl, buf + at, len - at);
            memcpy(buf + at, f, fl);
            len += fl;
            break;
        }
        case 1: // flip a byte
            if (at < len) buf[at] = (char)rnd(256);
            break;
        case 2: { // delete a span
            size_t n = rnd(8);
            if (at + n > len) n = len - at;
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        default: { // duplicate a span
            size_t n = rnd(16);
            if (at + n > len) n = len - at;
            if (len + n >= cap) break;
            memmove(buf + at + n, buf + at, len - at);
            len += n;
            break;
        }
        }
    }
    buf[len] = 0;
    return len;
}

#define NV 300
static char pieces[NV][4];

static int piece_bytes(void *ctx, int32_t id, char *buf, int cap)
{
    (void)ctx;
    int n = (int)strlen(pieces[id]);
    if (!n || n > cap) return -1;
    memcpy(buf, pieces[id], (size_t)n);
    return n;
}

static bool piece_eog(void *ctx, int32_t id)
{
    (void)ctx;
    return id == NV - 1;
}

static void exercise(struct tl_grammar *g, const struct tl_gvocab *v)
{
    struct tl_gmatcher *m = tl_gmatcher_create(g);
    assert_non_null(m);
    uint64_t mask[(NV + 63) / 64];
    for (int step = 0; step < 6; step++) {
        assert_true(tl_gmatcher_fill_mask(m, v, mask));
        int32_t allowed[NV], na = 0;
        for (int32_t t = 0; t < NV; t++) {
            bool bit = (mask[t >> 6] >> (t & 63)) & 1;
            if (bit != tl_gmatcher_allows(m, v, t)) fail_msg("mask disagrees at token %d", t);
            if (bit && t != NV - 1) allowed[na++] = t;
        }
        if (!na) break;
        assert_true(tl_gmatcher_accept_token(m, v, allowed[rnd((uint32_t)na)]));
    }
    tl_gmatcher_destroy(m);
}

static void test_fuzz_compilers(void **state)
{
    (void)state;
    // Vocabulary: every printable ASCII byte, some UTF-8 lead/continuation bytes, pairs.
    for (int i = 0; i < NV - 1; i++) {
        if (i < 95) {
            pieces[i][0] = (char)(32 + i);
        } else if (i < 110) {
            pieces[i][0] = (char)(0xC3 + (i % 3) * 0x20);
            pieces[i][1] = (char)(0x80 + i);
        } else {
            pieces[i][0] = (char)(32 + rnd(95));
            pieces[i][1] = (char)(32 + rnd(95));
        }
    }
    pieces[95][0] = '\n';
    struct tl_gvocab *v = tl_gvocab_create(NV, piece_bytes, piece_eog, NULL);
    assert_non_null(v);

    static const char *const shared[] = {"json", "chess", "arithmetic", "list", "c"};
    char *seeds[16];
    enum tl_grammar_kind kinds[16];
    int n_seeds = 0;
    for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "grammars/%s.gbnf", shared[i]);
        FILE *f = fopen(tl_test_shared(rel), "rb");
        assert_non_null(f);
        char *b = calloc(1, 65536);
        size_t n = fread(b, 1, 65535, f);
        b[n] = 0;
        fclose(f);
        kinds[n_seeds] = TL_GRAMMAR_GBNF;
        seeds[n_seeds++] = b;
    }
    for (size_t i = 0; i < sizeof(SCHEMAS) / sizeof(SCHEMAS[0]); i++) {
        kinds[n_seeds] = TL_GRAMMAR_JSON_SCHEMA;
        seeds[n_seeds++] = strdup(SCHEMAS[i]);
    }
    for (size_t i = 0; i < sizeof(REGEXES) / sizeof(REGEXES[0]); i++) {
        kinds[n_seeds] = TL_GRAMMAR_REGEX;
        seeds[n_seeds++] = strdup(REGEXES[i]);
    }
    int n_ok = 0, n_err = 0;
    char *buf = malloc(1 << 17);
    for (int c = 0; c < 20000; c++) {
        int s = (int)rnd((uint32_t)n_seeds);
        size_t len = strlen(seeds[s]);
        memcpy(buf, seeds[s], len + 1);
        len = mutate(buf, len, 1 << 17);
        struct tl_grammar *g = NULL;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tl_status rc = tl_grammar_compile(kinds[s], buf, len, &g);
        if (rc) {
            assert_null(g);
            assert_true(strlen(tl_last_error()) > 0);
            n_err++;
        } else {
            exercise(g, v);
            tl_grammar_unref(g);
            n_ok++;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (dt > 5.0) fail_msg("case %d took %.1f s: %s", c, dt, buf);
    }
    fprintf(stderr, "# fuzz: %d compiled, %d rejected\n", n_ok, n_err);
    assert_true(n_ok > 100 && n_err > 100);
    free(buf);
    for (int i = 0; i < n_seeds; i++)
        free(seeds[i]);
    tl_gvocab_destroy(v);
}

TL_TEST_MAIN(cmocka_unit_test(test_fuzz_compilers))
