/*
 * The walk over one KV head's positions through a block table, shared by the SIMD attention
 * kernels (x86/avx2_attn.c, x86/avx512_attn.c): position j's K or V row starts at the element
 * index tl__kv_index(kv, table, j, kv_head) (kernels_impl.h), computed incrementally, with no
 * division per position, and reading a block's table entry only when the walk enters it.
 * ISA-neutral: plain integer arithmetic, compiled into each ISA file with that file's flags.
 *
 * Invariant: positions come in order from the start position (0, or the first position of a
 * sliding window: tl__kv_pos_init_at), one after another; the caller asks for no more positions
 * than the table covers (n_ctx <= blocks * block_size).
 *
 * Thread model: the iterator is a caller-owned value over read-only memory; re-entrant.
 */
#ifndef TL_KERNELS_ATTN_ITER_H
#define TL_KERNELS_ATTN_ITER_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

struct tl__kv_pos {
    const int32_t *table; // borrowed: the sequence's block table
    size_t slot_stride;   // elements from one position to the next within a block
    size_t block_elems;   // elements per block
    size_t head_off;      // elements from a position's row to this head's part of it
    size_t base;          // element index of the current block's slot 0 for this head
    int64_t blk;          // index into table of the current block
    int slot, bs;         // next slot in the current block; slots per block
};

// The walk from position `pos` (the one division per walk).
static inline __attribute__((always_inline)) void tl__kv_pos_init_at(struct tl__kv_pos *p,
                                                                     const struct tl_kv_layer *kv,
                                                                     const int32_t *table,
                                                                     int kv_head, int64_t pos)
{
    p->table = table;
    p->bs = kv->block_size;
    p->slot_stride = (size_t)kv->n_kv_head * kv->head_dim;
    p->block_elems = (size_t)kv->block_size * p->slot_stride;
    p->head_off = (size_t)kv_head * kv->head_dim;
    p->blk = pos / kv->block_size;
    p->slot = (int)(pos % kv->block_size);
    p->base = (size_t)table[p->blk] * p->block_elems + p->head_off;
}

static inline __attribute__((always_inline)) void tl__kv_pos_init(struct tl__kv_pos *p,
                                                                  const struct tl_kv_layer *kv,
                                                                  const int32_t *table, int kv_head)
{
    tl__kv_pos_init_at(p, kv, table, kv_head, 0);
}

// Element offset of the next position (the table entry of a block is read only when needed).
static inline __attribute__((always_inline)) size_t tl__kv_pos_next(struct tl__kv_pos *p)
{
    if (p->slot == p->bs) {
        p->slot = 0;
        p->blk++;
        p->base = (size_t)p->table[p->blk] * p->block_elems + p->head_off;
    }
    return p->base + (size_t)(p->slot++) * p->slot_stride;
}

#endif
