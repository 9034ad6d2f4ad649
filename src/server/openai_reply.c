/*
 * The OpenAI response objects (see openai.h): error and usage objects, logprobs in the
 * completions and chat shapes, choices, chunk deltas and envelopes, exactly as the OpenAI API
 * defines them.
 *
 * Every builder returns a whole object or NULL (memory ran out), never a partial one, so that
 * a caller checking for NULL cannot send a reply with fields missing. Pure and thread-safe.
 */
#include "server/openai.h"

#include "core/strbuf.h"
#include "core/utf8.h"

#include <math.h>
#include <string.h>

// Builders below return NULL, never a partial object, when memory runs out.

// o[key] = v (v stolen); false when o or v is NULL or memory ran out.
static bool put(json_t *o, const char *key, json_t *v)
{
    if (!o || !v || !key) {
        json_decref(v);
        return false;
    }
    return json_object_set_new(o, key, v) == 0;
}

// Appends v (stolen) to a; false when a or v is NULL or memory ran out.
static bool push(json_t *a, json_t *v)
{
    if (!a || !v) {
        json_decref(v);
        return false;
    }
    return json_array_append_new(a, v) == 0;
}

// o when ok, else NULL (o freed).
static json_t *whole_or_null(json_t *o, bool ok)
{
    if (ok) return o;
    json_decref(o);
    return NULL;
}

json_t *tl_oai_error_json(const struct tl_oai_error *err)
{
    json_t *e = json_object();
    bool ok = put(e, "message", tl_oai_string(err->message, strlen(err->message)));
    ok = put(e, "type", json_string(err->type ? err->type : "server_error")) && ok;
    ok = put(e, "param", err->param[0] ? json_string(err->param) : json_null()) && ok;
    ok = put(e, "code", err->code ? json_string(err->code) : json_null()) && ok;
    if (!ok) {
        json_decref(e);
        return NULL;
    }
    json_t *root = json_object();
    return whole_or_null(root, put(root, "error", e));
}

// ---- response objects -------------------------------------------------------------------------

json_t *tl_oai_string(const char *s, size_t len)
{
    if (tl_utf8_is_valid(s, len)) return json_stringn(s, len);
    struct tl_sb sb;
    tl_sb_init(&sb);
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = tl_utf8_decode(s + i, len - i, &cp);
        if (k > 0) {
            tl_sb_add(&sb, s + i, (size_t)k);
            i += (size_t)k;
        } else {
            tl_sb_add(&sb, "\xEF\xBF\xBD", 3); // U+FFFD for each bad byte
            i++;
        }
    }
    size_t n;
    char *fixed = tl_sb_take(&sb, &n);
    json_t *j = fixed ? json_stringn(fixed, n) : NULL;
    free(fixed);
    return j;
}

json_t *tl_oai_usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached)
{
    json_t *details = json_object();
    bool ok = put(details, "cached_tokens", json_integer(cached));
    json_t *u = json_object();
    ok = put(u, "prompt_tokens", json_integer(prompt_tokens)) && ok;
    ok = put(u, "completion_tokens", json_integer(completion_tokens)) && ok;
    ok = put(u, "total_tokens", json_integer(prompt_tokens + completion_tokens)) && ok;
    ok = put(u, "prompt_tokens_details", ok ? details : (json_decref(details), NULL)) && ok;
    return whole_or_null(u, ok);
}

// A log-probability as JSON: NaN (unknown) is null; -inf is -9999 as OpenAI reports it.
static json_t *logprob_json(float lp)
{
    if (isnan(lp)) return json_null();
    if (!isfinite(lp)) return json_real(lp < 0 ? -9999.0 : 0.0);
    return json_real((double)lp);
}

static json_t *bytes_json(const char *s, size_t len)
{
    json_t *a = json_array();
    bool ok = a != NULL;
    for (size_t i = 0; ok && i < len; i++)
        ok = push(a, json_integer((unsigned char)s[i]));
    return whole_or_null(a, ok);
}

bool tl_oai_logprobs_init(struct tl_oai_logprobs *lp, enum tl_oai_kind kind, int64_t offset)
{
    lp->kind = kind;
    lp->offset = offset;
    lp->obj = json_object();
    bool ok;
    if (kind == TL_OAI_CHAT) {
        ok = put(lp->obj, "content", json_array());
        ok = put(lp->obj, "refusal", json_null()) && ok;
    } else {
        ok = put(lp->obj, "tokens", json_array());
        ok = put(lp->obj, "token_logprobs", json_array()) && ok;
        ok = put(lp->obj, "top_logprobs", json_array()) && ok;
        ok = put(lp->obj, "text_offset", json_array()) && ok;
    }
    lp->obj = whole_or_null(lp->obj, ok);
    return ok;
}

void tl_oai_logprobs_free(struct tl_oai_logprobs *lp)
{
    json_decref(lp->obj);
    lp->obj = NULL;
}

