/*
 * What the engine counts about each step beyond tokens and time: the work the backend computed
 * and read (from the model's shapes, model/work.c) and the batch's composition (sequences,
 * decode tokens, prefill tokens per step), into the engine thread's running tl_engine_stats.
 *
 * Why a file of its own: engine.c runs the step; this is bookkeeping the metrics read
 * (src/front/metrics.c), kept apart so the step stays readable.
 *
 * Thread model: engine thread only (the stats are published by engine.c's publish_stats).
 */
#include "engine/engine_impl.h"

// Counts v in the step histogram `count` (bounds stats->step_hist_le; the last is a catch-all).
void tl__engine_hist_add(struct tl_engine_stats *st, int64_t *count, int64_t v)
{
    for (int i = 0; i < TL_STEP_HIST_BUCKETS; i++)
        if (v <= st->step_hist_le[i]) {
            count[i]++;
            break;
        }
}

// The step's work (the backend counts it from the shapes) and batch composition: a sequence
// fed its last sampled token is decoding; anything else scheduled (prompt chunks, recomputation
// after preemption) is prefill. Called before n_computed moves past the step.
void tl__engine_count_work(tl_engine *e, const struct tl_batch *b)
{
    struct tl_engine_stats *st = &e->stats;
    if (e->be.step_work) {
        struct tl_step_work w;
        e->be.step_work(e->be.ctx, b, tl_kv_cache_pages(e->kv), &w);
        st->int8_ops_total += w.int8_ops;
        st->flops_total += w.flops;
        st->weight_bytes_total += w.weight_bytes;
        st->kv_bytes_total += w.kv_bytes;
    }
    int64_t n_decode = 0, n_prefill = 0;
    for (int64_t i = 0; i < e->n_b_seqs; i++) {
        const struct tl_seq *s = e->b_seqs[i];
        if (s->sched_n == 1 && s->n_computed >= s->n_prompt)
            n_decode++;
        else
            n_prefill += s->sched_n;
    }
    tl__engine_hist_add(st, st->seqs_hist_count, e->n_b_seqs);
    st->seqs_sum += e->n_b_seqs;
    if (n_decode > 0) {
        tl__engine_hist_add(st, st->decode_hist_count, n_decode);
        st->decode_tokens_sum += n_decode;
    }
    if (n_prefill > 0) {
        tl__engine_hist_add(st, st->prefill_hist_count, n_prefill);
        st->prefill_tokens_sum += n_prefill;
    }
}
