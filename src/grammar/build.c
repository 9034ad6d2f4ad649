/*
 * Grammar builder: the rules a parser (GBNF) creates, code point classes expanded into UTF-8
 * byte sequences, the checks every grammar must pass, and the flat compiled form.
 *
 * Checks, each an error with the rule's position: every referenced rule is defined; "root"
 * exists; no rule can reach itself without consuming a byte (left recursion, also through rules
 * that match the empty string: the matcher's expansion would never end); every rule reachable
 * from root can match some finite text (otherwise the matcher could walk into a dead end);
 * the element count stays under TL_GRAMMAR_MAX_ELEMS (huge repetition bounds).
 *
 * Thread model: a builder belongs to one thread; the grammar it makes is immutable.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- builder --------------------------------------------------------------------------------

void tl__gb_init(struct gbuild *b, const char *src, size_t len)
{
    memset(b, 0, sizeof(*b));
    b->src = src;
    b->src_len = len;
}

void tl__gb_free(struct gbuild *b)
{
    for (size_t i = 0; i < b->n_rules; i++) {
        for (size_t j = 0; j < b->rules[i].n_alts; j++)
            free(b->rules[i].alts[j].el);
        free(b->rules[i].alts);
    }
    free(b->rules);
    free(b->sets);
    tl_hmap_free(&b->names);
    free(b->reps);
    memset(b, 0, sizeof(*b));
}

void tl__gb_where(const char *src, size_t len, size_t pos, char *buf, size_t cap)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    snprintf(buf, cap, "line %zu, column %zu", line, col);
}

static tl_status err_at(const struct gbuild *b, size_t pos, const char *what)
{
    char where[64];
    tl__gb_where(b->src, b->src_len, pos, where, sizeof(where));
    return tl__errorf(TL_ERR_INVALID_ARG, "grammar: %s: %s", where, what);
}

int64_t tl__gb_new_rule(struct gbuild *b, size_t pos)
{
    if (b->n_rules >= GE_ARG(~0u) ||
        !tl_grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof(*b->rules))) {
        b->nomem = true;
        tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for rules");
        return -1;
    }
    struct gb_rule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof(*r));
    r->pos = pos;
    r->defined = true;
    return (int64_t)b->n_rules++;
}

int64_t tl__gb_named(struct gbuild *b, const char *name, size_t len, size_t pos)
{
    uint64_t h = tl_hash_bytes(name, len), id;
    for (size_t cursor = 0; tl_hmap_next(&b->names, h, &cursor, &id);) {
        const struct gb_rule *r = &b->rules[id];
        if (r->name_len == len && !memcmp(r->name, name, len)) return (int64_t)id;
    }
    int64_t nid = tl__gb_new_rule(b, pos);
    if (nid < 0) return -1;
    if (tl_hmap_add(&b->names, h, (uint64_t)nid)) {
        b->nomem = true;
        tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for rule names");
        return -1;
    }
    b->rules[nid].name = name;
    b->rules[nid].name_len = len;
    b->rules[nid].defined = false;
    return nid;
}

struct gb_alt *tl__gb_add_alt(struct gbuild *b, uint32_t r)
{
    struct gb_rule *rule = &b->rules[r];
    if (!tl_grow((void **)&rule->alts, &rule->cap_alts, rule->n_alts + 1, sizeof(*rule->alts))) {
        tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for alternatives");
        return NULL;
    }
    struct gb_alt *a = &rule->alts[rule->n_alts++];
    memset(a, 0, sizeof(*a));
    b->n_elems++; // its END
    return a;
}

bool tl__gb_push(struct gbuild *b, struct gb_alt *a, uint32_t el, size_t pos)
{
    if (tl__gcompile_over()) return false;
    if (b->n_elems + 1 > TL_GRAMMAR_MAX_ELEMS) {
        err_at(b, pos,
               "the compiled grammar would exceed 1048576 elements (a repetition bound or "
               "the source is too large)");
        return false;
    }
    if (!tl_grow((void **)&a->el, &a->cap, a->n + 1, sizeof(uint32_t))) {
        tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for elements");
        return false;
    }
    a->el[a->n++] = el;
    b->n_elems++;
    return true;
}

uint32_t tl__gb_set(struct gbuild *b, const struct gbyteset *s)
{
    if (!tl_grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof(*b->sets))) {
        b->nomem = true;
        return GE_MAKE(GE_BYTES, 0);
    }
    b->sets[b->n_sets] = *s;
    return GE_MAKE(GE_BYTES, b->n_sets++);
}

uint32_t tl__gb_byte(struct gbuild *b, unsigned byte)
{
    if (!b->single[byte]) {
        struct gbyteset s = {{0}};
        s.w[byte >> 6] |= 1ull << (byte & 63);
        uint32_t el = tl__gb_set(b, &s);
        if (b->nomem) return el;
        b->single[byte] = GE_ARG(el) + 1;
    }
    return GE_MAKE(GE_BYTES, b->single[byte] - 1);
}

// ---- code point classes as UTF-8 ------------------------------------------------------------

static int utf8_encode(uint32_t cp, unsigned char *o)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

// Adds alternatives to rule r for code points [lo, hi] of one encoded length: split until each
// piece is a product of byte ranges (a "rectangle"), one alternative per piece.
static bool class_seq(struct gbuild *b, uint32_t r, uint32_t lo, uint32_t hi, size_t pos)
{
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m)
                return class_seq(b, r, lo, lo | m, pos) && class_seq(b, r, (lo | m) + 1, hi, pos);
            if ((hi & m) != m)
                return class_seq(b, r, lo, (hi & ~m) - 1, pos) && class_seq(b, r, hi & ~m, hi, pos);
        }
    }
    unsigned char a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    struct gb_alt *alt = tl__gb_add_alt(b, r);
    if (!alt) return false;
    for (int k = 0; k < n; k++) {
        struct gbyteset s = {{0}};
        for (unsigned c = a[k]; c <= z[k]; c++)
            s.w[c >> 6] |= 1ull << (c & 63);
        if (!tl__gb_push(b, alt, tl__gb_set(b, &s), pos)) return false;
    }
    return !b->nomem;
}

tl_status tl__gb_class(struct gbuild *b, const uint32_t *ranges, size_t n_pairs, size_t pos,
                       uint32_t *el)
{
    struct gbyteset ascii = {{0}};
    bool any_ascii = false, multi = false;
    for (size_t i = 0; i < n_pairs; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        for (uint32_t c = lo; c <= hi && c < 0x80; c++) {
            ascii.w[c >> 6] |= 1ull << (c & 63);
            any_ascii = true;
        }
        if (hi >= 0x80) multi = true;
    }
    if (!any_ascii && !multi) return err_at(b, pos, "character class matches nothing");
    if (!multi) {
        *el = tl__gb_set(b, &ascii);
        return b->nomem ? tl__errorf(TL_ERR_NOMEM, "grammar: out of memory") : TL_OK;
    }
    int64_t r = tl__gb_new_rule(b, pos);
    if (r < 0) return TL_ERR_NOMEM;
    if (any_ascii) {
        struct gb_alt *alt = tl__gb_add_alt(b, (uint32_t)r);
        if (!alt || !tl__gb_push(b, alt, tl__gb_set(b, &ascii), pos)) return TL_ERR_INVALID_ARG;
    }
    static const uint32_t len_lo[3] = {0x80, 0x800, 0x10000}, len_hi[3] = {0x7FF, 0xFFFF, 0x10FFFF};
    for (size_t i = 0; i < n_pairs; i++)
        for (int l = 0; l < 3; l++) {
            uint32_t lo = ranges[2 * i] > len_lo[l] ? ranges[2 * i] : len_lo[l];
            uint32_t hi = ranges[2 * i + 1] < len_hi[l] ? ranges[2 * i + 1] : len_hi[l];
            if (lo <= hi && !class_seq(b, (uint32_t)r, lo, hi, pos)) return TL_ERR_INVALID_ARG;
        }
    *el = GE_MAKE(GE_REF, r);
    return TL_OK;
}

// ---- checks ---------------------------------------------------------------------------------

static tl_status rule_err(const struct gbuild *b, uint32_t r, const char *fmt_what)
{
    const struct gb_rule *rule = &b->rules[r];
    char msg[200];
    if (rule->name)
        snprintf(msg, sizeof(msg), "rule '%.*s' %s",
                 (int)(rule->name_len > 60 ? 60 : rule->name_len), rule->name, fmt_what);
    else
        snprintf(msg, sizeof(msg), "this group %s", fmt_what);
    return err_at(b, rule->pos, msg);
}

// Left recursion: DFS over "r can start with a call of s" edges (skipping nullable prefixes).
static tl_status left_rec_dfs(const struct gbuild *b, const bool *nullable, uint8_t *mark,
                              uint32_t r, uint32_t *stack, size_t depth)
{
    // Iterative DFS: stack holds (rule, next edge) as pairs flattened; mark 1 = on path, 2 = done.
    (void)depth;
    size_t sp = 0;
    stack[sp++] = r;
    stack[sp++] = 0;
    mark[r] = 1;
    while (sp) {
        if (tl__gcompile_over()) return TL_ERR_INVALID_ARG;
        uint32_t cur = stack[sp - 2], edge = stack[sp - 1];
        const struct gb_rule *rule = &b->rules[cur];
        // Enumerate edges: for each alternative, each leading REF while the prefix is nullable.
        uint32_t k = 0, next = UINT32_MAX;
        for (size_t a = 0; a < rule->n_alts && next == UINT32_MAX; a++) {
            const struct gb_alt *alt = &rule->alts[a];
            for (size_t i = 0; i < alt->n; i++) {
                uint32_t e = alt->el[i];
                if (GE_KIND(e) != GE_REF) break;
                if (k++ == edge) {
                    next = GE_ARG(e);
                    break;
                }
                if (!nullable[GE_ARG(e)]) break;
            }
        }
        if (next == UINT32_MAX) {
            mark[cur] = 2;
            sp -= 2;
            continue;
        }
        stack[sp - 1] = edge + 1;
        if (mark[next] == 1)
            return rule_err(b, next,
                            "is left-recursive (it can reach itself "
                            "without consuming input)");
        if (mark[next] == 0) {
            mark[next] = 1;
            stack[sp++] = next;
            stack[sp++] = 0;
        }
    }
    return TL_OK;
}

// The rules that are nullable (productive = false: an alternative of refs to nullable rules
// only) or productive (true: an alternative of non-empty byte sets and refs to productive
// rules), in time linear in the grammar: each alternative counts the refs it still waits for,
// and a rule that becomes true visits the alternatives that use it (a reverse index), so a long
// chain written in the "wrong" order costs no more than one in the right order.
static tl_status fixpoint(const struct gbuild *b, bool productive, bool *out)
{
    size_t n = b->n_rules, n_alts = 0, n_uses = 0;
    for (size_t r = 0; r < n; r++) {
        n_alts += b->rules[r].n_alts;
        for (size_t a = 0; a < b->rules[r].n_alts; a++)
            for (size_t i = 0; i < b->rules[r].alts[a].n; i++)
                n_uses += GE_KIND(b->rules[r].alts[a].el[i]) == GE_REF;
    }
    int64_t *need = tl_malloc_array(n_alts + 1, sizeof(int64_t)); // refs still false; -1 never
    uint32_t *alt_rule = tl_malloc_array(n_alts + 1, sizeof(uint32_t));
    uint32_t *use_start = tl_calloc_array(n + 1, sizeof(uint32_t)); // CSR: rule -> alts using it
    uint32_t *use_alt = tl_malloc_array(n_uses + 1, sizeof(uint32_t));
    uint32_t *work = tl_malloc_array(n + 1, sizeof(uint32_t));
    tl_status rc = TL_OK;
    if (!need || !alt_rule || !use_start || !use_alt || !work) {
        rc = tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for checks");
        goto out;
    }
    size_t id = 0, nw = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t a = 0; a < b->rules[r].n_alts; a++, id++) {
            const struct gb_alt *alt = &b->rules[r].alts[a];
            alt_rule[id] = (uint32_t)r;
            need[id] = 0;
            for (size_t i = 0; i < alt->n; i++) {
                uint32_t e = alt->el[i];
                if (GE_KIND(e) == GE_REF) {
                    use_start[GE_ARG(e) + 1]++;
                    if (need[id] >= 0) need[id]++;
                    continue;
                }
                const struct gbyteset *set = &b->sets[GE_ARG(e)];
                bool empty = !(set->w[0] | set->w[1] | set->w[2] | set->w[3]);
                if (!productive || empty) need[id] = -1; // a byte is never nullable
            }
            if (need[id] == 0 && !out[r]) {
                out[r] = true;
                work[nw++] = (uint32_t)r;
            }
        }
    for (size_t r = 0; r < n; r++)
        use_start[r + 1] += use_start[r];
    // Fill the reverse index (use_start[r] advances while filling, then is restored).
    id = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t a = 0; a < b->rules[r].n_alts; a++, id++)
            for (size_t i = 0; i < b->rules[r].alts[a].n; i++) {
                uint32_t e = b->rules[r].alts[a].el[i];
                if (GE_KIND(e) == GE_REF) use_alt[use_start[GE_ARG(e)]++] = (uint32_t)id;
            }
    for (size_t r = n; r > 0; r--)
        use_start[r] = use_start[r - 1];
    use_start[0] = 0;
    while (nw) {
        uint32_t r = work[--nw];
        for (uint32_t u = use_start[r]; u < use_start[r + 1]; u++) {
            uint32_t a = use_alt[u];
            if (need[a] <= 0 || --need[a] > 0) continue;
            uint32_t owner = alt_rule[a];
            if (!out[owner]) {
                out[owner] = true;
                work[nw++] = owner;
            }
        }
    }
out:
    free(need);
    free(alt_rule);
    free(use_start);
    free(use_alt);
    free(work);
    return rc;
}

static tl_status check(struct gbuild *b, uint32_t root)
{
    size_t n = b->n_rules;
    tl_status rc = TL_OK;
    bool *nullable = tl_calloc_array(n, sizeof(bool));
    bool *productive = tl_calloc_array(n, sizeof(bool));
    bool *reach = tl_calloc_array(n, sizeof(bool));
    uint8_t *mark = tl_calloc_array(n, 1);
    uint32_t *stack = tl_malloc_array(2 * n + 2, sizeof(uint32_t));
    uint32_t *work = tl_malloc_array(n + 1, sizeof(uint32_t));
    if (!nullable || !productive || !reach || !mark || !stack || !work) {
        rc = tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for checks");
        goto out;
    }
    // Fixpoints: nullable (some alternative of nullable refs only), productive (some alternative
    // of non-empty byte sets and productive refs).
    if ((rc = fixpoint(b, false, nullable)) || (rc = fixpoint(b, true, productive))) goto out;
    // Reachable from root.
    size_t nw = 0;
    work[nw++] = root;
    reach[root] = true;
    while (nw) {
        const struct gb_rule *rule = &b->rules[work[--nw]];
        for (size_t a = 0; a < rule->n_alts; a++)
            for (size_t i = 0; i < rule->alts[a].n; i++) {
                uint32_t e = rule->alts[a].el[i];
                if (GE_KIND(e) == GE_REF && !reach[GE_ARG(e)]) {
                    reach[GE_ARG(e)] = true;
                    work[nw++] = GE_ARG(e);
                }
            }
    }
    // A repeated item that can match empty text makes x{0,n} exponentially ambiguous.
    for (size_t i = 0; i < b->n_reps && !rc; i++) {
        uint32_t x = b->reps[i].x;
        if (GE_KIND(x) == GE_REF && nullable[GE_ARG(x)])
            rc = err_at(b, b->reps[i].pos,
                        "repetition of something that can match empty text "
                        "(make the repeated item non-empty)");
    }
    for (size_t r = 0; r < n && !rc; r++) {
        uint32_t x = b->rules[r].rep_body;
        if (b->rules[r].rep && GE_KIND(x) == GE_REF && nullable[GE_ARG(x)])
            rc = rule_err(b, (uint32_t)r,
                          "repeats something that can match empty text (make "
                          "the repeated item non-empty)");
    }
    for (size_t r = 0; r < n && !rc; r++)
        if (reach[r] && !productive[r])
            rc = rule_err(b, (uint32_t)r, "can never match a finite text (empty language)");
    for (size_t r = 0; r < n && !rc; r++)
        if (reach[r] && !mark[r]) rc = left_rec_dfs(b, nullable, mark, (uint32_t)r, stack, 0);
out:
    free(nullable);
    free(productive);
    free(reach);
    free(mark);
    free(stack);
    free(work);
    return rc;
}

// ---- flattening -----------------------------------------------------------------------------

tl_status tl__gb_finish(struct gbuild *b, struct tl_grammar **out)
{
    *out = NULL;
    if (b->nomem) return tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
    for (size_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined) return rule_err(b, (uint32_t)r, "is used but never defined");
    int64_t root = -1;
    for (size_t r = 0; r < b->n_rules && root < 0; r++)
        if (b->rules[r].name && b->rules[r].name_len == 4 && !memcmp(b->rules[r].name, "root", 4))
            root = (int64_t)r;
    if (root < 0) return err_at(b, 0, "no rule named 'root'");
    for (size_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].n_alts) return rule_err(b, (uint32_t)r, "has no alternatives");
    tl_status rc = check(b, (uint32_t)root);
    if (rc) return rc;

    size_t n_alts = 0;
    for (size_t r = 0; r < b->n_rules; r++)
        n_alts += b->rules[r].n_alts;
    struct tl_grammar *g = tl_malloc(sizeof(*g));
    if (!g) return tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
    memset(g, 0, sizeof(*g));
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    g->elems = tl_malloc_array(b->n_elems + 1, sizeof(uint32_t));
    g->alt_start = tl_malloc_array(n_alts + 1, sizeof(uint32_t));
    g->rule_alt0 = tl_malloc_array(b->n_rules + 1, sizeof(uint32_t));
    g->sets = tl_malloc_array(b->n_sets + 1, sizeof(*g->sets));
    if (!g->elems || !g->alt_start || !g->rule_alt0 || !g->sets) {
        tl_grammar_unref(g);
        return tl__errorf(TL_ERR_NOMEM, "grammar: out of memory");
    }
    size_t ne = 0, na = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        g->rule_alt0[r] = (uint32_t)na;
        for (size_t a = 0; a < b->rules[r].n_alts; a++) {
            const struct gb_alt *alt = &b->rules[r].alts[a];
            g->alt_start[na++] = (uint32_t)ne;
            if (alt->n) memcpy(g->elems + ne, alt->el, alt->n * sizeof(uint32_t));
            ne += alt->n;
            g->elems[ne++] = GE_MAKE(GE_END, 0);
        }
    }
    g->rule_alt0[b->n_rules] = (uint32_t)na;
    TL_ASSERT(ne <= b->n_elems);
    g->n_elems = ne;
    g->n_rules = (uint32_t)b->n_rules;
    g->root = (uint32_t)root;
    if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * sizeof(*g->sets));
    g->n_sets = (uint32_t)b->n_sets;
    *out = g;
    return TL_OK;
}
