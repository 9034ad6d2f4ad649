/*
 * The device engine backend (src/gpu/backend_vk.c) against the CPU forward pass
 * (src/model/forward.c), on the test device (lavapipe in CI; TAP skips without one), over the
 * real stories260K model (F32 weights), the same model with random Q8_0 q/k/v/o/gate/up
 * matrices (rows layout; ffn_down stays F32: 172 inputs are not whole Q8_0 blocks), and the
 * same model run as qwen2 (NEOX RoPE, random q/k/v biases: the bias add and the other RoPE
 * pairing on the device; F32 KV, the F32 tolerance below).
 *
 * Steps, through the same block tables on both sides (F16 KV, blocks out of order): a 20-token
 * prefill of sequence A (all rows out), then a mixed step (A decodes, B prefills 6 tokens),
 * then both decode. Checked:
 * - every logit row is within the tolerance of the CPU's, and the argmax is the same;
 * - a row is bit-identical alone and inside the batch (the decode of A and of B rerun alone;
 *   the K/V they rewrite are the same bytes, so the pool is unchanged);
 * - each step is one submission and one wait; the bytes uploaded are exactly the step's token
 *   ids, positions, token table and output rows (no weight byte crosses after load) and the
 *   bytes downloaded are exactly the output rows' logits.
 *
 * Tolerance (per row, relative to the row's max |logit|), measured values in brackets:
 * - F32 weights, F32 KV: 1e-5 against the CPU [8e-7] and 1e-4 against llama2.c's logits
 *   (stories260K.logits.txt, positions 0..20: the independent oracle; 1e-4 is test_model's bar
 *   for the CPU) [9e-7]. The sides differ only in f32 rounding: sums in another order (SIMD lanes
 *   vs the device's per-lane + tree order; norms in double on the CPU) and the device's exp
 *   (3 + 2|x| ULP) in softmax and SiLU: a few ULP per op, ~1e-6 after 5 layers. Argmax equal.
 * - F32 weights, F16 KV: 2e-3 against both [3e-4 vs the CPU, 8e-4 vs llama2.c]: a K/V element
 *   whose f32 value differs by an ULP can round to the other f16 neighbour (2^-11 relative), so
 *   the sides differ by up to the F16 KV error itself, which test_model bounds by 2e-3 against
 *   llama2.c for the CPU. (Rows whose context holds no such element stay at ~1e-6.)
 * - random Q8_0 matrices, F16 KV: 5e-2 [2.6e-2]: the CPU quantizes every matmul input to 8 bits
 *   in blocks of 32 (up to 1/254 of the block's max per element, kernels/quants.c) and the
 *   device multiplies the f32 inputs, so each of the 30 Q8_0 matmuls differs by up to ~0.4% of
 *   its inputs' scale; random weights have near-ties, so the argmax is not required there.
 */
#define TL_TEST_RNG_SEED 0x510E527FADE682D1ull
#include "gpu_test.h"

#include "core/log.h"
#include "engine/kvcache.h"
#include "gpu/backend.h"
#include "model/model.h"

#include <math.h>

enum { BS = 16, NB = 40, MAX_TOK = 32, MAX_CTX = 512, LEN_A = 20, LEN_B = 6 };

static tl_model *model;
static const int32_t table_a[] = {7, 3, 30, 12};
static const int32_t table_b[] = {21, 5, 9};

// llama2.c's logits for positions 0..20 of the reference run (PROVENANCE.md): ref[pos][512].
static float ref_logits[21][512];
static int n_ref_rows;

static void load_ref_logits(void)
{
    FILE *fp = fopen(tl_test_shared("models/stories260K.logits.txt"), "r");
    if (!fp) return;
    char line[16384];
    while (n_ref_rows < 21 && fgets(line, sizeof(line), fp)) {
        if (line[0] == '#') continue;
        char *p = line, *end;
        strtol(p, &end, 10), p = end; // position
        strtol(p, &end, 10), p = end; // input token
        for (int i = 0; i < 512; i++, p = end)
            ref_logits[n_ref_rows][i] = strtof(p, &end);
        n_ref_rows++;
    }
    fclose(fp);
}

