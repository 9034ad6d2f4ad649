/*
 * The streaming tool-call parser (see toolcall.h; the syntaxes are in toolcall_syntax.c).
 *
 * Pipeline: reply text -> reasoning splitter (reasoning.c; reasoning goes straight out) ->
 * content buffer -> trigger scan. The scan looks for the earliest trigger marker of the syntax
 * in the buffer. Text before it is content; from the marker on, the region is held until its
 * end is known, then parsed: valid calls whose names were offered are reported (each with a
 * fresh id), anything else goes out unchanged as content. Without a marker, the buffer goes out
 * as content except its tail that could still begin a marker, and trailing whitespace (so the
 * content before a call does not end in the newline that separated them).
 *
 * Invariant: the events' concatenation per kind depends only on the whole reply, not on how it
 * was cut into pieces: every decision waits until the text that decides it is there, and at the
 * end everything held is decided as if the reply were whole. tests/unit/test_toolcall.c checks
 * every split point.
 *
 * Ownership: the parser owns its buffer and the reported calls (valid until destroy). One
 * thread; the callback runs inside feed/finish.
 */
#include "chat/toolcall_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

struct tl_toolcall_parser {
    struct tl_toolcall_config cfg;
    const struct tl__tc_syntax *sx;
    struct tl_reasoning_split rs;
    tl_toolcall_cb cb;
    void *user; // borrowed
    char *buf;  // owned: content not yet decided
    size_t len, cap;
    size_t inject_left;                  // bytes of the syntax prefix still at the front of buf
    const struct tl__tc_trigger *region; // the trigger buf starts with, or NULL
    bool content_seen;                   // non-space content went out
    struct tl_tool_call *calls;          // owned, n_calls entries
    int n_calls, cap_calls;
    uint64_t rng; // splitmix64 state (core/hash.h) the call ids are drawn from
    bool failed;  // out of memory: later calls do nothing
};

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// ---- output -----------------------------------------------------------------------------------

static void emit_text(tl_toolcall_parser *p, enum tl_toolcall_event_kind kind, const char *s,
                      size_t n)
{
    if (n == 0) return;
    struct tl_toolcall_event ev = {.kind = kind, .text = s, .len = n};
    p->cb(p->user, &ev);
}

// Content from the front of buf (skipping the injected prefix, which the prompt wrote).
static void emit_content(tl_toolcall_parser *p, size_t n)
{
    size_t skip = p->inject_left < n ? p->inject_left : n;
    p->inject_left -= skip;
    for (size_t i = skip; i < n; i++)
        if (!is_space(p->buf[i])) p->content_seen = true;
    emit_text(p, TL_TOOLCALL_CONTENT, p->buf + skip, n - skip);
}

static void consume(tl_toolcall_parser *p, size_t n)
{
    if (p->inject_left) p->inject_left = p->inject_left > n ? p->inject_left - n : 0;
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

// n letters and digits: a call id as OpenAI's ("call_" + 24) and Mistral's (9) look.
static void random_id(tl_toolcall_parser *p, char *out, int n)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (int i = 0; i < n; i++)
        out[i] = alnum[(tl_splitmix64(&p->rng) >> 32) % 62];
    out[n] = 0;
}

static bool name_offered(const tl_toolcall_parser *p, const char *name)
{
    if (p->cfg.n_tool_names == 0) return true;
    for (int i = 0; i < p->cfg.n_tool_names; i++)
        if (!strcmp(p->cfg.tool_names[i], name)) return true;
    return false;
}

