/*
 * Allowed-token masks: the vocabulary as a byte trie walked against a matcher's stacks, with a
 * per-grammar cache of what does not depend on the stack below the top frames (XGrammar's
 * context-independent tokens).
 *
 * Trie. Tokens sorted by their bytes give the trie's nodes in preorder: node i at depth d (its
 * path is d bytes long) covers nodes [i, end) below it, so a walk keeps one stack set per depth,
 * advances the parent's set by the node's byte, and skips the whole subtree when nothing is
 * left. Tokens with identical bytes share a node (chained).
 *
 * Cache. For a stack, only its top CTX_FRAMES frames are the key. Walking the trie from those
 * frames alone classifies each token: accepted (read entirely within the frames: true under any
 * context), rejected, or uncertain (the frames were popped while bytes remained, so the rest of
 * the stack decides). Uncertain tokens are kept as trie subtrees; at mask time each is walked
 * again from the full stack. A stack of at most CTX_FRAMES frames is its own key and has no
 * uncertain tokens. The mask of a state is the union over its stacks, so it is exactly what a
 * full walk from every stack would give: cached or not, batch or not, the same bits.
 *
 * The walk's memo of stack sets and transitions is mask_memo.c's; the cache's table is
 * mask_cache.c's.
 *
 * Thread model: a tl_gvocab is immutable after creation. A grammar's cache is shared by every
 * request using it (any thread): lookups and inserts hold g->mu; entries are immutable once in.
 * Entries are computed outside the lock with the calling matcher's scratch.
 */
#include "grammar/grammar_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX_BYTES 255
#define MEMO_ROW_MIN_NODES 2048 // smaller walks (uncertain subtrees) use the hash table alone

// ---- vocabulary trie ------------------------------------------------------------------------

struct gnode {
    uint32_t end;    // first node after this subtree
    int32_t token;   // first token ending here, -1 if none
    int32_t any_tok; // a token whose bytes start with this node's path
    uint8_t byte;
    uint8_t depth; // 1 for the root's children
    uint8_t dup;   // other tokens have the same bytes (chained by same_next)
};

struct tl_gvocab {
    uint64_t uid; // unique per trie ever built: what a grammar's cache is bound to
    int32_t n_vocab;
    char *bytes;         // owned: every token's bytes
    uint32_t *tok_off;   // owned, (n_vocab)
    int32_t *tok_len;    // owned, (n_vocab): -1 = never allowed
    int32_t *same_next;  // owned, (n_vocab): next token with the same bytes, -1
    struct gnode *nodes; // owned, (n_nodes), preorder
    uint32_t n_nodes;
    int32_t *eog; // owned, (n_eog)
    int32_t n_eog;
    uint8_t *is_eog; // owned, (n_vocab)
};

static const struct tl_gvocab *sort_vocab; // qsort has no context argument

