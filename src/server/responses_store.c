/*
 * The store of finished responses (see responses.h): what previous_response_id and
 * GET /v1/responses/{id} read.
 *
 * DESIGN
 * A list in insertion order, oldest first; lookups walk it (the count is bounded, by default a
 * thousand, and a walk is a string compare per entry). Each entry's size is the length of the
 * compact JSON of its response and conversation, so the byte bound is what the store would
 * take written out. After every put the oldest entries are evicted until the count and bytes
 * bounds hold; the age bound is applied on every put and get. A conversation is stored whole
 * (not as a link to its parent), so evicting a parent never breaks a child.
 *
 * Threads: one thread at a time (the event loop); no locking.
 */
#include "server/responses.h"

#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *prev, *next;
    char *id;
    json_t *response, *conversation;
    int depth;
    size_t bytes;
    int64_t t_us;
};

struct tl_resp_store {
    struct entry *head, *tail; // oldest, newest
    int count, max_entries;
    size_t bytes, max_bytes;
    int64_t max_age_us;
};

struct tl_resp_store *tl_resp_store_create(int max_entries, size_t max_bytes, int64_t max_age_us)
{
    struct tl_resp_store *st = tl_calloc_array(1, sizeof(*st));
    if (!st) return NULL;
    st->max_entries = max_entries > 0 ? max_entries : 1;
    st->max_bytes = max_bytes;
    st->max_age_us = max_age_us;
    return st;
}

static void unlink_free(struct tl_resp_store *st, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        st->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        st->tail = e->prev;
    st->count--;
    st->bytes -= e->bytes;
    json_decref(e->response);
    json_decref(e->conversation);
    free(e->id);
    free(e);
}

void tl_resp_store_destroy(struct tl_resp_store *st)
{
    if (!st) return;
    while (st->head)
        unlink_free(st, st->head);
    free(st);
}

static struct entry *find(struct tl_resp_store *st, const char *id)
{
    for (struct entry *e = st->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

static void expire(struct tl_resp_store *st, int64_t now_us)
{
    while (st->head && now_us - st->head->t_us > st->max_age_us)
        unlink_free(st, st->head);
}

// The compact JSON length of o (0 when out of memory).
static size_t json_bytes(const json_t *o)
{
    return o ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;
}

bool tl_resp_store_put(struct tl_resp_store *st, const char *id, json_t *response,
                       json_t *conversation, int depth, int64_t now_us)
{
    expire(st, now_us);
    struct entry *old = find(st, id);
    if (old) unlink_free(st, old);
    size_t bytes = json_bytes(response) + json_bytes(conversation) + strlen(id);
    if (bytes > st->max_bytes) return false;
    struct entry *e = tl_calloc_array(1, sizeof(*e));
    char *copy = e ? tl_strndup(id, strlen(id)) : NULL;
    if (!copy) {
        free(e);
        return false;
    }
    e->id = copy;
    e->response = json_incref(response);
    e->conversation = json_incref(conversation);
    e->depth = depth;
    e->bytes = bytes;
    e->t_us = now_us;
    e->prev = st->tail;
    if (st->tail)
        st->tail->next = e;
    else
        st->head = e;
    st->tail = e;
    st->count++;
    st->bytes += bytes;
    while (st->count > st->max_entries || st->bytes > st->max_bytes)
        unlink_free(st, st->head);
    return true;
}

bool tl_resp_store_get(struct tl_resp_store *st, const char *id, int64_t now_us, json_t **response,
                       json_t **conversation, int *depth)
{
    expire(st, now_us);
    struct entry *e = find(st, id);
    if (!e) return false;
    if (response) *response = e->response;
    if (conversation) *conversation = e->conversation;
    if (depth) *depth = e->depth;
    return true;
}

bool tl_resp_store_delete(struct tl_resp_store *st, const char *id)
{
    struct entry *e = find(st, id);
    if (e) unlink_free(st, e);
    return e != NULL;
}

int tl_resp_store_count(const struct tl_resp_store *st)
{
    return st->count;
}

size_t tl_resp_store_bytes(const struct tl_resp_store *st)
{
    return st->bytes;
}
