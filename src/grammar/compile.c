/*
 * Compiling a grammar source of any kind (GBNF directly; JSON Schema, json_object, regexes and
 * choices through the GBNF text they translate to), and the process-wide LRU of compiled
 * grammars keyed by (kind, source).
 *
 * Compilation is linear in the source and bounded (TL_GRAMMAR_MAX_SOURCE_BYTES,
 * TL_GRAMMAR_MAX_ELEMS), so callers may run it synchronously; the expensive vocabulary work is
 * done lazily by the mask cache on the engine's threads.
 *
 * Thread model: everything here is thread-safe; the LRU is guarded by one mutex and holds one
 * reference on each grammar it keeps.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <jansson.h>
#include <string.h>

static tl_status compile_gbnf(const char *src, size_t len, struct tl_grammar **out)
{
    struct gbuild b;
    tl__gb_init(&b, src, len);
    tl_status rc = tl__gbnf_parse(&b);
    if (!rc) rc = tl__gb_finish(&b, out);
    tl__gb_free(&b);
    if (rc) return rc;
    // The matcher's bounds (stack depth, stacks, expansion work) must hold at the start, or
    // no token could ever be allowed: an error now rather than a failed request later.
    struct gset start = {0};
    uint32_t *scratch = tl_malloc_array(GSET_MAX_DEPTH + 1, sizeof(uint32_t));
    if (!scratch) rc = tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
    if (!rc) tl__gset_start(*out, &start, scratch);
    if (!rc && start.overflow)
        rc = tl__errorf(TL_ERR_INVALID_ARG,
                        "grammar: its start nests rule calls deeper than %d (or needs more than %d "
                        "parse stacks); use right recursion or fewer nested rules",
                        GSET_MAX_DEPTH, GSET_MAX_STACKS);
    tl__gset_free(&start);
    free(scratch);
    if (rc) {
        tl_grammar_unref(*out);
        *out = NULL;
    }
    return rc;
}

static tl_status choices_to_gbnf(const char *src, size_t len, char **gbnf)
{
    json_error_t jerr;
    json_t *arr = json_loadb(src, len, 0, &jerr);
    if (!arr || !json_is_array(arr) || !json_array_size(arr)) {
        json_decref(arr);
        return tl__errorf(TL_ERR_INVALID_ARG, "choices must be a non-empty array of strings");
    }
    struct gstr s = {0};
    tl__gstr_puts(&s, "root ::= ");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *c = json_array_get(arr, i);
        if (!json_is_string(c)) {
            json_decref(arr);
            free(s.p);
            return tl__errorf(TL_ERR_INVALID_ARG, "choice %zu is not a string", i);
        }
        if (i) tl__gstr_puts(&s, " | ");
        tl__gstr_literal(&s, json_string_value(c), json_string_length(c));
    }
    json_decref(arr);
    if (s.failed) {
        free(s.p);
        return tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
    }
    *gbnf = s.p;
    return TL_OK;
}

static tl_status compile_any(enum tl_grammar_kind kind, const char *src, size_t len,
                             struct tl_grammar **out);

tl_status tl_grammar_compile(enum tl_grammar_kind kind, const char *src, size_t len,
                             struct tl_grammar **out)
{
    bool outer = tl__gcompile_begin();
    return tl__gcompile_end(outer, compile_any(kind, src, len, out));
}

static tl_status compile_any(enum tl_grammar_kind kind, const char *src, size_t len,
                             struct tl_grammar **out)
{
    *out = NULL;
    if (len > TL_GRAMMAR_MAX_SOURCE_BYTES)
        return tl__errorf(TL_ERR_INVALID_ARG, "grammar source of %zu bytes exceeds %u bytes", len,
                          TL_GRAMMAR_MAX_SOURCE_BYTES);
    if (!src && kind != TL_GRAMMAR_JSON_OBJECT)
        return tl__errorf(TL_ERR_INVALID_ARG, "grammar source is missing");
    char *gbnf = NULL;
    tl_status rc;
    switch (kind) {
    case TL_GRAMMAR_GBNF:
        return compile_gbnf(src, len, out);
    case TL_GRAMMAR_JSON_SCHEMA:
        rc = tl_grammar_schema_to_gbnf(src, len, &gbnf);
        break;
    case TL_GRAMMAR_JSON_OBJECT:
        rc = tl_grammar_schema_to_gbnf(NULL, 0, &gbnf);
        break;
    case TL_GRAMMAR_REGEX:
        rc = tl_grammar_regex_to_gbnf(src, len, &gbnf);
        break;
    case TL_GRAMMAR_CHOICE:
        rc = choices_to_gbnf(src, len, &gbnf);
        break;
    default:
        return tl__errorf(TL_ERR_INVALID_ARG, "unknown grammar kind %d", (int)kind);
    }
    if (rc) return rc;
    rc = compile_gbnf(gbnf, strlen(gbnf), out);
    if (rc) {
        // The generated text is ours: its positions mean nothing to the caller.
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", tl_last_error());
        rc = tl__errorf(rc, "%s (in the grammar generated from the %s)", msg,
                        kind == TL_GRAMMAR_REGEX ? "regex" : "schema");
    }
    free(gbnf);
    return rc;
}

// ---- LRU ------------------------------------------------------------------------------------

#define LRU_SIZE 32

struct lru_slot {
    enum tl_grammar_kind kind;
    char *src; // owned
    size_t len;
    struct tl_grammar *g; // a reference
    uint64_t used;
};

static pthread_mutex_t lru_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lru_slot lru[LRU_SIZE];
static uint64_t lru_clock;

struct tl_grammar *tl_grammar_lookup(enum tl_grammar_kind kind, const char *src, size_t len)
{
    if (!src) len = 0;
    struct tl_grammar *g = NULL;
    pthread_mutex_lock(&lru_mu);
    for (int i = 0; i < LRU_SIZE && !g; i++)
        if (lru[i].g && lru[i].kind == kind && lru[i].len == len &&
            (!len || !memcmp(lru[i].src, src, len))) {
            lru[i].used = ++lru_clock;
            g = tl_grammar_ref(lru[i].g);
        }
    pthread_mutex_unlock(&lru_mu);
    return g;
}

tl_status tl_grammar_get(enum tl_grammar_kind kind, const char *src, size_t len,
                         struct tl_grammar **out)
{
    *out = NULL;
    if (!src) len = 0;
    pthread_mutex_lock(&lru_mu);
    for (int i = 0; i < LRU_SIZE; i++)
        if (lru[i].g && lru[i].kind == kind && lru[i].len == len &&
            (!len || !memcmp(lru[i].src, src, len))) {
            lru[i].used = ++lru_clock;
            *out = tl_grammar_ref(lru[i].g);
            pthread_mutex_unlock(&lru_mu);
            return TL_OK;
        }
    pthread_mutex_unlock(&lru_mu);

    struct tl_grammar *g;
    tl_status rc = tl_grammar_compile(kind, src, len, &g);
    if (rc) return rc;
    char *copy = tl_malloc(len + 1);
    if (copy) {
        if (len) memcpy(copy, src, len);
        copy[len] = 0;
        pthread_mutex_lock(&lru_mu);
        int victim = 0;
        for (int i = 1; i < LRU_SIZE; i++)
            if (!lru[i].g || (lru[victim].g && lru[i].used < lru[victim].used)) victim = i;
        struct tl_grammar *old = lru[victim].g;
        char *old_src = lru[victim].src;
        lru[victim] = (struct lru_slot){kind, copy, len, tl_grammar_ref(g), ++lru_clock};
        pthread_mutex_unlock(&lru_mu);
        tl_grammar_unref(old);
        free(old_src);
    }
    *out = g;
    return TL_OK;
}
