/*
 * The Open Inference Protocol's HTTP endpoints (see kserve.h):
 *   GET  /v2                                server metadata
 *   GET  /v2/health/live, /v2/health/ready  200, or 503 {"ready": false} while loading/draining
 *   GET  /v2/models/NAME                    model metadata (the LLM tensors, as over gRPC)
 *   GET  /v2/models/NAME/ready              {"name", "ready"}
 *   POST /v2/models/NAME/generate           {"text_input": ..., "parameters": {...}} -> JSON
 *   POST /v2/models/NAME/generate_stream    the same, as server-sent events
 * The generate body takes the gRPC front's inputs as JSON keys, at the top level or under
 * "parameters" (Triton's convention): text_input, max_tokens, temperature, top_p, top_k, seed,
 * stop, ignore_eos, and sampling_parameters (a JSON string or object). It becomes a
 * /v1/completions body, so validation and its error messages are the OpenAI routes' own.
 *
 * Threads: the event-loop thread.
 */
#include "server/kserve.h"

#include "front/kserve_tensors.h"
#include "server/request.h"
#include "server/route_checks.h"

#include <string.h>

static void send_json(struct tl_server *s, struct evhttp_request *r, int64_t t0, int status,
                      json_t *o)
{
    tl_http_send_json(&s->http, r, status, o, t0, 0, 0);
}

static void send_err(struct tl_server *s, struct evhttp_request *r, int64_t t0, int status,
                     const char *code, const char *msg)
{
    struct tl_oai_error err;
    tl_oai_error_set(&err, status, status == 404 ? "invalid_request_error" : "server_error", code,
                     NULL, "%s", msg);
    tl_srv_send_error(s, r, &err, t0);
}

static json_t *model_metadata(const struct tl_server *s)
{
    json_t *ins = json_array(), *outs = json_array();
    for (int i = 0; ins && i < tl_kserve_n_inputs; i++)
        json_array_append_new(ins, json_pack("{sssss[i]}", "name", tl_kserve_inputs[i].name,
                                             "datatype", tl_kserve_inputs[i].datatype, "shape",
                                             strcmp(tl_kserve_inputs[i].name, "stop") ? 1 : -1));
    if (outs)
        json_array_append_new(
            outs, json_pack("{sssss[i]}", "name", "text_output", "datatype", "BYTES", "shape", 1));
    return json_pack("{ss s[s] ss so so}", "name", s->model_name, "versions", "1", "platform",
                     "tokenloom", "inputs", ins, "outputs", outs);
}

// Copies one generate key into the completions body; false with msg on an unknown key.
static bool put_key(json_t *body, const char *key, json_t *v, char *msg, size_t cap)
{
    static const char *const pass[] = {"max_tokens", "temperature", "top_p",     "top_k",
                                       "seed",       "stop",        "ignore_eos"};
    if (!strcmp(key, "text_input")) return !json_object_set(body, "prompt", v);
    if (!strcmp(key, "stream")) return true; // the path decides
    for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++)
        if (!strcmp(key, pass[i])) return !json_object_set(body, key, v);
    if (!strcmp(key, "sampling_parameters")) {
        json_t *o = json_is_string(v) ? json_loads(json_string_value(v), 0, NULL) : json_incref(v);
        bool ok = json_is_object(o);
        const char *k;
        json_t *x;
        if (ok) json_object_foreach(o, k, x)
            {
                if (!strcmp(k, "text_input") || !(ok = put_key(body, k, x, msg, cap))) break;
            }
        if (!json_is_object(o)) snprintf(msg, cap, "'sampling_parameters' must be a JSON object");
        json_decref(o);
        return ok;
    }
    snprintf(msg, cap,
             "unknown field '%.64s' (generate takes text_input, max_tokens, temperature, top_p, "
             "top_k, seed, stop, ignore_eos, sampling_parameters, at the top level or in "
             "'parameters')",
             key);
    return false;
}

