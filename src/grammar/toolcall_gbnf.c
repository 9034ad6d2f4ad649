/*
 * A forced tool call as a grammar: tool_choice "required" or a named function makes the reply
 * one call (or several) of the offered functions, written in the chat template's tool-call
 * syntax, whose arguments match the function's `parameters` JSON Schema.
 *
 * One call is a JSON object {"name": <const>, "<args key>": <parameters>}; its schema is an
 * anyOf over the functions (their names are distinct consts, so exactly one matches), turned
 * into GBNF by schema.c; the syntax's text goes around it (struct tl_gcall_form: Hermes'
 * <tool_call> tags, Mistral's [TOOL_CALLS][...], a bare object, ...). Each function's $defs /
 * definitions move to the combined schema's root so that its local $refs still resolve.
 *
 * Thread model: pure functions.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <jansson.h>
#include <string.h>

// Moves schema's "$defs" / "definitions" entries into root's (a name defined differently by two
// functions is an error).
static tl_status hoist_defs(json_t *root, json_t *params, const char *fn)
{
    static const char *const keys[] = {"$defs", "definitions"};
    for (int k = 0; k < 2; k++) {
        json_t *defs = json_object_get(params, keys[k]);
        if (!defs) continue;
        if (!json_is_object(defs))
            return tl__errorf(TL_ERR_INVALID_ARG, "function '%s': '%s' must be an object", fn,
                              keys[k]);
        json_t *into = json_object_get(root, keys[k]);
        if (!into) {
            into = json_object();
            json_object_set_new(root, keys[k], into);
        }
        const char *name;
        json_t *v;
        json_object_foreach(defs, name, v)
        {
            json_t *had = json_object_get(into, name);
            if (had && !json_equal(had, v))
                return tl__errorf(TL_ERR_INVALID_ARG,
                                  "functions define '%s/%s' differently: forcing a call among "
                                  "them is not supported",
                                  keys[k], name);
            json_object_set(into, name, v);
        }
    }
    return TL_OK;
}

tl_status tl_grammar_tool_call_gbnf(const struct tl_gcall_form *form, struct json_t *functions,
                                    bool parallel, char **gbnf)
{
    *gbnf = NULL;
    if (!json_is_array(functions) || !json_array_size(functions))
        return tl__errorf(TL_ERR_INVALID_ARG, "no function to call");
    json_t *root = json_object(), *any = json_array();
    tl_status rc = TL_OK;
    for (size_t i = 0; i < json_array_size(functions) && !rc; i++) {
        json_t *fn = json_array_get(functions, i);
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        if (!json_is_string(name)) {
            rc = tl__errorf(TL_ERR_INVALID_ARG, "a function has no name");
            break;
        }
        json_t *args;
        if (!params || json_is_null(params)) {
            args = json_pack("{s:s}", "type", "object"); // no parameters: any object
        } else if (json_is_object(params)) {
            args = json_copy(params);
            rc = hoist_defs(root, params, json_string_value(name));
            json_object_del(args, "$defs");
            json_object_del(args, "definitions");
        } else {
            rc = tl__errorf(TL_ERR_INVALID_ARG, "function '%s': 'parameters' must be an object",
                            json_string_value(name));
            break;
        }
        json_t *call = json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s,s], s:b}", "type", "object",
                                 "properties", "name", "const", name, form->args_key, args,
                                 "required", "name", form->args_key, "additionalProperties", 0);
        json_array_append_new(any, call);
    }
    if (!rc) json_object_set(root, "anyOf", any);
    json_decref(any);
    char *schema = rc ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (rc) return rc;
    if (!schema) return tl__errorf(TL_ERR_NOMEM, "out of memory");
    char *text = NULL;
    rc = tl_grammar_schema_to_gbnf(schema, strlen(schema), &text);
    free(schema);
    if (rc) return tl__error_prefix(rc, "the function's parameters: ");
    // schema.c's text ends with "root ::= <expr>\n": that expression becomes one call.
    char *last = strstr(text, "\nroot ::= ");
    if (!last) {
        free(text);
        return tl__errorf(TL_ERR_STATE, "grammar: unexpected schema grammar");
    }
    struct gstr o = {0};
    tl__gstr_putn(&o, text, (size_t)(last - text) + 1);
    tl__gstr_printf(&o, "tcall ::= %s", last + strlen("\nroot ::= "));
    free(text);
    tl__gstr_puts(&o, "titem ::= ");
    tl__gstr_literal(&o, form->each_before, strlen(form->each_before));
    tl__gstr_puts(&o, " tcall ");
    tl__gstr_literal(&o, form->each_after, strlen(form->each_after));
    tl__gstr_puts(&o, "\nroot ::= ");
    tl__gstr_literal(&o, form->before, strlen(form->before));
    tl__gstr_puts(&o, " titem ");
    if (parallel) {
        tl__gstr_puts(&o, "(");
        tl__gstr_literal(&o, form->sep, strlen(form->sep));
        tl__gstr_puts(&o, " titem)* ");
    }
    tl__gstr_literal(&o, form->after, strlen(form->after));
    tl__gstr_puts(&o, "\n");
    if (o.failed) {
        free(o.p);
        return tl__errorf(TL_ERR_NOMEM, "out of memory");
    }
    *gbnf = o.p;
    return TL_OK;
}
