/*
 * Tests for src/kernels/ceilings.c and src/model/work.c: the ceilings cache file (written into
 * a directory that does not exist yet, read back exactly; every kind of corrupt or foreign file
 * refused), a get() served from a valid cache without measuring, probes that return positive
 * rates, and the per-step work count of the shared stories260K model against the formulas
 * written out here from its dimensions (an independent count: 7 matrices per layer of known
 * shapes, F32 weights, attention over pos + 1 positions).
 */
#include "tl_test.h"

#include "kernels/ceilings.h"
#include "model/model.h"

#include <math.h>
#include <sys/stat.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/tl_test_ceilings_%d", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_cache_roundtrip_and_corrupt(void **state)
{
    (void)state;
    struct tl_ceilings key, c, back;
    tl_ceilings_key(3, &key);
    assert_int_equal(key.n_threads, 3);
    assert_true(strlen(key.cpu) > 0 && strlen(key.isa) > 0);
    c = key;
    c.int8_ops_per_s = 1.25e12;
    c.fp32_flops_per_s = 3.5e11;
    c.mem_read_bytes_per_s = 2.0e10;
    char sub[300], path[600];
    snprintf(sub, sizeof(sub), "%s/nested/tokenloom", dir); // neither level exists
    assert_true(tl_ceilings_cache_path(sub, &key, path, sizeof(path)));
    assert_false(tl_ceilings_cache_read(path, &key, &back)); // missing file
    assert_int_equal(tl_ceilings_cache_write(path, &c), TL_OK);
    assert_true(tl_ceilings_cache_read(path, &key, &back));
    assert_true(back.int8_ops_per_s == c.int8_ops_per_s);
    assert_true(back.fp32_flops_per_s == c.fp32_flops_per_s);
    assert_true(back.mem_read_bytes_per_s == c.mem_read_bytes_per_s);
    assert_string_equal(back.cpu, key.cpu);
    // Another thread count is another machine key: another file name, and refused if read.
    struct tl_ceilings key4;
    tl_ceilings_key(4, &key4);
    char path4[600];
    assert_true(tl_ceilings_cache_path(sub, &key4, path4, sizeof(path4)));
    assert_string_not_equal(path, path4);
    assert_false(tl_ceilings_cache_read(path, &key4, &back));

    char good[1024];
    snprintf(good, sizeof(good),
             "tokenloom ceilings v1\ncpu=%s\nisa=%s\nthreads=3\nint8_ops_per_s=1e12\n"
             "fp32_flops_per_s=1e11\nmem_read_bytes_per_s=1e10\n",
             key.cpu, key.isa);
    write_text(path, good);
    assert_true(tl_ceilings_cache_read(path, &key, &back));
    assert_true(back.int8_ops_per_s == 1e12);
    const char *bad[] = {
        "",                                             // empty
        "tokenloom ceilings v2\n",                      // another version
        "int8_ops_per_s=1e12\n",                        // no version line
        "tokenloom ceilings v1\nthreads=3\n",           // keys missing
        "tokenloom ceilings v1\nint8_ops_per_s=banana", // not a number, no newline
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_text(path, bad[i]);
        assert_false(tl_ceilings_cache_read(path, &key, &back));
    }
    // One line changed at a time: each makes the file unusable.
    const char *swaps[][2] = {{"int8_ops_per_s=1e12", "int8_ops_per_s=nan"},
                              {"int8_ops_per_s=1e12", "int8_ops_per_s=-5"},
                              {"fp32_flops_per_s=1e11", "fp32_flops_per_s=1e11x"},
                              {"threads=3", "threads=0"},
                              {"threads=3", "threads=3\nthreads=3"},
                              {"mem_read_bytes_per_s=1e10", "mem_read=1e10"},
                              {"isa=", "isa=z"},
                              {"cpu=", "cpu=other "}};
    for (size_t i = 0; i < sizeof(swaps) / sizeof(swaps[0]); i++) {
        char text[1200];
        const char *at = strstr(good, swaps[i][0]);
        assert_non_null(at);
        snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - good), good, swaps[i][1],
                 at + strlen(swaps[i][0]));
        write_text(path, text);
        if (tl_ceilings_cache_read(path, &key, &back)) fail_msg("accepted: %s", swaps[i][1]);
    }
}

