/*
 * JSON Schema checks that need no grammar, for schema.c: whether a JSON value satisfies the
 * keywords an `enum` / `const` may stand beside (so the values that fail them are left out, not
 * generated), and whether the documents generated from one `oneOf` branch can never match
 * another (so generating any branch gives a document that matches exactly one: `oneOf` is then
 * `anyOf`, exactly). Both are conservative: "satisfies" answers only for the keywords listed,
 * and "excludes" is true only when it is proven; schema.c turns every other case into a 400
 * naming it, never into a document that may be invalid.
 *
 * Thread model: pure functions.
 */
#include "grammar/grammar_impl.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static bool is_annotation(const char *k)
{
    for (int i = 0; tl__schema_annotations[i]; i++)
        if (!strcmp(k, tl__schema_annotations[i])) return true;
    return false;
}

static size_t utf8_length(const char *s, size_t n)
{
    size_t cps = 0;
    for (size_t i = 0; i < n; i++)
        cps += ((unsigned char)s[i] & 0xC0) != 0x80;
    return cps;
}

static bool value_has_type(json_t *v, const char *t)
{
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    return false;
}

static bool in_values(json_t *list, json_t *v)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (json_equal(json_array_get(list, i), v)) return true;
    return false;
}

int tl__schema_value_ok(json_t *s, json_t *v, const char **unsupported)
{
    *unsupported = NULL;
    if (json_is_true(s)) return 1;
    if (!json_is_object(s)) return 0;
    const char *k;
    json_t *x;
    json_object_foreach(s, k, x)
    {
        if (is_annotation(k)) continue;
        bool num = json_is_number(x);
        double d = num ? json_number_value(x) : 0,
               vd = json_is_number(v) ? json_number_value(v) : 0;
        if (!strcmp(k, "type")) {
            bool any = false;
            if (json_is_string(x)) any = value_has_type(v, json_string_value(x));
            for (size_t i = 0; json_is_array(x) && i < json_array_size(x); i++)
                any = any || (json_is_string(json_array_get(x, i)) &&
                              value_has_type(v, json_string_value(json_array_get(x, i))));
            if (!any) return 0;
        } else if (!strcmp(k, "enum")) {
            if (!json_is_array(x) || !in_values(x, v)) return 0;
        } else if (!strcmp(k, "const")) {
            if (!json_equal(x, v)) return 0;
        } else if (!strcmp(k, "minimum") && num) {
            if (json_is_number(v) && vd < d) return 0;
        } else if (!strcmp(k, "maximum") && num) {
            if (json_is_number(v) && vd > d) return 0;
        } else if (!strcmp(k, "exclusiveMinimum") && num) {
            if (json_is_number(v) && vd <= d) return 0;
        } else if (!strcmp(k, "exclusiveMaximum") && num) {
            if (json_is_number(v) && vd >= d) return 0;
        } else if (!strcmp(k, "minLength") && num) {
            if (json_is_string(v) &&
                (double)utf8_length(json_string_value(v), json_string_length(v)) < d)
                return 0;
        } else if (!strcmp(k, "maxLength") && num) {
            if (json_is_string(v) &&
                (double)utf8_length(json_string_value(v), json_string_length(v)) > d)
                return 0;
        } else {
            *unsupported = k;
            return -1;
        }
    }
    return 1;
}

// ---- oneOf: disjoint branches ---------------------------------------------------------------

enum {
    T_STRING = 1,
    T_INTEGER = 2,
    T_NUMBER = 4,
    T_BOOLEAN = 8,
    T_NULL = 16,
    T_OBJECT = 32,
    T_ARRAY = 64,
    T_ANY = 127
};

