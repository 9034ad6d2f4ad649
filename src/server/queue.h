/*
 * The handover of engine events from the engine thread to the event loop: each event is copied
 * into one message (tl_srv_queue_post) and appended to a mutex-protected list; an eventfd is
 * written when the list goes from empty to non-empty, so wake-ups coalesce and none is lost
 * (the loop reads the eventfd before taking the list).
 *
 * Threads: tl_srv_queue_post / _push on the engine thread (producer); tl_srv_queue_take_all on the
 * loop (consumer). A message belongs to whoever holds it: the producer until pushed, then the
 * queue, then the consumer.
 */
#ifndef TL_SERVER_QUEUE_H
#define TL_SERVER_QUEUE_H

#include <tokenloom.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct tl_srv_choice;

// One engine event, copied on the engine thread for the loop. Text and alternatives live in
// the same allocation, after the struct.
struct tl_srv_msg {
    struct tl_srv_msg *next;      // queue link
    char *text_heap;              // owned: a DONE message's text (NULL when none)
    char error[256];              // a DONE message's error text
    struct tl_srv_choice *choice; // the request's user pointer; dereferenced by the loop only
    struct tl_event ev;           // text and top point into this allocation (or are NULL)
    int64_t t_us;                 // when the engine delivered it (tl_time_us)
    bool preallocated;            // the choice's DONE message: freed with the choice
};

struct tl_srv_queue {
    pthread_mutex_t mu;
    struct tl_srv_msg *head, *tail; // owned messages, oldest first
    int efd;                        // eventfd (non-blocking), owned; -1 when not open
};

// Opens the eventfd. TL_ERR_IO when it cannot.
tl_status tl_srv_queue_init(struct tl_srv_queue *q);
// Closes the eventfd; the list must be empty (take it first).
void tl_srv_queue_destroy(struct tl_srv_queue *q);
void tl_srv_queue_push(struct tl_srv_queue *q, struct tl_srv_msg *m);
// Copies an engine event for choice into a message (text and alternatives in the same
// allocation) and pushes it. A DONE event fills the choice's preallocated done_msg, so it is
// always delivered; a copy that cannot be allocated sets *dropped instead (the choice then
// ends with an error at DONE).
void tl_srv_queue_post(struct tl_srv_queue *q, struct tl_srv_choice *choice,
                       struct tl_srv_msg *done_msg, atomic_bool *dropped,
                       const struct tl_event *ev);
// Resets the eventfd, then takes the whole list (oldest first; NULL when empty).
struct tl_srv_msg *tl_srv_queue_take_all(struct tl_srv_queue *q);

#endif