static int setup(void **state)
{
    (void)state;
    tl_log_set_level(TL_LOG_ERROR);
    if (!n_ref_rows) load_ref_logits();
    if (tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &model)) {
        fprintf(stderr, "load: %s\n", tl_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tl_model_destroy(model);
    return 0;
}

struct pair {
    const struct tl_model *m;
    struct tl_engine_backend be;
    struct tl_kv_cache *kv;
    struct tl_forward *f;
};

// The device backend (or a skip without a device) and the CPU forward over the same blocks.
static void pair_open(struct pair *p, const struct tl_model *m, enum tl_dtype kv_type)
{
    gpu_test_device(); // skips without a device
    p->m = m;
    if (tl_gpu_engine_backend(m, gpu_test_spec(), &p->be)) fail_msg("backend: %s", tl_last_error());
    assert_int_equal(p->be.n_layer, 0);
    if (p->be.kv_alloc(p->be.ctx, NB, BS, kv_type) || p->be.prepare(p->be.ctx, MAX_TOK, MAX_CTX, 1))
        fail_msg("device prepare: %s", tl_last_error());
    const struct tl_hparams *hp = &m->hp;
    struct tl_kv_cache_config kc = {.n_blocks = NB,
                                    .block_size = BS,
                                    .n_layer = hp->n_layer,
                                    .n_kv_head = hp->n_head_kv,
                                    .head_dim = hp->head_dim,
                                    .type = kv_type};
    p->kv = tl_kv_cache_create(&kc);
    p->f = tl_forward_create(m, MAX_TOK, MAX_CTX, NULL);
    assert_non_null(p->kv);
    assert_non_null(p->f);
}

static void pair_close(struct pair *p)
{
    p->be.destroy(p->be.ctx);
    tl_forward_destroy(p->f);
    tl_kv_cache_destroy(p->kv);
}

struct step {
    int n;
    int32_t tok[MAX_TOK], pos[MAX_TOK], seq[MAX_TOK], out[MAX_TOK];
    int n_out;
    const int32_t *tables[2];
};

static void add(struct step *s, int seq, int32_t tok, int32_t pos, bool out)
{
    s->tok[s->n] = tok, s->pos[s->n] = pos, s->seq[s->n] = seq;
    if (out) s->out[s->n_out++] = s->n;
    s->n++;
}

static struct tl_batch batch_of(struct step *s)
{
    return (struct tl_batch){.n_tok = s->n,
                             .token = s->tok,
                             .pos = s->pos,
                             .seq = s->seq,
                             .block_tables = s->tables,
                             .n_out = s->n_out,
                             .out_idx = s->out};
}

// Runs the step on the device, checking the step's shape from the counters.
static void run_device(struct pair *p, struct step *s, float *logits)
{
    struct tl_batch b = batch_of(s);
    tl_gpu_device *d = tl_gpu_engine_backend_device(p->be.ctx);
    struct tl_gpu_stats s0, s1;
    tl_gpu_device_stats(d, &s0);
    if (p->be.forward(p->be.ctx, &b, NULL, logits)) fail_msg("device: %s", tl_last_error());
    tl_gpu_device_stats(d, &s1);
    assert_int_equal(s1.n_submits - s0.n_submits, 1);
    assert_int_equal(s1.n_waits - s0.n_waits, 1);
    // the embedding, 17 per llama layer (+3 bias adds), the output rows' gather + norm +
    // projection
    int per_layer = p->m->layers[0].bq ? 20 : 17;
    assert_int_equal(s1.n_dispatches - s0.n_dispatches,
                     1 + per_layer * p->m->hp.n_layer + (s->n_out ? 3 : 0));
    // uploads: ids, positions, the token table (2 per token + each sequence's blocks up to its
    // last position), the output rows; nothing else
    int64_t nb[2] = {0, 0};
    for (int t = 0; t < s->n; t++)
        if (s->pos[t] / BS + 1 > nb[s->seq[t]]) nb[s->seq[t]] = s->pos[t] / BS + 1;
    uint64_t up = 4u * (uint64_t)(s->n * 2 + 2 * s->n + nb[0] + nb[1] + s->n_out);
    assert_int_equal(s1.upload_bytes - s0.upload_bytes, up);
    assert_int_equal(s1.download_bytes - s0.download_bytes,
                     (uint64_t)s->n_out * (uint64_t)p->m->hp.n_vocab * 4);
    assert_int_equal(s1.n_downloads - s0.n_downloads, s->n_out ? 1 : 0);
}

static void run_cpu(struct pair *p, struct step *s, float *logits)
{
    struct tl_batch b = batch_of(s);
    if (tl_forward_run(p->f, &b, tl_kv_cache_pages(p->kv), logits))
        fail_msg("cpu: %s", tl_last_error());
}

// Compares n rows of logits; returns the largest relative difference seen.
static double compare(const float *dev, const float *cpu, int n, int n_vocab, double tol,
                      bool argmax, const char *what)
{
    double worst = 0;
    for (int r = 0; r < n; r++) {
        const float *a = dev + (size_t)r * n_vocab, *c = cpu + (size_t)r * n_vocab;
        double mx = 0, diff = 0;
        int am = 0, cm = 0;
        for (int i = 0; i < n_vocab; i++) {
            if (!isfinite(a[i])) fail_msg("%s row %d: logit %d is %g", what, r, i, a[i]);
            mx = fmax(mx, fabs(c[i]));
            diff = fmax(diff, fabs((double)a[i] - c[i]));
            if (a[i] > a[am]) am = i;
            if (c[i] > c[cm]) cm = i;
        }
        double rel = diff / mx;
        if (rel > worst) worst = rel;
        if (rel > tol)
            fail_msg("%s row %d: max |device - cpu| = %g of max |logit| %g (%.3g > %.3g)", what, r,
                     diff, mx, rel, tol);
        if (argmax && am != cm)
            fail_msg("%s row %d: argmax %d on the device, %d on the CPU", what, r, am, cm);
    }
    return worst;
}

// Device rows against llama2.c's logits (the independent oracle), rows at positions pos0...
static double against_reference(const float *dev, int n, int pos0, int n_vocab, double tol)
{
    assert_int_equal(n_ref_rows, 21);
    assert_int_equal(n_vocab, 512);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        double mx = 0, diff = 0;
        for (int i = 0; i < 512; i++) {
            mx = fmax(mx, fabs(ref_logits[pos0 + r][i]));
            diff = fmax(diff, fabs((double)dev[(size_t)r * 512 + i] - ref_logits[pos0 + r][i]));
        }
        worst = fmax(worst, diff / mx);
        if (diff / mx > tol)
            fail_msg("position %d: max |device - llama2.c| = %g of %g (> %g)", pos0 + r, diff, mx,
                     tol);
    }
    return worst;
}

