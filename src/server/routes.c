/*
 * The server's endpoints (see routes.h).
 *
 * Routes: GET /health, GET /metrics, GET /stats and the dashboard page GET / and GET /dashboard
 * (stats.c, dashboard.c), GET /v1/models, POST /v1/completions, POST /v1/chat/completions,
 * POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API, anthropic.c),
 * POST /v1/responses (translated onto the chat path, responses.c), GET and DELETE
 * /v1/responses/{id} and GET /v1/responses/{id}/input_items (responses_stored.c), POST /tokenize,
 * POST /detokenize; /v2/... goes to kserve.c. Unknown paths get 404 and known paths with the wrong
 * method 405 (with Allow), both as OpenAI error objects (Anthropic's under /v1/messages); with an
 * API key set, everything but /health, /metrics and the page (which holds no data) needs
 * "Authorization: Bearer <key>" or "x-api-key: <key>" (401). Every route but /health, /metrics,
 * /stats and the page needs the model loaded and the server not draining (503).
 *
 * The checks every route passes (route_checks.c) run here before the handler: the API key,
 * readiness, and for a POST the body parsed once with its "model" checked once; the handler
 * gets the parsed object.
 *
 * Threads: everything here runs on the event-loop thread.
 */
#include "server/routes.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "server/anthropic.h"
#include "server/grammar_wait.h"
#include "server/kserve.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/route_checks.h"
#include "server/stats.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <string.h>

// ---- GET endpoints ---------------------------------------------------------------------------

static void h_health(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    int st = atomic_load(&s->state);
    const char *word = st == TL_SRV_READY      ? "ok"
                       : st == TL_SRV_LOADING  ? "loading"
                       : st == TL_SRV_DRAINING ? "draining"
                                               : "failed";
    tl_http_send_json(&s->http, r, st == TL_SRV_READY ? 200 : 503,
                      json_pack("{ss}", "status", word), t0, 0, 0);
}

static void h_metrics(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    struct tl_engine_stats es;
    bool up = tl_srv_metrics_sync(s);
    if (up) s->be->get_stats(s->engine, &es);
    struct tl_sb sb;
    tl_sb_init(&sb);
    struct tl_metrics all; // the server's plus the other front's (gRPC)
    tl_srv_metrics_view(s, &all);
    tl_metrics_render(&all, up ? &es : NULL, tl_time_us(), &sb);
    if (s->front.metrics) s->front.metrics(s->front.arg, s->metrics.model_label, &sb);
    if (!tl_sb_ok(&sb)) {
        tl_sb_free(&sb);
        tl_srv_reply_status(s, r, t0, TL_ERR_NOMEM, "out of memory");
        return;
    }
    tl_http_access_log(r, 200, t0, 0, 0);
    tl_http_send_text(&s->http, r, 200, "text/plain; version=0.0.4; charset=utf-8", sb.buf, sb.len);
    tl_sb_free(&sb);
}

// The served model as OpenAI's model object (new reference, NULL when out of memory).
static json_t *model_object(const struct tl_server *s)
{
    return json_pack("{ss ss sI ss sI sI ss sb ss ss ss?}", "id", s->model_name, "object", "model",
                     "created", (json_int_t)s->started_s, "owned_by", "tokenloom", "max_model_len",
                     (json_int_t)s->max_seq_len, "vocab_size", (json_int_t)s->info.n_vocab,
                     "chat_template", s->chat.source_name, "chat_template_fallback",
                     s->chat.fallback, "root", s->model_base, "tool_call_syntax",
                     tl_tool_syntax_name(s->tool_syntax), "reasoning_tag", s->reasoning.open);
}

static void h_models(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    json_t *m = model_object(s);
    tl_http_send_json(&s->http, r, 200,
                      m ? json_pack("{ss s[o]}", "object", "list", "data", m) : NULL, t0, 0, 0);
}

// GET /v1/models/{id} (the SDKs' models.retrieve): the model when id names it, else 404.
static void h_model(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *body)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    char *id = evhttp_uridecode(evhttp_uri_get_path(uri) + strlen("/v1/models/"), 0, NULL);
    if (id && tl_srv_model_matches(s, id)) {
        tl_http_send_json(&s->http, r, 200, model_object(s), t0, 0, 0);
    } else {
        char msg[400];
        snprintf(msg, sizeof(msg), "The model '%.200s' does not exist; this server serves '%.150s'",
                 id ? id : "", s->model_name);
        tl_srv_reply_error(s, r, t0, 404, "invalid_request_error", "model_not_found", NULL, msg);
    }
    free(id);
}

// ---- POST endpoints --------------------------------------------------------------------------

