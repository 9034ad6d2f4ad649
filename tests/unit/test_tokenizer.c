/*
 * Tests for src/tokenizer against independent expectations:
 *   - llama.cpp's published test vectors ($TL_SHARED/vocab/NAME.gguf.inp/.out): every string of
 *     every vocabulary must give exactly the published ids;
 *   - the TinyStories prompt ids of models/PROVENANCE.md, from the GGUF and from tok512.bin;
 *     the Llama-2 tokenizer.bin must agree with the Llama-2 GGUF vectors;
 *   - round trips, incremental detokenization of characters split across byte tokens, special
 *     tokens on/off, the ids and flags llama.cpp derives, hand-checked pre-tokenizer splits for
 *     types without shared vectors, a hand-built BPE vocabulary with known merges;
 *   - malformed vocabularies (each gives an error naming the file and the key), random bytes,
 *     over-long input and allocation failures (never a crash).
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/utf8.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_impl.h" // pre-tokenizer internals, for the split tests

#include <dirent.h>
#include <pthread.h>

// ---- helpers ------------------------------------------------------------------------------------

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static struct tl_vocab *load_path(const char *path)
{
    struct tl_gguf *g = NULL;
    struct tl_vocab *v = NULL;
    if (tl_gguf_open(path, &g)) fail_msg("%s", tl_last_error());
    if (tl_vocab_load_gguf(g, &v)) fail_msg("%s", tl_last_error());
    tl_gguf_close(g); // the vocabulary owns copies of everything it needs
    return v;
}

static struct tl_vocab *load_shared(const char *rel)
{
    return load_path(tl_test_shared(rel));
}

// llama.cpp test cases: strings separated by "\n__ggml_vocab_test__\n", one line of ids each.
struct cases {
    char *inp, *out; // owned file contents
    const char *text[128];
    size_t len[128];
    const char *ids[128]; // start of the line of ids (ends at '\n')
    int n;
};

static void cases_load(struct cases *c, const char *gguf_path)
{
    char p[4096];
    size_t li, lo;
    snprintf(p, sizeof(p), "%s.inp", gguf_path);
    c->inp = read_file(p, &li);
    snprintf(p, sizeof(p), "%s.out", gguf_path);
    c->out = read_file(p, &lo);
    assert_non_null(c->inp);
    assert_non_null(c->out);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    c->n = 0;
    char *pos = c->inp, *line = c->out;
    for (char *hit; (hit = strstr(pos, sep)) && c->n < 128; pos = hit + sizeof(sep) - 1) {
        c->text[c->n] = pos;
        c->len[c->n] = (size_t)(hit - pos);
        c->ids[c->n] = line;
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        line = nl + 1;
        c->n++;
    }
    assert_true(c->n > 40);
}

static void cases_free(struct cases *c)
{
    free(c->inp);
    free(c->out);
}

// Parses a line of ids (" 1 2 3\n"). Returns the count.
static int64_t parse_ids(const char *line, int32_t *ids, int64_t cap)
{
    int64_t n = 0;
    while (*line && *line != '\n') {
        char *end;
        long x = strtol(line, &end, 10);
        if (end == line) {
            line++;
            continue;
        }
        assert_true(n < cap);
        ids[n++] = (int32_t)x;
        line = end;
    }
    return n;
}

static void assert_ids(const int32_t *got, int64_t n_got, const int32_t *want, int64_t n_want,
                       const char *what)
{
    bool same = n_got == n_want;
    for (int64_t i = 0; same && i < n_got; i++)
        same = got[i] == want[i];
    if (!same) {
        char buf[1024];
        int o = snprintf(buf, sizeof(buf), "%s: got", what);
        for (int64_t i = 0; i < n_got && o < 900; i++)
            o += snprintf(buf + o, sizeof(buf) - (size_t)o, " %d", got[i]);
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, " want");
        for (int64_t i = 0; i < n_want && o < 1000; i++)
            o += snprintf(buf + o, sizeof(buf) - (size_t)o, " %d", want[i]);
        fail_msg("%s", buf);
    }
}

static int64_t tok(const struct tl_vocab *v, const char *s, bool add_special, bool parse_special,
                   int32_t *out, int64_t cap)
{
    int32_t *ids;
    int64_t n;
    if (tl_tokenize(v, s, strlen(s), add_special, parse_special, &ids, &n))
        fail_msg("tokenize: %s", tl_last_error());
    assert_true(n <= cap);
    memcpy(out, ids, (size_t)n * sizeof(int32_t));
    free(ids);
    return n;
}

// Tokenizes every case of `c` with `v` and compares with the published ids.
static void check_cases(const struct tl_vocab *v, const struct cases *c, const char *name)
{
    for (int i = 0; i < c->n; i++) {
        int32_t want[512], *got;
        int64_t n_want = parse_ids(c->ids[i], want, 512), n_got;
        if (tl_tokenize(v, c->text[i], c->len[i], false, false, &got, &n_got))
            fail_msg("%s case %d: %s", name, i, tl_last_error());
        char what[256];
        snprintf(what, sizeof(what), "%s case %d '%.40s'", name, i, c->text[i]);
        assert_ids(got, n_got, want, n_want, what);
        free(got);
    }
}

// ---- published vectors --------------------------------------------------------------------------

static void test_llama_cpp_vectors(void **state)
{
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", tl_test_shared("vocab"));
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n_files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf")) continue;
        char path[8192], inp[8300];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        snprintf(inp, sizeof(inp), "%s.inp", path);
        if (access(inp, R_OK)) continue;
        struct tl_vocab *v = load_path(path);
        struct cases c;
        cases_load(&c, path);
        check_cases(v, &c, e->d_name);
        cases_free(&c);
        tl_vocab_destroy(v);
        n_files++;
    }
    closedir(d);
    assert_true(n_files >= 5);
}

// llama2.c's tokenizer.bin holds the Llama-2 vocabulary: it must reproduce the Llama-2 vectors.
static void test_llama2c_tokenizer_bin_vectors(void **state)
{
    (void)state;
    struct tl_vocab *v;
    if (tl_vocab_load_llama2c(tl_test_shared("models/tokenizer.bin"), &v))
        fail_msg("%s", tl_last_error());
    assert_int_equal(tl_vocab_n_tokens(v), 32000);
    char path[4096];
    snprintf(path, sizeof(path), "%s", tl_test_shared("vocab/ggml-vocab-llama-spm.gguf"));
    struct cases c;
    cases_load(&c, path);
    check_cases(v, &c, "tokenizer.bin");
    cases_free(&c);
    tl_vocab_destroy(v);
}

static void test_stories_prompt_ids(void **state)
{
    (void)state;
    const int32_t want[] = {1, 403, 407, 261, 378};
    int32_t got[64];
    struct tl_vocab *g = load_shared("models/stories260K.gguf"), *b;
    if (tl_vocab_load_llama2c(tl_test_shared("models/tok512.bin"), &b))
        fail_msg("%s", tl_last_error());
    assert_ids(got, tok(g, "Once upon a time", true, false, got, 64), want, 5, "gguf");
    assert_ids(got, tok(b, "Once upon a time", true, false, got, 64), want, 5, "tok512.bin");
    // Both forms of the vocabulary agree piece by piece and on every test string.
    assert_int_equal(tl_vocab_n_tokens(g), tl_vocab_n_tokens(b));
    for (int32_t i = 0; i < tl_vocab_n_tokens(g); i++) {
        size_t la, lb;
        const char *pa = tl_vocab_piece(g, i, &la), *pb = tl_vocab_piece(b, i, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(pa, pb, la);
        assert_int_equal(tl_vocab_attr(g, i), tl_vocab_attr(b, i));
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s", tl_test_shared("vocab/ggml-vocab-llama-spm.gguf"));
    struct cases c;
    cases_load(&c, path);
    for (int i = 0; i < c.n; i++) {
        int32_t *x, *y;
        int64_t nx, ny;
        assert_int_equal(tl_tokenize(g, c.text[i], c.len[i], true, false, &x, &nx), TL_OK);
        assert_int_equal(tl_tokenize(b, c.text[i], c.len[i], true, false, &y, &ny), TL_OK);
        assert_ids(x, nx, y, ny, "gguf vs tok512.bin");
        free(x);
        free(y);
    }
    cases_free(&c);
    tl_vocab_destroy(g);
    tl_vocab_destroy(b);
}

// ---- ids, flags, attributes ---------------------------------------------------------------------

static void test_special_ids_and_flags(void **state)
{
    (void)state;
    struct tl_vocab *v = load_shared("vocab/ggml-vocab-llama-spm.gguf");
    assert_int_equal(tl_vocab_type(v), TL_VOCAB_SPM);
    assert_int_equal(tl_vocab_bos(v), 1);
    assert_int_equal(tl_vocab_eos(v), 2);
    assert_int_equal(tl_vocab_eot(v), -1);
    assert_true(tl_vocab_add_bos(v));
    assert_false(tl_vocab_add_eos(v));
    assert_true(tl_vocab_is_eog(v, 2));
    assert_false(tl_vocab_is_eog(v, 1));
    assert_false(tl_vocab_is_eog(v, -1));
    assert_int_equal(tl_vocab_attr(v, 0), TL_TOKEN_UNKNOWN);
    assert_int_equal(tl_vocab_attr(v, 1), TL_TOKEN_CONTROL);
    assert_int_equal(tl_vocab_attr(v, 13), TL_TOKEN_BYTE);
    assert_int_equal(tl_vocab_find(v, "<0x0A>", 6), 13);
    assert_int_equal(tl_vocab_find(v, "\xe2\x96\x81the", 6), 278);
    assert_int_equal(tl_vocab_find(v, "no such piece", 13), -1);
    assert_null(tl_vocab_piece(v, 32000, NULL));
    assert_null(tl_vocab_piece(v, -1, NULL));
    tl_vocab_destroy(v);

    v = load_shared("vocab/ggml-vocab-gpt-2.gguf");
    assert_int_equal(tl_vocab_type(v), TL_VOCAB_BPE);
    assert_string_equal(tl_vocab_pre(v), "gpt-2");
    assert_int_equal(tl_vocab_bos(v), 50256);
    assert_false(tl_vocab_add_bos(v));        // GPT-2 adds no BOS
    assert_int_equal(tl_vocab_eot(v), 50256); // found by its text <|endoftext|>
    assert_true(tl_vocab_is_eog(v, 50256));
    tl_vocab_destroy(v);

    v = load_shared("vocab/ggml-vocab-phi-3.gguf");
    assert_int_equal(tl_vocab_eos(v), 32000);
    int32_t end = tl_vocab_find(v, "<|end|>", 7);
    assert_true(end > 0);
    assert_int_equal(tl_vocab_eot(v), end);
    assert_true(tl_vocab_is_eog(v, end));
    assert_true(tl_vocab_is_eog(v, 32000));
    assert_int_equal(tl_vocab_attr(v, end), TL_TOKEN_CONTROL); // forced, as llama.cpp does
    tl_vocab_destroy(v);

    v = load_shared("vocab/ggml-vocab-deepseek-coder.gguf");
    assert_int_equal(tl_vocab_bos(v), 32013);
    assert_int_equal(tl_vocab_eos(v), 32014);
    assert_true(tl_vocab_add_bos(v));
    assert_true(tl_vocab_is_eog(v, 32014));
    tl_vocab_destroy(v);
}

static void test_token_to_text(void **state)
{
    (void)state;
    char buf[64];
    struct tl_vocab *v = load_shared("vocab/ggml-vocab-llama-spm.gguf");
    size_t n = tl_token_to_text(v, 278, false, buf, sizeof(buf)); // "▁the"
    assert_int_equal(n, 4);
    assert_memory_equal(buf, " the", 4);
    assert_int_equal(tl_token_to_text(v, 13, false, buf, sizeof(buf)), 1); // <0x0A>
    assert_int_equal(buf[0], '\n');
    assert_int_equal(tl_token_to_text(v, 1, false, buf, sizeof(buf)), 0); // control: hidden
    assert_int_equal(tl_token_to_text(v, 1, true, buf, sizeof(buf)), 3);
    assert_memory_equal(buf, "<s>", 3);
    assert_int_equal(tl_token_to_text(v, 278, false, buf, 2), 4); // snprintf-like
    assert_int_equal(tl_token_to_text(v, 278, false, NULL, 0), 4);
    assert_int_equal(tl_token_to_text(v, 99999, false, buf, sizeof(buf)), 0);
    tl_vocab_destroy(v);

    v = load_shared("vocab/ggml-vocab-gpt-2.gguf");
    int32_t the = tl_vocab_find(v, "\xc4\xa0the", 5); // "Ġthe"
    assert_true(the >= 0);
    assert_int_equal(tl_token_to_text(v, the, false, buf, sizeof(buf)), 4);
    assert_memory_equal(buf, " the", 4);
    int32_t nl = tl_vocab_find(v, "\xc4\x8a", 2); // "Ċ" = byte 0x0A
    assert_int_equal(tl_token_to_text(v, nl, false, buf, sizeof(buf)), 1);
    assert_int_equal(buf[0], '\n');
    tl_vocab_destroy(v);
}

// ---- round trips and detokenization -------------------------------------------------------------

// detokenize(tokenize(s)) == s for every test string of every shared vocabulary, with and
// without BOS (the SPM space prefix is removed again). See docs/internals/tokenizer.md for what
// does not round trip (invalid UTF-8, rendered control tokens).
static void test_round_trip(void **state)
{
    (void)state;
    const char *names[] = {"llama-spm", "phi-3", "gpt-2", "starcoder", "deepseek-coder"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", tl_test_shared("vocab"), names[k]);
        struct tl_vocab *v = load_path(path);
        struct cases c;
        cases_load(&c, path);
        for (int i = 0; i < c.n; i++) {
            for (int special = 0; special < 2; special++) {
                int32_t *ids;
                int64_t n;
                assert_int_equal(tl_tokenize(v, c.text[i], c.len[i], special, false, &ids, &n),
                                 TL_OK);
                char *back = tl_detokenize(v, ids, n, false);
                assert_non_null(back);
                if (strlen(back) != c.len[i] || memcmp(back, c.text[i], c.len[i]))
                    fail_msg("%s case %d: '%.40s' came back as '%.40s'", names[k], i, c.text[i],
                             back);
                free(back);
                free(ids);
            }
        }
        cases_free(&c);
        tl_vocab_destroy(v);
    }
}

// Pushes ids one by one; returns the concatenated output and checks each step's output.
static void push_expect(struct tl_detok *d, int32_t id, const char *want)
{
    char *out = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(tl_detok_push(d, id, &out, &len, &cap), TL_OK);
    assert_int_equal(len, strlen(want));
    if (len) assert_memory_equal(out, want, len);
    free(out);
}

static void flush_expect(struct tl_detok *d, const char *want)
{
    char *out = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(tl_detok_flush(d, &out, &len, &cap), TL_OK);
    assert_int_equal(len, strlen(want));
    if (len) assert_memory_equal(out, want, len);
    free(out);
}

static int32_t byte_tok(const struct tl_vocab *v, int b)
{
    char p[8];
    snprintf(p, sizeof(p), "<0x%02X>", b);
    int32_t id = tl_vocab_find(v, p, 6);
    assert_true(id >= 0);
    return id;
}

static void test_incremental_detok_split_characters(void **state)
{
    (void)state;
    struct tl_vocab *v = load_shared("vocab/ggml-vocab-llama-spm.gguf");
    int32_t ids[32];
    // "🦙" is four byte tokens in Llama 2 (F0 9F A6 99): nothing comes out until the last one.
    int64_t n = tok(v, "\xf0\x9f\xa6\x99", false, false, ids, 32);
    assert_int_equal(n, 5); // "▁" then 4 bytes
    struct tl_detok d;
    tl_detok_init(&d, v, false);
    push_expect(&d, ids[0], " ");
    push_expect(&d, ids[1], "");
    push_expect(&d, ids[2], "");
    push_expect(&d, ids[3], "");
    push_expect(&d, ids[4], "\xf0\x9f\xa6\x99");
    flush_expect(&d, "");

    // A CJK character as byte tokens after a word: the word comes out at once.
    tl_detok_init(&d, v, false);
    push_expect(&d, tl_vocab_find(v, "\xe2\x96\x81the", 6), " the");
    push_expect(&d, byte_tok(v, 0xE6), "");
    push_expect(&d, byte_tok(v, 0x88), "");
    push_expect(&d, byte_tok(v, 0x91), "\xe6\x88\x91"); // 我
    flush_expect(&d, "");

    // Invalid bytes become U+FFFD: at once when they can never be valid, at flush when an
    // incomplete character is left.
    tl_detok_init(&d, v, false);
    push_expect(&d, byte_tok(v, 0xFF), "\xef\xbf\xbd");
    push_expect(&d, byte_tok(v, 0xE2), "");
    push_expect(&d, byte_tok(v, 'A'),
                "\xef\xbf\xbd"
                "A");
    push_expect(&d, byte_tok(v, 0xF0), "");
    push_expect(&d, byte_tok(v, 0x9F), "");
    flush_expect(&d, "\xef\xbf\xbd");
    push_expect(&d, byte_tok(v, 0xED), ""); // ED A0 is a surrogate: invalid at the second byte
    push_expect(&d, byte_tok(v, 0xA0), "\xef\xbf\xbd\xef\xbf\xbd");
    flush_expect(&d, "");

    // Leading space: stripped once when asked, skipping tokens that render nothing.
    tl_detok_init(&d, v, false);
    d.strip_leading_space = true;
    push_expect(&d, 1, ""); // BOS
    push_expect(&d, tl_vocab_find(v, "\xe2\x96\x81the", 6), "the");
    push_expect(&d, tl_vocab_find(v, "\xe2\x96\x81the", 6), " the");
    tl_vocab_destroy(v);

    // GPT-2: an emoji spread over BPE tokens that each hold part of its bytes.
    v = load_shared("vocab/ggml-vocab-gpt-2.gguf");
    n = tok(v, " \xf0\x9f\x98\x81", false, false, ids, 32); // " 😁"
    assert_true(n >= 2);
    char *all = NULL;
    size_t len = 0, cap = 0;
    tl_detok_init(&d, v, false);
    for (int64_t i = 0; i < n; i++) {
        size_t before = len;
        assert_int_equal(tl_detok_push(&d, ids[i], &all, &len, &cap), TL_OK);
        // Whatever came out is whole characters.
        assert_true(tl_utf8_is_valid(all + before, len - before));
    }
    assert_int_equal(tl_detok_flush(&d, &all, &len, &cap), TL_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(all, " \xf0\x9f\x98\x81", 5);
    free(all);
    tl_vocab_destroy(v);
}

// ---- special tokens -----------------------------------------------------------------------------

static bool contains(const int32_t *ids, int64_t n, int32_t id)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static void test_parse_special(void **state)
{
    (void)state;
    int32_t ids[64];
    int64_t n;
    struct tl_vocab *v = load_shared("vocab/ggml-vocab-llama-spm.gguf");
    n = tok(v, "<s>Hello</s>", false, true, ids, 64);
    const int32_t want_on[] = {1, 15043, 2}; // <s> ▁Hello </s>: a space prefix after <s>
    assert_ids(ids, n, want_on, 3, "llama parse_special on");
    n = tok(v, "<s>Hello</s>", false, false, ids, 64);
    assert_false(contains(ids, n, 1));
    assert_false(contains(ids, n, 2));
    char *back = tl_detokenize(v, ids, n, false);
    assert_string_equal(back, "<s>Hello</s>"); // plain text round trip
    free(back);
    tl_vocab_destroy(v);

    v = load_shared("vocab/ggml-vocab-gpt-2.gguf");
    n = tok(v, "a<|endoftext|>b", false, true, ids, 64);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    back = tl_detokenize(v, ids, n, true);
    assert_string_equal(back, "a<|endoftext|>b");
    free(back);
    back = tl_detokenize(v, ids, n, false);
    assert_string_equal(back, "ab"); // control tokens render as nothing
    free(back);
    n = tok(v, "a<|endoftext|>b", false, false, ids, 64);
    assert_false(contains(ids, n, 50256));
    assert_true(n > 3);
    // Longest match first: "<|endoftext|>" wins over any shorter special inside it.
    tl_vocab_destroy(v);

    // User-defined tokens are cut out even with parse_special off (DeepSeek-Coder's "ü").
    v = load_shared("vocab/ggml-vocab-deepseek-coder.gguf");
    int32_t ue = tl_vocab_find(v, "\xc3\xbc", 2);
    assert_int_equal(tl_vocab_attr(v, ue), TL_TOKEN_USER_DEFINED);
    n = tok(v, "F\xc3\xbchrer", false, false, ids, 64);
    assert_true(contains(ids, n, ue));
    tl_vocab_destroy(v);

    // Phi-3: special tokens swallow the whitespace on their right (llama.cpp's RSTRIP).
    v = load_shared("vocab/ggml-vocab-phi-3.gguf");
    int32_t end = tl_vocab_find(v, "<|end|>", 7);
    int32_t a[64], b[64];
    int64_t na = tok(v, "<|end|>\n  Hi", false, true, a, 64);
    int64_t nb = tok(v, "<|end|>Hi", false, true, b, 64);
    assert_int_equal(a[0], end);
    assert_ids(a, na, b, nb, "phi-3 rstrip");
    tl_vocab_destroy(v);
}

// ---- pre-tokenizers without shared vectors ------------------------------------------------------

// Splits `text` with pre-tokenizer `pre` and compares with '|'-separated expected pieces.
static void expect_split(const char *pre, const char *text, const char *want)
{
    int kind;
    bool im, ab, nb;
    assert_true(tl__pretok_lookup(pre, &kind, &im, &ab, &nb));
    struct tl__pretok *p;
    assert_int_equal(tl__pretok_create(kind, "test", &p), TL_OK);
    char *buf;
    int64_t *starts, n;
    assert_int_equal(tl__pretok_split(p, text, strlen(text), &buf, &starts, &n), TL_OK);
    // Undo the byte mapping to compare with plain text.
    char got[1024];
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i) got[o++] = '|';
        for (int64_t k = starts[i]; k < starts[i + 1];) {
            uint32_t cp;
            int l = tl_utf8_decode(buf + k, (size_t)(starts[i + 1] - k), &cp);
            assert_true(l > 0);
            got[o++] = (char)tl__bpe_cp_byte(cp);
            k += l;
        }
    }
    got[o] = '\0';
    if (strcmp(got, want)) fail_msg("%s: '%s' split as '%s', want '%s'", pre, text, got, want);
    free(buf);
    free(starts);
    tl__pretok_destroy(p);
}

static void test_pretokenizer_splits(void **state)
{
    (void)state;
    // Llama 3: digits in threes, contractions case-insensitive, punctuation keeps newlines.
    expect_split("llama-bpe", "Hello world 1234567 YOU'RE ok!!\n\nx",
                 "Hello| world| |123|456|7| YOU|'RE| ok|!!\n\n|x");
    expect_split("llama-bpe", "a   b\n  \n c", "a|  | b|\n  \n| c");
    // Qwen2: single digits.
    expect_split("qwen2", "abc 1234", "abc| |1|2|3|4");
    // GPT-2: a space joins the following word; trailing spaces keep the last one for the word.
    expect_split("gpt-2", "Hello   world's", "Hello|  | world|'s");
    // StarCoder: digits split one by one before the GPT-2 rules.
    expect_split("starcoder", "x 12", "x| |1|2");
    // Default: punctuation runs first, then GPT-2, then digit runs and threes.
    expect_split("default", "a+b 12345", "a|+|b| |123|45");
    // DeepSeek-Coder: newlines alone, letters with one leading space, CJK runs, digits alone.
    expect_split("deepseek-coder", "hi\nyou 42\xe4\xbd\xa0\xe5\xa5\xbd",
                 "hi|\n|you| |4|2|\xe4\xbd\xa0\xe5\xa5\xbd");
    // DeepSeek-LLM: trailing whitespace is its own piece.
    expect_split("deepseek-llm", "ab, cd  ", "ab|,| cd|  ");
    // GPT-4o: a capitalised word is one piece, camel case splits.
    expect_split("gpt-4o", "HelloWorld ABCdef", "Hello|World| ABCdef");
    // Tekken: one non-letter may lead a word, single digits, newlines follow punctuation.
    expect_split("tekken", "a/b 12!!\nc", "a|/b| |1|2|!!\n|c");
    // BLOOM-style: anything but spaces and a few punctuation marks.
    expect_split("bloom", "hello, world.", "hello|,| world|.");
    // SuperBPE: digit runs cut so that the groups of three end the run.
    expect_split("superbpe", "1234567", "1|234|567");
    // Chameleon: two spaces and tabs are pieces of their own.
    expect_split("chameleon", "a  b", "a|  |b");
    // Invalid UTF-8 becomes U+FFFD (EF BF BD) in the pre-token, as in llama.cpp.
    expect_split("gpt-2", "a\xff", "a|\xef\xbf\xbd");
}

static void test_unknown_pre_falls_back(void **state)
{
    (void)state;
    int kind;
    bool im, ab, nb;
    assert_false(tl__pretok_lookup("no-such-pre", &kind, &im, &ab, &nb));
    assert_int_equal(kind, 0);
    assert_string_equal(tl__pretok_kind_name(kind), "default");
    assert_true(tl__pretok_lookup("llama3", &kind, &im, &ab, &nb));
    assert_true(im && ab); // Llama 3 ignores merges for whole tokens and adds BOS
}

// ---- hand-built vocabularies --------------------------------------------------------------------

// Writes a small GGUF vocabulary. Callers pass key/value setters through the writer.
static struct tl_gguf_writer *bpe_writer(const char *pre, const char *const *merges, int n_merges)
{
    // Byte characters for "a".."d" and space (Ġ), plus merged pieces.
    static const char *const toks[] = {"a",
                                       "b",
                                       "c",
                                       "d",
                                       "\xc4\xa0",
                                       "ab",
                                       "abc",
                                       "cd",
                                       "abcd",
                                       "\xc4\xa0\x61", // "Ġa"
                                       "<|eot|>"};
    const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), TL_OK);
    if (pre) assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), TL_OK);
    assert_int_equal(tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 11), TL_OK);
    assert_int_equal(
        tl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TL_GGUF_TYPE_INT32, types, 11),
        TL_OK);
    if (merges)
        assert_int_equal(
            tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges),
            TL_OK);
    return w;
}

static struct tl_vocab *write_and_load(struct tl_gguf_writer *w, tl_status want, const char *key)
{
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("vocab.gguf"));
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(path, &g), TL_OK);
    struct tl_vocab *v = NULL;
    tl_status rc = tl_vocab_load_gguf(g, &v);
    tl_gguf_close(g);
    unlink(path);
    if (rc != want) fail_msg("load returned %d (%s), want %d", rc, tl_last_error(), want);
    if (rc) {
        assert_null(v);
        // The message names the file and the key.
        assert_non_null(strstr(tl_last_error(), "vocab.gguf"));
        if (key && !strstr(tl_last_error(), key))
            fail_msg("error '%s' does not name %s", tl_last_error(), key);
    }
    return v;
}

static void test_bpe_merges_by_rank(void **state)
{
    (void)state;
    const char *const merges[] = {"c d", "a b", "ab c", "\xc4\xa0 a"};
    int32_t ids[16];
    // "abcd": c+d (rank 0) first, then a+b; "ab cd" has no rule: ab, cd.
    struct tl_vocab *v = write_and_load(bpe_writer("gpt-2", merges, 4), TL_OK, NULL);
    int64_t n = tok(v, "abcd", false, false, ids, 16);
    const int32_t want1[] = {5, 7};
    assert_ids(ids, n, want1, 2, "rank order");
    // "abc": a+b then ab+c.
    n = tok(v, "abc a", false, false, ids, 16);
    const int32_t want2[] = {6, 9};
    assert_ids(ids, n, want2, 2, "chained merges and Ġa");
    n = tok(v, "x", false, false, ids, 16); // no piece for 'x': dropped like llama.cpp
    assert_int_equal(n, 0);
    assert_int_equal(tl_vocab_eot(v), -1);
    tl_vocab_destroy(v);

    // Llama-3 style: a pre-token that is a whole token is not merged (ignore_merges), and BOS is
    // added by default (but this vocabulary has no BOS id, so none is added).
    v = write_and_load(bpe_writer("llama-bpe", merges, 4), TL_OK, NULL);
    n = tok(v, "abcd", true, false, ids, 16);
    const int32_t want3[] = {8};
    assert_ids(ids, n, want3, 1, "ignore_merges");
    tl_vocab_destroy(v);

    // Unknown pre-tokenizer: loads with the default regexes.
    v = write_and_load(bpe_writer("brand-new-pre", merges, 4), TL_OK, NULL);
    assert_string_equal(tl_vocab_pre(v), "brand-new-pre");
    n = tok(v, "abcd", false, false, ids, 16);
    assert_ids(ids, n, want1, 2, "default pre");
    tl_vocab_destroy(v);
}

static void test_bad_vocabularies(void **state)
{
    (void)state;
    const char *const merges[] = {"a b"};
    struct tl_gguf_writer *w;

    w = tl_gguf_writer_create();
    assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), TL_OK);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.tokens"); // missing tokens array

    w = tl_gguf_writer_create();
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.model"); // no model at all

    w = bpe_writer("gpt-2", NULL, 0);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.merges"); // gpt2 without merges

    const char *const bad_merges[] = {"a b", "a zz"};
    write_and_load(bpe_writer("gpt-2", bad_merges, 2), TL_ERR_FORMAT, "tokenizer.ggml.merges");
    const char *const no_space[] = {"ab"};
    write_and_load(bpe_writer("gpt-2", no_space, 1), TL_ERR_FORMAT, "tokenizer.ggml.merges");

    w = bpe_writer("gpt-2", merges, 1);
    const float scores[] = {0, 0, 0};
    assert_int_equal(
        tl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", TL_GGUF_TYPE_FLOAT32, scores, 3), TL_OK);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.scores"); // 3 scores for 11 tokens

    w = bpe_writer("gpt-2", merges, 1);
    assert_int_equal(tl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 11), TL_OK);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.bos_token_id"); // out of range

    w = bpe_writer("gpt-2", merges, 1);
    assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.eos_token_id", "2"), TL_OK);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.eos_token_id"); // wrong type

    w = bpe_writer("gpt-2", merges, 1);
    assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.add_bos_token", "yes"), TL_OK);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.add_bos_token");

    w = bpe_writer("gpt-2", merges, 1);
    const float ftypes[11] = {0};
    assert_int_equal(
        tl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TL_GGUF_TYPE_FLOAT32, ftypes, 11),
        TL_OK); // replaces the int32 array
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.token_type");

    // Duplicate pieces (llama.cpp aborts on them).
    w = tl_gguf_writer_create();
    const char *const dup[] = {"<unk>", "a", "a"};
    assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), TL_OK);
    assert_int_equal(tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", dup, 3), TL_OK);
    write_and_load(w, TL_ERR_FORMAT, "tokenizer.ggml.tokens");

    // Unsupported tokenizer model.
    w = tl_gguf_writer_create();
    assert_int_equal(tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "t5"), TL_OK);
    write_and_load(w, TL_ERR_UNSUPPORTED, "t5");

    // -1 / 0xFFFFFFFF means "not set" (stories260K.gguf has such padding ids): loads.
    w = bpe_writer("gpt-2", merges, 1);
    assert_int_equal(tl_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu),
                     TL_OK);
    assert_int_equal(tl_gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", -1), TL_OK);
    struct tl_vocab *v = write_and_load(w, TL_OK, NULL);
    assert_int_equal(tl_vocab_bos(v), -1);
    tl_vocab_destroy(v);

    // llama2.c files: missing, truncated, bad length.
    struct tl_vocab *x = NULL;
    assert_int_equal(tl_vocab_load_llama2c("/nonexistent/tok.bin", &x), TL_ERR_IO);
    assert_non_null(strstr(tl_last_error(), "/nonexistent/tok.bin"));
    size_t len;
    char *bin = read_file(tl_test_shared("models/tok512.bin"), &len);
    assert_non_null(bin);
    const char *p = tl_test_tmpfile("cut.bin");
    char cut[256];
    snprintf(cut, sizeof(cut), "%s", p);
    for (size_t keep = 0; keep < 64; keep += 3) {
        FILE *fk = fopen(cut, "wb");
        fwrite(bin, 1, keep, fk);
        fclose(fk);
        assert_int_equal(tl_vocab_load_llama2c(cut, &x), TL_ERR_FORMAT);
        assert_null(x);
        assert_non_null(strstr(tl_last_error(), "cut.bin"));
    }
    int32_t huge = 1 << 30;
    memcpy(bin + 4 + 4, &huge, 4); // first token's length
    FILE *f = fopen(cut, "wb");
    fwrite(bin, 1, len, f);
    fclose(f);
    assert_int_equal(tl_vocab_load_llama2c(cut, &x), TL_ERR_FORMAT);
    unlink(cut);
    free(bin);
}

// ---- robustness ---------------------------------------------------------------------------------

static uint64_t rng_next(uint64_t *s)
{
    return tl_xorshift64s(s); // core/hash.h
}

// Any bytes give tokens: NULs, invalid UTF-8, lone continuation bytes, surrogates, overlongs.
// The output decodes to valid UTF-8, and SPM (byte fallback) gets valid UTF-8 input back exactly.
static void test_random_bytes(void **state)
{
    (void)state;
    const char *names[] = {"llama-spm", "gpt-2", "starcoder", "deepseek-coder", "phi-3"};
    static const char pool[] = "a b\n\t<|>'s0\x80\xbf\xc0\xc3\xe2\xed\xf0\xf4\xf5\xff\x00\x96\x81";
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", tl_test_shared("vocab"), names[k]);
        struct tl_vocab *v = load_path(path);
        for (int iter = 0; iter < 400; iter++) {
            char text[64];
            size_t n = rng_next(&seed) % sizeof(text);
            for (size_t i = 0; i < n; i++)
                text[i] = pool[rng_next(&seed) % (sizeof(pool) - 1)];
            int32_t *ids;
            int64_t n_ids;
            bool special = rng_next(&seed) & 1;
            assert_int_equal(tl_tokenize(v, text, n, special, special, &ids, &n_ids), TL_OK);
            for (int64_t i = 0; i < n_ids; i++)
                assert_true(ids[i] >= 0 && ids[i] < tl_vocab_n_tokens(v));
            char *back = tl_detokenize(v, ids, n_ids, special);
            assert_non_null(back);
            assert_true(tl_utf8_is_valid(back, strlen(back)));
            if (tl_vocab_type(v) == TL_VOCAB_SPM && !special && tl_utf8_is_valid(text, n) &&
                !memchr(text, 0, n) && !memmem(text, n, "<|", 2))
                assert_true(strlen(back) == n && memcmp(back, text, n) == 0);
            free(back);
            free(ids);
        }
        tl_vocab_destroy(v);
    }
}

static void test_long_and_too_long_inputs(void **state)
{
    (void)state;
    struct tl_vocab *v = load_shared("vocab/ggml-vocab-gpt-2.gguf");
    // 200 KB without a single space or newline: one huge pre-token, merged in O(n log n).
    size_t n = 200 * 1024;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = "abcdefgh"[i % 8];
    int32_t *ids;
    int64_t n_ids;
    assert_int_equal(tl_tokenize(v, text, n, false, false, &ids, &n_ids), TL_OK);
    assert_true(n_ids > 0 && n_ids < (int64_t)n);
    char *back = tl_detokenize(v, ids, n_ids, false);
    assert_true(strlen(back) == n && memcmp(back, text, n) == 0);
    free(back);
    free(ids);
    // Long runs of spaces (lookahead regex branches) and of one emoji.
    for (size_t i = 0; i < n; i++)
        text[i] = ' ';
    assert_int_equal(tl_tokenize(v, text, n, false, false, &ids, &n_ids), TL_OK);
    free(ids);
    tl_vocab_destroy(v);
    v = load_shared("vocab/ggml-vocab-llama-spm.gguf");
    for (size_t i = 0; i + 4 <= n; i += 4)
        memcpy(text + i, "\xf0\x9f\x98\x81", 4);
    assert_int_equal(tl_tokenize(v, text, n, true, false, &ids, &n_ids), TL_OK);
    free(ids);
    // Past the limit: a clear error before anything is read (the buffer is smaller).
    assert_int_equal(tl_tokenize(v, text, (size_t)1 << 40, true, false, &ids, &n_ids),
                     TL_ERR_TOO_LONG);
    assert_null(ids);
    // Empty text: no tokens, or just BOS.
    assert_int_equal(tl_tokenize(v, "", 0, false, false, &ids, &n_ids), TL_OK);
    assert_int_equal(n_ids, 0);
    free(ids);
    assert_int_equal(tl_tokenize(v, NULL, 0, true, false, &ids, &n_ids), TL_OK);
    assert_int_equal(n_ids, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    free(text);
    tl_vocab_destroy(v);
}

// One vocabulary shared by several threads tokenizing at once gives the same ids as alone.
struct thread_job {
    const struct tl_vocab *v;
    const struct cases *c;
    int failures;
};

static void *thread_main(void *arg)
{
    struct thread_job *j = arg;
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < j->c->n; i++) {
            int32_t want[512], *got;
            int64_t n_want = parse_ids(j->c->ids[i], want, 512), n_got;
            if (tl_tokenize(j->v, j->c->text[i], j->c->len[i], false, false, &got, &n_got)) {
                j->failures++;
                continue;
            }
            if (n_got != n_want || memcmp(got, want, (size_t)n_got * sizeof(int32_t)))
                j->failures++;
            free(got);
        }
    }
    return NULL;
}

static void test_threads_share_a_vocabulary(void **state)
{
    (void)state;
    const char *names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", tl_test_shared("vocab"), names[k]);
        struct tl_vocab *v = load_path(path);
        struct cases c;
        cases_load(&c, path);
        pthread_t th[4];
        struct thread_job jobs[4];
        for (int t = 0; t < 4; t++) {
            jobs[t] = (struct thread_job){v, &c, 0};
            assert_int_equal(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            assert_int_equal(jobs[t].failures, 0);
        }
        cases_free(&c);
        tl_vocab_destroy(v);
    }
}

// Failing the Nth allocation anywhere in loading or tokenizing gives TL_ERR_NOMEM or success,
// never a crash (leaks show up under `make check`).
static void test_allocation_failures(void **state)
{
    (void)state;
    for (long nth = 1; nth < 60; nth++) {
        struct tl_gguf *g;
        assert_int_equal(tl_gguf_open(tl_test_shared("models/stories260K.gguf"), &g), TL_OK);
        struct tl_vocab *v = NULL;
        tl_alloc_fail_after(nth);
        tl_status rc = tl_vocab_load_gguf(g, &v);
        if (rc == TL_OK) {
            int32_t *ids = NULL;
            int64_t n;
            rc = tl_tokenize(v, "Once upon a time", 16, true, false, &ids, &n);
            free(ids);
        }
        tl_alloc_fail_after(0);
        assert_true(rc == TL_OK || rc == TL_ERR_NOMEM);
        tl_vocab_destroy(v);
        tl_gguf_close(g);
    }
    const char *const merges[] = {"c d", "a b", "ab c", "\xc4\xa0 a"};
    for (long nth = 1; nth < 60; nth++) {
        struct tl_gguf_writer *w = bpe_writer("llama-bpe", merges, 4);
        char path[256];
        snprintf(path, sizeof(path), "%s", tl_test_tmpfile("oom.gguf"));
        assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
        tl_gguf_writer_destroy(w);
        struct tl_gguf *g;
        assert_int_equal(tl_gguf_open(path, &g), TL_OK);
        struct tl_vocab *v = NULL;
        tl_alloc_fail_after(nth);
        tl_status rc = tl_vocab_load_gguf(g, &v);
        if (rc == TL_OK) {
            int32_t *ids = NULL;
            int64_t n;
            rc = tl_tokenize(v, "abcd abc a<|eot|>", 17, true, true, &ids, &n);
            free(ids);
        }
        tl_alloc_fail_after(0);
        assert_true(rc == TL_OK || rc == TL_ERR_NOMEM);
        tl_vocab_destroy(v);
        tl_gguf_close(g);
        unlink(path);
    }
}

TL_TEST_MAIN(
    cmocka_unit_test(test_llama_cpp_vectors), cmocka_unit_test(test_llama2c_tokenizer_bin_vectors),
    cmocka_unit_test(test_stories_prompt_ids), cmocka_unit_test(test_special_ids_and_flags),
    cmocka_unit_test(test_token_to_text), cmocka_unit_test(test_round_trip),
    cmocka_unit_test(test_incremental_detok_split_characters), cmocka_unit_test(test_parse_special),
    cmocka_unit_test(test_pretokenizer_splits), cmocka_unit_test(test_unknown_pre_falls_back),
    cmocka_unit_test(test_bpe_merges_by_rank), cmocka_unit_test(test_bad_vocabularies),
    cmocka_unit_test(test_random_bytes), cmocka_unit_test(test_long_and_too_long_inputs),
    cmocka_unit_test(test_threads_share_a_vocabulary), cmocka_unit_test(test_allocation_failures))
