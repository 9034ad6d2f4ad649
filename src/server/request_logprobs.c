/*
 * A generating request's log-probabilities (see request_impl.h): the text of each token and of
 * its alternatives added to a logprobs builder, and whether the engine also reports the prompt
 * tokens' (echo + logprobs on /v1/completions: PROMPT_TOKEN events, handled with the other
 * events in request_events.c). A leaf of the request files: it calls none of them.
 *
 * THREADS: the event-loop thread.
 */
#include "server/request_impl.h"

#include "core/alloc.h"

#include <string.h>

// The text of one token, for logprobs (NUL-terminated, malloc'd, possibly a partial UTF-8
// character).
static char *token_text(struct tl_server *s, int32_t id, size_t *len)
{
    char buf[128];
    size_t n = s->be->token_text(s->model, id, buf, sizeof(buf));
    char *out = tl_malloc(n + 1);
    if (!out) {
        *len = 0;
        return NULL;
    }
    if (n < sizeof(buf))
        memcpy(out, buf, n);
    else
        s->be->token_text(s->model, id, out, n + 1);
    out[n] = '\0';
    *len = n;
    return out;
}

// Adds one token (and its alternatives) to a logprobs builder. False when memory ran out.
bool tl__req_add_logprob(struct tl_server *s, struct tl_oai_logprobs *lp, int32_t id, float logprob,
                         const struct tl_token_logprob *top, int n_top)
{
    size_t len = 0;
    char *text = token_text(s, id, &len);
    char *tops[TL_OAI_MAX_LOGPROBS];
    size_t tops_len[TL_OAI_MAX_LOGPROBS];
    if (n_top > TL_OAI_MAX_LOGPROBS) n_top = TL_OAI_MAX_LOGPROBS;
    for (int i = 0; i < n_top; i++)
        tops[i] = token_text(s, top[i].id, &tops_len[i]);
    bool ok = text != NULL;
    for (int i = 0; i < n_top; i++)
        ok = ok && tops[i];
    if (ok)
        ok = tl_oai_logprobs_add(lp, text, len, logprob, top, (const char *const *)tops, tops_len,
                                 n_top);
    free(text);
    for (int i = 0; i < n_top; i++)
        free(tops[i]);
    return ok;
}

// echo + logprobs on /v1/completions: the prompt tokens' logprobs are computed by the engine
// (PROMPT_TOKEN events) and reported before the generated tokens', as OpenAI and vLLM do.
bool tl__req_prompt_logprobs(const struct tl_srv_req *q)
{
    return q->params.kind == TL_OAI_COMPLETION && q->params.echo && q->params.logprobs;
}
