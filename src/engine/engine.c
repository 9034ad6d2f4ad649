/*
 * The public engine API (tokenloom.h, section "engine"). Skeleton: defaults and names are real;
 * the engine itself is being built (paged KV cache, prefix cache, scheduler, sampler) and the
 * functions that need it return TL_ERR_UNSUPPORTED for now so that callers can link.
 */
#include <tokenloom.h>

#include "core/error.h"

#include <string.h>

void tl_engine_config_default(struct tl_engine_config *c)
{
    memset(c, 0, sizeof(*c));
    c->max_batch_size = 64;
    c->max_tokens_per_step = 512;
    c->max_seq_len = 0;
    c->kv_block_size = 16;
    c->kv_type = TL_KV_F16;
    c->prefix_caching = true;
}

void tl_sampling_default(struct tl_sampling *s)
{
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
}

void tl_request_default(struct tl_request *r)
{
    memset(r, 0, sizeof(*r));
    tl_sampling_default(&r->sampling);
    r->max_tokens = 16;
    r->add_special = true;
}

const char *tl_finish_reason_str(enum tl_finish_reason r)
{
    switch (r) {
    case TL_FINISH_NONE: return "none";
    case TL_FINISH_STOP: return "stop";
    case TL_FINISH_LENGTH: return "length";
    case TL_FINISH_CANCELLED: return "cancelled";
    case TL_FINISH_DEADLINE: return "deadline";
    case TL_FINISH_ERROR: return "error";
    }
    return "unknown";
}

tl_status tl_engine_create(const tl_model *m, const struct tl_engine_config *c, tl_engine **out)
{
    (void)m;
    (void)c;
    *out = NULL;
    return tl__errorf(TL_ERR_UNSUPPORTED, "engine: not built yet");
}

void tl_engine_destroy(tl_engine *e) { (void)e; }

tl_status tl_engine_submit(tl_engine *e, const struct tl_request *r, uint64_t *id)
{
    (void)e;
    (void)r;
    (void)id;
    return tl__errorf(TL_ERR_UNSUPPORTED, "engine: not built yet");
}

tl_status tl_engine_cancel(tl_engine *e, uint64_t id)
{
    (void)e;
    (void)id;
    return tl__errorf(TL_ERR_UNSUPPORTED, "engine: not built yet");
}

tl_status tl_engine_step(tl_engine *e, int64_t *n_pending)
{
    (void)e;
    if (n_pending) *n_pending = 0;
    return tl__errorf(TL_ERR_UNSUPPORTED, "engine: not built yet");
}

void tl_engine_wait(tl_engine *e, int timeout_ms)
{
    (void)e;
    (void)timeout_ms;
}

void tl_engine_wake(tl_engine *e) { (void)e; }

void tl_engine_get_stats(tl_engine *e, struct tl_engine_stats *out)
{
    (void)e;
    memset(out, 0, sizeof(*out));
}