// POST /tokenize {"prompt": "..."} or {"messages": [...], "tools": [...], ...} (rendered through
// the chat template), "add_special_tokens" (default true for a prompt, false for messages)
// -> {"tokens": [...], "count": N, "max_model_len": M}
static void h_tokenize(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    json_t *add = json_object_get(root, "add_special_tokens");
    if (add && !json_is_null(add) && !json_is_boolean(add)) {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value",
                           "add_special_tokens", "'add_special_tokens' must be a boolean");
        return;
    }
    bool add_special = !add || json_is_null(add) || json_is_true(add);
    char *rendered = NULL;
    const char *text;
    size_t len;
    json_t *prompt = json_object_get(root, "prompt");
    if (json_object_get(root, "messages")) {
        struct tl_oai_params p;
        struct tl_oai_error err;
        struct tl_oai_limits lim = {.n_vocab = s->info.n_vocab};
        if (!tl_oai_parse_root(TL_OAI_CHAT, json_incref(root), &lim, &p, &err)) {
            tl_srv_send_error(s, r, &err, t0);
            return;
        }
        const char *param = NULL;
        tl_status st = tl_chat_template_apply(&s->chat, p.root, &rendered, &len, &param);
        tl_oai_params_free(&p);
        if (st) {
            struct tl_oai_error e2;
            tl_oai_error_from_status(&e2, st, tl_last_error());
            if (param) snprintf(e2.param, sizeof(e2.param), "%s", param);
            tl_srv_send_error(s, r, &e2, t0);
            return;
        }
        text = rendered;
        // A rendered chat carries its own special tokens (vLLM's default for chat).
        if (!add || json_is_null(add)) add_special = false;
    } else if (json_is_string(prompt)) {
        text = json_string_value(prompt);
        len = json_string_length(prompt);
    } else {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "prompt",
                           "'prompt' (a string) or 'messages' is required");
        return;
    }
    struct tl_oai_error lerr;
    if (!tl_srv_text_fits(s, len, rendered ? "messages" : "prompt", &lerr)) {
        free(rendered);
        tl_srv_send_error(s, r, &lerr, t0);
        return;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    tl_status st = s->be->tokenize(s->model, text, len, add_special, true, &ids, &n);
    free(rendered);
    if (st) {
        tl_srv_reply_status(s, r, t0, st, tl_last_error());
        return;
    }
    json_t *arr = json_array();
    bool ok = arr != NULL;
    for (int64_t i = 0; ok && i < n; i++)
        ok = json_array_append_new(arr, json_integer(ids[i])) == 0;
    free(ids);
    if (!ok) json_decref(arr);
    tl_http_send_json(&s->http, r, 200,
                      ok ? json_pack("{so sI sI}", "tokens", arr, "count", (json_int_t)n,
                                     "max_model_len", (json_int_t)s->max_seq_len)
                         : NULL,
                      t0, n, 0);
}

// POST /detokenize {"tokens": [...]} -> {"prompt": "..."}
static void h_detokenize(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "tokens",
                           "'tokens' (a list of token ids) is required");
        return;
    }
    size_t n = json_array_size(toks);
    int32_t *ids = tl_malloc_array(n ? n : 1, sizeof(int32_t));
    if (!ids) {
        tl_srv_reply_status(s, r, t0, TL_ERR_NOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= s->info.n_vocab) {
            char msg[160];
            snprintf(msg, sizeof(msg), "'tokens'[%zu] must be a token id in [0, %d)", i,
                     (int)s->info.n_vocab);
            free(ids);
            tl_srv_reply_error(s, r, t0, 400, "invalid_request_error", "invalid_value", "tokens",
                               msg);
            return;
        }
        ids[i] = (int32_t)id;
    }
    char *text = s->be->detokenize(s->model, ids, (int64_t)n, false);
    free(ids);
    if (!text) {
        tl_srv_reply_status(s, r, t0, TL_ERR_NOMEM, "out of memory detokenizing");
        return;
    }
    json_t *str = tl_oai_string(text, strlen(text));
    free(text);
    tl_http_send_json(&s->http, r, 200, str ? json_pack("{so}", "prompt", str) : NULL, t0, 0,
                      (int64_t)n);
}

