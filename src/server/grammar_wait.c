/*
 * Requests waiting for their grammar (see grammar_wait.h): parked in a list, the compile job
 * pointing at the parked request; the worker's eventfd wakes the loop, which starts, refuses
 * (400 with the compiler's message and the field) or drops each finished one.
 *
 * Threads: the loop only. Ownership: a parked request owns its params; the job belongs to the
 * worker until taken back here. A request whose client leaves stays parked (r cleared) until
 * its job comes back, since the job points at it.
 */
#include "server/grammar_wait.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "grammar/grammar.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/state.h"

#include <stdio.h>
#include <string.h>

struct tl_srv_gwait {
    struct tl_srv_gwait *prev, *next; // the server's list
    struct tl_server *s;
    struct evhttp_request *r; // NULL once the client is gone
    int64_t t0;
    struct tl_oai_params p; // owned
    struct tl_http_conn *watch;
};

static void unlink_wait(struct tl_server *s, struct tl_srv_gwait *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        s->gwaits = w->next;
    if (w->next) w->next->prev = w->prev;
    s->n_gwait--;
}

static void wait_free(struct tl_srv_gwait *w)
{
    tl_oai_params_free(&w->p);
    free(w);
}

static void on_client_gone(void *arg)
{
    struct tl_srv_gwait *w = arg;
    w->r = NULL; // libevent is freeing the connection and its request
    w->watch = NULL;
}

static void finish(struct tl_server *s, struct tl_gjob *j)
{
    struct tl_srv_gwait *w = j->user;
    unlink_wait(s, w);
    if (!w->r) { // the client left while its grammar compiled
        wait_free(w);
        tl_gjob_free(j);
        return;
    }
    tl_http_unwatch(&s->http, w->watch);
    if (j->rc) {
        struct tl_oai_error err;
        tl_oai_error_from_status(&err, j->rc, j->error);
        snprintf(err.param, sizeof(err.param), "%s", w->p.grammar_param ? w->p.grammar_param : "");
        if (w->p.responses) tl_srv_resp_fix_error(&err); // /v1/responses: text.format
        tl_srv_send_error(s, w->r, &err, w->t0);
        wait_free(w);
    } else {
        w->p.grammar = j->grammar;
        j->grammar = NULL;
        tl_srv_req_start(s, w->r, w->t0, &w->p); // takes the params
        free(w);
    }
    tl_gjob_free(j);
}

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tl_server *s = arg;
    struct tl_gjob *j = tl_gworker_take_done(s->gworker);
    while (j) {
        struct tl_gjob *next = j->next;
        finish(s, j);
        j = next;
    }
}

tl_status tl_srv_gwait_open(struct tl_server *s)
{
    tl_status rc = tl_gworker_create(&s->gworker);
    if (rc) return rc;
    s->ev_gworker =
        event_new(s->base, tl_gworker_fd(s->gworker), EV_READ | EV_PERSIST, on_ready, s);
    if (!s->ev_gworker) return tl__errorf(TL_ERR_NOMEM, "serve: cannot set up the event loop");
    event_add(s->ev_gworker, NULL);
    return TL_OK;
}

void tl_srv_gwait_start(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                        struct tl_oai_params *p)
{
    struct tl_srv_gwait *w = tl_calloc_array(1, sizeof(*w));
    struct tl_gjob *j = w ? tl_gjob_new(p->grammar_kind, p->grammar_src, p->grammar_len, w) : NULL;
    if (!j) {
        free(w);
        tl_oai_params_free(p);
        struct tl_oai_error err;
        tl_oai_error_from_status(&err, TL_ERR_NOMEM, "out of memory");
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    w->s = s;
    w->r = r;
    w->t0 = t0;
    w->p = *p;
    memset(p, 0, sizeof(*p));
    w->watch = tl_http_watch_close(&s->http, r, on_client_gone, w);
    w->next = s->gwaits;
    if (s->gwaits) s->gwaits->prev = w;
    s->gwaits = w;
    s->n_gwait++;
    tl_gworker_submit(s->gworker, j);
}

int tl_srv_gwait_count(const struct tl_server *s)
{
    return s->n_gwait;
}

void tl_srv_gwait_close(struct tl_server *s)
{
    struct tl_gjob *left = NULL;
    tl_gworker_destroy(s->gworker, &left);
    s->gworker = NULL;
    if (s->ev_gworker) event_free(s->ev_gworker);
    s->ev_gworker = NULL;
    while (left) {
        struct tl_gjob *next = left->next;
        tl_gjob_free(left); // its wait is freed below
        left = next;
    }
    while (s->gwaits) {
        struct tl_srv_gwait *w = s->gwaits;
        unlink_wait(s, w);
        if (w->r) tl_http_unwatch(&s->http, w->watch);
        wait_free(w);
    }
}
