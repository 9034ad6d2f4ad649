/*
 * Tests for src/model: the forward pass against llama2.c's reference logits for stories260K, the
 * reference greedy sequence, batch/chunk invariance (bit-identical logits however the tokens are
 * batched), the llama2.c checkpoint path, the F16 random model, and bad model files.
 */
#include "tl_test.h"

#include "core/alloc.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <math.h>

#define N_REF_POS 21
#define N_VOCAB_260K 512

// The reference sequence of PROVENANCE.md (BOS, prompt, 128 greedy tokens).
static const int32_t ref_ids[] = {
    1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
    396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358,
    394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398,
    312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336, 432, 313, 438,
    310, 432, 278, 316, 439, 419, 298, 414, 267, 265, 282, 295, 433, 426, 436, 317, 286, 296,
    418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426, 338, 336,
    432, 313, 442, 391, 267, 337, 335, 364, 420, 268, 388, 432, 398, 359, 280, 303, 439, 413,
    272, 417, 264};
#define N_REF_IDS ((int)(sizeof(ref_ids) / sizeof(ref_ids[0])))

// ---- a minimal paged KV store for driving tl_forward_run directly -------------------------------

struct kv_fixture {
    struct tl_kv_pages pages;
    struct tl_kv_layer layers[64];
    int32_t tables[8][256]; // block tables of up to 8 sequences
};

static void kv_init(struct kv_fixture *kv, const struct tl_model *m, enum tl_dtype type,
                    int block_size, int n_blocks)
{
    memset(kv, 0, sizeof(*kv));
    assert_true(m->hp.n_layer <= 64);
    size_t elems = (size_t)n_blocks * block_size * m->hp.n_head_kv * m->hp.head_dim;
    size_t esize = type == TL_DTYPE_F16 ? 2 : 4;
    for (int l = 0; l < m->hp.n_layer; l++) {
        kv->layers[l] = (struct tl_kv_layer){.type = type, .block_size = block_size,
                                             .n_kv_head = m->hp.n_head_kv,
                                             .head_dim = m->hp.head_dim};
        kv->layers[l].k = tl_aligned_alloc(elems * esize);
        kv->layers[l].v = tl_aligned_alloc(elems * esize);
        assert_non_null(kv->layers[l].k);
        memset(kv->layers[l].k, 0, elems * esize);
        memset(kv->layers[l].v, 0, elems * esize);
    }
    kv->pages.n_layer = m->hp.n_layer;
    kv->pages.layers = kv->layers;
    // Sequence s owns blocks s, s + 8, s + 16, ...: interleaved so tables really matter.
    for (int s = 0; s < 8; s++)
        for (int j = 0; j < 256; j++) kv->tables[s][j] = (s + 8 * j) % n_blocks;
}

static void kv_free(struct kv_fixture *kv)
{
    for (int l = 0; l < kv->pages.n_layer; l++) {
        tl_aligned_free(kv->layers[l].k);
        tl_aligned_free(kv->layers[l].v);
    }
}

static struct tl_model *load(const char *rel)
{
    struct tl_model *m = NULL;
    tl_status rc = tl_model_load(tl_test_shared(rel), NULL, &m);
    if (rc) fail_msg("load %s: %s", rel, tl_last_error());
    return m;
}

// Runs tokens [from, to) of a single sequence (seq slot `s`) as one batch; logits for all rows.
static void run_chunk(struct tl_forward *f, struct kv_fixture *kv, int s, const int32_t *ids,
                      int from, int to, float *logits)
{
    int n = to - from;
    int32_t pos[512], seq[512], out[512];
    const int32_t *tables[8];
    for (int i = 0; i < 8; i++) tables[i] = kv->tables[i];
    for (int i = 0; i < n; i++) pos[i] = from + i, seq[i] = s, out[i] = i;
    struct tl_batch b = {.n_tok = n, .token = ids + from, .pos = pos, .seq = seq,
                         .block_tables = tables, .n_out = n, .out_idx = out};
    tl_status rc = tl_forward_run(f, &b, &kv->pages, logits);
    if (rc) fail_msg("forward: %s", tl_last_error());
}

