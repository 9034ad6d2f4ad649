/*
 * The observability endpoints beside /metrics: GET /stats, a compact JSON snapshot of the
 * server and engine for the dashboard page (stats.c), and the page itself, GET / and
 * GET /dashboard (dashboard.c, the HTML embedded at build time). docs/server.md documents both.
 *
 * Threads: the event-loop thread.
 */
#ifndef TL_SERVER_STATS_H
#define TL_SERVER_STATS_H

#include "front/metrics.h"
#include "server/state.h"

#include <jansson.h>
#include <stdint.h>

// The histogram's q-quantile (0 < q < 1) as Prometheus's histogram_quantile() estimates it:
// the bucket holding rank q * n, linear interpolation inside it, 0 as the lower bound of the
// first bucket, and the last finite bound when the rank falls in the +Inf bucket. NAN when
// the histogram is empty.
double tl_hist_quantile(const struct tl_hist *h, double q);

// The /stats snapshot (new reference; NULL when memory ran out). Engine facts are included
// once the engine exists, model facts once the model is loaded.
json_t *tl_srv_stats_json(struct tl_server *s);

// GET /stats.
void tl_srv_h_stats(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body);
// GET / and GET /dashboard: the page (public: it holds no data, /stats does).
void tl_srv_h_dashboard(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body);

#endif