static void run_steps(const struct tl_model *m, enum tl_dtype kv_type, double tol, double ref_tol,
                      bool argmax, const char *name)
{
    struct pair p;
    pair_open(&p, m, kv_type);
    int nv = m->hp.n_vocab;
    float *dev = malloc((size_t)MAX_TOK * nv * 4), *cpu = malloc((size_t)MAX_TOK * nv * 4);
    float *alone = malloc((size_t)nv * 4);
    double worst = 0;
    // 1: a prefill of A (a real text: the reference continuation's opening tokens)
    static const int32_t text[] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376,
                                   298, 315, 421, 395, 317, 426, 338, 401, 396, 267,
                                   337, 410, 408, 419, 292, 411, 322, 265};
    struct step s = {.tables = {table_a, table_b}};
    for (int i = 0; i < LEN_A; i++)
        add(&s, 0, text[i], i, true);
    run_device(&p, &s, dev);
    run_cpu(&p, &s, cpu);
    worst = fmax(worst, compare(dev, cpu, s.n_out, nv, tol, argmax, "prefill"));
    double ref_worst = ref_tol > 0 ? against_reference(dev, LEN_A, 0, nv, ref_tol) : 0;
    // 2: mixed: A decodes, B prefills (its last row out)
    s = (struct step){.tables = {table_a, table_b}};
    add(&s, 0, text[LEN_A], LEN_A, true);
    for (int i = 0; i < LEN_B; i++)
        add(&s, 1, text[(7 * i + 3) % 28], i, i == LEN_B - 1);
    run_device(&p, &s, dev);
    run_cpu(&p, &s, cpu);
    worst = fmax(worst, compare(dev, cpu, s.n_out, nv, tol, argmax, "mixed prefill+decode"));
    if (ref_tol > 0) ref_worst = fmax(ref_worst, against_reference(dev, 1, LEN_A, nv, ref_tol));
    // 3: both decode (B first in the batch)
    s = (struct step){.tables = {table_a, table_b}};
    add(&s, 1, text[9], LEN_B, true);
    add(&s, 0, text[LEN_A + 1], LEN_A + 1, true);
    run_device(&p, &s, dev);
    run_cpu(&p, &s, cpu);
    worst = fmax(worst, compare(dev, cpu, s.n_out, nv, tol, argmax, "decode"));
    // each of step 3's rows alone: the same bits
    for (int r = 0; r < 2; r++) {
        struct step one = {.tables = {table_a, table_b}};
        add(&one, s.seq[r], s.tok[r], s.pos[r], true);
        run_device(&p, &one, alone);
        if (memcmp(alone, dev + (size_t)r * nv, (size_t)nv * 4))
            fail_msg("%s: sequence %d's row alone differs from the batch", name, s.seq[r]);
    }
    printf("# %s: worst max|device - cpu| / max|logit| = %.3g (tolerance %.3g)", name, worst, tol);
    if (ref_tol > 0) printf(", vs llama2.c %.3g (tolerance %.3g)", ref_worst, ref_tol);
    printf("\n");
    free(dev), free(cpu), free(alone);
    pair_close(&p);
}

