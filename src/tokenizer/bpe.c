/*
 * Byte-level BPE encoding (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe:
 * the pre-tokenizer (pretok.c) cuts the text into pre-tokens already mapped to GPT-2's byte
 * characters; each pre-token starts as one symbol per UTF-8 character and the adjacent pair with
 * the lowest merge rank is merged until no pair has a rank (ties: the leftmost pair).
 *
 * Design. Symbols form a doubly linked list over an array; candidate pairs sit in a binary heap
 * keyed by (rank, left index). A popped pair is stale when either side was merged since it was
 * pushed, which shows as a length mismatch (symbols only grow, and only by absorbing their right
 * neighbour), so the check needs no string compare. Each symbol carries the id of its piece, so
 * finding a merge is one hash lookup on (left id, right id). O(n log n) per pre-token.
 *
 * When ignore_merges is set (Llama 3 family) a pre-token that is itself a token is emitted
 * whole. A final symbol that is not a token falls back to the tokens of its single bytes,
 * skipping bytes that have none (llama.cpp does the same).
 *
 * Threads: pure function of the immutable vocab; scratch is per call.
 */
#include "tokenizer/heap.h"
#include "tokenizer/vocab_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

struct sym {
    int32_t prev, next; // neighbours in the list, -1 at the ends
    uint32_t off, n;    // bytes of the word; n == 0 once merged into the left neighbour
    int32_t id;         // token id of the symbol's piece, -1 if none
};

struct pair {
    int32_t rank;
    int32_t left, right;
    uint32_t size; // bytes of left + right when pushed
    int32_t result;
};

static bool pair_before(const struct pair *a, const struct pair *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TL__HEAP_DEFINE(heap, struct pair, pair_before)

struct scratch {
    struct sym *syms; // owned
    size_t cap;
    struct heap heap;
};

static bool try_pair(const struct tl_vocab *v, struct scratch *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return true;
    int32_t rank, result;
    if (!tl__vocab_merge(v, s->syms[l].id, s->syms[r].id, &rank, &result)) return true;
    struct pair p = {rank, l, r, s->syms[l].n + s->syms[r].n, result};
    return heap_push(&s->heap, p);
}

static tl_status encode_word(const struct tl_vocab *v, struct scratch *s, const char *w, size_t len,
                             struct tl__ids *out)
{
    if (len == 0) return TL_OK;
    if (v->ignore_merges) {
        int32_t id = tl__vocab_find(v, w, len);
        if (id >= 0) return tl__ids_push(out, id) ? TL_OK : TL_ERR_NOMEM;
    }
    if (!tl_grow((void **)&s->syms, &s->cap, len, sizeof(struct sym))) return TL_ERR_NOMEM;
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        size_t cl = lens[(unsigned char)w[off] >> 4];
        if (cl > len - off) cl = len - off;
        struct sym *y = &s->syms[n];
        y->prev = n - 1;
        y->next = off + cl == len ? -1 : n + 1;
        y->off = (uint32_t)off;
        y->n = (uint32_t)cl;
        y->id = tl__vocab_find(v, w + off, cl);
        off += cl;
        n++;
    }
    s->heap.n = 0;
    for (int32_t i = 1; i < n; i++)
        if (!try_pair(v, s, i - 1, i)) return TL_ERR_NOMEM;
    while (s->heap.n) {
        struct pair p = heap_pop(&s->heap);
        struct sym *l = &s->syms[p.left], *r = &s->syms[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue; // stale
        l->n += r->n;
        l->id = p.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = p.left;
        if (!try_pair(v, s, l->prev, p.left) || !try_pair(v, s, p.left, l->next))
            return TL_ERR_NOMEM;
    }
    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        const struct sym *y = &s->syms[i];
        if (y->id >= 0) {
            if (!tl__ids_push(out, y->id)) return TL_ERR_NOMEM;
            continue;
        }
        for (uint32_t k = 0; k < y->n; k++) {
            int32_t id = tl__vocab_find(v, w + y->off + k, 1);
            if (id >= 0 && !tl__ids_push(out, id)) return TL_ERR_NOMEM;
        }
    }
    return TL_OK;
}

tl_status tl__bpe_encode(const struct tl_vocab *v, const char *text, size_t len,
                         struct tl__ids *out)
{
    char *buf;
    int64_t *starts, n;
    tl_status rc = tl__pretok_split(v->pretok, text, len, &buf, &starts, &n);
    if (rc) return rc;
    struct scratch s = {0};
    for (int64_t i = 0; i < n && !rc; i++)
        rc = encode_word(v, &s, buf + starts[i], (size_t)(starts[i + 1] - starts[i]), out);
    if (rc == TL_ERR_NOMEM) rc = tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
    free(s.syms);
    free(s.heap.v);
    free(buf);
    free(starts);
    return rc;
}