static int cmp_tok(const void *a, const void *b)
{
    const struct tl_gvocab *v = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int32_t lx = v->tok_len[x], ly = v->tok_len[y];
    int c = memcmp(v->bytes + v->tok_off[x], v->bytes + v->tok_off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t next_uid = 1;

struct tl_gvocab *tl_gvocab_create(int32_t n_vocab, tl_gvocab_bytes_fn bytes_fn,
                                   tl_gvocab_eog_fn is_eog, void *ctx)
{
    struct tl_gvocab *v = tl_malloc(sizeof(*v));
    int32_t *order = NULL;
    uint32_t *path = NULL;
    if (!v) goto nomem;
    memset(v, 0, sizeof(*v));
    v->uid = atomic_fetch_add(&next_uid, 1);
    v->n_vocab = n_vocab;
    size_t nv = (size_t)n_vocab, cap_bytes = 0, n_bytes = 0;
    v->tok_off = tl_malloc_array(nv, sizeof(uint32_t));
    v->tok_len = tl_malloc_array(nv, sizeof(int32_t));
    v->same_next = tl_malloc_array(nv, sizeof(int32_t));
    v->is_eog = tl_calloc_array(nv, 1);
    v->eog = tl_malloc_array(nv, sizeof(int32_t));
    order = tl_malloc_array(nv, sizeof(int32_t));
    if (!v->tok_off || !v->tok_len || !v->same_next || !v->is_eog || !v->eog || !order) goto nomem;
    char buf[TOKEN_MAX_BYTES + 1];
    int32_t n_order = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        v->same_next[t] = -1;
        if (is_eog && is_eog(ctx, t)) {
            v->is_eog[t] = 1;
            v->eog[v->n_eog++] = t;
        }
        int len = v->is_eog[t] ? -1 : bytes_fn(ctx, t, buf, (int)sizeof(buf));
        if (len <= 0 || len > TOKEN_MAX_BYTES) len = -1;
        v->tok_len[t] = len;
        v->tok_off[t] = (uint32_t)n_bytes;
        if (len < 0) continue;
        if (!tl_grow((void **)&v->bytes, &cap_bytes, n_bytes + (size_t)len, 1)) goto nomem;
        memcpy(v->bytes + n_bytes, buf, (size_t)len);
        n_bytes += (size_t)len;
        order[n_order++] = t;
    }
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(order, (size_t)n_order, sizeof(int32_t), cmp_tok);
    pthread_mutex_unlock(&sort_mu);

    // Preorder nodes: each token adds the nodes below its common prefix with the previous one.
    size_t cap_nodes = 0;
    path = tl_malloc_array(TOKEN_MAX_BYTES + 1, sizeof(uint32_t));
    if (!path) goto nomem;
    int32_t prev = -1;
    for (int32_t k = 0; k < n_order; k++) {
        int32_t t = order[k], len = v->tok_len[t];
        const unsigned char *b = (const unsigned char *)v->bytes + v->tok_off[t];
        int32_t lcp = 0;
        if (prev >= 0) {
            const unsigned char *pb = (const unsigned char *)v->bytes + v->tok_off[prev];
            int32_t pl = v->tok_len[prev];
            while (lcp < len && lcp < pl && pb[lcp] == b[lcp])
                lcp++;
            // Close the previous path's nodes deeper than the common prefix.
            for (int32_t d = lcp + 1; d <= pl; d++)
                v->nodes[path[d]].end = v->n_nodes;
        }
        if (lcp == len) { // same bytes as prev: chain
            int32_t q = v->nodes[path[len]].token;
            while (v->same_next[q] >= 0)
                q = v->same_next[q];
            v->same_next[q] = t;
            v->nodes[path[len]].dup = 1;
            continue;
        }
        for (int32_t d = lcp + 1; d <= len; d++) {
            if (!tl_grow((void **)&v->nodes, &cap_nodes, v->n_nodes + 1, sizeof(*v->nodes)))
                goto nomem;
            struct gnode *nd = &v->nodes[v->n_nodes];
            nd->end = 0;
            nd->token = d == len ? t : -1;
            nd->any_tok = t;
            nd->byte = b[d - 1];
            nd->depth = (uint8_t)d;
            nd->dup = 0;
            path[d] = v->n_nodes++;
        }
        prev = t;
    }
    if (prev >= 0)
        for (int32_t d = 1; d <= v->tok_len[prev]; d++)
            v->nodes[path[d]].end = v->n_nodes;
    free(order);
    free(path);
    return v;
nomem:
    free(order);
    free(path);
    tl_gvocab_destroy(v);
    tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for the vocabulary trie");
    return NULL;
}

void tl_gvocab_destroy(struct tl_gvocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->tok_off);
    free(v->tok_len);
    free(v->same_next);
    free(v->nodes);
    free(v->eog);
    free(v->is_eog);
    free(v);
}

int32_t tl_gvocab_n_vocab(const struct tl_gvocab *v)
{
    return v->n_vocab;
}

// ---- the walk -------------------------------------------------------------------------------

struct unc_list {
    uint32_t *nodes; // owned
    size_t n, cap;
};

static bool ensure_levels(struct tl_gmatcher *m, size_t n)
{
    if (n <= m->n_levels) return true;
    struct gset *nl = tl_realloc_array(m->levels, n, sizeof(*nl));
    if (!nl) return false;
    memset(nl + m->n_levels, 0, (n - m->n_levels) * sizeof(*nl));
    m->levels = nl;
    m->n_levels = n;
    return true;
}