// Reads the reference logits file: ids[pos] and logits[pos][512].
static void read_ref_logits(int32_t *ids, float *logits)
{
    FILE *fp = fopen(tl_test_shared("models/stories260K.logits.txt"), "r");
    assert_non_null(fp);
    char line[16384];
    int pos = 0;
    while (fgets(line, sizeof(line), fp) && pos < N_REF_POS) {
        if (line[0] == '#') continue;
        char *p = line;
        long got_pos = strtol(p, &p, 10);
        assert_int_equal(got_pos, pos);
        ids[pos] = (int32_t)strtol(p, &p, 10);
        for (int i = 0; i < N_VOCAB_260K; i++) logits[pos * N_VOCAB_260K + i] = strtof(p, &p);
        pos++;
    }
    fclose(fp);
    assert_int_equal(pos, N_REF_POS);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void compare_to_ref(const float *got, const float *ref, int n_pos, double tol)
{
    for (int p = 0; p < n_pos; p++) {
        double maxabs = 0;
        for (int i = 0; i < N_VOCAB_260K; i++) maxabs = fmax(maxabs, fabs(ref[p * N_VOCAB_260K + i]));
        for (int i = 0; i < N_VOCAB_260K; i++)
            TL_ASSERT_NEAR(got[p * N_VOCAB_260K + i], ref[p * N_VOCAB_260K + i], tol * maxabs,
                           p * N_VOCAB_260K + i);
    }
}


// ---- bad model files: stories260K rewritten with one thing wrong ----------------------------------

enum mutation { DROP_KEY, SET_KEY_U32, SET_ARCH, DROP_TENSOR, RESHAPE_TENSOR };

// Writes a copy of stories260K.gguf to a temp file with one mutation applied to `name`.
static const char *write_mutant(enum mutation mu, const char *name, uint32_t value)
{
    struct tl_gguf *g = NULL;
    assert_int_equal(tl_gguf_open(tl_test_shared("models/stories260K.gguf"), &g), TL_OK);
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    for (int64_t i = 0; i < tl_gguf_n_kv(g); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        bool match = !strcmp(key, name);
        if (match && mu == DROP_KEY) continue;
        if (match && mu == SET_KEY_U32) assert_int_equal(tl_gguf_writer_set_u32(w, key, value), 0);
        else if (!strcmp(key, "general.architecture") && mu == SET_ARCH)
            assert_int_equal(tl_gguf_writer_set_str(w, key, name), 0);
        else assert_int_equal(tl_gguf_writer_set_value(w, key, &kv->value), 0);
    }
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        char tname[128];
        snprintf(tname, sizeof(tname), "%.*s", (int)t->name.len, t->name.ptr);
        bool match = !strcmp(tname, name);
        if (match && mu == DROP_TENSOR) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (match && mu == RESHAPE_TENSOR) { // same bytes, transposed shape
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        assert_int_equal(tl_gguf_writer_add_tensor(w, tname, t->type, t->n_dims, ne, t->data), 0);
    }
    const char *path = tl_test_tmpfile("mutant.gguf");
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);
    tl_gguf_close(g);
    return path;
}

static void expect_load_error(const char *path, tl_status want, const char *needle)
{
    struct tl_model *m = NULL;
    tl_status rc = tl_model_load(path, NULL, &m);
    if (rc != want || !strstr(tl_last_error(), needle) || !strstr(tl_last_error(), path))
        fail_msg("want status %d with '%s', got %d: %s", want, needle, rc, tl_last_error());
    assert_null(m);
    assert_null(strchr(tl_last_error(), '\n'));
    unlink(path);
}

