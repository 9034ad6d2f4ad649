/*
 * The server's metrics as the routes see them (see state.h): the model's facts handed to the
 * metrics once the engine is up, and the snapshot /metrics and /stats render (the server's own
 * counters plus the second front's latency histograms). A leaf below server.c, routes.c and
 * stats.c, so the routes read metrics without calling back into the server's lifecycle file.
 *
 * Threads: the event-loop thread.
 */
#include "server/state.h"

bool tl_srv_metrics_sync(struct tl_server *s)
{
    if (!atomic_load(&s->engine_up)) return false;
    if (!s->metrics_ready) {
        static const char *const kv_names[] = {"f32", "f16", "q8_0"};
        int kt = (int)s->cfg.engine.kv_type;
        tl_metrics_set_model(&s->metrics, s->model_name, kt >= 0 && kt < 3 ? kv_names[kt] : "f16",
                             &s->cfg.machine);
        s->metrics_ready = true;
    }
    return true;
}

void tl_srv_metrics_view(const struct tl_server *s, struct tl_metrics *out)
{
    *out = s->metrics;
    if (s->front.add_latency) s->front.add_latency(s->front.arg, out);
}
