/*
 * Two facts every HTTP reply needs (see http.h): a new request id (32 hex digits from the
 * server's splitmix64 stream, seeded per process in http.c) and the reason phrase of a status.
 * A leaf below http.c and http_errors.c (libevent's own errors rewritten as JSON), which both
 * write replies.
 *
 * Threads: the event-loop thread (the id stream is the server's).
 */
#include "server/http.h"

#include "core/hash.h"

#include <stdio.h>

void tl_http_new_request_id(struct tl_http *h, char out[33])
{
    uint64_t a = tl_splitmix64(&h->id_state), b = tl_splitmix64(&h->id_state);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

const char *tl_http_reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Payload Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    default:
        return "Error";
    }
}