static void test_bad_model_files(void **state)
{
    (void)state;
    expect_load_error(write_mutant(DROP_KEY, "llama.block_count", 0), TL_ERR_FORMAT,
                      "llama.block_count");
    expect_load_error(write_mutant(DROP_KEY, "general.architecture", 0), TL_ERR_FORMAT,
                      "general.architecture");
    expect_load_error(write_mutant(SET_ARCH, "gpt-j", 0), TL_ERR_UNSUPPORTED, "gpt-j");
    expect_load_error(write_mutant(DROP_KEY, "tokenizer.ggml.tokens", 0), TL_ERR_FORMAT,
                      "tokenizer.ggml.tokens");
    expect_load_error(write_mutant(DROP_TENSOR, "blk.3.ffn_up.weight", 0), TL_ERR_FORMAT,
                      "blk.3.ffn_up.weight");
    expect_load_error(write_mutant(RESHAPE_TENSOR, "blk.1.ffn_down.weight", 0), TL_ERR_FORMAT,
                      "blk.1.ffn_down.weight");
    expect_load_error(write_mutant(SET_KEY_U32, "llama.attention.head_count_kv", 3), TL_ERR_FORMAT,
                      "head count");
    expect_load_error(write_mutant(SET_KEY_U32, "llama.feed_forward_length", 100), TL_ERR_FORMAT,
                      "shape");
    expect_load_error(write_mutant(SET_KEY_U32, "llama.embedding_length", 96), TL_ERR_UNSUPPORTED,
                      "rope dimensions 8");
    expect_load_error(write_mutant(SET_KEY_U32, "llama.block_count", 6), TL_ERR_FORMAT,
                      "blk.5");
    expect_load_error(write_mutant(SET_KEY_U32, "llama.block_count", 0), TL_ERR_FORMAT, "block");
}

// ---- tests ---------------------------------------------------------------------------------------

static void test_stories_hparams(void **state)
{
    (void)state;
    struct tl_model *m = load("models/stories260K.gguf");
    assert_int_equal(m->hp.n_embd, 64);
    assert_int_equal(m->hp.n_layer, 5);
    assert_int_equal(m->hp.n_head, 8);
    assert_int_equal(m->hp.n_head_kv, 4);
    assert_int_equal(m->hp.n_ff, 172);
    assert_int_equal(m->hp.n_vocab, 512);
    assert_int_equal(m->hp.head_dim, 8);
    struct tl_model_info info;
    tl_model_get_info(m, &info);
    assert_string_equal(info.arch, "llama");
    assert_int_equal(info.bos, 1);
    tl_model_destroy(m);
}

// Prefill of all 21 positions at once, decode one at a time and odd chunks all match llama2.c's
// logits, and match each other bit for bit.
static void check_ref_logits(const char *rel, enum tl_dtype kv_type, double tol)
{
    int32_t ids[N_REF_POS];
    float *ref = malloc(sizeof(float) * N_REF_POS * N_VOCAB_260K);
    float *all = malloc(sizeof(float) * N_REF_POS * N_VOCAB_260K);
    float *one = malloc(sizeof(float) * N_REF_POS * N_VOCAB_260K);
    float *chunked = malloc(sizeof(float) * N_REF_POS * N_VOCAB_260K);
    read_ref_logits(ids, ref);
    struct tl_model *m = load(rel);
    struct tl_pool *pool = tl_pool_create(2);
    struct tl_forward *f = tl_forward_create(m, 64, 512, pool);
    assert_non_null(f);
    struct kv_fixture kv;
    kv_init(&kv, m, kv_type, 4, 64);

    run_chunk(f, &kv, 0, ids, 0, N_REF_POS, all);
    for (int p = 0; p < N_REF_POS; p++) run_chunk(f, &kv, 1, ids, p, p + 1, one + p * N_VOCAB_260K);
    const int cuts[] = {0, 3, 8, 9, 16, N_REF_POS};
    for (int c = 0; c + 1 < 6; c++)
        run_chunk(f, &kv, 2, ids, cuts[c], cuts[c + 1], chunked + cuts[c] * N_VOCAB_260K);

    compare_to_ref(all, ref, N_REF_POS, tol);
    size_t bytes = sizeof(float) * N_REF_POS * N_VOCAB_260K;
    assert_memory_equal(all, one, bytes);
    assert_memory_equal(all, chunked, bytes);
    kv_free(&kv);
    tl_forward_destroy(f);
    tl_pool_destroy(pool);
    tl_model_destroy(m);
    free(ref), free(all), free(one), free(chunked);
}

