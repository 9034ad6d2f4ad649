/*
 * Tests for src/gguf: reading the shared GGUF files (values checked against what their
 * provenance and llama.cpp say), the writer round trip of every value type and several tensor
 * types, copying a tokenizer, and validation: handcrafted bad files (built here byte by byte,
 * independently of the writer) each give their specific one-line message, truncation at every
 * offset fails cleanly, seeded random byte flips never crash, and injected allocation failures
 * give TL_ERR_NOMEM.
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "gguf/gguf.h"

#include <math.h>
#include <sys/stat.h>

// ---- helpers ------------------------------------------------------------------------------------

// Asserts a failure with `code` whose message is one line "<name>: ...<needle>...".
static void check_error(tl_status rc, tl_status code, const char *name, const char *needle)
{
    const char *msg = tl_last_error();
    if (rc != code) fail_msg("status %d, expected %d; message: %s", rc, code, msg);
    size_t nl = strlen(name);
    if (strncmp(msg, name, nl) != 0 || strncmp(msg + nl, ": ", 2) != 0)
        fail_msg("message does not start with '%s: ': %s", name, msg);
    if (strchr(msg, '\n')) fail_msg("message has a newline: %s", msg);
    if (needle && !strstr(msg, needle)) fail_msg("message lacks '%s': %s", needle, msg);
}

static void *read_whole(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void write_whole(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static bool str_is(struct tl_gguf_str s, const char *c)
{
    return tl_gguf_str_eq(s, c);
}

// ---- a tiny independent GGUF byte builder for handcrafted files ---------------------------------

struct fb {
    uint8_t buf[1 << 14];
    size_t n;
};

static void fb_raw(struct fb *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof(b->buf));
    memcpy(b->buf + b->n, p, n);
    b->n += n;
}
static void fb_u32(struct fb *b, uint32_t v)
{
    fb_raw(b, &v, 4);
}
static void fb_u64(struct fb *b, uint64_t v)
{
    fb_raw(b, &v, 8);
}
static void fb_str(struct fb *b, const char *s)
{
    fb_u64(b, strlen(s));
    fb_raw(b, s, strlen(s));
}
static void fb_header(struct fb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    fb_raw(b, "GGUF", 4);
    fb_u32(b, version);
    fb_u64(b, n_tensors);
    fb_u64(b, n_kv);
}
static void fb_kv_u32(struct fb *b, const char *key, uint32_t v)
{
    fb_str(b, key);
    fb_u32(b, TL_GGUF_TYPE_UINT32);
    fb_u32(b, v);
}
static void fb_tensor(struct fb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset)
{
    fb_str(b, name);
    fb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        fb_u64(b, ne[d]);
    fb_u32(b, type);
    fb_u64(b, offset);
}
static void fb_pad(struct fb *b, size_t align)
{
    while (b->n % align)
        b->buf[b->n++] = 0;
}
static void fb_zeros(struct fb *b, size_t n)
{
    assert_true(b->n + n <= sizeof(b->buf));
    memset(b->buf + b->n, 0, n);
    b->n += n;
}

static tl_status open_fb(const struct fb *b, struct tl_gguf **g)
{
    return tl_gguf_open_mem(b->buf, b->n, "bad.gguf", g);
}

// Opens the builder's bytes expecting failure `code` with `needle` in the message.
static void expect_bad(const struct fb *b, tl_status code, const char *needle)
{
    struct tl_gguf *g = (struct tl_gguf *)1;
    tl_status rc = open_fb(b, &g);
    assert_null(g);
    check_error(rc, code, "bad.gguf", needle);
}

// One F32 tensor "t" of ne elements at `offset` in a file with no keys.
static void fb_one_tensor(struct fb *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                          uint64_t offset, size_t data_bytes)
{
    fb_header(b, 3, 1, 0);
    fb_tensor(b, "t", n_dims, ne, type, offset);
    fb_pad(b, 32);
    fb_zeros(b, data_bytes);
}

// ---- the shared files --------------------------------------------------------------------------

static void test_read_stories260k(void **state)
{
    (void)state;
    const char *path = tl_test_shared("models/stories260K.gguf");
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(path, &g), TL_OK);
    assert_int_equal(tl_gguf_version(g), 3);
    assert_int_equal(tl_gguf_alignment(g), 32);
    assert_string_equal(tl_gguf_path(g), path);
    assert_int_equal(tl_gguf_file_size(g), 1185376);
    assert_int_equal(tl_gguf_n_kv(g), 19);

    struct tl_gguf_str s;
    assert_true(tl_gguf_get_str(g, "general.architecture", &s));
    assert_true(str_is(s, "llama"));
    assert_true(tl_gguf_get_str(g, "tokenizer.ggml.model", &s));
    assert_true(str_is(s, "llama"));
    uint32_t u;
    assert_true(tl_gguf_get_u32(g, "llama.block_count", &u));
    assert_int_equal(u, 5);
    assert_true(tl_gguf_get_u32(g, "llama.embedding_length", &u));
    assert_int_equal(u, 64);
    assert_true(tl_gguf_get_u32(g, "llama.feed_forward_length", &u));
    assert_int_equal(u, 172);
    assert_true(tl_gguf_get_u32(g, "llama.attention.head_count", &u));
    assert_int_equal(u, 8);
    assert_true(tl_gguf_get_u32(g, "llama.attention.head_count_kv", &u));
    assert_int_equal(u, 4);
    assert_true(tl_gguf_get_u32(g, "llama.context_length", &u));
    assert_int_equal(u, 2048);
    assert_true(tl_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u));
    assert_int_equal(u, 1);
    float eps;
    assert_true(tl_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps));
    assert_float_equal(eps, 1e-5f, 1e-12);
    assert_false(tl_gguf_get_u32(g, "no.such.key", &u));
    assert_null(tl_gguf_get(g, "llama"));

    const struct tl_gguf_value *toks = tl_gguf_get_arr(g, "tokenizer.ggml.tokens");
    assert_non_null(toks);
    assert_int_equal(toks->arr.elem_type, TL_GGUF_TYPE_STRING);
    assert_int_equal(toks->arr.n, 512);
    // tok512: 0 <unk>, 1 <s>, 2 </s>, 3.. byte tokens <0x00>..; " Once" is 403 (PROVENANCE.md).
    assert_true(str_is(toks->arr.items[0].str, "<unk>"));
    assert_true(str_is(toks->arr.items[1].str, "<s>"));
    assert_true(str_is(toks->arr.items[3].str, "<0x00>"));
    assert_true(str_is(toks->arr.items[13].str, "<0x0A>"));
    assert_true(str_is(toks->arr.items[403].str, "\xe2\x96\x81Once"));
    const struct tl_gguf_value *scores = tl_gguf_get_arr(g, "tokenizer.ggml.scores");
    assert_non_null(scores);
    assert_int_equal(scores->arr.elem_type, TL_GGUF_TYPE_FLOAT32);
    assert_int_equal(scores->arr.n, 512);
    double sc;
    assert_true(tl_gguf_arr_f64(scores, 511, &sc));
    assert_false(tl_gguf_arr_f64(scores, 512, &sc));
    const struct tl_gguf_value *tt = tl_gguf_get_arr(g, "tokenizer.ggml.token_type");
    int64_t ty;
    assert_true(tl_gguf_arr_i64(tt, 1, &ty));
    assert_int_equal(ty, 3); // control
    assert_true(tl_gguf_arr_i64(tt, 13, &ty));
    assert_int_equal(ty, 6); // byte

    // 48 tensors: 3 global + 9 per block x 5 blocks, all F32; 260K-ish parameters.
    assert_int_equal(tl_gguf_n_tensors(g), 48);
    int64_t n_params = 0;
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        assert_int_equal(t->type, TL_DTYPE_F32);
        assert_int_equal((uintptr_t)t->data % 32, 0);
        n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    // 512*64*2 embed/output + 64 norm + 5 * (64*64*2 + 64*32*2 + 64*172*3 + 64*2)
    assert_int_equal(n_params,
                     512 * 64 * 2 + 64 + 5 * (64 * 64 * 2 + 64 * 32 * 2 + 64 * 172 * 3 + 128));
    const struct tl_gguf_tensor *emb = tl_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->n_dims, 2);
    assert_int_equal(emb->ne[0], 64);
    assert_int_equal(emb->ne[1], 512);
    assert_int_equal(emb->n_bytes, 64 * 512 * 4);
    const struct tl_gguf_tensor *down = tl_gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(down);
    assert_int_equal(down->ne[0], 172);
    assert_int_equal(down->ne[1], 64);
    assert_null(tl_gguf_find_tensor(g, "blk.5.ffn_down.weight"));
    assert_null(tl_gguf_tensor_at(g, 48));
    assert_null(tl_gguf_tensor_at(g, -1));
    // The last tensor ends exactly at the end of the file.
    size_t max_end = 0;
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        if (t->offset + t->n_bytes > max_end) max_end = t->offset + t->n_bytes;
    }
    assert_int_equal(tl_gguf_data_offset(g) + max_end, tl_gguf_file_size(g));
    tl_gguf_close(g);
}

static void test_read_llama2_tiny_random(void **state)
{
    (void)state;
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(tl_test_shared("models/llama-2-tiny-random.gguf"), &g), TL_OK);
    uint32_t u;
    assert_true(tl_gguf_get_u32(g, "llama.embedding_length", &u));
    assert_int_equal(u, 8);
    assert_true(tl_gguf_get_u32(g, "llama.block_count", &u));
    assert_int_equal(u, 1);
    assert_true(tl_gguf_get_u32(g, "llama.feed_forward_length", &u));
    assert_int_equal(u, 32);
    assert_true(tl_gguf_get_u32(g, "llama.attention.head_count", &u));
    assert_int_equal(u, 2);
    const struct tl_gguf_value *toks = tl_gguf_get_arr(g, "tokenizer.ggml.tokens");
    assert_int_equal(toks->arr.n, 32000);
    // The same pieces as llama2.c's tokenizer.bin (PROVENANCE.md): 31999 is "\xe7\xbb\x99".
    assert_true(str_is(toks->arr.items[31999].str, "\xe7\xbb\x99"));
    assert_true(str_is(toks->arr.items[403].str, "ate"));
    assert_true(str_is(toks->arr.items[13].str, "<0x0A>"));
    assert_int_equal(tl_gguf_n_tensors(g), 12);
    int n_f16 = 0, n_f32 = 0;
    for (int64_t i = 0; i < 12; i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        n_f16 += t->type == TL_DTYPE_F16;
        n_f32 += t->type == TL_DTYPE_F32;
    }
    assert_int_equal(n_f16, 9); // PROVENANCE.md: F16 (9 tensors) + F32
    assert_int_equal(n_f32, 3);
    const struct tl_gguf_tensor *out = tl_gguf_find_tensor(g, "output.weight");
    assert_int_equal(out->ne[0], 8);
    assert_int_equal(out->ne[1], 32000);
    tl_gguf_close(g);
}

static void test_read_vocab_files(void **state)
{
    (void)state;
    static const struct {
        const char *file, *model, *pre;
        uint64_t n_tokens, n_merges;
    } cases[] = {
        {"vocab/ggml-vocab-llama-spm.gguf", "llama", "default", 32000, 0},
        {"vocab/ggml-vocab-phi-3.gguf", "llama", "default", 32064, 0},
        {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", "gpt-2", 50257, 50000},
        {"vocab/ggml-vocab-deepseek-coder.gguf", "gpt2", "deepseek-coder", 32256, 31757},
        {"vocab/ggml-vocab-starcoder.gguf", "gpt2", "starcoder", 49152, 48872},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct tl_gguf *g;
        assert_int_equal(tl_gguf_open(tl_test_shared(cases[c].file), &g), TL_OK);
        assert_int_equal(tl_gguf_n_tensors(g), 0);
        struct tl_gguf_str s;
        assert_true(tl_gguf_get_str(g, "tokenizer.ggml.model", &s));
        assert_true(str_is(s, cases[c].model));
        assert_true(tl_gguf_get_str(g, "tokenizer.ggml.pre", &s));
        assert_true(str_is(s, cases[c].pre));
        assert_int_equal(tl_gguf_get_arr(g, "tokenizer.ggml.tokens")->arr.n, cases[c].n_tokens);
        const struct tl_gguf_value *m = tl_gguf_get_arr(g, "tokenizer.ggml.merges");
        assert_int_equal(m ? m->arr.n : 0, cases[c].n_merges);
        tl_gguf_close(g);
    }
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(tl_test_shared("vocab/ggml-vocab-phi-3.gguf"), &g), TL_OK);
    bool b = false;
    assert_true(tl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b));
    assert_true(b);
    assert_true(tl_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b));
    assert_false(b);
    struct tl_gguf_str tmpl;
    assert_true(tl_gguf_get_str(g, "tokenizer.chat_template", &tmpl));
    assert_true(tmpl.len > 20 && !memcmp(tmpl.ptr, "{{ bos_token }}", 15));
    float fb;
    assert_true(tl_gguf_get_f32(g, "phi3.rope.freq_base", &fb));
    assert_float_equal(fb, 10000.0f, 0);
    tl_gguf_close(g);
}

// ---- writer round trip --------------------------------------------------------------------------

static bool value_equal(const struct tl_gguf_value *a, const struct tl_gguf_value *b)
{
    if (a->type != b->type) return false;
    switch (a->type) {
    case TL_GGUF_TYPE_STRING:
        return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    case TL_GGUF_TYPE_ARRAY:
        if (a->arr.elem_type != b->arr.elem_type || a->arr.n != b->arr.n) return false;
        if (a->arr.elem_type == TL_GGUF_TYPE_STRING || a->arr.elem_type == TL_GGUF_TYPE_ARRAY) {
            for (uint64_t i = 0; i < a->arr.n; i++)
                if (!value_equal(&a->arr.items[i], &b->arr.items[i])) return false;
            return true;
        }
        for (uint64_t i = 0; i < a->arr.n; i++) {
            double x, y;
            if (!tl_gguf_arr_f64(a, i, &x) || !tl_gguf_arr_f64(b, i, &y)) {
                // BOOL arrays are not numeric: compare the raw bytes
                if (memcmp(a->arr.raw, b->arr.raw, a->arr.n)) return false;
                return true;
            }
            if (x != y) return false;
        }
        return true;
    case TL_GGUF_TYPE_FLOAT32:
    case TL_GGUF_TYPE_FLOAT64:
        return a->f64 == b->f64;
    case TL_GGUF_TYPE_INT8:
    case TL_GGUF_TYPE_INT16:
    case TL_GGUF_TYPE_INT32:
    case TL_GGUF_TYPE_INT64:
        return a->i64 == b->i64;
    default:
        return a->u64 == b->u64;
    }
}

static struct tl_gguf_value sv(const char *s)
{
    return (struct tl_gguf_value){.type = TL_GGUF_TYPE_STRING, .str = {strlen(s), s}};
}

// Tensor fill callback: byte i of tensor data = (i * 7 + seed) & 0xff.
static int fill_pattern(void *ctx, const char *name, void *dst, size_t n)
{
    (void)name;
    uint8_t seed = (uint8_t)(uintptr_t)ctx;
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)dst)[i] = (uint8_t)(i * 7 + seed);
    return 0;
}

static int fill_fails(void *ctx, const char *name, void *dst, size_t n)
{
    (void)ctx;
    (void)name;
    (void)dst;
    (void)n;
    return -1;
}

struct rt_expect {
    const char *key;
    struct tl_gguf_value v;
};

// Builds the round-trip file at `path`; fills *exp with the values it set (storage static).
static size_t build_roundtrip_file(const char *path, struct rt_expect *exp)
{
    static const uint8_t u8s[] = {0, 1, 255};
    static const int8_t i8s[] = {-128, 0, 127};
    static const uint16_t u16s[] = {0, 65535};
    static const int16_t i16s[] = {-32768, 32767};
    static const uint32_t u32s[] = {0, 4000000000u, 7};
    static const int32_t i32s[] = {INT32_MIN, -1, INT32_MAX};
    static const float f32s[] = {0.5f, -1e30f, 3.25f};
    static const uint64_t u64s[] = {UINT64_MAX, 1};
    static const int64_t i64s[] = {INT64_MIN, INT64_MAX};
    static const double f64s[] = {3.141592653589793, -2.5e-300};
    static const uint8_t bools[] = {1, 0, 1, 1};
    // Nested: [[["a", ""], []], [], [["\xe2\x82\xac"]]] -- 3 levels, empty arrays inside.
    static struct tl_gguf_value l3a[2], l3c[1], l2a[2], l2c[1], l1[3];
    l3a[0] = sv("a");
    l3a[1] = sv("");
    l3c[0] = sv("\xe2\x82\xac");
    l2a[0] =
        (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                               .arr = {.elem_type = TL_GGUF_TYPE_STRING, .n = 2, .items = l3a}};
    l2a[1] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                    .arr = {.elem_type = TL_GGUF_TYPE_STRING, .n = 0}};
    l2c[0] =
        (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                               .arr = {.elem_type = TL_GGUF_TYPE_STRING, .n = 1, .items = l3c}};
    l1[0] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_ARRAY, .n = 2, .items = l2a}};
    l1[1] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_ARRAY, .n = 0}};
    l1[2] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_ARRAY, .n = 1, .items = l2c}};
    // Array of i32 arrays.
    static struct tl_gguf_value ia[2];
    ia[0] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_INT32, .n = 3, .raw = i32s}};
    ia[1] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_INT32, .n = 0}};
    static struct tl_gguf_value strs[3];
    strs[0] = sv("hello");
    strs[1] = sv("");
    strs[2] = sv("wide \xf0\x9f\x98\x80");

#define ARR(et, p, cnt)                                                                            \
    ((struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,                                            \
                            .arr = {.elem_type = (et), .n = (cnt), .raw = (p)}})
    size_t n = 0;
    exp[n++] = (struct rt_expect){"t.u8", {.type = TL_GGUF_TYPE_UINT8, .u64 = 200}};
    exp[n++] = (struct rt_expect){"t.i8", {.type = TL_GGUF_TYPE_INT8, .i64 = -100}};
    exp[n++] = (struct rt_expect){"t.u16", {.type = TL_GGUF_TYPE_UINT16, .u64 = 60000}};
    exp[n++] = (struct rt_expect){"t.i16", {.type = TL_GGUF_TYPE_INT16, .i64 = -30000}};
    exp[n++] = (struct rt_expect){"t.u32", {.type = TL_GGUF_TYPE_UINT32, .u64 = 4000000000u}};
    exp[n++] = (struct rt_expect){"t.i32", {.type = TL_GGUF_TYPE_INT32, .i64 = -2000000000}};
    exp[n++] = (struct rt_expect){"t.f32", {.type = TL_GGUF_TYPE_FLOAT32, .f64 = 1.5}};
    exp[n++] = (struct rt_expect){"t.bool", {.type = TL_GGUF_TYPE_BOOL, .u64 = 1}};
    exp[n++] = (struct rt_expect){"t.str", sv("h\xc3\xa9llo")};
    exp[n++] = (struct rt_expect){"t.str_empty", sv("")};
    exp[n++] = (struct rt_expect){"t.u64", {.type = TL_GGUF_TYPE_UINT64, .u64 = (1ull << 63) + 5}};
    exp[n++] = (struct rt_expect){"t.i64", {.type = TL_GGUF_TYPE_INT64, .i64 = -(1ll << 62)}};
    exp[n++] =
        (struct rt_expect){"t.f64", {.type = TL_GGUF_TYPE_FLOAT64, .f64 = 2.718281828459045}};
    exp[n++] = (struct rt_expect){"a.u8", ARR(TL_GGUF_TYPE_UINT8, u8s, 3)};
    exp[n++] = (struct rt_expect){"a.i8", ARR(TL_GGUF_TYPE_INT8, i8s, 3)};
    exp[n++] = (struct rt_expect){"a.u16", ARR(TL_GGUF_TYPE_UINT16, u16s, 2)};
    exp[n++] = (struct rt_expect){"a.i16", ARR(TL_GGUF_TYPE_INT16, i16s, 2)};
    exp[n++] = (struct rt_expect){"a.u32", ARR(TL_GGUF_TYPE_UINT32, u32s, 3)};
    exp[n++] = (struct rt_expect){"a.i32", ARR(TL_GGUF_TYPE_INT32, i32s, 3)};
    exp[n++] = (struct rt_expect){"a.f32", ARR(TL_GGUF_TYPE_FLOAT32, f32s, 3)};
    exp[n++] = (struct rt_expect){"a.u64", ARR(TL_GGUF_TYPE_UINT64, u64s, 2)};
    exp[n++] = (struct rt_expect){"a.i64", ARR(TL_GGUF_TYPE_INT64, i64s, 2)};
    exp[n++] = (struct rt_expect){"a.f64", ARR(TL_GGUF_TYPE_FLOAT64, f64s, 2)};
    exp[n++] = (struct rt_expect){"a.bool", ARR(TL_GGUF_TYPE_BOOL, bools, 4)};
    exp[n++] = (struct rt_expect){"a.empty_u32", ARR(TL_GGUF_TYPE_UINT32, NULL, 0)};
    exp[n++] = (struct rt_expect){"a.empty_str", ARR(TL_GGUF_TYPE_STRING, NULL, 0)};
    exp[n++] =
        (struct rt_expect){"a.str",
                           {.type = TL_GGUF_TYPE_ARRAY,
                            .arr = {.elem_type = TL_GGUF_TYPE_STRING, .n = 3, .items = strs}}};
    exp[n++] = (struct rt_expect){"a.nested",
                                  {.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_ARRAY, .n = 3, .items = l1}}};
    exp[n++] = (struct rt_expect){"a.nested_i32",
                                  {.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_ARRAY, .n = 2, .items = ia}}};
    exp[n++] = (struct rt_expect){"a.empty_nested", ARR(TL_GGUF_TYPE_ARRAY, NULL, 0)};
#undef ARR

    struct tl_gguf_writer *w = tl_gguf_writer_create();
    assert_non_null(w);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tl_gguf_writer_set_value(w, exp[i].key, &exp[i].v), TL_OK);
    // Typed setters, and a key set twice keeps one entry with the last value.
    assert_int_equal(tl_gguf_writer_set_u32(w, "s.u32", 1), TL_OK);
    assert_int_equal(tl_gguf_writer_set_u32(w, "s.u32", 42), TL_OK);
    assert_int_equal(tl_gguf_writer_set_i32(w, "s.i32", -42), TL_OK);
    assert_int_equal(tl_gguf_writer_set_u64(w, "s.u64", 1ull << 40), TL_OK);
    assert_int_equal(tl_gguf_writer_set_f32(w, "s.f32", 0.25f), TL_OK);
    assert_int_equal(tl_gguf_writer_set_bool(w, "s.bool", false), TL_OK);
    assert_int_equal(tl_gguf_writer_set_str(w, "s.str", "x"), TL_OK);
    const char *sa[] = {"p", "", "q"};
    assert_int_equal(tl_gguf_writer_set_arr_str(w, "s.arr_str", sa, 3), TL_OK);
    assert_int_equal(tl_gguf_writer_set_arr(w, "s.arr_f32", TL_GGUF_TYPE_FLOAT32, f32s, 3), TL_OK);

    // Tensors: borrowed and filled, several types and ranks.
    static float f32data[15];
    for (int i = 0; i < 15; i++)
        f32data[i] = (float)i * 0.5f - 3.0f;
    static const uint16_t f16data[8] = {0x3c00, 0xbc00, 0x0000, 0x7bff, 1, 2, 3, 4};
    static const uint16_t bf16data[3] = {0x3f80, 0xc000, 0x4049};
    static const int32_t i32data[8] = {1, -2, 3, -4, 5, -6, 7, -8};
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "f32", TL_DTYPE_F32, 2, (int64_t[]){5, 3}, f32data), TL_OK);
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "f16", TL_DTYPE_F16, 2, (int64_t[]){4, 2}, f16data), TL_OK);
    assert_int_equal(tl_gguf_writer_add_tensor_fill(w, "q8_0", TL_DTYPE_Q8_0, 2, (int64_t[]){64, 3},
                                                    fill_pattern, (void *)(uintptr_t)5),
                     TL_OK);
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "bf16", TL_DTYPE_BF16, 1, (int64_t[]){3}, bf16data), TL_OK);
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "i32.3d", TL_DTYPE_I32, 3, (int64_t[]){2, 2, 2}, i32data),
        TL_OK);
    assert_int_equal(tl_gguf_writer_add_tensor_fill(w, "q4_k.4d", TL_DTYPE_Q4_K, 4,
                                                    (int64_t[]){256, 2, 1, 3}, fill_pattern,
                                                    (void *)(uintptr_t)9),
                     TL_OK);
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);
    return n;
}

static void test_writer_roundtrip_every_type(void **state)
{
    (void)state;
    const char *p = tl_test_tmpfile("rt.gguf");
    char path[256];
    snprintf(path, sizeof(path), "%s", p);
    struct rt_expect exp[40];
    size_t n = build_roundtrip_file(path, exp);

    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(path, &g), TL_OK);
    assert_int_equal(tl_gguf_version(g), 3);
    assert_int_equal(tl_gguf_n_kv(g), (int64_t)n + 8); // s.u32 was set twice
    for (size_t i = 0; i < n; i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, (int64_t)i); // insertion order kept
        assert_true(str_is(kv->key, exp[i].key));
        if (!value_equal(&kv->value, &exp[i].v)) fail_msg("value of %s differs", exp[i].key);
    }
    uint32_t u;
    assert_true(tl_gguf_get_u32(g, "s.u32", &u));
    assert_int_equal(u, 42);
    int64_t i64;
    assert_true(tl_gguf_get_i64(g, "s.i32", &i64));
    assert_int_equal(i64, -42);
    uint64_t u64;
    assert_true(tl_gguf_get_u64(g, "s.u64", &u64));
    assert_int_equal(u64, 1ull << 40);
    float f;
    assert_true(tl_gguf_get_f32(g, "s.f32", &f));
    assert_float_equal(f, 0.25f, 0);
    bool b = true;
    assert_true(tl_gguf_get_bool(g, "s.bool", &b));
    assert_false(b);
    struct tl_gguf_str s;
    assert_true(tl_gguf_get_str(g, "s.str", &s));
    assert_true(str_is(s, "x"));
    const struct tl_gguf_value *sa = tl_gguf_get_arr(g, "s.arr_str");
    assert_int_equal(sa->arr.n, 3);
    assert_true(str_is(sa->arr.items[1].str, ""));
    assert_true(str_is(sa->arr.items[2].str, "q"));
    const struct tl_gguf_value *nested = tl_gguf_get_arr(g, "a.nested");
    assert_true(str_is(nested->arr.items[2].arr.items[0].arr.items[0].str, "\xe2\x82\xac"));

    // Tensors: shapes, types, aligned offsets, bytes.
    assert_int_equal(tl_gguf_n_tensors(g), 6);
    const struct tl_gguf_tensor *t = tl_gguf_find_tensor(g, "f32");
    assert_int_equal(t->type, TL_DTYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 5);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->n_bytes, 60);
    assert_memory_equal(t->data, ((const float[]){-3.0f, -2.5f, -2.0f, -1.5f, -1.0f}), 20);
    t = tl_gguf_find_tensor(g, "f16");
    assert_int_equal(t->n_bytes, 16);
    assert_memory_equal(t->data, ((const uint16_t[]){0x3c00, 0xbc00, 0x0000, 0x7bff}), 8);
    t = tl_gguf_find_tensor(g, "q8_0");
    assert_int_equal(t->type, TL_DTYPE_Q8_0);
    assert_int_equal(t->n_bytes, 3 * 2 * 34);
    for (size_t i = 0; i < t->n_bytes; i++)
        assert_int_equal(((const uint8_t *)t->data)[i], (uint8_t)(i * 7 + 5));
    t = tl_gguf_find_tensor(g, "bf16");
    assert_int_equal(t->n_dims, 1);
    assert_memory_equal(t->data, ((const uint16_t[]){0x3f80, 0xc000, 0x4049}), 6);
    t = tl_gguf_find_tensor(g, "i32.3d");
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(((const int32_t *)t->data)[7], -8);
    t = tl_gguf_find_tensor(g, "q4_k.4d");
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(t->ne[3], 3);
    assert_int_equal(t->n_bytes, 6 * 144);
    assert_int_equal(((const uint8_t *)t->data)[100], (uint8_t)(100 * 7 + 9));
    for (int64_t i = 0; i < 6; i++) {
        t = tl_gguf_tensor_at(g, i);
        assert_int_equal(t->offset % 32, 0);
        assert_int_equal((uintptr_t)t->data % 32, 0);
    }
    tl_gguf_close(g);
    unlink(path);
}

static void test_writer_copies_tokenizer(void **state)
{
    (void)state;
    struct tl_gguf *src;
    assert_int_equal(tl_gguf_open(tl_test_shared("models/llama-2-tiny-random.gguf"), &src), TL_OK);
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    int n_copied = 0;
    for (int64_t i = 0; i < tl_gguf_n_kv(src); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(src, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        assert_int_equal(tl_gguf_writer_set_value(w, key, &kv->value), TL_OK);
        n_copied++;
    }
    assert_int_equal(n_copied, 7);
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("tok.gguf"));
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(path, &g), TL_OK);
    assert_int_equal(tl_gguf_n_kv(g), 7);
    for (int64_t i = 0; i < tl_gguf_n_kv(g); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        const struct tl_gguf_value *orig = tl_gguf_get(src, key);
        assert_non_null(orig);
        if (!value_equal(orig, &kv->value)) fail_msg("copied %s differs", key);
    }
    tl_gguf_close(g);
    tl_gguf_close(src);
    unlink(path);
}

static void test_writer_rejects_bad_input(void **state)
{
    (void)state;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    float x[64] = {0};
    assert_int_equal(tl_gguf_writer_add_tensor(w, "a", TL_DTYPE_Q8_0, 1, (int64_t[]){33}, x),
                     TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "block size 32"));
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "a", TL_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, x),
        TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gguf_writer_add_tensor(w, "a", TL_DTYPE_F32, 1, (int64_t[]){0}, x),
                     TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gguf_writer_add_tensor(w, "a", (enum tl_dtype)77, 1, (int64_t[]){1}, x),
                     TL_ERR_INVALID_ARG);
    char longname[80];
    memset(longname, 'n', 79);
    longname[79] = '\0';
    assert_int_equal(tl_gguf_writer_add_tensor(w, longname, TL_DTYPE_F32, 1, (int64_t[]){1}, x),
                     TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gguf_writer_add_tensor(w, "a", TL_DTYPE_F32, 1, (int64_t[]){4}, x), TL_OK);
    assert_int_equal(tl_gguf_writer_add_tensor(w, "a", TL_DTYPE_F32, 1, (int64_t[]){4}, x),
                     TL_ERR_INVALID_ARG);
    assert_non_null(strstr(tl_last_error(), "duplicate tensor name 'a'"));
    // Nesting deeper than the cap, and an unknown value type.
    struct tl_gguf_value lv[TL_GGUF_MAX_DEPTH + 1];
    lv[0] = (struct tl_gguf_value){.type = TL_GGUF_TYPE_ARRAY,
                                   .arr = {.elem_type = TL_GGUF_TYPE_UINT8, .n = 0}};
    for (int d = 1; d <= TL_GGUF_MAX_DEPTH; d++)
        lv[d] = (struct tl_gguf_value){
            .type = TL_GGUF_TYPE_ARRAY,
            .arr = {.elem_type = TL_GGUF_TYPE_ARRAY, .n = 1, .items = &lv[d - 1]}};
    assert_int_equal(tl_gguf_writer_set_value(w, "deep", &lv[TL_GGUF_MAX_DEPTH - 1]), TL_OK);
    assert_int_equal(tl_gguf_writer_set_value(w, "deep", &lv[TL_GGUF_MAX_DEPTH]),
                     TL_ERR_INVALID_ARG);
    struct tl_gguf_value bad = {.type = (enum tl_gguf_type)13};
    assert_int_equal(tl_gguf_writer_set_value(w, "bad", &bad), TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gguf_writer_set_arr(w, "bad", TL_GGUF_TYPE_STRING, NULL, 0),
                     TL_ERR_INVALID_ARG);
    assert_int_equal(tl_gguf_writer_set_u32(w, "general.alignment", 48), TL_OK);
    assert_int_equal(tl_gguf_writer_write(w, tl_test_tmpfile("x")), TL_ERR_INVALID_ARG);
    tl_gguf_writer_destroy(w);

    // A failing fill callback leaves no file behind.
    w = tl_gguf_writer_create();
    assert_int_equal(
        tl_gguf_writer_add_tensor_fill(w, "a", TL_DTYPE_F32, 1, (int64_t[]){4}, fill_fails, NULL),
        TL_OK);
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("fail.gguf"));
    assert_int_equal(tl_gguf_writer_write(w, path), TL_ERR_INVALID_ARG);
    assert_int_equal(access(path, F_OK), -1);
    // Unwritable destination.
    assert_int_equal(tl_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), TL_ERR_IO);
    tl_gguf_writer_destroy(w);
    tl_gguf_writer_destroy(NULL);
}

static void test_writer_alignment_64(void **state)
{
    (void)state;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    float x[3] = {1, 2, 3};
    assert_int_equal(tl_gguf_writer_set_u32(w, "general.alignment", 64), TL_OK);
    assert_int_equal(tl_gguf_writer_add_tensor(w, "a", TL_DTYPE_F32, 1, (int64_t[]){3}, x), TL_OK);
    assert_int_equal(tl_gguf_writer_add_tensor(w, "b", TL_DTYPE_F32, 1, (int64_t[]){3}, x), TL_OK);
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("a64.gguf"));
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(path, &g), TL_OK);
    assert_int_equal(tl_gguf_alignment(g), 64);
    assert_int_equal(tl_gguf_data_offset(g) % 64, 0);
    assert_int_equal(tl_gguf_find_tensor(g, "b")->offset, 64);
    assert_memory_equal(tl_gguf_find_tensor(g, "b")->data, x, sizeof(x));
    tl_gguf_close(g);
    unlink(path);
}

// ---- getters ------------------------------------------------------------------------------------

static void test_getter_conversions(void **state)
{
    (void)state;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    struct tl_gguf_value v;
    v = (struct tl_gguf_value){.type = TL_GGUF_TYPE_INT8, .i64 = -5};
    assert_int_equal(tl_gguf_writer_set_value(w, "neg", &v), TL_OK);
    v = (struct tl_gguf_value){.type = TL_GGUF_TYPE_UINT16, .u64 = 65535};
    assert_int_equal(tl_gguf_writer_set_value(w, "u16", &v), TL_OK);
    v = (struct tl_gguf_value){.type = TL_GGUF_TYPE_UINT64, .u64 = 1ull << 32};
    assert_int_equal(tl_gguf_writer_set_value(w, "big", &v), TL_OK);
    v = (struct tl_gguf_value){.type = TL_GGUF_TYPE_UINT64, .u64 = UINT64_MAX};
    assert_int_equal(tl_gguf_writer_set_value(w, "huge", &v), TL_OK);
    v = (struct tl_gguf_value){.type = TL_GGUF_TYPE_INT64, .i64 = INT64_MIN};
    assert_int_equal(tl_gguf_writer_set_value(w, "min", &v), TL_OK);
    v = (struct tl_gguf_value){.type = TL_GGUF_TYPE_FLOAT64, .f64 = 0.1};
    assert_int_equal(tl_gguf_writer_set_value(w, "f64", &v), TL_OK);
    assert_int_equal(tl_gguf_writer_set_bool(w, "flag", true), TL_OK);
    assert_int_equal(tl_gguf_writer_set_str(w, "s", "7"), TL_OK);
    static const uint64_t u64s[] = {UINT64_MAX, 3};
    assert_int_equal(tl_gguf_writer_set_arr(w, "au64", TL_GGUF_TYPE_UINT64, u64s, 2), TL_OK);
    static const int16_t i16s[] = {-7, 8};
    assert_int_equal(tl_gguf_writer_set_arr(w, "ai16", TL_GGUF_TYPE_INT16, i16s, 2), TL_OK);
    static const float f32s[] = {1.25f};
    assert_int_equal(tl_gguf_writer_set_arr(w, "af32", TL_GGUF_TYPE_FLOAT32, f32s, 1), TL_OK);
    const char *strs[] = {"a"};
    assert_int_equal(tl_gguf_writer_set_arr_str(w, "astr", strs, 1), TL_OK);
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("get.gguf"));
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);

    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open(path, &g), TL_OK);
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    struct tl_gguf_str s;
    assert_false(tl_gguf_get_u32(g, "neg", &u32)); // negative never fits unsigned
    assert_false(tl_gguf_get_u64(g, "neg", &u64));
    assert_true(tl_gguf_get_i64(g, "neg", &i64));
    assert_int_equal(i64, -5);
    assert_true(tl_gguf_get_f32(g, "neg", &f));
    assert_float_equal(f, -5.0f, 0);
    assert_true(tl_gguf_get_u32(g, "u16", &u32));
    assert_int_equal(u32, 65535);
    assert_false(tl_gguf_get_u32(g, "big", &u32)); // 2^32 does not fit
    assert_true(tl_gguf_get_u64(g, "big", &u64));
    assert_int_equal(u64, 1ull << 32);
    assert_true(tl_gguf_get_i64(g, "big", &i64));
    assert_false(tl_gguf_get_i64(g, "huge", &i64)); // > INT64_MAX
    assert_true(tl_gguf_get_i64(g, "min", &i64));
    assert_true(i64 == INT64_MIN);
    assert_true(tl_gguf_get_f32(g, "f64", &f));
    assert_float_equal(f, 0.1f, 0);
    assert_false(tl_gguf_get_u32(g, "f64", &u32));  // floats do not convert to integers
    assert_false(tl_gguf_get_u32(g, "flag", &u32)); // nor bools
    assert_true(tl_gguf_get_bool(g, "flag", &b));
    assert_true(b);
    assert_false(tl_gguf_get_bool(g, "u16", &b));
    assert_false(tl_gguf_get_str(g, "u16", &s));
    assert_false(tl_gguf_get_u32(g, "s", &u32)); // strings are not parsed
    assert_true(tl_gguf_get_str(g, "s", &s));
    assert_null(tl_gguf_get_arr(g, "s"));
    assert_false(tl_gguf_get_u32(g, NULL, &u32));

    const struct tl_gguf_value *a = tl_gguf_get_arr(g, "au64");
    double d;
    assert_false(tl_gguf_arr_i64(a, 0, &i64)); // UINT64_MAX does not fit int64
    assert_true(tl_gguf_arr_f64(a, 0, &d));
    assert_true(tl_gguf_arr_i64(a, 1, &i64));
    assert_int_equal(i64, 3);
    assert_false(tl_gguf_arr_i64(a, 2, &i64));
    a = tl_gguf_get_arr(g, "ai16");
    assert_true(tl_gguf_arr_i64(a, 0, &i64));
    assert_int_equal(i64, -7);
    assert_true(tl_gguf_arr_f64(a, 1, &d));
    assert_float_equal(d, 8.0, 0);
    a = tl_gguf_get_arr(g, "af32");
    assert_true(tl_gguf_arr_f64(a, 0, &d));
    assert_float_equal(d, 1.25, 0);
    assert_false(tl_gguf_arr_i64(a, 0, &i64)); // floats are not integers
    a = tl_gguf_get_arr(g, "astr");
    assert_false(tl_gguf_arr_f64(a, 0, &d)); // strings are not numeric
    assert_false(tl_gguf_arr_f64(NULL, 0, &d));
    tl_gguf_close(g);
    unlink(path);
}

// ---- handcrafted bad files ----------------------------------------------------------------------

static void test_bad_header(void **state)
{
    (void)state;
    static struct fb b;
    b.n = 0;
    expect_bad(&b, TL_ERR_FORMAT, "empty file");
    fb_raw(&b, "GGU", 3);
    expect_bad(&b, TL_ERR_FORMAT, "truncated");
    fb_header(&b, 3, 0, 0);
    memcpy(b.buf, "GGML", 4);
    expect_bad(&b, TL_ERR_FORMAT, "bad magic");
    fb_header(&b, 1, 0, 0);
    expect_bad(&b, TL_ERR_UNSUPPORTED, "unsupported GGUF version 1");
    fb_header(&b, 4, 0, 0);
    expect_bad(&b, TL_ERR_UNSUPPORTED, "unsupported GGUF version 4");
    fb_header(&b, 0x03000000, 0, 0);
    expect_bad(&b, TL_ERR_UNSUPPORTED, "big-endian");
    fb_header(&b, 3, 0, 1ull << 60);
    expect_bad(&b, TL_ERR_FORMAT, "key/value count 1152921504606846976");
    fb_header(&b, 3, 1ull << 60, 0);
    expect_bad(&b, TL_ERR_FORMAT, "tensor count");
    fb_header(&b, 2, 0, 0); // v2 with nothing in it is fine
    struct tl_gguf *g;
    assert_int_equal(open_fb(&b, &g), TL_OK);
    assert_int_equal(tl_gguf_version(g), 2);
    tl_gguf_close(g);
}

static void test_bad_metadata(void **state)
{
    (void)state;
    static struct fb b;
    // A count of 2^60 strings must fail before allocating anything.
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "arr");
    fb_u32(&b, TL_GGUF_TYPE_ARRAY);
    fb_u32(&b, TL_GGUF_TYPE_STRING);
    fb_u64(&b, 1ull << 60);
    fb_zeros(&b, 64);
    expect_bad(&b, TL_ERR_FORMAT, "key 'arr': array of 1152921504606846976 str elements");
    // Fixed-size elements whose byte count overflows size_t.
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "arr");
    fb_u32(&b, TL_GGUF_TYPE_ARRAY);
    fb_u32(&b, TL_GGUF_TYPE_UINT64);
    fb_u64(&b, 1ull << 62);
    expect_bad(&b, TL_ERR_FORMAT, "runs past the end");
    // A string longer than the file.
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "s");
    fb_u32(&b, TL_GGUF_TYPE_STRING);
    fb_u64(&b, 100);
    fb_raw(&b, "abc", 3);
    expect_bad(&b, TL_ERR_FORMAT, "truncated file: value at offset");
    // Unknown value type, unknown element type.
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "k");
    fb_u32(&b, 13);
    fb_u32(&b, 0);
    expect_bad(&b, TL_ERR_FORMAT, "key 'k': unknown value type 13");
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "k");
    fb_u32(&b, TL_GGUF_TYPE_ARRAY);
    fb_u32(&b, 99);
    fb_u64(&b, 0);
    expect_bad(&b, TL_ERR_FORMAT, "unknown array element type 99");
    // Duplicate keys.
    fb_header(&b, 3, 0, 2);
    fb_kv_u32(&b, "general.x", 1);
    fb_kv_u32(&b, "general.x", 2);
    expect_bad(&b, TL_ERR_FORMAT, "duplicate key 'general.x'");
    // A key with control characters is quoted on one line.
    fb_header(&b, 3, 0, 2);
    fb_kv_u32(&b, "a\nb", 1);
    fb_kv_u32(&b, "a\nb", 2);
    expect_bad(&b, TL_ERR_FORMAT, "duplicate key 'a?b'");
    // general.alignment: wrong type, not a power of two, zero.
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "general.alignment");
    fb_u32(&b, TL_GGUF_TYPE_UINT64);
    fb_u64(&b, 32);
    expect_bad(&b, TL_ERR_FORMAT, "general.alignment has type u64, expected u32");
    fb_header(&b, 3, 0, 1);
    fb_kv_u32(&b, "general.alignment", 48);
    expect_bad(&b, TL_ERR_FORMAT, "general.alignment 48 is not a power of two");
    fb_header(&b, 3, 0, 1);
    fb_kv_u32(&b, "general.alignment", 0);
    expect_bad(&b, TL_ERR_FORMAT, "general.alignment 0 is not a power of two");
}

// Writes an array nested `levels` deep ([[[...[]...]]]) as the value of key "n".
static void fb_nested(struct fb *b, int levels)
{
    fb_header(b, 3, 0, 1);
    fb_str(b, "n");
    fb_u32(b, TL_GGUF_TYPE_ARRAY);
    for (int l = 1; l < levels; l++) {
        fb_u32(b, TL_GGUF_TYPE_ARRAY);
        fb_u64(b, 1);
    }
    fb_u32(b, TL_GGUF_TYPE_UINT8);
    fb_u64(b, 0);
}

static void test_nesting_depth_cap(void **state)
{
    (void)state;
    static struct fb b;
    fb_nested(&b, TL_GGUF_MAX_DEPTH);
    struct tl_gguf *g;
    assert_int_equal(open_fb(&b, &g), TL_OK);
    const struct tl_gguf_value *v = tl_gguf_get(g, "n");
    for (int l = 1; l < TL_GGUF_MAX_DEPTH; l++) {
        assert_int_equal(v->arr.elem_type, TL_GGUF_TYPE_ARRAY);
        assert_int_equal(v->arr.n, 1);
        v = &v->arr.items[0];
    }
    assert_int_equal(v->arr.elem_type, TL_GGUF_TYPE_UINT8);
    tl_gguf_close(g);
    fb_nested(&b, TL_GGUF_MAX_DEPTH + 1);
    expect_bad(&b, TL_ERR_FORMAT, "arrays nested deeper than 16 levels");
    // A deep nest that lies about its count still fails cleanly (no recursion blow-up).
    fb_header(&b, 3, 0, 1);
    fb_str(&b, "n");
    fb_u32(&b, TL_GGUF_TYPE_ARRAY);
    for (int l = 0; l < 1000; l++) {
        fb_u32(&b, TL_GGUF_TYPE_ARRAY);
        fb_u64(&b, 1);
    }
    expect_bad(&b, TL_ERR_FORMAT, "nested deeper");
}

static void test_bad_tensors(void **state)
{
    (void)state;
    static struct fb b;
    // Sanity: the builder makes a good file.
    fb_one_tensor(&b, 2, (uint64_t[]){4, 2}, TL_DTYPE_F32, 0, 32);
    struct tl_gguf *g;
    assert_int_equal(open_fb(&b, &g), TL_OK);
    assert_int_equal(tl_gguf_find_tensor(g, "t")->n_bytes, 32);
    tl_gguf_close(g);

    fb_one_tensor(&b, 0, NULL, TL_DTYPE_F32, 0, 32);
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't' has 0 dimensions (must be 1 to 4)");
    fb_one_tensor(&b, 5, (uint64_t[]){1, 1, 1, 1, 1}, TL_DTYPE_F32, 0, 32);
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't' has 5 dimensions");
    fb_one_tensor(&b, 2, (uint64_t[]){4, (uint64_t)-3}, TL_DTYPE_F32, 0, 32);
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't' has a negative dimension ne[1] = -3");
    fb_one_tensor(&b, 3, (uint64_t[]){1ull << 32, 1ull << 31, 4}, TL_DTYPE_F32, 0, 32);
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't': element count overflows");
    fb_one_tensor(&b, 2, (uint64_t[]){1ull << 61, 2}, TL_DTYPE_F32, 0, 32); // bytes overflow
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't': byte size overflows");
    fb_one_tensor(&b, 1, (uint64_t[]){4}, 77, 0, 32);
    expect_bad(&b, TL_ERR_FORMAT, "unknown tensor type 77 for tensor 't'");
    fb_one_tensor(&b, 1, (uint64_t[]){4}, 4, 0, 32); // Q4_2, removed from ggml
    expect_bad(&b, TL_ERR_FORMAT, "unknown tensor type 4 for tensor 't'");
    fb_one_tensor(&b, 2, (uint64_t[]){33, 2}, TL_DTYPE_Q8_0, 0, 128);
    expect_bad(&b, TL_ERR_FORMAT,
               "tensor 't': ne[0] = 33 is not a multiple of the Q8_0 block "
               "size 32");
    fb_one_tensor(&b, 2, (uint64_t[]){288, 2}, TL_DTYPE_IQ4_XS, 0, 1024);
    expect_bad(&b, TL_ERR_FORMAT,
               "tensor 't': ne[0] = 288 is not a multiple of the IQ4_XS block size 256");
    fb_one_tensor(&b, 1, (uint64_t[]){4}, TL_DTYPE_F32, 8, 32);
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't' offset 8 is not a multiple of the alignment 32");
    fb_one_tensor(&b, 1, (uint64_t[]){16}, TL_DTYPE_F32, 0, 63);
    expect_bad(&b, TL_ERR_FORMAT, "tensor 't' data (offset 0, 64 bytes) extends past the end");
    fb_one_tensor(&b, 1, (uint64_t[]){4}, TL_DTYPE_F32, 1ull << 63, 32);
    expect_bad(&b, TL_ERR_FORMAT, "extends past the end");

    // Duplicate names; overlapping data.
    fb_header(&b, 3, 2, 0);
    fb_tensor(&b, "w", 1, (uint64_t[]){8}, TL_DTYPE_F32, 0);
    fb_tensor(&b, "w", 1, (uint64_t[]){8}, TL_DTYPE_F32, 32);
    fb_pad(&b, 32);
    fb_zeros(&b, 64);
    expect_bad(&b, TL_ERR_FORMAT, "duplicate tensor name 'w'");
    fb_header(&b, 3, 3, 0);
    fb_tensor(&b, "a", 1, (uint64_t[]){32}, TL_DTYPE_F32, 0);  // [0, 128)
    fb_tensor(&b, "b", 1, (uint64_t[]){8}, TL_DTYPE_F32, 128); // [128, 160)
    fb_tensor(&b, "c", 1, (uint64_t[]){8}, TL_DTYPE_F32, 96);  // [96, 128): inside a
    fb_pad(&b, 32);
    fb_zeros(&b, 160);
    expect_bad(&b, TL_ERR_FORMAT, "tensors 'a' and 'c' overlap");
    // Touching is not overlapping.
    fb_header(&b, 3, 2, 0);
    fb_tensor(&b, "a", 1, (uint64_t[]){8}, TL_DTYPE_F32, 32);
    fb_tensor(&b, "b", 1, (uint64_t[]){8}, TL_DTYPE_F32, 0);
    fb_pad(&b, 32);
    fb_zeros(&b, 64);
    assert_int_equal(open_fb(&b, &g), TL_OK);
    tl_gguf_close(g);
    // Truncated inside the tensor table.
    fb_header(&b, 3, 1, 0);
    fb_str(&b, "a_longer_tensor_name");
    fb_u32(&b, 2);
    fb_u64(&b, 4);
    expect_bad(&b, TL_ERR_FORMAT, "truncated file: tensor dimensions");
}

static void test_open_path_errors(void **state)
{
    (void)state;
    struct tl_gguf *g = (struct tl_gguf *)1;
    check_error(tl_gguf_open("/nonexistent/model.gguf", &g), TL_ERR_IO, "/nonexistent/model.gguf",
                "cannot open");
    assert_null(g);
    check_error(tl_gguf_open("/tmp", &g), TL_ERR_IO, "/tmp", "not a regular file");
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("empty.gguf"));
    write_whole(path, "", 0);
    check_error(tl_gguf_open(path, &g), TL_ERR_FORMAT, path, "empty file");
    unlink(path);
    tl_gguf_close(NULL);
}

// ---- truncation, byte flips, allocation failures ------------------------------------------------

static size_t make_roundtrip_bytes(uint8_t **out, char *path)
{
    struct rt_expect exp[40];
    build_roundtrip_file(path, exp);
    size_t size;
    *out = read_whole(path, &size);
    return size;
}

static void test_truncation_every_offset(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("trunc.gguf"));
    uint8_t *full;
    size_t size = make_roundtrip_bytes(&full, path);
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open_mem(full, size, "rt.gguf", &g), TL_OK);
    size_t data_end = 0; // end of the last tensor's data: any shorter prefix is incomplete
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        if (tl_gguf_data_offset(g) + t->offset + t->n_bytes > data_end)
            data_end = tl_gguf_data_offset(g) + t->offset + t->n_bytes;
    }
    tl_gguf_close(g);
    assert_true(data_end <= size && data_end > size - 32);
    for (size_t len = 0; len < size; len++) {
        // An exact-size copy, so a sanitizer build catches any read past the end.
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, full, len);
        tl_status rc = tl_gguf_open_mem(cut, len, "cut.gguf", &g);
        if (len < data_end) {
            if (rc != TL_ERR_FORMAT) fail_msg("prefix of %zu bytes: status %d", len, rc);
            check_error(rc, TL_ERR_FORMAT, "cut.gguf", NULL);
        } else {
            assert_int_equal(rc, TL_OK); // only trailing padding is missing
            tl_gguf_close(g);
        }
        free(cut);
    }
    // The same through real files, sampled, to see the path in the message.
    char cut_path[256];
    snprintf(cut_path, sizeof(cut_path), "%s", tl_test_tmpfile("cut.gguf"));
    for (size_t len = 1; len < data_end; len += 97) {
        write_whole(cut_path, full, len);
        check_error(tl_gguf_open(cut_path, &g), TL_ERR_FORMAT, cut_path, "");
    }
    unlink(cut_path);
    free(full);
    unlink(path);
}

// Reads everything an opened file exposes, so a bad pointer would be caught.
static uint64_t touch_all(const struct tl_gguf *g)
{
    uint64_t sum = 0;
    for (int64_t i = 0; i < tl_gguf_n_kv(g); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, i);
        for (uint64_t k = 0; k < kv->key.len; k++)
            sum += (uint8_t)kv->key.ptr[k];
        const struct tl_gguf_value *v = &kv->value;
        if (v->type == TL_GGUF_TYPE_ARRAY)
            for (uint64_t k = 0; k < v->arr.n; k++) {
                double d;
                if (tl_gguf_arr_f64(v, k, &d))
                    sum += (uint64_t)(d != 0);
                else if (v->arr.elem_type == TL_GGUF_TYPE_STRING)
                    sum += v->arr.items[k].str.len ? (uint8_t)v->arr.items[k].str.ptr[0] : 0;
            }
    }
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        if (t->n_bytes)
            sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
    }
    return sum;
}

static void test_random_byte_flips(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("flip.gguf"));
    uint8_t *full;
    size_t size = make_roundtrip_bytes(&full, path);
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open_mem(full, size, "x", &g), TL_OK);
    size_t meta_end = tl_gguf_data_offset(g); // flips in tensor bytes are always harmless
    tl_gguf_close(g);
    uint8_t *buf = malloc(size);
    uint64_t seed = 12345;
    int n_ok = 0, n_bad = 0;
    for (int iter = 0; iter < 5000; iter++) {
        memcpy(buf, full, size);
        int n_flips = 1 + (int)(tl_splitmix64(&seed) % 4);
        for (int k = 0; k < n_flips; k++) {
            size_t at = (size_t)(tl_splitmix64(&seed) % meta_end);
            uint64_t r = tl_splitmix64(&seed);
            // Mix single-bit flips with byte overwrites that favour extreme values.
            buf[at] = (r & 3) == 0   ? 0xff
                      : (r & 3) == 1 ? 0
                                     : buf[at] ^ (uint8_t)(1u << (r >> 8) % 8);
        }
        tl_status rc = tl_gguf_open_mem(buf, size, "flip.gguf", &g);
        if (rc == TL_OK) {
            (void)touch_all(g);
            tl_gguf_close(g);
            n_ok++;
        } else {
            check_error(rc, rc, "flip.gguf", NULL);
            assert_true(rc == TL_ERR_FORMAT || rc == TL_ERR_UNSUPPORTED);
            n_bad++;
        }
    }
    // Both outcomes must occur, or the test is not exercising anything.
    assert_true(n_ok > 100);
    assert_true(n_bad > 100);
    free(buf);
    free(full);
    unlink(path);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof(path), "%s", tl_test_tmpfile("oom.gguf"));
    uint8_t *full;
    size_t size = make_roundtrip_bytes(&full, path);
    int n_failed = 0;
    for (long n = 1; n < 200; n++) {
        struct tl_gguf *g;
        tl_alloc_fail_after(n);
        tl_status rc = tl_gguf_open_mem(full, size, "oom.gguf", &g);
        tl_alloc_fail_after(0);
        if (rc == TL_OK) {
            tl_gguf_close(g);
            break;
        }
        check_error(rc, TL_ERR_NOMEM, "oom.gguf", "out of memory");
        n_failed++;
    }
    assert_true(n_failed >= 5); // the file has several string/array values to allocate
    free(full);
    unlink(path);
}

TL_TEST_MAIN(
    cmocka_unit_test(test_read_stories260k), cmocka_unit_test(test_read_llama2_tiny_random),
    cmocka_unit_test(test_read_vocab_files), cmocka_unit_test(test_writer_roundtrip_every_type),
    cmocka_unit_test(test_writer_copies_tokenizer), cmocka_unit_test(test_writer_rejects_bad_input),
    cmocka_unit_test(test_writer_alignment_64), cmocka_unit_test(test_getter_conversions),
    cmocka_unit_test(test_bad_header), cmocka_unit_test(test_bad_metadata),
    cmocka_unit_test(test_nesting_depth_cap), cmocka_unit_test(test_bad_tensors),
    cmocka_unit_test(test_open_path_errors), cmocka_unit_test(test_truncation_every_offset),
    cmocka_unit_test(test_random_byte_flips), cmocka_unit_test(test_allocation_failures))
