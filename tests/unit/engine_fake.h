/*
 * A fake model for engine tests, plugged in through struct tl_engine_backend. It keeps its
 * whole state in the engine's KV pages, like a real model: at position p it stores
 * h_p = mix(h_{p-1}, token_p, p) (8 bytes in K) read back through the block table, and its
 * logits are a pseudo-random function of h_p. So a sequence's logits depend exactly on its
 * tokens so far, and any block-table, prefix-cache or preemption mistake changes the output.
 *
 * Vocabulary (n_vocab >= 40): 0 = end of generation (""), 1..26 = "a".."z", 27 = " ",
 * 28 = "\xC3\xA9" (é), 29 = "\xE2" and 30 = "\x82\xAC" (the two halves of €), 31 = an emoji,
 * 32.. = "<n>". Tokenize maps a..z and space to their ids, any other byte to 32 + byte % 8.
 *
 * It also checks each batch against the engine's contract and counts violations.
 */
#ifndef TL_ENGINE_FAKE_H
#define TL_ENGINE_FAKE_H

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "engine/engine_impl.h"

#include <stdio.h>
#include <string.h>

struct fake_model {
    int32_t n_vocab;
    float eos_bias;  // added to token 0's logit (negative: long generations)
    int64_t max_tok; // from prepare
    int64_t n_forward, n_tokens_total, max_batch_tok, last_batch_tok;
    int64_t fail_at; // forward call number that fails (0 = never)
    int64_t violations;
    char violation[256];
};

// One splitmix64 step from x (a pure function of x).
static inline uint64_t fake_mix(uint64_t x)
{
    return tl_mix64(x + TL_GOLDEN64);
}

static inline void *fake_kv_slot(const struct tl_kv_layer *L, const int32_t *table, int64_t pos)
{
    int64_t blk = table[pos / L->block_size], slot = pos % L->block_size;
    size_t elt = L->type == TL_DTYPE_F32 ? 4 : 2;
    return (char *)L->k + (size_t)(blk * L->block_size + slot) * (size_t)L->head_dim * elt;
}

static inline void fake_violation(struct fake_model *f, const char *msg)
{
    if (!f->violations++) snprintf(f->violation, sizeof(f->violation), "%s", msg);
}

static inline tl_status fake_prepare(void *ctx, int64_t max_tok, int64_t max_ctx, int32_t n_threads)
{
    (void)max_ctx;
    (void)n_threads;
    ((struct fake_model *)ctx)->max_tok = max_tok;
    return TL_OK;
}

static inline tl_status fake_forward(void *ctx, const struct tl_batch *b, const struct tl_kv_pages *kv,
                              float *logits)
{
    struct fake_model *f = ctx;
    f->n_forward++;
    if (f->fail_at && f->n_forward == f->fail_at)
        return tl__errorf(TL_ERR_NOMEM, "fake forward failure");
    if (b->n_tok < 1 || b->n_tok > f->max_tok) fake_violation(f, "batch size out of range");
    if (b->n_tok > f->max_batch_tok) f->max_batch_tok = b->n_tok;
    f->last_batch_tok = b->n_tok;
    f->n_tokens_total += b->n_tok;
    const struct tl_kv_layer *L = &kv->layers[0];
    int64_t o = 0;
    for (int64_t t = 0; t < b->n_tok; t++) {
        if (b->token[t] < 0 || b->token[t] >= f->n_vocab) fake_violation(f, "token id");
        if (t > 0 && b->seq[t] == b->seq[t - 1] && b->pos[t] != b->pos[t - 1] + 1)
            fake_violation(f, "positions of a sequence not consecutive");
        const int32_t *table = b->block_tables[b->seq[t]];
        uint64_t prev = 0x1234567;
        if (b->pos[t] > 0) memcpy(&prev, fake_kv_slot(L, table, b->pos[t] - 1), 8);
        uint64_t h = fake_mix(prev ^ fake_mix(((uint64_t)(uint32_t)b->token[t] << 32) |
                                               (uint32_t)b->pos[t]));
        memcpy(fake_kv_slot(L, table, b->pos[t]), &h, 8);
        if (o < b->n_out && b->out_idx[o] == t) {
            float *row = logits + o * (int64_t)f->n_vocab;
            for (int32_t v = 0; v < f->n_vocab; v++) {
                uint64_t r = fake_mix(h ^ ((uint64_t)v * 0xd1b54a32d192ed03ull));
                row[v] = (float)((double)(r >> 40) / (double)(1 << 24) * 8.0 - 4.0);
            }
            row[0] += f->eos_bias;
            o++;
        }
    }
    if (o != b->n_out) fake_violation(f, "out_idx not ascending or out of range");
    return TL_OK;
}