static void generate(struct tl_server *s, struct evhttp_request *r, int64_t t0, bool stream)
{
    json_t *root = tl_srv_route_body(s, r, t0);
    if (!root) return;
    json_t *body = json_object();
    char msg[300] = "out of memory";
    bool ok = body != NULL;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!ok) break;
        if (!strcmp(key, "id") || !strcmp(key, "model_name") || !strcmp(key, "model_version"))
            continue;
        if (!strcmp(key, "parameters")) {
            if (!json_is_object(v)) {
                snprintf(msg, sizeof(msg), "'parameters' must be a JSON object");
                ok = false;
                break;
            }
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2)
            {
                if (!(ok = put_key(body, k2, v2, msg, sizeof(msg)))) break;
            }
        } else {
            ok = put_key(body, key, v, msg, sizeof(msg));
        }
    }
    json_decref(root);
    if (ok && !json_is_string(json_object_get(body, "prompt"))) {
        snprintf(msg, sizeof(msg), "'text_input' (a string) is required");
        ok = false;
    }
    if (!ok) {
        json_decref(body);
        struct tl_oai_error err;
        tl_oai_error_set(&err, 400, "invalid_request_error", "invalid_value", NULL, "%s", msg);
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    json_object_set_new(body, "stream", json_boolean(stream));
    struct tl_oai_params p;
    struct tl_oai_error err;
    struct tl_oai_limits lim = {.n_vocab = s->info.n_vocab};
    if (!tl_oai_parse_root(TL_OAI_COMPLETION, body, &lim, &p, &err)) { // takes body
        tl_srv_send_error(s, r, &err, t0);
        return;
    }
    p.kserve = true;
    tl_srv_req_start(s, r, t0, &p);
}

void tl_srv_kserve_route(struct tl_server *s, struct evhttp_request *r, int64_t t0,
                         const char *path)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(r);
    if (cmd == EVHTTP_REQ_HEAD) cmd = EVHTTP_REQ_GET;
    int st = atomic_load(&s->state);
    bool is_get = cmd == EVHTTP_REQ_GET;
    if (!strcmp(path, "/v2/health/live")) {
        if (!tl_srv_route_method(s, r, t0, path, is_get, "GET")) return;
        send_json(s, r, t0, 200, json_pack("{sb}", "live", 1));
        return;
    }
    if (!strcmp(path, "/v2/health/ready")) {
        if (!tl_srv_route_method(s, r, t0, path, is_get, "GET")) return;
        send_json(s, r, t0, st == TL_SRV_READY ? 200 : 503,
                  json_pack("{sb}", "ready", st == TL_SRV_READY));
        return;
    }
    if (!strcmp(path, "/v2") || !strcmp(path, "/v2/")) {
        if (!tl_srv_route_method(s, r, t0, path, is_get, "GET") || !tl_srv_route_auth(s, r, t0))
            return;
        send_json(s, r, t0, 200,
                  json_pack("{ssss s[s]}", "name", "tokenloom", "version", "1", "extensions",
                            "generate"));
        return;
    }
    const char *prefix = "/v2/models/";
    size_t np = strlen(prefix);
    const char *name = path + np;
    const char *slash = strncmp(path, prefix, np) ? NULL : strchr(name, '/');
    const char *suffix = slash ? slash : name + strlen(name);
    enum { META, READY, GEN, GEN_STREAM, NONE } what = NONE;
    if (!strncmp(path, prefix, np) && suffix > name) {
        if (!*suffix)
            what = META;
        else if (!strcmp(suffix, "/ready"))
            what = READY;
        else if (!strcmp(suffix, "/generate"))
            what = GEN;
        else if (!strcmp(suffix, "/generate_stream"))
            what = GEN_STREAM;
    }
    if (what == NONE) {
        char msg[300];
        snprintf(msg, sizeof(msg), "Not found: %.250s", path);
        send_err(s, r, t0, 404, "not_found", msg);
        return;
    }
    bool post = what == GEN || what == GEN_STREAM;
    if (!tl_srv_route_method(s, r, t0, path, post ? cmd == EVHTTP_REQ_POST : is_get,
                             post ? "POST" : "GET") ||
        !tl_srv_route_auth(s, r, t0))
        return;
    if (what == READY && st != TL_SRV_READY) {
        send_json(s, r, t0, 503, json_pack("{sssb}", "name", "", "ready", 0));
        return;
    }
    if (!tl_srv_route_ready(s, r, t0)) return;
    size_t len = (size_t)(suffix - name);
    if (!((strlen(s->model_name) == len && !strncmp(name, s->model_name, len)) ||
          (strlen(s->model_base) == len && !strncmp(name, s->model_base, len)))) {
        char msg[300];
        snprintf(msg, sizeof(msg), "unknown model '%.*s'; this server serves '%.100s'",
                 (int)(len > 100 ? 100 : len), name, s->model_name);
        send_err(s, r, t0, 404, "model_not_found", msg);
        return;
    }
    if (what == META)
        send_json(s, r, t0, 200, model_metadata(s));
    else if (what == READY)
        send_json(s, r, t0, 200, json_pack("{sssb}", "name", s->model_name, "ready", 1));
    else
        generate(s, r, t0, what == GEN_STREAM);
}
