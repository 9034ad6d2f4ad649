/*
 * A generating request's log-probabilities (see request_impl.h): the text of each token and of
 * its alternatives added to a logprobs builder, and with echo + logprobs on /v1/completions
 * the prompt tokens' logprobs (PROMPT_TOKEN events), which lead the arrays; a stream sends them
 * with the echoed prompt in its first chunk, as vLLM does.
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

// One prompt token's logprob (echo + logprobs). The last one completes the prompt: streaming
// sends the echoed prompt text with all of them in one chunk, as vLLM does; both modes then
// continue the text offsets of generated tokens from the end of the echoed text.
void tl__req_on_prompt_token(struct tl_server *s, struct tl_srv_req *q, struct tl_srv_choice *c,
                             const struct tl_srv_msg *m)
{
    tl__req_mark_started(s, c);
    if (!q->http || q->client_gone || !c->lp.obj) return;
    const struct tl_event *ev = &m->ev;
    int64_t before = c->lp.offset;
    if (!tl__req_add_logprob(s, &c->lp, ev->token, ev->logprob, ev->top, ev->n_top))
        tl__req_lose(q, c);
    // SPM writes a space before the first word that the prompt's text does not have: the
    // offsets after that token count from the text, one less.
    json_t *toks = json_object_get(c->lp.obj, "tokens");
    const char *tok = json_string_value(json_array_get(toks, json_array_size(toks) - 1));
    const char *pt = q->prompts.text[c->prompt];
    if (before == 0 && c->lp.offset > 0 && tok && tok[0] == ' ' && pt && pt[0] != ' ')
        c->lp.offset--;
    if (ev->prompt_pos + 1 < q->prompts.n_tokens[c->prompt]) return;
    int64_t text_len = (int64_t)q->prompts.text_len[c->prompt];
    if (!q->streaming) {
        c->lp.offset = text_len;
        return;
    }
    const char *text = q->prompts.text[c->prompt] ? q->prompts.text[c->prompt] : "";
    json_t *lp = tl_oai_logprobs_take(&c->lp);
    if (c->lost) {
        json_decref(lp);
        return;
    }
    tl__req_sse_send(
        q, c, tl__req_chunk(q, tl_oai_text_choice(c->index, text, (size_t)text_len, lp, NULL)));
    c->lp_offset = text_len;
}
