/*
 * The names of the built-in filters and tests, as Jinja2's environment lists them: what the
 * `filter` and `test` tests answer (`{% if 'tojson' is filter %}`). The dispatchers
 * (tl__jfilter in jinja_filters.c, tl__jtest in jinja_tests.c) implement these names; the lists
 * sit in a leaf of their own because the tests consult the filter names while the filters
 * (select, reject) apply tests. tl__jname_in is the lookup the method tables use as well.
 *
 * Thread model: constant tables, pure lookups.
 */
#include "chat/jinja_impl.h"

#include <string.h>

bool tl__jname_in(const char *const *list, const char *name)
{
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

static const char *const filter_names[] = {
    "abs",    "attr",   "capitalize", "count",      "d",         "default", "dictsort",
    "e",      "escape", "first",      "float",      "format",    "indent",  "int",
    "items",  "join",   "last",       "length",     "list",      "lower",   "map",
    "max",    "min",    "reject",     "rejectattr", "replace",   "reverse", "round",
    "safe",   "select", "selectattr", "sort",       "string",    "sum",     "title",
    "tojson", "trim",   "unique",     "upper",      "wordcount", NULL};

bool tl__jfilter_exists(const char *name)
{
    return tl__jname_in(filter_names, name);
}

static const char *const test_names[] = {
    "!=",        "<",           "<=",      "==",       ">",      ">=",       "boolean", "callable",
    "defined",   "divisibleby", "eq",      "equalto",  "even",   "false",    "float",   "ge",
    "gt",        "in",          "integer", "iterable", "le",     "lower",    "lt",      "mapping",
    "ne",        "none",        "number",  "odd",      "sameas", "sequence", "string",  "true",
    "undefined", "upper",       "filter",  "test",     NULL};

bool tl__jtest_exists(const char *name)
{
    return tl__jname_in(test_names, name);
}