static void test_get_uses_cache(void **state)
{
    (void)state;
    // A valid cache for 1 thread: get() returns it as is (no measuring: the rates are fake).
    struct tl_ceilings key, c;
    tl_ceilings_key(1, &key);
    c = key;
    c.int8_ops_per_s = 7e9;
    c.fp32_flops_per_s = 6e9;
    c.mem_read_bytes_per_s = 5e9;
    char path[600];
    assert_true(tl_ceilings_cache_path(dir, &key, path, sizeof(path)));
    assert_int_equal(tl_ceilings_cache_write(path, &c), TL_OK);
    struct tl_ceilings got;
    bool cached = false;
    assert_int_equal(tl_ceilings_get(1, dir, &got, &cached), TL_OK);
    assert_true(cached);
    assert_true(got.int8_ops_per_s == 7e9 && got.mem_read_bytes_per_s == 5e9);
}

static void test_probes_positive(void **state)
{
    (void)state;
    // Short probes on the calling thread (a NULL pool): rates positive and finite (their size
    // depends on the machine and its load, so nothing finer is asserted here).
    double i8 = tl_ceiling_int8_ops_per_s(NULL, 1, 0.005);
    double f32 = tl_ceiling_fp32_flops_per_s(NULL, 1, 0.005);
    assert_true(i8 > 1e6 && i8 < 1e16);
    assert_true(f32 > 1e6 && f32 < 1e16);
    static uint64_t buf[1 << 16];
    memset(buf, 1, sizeof(buf));
    double bw = tl_ceiling_read_bytes_per_s(NULL, buf, sizeof(buf));
    assert_true(bw > 1e6);
}

static void test_step_work_shapes(void **state)
{
    (void)state;
    tl_model *m = NULL;
    assert_int_equal(tl_model_load(tl_test_shared("models/stories260K.gguf"), NULL, &m), TL_OK);
    const struct tl_hparams *hp = &m->hp;
    // Two sequences: a prompt chunk of 5 tokens at positions 0..4 and a decode token at 9;
    // logits wanted for 2 rows.
    int32_t token[6] = {1, 2, 3, 4, 5, 6}, pos[6] = {0, 1, 2, 3, 4, 9}, seq[6] = {0, 0, 0, 0, 0, 1};
    int32_t out_idx[2] = {4, 5};
    struct tl_batch b = {.n_tok = 6, .token = token, .pos = pos, .seq = seq, .n_out = 2,
                         .out_idx = out_idx};
    struct tl_step_work w;
    tl_model_step_work(m, TL_DTYPE_F16, &b, &w);
    double d = hp->n_embd, hd = hp->head_dim, q = (double)hp->n_head * hd,
           kv = (double)hp->n_head_kv * hd, ff = hp->n_ff, L = hp->n_layer, V = hp->n_vocab;
    // per token and layer: q, k, v, o, gate, up, down
    double per_tok = 2 * (d * q + 2 * d * kv + q * d + 2 * d * ff + ff * d);
    double ctx = 1 + 2 + 3 + 4 + 5 + 10;
    double want_flops = 6 * L * per_tok + 2 * 2 * d * V + 4 * hp->n_head * hd * ctx * L;
    double want_weights = 4 * (L * (d * q + 2 * d * kv + q * d + 2 * d * ff + ff * d) + V * d) +
                          6 * 4 * d; // F32: 4 bytes; output once; 6 embedding rows
    double want_kv = 2 * (2 * hd) * hp->n_head_kv * ctx * L; // F16 K and V
    assert_true(w.int8_ops == 0); // F32 weights: all FLOPs
    assert_true(fabs(w.flops - want_flops) <= 1e-9 * want_flops);
    assert_true(fabs(w.weight_bytes - want_weights) <= 1e-9 * want_weights);
    assert_true(fabs(w.kv_bytes - want_kv) <= 1e-9 * want_kv);
    // F32 KV: twice the bytes.
    tl_model_step_work(m, TL_DTYPE_F32, &b, &w);
    assert_true(fabs(w.kv_bytes - 2 * want_kv) <= 1e-9 * want_kv);
    // No logits wanted: no output matrix.
    b.n_out = 0;
    tl_model_step_work(m, TL_DTYPE_F16, &b, &w);
    assert_true(fabs(w.flops - (want_flops - 2 * 2 * d * V)) <= 1e-9 * want_flops);
    tl_model_destroy(m);
}

TL_TEST_MAIN(cmocka_unit_test_setup_teardown(test_cache_roundtrip_and_corrupt, setup, teardown),
             cmocka_unit_test_setup_teardown(test_get_uses_cache, setup, teardown),
             cmocka_unit_test(test_probes_positive), cmocka_unit_test(test_step_work_shapes))
