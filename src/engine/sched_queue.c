/*
 * The scheduler's two ordered queues (see sched.c for the policy): waiting sequences in
 * (priority, arrival) order, running ones in (priority, admission) order, so "best first" is the
 * front and a preemption victim comes from the back. A leaf: sched.c, seq.c (a finishing
 * sequence leaves its queue) and engine.c (new requests) call it, it calls nothing back.
 *
 * Thread model: engine thread only; no locks.
 */
#include "engine/engine_impl.h"

#include <string.h>

static bool waiting_before(const struct tl_seq *a, const struct tl_seq *b)
{
    return a->priority < b->priority || (a->priority == b->priority && a->arrival < b->arrival);
}

static bool running_before(const struct tl_seq *a, const struct tl_seq *b)
{
    return a->priority < b->priority || (a->priority == b->priority && a->admitted < b->admitted);
}

void tl__sched_enqueue(tl_engine *e, struct tl_seq *s)
{
    TL_ASSERT(e->n_waiting < e->cap_waiting); // reserved by drain_inbox for every live seq
    size_t lo = 0, hi = e->n_waiting;         // first position whose seq is not before s
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (waiting_before(e->waiting[mid], s))
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(e->waiting + lo + 1, e->waiting + lo, (e->n_waiting - lo) * sizeof(*e->waiting));
    e->waiting[lo] = s;
    e->n_waiting++;
    s->state = TL_SEQ_WAITING;
}

void tl__sched_running_insert(tl_engine *e, struct tl_seq *s)
{
    TL_ASSERT(e->n_running < e->cfg.max_batch_size);
    int64_t i = e->n_running;
    while (i > 0 && running_before(s, e->running[i - 1])) {
        e->running[i] = e->running[i - 1];
        i--;
    }
    e->running[i] = s;
    e->n_running++;
    s->state = TL_SEQ_RUNNING;
}

void tl__sched_remove(tl_engine *e, struct tl_seq *s)
{
    if (s->state == TL_SEQ_RUNNING) {
        for (int64_t i = 0; i < e->n_running; i++)
            if (e->running[i] == s) {
                memmove(e->running + i, e->running + i + 1,
                        (size_t)(e->n_running - i - 1) * sizeof(*e->running));
                e->n_running--;
                return;
            }
    } else {
        for (size_t i = 0; i < e->n_waiting; i++)
            if (e->waiting[i] == s) {
                memmove(e->waiting + i, e->waiting + i + 1,
                        (e->n_waiting - i - 1) * sizeof(*e->waiting));
                e->n_waiting--;
                return;
            }
    }
    TL_ASSERT(!"sequence in no queue");
}