static void test_logits_match_llama2c_reference(void **state)
{
    (void)state;
    check_ref_logits("models/stories260K.gguf", TL_DTYPE_F32, 1e-4);
}

static void test_logits_with_f16_kv(void **state)
{
    (void)state;
    check_ref_logits("models/stories260K.gguf", TL_DTYPE_F16, 2e-3);
}

static void test_llama2c_checkpoint_matches_gguf(void **state)
{
    (void)state;
    check_ref_logits("models/stories260K.bin", TL_DTYPE_F32, 1e-4);
}

// Greedy decoding reproduces the 128-token reference sequence, for both file formats.
static void greedy_reference(const char *rel, enum tl_dtype kv_type)
{
    struct tl_model *m = load(rel);
    struct tl_forward *f = tl_forward_create(m, 16, 512, NULL);
    struct kv_fixture kv;
    kv_init(&kv, m, kv_type, 16, 128);
    int32_t seq[N_REF_IDS];
    float logits[5 * N_VOCAB_260K];
    memcpy(seq, ref_ids, 5 * sizeof(int32_t));
    run_chunk(f, &kv, 0, seq, 0, 5, logits);
    int32_t next = argmax(logits + 4 * N_VOCAB_260K, N_VOCAB_260K);
    for (int p = 5; p < N_REF_IDS; p++) {
        seq[p] = next;
        if (seq[p] != ref_ids[p]) fail_msg("%s: position %d: got %d, want %d", rel, p, seq[p], ref_ids[p]);
        run_chunk(f, &kv, 0, seq, p, p + 1, logits);
        next = argmax(logits, N_VOCAB_260K);
    }
    kv_free(&kv);
    tl_forward_destroy(f);
    tl_model_destroy(m);
}

static void test_greedy_reference_sequence(void **state)
{
    (void)state;
    greedy_reference("models/stories260K.gguf", TL_DTYPE_F32);
    greedy_reference("models/stories260K.bin", TL_DTYPE_F32);
    greedy_reference("models/stories260K.gguf", TL_DTYPE_F16);
}

// Two sequences interleaved in one batch give each the logits it gets alone.
static void test_mixed_batch_is_bit_identical(void **state)
{
    (void)state;
    struct tl_model *m = load("models/stories260K.gguf");
    struct tl_pool *pool = tl_pool_create(3);
    struct tl_forward *f = tl_forward_create(m, 64, 512, pool);
    struct kv_fixture kv;
    kv_init(&kv, m, TL_DTYPE_F32, 16, 64);
    const int n_a = 12, n_b = 7;
    const int32_t *a = ref_ids, *bb = ref_ids + 20;
    float alone_a[12 * N_VOCAB_260K], alone_b[7 * N_VOCAB_260K];
    run_chunk(f, &kv, 0, a, 0, n_a, alone_a);
    run_chunk(f, &kv, 1, bb, 0, n_b, alone_b);
    // Now both in one batch, sequences 2 and 3, tokens interleaved, outputs in a shuffled order.
    int32_t tok[19], pos[19], sq[19], out[19];
    int n = 0, ia = 0, ib = 0;
    for (; n < n_a + n_b; n++) {
        bool take_a = ib >= n_b || (ia < n_a && n % 3 != 2);
        if (take_a) tok[n] = a[ia], pos[n] = ia, sq[n] = 2, ia++;
        else tok[n] = bb[ib], pos[n] = ib, sq[n] = 3, ib++;
    }
    for (int i = 0; i < n; i++) out[i] = n - 1 - i;
    const int32_t *tables[8];
    for (int i = 0; i < 8; i++) tables[i] = kv.tables[i];
    struct tl_batch b = {.n_tok = n, .token = tok, .pos = pos, .seq = sq, .block_tables = tables,
                         .n_out = n, .out_idx = out};
    float *mixed = malloc(sizeof(float) * n * N_VOCAB_260K);
    assert_int_equal(tl_forward_run(f, &b, &kv.pages, mixed), TL_OK);
    for (int i = 0; i < n; i++) {
        int t = out[i];
        const float *want = sq[t] == 2 ? alone_a + pos[t] * N_VOCAB_260K : alone_b + pos[t] * N_VOCAB_260K;
        assert_memory_equal(mixed + i * N_VOCAB_260K, want, sizeof(float) * N_VOCAB_260K);
    }
    free(mixed);
    kv_free(&kv);
    tl_forward_destroy(f);
    tl_pool_destroy(pool);
    tl_model_destroy(m);
}

