/*
 * The real-model backend of the engine (struct tl_engine_backend over a loaded tl_model): the
 * batched forward pass of src/model, the model's tokenizer for text prompts and its
 * incremental detokenizer for streamed text.
 *
 * Ownership: the backend context owns the compute thread pool and the forward scratch; the
 * model is borrowed (it must outlive the engine). Threads: prepare/forward/detok run on the
 * engine thread; tokenize runs on submitters' threads (tl_tokenize is thread-safe).
 */
#include "engine/engine_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

struct model_backend {
    const struct tl_model *m; // borrowed
    struct tl_pool *pool;     // owned
    struct tl_forward *fwd;   // owned
};

static tl_status mb_prepare(void *ctx, int64_t max_tok, int64_t max_ctx, int32_t n_threads)
{
    struct model_backend *mb = ctx;
    mb->pool = tl_pool_create(n_threads);
    if (!mb->pool) return tl__error_prefix(TL_ERR_NOMEM, "engine: thread pool");
    mb->fwd = tl_forward_create(mb->m, max_tok, max_ctx, mb->pool);
    if (!mb->fwd && mb->m->bert) return tl__error_prefix(TL_ERR_UNSUPPORTED, "engine");
    if (!mb->fwd) return tl__error_prefix(TL_ERR_NOMEM, "engine: forward scratch");
    return TL_OK;
}

static tl_status mb_forward(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                            float *logits)
{
    struct model_backend *mb = ctx;
    return tl_forward_run(mb->fwd, b, kv, logits);
}

static void mb_step_work(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                         struct tl_step_work *out)
{
    struct model_backend *mb = ctx;
    tl_model_step_work(mb->m, kv->n_layer > 0 ? kv->layers[0].type : TL_DTYPE_F16, b, out);
}

static tl_status mb_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t **ids, int64_t *n_ids)
{
    struct model_backend *mb = ctx;
    return tl_tokenize(mb->m->vocab, text, len, add_special, parse_special, ids, n_ids);
}

static bool mb_is_eog(void *ctx, int32_t id)
{
    struct model_backend *mb = ctx;
    return tl_vocab_is_eog(mb->m->vocab, id);
}

static int mb_token_bytes(void *ctx, int32_t id, char *buf, int cap)
{
    struct model_backend *mb = ctx;
    const struct tl_vocab *v = mb->m->vocab;
    if (id < 0 || id >= tl_vocab_n_tokens(v)) return -1;
    enum tl_token_attr a = tl_vocab_attr(v, id);
    if (a != TL_TOKEN_NORMAL && a != TL_TOKEN_BYTE && a != TL_TOKEN_USER_DEFINED) return -1;
    size_t n = tl_token_to_text(v, id, false, buf, (size_t)cap);
    return n > (size_t)cap ? -1 : (int)n;
}

static void mb_detok_init(void *ctx, void *state, bool render_special)
{
    struct model_backend *mb = ctx;
    tl_detok_init(state, mb->m->vocab, render_special);
}

static tl_status mb_detok_push(void *ctx, void *state, int32_t id, char **out, size_t *len,
                               size_t *cap)
{
    (void)ctx;
    return tl_detok_push(state, id, out, len, cap);
}

static tl_status mb_detok_flush(void *ctx, void *state, char **out, size_t *len, size_t *cap)
{
    (void)ctx;
    return tl_detok_flush(state, out, len, cap);
}

static struct tl_pool *mb_pool(void *ctx)
{
    struct model_backend *mb = ctx;
    return mb->pool;
}

static void mb_destroy(void *ctx)
{
    struct model_backend *mb = ctx;
    if (!mb) return;
    tl_forward_destroy(mb->fwd);
    tl_pool_destroy(mb->pool);
    free(mb);
}

tl_status tl__engine_backend_model(const tl_model *m, struct tl_engine_backend *be)
{
    struct model_backend *mb = tl_malloc(sizeof(*mb));
    if (!mb) return tl__errorf(TL_ERR_NOMEM, "engine: out of memory");
    mb->m = m;
    mb->pool = NULL;
    mb->fwd = NULL;
    const struct tl_hparams *hp = &m->hp;
    *be = (struct tl_engine_backend){
        .ctx = mb,
        .n_vocab = hp->n_vocab,
        .n_ctx = hp->n_ctx_train,
        .n_layer = hp->n_layer,
        .n_kv_head = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .prepare = mb_prepare,
        .forward = mb_forward,
        .step_work = mb_step_work,
        .tokenize = mb_tokenize,
        .is_eog = mb_is_eog,
        .token_bytes = mb_token_bytes,
        .detok_bytes = sizeof(struct tl_detok),
        .detok_init = mb_detok_init,
        .detok_push = mb_detok_push,
        .detok_flush = mb_detok_flush,
        .pool = mb_pool,
        .destroy = mb_destroy,
    };
    return TL_OK;
}