static void test_f32_model(void **state)
{
    (void)state;
    run_steps(model, TL_DTYPE_F32, 1e-5, 1e-4, true, "stories260K F32, F32 KV");
    run_steps(model, TL_DTYPE_F16, 2e-3, 2e-3, true, "stories260K F32, F16 KV");
}

// A random weight of w's shape in Q8_0, rows layout (the buffer is the caller's, *buf).
static struct tl_weight q8_weight(const struct tl_weight *w, void **buf)
{
    int64_t rb = w->n_in / 32 * 34;
    char *q = malloc((size_t)(rb * w->n_out));
    float *row = malloc((size_t)w->n_in * 4);
    for (int64_t o = 0; o < w->n_out; o++) {
        for (int64_t i = 0; i < w->n_in; i++)
            row[i] = tl_test_rnd_f() * 0.25f;
        assert_true(tl_quantize_row(TL_DTYPE_Q8_0, row, q + o * rb, w->n_in));
    }
    free(row);
    *buf = q;
    return (struct tl_weight){.type = TL_DTYPE_Q8_0,
                              .n_in = w->n_in,
                              .n_out = w->n_out,
                              .row_bytes = (size_t)rb,
                              .data = q,
                              .layout = TL_WEIGHT_ROWS};
}

static void test_q8_0_model(void **state)
{
    (void)state;
    gpu_test_device();
    const struct tl_hparams *hp = &model->hp;
    struct tl_model m = *model;
    struct tl_layer *layers = calloc((size_t)hp->n_layer, sizeof(*layers));
    void *bufs[64];
    int nb = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        struct tl_layer *L = &layers[il];
        *L = model->layers[il];
        struct tl_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up};
        for (int i = 0; i < 6; i++)
            *ws[i] = q8_weight(ws[i], &bufs[nb++]);
    }
    m.layers = layers;
    run_steps(&m, TL_DTYPE_F16, 5e-2, 0, false, "stories260K with random Q8_0 matrices, F16 KV");
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
    free(layers);
}

// The qwen2 paths on stories260K's weights: NEOX RoPE (halves) and random q/k/v biases, F32 KV.
static void test_qwen2_biases_neox(void **state)
{
    (void)state;
    gpu_test_device();
    const struct tl_hparams *hp = &model->hp;
    struct tl_model m = *model;
    m.hp.arch = TL_ARCH_QWEN2;
    m.hp.rope_mode = TL_ROPE_NEOX;
    struct tl_layer *layers = calloc((size_t)hp->n_layer, sizeof(*layers));
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    float *bias = malloc((size_t)(qd + 2 * kvd) * hp->n_layer * sizeof(float));
    for (int64_t i = 0; i < (qd + 2 * kvd) * hp->n_layer; i++)
        bias[i] = tl_test_rnd_f() * 0.5f;
    for (int il = 0; il < hp->n_layer; il++) {
        layers[il] = model->layers[il];
        float *b = bias + (qd + 2 * kvd) * il;
        layers[il].bq = b, layers[il].bk = b + qd, layers[il].bv = b + qd + kvd;
    }
    m.layers = layers;
    run_steps(&m, TL_DTYPE_F32, 1e-5, 0, true, "stories260K as qwen2 (NEOX, biases), F32 KV");
    free(bias);
    free(layers);
}

// Weights the device kernels do not take are one load error naming them.
static void test_unsupported_type_refused(void **state)
{
    (void)state;
    (void)gpu_test_buffer; // gpu_test.h's helper, unused here
    gpu_test_device();
    struct tl_model m = *model;
    struct tl_layer *layers = calloc((size_t)m.hp.n_layer, sizeof(*layers));
    memcpy(layers, model->layers, (size_t)m.hp.n_layer * sizeof(*layers));
    layers[1].wk.type = TL_DTYPE_Q4_0, layers[1].wk.layout = TL_WEIGHT_ROWS;
    m.layers = layers;
    struct tl_engine_backend be;
    assert_int_equal(tl_gpu_engine_backend(&m, gpu_test_spec(), &be), TL_ERR_UNSUPPORTED);
    assert_non_null(strstr(tl_last_error(), "Q4_0"));
    assert_non_null(strstr(tl_last_error(), "attn_k"));
    assert_null(strchr(tl_last_error(), '\n'));
    free(layers);
}

TL_TEST_MAIN(cmocka_unit_test_setup_teardown(test_f32_model, setup, teardown),
             cmocka_unit_test_setup_teardown(test_q8_0_model, setup, teardown),
             cmocka_unit_test_setup_teardown(test_qwen2_biases_neox, setup, teardown),
             cmocka_unit_test_setup_teardown(test_unsupported_type_refused, setup, teardown))