static void test_tiny_random_f16_model_runs(void **state)
{
    (void)state;
    struct tl_model *m = load("models/llama-2-tiny-random.gguf");
    assert_int_equal(m->hp.n_vocab, 32000);
    assert_int_equal(m->layers[0].wq.type, TL_DTYPE_F16);
    struct tl_forward *f = tl_forward_create(m, 8, 64, NULL);
    struct kv_fixture kv;
    kv_init(&kv, m, TL_DTYPE_F16, 16, 16);
    const int32_t ids[4] = {1, 15043, 3186, 29991};
    float *logits = malloc(sizeof(float) * 4 * 32000), *one = malloc(sizeof(float) * 4 * 32000);
    run_chunk(f, &kv, 0, ids, 0, 4, logits);
    for (int i = 0; i < 4 * 32000; i++) assert_true(isfinite(logits[i]));
    // The same last position decoded alone (after re-prefilling 3 tokens) is bit-identical.
    run_chunk(f, &kv, 1, ids, 0, 3, one);
    run_chunk(f, &kv, 1, ids, 3, 4, one);
    assert_memory_equal(one, logits + 3 * 32000, sizeof(float) * 32000);
    free(logits), free(one);
    kv_free(&kv);
    tl_forward_destroy(f);
    tl_model_destroy(m);
}

static void test_bad_batch_rejected(void **state)
{
    (void)state;
    struct tl_model *m = load("models/stories260K.gguf");
    struct tl_forward *f = tl_forward_create(m, 8, 64, NULL);
    struct kv_fixture kv;
    kv_init(&kv, m, TL_DTYPE_F32, 16, 16);
    const int32_t *tables[8];
    for (int i = 0; i < 8; i++) tables[i] = kv.tables[i];
    int32_t tok[1] = {9999}, pos[1] = {0}, sq[1] = {0}, out[1] = {0};
    struct tl_batch b = {.n_tok = 1, .token = tok, .pos = pos, .seq = sq, .block_tables = tables,
                         .n_out = 1, .out_idx = out};
    float logits[N_VOCAB_260K];
    assert_int_equal(tl_forward_run(f, &b, &kv.pages, logits), TL_ERR_INVALID_ARG);
    tok[0] = 1, pos[0] = 64;
    assert_int_equal(tl_forward_run(f, &b, &kv.pages, logits), TL_ERR_INVALID_ARG);
    kv_free(&kv);
    tl_forward_destroy(f);
    tl_model_destroy(m);
}

static void test_missing_file_error(void **state)
{
    (void)state;
    struct tl_model *m = NULL;
    assert_int_equal(tl_model_load("/nonexistent/x.gguf", NULL, &m), TL_ERR_IO);
    assert_null(m);
    assert_non_null(strstr(tl_last_error(), "/nonexistent/x.gguf"));
}

TL_TEST_MAIN(cmocka_unit_test(test_stories_hparams),
             cmocka_unit_test(test_logits_match_llama2c_reference),
             cmocka_unit_test(test_logits_with_f16_kv),
             cmocka_unit_test(test_llama2c_checkpoint_matches_gguf),
             cmocka_unit_test(test_greedy_reference_sequence),
             cmocka_unit_test(test_mixed_batch_is_bit_identical),
             cmocka_unit_test(test_tiny_random_f16_model_runs),
             cmocka_unit_test(test_bad_batch_rejected), cmocka_unit_test(test_missing_file_error),
             cmocka_unit_test(test_bad_model_files))