bool tl_oai_logprobs_add(struct tl_oai_logprobs *lp, const char *text, size_t text_len,
                         float logprob, const struct tl_token_logprob *top,
                         const char *const *tops_text, const size_t *tops_len, int n_top)
{
    if (!lp->obj) return false;
    if (lp->kind == TL_OAI_CHAT) {
        json_t *e = json_object();
        bool ok = put(e, "token", tl_oai_string(text, text_len));
        ok = put(e, "logprob", logprob_json(logprob)) && ok;
        ok = put(e, "bytes", bytes_json(text, text_len)) && ok;
        json_t *tops = json_array();
        for (int i = 0; ok && i < n_top; i++) {
            json_t *t = json_object();
            bool t_ok = put(t, "token", tl_oai_string(tops_text[i], tops_len[i]));
            t_ok = put(t, "logprob", logprob_json(top[i].logprob)) && t_ok;
            t_ok = put(t, "bytes", bytes_json(tops_text[i], tops_len[i])) && t_ok;
            ok = push(tops, whole_or_null(t, t_ok));
        }
        ok = put(e, "top_logprobs", ok ? tops : (json_decref(tops), NULL)) && ok;
        return push(json_object_get(lp->obj, "content"), whole_or_null(e, ok));
    }
    bool ok = push(json_object_get(lp->obj, "tokens"), tl_oai_string(text, text_len));
    ok = push(json_object_get(lp->obj, "token_logprobs"), logprob_json(logprob)) && ok;
    json_t *tops = json_null();
    if (!isnan(logprob)) {
        tops = json_object();
        for (int i = 0; ok && i < n_top; i++) {
            json_t *key = tl_oai_string(tops_text[i], tops_len[i]);
            ok = put(tops, key ? json_string_value(key) : NULL, logprob_json(top[i].logprob));
            json_decref(key);
        }
        tops = whole_or_null(tops, ok);
    }
    ok = push(json_object_get(lp->obj, "top_logprobs"), tops) && ok;
    ok = push(json_object_get(lp->obj, "text_offset"), json_integer(lp->offset)) && ok;
    lp->offset += (int64_t)text_len;
    return ok;
}

json_t *tl_oai_logprobs_take(struct tl_oai_logprobs *lp)
{
    json_t *o = lp->obj;
    lp->obj = NULL;
    return o;
}

json_t *tl_oai_text_choice(int index, const char *text, size_t len, json_t *logprobs,
                           const char *finish)
{
    json_t *c = json_object();
    bool ok = put(c, "index", json_integer(index));
    ok = put(c, "text", tl_oai_string(text, len)) && ok;
    ok = put(c, "logprobs", logprobs ? logprobs : json_null()) && ok;
    ok = put(c, "finish_reason", finish ? json_string(finish) : json_null()) && ok;
    return whole_or_null(c, ok);
}

json_t *tl_oai_chat_choice(int index, const char *text, size_t len, json_t *logprobs,
                           const char *finish)
{
    json_t *msg = json_object();
    bool ok = put(msg, "role", json_string("assistant"));
    ok = put(msg, "content", tl_oai_string(text, len)) && ok;
    json_t *c = json_object();
    ok = put(c, "index", json_integer(index)) && ok;
    ok = put(c, "message", ok ? msg : (json_decref(msg), NULL)) && ok;
    ok = put(c, "logprobs", logprobs ? logprobs : json_null()) && ok;
    ok = put(c, "finish_reason", finish ? json_string(finish) : json_null()) && ok;
    return whole_or_null(c, ok);
}

json_t *tl_oai_chat_delta(int index, bool with_role, const char *text, size_t len, json_t *logprobs,
                          const char *finish)
{
    json_t *delta = json_object();
    bool ok = delta != NULL;
    if (with_role) ok = put(delta, "role", json_string("assistant")) && ok;
    if (text) ok = put(delta, "content", tl_oai_string(text, len)) && ok;
    json_t *c = json_object();
    ok = put(c, "index", json_integer(index)) && ok;
    ok = put(c, "delta", ok ? delta : (json_decref(delta), NULL)) && ok;
    ok = put(c, "logprobs", logprobs ? logprobs : json_null()) && ok;
    ok = put(c, "finish_reason", finish ? json_string(finish) : json_null()) && ok;
    return whole_or_null(c, ok);
}

json_t *tl_oai_envelope(const char *id, const char *object, int64_t created, const char *model,
                        json_t *choices)
{
    json_t *o = json_object();
    bool ok = put(o, "id", json_string(id));
    ok = put(o, "object", json_string(object)) && ok;
    ok = put(o, "created", json_integer(created)) && ok;
    ok = put(o, "model", tl_oai_string(model, strlen(model))) && ok;
    ok = put(o, "choices", choices) && ok;
    return whole_or_null(o, ok);
}

const char *tl_oai_finish_str(enum tl_finish_reason r)
{
    switch (r) {
    case TL_FINISH_STOP:
        return "stop";
    case TL_FINISH_LENGTH:
        return "length";
    case TL_FINISH_CANCELLED:
        return "abort";
    case TL_FINISH_DEADLINE:
        return "timeout";
    case TL_FINISH_ERROR:
        return "error";
    case TL_FINISH_NONE:
        break;
    }
    return NULL;
}

// ---- the KServe v2 generate extension ---------------------------------------------------------

json_t *tl_kserve_output_json(const char *model, const char *text, size_t len, const char *finish,
                              int64_t n_prompt, int64_t n_generated)
{
    json_t *t = tl_oai_string(text ? text : "", len);
    json_t *o =
        t ? json_pack("{ss ss so}", "model_name", model, "model_version", "1", "text_output", t)
          : NULL;
    if (o && finish &&
        (json_object_set_new(o, "finish_reason", json_string(finish)) ||
         json_object_set_new(o, "prompt_tokens", json_integer(n_prompt)) ||
         json_object_set_new(o, "completion_tokens", json_integer(n_generated)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}
