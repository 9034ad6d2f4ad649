/*
 * Requests waiting for their grammar: a constrained request whose grammar is not in the LRU is
 * parked here while the grammar compile worker (src/grammar/compile_worker.c) compiles it, so
 * the event loop never compiles and every stream keeps flowing. When the grammar is ready the
 * request starts (tl_srv_req_start); when compiling failed it gets the 400; when its client
 * left meanwhile it is dropped.
 *
 * Threads: everything here runs on the loop; the worker only compiles.
 */
#ifndef TL_SERVER_GRAMMAR_WAIT_H
#define TL_SERVER_GRAMMAR_WAIT_H

#include "server/openai.h"

#include <event2/http.h>
#include <stdint.h>

struct tl_server;
struct tl_srv_gwait; // one parked request (grammar_wait.c)

// Starts the compile worker and its loop event. TL_ERR_* when it cannot.
tl_status tl_srv_gwait_open(struct tl_server *s) TL_WARN_UNUSED;
// Parks the request (takes *p: p->grammar_kind / grammar_src name what to compile).
void tl_srv_gwait_start(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                        struct tl_oai_params *p);
// How many requests wait for their grammar (a draining server waits for them too).
int tl_srv_gwait_count(const struct tl_server *s);
// Stops the worker and frees what still waits (their connections are being closed). Before
// tl_http_close.
void tl_srv_gwait_close(struct tl_server *s);

#endif
