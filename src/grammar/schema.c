/*
 * JSON Schema to GBNF: every output the grammar allows is valid against the schema (the
 * grammar may allow a subset of the valid documents, never more). Covered (draft 2020-12 as the
 * common generators emit it): type (also a list), properties, required, additionalProperties
 * (false / true / a schema; absent means none are generated), items, prefixItems, minItems,
 * maxItems, enum, const, anyOf, oneOf (exact: only when its branches provably exclude each
 * other, see schema_check.c), allOf (merged), local $ref into $defs /
 * definitions / any JSON pointer (recursion allowed), minLength, maxLength, pattern, format
 * (date, time, date-time, uuid, email, ipv4), minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, integers. Annotations (title, description, default, examples, ...) are
 * ignored; any other keyword is an error naming it and its JSON pointer. Keywords beside a
 * $ref, an anyOf / oneOf or an enum / const apply too (merged into the target or each branch;
 * enum values that fail them are left out); a combination that cannot be honoured is an error.
 *
 * Output shape: properties in the schema's order, whitespace bounded (at most three of space,
 * tab, newline between tokens), numbers with at most 16 integer digits.
 *
 * Thread model: pure functions.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_REFS 4096
#define MAX_DEPTH 64

static const char BASE_RULES[] =
    "sp ::= [ \\t\\n]{0,3}\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] "
    "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jint ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "jnumber ::= jint (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "jvalue ::= jobject | jarray | jstring | jnumber | \"true\" | \"false\" | \"null\"\n"
    "jobject ::= \"{\" sp (jstring sp \":\" sp jvalue sp (\",\" sp jstring sp \":\" sp jvalue "
    "sp)*)? \"}\"\n"
    "jarray ::= \"[\" sp (jvalue sp (\",\" sp jvalue sp)*)? \"]\"\n"
    "jdate ::= [1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] "
    "[0-9] | \"3\" [01]) | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | "
    "\"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n"
    "jtime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" "
    "[0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "juuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
    "[0-9a-f]{12}\n"
    "jemail ::= [a-z0-9._+-]{1,24} \"@\" [a-z0-9-]{1,24} (\".\" [a-z]{2,6}){1,2}\n"
    "joctet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]\n"
    "jipv4 ::= joctet \".\" joctet \".\" joctet \".\" joctet\n";

struct ref_memo {
    char *ptr; // owned: the $ref string
    int rule;  // its rule number
};

struct sc {
    json_t *root;
    struct gstr rules; // rule definitions generated so far
    int n_rules;
    struct ref_memo *refs; // owned
    size_t n_refs, cap_refs;
    int depth;
};

#define serr tl__schema_err

static void child_path(char *out, size_t cap, const char *path, const char *seg)
{
    snprintf(out, cap, "%s/%s", path, seg);
}

#define ANNOTATIONS tl__schema_annotations
static const char *const KEYWORDS[] = {"type",
                                       "properties",
                                       "required",
                                       "additionalProperties",
                                       "items",
                                       "prefixItems",
                                       "minItems",
                                       "maxItems",
                                       "enum",
                                       "const",
                                       "anyOf",
                                       "oneOf",
                                       "allOf",
                                       "$ref",
                                       "minLength",
                                       "maxLength",
                                       "pattern",
                                       "format",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       NULL};

static bool in_list(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

static tl_status gen_rule(struct sc *c, json_t *s, const char *path, int *rule);

// Appends the JSON text of v as a GBNF literal.
static void put_json_literal(struct gstr *o, json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        o->failed = true;
        return;
    }
    tl__gstr_literal(o, t, strlen(t));
    free(t);
}

// ---- strings --------------------------------------------------------------------------------

static tl_status gen_string(struct sc *c, json_t *s, const char *path, struct gstr *o)
{
    (void)c;
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    json_t *mnl = json_object_get(s, "minLength"), *mxl = json_object_get(s, "maxLength");
    if ((mnl && !json_is_integer(mnl)) || (mxl && !json_is_integer(mxl)))
        return serr(path, "%s", "minLength / maxLength must be integers");
    json_int_t lo = mnl ? json_integer_value(mnl) : 0, hi = mxl ? json_integer_value(mxl) : -1;
    if (lo < 0 || (mxl && hi < lo)) return serr(path, "%s", "bad minLength / maxLength");
    if ((fmt || pat) && (mnl || mxl))
        return serr(path, "%s",
                    "minLength / maxLength together with format or pattern are not "
                    "supported");
    if (fmt && pat) return serr(path, "%s", "format together with pattern is not supported");
    if (fmt) {
        if (!json_is_string(fmt)) return serr(path, "%s", "format must be a string");
        static const char *const known[][2] = {{"date", "jdate"},   {"time", "jtime"},
                                               {"date-time", NULL}, {"uuid", "juuid"},
                                               {"email", "jemail"}, {"ipv4", "jipv4"}};
        const char *f = json_string_value(fmt);
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (!strcmp(f, known[i][0])) {
                tl__gstr_printf(o, "\"\\\"\" %s \"\\\"\"",
                                known[i][1] ? known[i][1] : "jdate \"T\" jtime");
                return TL_OK;
            }
        return serr(path, "unsupported string format '%s'", f);
    }
    if (pat) {
        if (!json_is_string(pat)) return serr(path, "%s", "pattern must be a string");
        tl__gstr_puts(o, "\"\\\"\" ");
        tl_status rc = tl__regex_emit(o, json_string_value(pat), json_string_length(pat), true);
        if (rc) {
            char msg[300];
            snprintf(msg, sizeof(msg), "%s", tl_last_error());
            return serr(path, "pattern: %s", msg);
        }
        tl__gstr_puts(o, " \"\\\"\"");
        return TL_OK;
    }
    if (lo > 100000 || hi > 100000) return serr(path, "%s", "string length bound too large");
    if (!mnl && !mxl)
        tl__gstr_puts(o, "jstring");
    else if (hi < 0)
        tl__gstr_printf(o, "\"\\\"\" jchar{%lld,} \"\\\"\"", (long long)lo);
    else
        tl__gstr_printf(o, "\"\\\"\" jchar{%lld,%lld} \"\\\"\"", (long long)lo, (long long)hi);
    return TL_OK;
}

// ---- objects --------------------------------------------------------------------------------

// An additional property's key: a string of [A-Za-z0-9_-] that is none of the property names.
// One rule per node of the names' trie: each says what may follow that prefix.
static int key_rule(struct sc *c, const char **names, size_t n, size_t depth)
{
    int r = c->n_rules++;
    struct gstr *o = &c->rules;
    // Children bytes at this depth (names sharing the prefix are passed in).
    bool is_end = false;
    char kids[128];
    size_t n_kids = 0;
    for (size_t i = 0; i < n; i++) {
        if (strlen(names[i]) == depth) {
            is_end = true;
            continue;
        }
        char ch = names[i][depth];
        if (!memchr(kids, ch, n_kids)) kids[n_kids++] = ch;
    }
    int kid_rules[128];
    for (size_t k = 0; k < n_kids; k++) {
        const char *sub[4096];
        size_t m = 0;
        for (size_t i = 0; i < n && m < 4096; i++)
            if (strlen(names[i]) > depth && names[i][depth] == kids[k]) sub[m++] = names[i];
        kid_rules[k] = key_rule(c, sub, m, depth + 1);
    }
    tl__gstr_printf(o, "k%d ::= ", r);
    bool first = true;
    if (!is_end) {
        tl__gstr_puts(o, "\"\\\"\"");
        first = false;
    }
    for (size_t k = 0; k < n_kids; k++) {
        tl__gstr_printf(o, "%s\"%c\" k%d", first ? "" : " | ", kids[k], kid_rules[k]);
        first = false;
    }
    // Any other key character, then anything.
    tl__gstr_printf(o, "%s[", first ? "" : " | ");
    static const char keychars[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    bool any = false;
    for (const char *p = keychars; *p; p++)
        if (!memchr(kids, *p, n_kids)) {
            tl__gstr_putn(o, p, 1);
            any = true;
        }
    if (!any) tl__gstr_puts(o, "^\\x00-\\U0010FFFF"); // never: every char is a child
    tl__gstr_puts(o, "] [A-Za-z0-9_-]* \"\\\"\"\n");
    return r;
}

static tl_status gen_object(struct sc *c, json_t *s, const char *path, struct gstr *o)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return serr(path, "%s", "properties must be an object");
    if (req && !json_is_array(req)) return serr(path, "%s", "required must be an array");
    // The members: declared properties in order, then required names not declared.
    size_t n = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0);
    if (n > 4096) return serr(path, "%s", "too many properties");
    const char **names = tl_calloc_array(n + 1, sizeof(char *));
    json_t **schemas = tl_calloc_array(n + 1, sizeof(json_t *));
    bool *required = tl_calloc_array(n + 1, sizeof(bool));
    int *rules = tl_calloc_array(n + 1, sizeof(int));
    tl_status rc = TL_OK;
    if (!names || !schemas || !required || !rules) {
        rc = tl__errorf(TL_ERR_NOMEM, "json schema: out of memory");
        goto out;
    }
    size_t m = 0;
    const char *key;
    json_t *val;
    if (props) json_object_foreach(props, key, val)
        {
            names[m] = key;
            schemas[m++] = val;
        }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            rc = serr(path, "%s", "required must hold strings");
            goto out;
        }
        size_t j = 0;
        while (j < m && strcmp(names[j], json_string_value(r)))
            j++;
        if (j == m) {
            names[m] = json_string_value(r);
            schemas[m++] = json_true(); // a static singleton: no reference to drop
        }
        required[j] = true;
    }
    for (size_t i = 0; i < m; i++) {
        char cp[512];
        child_path(cp, sizeof(cp), path, names[i]);
        rc = gen_rule(c, schemas[i], cp, &rules[i]);
        if (rc) goto out;
    }
    // Additional members.
    int add_rule = -1, key_r = -1;
    if (addl && !json_is_boolean(addl) && !json_is_object(addl)) {
        rc = serr(path, "%s", "additionalProperties must be a boolean or a schema");
        goto out;
    }
    if (addl && !json_is_false(addl)) {
        char cp[512];
        child_path(cp, sizeof(cp), path, "additionalProperties");
        rc = gen_rule(c, addl, cp, &add_rule);
        if (rc) goto out;
        const char **kn = tl_calloc_array(m + 1, sizeof(char *));
        size_t nk = 0;
        if (!kn) {
            rc = tl__errorf(TL_ERR_NOMEM, "json schema: out of memory");
            goto out;
        }
        for (size_t i = 0; i < m; i++) {
            bool plain = strlen(names[i]) < 200;
            for (const char *p = names[i]; *p && plain; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
                    plain = false;
            if (plain) kn[nk++] = names[i];
        }
        int kr = key_rule(c, kn, nk, 0);
        free(kn);
        key_r = c->n_rules++;
        tl__gstr_printf(&c->rules, "k%d ::= \"\\\"\" k%d sp \":\" sp r%d sp\n", key_r, kr,
                        add_rule);
    }
    // A_i: nothing emitted yet; B_i: something emitted (so a comma comes first).
    int base = c->n_rules;
    c->n_rules += 2 * (int)(m + 1);
    struct gstr *R = &c->rules;
    for (size_t i = m + 1; i-- > 0;) {
        int a = base + 2 * (int)i, b = a + 1;
        if (i == m) {
            if (key_r >= 0) {
                tl__gstr_printf(R, "r%d ::= (k%d (\",\" sp k%d)*)?\n", a, key_r, key_r);
                tl__gstr_printf(R, "r%d ::= (\",\" sp k%d)*\n", b, key_r);
            } else {
                tl__gstr_printf(R, "r%d ::= \"\"\nr%d ::= \"\"\n", a, b);
            }
            continue;
        }
        struct gstr kv = {0};
        json_t *kstr = json_string(names[i]);
        put_json_literal(&kv, kstr);
        json_decref(kstr);
        tl__gstr_printf(&kv, " sp \":\" sp r%d sp", rules[i]);
        if (kv.failed) {
            free(kv.p);
            rc = tl__errorf(TL_ERR_NOMEM, "json schema: out of memory");
            goto out;
        }
        tl__gstr_printf(R, "r%d ::= ", a);
        tl__gstr_puts(R, kv.p);
        tl__gstr_printf(R, " r%d", b + 2);
        if (!required[i]) tl__gstr_printf(R, " | r%d", a + 2);
        tl__gstr_printf(R, "\nr%d ::= \",\" sp ", b);
        tl__gstr_puts(R, kv.p);
        tl__gstr_printf(R, " r%d", b + 2);
        if (!required[i]) tl__gstr_printf(R, " | r%d", b + 2);
        tl__gstr_puts(R, "\n");
        free(kv.p);
    }
    tl__gstr_printf(o, "\"{\" sp r%d \"}\"", base);
out:
    free(names);
    free(schemas);
    free(required);
    free(rules);
    return rc;
}

// ---- arrays ---------------------------------------------------------------------------------

static tl_status gen_array(struct sc *c, json_t *s, const char *path, struct gstr *o)
{
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *jmin = json_object_get(s, "minItems"), *jmax = json_object_get(s, "maxItems");
    if ((jmin && !json_is_integer(jmin)) || (jmax && !json_is_integer(jmax)))
        return serr(path, "%s", "minItems / maxItems must be integers");
    if (prefix && !json_is_array(prefix)) return serr(path, "%s", "prefixItems must be an array");
    if (items && json_is_array(items))
        return serr(path, "%s",
                    "items as an array (draft 4-2019) is not supported; use "
                    "prefixItems");
    long long mn = jmin ? json_integer_value(jmin) : 0, mx = jmax ? json_integer_value(jmax) : -1;
    if (mn < 0 || (jmax && mx < 0)) return serr(path, "%s", "negative minItems / maxItems");
    if (mn > 100000 || mx > 100000) return serr(path, "%s", "minItems / maxItems too large");
    size_t k = prefix ? json_array_size(prefix) : 0;
    if (k > 1024) return serr(path, "%s", "too many prefixItems");
    bool no_more = (items && json_is_false(items)) || (!items && k > 0);
    if (no_more && (mx < 0 || mx > (long long)k)) mx = (long long)k;
    if (mx >= 0 && mn > mx) return serr(path, "%s", "minItems exceeds the items allowed");
    int item_rule = -1;
    if (!no_more) {
        char cp[512];
        child_path(cp, sizeof(cp), path, "items");
        tl_status rc = gen_rule(c, items ? items : json_true(), cp, &item_rule);
        if (rc) return rc;
    }
    int prule[1024];
    for (size_t i = 0; i < k; i++) {
        char cp[512], seg[32];
        snprintf(seg, sizeof(seg), "prefixItems/%zu", i);
        child_path(cp, sizeof(cp), path, seg);
        tl_status rc = gen_rule(c, json_array_get(prefix, i), cp, &prule[i]);
        if (rc) return rc;
    }
    if (mx == 0) {
        tl__gstr_puts(o, "\"[\" sp \"]\"");
        return TL_OK;
    }
    // Tail after i >= 1 items: positions below k one by one, then the rest by repetition.
    int first_rule = k > 0 ? prule[0] : item_rule;
    struct gstr *R = &c->rules;
    int tail = c->n_rules++;
    int cur = tail;
    for (size_t i = 1;; i++) {
        if (mx >= 0 && (long long)i >= mx) {
            tl__gstr_printf(R, "r%d ::= \"\"\n", cur);
            break;
        }
        if (i < k) {
            int next = c->n_rules++;
            tl__gstr_printf(R, "r%d ::= \",\" sp r%d sp r%d", cur, prule[i], next);
            if ((long long)i >= mn) tl__gstr_puts(R, " | \"\"");
            tl__gstr_puts(R, "\n");
            cur = next;
            continue;
        }
        long long must = mn > (long long)i ? mn - (long long)i : 0;
        tl__gstr_printf(R, "r%d ::= (\",\" sp r%d sp){%lld}", cur, item_rule, must);
        if (mx < 0)
            tl__gstr_printf(R, " (\",\" sp r%d sp)*\n", item_rule);
        else
            tl__gstr_printf(R, " (\",\" sp r%d sp){0,%lld}\n", item_rule, mx - (long long)i - must);
        break;
    }
    if (mn == 0)
        tl__gstr_printf(o, "\"[\" sp (r%d sp r%d)? \"]\"", first_rule, tail);
    else
        tl__gstr_printf(o, "\"[\" sp r%d sp r%d \"]\"", first_rule, tail);
    return TL_OK;
}

// ---- dispatch -------------------------------------------------------------------------------

static tl_status gen_typed(struct sc *c, json_t *s, const char *path, const char *t, struct gstr *o)
{
    if (!strcmp(t, "string")) return gen_string(c, s, path, o);
    if (!strcmp(t, "integer")) return tl__schema_gen_number(s, path, true, o);
    if (!strcmp(t, "number")) return tl__schema_gen_number(s, path, false, o);
    if (!strcmp(t, "object")) return gen_object(c, s, path, o);
    if (!strcmp(t, "array")) return gen_array(c, s, path, o);
    if (!strcmp(t, "boolean")) {
        tl__gstr_puts(o, "(\"true\" | \"false\")");
        return TL_OK;
    }
    if (!strcmp(t, "null")) {
        tl__gstr_puts(o, "\"null\"");
        return TL_OK;
    }
    return serr(path, "unknown type '%s'", t);
}

// const / enum (both: their intersection), less the values that fail s's other keywords.
static tl_status gen_values(struct sc *c, json_t *s, const char *path, struct gstr *o)
{
    (void)c;
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (e && (!json_is_array(e) || !json_array_size(e)))
        return serr(path, "%s", "enum must be a non-empty array");
    json_t *vals = k ? json_pack("[O]", k) : json_incref(e);
    size_t n = 0;
    tl__gstr_puts(o, "(");
    for (size_t i = 0; i < json_array_size(vals); i++) {
        const char *unsup;
        int ok = tl__schema_value_ok(s, json_array_get(vals, i), &unsup);
        if (ok < 0) {
            json_decref(vals);
            return serr(path, "'enum' / 'const' together with '%s' is not supported", unsup);
        }
        if (!ok) continue;
        if (n++) tl__gstr_puts(o, " | ");
        put_json_literal(o, json_array_get(vals, i));
    }
    tl__gstr_puts(o, ")");
    json_decref(vals);
    if (!n)
        return serr(path, "%s",
                    "no value of 'enum' / 'const' satisfies the schema's other keywords");
    return TL_OK;
}

// anyOf / oneOf. Keywords beside it apply to every branch (each branch is merged with them).
// oneOf is generated as anyOf only when no branch's documents can match another branch
// (tl__schema_excludes proves it); otherwise it is an error, never a document that might match
// two branches.
static tl_status gen_alternatives(struct sc *c, json_t *s, const char *path, struct gstr *o)
{
    bool one = json_object_get(s, "oneOf") != NULL;
    const char *key = one ? "oneOf" : "anyOf";
    json_t *any = json_object_get(s, key);
    if (!json_is_array(any) || !json_array_size(any))
        return serr(path, "'%s' must be a non-empty array", key);
    static const char *const skip[] = {"anyOf", "oneOf", NULL};
    json_t *siblings = NULL;
    if (tl__schema_other_keyword(s, skip)) {
        siblings = json_copy(s);
        json_object_del(siblings, "anyOf");
        json_object_del(siblings, "oneOf");
    }
    json_t *branches = json_array();
    tl_status rc = TL_OK;
    for (size_t i = 0; i < json_array_size(any) && !rc; i++) {
        char cp[512], seg[32];
        snprintf(seg, sizeof(seg), "%s/%zu", key, i);
        child_path(cp, sizeof(cp), path, seg);
        json_t *b = json_array_get(any, i), *m = NULL;
        if (siblings || one) { // resolved (and merged with the siblings) to compare branches
            json_t *both = siblings ? json_pack("{s[OO]}", "allOf", siblings, b)
                                    : json_pack("{s[O]}", "allOf", b);
            rc = tl__schema_merge_parts(c->root, both, cp, &m);
            json_decref(both);
        } else {
            m = json_incref(b);
        }
        if (!rc) json_array_append_new(branches, m);
    }
    for (size_t i = 0; one && !rc && i < json_array_size(branches); i++)
        for (size_t j = 0; !rc && j < json_array_size(branches); j++) {
            if (i == j ||
                tl__schema_excludes(json_array_get(branches, i), json_array_get(branches, j)))
                continue;
            char msg[400];
            snprintf(msg, sizeof(msg),
                     "oneOf branches %zu and %zu may match the same document: oneOf is only "
                     "supported when its branches exclude each other (different types, distinct "
                     "const/enum values, a required const property, or a required property "
                     "the other branch lacks); use anyOf if both may match",
                     i, j);
            rc = serr(path, "%s", msg);
        }
    tl__gstr_puts(o, "(");
    for (size_t i = 0; i < json_array_size(branches) && !rc; i++) {
        char cp[512], seg[32];
        snprintf(seg, sizeof(seg), "%s/%zu", key, i);
        child_path(cp, sizeof(cp), path, seg);
        int r;
        rc = gen_rule(c, json_array_get(branches, i), cp, &r);
        if (!rc) tl__gstr_printf(o, "%sr%d", i ? " | " : "", r);
    }
    tl__gstr_puts(o, ")");
    json_decref(branches);
    json_decref(siblings);
    return rc;
}

static tl_status gen_expr(struct sc *c, json_t *s, const char *path, struct gstr *o)
{
    if (json_is_true(s)) {
        tl__gstr_puts(o, "jvalue");
        return TL_OK;
    }
    if (json_is_false(s)) return serr(path, "%s", "schema 'false' matches nothing");
    if (!json_is_object(s)) return serr(path, "%s", "a schema must be an object or a boolean");
    if (++c->depth > MAX_DEPTH) return serr(path, "%s", "schema nested too deeply");
    if (tl__gcompile_over()) return TL_ERR_INVALID_ARG;
    tl_status rc = TL_OK;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        if (!in_list(k, KEYWORDS) && !in_list(k, ANNOTATIONS))
            return serr(path, "unsupported JSON Schema keyword '%s'", k);
    }
    json_t *ref = json_object_get(s, "$ref"), *t = json_object_get(s, "type");
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    static const char *const ref_only[] = {"$ref", NULL};
    if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
        return serr(path, "%s", "'anyOf' and 'oneOf' in the same schema are not supported");
    if (json_object_get(s, "allOf") || (ref && tl__schema_other_keyword(s, ref_only))) {
        // allOf, or a $ref with keywords beside it (they apply too): one merged schema
        json_t *m = NULL;
        rc = tl__schema_merge_parts(c->root, s, path, &m);
        if (rc) return rc;
        rc = gen_expr(c, m, path, o);
        json_decref(m);
    } else if (ref) {
        if (!json_is_string(ref)) return serr(path, "%s", "$ref must be a string");
        const char *r = json_string_value(ref);
        size_t i = 0;
        while (i < c->n_refs && strcmp(c->refs[i].ptr, r))
            i++;
        if (i == c->n_refs) {
            json_t *target = NULL;
            rc = tl__schema_resolve_ref(c->root, r, path, &target);
            if (rc) return rc;
            if (c->n_refs >= MAX_REFS ||
                !tl_grow((void **)&c->refs, &c->cap_refs, c->n_refs + 1, sizeof(*c->refs)))
                return serr(path, "%s", "too many $refs");
            c->refs[i].ptr = tl_strndup(r, strlen(r));
            c->refs[i].rule = c->n_rules++;
            c->n_refs++;
            struct gstr body = {0};
            rc = gen_expr(c, target, r + 1, &body);
            if (!rc) tl__gstr_printf(&c->rules, "r%d ::= %s\n", c->refs[i].rule, body.p);
            free(body.p);
            if (rc) return rc;
        }
        tl__gstr_printf(o, "r%d", c->refs[i].rule);
    } else if (json_object_get(s, "const") || json_object_get(s, "enum")) {
        rc = gen_values(c, s, path, o);
    } else if (any) {
        rc = gen_alternatives(c, s, path, o);
    } else if (json_is_string(t)) {
        rc = gen_typed(c, s, path, json_string_value(t), o);
    } else if (json_is_array(t)) {
        if (!json_array_size(t)) return serr(path, "%s", "type list is empty");
        tl__gstr_puts(o, "(");
        for (size_t i = 0; i < json_array_size(t) && !rc; i++) {
            json_t *ti = json_array_get(t, i);
            if (!json_is_string(ti)) return serr(path, "%s", "type list must hold strings");
            if (i) tl__gstr_puts(o, " | ");
            rc = gen_typed(c, s, path, json_string_value(ti), o);
        }
        tl__gstr_puts(o, ")");
    } else if (t) {
        return serr(path, "%s", "type must be a string or a list of strings");
    } else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
               json_object_get(s, "additionalProperties")) {
        rc = gen_object(c, s, path, o);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems") ||
               json_object_get(s, "minItems") || json_object_get(s, "maxItems")) {
        rc = gen_array(c, s, path, o);
    } else if (json_object_get(s, "pattern") || json_object_get(s, "format") ||
               json_object_get(s, "minLength") || json_object_get(s, "maxLength")) {
        rc = gen_string(c, s, path, o);
    } else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
               json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum")) {
        rc = tl__schema_gen_number(s, path, false, o);
    } else {
        tl__gstr_puts(o, "jvalue");
    }
    c->depth--;
    return rc;
}

static tl_status gen_rule(struct sc *c, json_t *s, const char *path, int *rule)
{
    struct gstr body = {0};
    tl_status rc = gen_expr(c, s, path, &body);
    if (!rc) {
        *rule = c->n_rules++;
        tl__gstr_printf(&c->rules, "r%d ::= ", *rule);
        tl__gstr_puts(&c->rules, body.p ? body.p : "\"\"");
        tl__gstr_puts(&c->rules, "\n");
        if (body.failed || c->rules.failed)
            rc = tl__errorf(TL_ERR_NOMEM, "json schema: out of memory");
    }
    free(body.p);
    if (!rc && c->rules.n > TL_GRAMMAR_MAX_SOURCE_BYTES)
        rc = serr(path, "%s", "the generated grammar is too large");
    return rc;
}

tl_status tl_grammar_schema_to_gbnf(const char *schema_json, size_t len, char **gbnf)
{
    *gbnf = NULL;
    struct sc c = {0};
    json_error_t jerr;
    tl_status rc = TL_OK;
    if (schema_json) {
        c.root = json_loadb(schema_json, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!c.root)
            return tl__errorf(TL_ERR_INVALID_ARG,
                              "json schema: not valid JSON (line %d, column "
                              "%d: %s)",
                              jerr.line, jerr.column, jerr.text);
    } else {
        c.root = json_pack("{s:s}", "type", "object");
    }
    tl__gstr_puts(&c.rules, BASE_RULES);
    struct gstr root = {0};
    if (!schema_json)
        tl__gstr_puts(&root, "jobject");
    else
        rc = gen_expr(&c, c.root, "", &root);
    if (!rc) {
        tl__gstr_puts(&c.rules, "root ::= ");
        tl__gstr_puts(&c.rules, root.p);
        tl__gstr_puts(&c.rules, "\n");
        if (c.rules.failed || root.failed)
            rc = tl__errorf(TL_ERR_NOMEM, "json schema: out of memory");
    }
    free(root.p);
    for (size_t i = 0; i < c.n_refs; i++)
        free(c.refs[i].ptr);
    free(c.refs);
    json_decref(c.root);
    if (rc) {
        free(c.rules.p);
        return rc;
    }
    *gbnf = c.rules.p;
    return TL_OK;
}