static unsigned type_bit(const char *t)
{
    static const char *const names[] = {"string", "integer", "number", "boolean",
                                        "null",   "object",  "array"};
    for (unsigned i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1u << i;
    return 0;
}

static unsigned value_types(json_t *v)
{
    if (json_is_string(v)) return T_STRING;
    if (json_is_integer(v)) return T_INTEGER;
    if (json_is_real(v))
        return floor(json_real_value(v)) == json_real_value(v) ? T_INTEGER : T_NUMBER;
    if (json_is_boolean(v)) return T_BOOLEAN;
    if (json_is_null(v)) return T_NULL;
    if (json_is_object(v)) return T_OBJECT;
    return T_ARRAY;
}

// The values a schema is limited to (const or enum), or NULL.
static json_t *fixed_values(json_t *s, json_t **own)
{
    *own = NULL;
    json_t *c = json_object_get(s, "const"), *e = json_object_get(s, "enum");
    if (c) {
        *own = json_pack("[O]", c);
        return *own;
    }
    return json_is_array(e) ? e : NULL;
}

// The JSON types a schema accepts (acceptor: keywords of other types are vacuous, so only
// type, const and enum narrow it) or generates (generator: schema.c also infers the type from
// the keywords when type is absent).
static unsigned schema_types(json_t *s, bool generator)
{
    if (!json_is_object(s)) return T_ANY;
    json_t *own, *vals = fixed_values(s, &own);
    if (vals) {
        unsigned t = 0;
        for (size_t i = 0; i < json_array_size(vals); i++)
            t |= value_types(json_array_get(vals, i));
        json_decref(own);
        return t;
    }
    json_t *t = json_object_get(s, "type");
    unsigned bits = 0;
    if (json_is_string(t)) bits = type_bit(json_string_value(t));
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++)
        if (json_is_string(json_array_get(t, i)))
            bits |= type_bit(json_string_value(json_array_get(t, i)));
    if (bits) {
        // an integer is a number, and a generated number may have no fraction
        if (bits & T_NUMBER) bits |= T_INTEGER;
        return bits;
    }
    if (!generator || json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) return T_ANY;
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        return T_OBJECT;
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems") ||
        json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
        return T_ARRAY;
    if (json_object_get(s, "pattern") || json_object_get(s, "format") ||
        json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
        return T_STRING;
    if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
        json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
        return T_NUMBER | T_INTEGER;
    return T_ANY;
}

static bool required_has(json_t *s, const char *name)
{
    json_t *r = json_object_get(s, "required");
    for (size_t i = 0; json_is_array(r) && i < json_array_size(r); i++)
        if (json_is_string(json_array_get(r, i)) &&
            !strcmp(json_string_value(json_array_get(r, i)), name))
            return true;
    return false;
}

// Every value in vals fails schema b (proven with the keywords tl__schema_value_ok knows).
static bool values_all_fail(json_t *vals, json_t *b)
{
    for (size_t i = 0; i < json_array_size(vals); i++) {
        const char *unsup;
        if (tl__schema_value_ok(b, json_array_get(vals, i), &unsup) != 0) return false;
    }
    return true;
}

bool tl__schema_excludes(json_t *a, json_t *b)
{
    if (!json_is_object(a) || !json_is_object(b)) return false;
    if (!(schema_types(a, true) & schema_types(b, false))) return true;
    json_t *own, *vals = fixed_values(a, &own);
    if (vals) {
        bool fail = values_all_fail(vals, b);
        json_decref(own);
        return fail;
    }
    if (schema_types(a, true) != T_OBJECT) return false;
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    // A property a always writes, with values b's schema for it refuses (a discriminator).
    const char *name;
    json_t *sa;
    json_object_foreach(pa, name, sa)
    {
        json_t *sb = json_object_get(pb, name), *own2, *v = fixed_values(sa, &own2);
        bool disc = v && sb && required_has(a, name) && values_all_fail(v, sb);
        json_decref(own2);
        if (disc) return true;
    }
    // A property b requires that a never writes (a generates only its declared properties
    // unless additionalProperties says otherwise).
    json_t *ap = json_object_get(a, "additionalProperties");
    if (ap && !json_is_false(ap)) return false;
    json_t *rb = json_object_get(b, "required");
    for (size_t i = 0; json_is_array(rb) && i < json_array_size(rb); i++) {
        json_t *r = json_array_get(rb, i);
        if (json_is_string(r) && !json_object_get(pa, json_string_value(r))) return true;
    }
    return false;
}