// resp (stolen): a /v1/responses context (responses.h), whose errors name its own fields.
static void generate(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root,
                     enum tl_oai_kind kind, json_t *resp)
{
    struct tl_oai_params p;
    struct tl_oai_error err;
    // A grammar not compiled yet compiles on the grammar worker, never on this loop.
    struct tl_oai_limits lim = {.n_vocab = s->info.n_vocab, .defer_grammar = true};
    if (!tl_oai_parse_root(kind, json_incref(root), &lim, &p, &err)) {
        json_decref(resp);
        if (resp) tl_srv_resp_fix_error(&err);
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    p.responses = resp;
    if (p.tool_forced && !tl__oai_forced_call_grammar(&p, s->tool_syntax, &err)) {
        tl_oai_params_free(&p);
        if (resp) tl_srv_resp_fix_error(&err);
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    if (p.grammar_kind != TL_GRAMMAR_NONE) {
        tl_srv_gwait_start(s, r, t0, &p);
        return;
    }
    tl_srv_req_start(s, r, t0, &p);
}

static void h_completions(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    generate(s, r, t0, root, TL_OAI_COMPLETION, NULL);
}

static void h_chat(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    generate(s, r, t0, root, TL_OAI_CHAT, NULL);
}

// POST /v1/responses: translated into a chat request (responses.c) that takes the chat path.
static void h_responses(struct tl_server *s, struct evhttp_request *r, int64_t t0, json_t *root)
{
    json_t *chat, *ctx;
    struct tl_oai_error err;
    if (!tl_srv_resp_translate(s, root, &chat, &ctx, &err)) {
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    generate(s, r, t0, chat, TL_OAI_CHAT, ctx);
    json_decref(chat);
}

// ---- dispatch --------------------------------------------------------------------------------

static const struct route {
    const char *path;
    enum evhttp_cmd_type method; // GET routes take no body; POST routes get it parsed
    bool auth;                   // needs the API key (when one is set)
    bool needs_model;            // 503 unless loaded and not draining
    void (*fn)(struct tl_server *, struct evhttp_request *, int64_t, json_t *);
} routes[] = {
    {"/health", EVHTTP_REQ_GET, false, false, h_health},
    {"/metrics", EVHTTP_REQ_GET, false, false, h_metrics},
    {"/stats", EVHTTP_REQ_GET, true, false, tl_srv_h_stats},
    {"/", EVHTTP_REQ_GET, false, false, tl_srv_h_dashboard},
    {"/dashboard", EVHTTP_REQ_GET, false, false, tl_srv_h_dashboard},
    {"/v1/models", EVHTTP_REQ_GET, true, true, h_models},
    {"/v1/models/{id}", EVHTTP_REQ_GET, true, true, h_model}, // any /v1/models/<id>
    {"/v1/completions", EVHTTP_REQ_POST, true, true, h_completions},
    {"/v1/chat/completions", EVHTTP_REQ_POST, true, true, h_chat},
    {"/v1/messages", EVHTTP_REQ_POST, true, true, tl_srv_h_messages},
    {"/v1/messages/count_tokens", EVHTTP_REQ_POST, true, true, tl_srv_h_count_tokens},
    {"/v1/responses", EVHTTP_REQ_POST, true, true, h_responses},
    {"/v1/responses/{id}", EVHTTP_REQ_GET, true, true, tl_srv_h_response_get},
    {"/v1/responses/{id}", EVHTTP_REQ_DELETE, true, true, tl_srv_h_response_delete},
    {"/v1/responses/{id}/input_items", EVHTTP_REQ_GET, true, true, tl_srv_h_response_input_items},
    {"/tokenize", EVHTTP_REQ_POST, true, true, h_tokenize},
    {"/detokenize", EVHTTP_REQ_POST, true, true, h_detokenize},
};

void tl_srv_routes_handle(struct evhttp_request *r, void *arg)
{
    struct tl_server *s = arg;
    int64_t t0 = tl_time_us();
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    const struct route *match = NULL;
    const char *key = !strncmp(path, "/v1/models/", 11) && path[11] ? "/v1/models/{id}" : path;
    if (!strncmp(path, "/v1/responses/", 14) && path[14]) {
        size_t n = strlen(path), sfx = strlen("/input_items");
        key = n > 14 + sfx && !strcmp(path + n - sfx, "/input_items")
                  ? "/v1/responses/{id}/input_items"
                  : "/v1/responses/{id}";
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(r);
    if (cmd == EVHTTP_REQ_HEAD) cmd = EVHTTP_REQ_GET; // answered as GET, without the body
    char allowed[32] = ""; // every method the path takes (a path may have one route per method)
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(key, routes[i].path)) continue;
        if (!match || routes[i].method == cmd) match = &routes[i];
        const char *m = routes[i].method == EVHTTP_REQ_GET    ? "GET"
                        : routes[i].method == EVHTTP_REQ_POST ? "POST"
                                                              : "DELETE";
        size_t used = strlen(allowed);
        snprintf(allowed + used, sizeof(allowed) - used, "%s%s", used ? ", " : "", m);
    }
    if (!match && !strncmp(path, "/v2", 3) && (!path[3] || path[3] == '/')) {
        tl_srv_kserve_route(s, r, t0, path); // the Open Inference Protocol (kserve.c)
        return;
    }
    if (!match) {
        char msg[300];
        snprintf(msg, sizeof(msg), "Not found: %.250s", path);
        tl_srv_reply_error(s, r, t0, 404, "invalid_request_error", "not_found", NULL, msg);
        return;
    }
    if (cmd != match->method) {
        evhttp_add_header(evhttp_request_get_output_headers(r), "Allow", allowed);
        char msg[300];
        snprintf(msg, sizeof(msg), "Method not allowed: %s takes %s", match->path, allowed);
        tl_srv_reply_error(s, r, t0, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
        return;
    }
    if (match->auth && !tl_srv_route_auth(s, r, t0)) return;
    if (match->needs_model && !tl_srv_route_ready(s, r, t0)) return;
    json_t *body = NULL;
    if (match->method == EVHTTP_REQ_POST && !(body = tl_srv_route_body(s, r, t0))) return;
    match->fn(s, r, t0, body);
    json_decref(body);
}
