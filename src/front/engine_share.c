/*
 * The fronts' shared engine plumbing (see engine_share.h): the default backend, the public API
 * itself, and the engine thread's step loop.
 *
 * Threads: tl_srv_backend_default is constant; tl_front_engine_loop runs on the engine thread
 * of the front that owns the engine and touches nothing else.
 */
#include "front/engine_share.h"

#include "core/clock.h"
#include "core/log.h"

static void model_info_(const tl_model *m, struct tl_model_info *out)
{
    tl_model_get_info(m, out);
}

const struct tl_srv_backend tl_srv_backend_default = {
    .model_info = model_info_,
    .tokenize = tl_model_tokenize,
    .detokenize = tl_model_detokenize,
    .token_text = tl_model_token_text,
    .submit = tl_engine_submit,
    .cancel = tl_engine_cancel,
    .step = tl_engine_step,
    .wait = tl_engine_wait,
    .wake = tl_engine_wake,
    .get_stats = tl_engine_get_stats,
};

void tl_front_engine_loop(const struct tl_srv_backend *be, tl_engine *engine,
                          const atomic_bool *quit)
{
    int64_t last_err_us = 0;
    while (!atomic_load(quit)) {
        int64_t pending = 0;
        tl_status st = be->step(engine, &pending);
        if (st) {
            int64_t now = tl_time_us();
            if (now - last_err_us > 1000000) {
                TL_LOGE("serve: engine step failed: %s", tl_last_error());
                last_err_us = now;
            }
            be->wait(engine, 10);
        } else if (pending == 0) {
            be->wait(engine, 200);
        }
    }
}
