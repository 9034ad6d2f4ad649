/*
 * tokenloom embed: prints the embedding of a text with an encoder model (bert).
 *
 *   tokenloom embed -m MODEL [--pooling mean|cls|last] [--no-normalize] [--threads N]
 *
 * The whole of stdin is one text; it is tokenized with the model's tokenizer (with [CLS] and
 * [SEP] as the vocabulary says) and encoded by tl_model_embed (src/model/encode.h); the vector
 * goes to stdout as one JSON array of floats ("%.9g": each f32 round-trips). A decoder model is
 * refused as tl_model_embed refuses it (not an embedding model).
 * Exit codes: 0 ok, 1 runtime error (message on stderr), 2 usage error.
 */
#include "cli/args.h"
#include "cli/cli.h"

#include "core/alloc.h"
#include "core/pool.h"
#include "model/encode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: tokenloom embed -m MODEL [--pooling mean|cls|last] [--no-normalize]\n"
               "                       [--threads N]\n"
               "  -m, --model PATH     GGUF encoder model (bert); default $MODEL\n"
               "  --pooling P          override the model's bert.pooling_type\n"
               "  --no-normalize       print the pooled vector without L2 normalisation\n"
               "  --threads N          matmul threads (default 2)\n"
               "Reads the text from stdin and prints its embedding as a JSON array.\n");
}

static char *read_stdin(size_t *len)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (!tl_grow((void **)&buf, &cap, n + 65536, 1)) {
            free(buf);
            return NULL;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int tl_cmd_embed(int argc, char **argv)
{
    const char *path = tl_cli_default_model();
    struct tl_embed_opts opts = {.normalize = true};
    int threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-normalize")) {
            opts.normalize = false;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            path = v, i++;
        } else if (!strcmp(a, "--threads") && v) {
            threads = atoi(v), i++;
            if (threads < 1 || threads > 1024) {
                fprintf(stderr, "tokenloom embed: bad value '%s' for --threads\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--pooling") && v) {
            static const char *const names[] = {"mean", "cls", "last"};
            i++;
            for (int k = 0; k < 3; k++)
                if (!strcmp(v, names[k])) opts.pooling = (enum tl_pooling)(k + 1);
            if (opts.pooling == TL_POOLING_NONE) {
                fprintf(stderr, "tokenloom embed: unknown --pooling '%s' (mean, cls, last)\n", v);
                return 2;
            }
        } else {
            static const char *const known[] = {
                "--model", "-m", "--pooling", "--threads", "--no-normalize", "--help", NULL};
            return tl_cli_unknown_option("embed", a, known, NULL);
        }
    }
    if (!path) {
        fprintf(stderr, "tokenloom embed: no model (-m MODEL or $MODEL)\n");
        return 2;
    }
    int rc = 1;
    tl_model *m = NULL;
    struct tl_pool *pool = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    float *out = NULL;
    int64_t n = 0;
    size_t len = 0;
    if (tl_model_load(path, NULL, &m)) {
        fprintf(stderr, "tokenloom embed: %s\n", tl_last_error());
        goto out;
    }
    if (!(text = read_stdin(&len))) {
        fprintf(stderr, "tokenloom embed: cannot read stdin\n");
        goto out;
    }
    if (tl_model_tokenize(m, text, len, true, false, &ids, &n)) {
        fprintf(stderr, "tokenloom embed: %s\n", tl_last_error());
        goto out;
    }
    pool = tl_pool_create(threads);
    out = tl_malloc_array((size_t)m->hp.n_embd, sizeof(float));
    if (!pool || !out) {
        fprintf(stderr, "tokenloom embed: out of memory\n");
        goto out;
    }
    if (tl_model_embed(m, pool, ids, n, &opts, out)) {
        fprintf(stderr, "tokenloom embed: %s\n", tl_last_error());
        goto out;
    }
    putchar('[');
    for (int32_t i = 0; i < m->hp.n_embd; i++)
        printf(i ? ", %.9g" : "%.9g", (double)out[i]);
    printf("]\n");
    rc = 0;
out:
    free(out);
    free(ids);
    free(text);
    tl_pool_destroy(pool);
    tl_model_destroy(m);
    return rc;
}
