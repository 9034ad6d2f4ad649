/*
 * When a generating request's client goes, or the server stops (see request_impl.h): the
 * connection's close callback and the liveness probe mark the client gone and cancel its
 * choices in the engine; a client that leaves more than max_unsent_bytes unread counts as gone;
 * the shutdown deadline cancels every live choice. A leaf of the request files: it calls none
 * of them.
 *
 * INVARIANTS: a request whose client is gone stays until the DONE of every submitted choice
 * (request.c); only tl_srv_reqs_abandon_all (request.c), with the engine thread joined, frees
 * it sooner.
 *
 * THREADS: the event-loop thread.
 */
#include "server/request_impl.h"

#include "core/log.h"

void tl__req_cancel_choices(struct tl_srv_req *q)
{
    struct tl_server *s = q->srv;
    for (int i = 0; i < q->n_choices; i++) {
        struct tl_srv_choice *c = &q->choices[i];
        if (c->submitted && !c->done) (void)s->be->cancel(s->engine, c->engine_id);
    }
}

void tl__req_client_gone(struct tl_srv_req *q)
{
    if (q->client_gone) return;
    q->client_gone = true;
    q->srv->metrics.client_disconnects++;
    TL_LOGD("serve: client of %s went away; cancelling", q->id);
    tl__req_cancel_choices(q);
}

void tl__req_on_conn_close(void *arg)
{
    struct tl_srv_req *q = arg;
    // libevent is freeing the connection: q->http is orphaned (not freed) and ours to end.
    q->conn_closed = true;
    q->watch = NULL;
    tl__req_client_gone(q);
}

void tl__req_unwatch(struct tl_srv_req *q)
{
    tl_http_unwatch(&q->srv->http, q->watch);
    q->watch = NULL;
}

// Bounds what a client may leave unread. libevent queues whatever the socket does not take,
// without limit: a client that stops reading (TCP window full) would make its stream's memory
// grow with every token. Past the bound the client counts as gone: its choices are cancelled,
// nothing more is queued, and what is queued leaves with the connection (timeout or close).
void tl__req_check_unsent(struct tl_srv_req *q, size_t unsent)
{
    struct tl_server *s = q->srv;
    if (!q->client_gone && s->cfg.max_unsent_bytes && unsent > s->cfg.max_unsent_bytes) {
        TL_LOGW("serve: %s: the client left %zu bytes unread; cancelling", q->id, unsent);
        tl__req_client_gone(q);
    }
}

// ---- the server's view of all requests -------------------------------------------------------

void tl_srv_reqs_probe(struct tl_server *s)
{
    for (struct tl_srv_req *q = s->reqs; q; q = q->next)
        if (!q->client_gone && q->watch && tl_http_peer_closed(q->watch)) tl__req_client_gone(q);
}

void tl_srv_reqs_cancel_all(struct tl_server *s)
{
    for (struct tl_srv_req *q = s->reqs; q; q = q->next)
        tl__req_cancel_choices(q);
}

int tl_srv_reqs_count(const struct tl_server *s)
{
    int n = 0;
    for (const struct tl_srv_req *q = s->reqs; q; q = q->next)
        n++;
    return n;
}
