/*
 * SentencePiece-style BPE by scores (tokenizer.ggml.model = "llama"), as llama.cpp's
 * llm_tokenizer_spm: the (already space-escaped) text starts as one symbol per UTF-8 character
 * (the length read from the lead byte only, so invalid bytes are symbols of their own); any
 * adjacent pair whose concatenation is a token is a candidate, and the candidate whose token has
 * the highest score is merged first (ties: the leftmost). Symbols that end up not being tokens
 * are emitted as byte tokens <0xXX> (or the raw byte's token), which is SentencePiece's byte
 * fallback.
 *
 * Design. Linked symbols over an array plus a binary heap of candidates; a popped candidate is
 * stale when either side changed (length mismatch), as in bpe.c. O(n log n).
 *
 * A byte with no byte token: llama.cpp throws; we emit the unknown token when the vocabulary has
 * one and drop the byte otherwise.
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
    int32_t prev, next;
    uint32_t off, n; // n == 0 once merged into the left neighbour
};

struct cand {
    float score;
    int32_t left, right;
    uint32_t size;
};

static bool cand_before(const struct cand *a, const struct cand *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TL__HEAP_DEFINE(heap, struct cand, cand_before)

static bool try_pair(const struct tl_vocab *v, const char *text, const struct sym *syms,
                     struct heap *h, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return true;
    uint32_t size = syms[l].n + syms[r].n;
    int32_t id = tl__vocab_find(v, text + syms[l].off, size);
    if (id < 0) return true;
    struct cand c = {v->tokens[id].score, l, r, size};
    return heap_push(h, c);
}

tl_status tl__spm_encode(const struct tl_vocab *v, const char *text, size_t len,
                         struct tl__ids *out)
{
    if (len == 0) return TL_OK;
    tl_status rc = TL_OK;
    struct heap h = {0};
    struct sym *syms = tl_malloc_array(len, sizeof(*syms));
    if (!syms) return tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory for %zu bytes", len);
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        size_t cl = lens[(unsigned char)text[off] >> 4];
        if (cl > len - off) cl = len - off;
        syms[n].prev = n - 1;
        syms[n].next = off + cl == len ? -1 : n + 1;
        syms[n].off = (uint32_t)off;
        syms[n].n = (uint32_t)cl;
        off += cl;
        n++;
    }
    for (int32_t i = 1; i < n; i++)
        if (!try_pair(v, text, syms, &h, i - 1, i)) goto out_nomem;
    while (h.n) {
        struct cand c = heap_pop(&h);
        struct sym *l = &syms[c.left], *r = &syms[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue; // stale
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = c.left;
        if (!try_pair(v, text, syms, &h, l->prev, c.left) ||
            !try_pair(v, text, syms, &h, c.left, l->next))
            goto out_nomem;
    }
    for (int32_t i = 0; i != -1; i = syms[i].next) {
        int32_t id = tl__vocab_find(v, text + syms[i].off, syms[i].n);
        if (id >= 0) {
            if (!tl__ids_push(out, id)) goto out_nomem;
            continue;
        }
        for (uint32_t k = 0; k < syms[i].n; k++) {
            id = v->byte_tok[(unsigned char)text[syms[i].off + k]];
            if (id < 0) id = v->unk;
            if (id >= 0 && !tl__ids_push(out, id)) goto out_nomem;
        }
    }
    goto out_free_scratch;
out_nomem:
    rc = tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
out_free_scratch:
    free(h.v);
    free(syms);
    return rc;
}