// Turns the parsed calls into reported ones. false: a name was not offered (-> content);
// *nomem on allocation failure.
static bool report_calls(tl_toolcall_parser *p, struct tl__tc_list *l, bool *nomem)
{
    if (!p->cfg.parse_calls && l->n > 0) return false; // calls not asked for: text
    for (int i = 0; i < l->n; i++)
        if (!name_offered(p, l->v[i].name)) return false;
    if (p->n_calls + l->n > p->cap_calls) {
        int cap = p->cap_calls * 2 > p->n_calls + l->n ? p->cap_calls * 2 : p->n_calls + l->n;
        struct tl_tool_call *v = tl_realloc_array(p->calls, (size_t)cap, sizeof(*v));
        if (!v) goto nomem;
        p->calls = v;
        p->cap_calls = cap;
    }
    int first = p->n_calls;
    for (int i = 0; i < l->n; i++) {
        struct tl_tool_call *c = &p->calls[p->n_calls];
        char id[40];
        if (l->v[i].id) {
            snprintf(id, sizeof(id), "%s", l->v[i].id);
        } else if (p->sx->short_ids) {
            random_id(p, id, 9);
        } else {
            memcpy(id, "call_", 5);
            random_id(p, id + 5, 24);
        }
        c->arguments = json_dumps(l->v[i].args, JSON_COMPACT);
        c->id = strdup(id);
        c->name = l->v[i].name;
        l->v[i].name = NULL;
        if (!c->arguments || !c->id) {
            free(c->arguments);
            free(c->id);
            free(c->name);
            goto nomem;
        }
        p->n_calls++;
    }
    for (int i = first; i < p->n_calls; i++) {
        struct tl_toolcall_event ev = {.kind = TL_TOOLCALL_CALL, .index = i, .call = &p->calls[i]};
        p->cb(p->user, &ev);
    }
    return true;
nomem:
    *nomem = true;
    return false;
}

// ---- the scan ---------------------------------------------------------------------------------

// Length of the region at the front of buf, or 0 when more text is needed.
static size_t region_end(tl_toolcall_parser *p, bool eos)
{
    const struct tl__tc_trigger *t = p->region;
    size_t m = strlen(t->marker);
    switch (t->end) {
    case TL__TC_END_SELF:
        return m;
    case TL__TC_END_EOS:
        return eos ? p->len : 0;
    case TL__TC_END_MARKER: {
        const char *e = memmem(p->buf + m, p->len - m, t->end_marker, strlen(t->end_marker));
        if (e) return (size_t)(e - p->buf) + strlen(t->end_marker);
        return eos ? p->len : 0;
    }
    case TL__TC_END_JSON: {
        size_t off = t->at_start ? 0 : m, e;
        int r = tl__tc_json_end(p->buf + off, p->len - off, &e);
        if (r == 1) return off + e;
        if (r < 0) return off < p->len ? off + 1 : p->len; // not JSON: the marker is content
        return eos ? p->len : 0;
    }
    case TL__TC_END_CUSTOM:
        return t->end_fn(t, p->buf, p->len, eos);
    }
    return p->len;
}

// Earliest trigger in buf: its offset, or SIZE_MAX. *tail = bytes at the end of buf that could
// begin a marker (meaningful when none was found).
static size_t find_trigger(tl_toolcall_parser *p, const struct tl__tc_trigger **which, size_t *tail)
{
    size_t best = SIZE_MAX;
    *tail = 0;
    for (int k = 0; k < p->sx->n_triggers; k++) {
        const struct tl__tc_trigger *t = &p->sx->triggers[k];
        size_t m = strlen(t->marker);
        if (t->at_start) {
            if (p->content_seen) continue;
            size_t j = 0;
            while (j < p->len && is_space(p->buf[j]))
                j++;
            if (j < p->len && p->buf[j] == t->marker[0] && j < best) {
                best = j;
                *which = t;
            }
            continue;
        }
        const char *hit = memmem(p->buf, p->len, t->marker, m);
        if (hit && (size_t)(hit - p->buf) < best) {
            best = (size_t)(hit - p->buf);
            *which = t;
        }
        for (size_t n = m - 1; n > 0; n--) {
            if (n <= p->len && n > *tail && !memcmp(p->buf + p->len - n, t->marker, n)) {
                *tail = n;
                break;
            }
        }
    }
    return best;
}

