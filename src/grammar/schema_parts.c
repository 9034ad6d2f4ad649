/*
 * JSON Schema plumbing for schema.c: errors with the JSON pointer, local $ref resolution, and
 * merging a schema's parts (its own keywords, its $ref target, its allOf members) into one
 * schema, which is how allOf and keywords beside a $ref / anyOf / oneOf are honoured.
 *
 * Thread model: pure functions.
 */
#include "grammar/grammar_impl.h"

#include "core/error.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Defined here rather than in schema.c so that schema_check.c and this file, which schema.c
// calls, need nothing from schema.c.
const char *const tl__schema_annotations[] = {"title",    "description", "default",  "examples",
                                              "$schema",  "$id",         "$comment", "deprecated",
                                              "readOnly", "writeOnly",   "$anchor",  "strict",
                                              "$defs",    "definitions", NULL};

tl_status tl__schema_err(const char *path, const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, arg);
    return tl__errorf(TL_ERR_INVALID_ARG, "json schema: at '%s': %s", *path ? path : "/", msg);
}

static bool in_list(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

#define MAX_DEPTH 64

tl_status tl__schema_resolve_ref(json_t *root, const char *ref, const char *path, json_t **out)
{
    if (ref[0] != '#')
        return tl__schema_err(path, "only local $ref ('#...') is supported, not '%s'", ref);
    json_t *cur = root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return tl__schema_err(path, "bad $ref '%s'", ref);
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof(seg)) {
            if (p[0] == '~' && p[1] == '1') {
                seg[n++] = '/';
                p += 2;
            } else if (p[0] == '~' && p[1] == '0') {
                seg[n++] = '~';
                p += 2;
            } else {
                seg[n++] = *p++;
            }
        }
        seg[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, seg);
        else if (json_is_array(cur))
            cur = json_array_get(cur, (size_t)strtoul(seg, NULL, 10));
        else
            cur = NULL;
        if (!cur) return tl__schema_err(path, "$ref '%s' points to nothing", ref);
    }
    *out = cur;
    return TL_OK;
}

// Appends the parts of schema m to list: a $ref is replaced by its target (and m's other
// keywords), an allOf by its members, `true` by nothing. Bounded by MAX_DEPTH.
static tl_status flatten_parts(json_t *root, json_t *m, const char *path, json_t *list, int depth)
{
    if (depth > MAX_DEPTH) return tl__schema_err(path, "%s", "$ref / allOf nested too deeply");
    if (json_is_true(m)) return TL_OK;
    if (json_is_false(m)) return tl__schema_err(path, "%s", "schema 'false' matches nothing");
    if (!json_is_object(m)) return tl__schema_err(path, "%s", "allOf members must be schemas");
    json_t *ref = json_object_get(m, "$ref"), *all = json_object_get(m, "allOf");
    if (!ref && !all) {
        json_array_append(list, m);
        return TL_OK;
    }
    tl_status rc = TL_OK;
    if (ref) {
        if (!json_is_string(ref)) return tl__schema_err(path, "%s", "$ref must be a string");
        json_t *target = NULL;
        rc = tl__schema_resolve_ref(root, json_string_value(ref), path, &target);
        if (!rc) rc = flatten_parts(root, target, path, list, depth + 1);
    }
    if (all && !rc) {
        if (!json_is_array(all)) return tl__schema_err(path, "%s", "allOf must be an array");
        for (size_t i = 0; i < json_array_size(all) && !rc; i++)
            rc = flatten_parts(root, json_array_get(all, i), path, list, depth + 1);
    }
    // m's own keywords last: properties come out target first, then allOf's, then m's own
    json_t *rest = json_copy(m);
    json_object_del(rest, "$ref");
    json_object_del(rest, "allOf");
    json_array_append_new(list, rest);
    return rc;
}

// Merges schema s's parts (its own keywords, $ref targets, allOf members) into one schema:
// properties are united, required concatenated, anything else must agree.
tl_status tl__schema_merge_parts(json_t *root, json_t *s, const char *path, json_t **out)
{
    json_t *parts = json_array(), *m = json_object();
    tl_status rc = flatten_parts(root, s, path, parts, 0);
    for (size_t i = 0; i < json_array_size(parts) && !rc; i++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_array_get(parts, i), k, v)
        {
            json_t *have = json_object_get(m, k);
            if (!have) {
                json_object_set(m, k, v);
            } else if (!strcmp(k, "properties") && json_is_object(have) && json_is_object(v)) {
                json_t *u = json_deep_copy(have);
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv)
                {
                    json_t *had = json_object_get(u, pk);
                    if (had && !json_equal(had, pv)) {
                        // both constrain it: the property must satisfy both
                        json_object_set_new(u, pk, json_pack("{s[OO]}", "allOf", had, pv));
                    } else {
                        json_object_set(u, pk, pv);
                    }
                }
                json_object_set_new(m, k, u);
            } else if (!strcmp(k, "required") && json_is_array(have) && json_is_array(v)) {
                json_t *u = json_deep_copy(have);
                json_array_extend(u, v);
                json_object_set_new(m, k, u);
            } else if (!json_equal(have, v) && !in_list(k, tl__schema_annotations)) {
                rc = tl__schema_err(path, "allOf / $ref parts disagree on '%s' (not supported)", k);
            }
        }
    }
    // A part that closes its object (additionalProperties false or a schema) refuses the
    // properties only another part declares: the union would generate them.
    json_t *props = json_object_get(m, "properties");
    for (size_t i = 0; i < json_array_size(parts) && !rc && json_array_size(parts) > 1; i++) {
        json_t *part = json_array_get(parts, i),
               *ap = json_object_get(part, "additionalProperties");
        if (!ap || json_is_true(ap)) continue;
        const char *pk;
        json_t *pv;
        json_object_foreach(props, pk, pv)
        {
            if (!rc && !json_object_get(json_object_get(part, "properties"), pk))
                rc = tl__schema_err(
                    path,
                    "allOf / $ref: property '%s' is declared by one part but another "
                    "part's additionalProperties refuses it (not supported)",
                    pk);
        }
    }
    json_decref(parts);
    if (rc) {
        json_decref(m);
        return rc;
    }
    *out = m;
    return TL_OK;
}

// The first keyword of s, other than annotations and the keys in skip, or NULL.
const char *tl__schema_other_keyword(json_t *s, const char *const *skip)
{
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        if (!in_list(k, tl__schema_annotations) && !in_list(k, skip)) return k;
    }
    return NULL;
}
