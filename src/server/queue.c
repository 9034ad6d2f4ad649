/*
 * The engine -> loop message queue (see queue.h).
 *
 * Threads: post and push from the engine thread, take from the loop; the mutex guards the list, the
 * eventfd counter carries the wake-up. Ownership: the queue owns the messages it holds.
 */
#include "server/queue.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

tl_status tl_srv_queue_init(struct tl_srv_queue *q)
{
    memset(q, 0, sizeof(*q));
    pthread_mutex_init(&q->mu, NULL);
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) return tl__errorf(TL_ERR_IO, "cannot create an eventfd");
    return TL_OK;
}

void tl_srv_queue_destroy(struct tl_srv_queue *q)
{
    if (q->efd >= 0) close(q->efd);
    q->efd = -1;
    pthread_mutex_destroy(&q->mu);
}

void tl_srv_queue_push(struct tl_srv_queue *q, struct tl_srv_msg *m)
{
    m->next = NULL;
    pthread_mutex_lock(&q->mu);
    bool was_empty = q->head == NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    pthread_mutex_unlock(&q->mu);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t n = write(q->efd, &one, sizeof(one)); // only fails when the counter is huge
        (void)n;
    }
}

struct tl_srv_msg *tl_srv_queue_take_all(struct tl_srv_queue *q)
{
    uint64_t cnt;
    ssize_t n = read(q->efd, &cnt, sizeof(cnt)); // reset before taking: no wake-up is lost
    (void)n;
    pthread_mutex_lock(&q->mu);
    struct tl_srv_msg *m = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    return m;
}

void tl_srv_queue_post(struct tl_srv_queue *q, struct tl_srv_choice *choice,
                       struct tl_srv_msg *done_msg, atomic_bool *dropped, const struct tl_event *ev)
{
    size_t text_len = ev->text ? ev->text_len : 0;
    if (ev->type == TL_EVENT_DONE) {
        // The preallocated message: delivery cannot fail. Nothing of the choice is touched
        // after the push, since the loop may free it at once.
        struct tl_srv_msg *m = done_msg;
        m->ev = *ev;
        m->ev.top = NULL;
        m->ev.n_top = 0;
        m->ev.text = NULL;
        m->ev.text_len = 0;
        m->ev.error = NULL;
        m->t_us = tl_time_us();
        if (text_len) {
            m->text_heap = tl_malloc(text_len);
            if (m->text_heap) {
                memcpy(m->text_heap, ev->text, text_len);
                m->ev.text = m->text_heap;
                m->ev.text_len = text_len;
            } else {
                atomic_store(dropped, true);
            }
        }
        if (ev->error) snprintf(m->error, sizeof(m->error), "%s", ev->error);
        tl_srv_queue_push(q, m);
        return;
    }
    int n_top = ev->n_top > 0 && ev->top ? ev->n_top : 0;
    size_t size =
        sizeof(struct tl_srv_msg) + (size_t)n_top * sizeof(struct tl_token_logprob) + text_len + 1;
    struct tl_srv_msg *m = tl_malloc(size);
    if (!m) {
        atomic_store(dropped, true); // the request ends with an error at DONE
        return;
    }
    memset(m, 0, sizeof(*m));
    m->choice = choice;
    m->ev = *ev;
    m->t_us = tl_time_us();
    char *p = (char *)(m + 1);
    if (n_top) {
        memcpy(p, ev->top, (size_t)n_top * sizeof(struct tl_token_logprob));
        m->ev.top = (const struct tl_token_logprob *)p;
        p += (size_t)n_top * sizeof(struct tl_token_logprob);
    } else {
        m->ev.top = NULL;
    }
    m->ev.n_top = n_top;
    if (text_len) memcpy(p, ev->text, text_len);
    p[text_len] = '\0';
    m->ev.text = p;
    m->ev.text_len = text_len;
    m->ev.error = NULL;
    tl_srv_queue_push(q, m);
}