static inline size_t fake_text(int32_t id, char *buf)
{
    static const char *special[] = {"", NULL, " ", "\xC3\xA9", "\xE2", "\x82\xAC",
                                    "\xF0\x9F\x98\x80"};
    if (id == 0) return 0;
    if (id >= 1 && id <= 26) {
        buf[0] = (char)('a' + id - 1);
        return 1;
    }
    if (id >= 27 && id <= 31) {
        const char *s = special[id - 25];
        memcpy(buf, s, strlen(s));
        return strlen(s);
    }
    return (size_t)snprintf(buf, 16, "<%d>", id);
}

static inline tl_status fake_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                               bool parse_special, int32_t **ids, int64_t *n_ids)
{
    (void)ctx;
    (void)add_special;
    (void)parse_special;
    int32_t *out = tl_malloc_array(len ? len : 1, sizeof(int32_t));
    if (!out) return tl__errorf(TL_ERR_NOMEM, "fake tokenize: out of memory");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = c >= 'a' && c <= 'z' ? c - 'a' + 1 : c == ' ' ? 27 : 32 + c % 8;
    }
    *ids = out;
    *n_ids = (int64_t)len;
    return TL_OK;
}

static inline bool fake_is_eog(void *ctx, int32_t id)
{
    (void)ctx;
    return id == 0;
}

struct fake_detok {
    char pending[8];
    int n;
};

static inline void fake_detok_init(void *ctx, void *st, bool render_special)
{
    (void)render_special;
    (void)ctx;
    memset(st, 0, sizeof(struct fake_detok));
}

// Appends the whole characters of buf[0..n) to out, invalid bytes as U+FFFD; returns how many
// bytes were consumed (a trailing incomplete character is left).
static inline size_t fake_sanitize(const char *buf, size_t n, char **out, size_t *len, size_t *cap)
{
    size_t keep = tl_utf8_complete_len(buf, n), i = 0;
    if (!tl_grow((void **)out, cap, *len + 3 * keep + 1, 1)) return (size_t)-1;
    while (i < keep) {
        uint32_t cp;
        int k = tl_utf8_decode(buf + i, keep - i, &cp);
        if (k > 0) {
            memcpy(*out + *len, buf + i, (size_t)k);
            *len += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(*out + *len, "\xEF\xBF\xBD", 3);
            *len += 3;
            i++;
        }
    }
    return keep;
}

static inline tl_status fake_detok_push(void *ctx, void *st, int32_t id, char **out, size_t *len,
                                        size_t *cap)
{
    (void)ctx;
    struct fake_detok *d = st;
    char buf[32];
    memcpy(buf, d->pending, (size_t)d->n);
    size_t n = (size_t)d->n + fake_text(id, buf + d->n);
    size_t used = fake_sanitize(buf, n, out, len, cap);
    if (used == (size_t)-1) return tl__errorf(TL_ERR_NOMEM, "fake detok: out of memory");
    memcpy(d->pending, buf + used, n - used);
    d->n = (int)(n - used);
    return TL_OK;
}

static inline tl_status fake_detok_flush(void *ctx, void *st, char **out, size_t *len,
                                         size_t *cap)
{
    (void)ctx;
    struct fake_detok *d = st;
    if (!d->n) return TL_OK;
    if (!tl_grow((void **)out, cap, *len + 4, 1))
        return tl__errorf(TL_ERR_NOMEM, "fake detok: out of memory");
    memcpy(*out + *len, "\xEF\xBF\xBD", 3); // U+FFFD for the unfinished character
    *len += 3;
    d->n = 0;
    return TL_OK;
}

// A backend over f (borrowed: the test owns it; destroy is a no-op).
static inline struct tl_engine_backend fake_backend(struct fake_model *f, int32_t n_vocab,
                                                    int32_t n_ctx)
{
    memset(f, 0, sizeof(*f));
    f->n_vocab = n_vocab;
    f->eos_bias = -3.0f;
    struct tl_engine_backend be = {
        .ctx = f,
        .n_vocab = n_vocab,
        .n_ctx = n_ctx,
        .n_layer = 1,
        .n_kv_head = 1,
        .head_dim = 4,
        .prepare = fake_prepare,
        .forward = fake_forward,
        .tokenize = fake_tokenize,
        .is_eog = fake_is_eog,
        .detok_bytes = sizeof(struct fake_detok),
        .detok_init = fake_detok_init,
        .detok_push = fake_detok_push,
        .detok_flush = fake_detok_flush,
        .destroy = NULL,
    };
    return be;
}

