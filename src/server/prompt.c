/*
 * Turning a request's prompts into token lists (see prompt.h).
 *
 * A chat request has one prompt: its messages rendered with the model's chat template. A
 * completions request has 1..64 prompts, each text or token ids. Text is tokenized with
 * add_special (the vocabulary adds BOS where it wants it) and parse_special (template markers
 * become their special tokens). Tokenizing and detokenizing run on the event loop, so a text
 * that cannot fit the context is refused before it is tokenized, and a token-id prompt that
 * cannot fit is not detokenized for its echo.
 *
 * Ownership: struct tl_srv_prompts owns its arrays and what they hold. Threads: the event-loop
 * thread.
 */
#include "server/prompt.h"

#include "core/alloc.h"
#include "core/error.h"

#include <string.h>

bool tl_srv_text_fits(const struct tl_server *s, size_t len, const char *param,
                      struct tl_oai_error *err)
{
    if (len / s->max_token_bytes <= (size_t)s->max_seq_len) return true;
    tl_oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", param,
                     "This model's maximum context length is %d tokens; a prompt of %zu "
                     "bytes is far longer",
                     (int)s->max_seq_len, len);
    return false;
}

int32_t tl_srv_max_tokens(const struct tl_server *s, const struct tl_oai_params *p,
                          int64_t n_prompt)
{
    if (p->max_tokens > 0) return p->max_tokens;
    if (p->kind == TL_OAI_CHAT) {
        int64_t rest = (int64_t)s->max_seq_len - n_prompt;
        return rest > 0 ? (int32_t)rest : 1;
    }
    return 16;
}

void tl_srv_prompts_free(struct tl_srv_prompts *pr)
{
    for (int i = 0; i < pr->n; i++) {
        if (pr->tokens) free(pr->tokens[i]);
        if (pr->text) free(pr->text[i]);
    }
    free(pr->tokens);
    free(pr->n_tokens);
    free(pr->text);
    free(pr->text_len);
    memset(pr, 0, sizeof(*pr));
}

static bool out_of_memory(struct tl_oai_error *err)
{
    tl_oai_error_from_status(err, TL_ERR_NOMEM, "out of memory");
    return false;
}

// Tokenizes prompt i (chat: the rendered conversation). On failure fills *err.
static bool prepare_one(struct tl_server *s, struct tl_oai_params *p, struct tl_srv_prompts *pr,
                        int i, struct tl_oai_error *err)
{
    const char *param = p->kind == TL_OAI_CHAT ? "messages" : "prompt";
    const char *text = NULL;
    size_t len = 0;
    char *rendered = NULL;
    if (p->kind == TL_OAI_CHAT) {
        const char *bad = NULL;
        tl_status st = tl_chat_template_apply(&s->chat, p->root, &rendered, &len, &bad);
        if (st) {
            tl_oai_error_from_status(err, st, tl_last_error());
            if (bad) snprintf(err->param, sizeof(err->param), "%s", bad);
            return false;
        }
        text = rendered;
    } else if (p->prompts[i].tokens) {
        pr->tokens[i] = p->prompts[i].tokens; // take ownership
        pr->n_tokens[i] = p->prompts[i].n_tokens;
        p->prompts[i].tokens = NULL;
        // Echo: the prompt's text, detokenized on the loop; a prompt that cannot fit the
        // context is refused by the length check, so it is not detokenized first (millions of
        // ids would stall every client).
        if (p->echo && pr->n_tokens[i] < s->max_seq_len) {
            pr->text[i] = s->be->detokenize(s->model, pr->tokens[i], pr->n_tokens[i], false);
            if (!pr->text[i]) return out_of_memory(err);
            pr->text_len[i] = strlen(pr->text[i]);
        }
        return true;
    } else {
        text = p->prompts[i].text;
        len = p->prompts[i].text_len;
    }
    if (!tl_srv_text_fits(s, len, param, err)) {
        free(rendered);
        return false;
    }
    // A rendered chat carries its own special tokens (the template writes BOS where the model
    // wants one), so only plain prompts get the vocabulary's automatic BOS (vLLM does the same).
    tl_status st = s->be->tokenize(s->model, text, len, p->kind != TL_OAI_CHAT, true,
                                   &pr->tokens[i], &pr->n_tokens[i]);
    if (!st && p->echo) {
        pr->text[i] = tl_strndup(text, len);
        pr->text_len[i] = len;
        if (!pr->text[i]) st = TL_ERR_NOMEM;
    }
    free(rendered);
    if (st) {
        tl_oai_error_from_status(err, st, st == TL_ERR_NOMEM ? "out of memory" : tl_last_error());
        return false;
    }
    if (pr->n_tokens[i] == 0) {
        tl_oai_error_set(err, 400, "invalid_request_error", "invalid_value", param,
                         "the prompt is empty after tokenization");
        return false;
    }
    return true;
}

static bool check_lengths(const struct tl_server *s, const struct tl_oai_params *p,
                          const struct tl_srv_prompts *pr, struct tl_oai_error *err)
{
    const char *part = p->kind == TL_OAI_CHAT ? "messages" : "prompt";
    for (int i = 0; i < pr->n; i++) {
        int64_t np = pr->n_tokens[i];
        int64_t mt = tl_srv_max_tokens(s, p, np);
        if (np + mt <= s->max_seq_len) continue;
        tl_oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
                         p->max_tokens > 0 ? "max_tokens" : part,
                         "This model's maximum context length is %d tokens. However, you "
                         "requested %lld tokens (%lld in the %s, %lld for the completion). "
                         "Please reduce the length of the %s or max_tokens.",
                         (int)s->max_seq_len, (long long)(np + mt), (long long)np, part,
                         (long long)mt, part);
        return false;
    }
    return true;
}

bool tl_srv_prompts_prepare(struct tl_server *s, struct tl_oai_params *p,
                            struct tl_srv_prompts *out, struct tl_oai_error *err)
{
    memset(out, 0, sizeof(*out));
    int n = p->kind == TL_OAI_CHAT ? 1 : p->n_prompts;
    out->tokens = tl_calloc_array((size_t)n, sizeof(*out->tokens));
    out->n_tokens = tl_calloc_array((size_t)n, sizeof(*out->n_tokens));
    out->text = tl_calloc_array((size_t)n, sizeof(*out->text));
    out->text_len = tl_calloc_array((size_t)n, sizeof(*out->text_len));
    if (!out->tokens || !out->n_tokens || !out->text || !out->text_len) {
        free(out->tokens);
        free(out->n_tokens);
        free(out->text);
        free(out->text_len);
        memset(out, 0, sizeof(*out));
        return out_of_memory(err);
    }
    out->n = n;
    for (int i = 0; i < n; i++)
        if (!prepare_one(s, p, out, i, err)) return false;
    return check_lengths(s, p, out, err);
}
