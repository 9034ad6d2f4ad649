/*
 * Internals shared by the grammar files: the builder the parsers fill (build.c), the compiled
 * form (struct tl_grammar) the matcher walks (gset.c, matcher.c, mask.c), a growable string
 * (gstr.c), the compile deadline (compile_limit.c), and the mask walk's memo and cache
 * (mask_memo.c, mask_cache.c). Each section names the file that implements it.
 *
 * Elements are uint32: the top two bits are the kind (END closes an alternative, BYTES is one
 * byte out of a 256-bit set, REF calls a rule), the rest the set or rule index. A compiled
 * grammar is one flat element array in which every alternative is a run ending with END.
 */
#ifndef TL_GRAMMAR_IMPL_H
#define TL_GRAMMAR_IMPL_H

#include "grammar/grammar.h"

#include "core/hashmap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { GE_END = 0, GE_BYTES = 1, GE_REF = 2 };
#define GE_KIND(e) ((e) >> 30)
#define GE_ARG(e) ((e)&0x3fffffffu)
#define GE_MAKE(k, a) (((uint32_t)(k) << 30) | (uint32_t)(a))

struct gbyteset {
    uint64_t w[4];
};
static inline bool gbyteset_has(const struct gbyteset *s, unsigned b)
{
    return (s->w[b >> 6] >> (b & 63)) & 1;
}

// ---- the compile-time limit (compile_limit.c) -----------------------------------------------

// True once this thread's compilation has run past TL_GRAMMAR_COMPILE_MAX_MS (the error is then
// set: a 400 naming the limit); false when no compilation is being timed. Cheap: the clock is
// read every 64th call. Called from the loops of the parsers and the checks.
bool tl__gcompile_over(void);
// Starts timing this thread's compilation unless one is being timed already (a nested
// compile); returns whether it did (pass that to tl__gcompile_end).
bool tl__gcompile_begin(void);
// Ends what tl__gcompile_begin started (when outer) and returns rc, or the limit's error when rc
// is a failure that came after the deadline.
tl_status tl__gcompile_end(bool outer, tl_status rc) TL_WARN_UNUSED;

// ---- growable string (gstr.c) ---------------------------------------------------------------

