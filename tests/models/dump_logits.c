/*
 * The engine side of the NumPy reference tests (tests/models/test_families.py): loads a GGUF
 * model, runs the real batched forward pass over the given tokens and writes every position's
 * logits, twice:
 *   1. the whole prompt as one chunk (sequence 0);
 *   2. one token per step (sequence 1), each step batched with a token of an unrelated noise
 *      sequence (sequence 2, other tokens, other positions) placed before it in the batch.
 * The file is the f32 logits of run 1, (n_tok, n_vocab) row-major, then those of run 2. The
 * batch-invariance contract says the two halves are equal bit for bit; the test checks that,
 * and run 1 against the reference.
 *
 * usage: dump_logits MODEL OUT.f32 ISA TOKEN...   (ISA: scalar, avx2, avx512 or "default";
 * exit 3 when this CPU lacks it). Exit 1 with one line on stderr on any error. The pool has 2
 * threads, or $TL_DUMP_THREADS.
 */
#include "core/alloc.h"
#include "core/error.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOK 64
#define BLOCK 4
#define N_SEQ 3
#define BLOCKS_PER_SEQ (MAX_TOK / BLOCK)

struct kv {
    struct tl_kv_pages pages;
    struct tl_kv_layer *layers;
    int32_t tables[N_SEQ][BLOCKS_PER_SEQ];
};

static int fail(const char *what)
{
    fprintf(stderr, "dump_logits: %s: %s\n", what, tl_last_error());
    return 1;
}

static bool kv_init(struct kv *kv, const struct tl_model *m)
{
    size_t elems = (size_t)N_SEQ * BLOCKS_PER_SEQ * BLOCK * m->hp.n_head_kv * m->hp.head_dim;
    kv->layers = calloc((size_t)m->hp.n_layer, sizeof(*kv->layers));
    if (!kv->layers) return false;
    kv->pages.n_layer = m->hp.n_layer;
    kv->pages.layers = kv->layers;
    for (int l = 0; l < m->hp.n_layer; l++) {
        kv->layers[l] = (struct tl_kv_layer){.type = TL_DTYPE_F32,
                                             .block_size = BLOCK,
                                             .n_kv_head = m->hp.n_head_kv,
                                             .head_dim = m->hp.head_dim};
        kv->layers[l].k = tl_aligned_alloc(elems * sizeof(float));
        kv->layers[l].v = tl_aligned_alloc(elems * sizeof(float));
        if (!kv->layers[l].k || !kv->layers[l].v) return false;
        memset(kv->layers[l].k, 0, elems * sizeof(float));
        memset(kv->layers[l].v, 0, elems * sizeof(float));
    }
    // Sequence s owns blocks s, s + 3, s + 6, ... (interleaved, so the tables matter).
    for (int s = 0; s < N_SEQ; s++)
        for (int j = 0; j < BLOCKS_PER_SEQ; j++)
            kv->tables[s][j] = s + N_SEQ * j;
    return true;
}

static void kv_free(struct kv *kv)
{
    for (int l = 0; kv->layers && l < kv->pages.n_layer; l++) {
        tl_aligned_free(kv->layers[l].k);
        tl_aligned_free(kv->layers[l].v);
    }
    free(kv->layers);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: dump_logits MODEL OUT.f32 ISA TOKEN...\n");
        return 2;
    }
    if (strcmp(argv[3], "default") && !tl_kernels_force_isa(argv[3])) return 3;
    int n = argc - 4;
    if (n > MAX_TOK) {
        fprintf(stderr, "dump_logits: at most %d tokens\n", MAX_TOK);
        return 2;
    }
    int32_t tok[MAX_TOK];
    for (int i = 0; i < n; i++)
        tok[i] = atoi(argv[4 + i]);
    struct tl_model *m = NULL;
    if (tl_model_load(argv[1], NULL, &m)) return fail(argv[1]);
    int64_t n_vocab = m->hp.n_vocab;
    const char *thr = getenv("TL_DUMP_THREADS");
    struct tl_pool *pool = tl_pool_create(thr ? atoi(thr) : 2);
    struct tl_forward *f = pool ? tl_forward_create(m, MAX_TOK, MAX_TOK, pool) : NULL;
    float *logits = malloc(sizeof(float) * 2 * (size_t)n * (size_t)n_vocab);
    float *step = malloc(sizeof(float) * 2 * (size_t)n_vocab);
    struct kv kv = {0};
    int rc = 1;
    if (!f || !logits || !step || !kv_init(&kv, m)) {
        fail("setup");
        goto out;
    }
    const int32_t *tables[N_SEQ] = {kv.tables[0], kv.tables[1], kv.tables[2]};
    int32_t pos[MAX_TOK], seq[MAX_TOK], out_idx[MAX_TOK];
    for (int i = 0; i < n; i++)
        pos[i] = i, seq[i] = 0, out_idx[i] = i;
    struct tl_batch b = {.n_tok = n,
                         .token = tok,
                         .pos = pos,
                         .seq = seq,
                         .block_tables = tables,
                         .n_out = n,
                         .out_idx = out_idx};
    if (tl_forward_run(f, &b, &kv.pages, logits)) {
        fail("forward (chunk)");
        goto out;
    }
    for (int t = 0; t < n; t++) {
        // The noise token first: sequence 2 at its own position, another token id.
        int32_t s_tok[2] = {(int32_t)((tok[t] * 7 + 13) % n_vocab), tok[t]};
        int32_t s_pos[2] = {t, t}, s_seq[2] = {2, 1}, s_out[2] = {0, 1};
        struct tl_batch sb = {.n_tok = 2,
                              .token = s_tok,
                              .pos = s_pos,
                              .seq = s_seq,
                              .block_tables = tables,
                              .n_out = 2,
                              .out_idx = s_out};
        if (tl_forward_run(f, &sb, &kv.pages, step)) {
            fail("forward (step)");
            goto out;
        }
        memcpy(logits + ((size_t)n + t) * n_vocab, step + n_vocab, sizeof(float) * n_vocab);
    }
    FILE *fo = fopen(argv[2], "wb");
    if (!fo ||
        fwrite(logits, sizeof(float), 2 * (size_t)n * n_vocab, fo) != 2 * (size_t)n * n_vocab)
        fprintf(stderr, "dump_logits: cannot write %s\n", argv[2]);
    else
        rc = 0;
    if (fo && fclose(fo)) rc = 1;
out:
    kv_free(&kv);
    free(step);
    free(logits);
    tl_forward_destroy(f);
    tl_pool_destroy(pool);
    tl_model_destroy(m);
    return rc;
}