// ---- a collector of events for one request -----------------------------------------------

struct collected {
    int32_t tokens[4096];
    int64_t n_tokens;
    float logprobs[4096];
    char text[65536];
    size_t text_len;
    int n_events, n_done;
    struct tl_event done; // copy of the DONE event (text pointer invalid afterwards)
    bool bad_utf8;        // a TOKEN event carried text ending inside a character
    bool event_after_done;
};

static inline void collect_event(void *user, const struct tl_event *ev)
{
    struct collected *c = user;
    if (c->n_done) c->event_after_done = true;
    c->n_events++;
    if (ev->text_len && !tl_utf8_is_valid(ev->text, ev->text_len)) c->bad_utf8 = true;
    if (ev->text[ev->text_len] != '\0') c->bad_utf8 = true; // must be NUL-terminated
    if (c->text_len + ev->text_len < sizeof(c->text)) {
        memcpy(c->text + c->text_len, ev->text, ev->text_len);
        c->text_len += ev->text_len;
        c->text[c->text_len] = '\0';
    }
    if (ev->type == TL_EVENT_TOKEN && c->n_tokens < 4096) {
        c->logprobs[c->n_tokens] = ev->logprob;
        c->tokens[c->n_tokens++] = ev->token;
    }
    if (ev->type == TL_EVENT_DONE) {
        c->n_done++;
        c->done = *ev;
    }
}

// The text a token list should stream as, computed on the whole list at once: every token's
// bytes concatenated, invalid bytes as U+FFFD, a trailing unfinished character as one U+FFFD.
static inline size_t fake_ref_text(const int32_t *ids, int64_t n, char *out, size_t cap)
{
    char *all = malloc((size_t)n * 16 + 1), *res = NULL;
    size_t len = 0, rlen = 0, rcap = 0;
    for (int64_t i = 0; i < n; i++) len += fake_text(ids[i], all + len);
    size_t used = fake_sanitize(all, len, &res, &rlen, &rcap);
    if (used < len) {
        tl_grow((void **)&res, &rcap, rlen + 4, 1);
        memcpy(res + rlen, "\xEF\xBF\xBD", 3);
        rlen += 3;
    }
    size_t k = rlen < cap - 1 ? rlen : cap - 1;
    if (k) memcpy(out, res, k);
    out[k] = '\0';
    free(all);
    free(res);
    return k;
}

// Steps until nothing is pending, checking the block accounting after every step. Returns the
// number of steps.
static inline int64_t fake_run(tl_engine *e)
{
    int64_t n_pending = 0, steps = 0;
    do {
        if (tl_engine_step(e, &n_pending) != TL_OK) fail_msg("step: %s", tl_last_error());
        if (tl__engine_check(e)) fail_msg("after step %lld: %s", (long long)steps, tl_last_error());
        if (++steps > 1000000) fail_msg("engine does not finish");
    } while (n_pending > 0);
    return steps;
}

static inline tl_engine *fake_engine(struct fake_model *f, const struct tl_engine_config *c,
                                     int32_t n_vocab, int32_t n_ctx)
{
    struct tl_engine_backend be = fake_backend(f, n_vocab, n_ctx);
    tl_engine *e = NULL;
    if (tl__engine_create_with(&be, c, &e) != TL_OK) fail_msg("create: %s", tl_last_error());
    return e;
}

// Submits a token-prompt request collecting into c. Returns the id.
static inline uint64_t fake_submit(tl_engine *e, const int32_t *prompt, int64_t n,
                                   const struct tl_sampling *sp, int32_t max_tokens,
                                   struct collected *c)
{
    struct tl_request r;
    tl_request_default(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = n;
    if (sp) r.sampling = *sp;
    r.max_tokens = max_tokens;
    r.on_event = collect_event;
    r.user = c;
    uint64_t id = 0;
    if (tl_engine_submit(e, &r, &id) != TL_OK) fail_msg("submit: %s", tl_last_error());
    return id;
}

#endif
