/*
 * The engine side of the BERT reference test (tests/models/test_bert.py): loads a GGUF model,
 * runs tl_model_embed over the given tokens and writes the pooled vector (n_embd f32) to OUT.
 *
 * usage: dump_embed MODEL OUT.f32 POOLING NORMALIZE TOKEN...
 *   POOLING: file (the model's pooling_type), mean, cls or last; NORMALIZE: 0 or 1;
 *   TOKEN: an id, or ID/TYPE for a token type other than 0.
 * Exit 1 with one line on stderr on any error. The pool has 2 threads, or $TL_DUMP_THREADS.
 */
#include "core/error.h"
#include "core/pool.h"
#include "model/encode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: dump_embed MODEL OUT.f32 POOLING NORMALIZE TOKEN...\n");
        return 1;
    }
    struct tl_embed_opts opts = {.normalize = !strcmp(argv[4], "1")};
    static const char *const names[] = {"file", "mean", "cls", "last"};
    bool known = false;
    for (int i = 0; i < 4; i++)
        if (!strcmp(argv[3], names[i])) opts.pooling = (enum tl_pooling)i, known = true;
    if (!known) {
        fprintf(stderr, "dump_embed: unknown pooling '%s'\n", argv[3]);
        return 1;
    }
    int64_t n = argc - 5;
    int32_t *ids = calloc((size_t)n, sizeof(*ids));
    int32_t *types = calloc((size_t)n, sizeof(*types));
    tl_model *m = NULL;
    const char *threads = getenv("TL_DUMP_THREADS");
    struct tl_pool *pool = tl_pool_create(threads ? atoi(threads) : 2);
    float *out = NULL;
    int rc = 1;
    if (!ids || !types || !pool) goto done;
    for (int64_t i = 0; i < n; i++) {
        char *slash = strchr(argv[5 + i], '/');
        ids[i] = atoi(argv[5 + i]);
        if (slash) types[i] = atoi(slash + 1), opts.types = types;
    }
    if (tl_model_load(argv[1], NULL, &m)) {
        fprintf(stderr, "dump_embed: load: %s\n", tl_last_error());
        goto done;
    }
    out = calloc((size_t)m->hp.n_embd, sizeof(float));
    if (!out) goto done;
    if (tl_model_embed(m, pool, ids, n, &opts, out)) {
        fprintf(stderr, "dump_embed: embed: %s\n", tl_last_error());
        goto done;
    }
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(out, sizeof(float), (size_t)m->hp.n_embd, f) != (size_t)m->hp.n_embd) {
        fprintf(stderr, "dump_embed: cannot write %s\n", argv[2]);
        if (f) fclose(f);
        goto done;
    }
    rc = fclose(f) ? 1 : 0;
done:
    free(out);
    free(ids);
    free(types);
    tl_model_destroy(m);
    tl_pool_destroy(pool);
    return rc;
}