static inline void set_bit(uint64_t *bits, int32_t t)
{
    bits[t >> 6] |= 1ull << (t & 63);
}

// Walks nodes [from, to), whose parent state is m->levels[d0]: sets the bit of every token the
// state accepts; when unc is given, records the subtrees where the state's bottom was popped
// with bytes left (uncertain) instead of treating that as the end of the input.
static bool walk(struct tl_gmatcher *m, const struct tl_gvocab *v, uint32_t from, uint32_t to,
                 uint32_t d0, uint64_t *bits, struct unc_list *unc)
{
    if (!m->memo) {
        m->memo = tl_malloc(sizeof(*m->memo));
        if (!m->memo) return false;
        memset(m->memo, 0, sizeof(*m->memo));
    } else if (m->memo->cap > 65536) { // a huge walk last time: give the memory back
        tl__gmemo_free(m->memo);
        m->memo = NULL;
        return walk(m, v, from, to, d0, bits, unc);
    }
    struct gmemo *mm = m->memo;
    tl__gmemo_reset(mm);
    bool use_rows = mm->use_rows = to - from >= MEMO_ROW_MIN_NODES;
    uint32_t ids[TOKEN_MAX_BYTES + 2];
    ids[d0] = tl__gmemo_intern(mm, &m->levels[d0]);
    if (ids[d0] == UINT32_MAX) return false;
    uint32_t unc_depth = 0;
    for (uint32_t i = from; i < to;) {
        const struct gnode *nd = &v->nodes[i];
        uint32_t d = nd->depth;
        if (unc_depth >= d) unc_depth = 0;
        uint32_t pid = ids[d - 1], id;
        if (use_rows && pid < MEMO_ROW_SETS && mm->rows[(size_t)pid * 256 + nd->byte]) {
            id = mm->rows[(size_t)pid * 256 + nd->byte] - 1;
        } else {
            id = tl__gmemo_transition(m, mm, pid, nd->byte);
            if (id == UINT32_MAX) return false;
        }
        ids[d] = id;
        const struct gset *L = &mm->sets[id];
        bool alive = L->n > 0;
        if (nd->token >= 0 && (alive || L->ended)) {
            set_bit(bits, nd->token);
            if (nd->dup)
                for (int32_t t = v->same_next[nd->token]; t >= 0; t = v->same_next[t])
                    set_bit(bits, t);
        }
        if (unc && L->ended && !unc_depth && i + 1 < nd->end) {
            if (!tl_grow((void **)&unc->nodes, &unc->cap, unc->n + 1, sizeof(uint32_t)))
                return false;
            unc->nodes[unc->n++] = i;
            unc_depth = d;
        }
        i = alive ? i + 1 : nd->end;
    }
    return true;
}

// ---- the cache ------------------------------------------------------------------------------

// The entry for a stack; *temp says the caller must free it (not cached). NULL on failure.
static struct gentry *get_entry(struct tl_gmatcher *m, const struct tl_gvocab *v, const uint32_t *f,
                                size_t n, bool *temp)
{
    struct tl_grammar *g = m->g;
    bool full = n <= CTX_FRAMES;
    size_t nk = full ? n : CTX_FRAMES;
    const uint32_t *k = f + n - nk;
    *temp = true;
    pthread_mutex_lock(&g->mu);
    struct gmask_cache *c = tl__gmask_cache_for(g, v->uid);
    struct gentry *e = c ? tl__gmask_cache_find(c, k, nk, full) : NULL;
    pthread_mutex_unlock(&g->mu);
    if (e) {
        *temp = false;
        return e;
    }
    size_t words = ((size_t)v->n_vocab + 63) / 64;
    e = tl_malloc(sizeof(*e));
    if (!e) return NULL;
    memset(e, 0, sizeof(*e));
    memcpy(e->key, k, nk * sizeof(uint32_t));
    e->n_key = (uint8_t)nk;
    e->full = full;
    e->bits = tl_calloc_array(words, sizeof(uint64_t));
    struct unc_list unc = {0};
    if (!e->bits || !ensure_levels(m, TOKEN_MAX_BYTES + 2)) goto fail;
    tl__gset_from_stack(g, k, nk, &m->levels[0]);
    if (!walk(m, v, 0, v->n_nodes, 0, e->bits, full ? NULL : &unc)) goto fail;
    e->unc = unc.nodes;
    e->n_unc = unc.n;
    pthread_mutex_lock(&g->mu);
    struct gentry *had = c ? tl__gmask_cache_find(c, k, nk, full) : NULL;
    if (had) {
        tl__gentry_free(e);
        e = had;
        *temp = false;
    } else if (c && tl__gmask_cache_insert(c, e, words * 8 + unc.n * 4 + sizeof(*e))) {
        *temp = false;
    }
    pthread_mutex_unlock(&g->mu);
    return e;
fail:
    free(unc.nodes);
    tl__gentry_free(e);
    return NULL;
}

