/*
 * The engine -> loop message queue (see queue.h).
 *
 * Threads: push from the engine thread, take from the loop; the mutex guards the list, the
 * eventfd counter carries the wake-up. Ownership: the queue owns the messages it holds.
 */
#include "server/queue.h"

#include "core/error.h"

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
