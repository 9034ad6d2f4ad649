/*
 * The grammar compile worker: compiles grammars on its own thread so that an event loop never
 * does (a big schema takes up to TL_GRAMMAR_COMPILE_MAX_MS, and the loop serves every stream).
 * Jobs go in with tl_gworker_submit; each finished job goes on a done list and an eventfd
 * becomes readable; the loop takes the list (tl_gworker_take_done) and reads each job's result.
 * Compilation goes through the LRU (tl_grammar_get), so requests with the same source compile
 * once, and a source already there never reaches the worker (tl_grammar_lookup).
 *
 * Thread model: one worker thread; submit, take_done and destroy from one other thread (the
 * loop). The mutex guards both lists; the eventfd carries the wake-up (it is read before the
 * list is taken, so none is lost). A job belongs to the submitter until submitted, then to the
 * worker, then (done) to whoever takes it.
 */
#include "grammar/grammar.h"

#include "core/alloc.h"
#include "core/error.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct tl_gworker {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tl_gjob *todo, *todo_tail; // owned, oldest first
    struct tl_gjob *done, *done_tail; // owned, oldest first
    bool stop;
    int efd;
};

static void append(struct tl_gjob **head, struct tl_gjob **tail, struct tl_gjob *j)
{
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static void *worker_main(void *arg)
{
    struct tl_gworker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->todo && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop) break;
        struct tl_gjob *j = w->todo;
        w->todo = j->next;
        if (!w->todo) w->todo_tail = NULL;
        pthread_mutex_unlock(&w->mu);
        j->rc = tl_grammar_get(j->kind, j->src, j->len, &j->grammar);
        if (j->rc) snprintf(j->error, sizeof(j->error), "%s", tl_last_error());
        pthread_mutex_lock(&w->mu);
        append(&w->done, &w->done_tail, j);
        uint64_t one = 1;
        if (write(w->efd, &one, sizeof(one)) < 0) {
            // the counter cannot overflow in practice; a failed write leaves it readable anyway
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

tl_status tl_gworker_create(struct tl_gworker **out)
{
    *out = NULL;
    struct tl_gworker *w = tl_calloc_array(1, sizeof(*w));
    if (!w) return tl__errorf(TL_ERR_NOMEM, "grammar: out of memory for the compile worker");
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0) {
        free(w);
        return tl__errorf(TL_ERR_IO, "grammar: cannot create an eventfd");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
        tl_gworker_destroy(w, NULL);
        return tl__errorf(TL_ERR_IO, "grammar: cannot start the compile worker");
    }
    w->started = true;
    *out = w;
    return TL_OK;
}

int tl_gworker_fd(const struct tl_gworker *w)
{
    return w->efd;
}

struct tl_gjob *tl_gjob_new(enum tl_grammar_kind kind, const char *src, size_t len, void *user)
{
    struct tl_gjob *j = tl_calloc_array(1, sizeof(*j));
    if (!j) return NULL;
    j->src = tl_malloc(len + 1);
    if (!j->src) {
        free(j);
        return NULL;
    }
    if (len) memcpy(j->src, src, len);
    j->src[len] = 0;
    j->len = len;
    j->kind = kind;
    j->user = user;
    return j;
}

void tl_gjob_free(struct tl_gjob *j)
{
    if (!j) return;
    tl_grammar_unref(j->grammar);
    free(j->src);
    free(j);
}

void tl_gworker_submit(struct tl_gworker *w, struct tl_gjob *j)
{
    pthread_mutex_lock(&w->mu);
    append(&w->todo, &w->todo_tail, j);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

struct tl_gjob *tl_gworker_take_done(struct tl_gworker *w)
{
    uint64_t n;
    if (read(w->efd, &n, sizeof(n)) < 0) {
        // EAGAIN: nothing was signalled since the last take; the list may still hold jobs
    }
    pthread_mutex_lock(&w->mu);
    struct tl_gjob *d = w->done;
    w->done = w->done_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    return d;
}

void tl_gworker_destroy(struct tl_gworker *w, struct tl_gjob **left)
{
    if (left) *left = NULL;
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL); // a compilation in progress ends within its time limit
    }
    // Unstarted jobs, then finished ones not taken: handed back, or freed.
    struct tl_gjob *all = w->todo;
    if (w->todo_tail)
        w->todo_tail->next = w->done;
    else
        all = w->done;
    if (left) {
        *left = all;
    } else {
        while (all) {
            struct tl_gjob *next = all->next;
            tl_gjob_free(all);
            all = next;
        }
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    if (w->efd >= 0) close(w->efd);
    free(w);
}