size_t tl__gmask_cache_entries(struct tl_grammar *g, const struct tl_gvocab *v)
{
    return tl__gmask_cache_count(g, v->uid);
}

// ---- masks ----------------------------------------------------------------------------------

bool tl_gmatcher_fill_mask(struct tl_gmatcher *m, const struct tl_gvocab *v, uint64_t *mask)
{
    size_t words = ((size_t)v->n_vocab + 63) / 64;
    memset(mask, 0, words * sizeof(uint64_t));
    if (!ensure_levels(m, TOKEN_MAX_BYTES + 2)) goto nomem;
    for (size_t s = 0; s < m->cur.n; s++) {
        const uint32_t *f = m->cur.data + m->cur.off[s];
        size_t n = m->cur.off[s + 1] - m->cur.off[s];
        bool temp;
        struct gentry *e = get_entry(m, v, f, n, &temp);
        if (!e) goto nomem;
        for (size_t w = 0; w < words; w++)
            mask[w] |= e->bits[w];
        for (size_t u = 0; u < e->n_unc; u++) {
            const struct gnode *nd = &v->nodes[e->unc[u]];
            const unsigned char *path = (const unsigned char *)v->bytes + v->tok_off[nd->any_tok];
            tl__gset_from_stack(m->g, f, n, &m->levels[0]);
            uint32_t d = 1;
            for (; d < nd->depth; d++) {
                tl__gset_advance(m->g, &m->levels[d - 1], path[d - 1], &m->levels[d], m->scratch);
                if (!m->levels[d].n) break;
            }
            if (d < nd->depth) continue;
            if (!walk(m, v, e->unc[u], nd->end, nd->depth - 1u, mask, NULL)) {
                if (temp) tl__gentry_free(e);
                goto nomem;
            }
        }
        if (temp) tl__gentry_free(e);
    }
    if (m->cur.ended)
        for (int32_t i = 0; i < v->n_eog; i++)
            set_bit(mask, v->eog[i]);
    return true;
nomem:
    tl__errorf(TL_ERR_NOMEM, "grammar: out of memory computing a mask");
    return false;
}

bool tl_gmatcher_allows(struct tl_gmatcher *m, const struct tl_gvocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab) return false;
    if (v->is_eog[id]) return m->cur.ended;
    int32_t len = v->tok_len[id];
    if (len <= 0) return false;
    const char *b = v->bytes + v->tok_off[id];
    const struct gset *from = &m->cur;
    int k = 0;
    for (int32_t i = 0; i < len; i++) {
        tl__gset_advance(m->g, from, (unsigned char)b[i], &m->tmp[k], m->scratch);
        if (!m->tmp[k].n) return i + 1 == len && m->tmp[k].ended;
        from = &m->tmp[k];
        k ^= 1;
    }
    return true;
}

bool tl_gmatcher_accept_token(struct tl_gmatcher *m, const struct tl_gvocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab) return false;
    if (v->is_eog[id]) return m->cur.ended;
    if (v->tok_len[id] <= 0) return false;
    return tl_gmatcher_accept_bytes(m, v->bytes + v->tok_off[id], (size_t)v->tok_len[id]);
}
