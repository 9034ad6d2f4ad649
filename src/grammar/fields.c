/*
 * The structured-output fields of a request object (an OpenAI-style HTTP body or a batch-job
 * line), as the common servers spell them: OpenAI `response_format` ({"type": "text" |
 * "json_object" | "json_schema", "json_schema": {name, schema, strict, description}}),
 * llama-server `grammar` and `json_schema`, vLLM `guided_json`, `guided_regex`,
 * `guided_choice`, `guided_grammar` and `structured_outputs.{json, regex, choice, grammar}`.
 * At most one may constrain a request; anything unknown inside response_format or
 * structured_outputs is an error naming it (never an unconstrained reply).
 *
 * tl_grammar_from_fields compiles through the process-wide LRU (tl_grammar_get), bounded in size
 * and time; tl_grammar_fields_source only checks the fields and hands back the source, for
 * callers that compile elsewhere (the server: on the compile worker, off its event loop).
 *
 * Thread model: pure function over the object; thread-safe.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <jansson.h>
#include <string.h>

struct pick {
    enum tl_grammar_kind kind;
    json_t *src; // borrowed: a string, or a JSON value to serialize
    const char *param;
};

static tl_status fail(const char **param, const char *name, const char *msg, const char *arg)
{
    *param = name;
    return tl__errorf(TL_ERR_INVALID_ARG, msg, arg);
}

static tl_status set_pick(struct pick *pk, enum tl_grammar_kind kind, json_t *src, const char *name,
                          const char **param)
{
    if (pk->kind != TL_GRAMMAR_NONE)
        return fail(param, name, "only one structured-output field may be given (got '%s' too)",
                    pk->param);
    pk->kind = kind;
    pk->src = src;
    pk->param = name;
    return TL_OK;
}

static tl_status read_response_format(json_t *rf, struct pick *pk, const char **param)
{
    const char *P = "response_format";
    if (!json_is_object(rf)) return fail(param, P, "'%s' must be an object", P);
    json_t *type = json_object_get(rf, "type");
    if (!json_is_string(type)) return fail(param, P, "'%s.type' must be a string", P);
    const char *t = json_string_value(type);
    const char *k;
    json_t *v;
    json_object_foreach(rf, k, v)
    {
        bool ok = !strcmp(k, "type") || (!strcmp(t, "json_schema") && !strcmp(k, "json_schema")) ||
                  (!strcmp(t, "json_object") && !strcmp(k, "schema"));
        if (!ok) return fail(param, P, "unsupported field 'response_format.%s'", k);
    }
    if (!strcmp(t, "text")) return TL_OK;
    if (!strcmp(t, "json_object")) {
        json_t *schema = json_object_get(rf, "schema"); // llama-server's extension
        if (schema) return set_pick(pk, TL_GRAMMAR_JSON_SCHEMA, schema, P, param);
        return set_pick(pk, TL_GRAMMAR_JSON_OBJECT, NULL, P, param);
    }
    if (strcmp(t, "json_schema")) return fail(param, P, "unsupported response_format type '%s'", t);
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return fail(param, P, "'%s.json_schema' must be an object", P);
    json_object_foreach(js, k, v)
    {
        if (strcmp(k, "name") && strcmp(k, "schema") && strcmp(k, "strict") &&
            strcmp(k, "description"))
            return fail(param, P, "unsupported field 'response_format.json_schema.%s'", k);
    }
    json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return fail(param, P, "'%s.json_schema.strict' must be a boolean", P);
    json_t *schema = json_object_get(js, "schema");
    if (!schema) return set_pick(pk, TL_GRAMMAR_JSON_OBJECT, NULL, P, param);
    return set_pick(pk, TL_GRAMMAR_JSON_SCHEMA, schema, P, param);
}

tl_status tl_grammar_fields_source(struct json_t *obj, enum tl_grammar_kind *kind, char **src_out,
                                   size_t *len_out, const char **param)
{
    *kind = TL_GRAMMAR_NONE;
    *src_out = NULL;
    *len_out = 0;
    *param = NULL;
    struct pick pk = {TL_GRAMMAR_NONE, NULL, NULL};
    tl_status rc = TL_OK;
    json_t *v;
    if ((v = json_object_get(obj, "response_format")) && !json_is_null(v))
        if ((rc = read_response_format(v, &pk, param))) return rc;
    static const struct {
        const char *name;
        enum tl_grammar_kind kind;
    } plain[] = {{"grammar", TL_GRAMMAR_GBNF},
                 {"guided_grammar", TL_GRAMMAR_GBNF},
                 {"json_schema", TL_GRAMMAR_JSON_SCHEMA},
                 {"guided_json", TL_GRAMMAR_JSON_SCHEMA},
                 {"guided_regex", TL_GRAMMAR_REGEX},
                 {"guided_choice", TL_GRAMMAR_CHOICE}};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        if ((v = json_object_get(obj, plain[i].name)) && !json_is_null(v))
            if ((rc = set_pick(&pk, plain[i].kind, v, plain[i].name, param))) return rc;
    if ((v = json_object_get(obj, "structured_outputs")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return fail(param, "structured_outputs", "'%s' must be an object",
                        "structured_outputs");
        const char *k;
        json_t *f;
        json_object_foreach(v, k, f)
        {
            enum tl_grammar_kind fk = !strcmp(k, "json")      ? TL_GRAMMAR_JSON_SCHEMA
                                      : !strcmp(k, "regex")   ? TL_GRAMMAR_REGEX
                                      : !strcmp(k, "choice")  ? TL_GRAMMAR_CHOICE
                                      : !strcmp(k, "grammar") ? TL_GRAMMAR_GBNF
                                                              : TL_GRAMMAR_NONE;
            if (fk == TL_GRAMMAR_NONE)
                return fail(param, "structured_outputs",
                            "unsupported field 'structured_outputs.%s'", k);
            if (json_is_null(f)) continue;
            if ((rc = set_pick(&pk, fk, f, "structured_outputs", param))) return rc;
        }
    }
    if (pk.kind == TL_GRAMMAR_NONE) return TL_OK;

    // The source text: strings as they are (a schema may also come as JSON text), anything
    // else serialized.
    char *owned = NULL;
    const char *src = NULL;
    size_t len = 0;
    if (pk.kind == TL_GRAMMAR_GBNF || pk.kind == TL_GRAMMAR_REGEX) {
        if (!json_is_string(pk.src))
            return fail(param, pk.param, "'%s' must be a string", pk.param);
        src = json_string_value(pk.src);
        len = json_string_length(pk.src);
    } else if (pk.kind == TL_GRAMMAR_JSON_SCHEMA && json_is_string(pk.src)) {
        src = json_string_value(pk.src);
        len = json_string_length(pk.src);
    } else if (pk.src) {
        if (pk.kind == TL_GRAMMAR_CHOICE && !json_is_array(pk.src))
            return fail(param, pk.param, "'%s' must be an array of strings", pk.param);
        if (pk.kind == TL_GRAMMAR_JSON_SCHEMA && !json_is_object(pk.src) &&
            !json_is_boolean(pk.src))
            return fail(param, pk.param, "'%s': a schema must be an object", pk.param);
        owned = json_dumps(pk.src, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!owned) {
            *param = pk.param;
            return tl__errorf(TL_ERR_NOMEM, "out of memory");
        }
        src = owned;
        len = strlen(owned);
    }
    if (src && !owned) {
        owned = tl_strndup(src, len);
        if (!owned) {
            *param = pk.param;
            return tl__errorf(TL_ERR_NOMEM, "out of memory");
        }
    }
    *kind = pk.kind;
    *src_out = owned;
    *len_out = len;
    *param = pk.param;
    return TL_OK;
}

tl_status tl_grammar_from_fields(struct json_t *obj, struct tl_grammar **out, const char **param)
{
    *out = NULL;
    enum tl_grammar_kind kind;
    char *src;
    size_t len;
    tl_status rc = tl_grammar_fields_source(obj, &kind, &src, &len, param);
    if (rc || kind == TL_GRAMMAR_NONE) {
        if (!rc) *param = NULL;
        return rc;
    }
    rc = tl_grammar_get(kind, src, len, out);
    free(src);
    if (!rc) *param = NULL;
    return rc;
}