struct gstr {
    char *p; // owned, NUL-terminated when ok
    size_t n, cap;
    bool failed; // an allocation failed; the text is incomplete
};
void tl__gstr_putn(struct gstr *s, const char *t, size_t n);
void tl__gstr_puts(struct gstr *s, const char *t);
void tl__gstr_printf(struct gstr *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Appends t[0..n) as a GBNF string literal ("..." with escapes).
void tl__gstr_literal(struct gstr *s, const char *t, size_t n);

// ---- builder --------------------------------------------------------------------------------

struct gb_alt {
    uint32_t *el; // owned
    size_t n, cap;
};

struct gb_rule {
    const char *name; // borrowed from the source (named rules) or NULL (generated)
    size_t name_len;
    size_t pos;   // source offset of the definition (or first use while undefined)
    bool defined; // has alternatives (generated rules always)
    bool rep;     // made by a repetition of rep_body: its body must not match empty text
    uint32_t rep_body;
    struct gb_alt *alts; // owned
    size_t n_alts, cap_alts;
};

struct gbuild {
    const char *src; // borrowed: the text positions refer to
    size_t src_len;
    struct gb_rule *rules; // owned
    size_t n_rules, cap_rules;
    struct gbyteset *sets; // owned
    size_t n_sets, cap_sets;
    uint32_t single[256]; // set index of {b} + 1, 0 = not made yet
    struct tl_hmap names; // tl_hash_bytes(name) -> rule index
    size_t n_elems;       // elements so far (bounded by TL_GRAMMAR_MAX_ELEMS)
    struct gb_rep {
        uint32_t x; // the repeated element
        size_t pos; // the operator's source offset
    } * reps;       // owned: every repetition of more than one copy (checked for nullability)
    size_t n_reps, cap_reps;
    bool nomem;
};

void tl__gb_init(struct gbuild *b, const char *src, size_t len);
void tl__gb_free(struct gbuild *b);
// A rule by name (created undefined on first use). Returns the index or -1 on allocation failure.
int64_t tl__gb_named(struct gbuild *b, const char *name, size_t len, size_t pos);
int64_t tl__gb_new_rule(struct gbuild *b, size_t pos); // a generated rule
// Adds an empty alternative to rule r; returns it (NULL on allocation failure).
struct gb_alt *tl__gb_add_alt(struct gbuild *b, uint32_t r);
// Appends an element; false on allocation failure or past the element bound (error set).
bool tl__gb_push(struct gbuild *b, struct gb_alt *a, uint32_t el, size_t pos);
// The element for one byte / for a byte set.
uint32_t tl__gb_byte(struct gbuild *b, unsigned byte);
uint32_t tl__gb_set(struct gbuild *b, const struct gbyteset *s);
// The element matching one code point out of ranges (pairs lo, hi, sorted, disjoint, inclusive,
// surrogates already removed) as UTF-8; an error (at pos) when the class is empty.
tl_status tl__gb_class(struct gbuild *b, const uint32_t *ranges, size_t n_pairs, size_t pos,
                       uint32_t *el) TL_WARN_UNUSED;
// Checks (every rule defined, a root, no left recursion, no rule that matches nothing) and
// flattens into a grammar. OUT: *out.
tl_status tl__gb_finish(struct gbuild *b, struct tl_grammar **out) TL_WARN_UNUSED;
// "line L, column C" of a source offset, for messages.
void tl__gb_where(const char *src, size_t len, size_t pos, char *buf, size_t cap);

// Appends a regex as one GBNF expression. json_string: the text is the content of a JSON string
// (characters in JSON-escaped form where needed, search semantics: unanchored ends are padded
// with `jchar*`, a rule the caller defines).
tl_status tl__regex_emit(struct gstr *out, const char *re, size_t len,
                         bool json_string) TL_WARN_UNUSED;

// ---- JSON Schema checks (schema_check.c) ----------------------------------------------------

struct json_t;
// The keywords that only annotate (ignored by the generator). NULL-terminated.
extern const char *const tl__schema_annotations[];
// Whether value v satisfies schema s's keywords: 1 yes, 0 no, -1 when s has a keyword this
// check does not know (*unsupported names it). Knows type, enum, const, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, minLength, maxLength; annotations are skipped.
int tl__schema_value_ok(struct json_t *s, struct json_t *v, const char **unsupported);
// True only when no document generated from schema a (schema.c's generator) can satisfy
// schema b; both with their top-level $ref / allOf already merged. Conservative: false when
// not proven.
bool tl__schema_excludes(struct json_t *a, struct json_t *b);

// A schema error at JSON pointer path (fmt has one %s for arg): TL_ERR_INVALID_ARG.
tl_status tl__schema_err(const char *path, const char *fmt, const char *arg);
// The value a local $ref ('#', '#/$defs/x', any JSON pointer) points to in root (borrowed).
tl_status tl__schema_resolve_ref(struct json_t *root, const char *ref, const char *path,
                                 struct json_t **out) TL_WARN_UNUSED;
// s's parts (its $ref target and allOf members, recursively, then its own keywords) merged into
// one schema: properties united (a property in two parts gets both as an allOf), required
// concatenated, other keywords must agree. OUT: *out (a new reference).
tl_status tl__schema_merge_parts(struct json_t *root, struct json_t *s, const char *path,
                                 struct json_t **out) TL_WARN_UNUSED;
// The first keyword of s that is no annotation and not in skip (NULL-terminated), or NULL.
const char *tl__schema_other_keyword(struct json_t *s, const char *const *skip);
// Appends the GBNF expression of an integer / number schema (its bounds) to o.
tl_status tl__schema_gen_number(struct json_t *s, const char *path, bool integer,
                                struct gstr *o) TL_WARN_UNUSED;

// Parses GBNF text into b (rule "root" is the start).
tl_status tl__gbnf_parse(struct gbuild *b) TL_WARN_UNUSED;

// ---- stack sets (gset.c) --------------------------------------------------------------------

// A set of pushdown stacks, deduplicated. Stack i is data[off[i] .. off[i + 1]): return
// addresses bottom first, the last entry the position of a BYTES element (what it reads next).
struct gset {
    uint32_t *data; // owned
    size_t n_data, cap_data;
    uint32_t *off; // owned, (n + 1)
    size_t n, cap_off;
    struct tl_hmap index; // dedupe: stack hash -> stack index; rebuilt when index.n != n
    bool ended;           // some path popped past the bottom (end of input / of the cached frames)
    bool overflow;        // a bound was hit (stacks, depth, expansion work): the set is incomplete
};

#define GSET_MAX_STACKS 4096
#define GSET_MAX_DEPTH 1024

void tl__gset_clear(struct gset *s);
void tl__gset_free(struct gset *s);
bool tl__gset_copy(struct gset *dst, const struct gset *src);
// The set at the start of g's language.
void tl__gset_start(const struct tl_grammar *g, struct gset *out, uint32_t *scratch);
// out = in after reading byte (out cleared first). scratch holds GSET_MAX_DEPTH + 1 entries.
void tl__gset_advance(const struct tl_grammar *g, const struct gset *in, unsigned byte,
                      struct gset *out, uint32_t *scratch);
// out = the expansion of one stack frames[0..n) whose top is a BYTES position (a copy).
void tl__gset_from_stack(const struct tl_grammar *g, const uint32_t *frames, size_t n,
                         struct gset *out);

// ---- compiled grammar -----------------------------------------------------------------------

struct gmask_cache; // mask_cache.c
struct gmemo;       // mask_memo.c

struct tl_grammar {
    atomic_int refs;
    uint32_t *elems; // owned, (n_elems)
    size_t n_elems;
    uint32_t *alt_start; // owned: first element of each alternative, grouped by rule
    uint32_t *rule_alt0; // owned, (n_rules + 1): rule r's alternatives are
                         // alt_start[rule_alt0[r] .. rule_alt0[r + 1])
    uint32_t n_rules;
    uint32_t root;
    struct gbyteset *sets; // owned, (n_sets)
    uint32_t n_sets;
    pthread_mutex_t mu;        // guards cache
    struct gmask_cache *cache; // owned: a list, one per vocabulary used (mask.c)
};

struct tl_gmatcher {
    struct tl_grammar *g; // a reference
    struct gset cur;      // the state
    struct gset tmp[2];   // scratch for advancing
    uint32_t *scratch;    // owned, (GSET_MAX_DEPTH + 1)
    struct gset *levels;  // owned, (n_levels): per-depth sets of the trie walk (mask.c)
    size_t n_levels;
    struct gset one;    // scratch: one stack's set (mask.c)
    struct gmemo *memo; // owned: the trie walk's interned sets and transitions (mask.c)
};

// How many entries g's cache for vocabulary v holds (0 when it has none). For tests.
size_t tl__gmask_cache_entries(struct tl_grammar *g, const struct tl_gvocab *v);

// ---- the mask walk's memo (mask_memo.c) -----------------------------------------------------

#define MEMO_ROW_SETS 2048 // dense transition rows: 1 KiB each, 2 MiB at most per matcher

struct gmemo {
    struct gset *sets; // owned, (cap): interned sets, id = index
    size_t n, cap;
    struct tl_hmap set_index; // set_hash -> id (several ids may share a hash)
    struct tl_hmap tr;        // (id << 8 | byte) + 1 -> target id
    struct gset tmp;
    uint32_t *rows; // owned, (n_rows * 256): rows[id * 256 + byte] = target id + 1, 0 = unknown
    size_t n_rows;  // sets below MEMO_ROW_SETS get a dense row (filled when interned)
    bool use_rows;  // this walk is big enough for rows to pay off
};

void tl__gmemo_free(struct gmemo *mm);
// Forgets the sets and transitions of the last walk (keeps the memory, but see tl_hmap_clear).
void tl__gmemo_reset(struct gmemo *mm);
// The id of a set equal to s (a copy is interned if new); UINT32_MAX on allocation failure.
uint32_t tl__gmemo_intern(struct gmemo *mm, const struct gset *s);
// The id of set id after byte (advanced with m's grammar and scratch); UINT32_MAX on failure.
uint32_t tl__gmemo_transition(struct tl_gmatcher *m, struct gmemo *mm, uint32_t id, unsigned byte);

// ---- the mask cache (mask_cache.c) ----------------------------------------------------------

#define CTX_FRAMES 3 // a stack's top frames that key its cache entry

struct gentry {
    uint32_t key[CTX_FRAMES];
    uint8_t n_key;
    bool full;      // the key is the whole stack: no uncertain tokens
    uint64_t *bits; // owned: accepted tokens
    uint32_t *unc;  // owned: uncertain subtrees (trie nodes)
    size_t n_unc;
};

struct gmask_cache {
    struct gmask_cache *next; // the grammar's caches for other vocabularies
    uint64_t vocab_uid;       // the vocabulary the entries are for (a freed trie's address may
                              // be reused by another, its uid never)
    struct tl_hmap index;     // key_hash -> entry (owned; several entries may share a hash)
    size_t bytes;
};

void tl__gentry_free(struct gentry *e);
void tl__gmask_cache_free(struct gmask_cache *c);
// With g->mu held: g's cache for a vocabulary (created on first use; NULL past the limit of
// vocabularies per grammar or on allocation failure), an entry by key, inserting an entry (false
// when the cache is full or on allocation failure: the caller keeps and frees the entry).
struct gmask_cache *tl__gmask_cache_for(struct tl_grammar *g, uint64_t vocab_uid);
struct gentry *tl__gmask_cache_find(struct gmask_cache *c, const uint32_t *k, size_t n, bool full);
bool tl__gmask_cache_insert(struct gmask_cache *c, struct gentry *e, size_t bytes);
// Takes g->mu: the number of entries of g's cache for the vocabulary (0 when none).
size_t tl__gmask_cache_count(struct tl_grammar *g, uint64_t vocab_uid);

#endif