static tl_status scan(tl_toolcall_parser *p, bool eos)
{
    for (;;) {
        if (p->region) {
            size_t n = region_end(p, eos);
            if (n == 0) return TL_OK;
            struct tl__tc_list l = {0};
            bool nomem = false;
            bool ok = p->region->parse(p->region, p->buf, n, &l) && report_calls(p, &l, &nomem);
            nomem = nomem || l.nomem;
            tl__tc_list_free(&l);
            if (nomem) return TL_ERR_NOMEM;
            if (!ok) emit_content(p, n);
            consume(p, n);
            p->region = NULL;
            continue;
        }
        if (p->len == 0) return TL_OK;
        const struct tl__tc_trigger *t = NULL;
        size_t tail;
        bool scan_markup = p->cfg.parse_calls || p->sx->prefix;
        size_t at = scan_markup ? find_trigger(p, &t, &tail) : SIZE_MAX;
        if (!scan_markup) tail = 0;
        if (at != SIZE_MAX) {
            size_t n = at;
            while (n && is_space(p->buf[n - 1]))
                n--;
            emit_content(p, n);
            consume(p, at);
            p->region = t;
            continue;
        }
        size_t n = p->len - tail;
        if (!eos) {
            while (n && is_space(p->buf[n - 1]))
                n--;
        } else if (p->n_calls > 0 || !p->content_seen) {
            // trailing whitespace after calls, or a reply of only whitespace, is not content
            size_t k = n;
            while (k && is_space(p->buf[k - 1]))
                k--;
            if (k == 0 || p->n_calls > 0) n = k;
        }
        emit_content(p, n);
        if (eos) n = p->len;
        consume(p, n);
        return TL_OK;
    }
}

// ---- reasoning feeds the scan -----------------------------------------------------------------

static void on_split(void *user, bool is_reasoning, const char *text, size_t len)
{
    tl_toolcall_parser *p = user;
    if (p->failed) return;
    if (is_reasoning) {
        emit_text(p, TL_TOOLCALL_REASONING, text, len);
        return;
    }
    if (p->len + len > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + len)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) {
            p->failed = true;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, text, len);
    p->len += len;
}

static bool buf_prepend_prefix(tl_toolcall_parser *p)
{
    const char *pre = p->sx->prefix;
    if (!pre) return true;
    on_split(p, false, pre, strlen(pre));
    p->inject_left = strlen(pre);
    return !p->failed;
}

tl_toolcall_parser *tl_toolcall_parser_create(const struct tl_toolcall_config *cfg,
                                              tl_toolcall_cb cb, void *user)
{
    tl_toolcall_parser *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->cfg = *cfg;
    p->sx = tl__tc_syntax_get(cfg->syntax);
    p->cb = cb;
    p->user = user;
    p->rng = cfg->id_seed; // splitmix64 takes any seed, 0 included
    tl_reasoning_init(&p->rs, cfg->reasoning, cfg->reasoning_start_inside, on_split, p);
    if (!buf_prepend_prefix(p)) {
        tl_toolcall_parser_destroy(p);
        return NULL;
    }
    return p;
}

void tl_toolcall_parser_destroy(tl_toolcall_parser *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].id);
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p->buf);
    free(p);
}

tl_status tl_toolcall_parser_feed(tl_toolcall_parser *p, const char *text, size_t len)
{
    if (p->failed) return tl__errorf(TL_ERR_NOMEM, "tool-call parser: out of memory");
    tl_reasoning_feed(&p->rs, text, len);
    tl_status rc = p->failed ? TL_ERR_NOMEM : scan(p, false);
    if (rc) p->failed = true;
    return rc ? tl__errorf(rc, "tool-call parser: out of memory") : TL_OK;
}

tl_status tl_toolcall_parser_finish(tl_toolcall_parser *p)
{
    if (p->failed) return tl__errorf(TL_ERR_NOMEM, "tool-call parser: out of memory");
    tl_reasoning_finish(&p->rs);
    tl_status rc = p->failed ? TL_ERR_NOMEM : scan(p, true);
    if (rc) p->failed = true;
    return rc ? tl__errorf(rc, "tool-call parser: out of memory") : TL_OK;
}

int tl_toolcall_parser_n_calls(const tl_toolcall_parser *p)
{
    return p->n_calls;
}
