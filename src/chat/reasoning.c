/*
 * Reasoning splitter (see reasoning.h).
 *
 * Design: a byte-at-a-time matcher against the one tag that can matter next: the open tag while
 * nothing but whitespace has been read outside (a reply only opens its reasoning at its start),
 * the close tag while inside, none after that. Bytes that match a prefix of that tag wait in
 * held[]; on a mismatch the longest suffix of held[] that is still a prefix of the tag stays and
 * the rest goes out. Output is gathered in a small local buffer and handed to the sink in
 * pieces, flushed whenever the destination (reasoning or content) changes, so per-byte work is
 * a compare and a store.
 *
 * Invariant: the concatenated output per kind depends only on the concatenated input, never on
 * how it was split (tests/unit/test_toolcall.c feeds every split).
 *
 * Whitespace right after the close tag is dropped (models write "</think>\n\n"), as DeepSeek's
 * API returns content without it. Owns nothing; one thread per splitter.
 */
#include "chat/reasoning.h"

#include <string.h>

struct tl_reasoning_tags tl_reasoning_detect(const char *tmpl)
{
    struct tl_reasoning_tags t = {NULL, NULL};
    if (!tmpl) return t;
    if (strstr(tmpl, "<think>") || strstr(tmpl, "</think>")) {
        t.open = "<think>";
        t.close = "</think>";
    } else if (strstr(tmpl, "<|START_THINKING|>")) {
        t.open = "<|START_THINKING|>";
        t.close = "<|END_THINKING|>";
    }
    return t;
}

bool tl_reasoning_prompt_opens(struct tl_reasoning_tags tags, const char *prompt, size_t len)
{
    if (!tags.open) return false;
    while (len && strchr(" \t\r\n", prompt[len - 1]))
        len--;
    size_t n = strlen(tags.open);
    return len >= n && !memcmp(prompt + len - n, tags.open, n);
}

void tl_reasoning_init(struct tl_reasoning_split *s, struct tl_reasoning_tags tags,
                       bool start_inside, tl_reasoning_sink sink, void *user)
{
    memset(s, 0, sizeof(*s));
    if (!tags.open || !tags.close || strlen(tags.open) > TL_REASONING_TAG_MAX ||
        strlen(tags.close) > TL_REASONING_TAG_MAX)
        tags.open = tags.close = NULL;
    s->tags = tags;
    s->inside = tags.open && start_inside;
    s->sink = sink;
    s->user = user;
}

// ---- output gathering -------------------------------------------------------------------------

struct out_buf {
    struct tl_reasoning_split *s;
    bool is_reasoning;
    size_t n;
    char b[256];
};

static void out_flush(struct out_buf *o)
{
    if (o->n) o->s->sink(o->s->user, o->is_reasoning, o->b, o->n);
    o->n = 0;
}

static void out_put(struct out_buf *o, bool is_reasoning, const char *p, size_t n)
{
    if (o->is_reasoning != is_reasoning) {
        out_flush(o);
        o->is_reasoning = is_reasoning;
    }
    while (n) {
        if (o->n == sizeof(o->b)) out_flush(o);
        size_t k = sizeof(o->b) - o->n < n ? sizeof(o->b) - o->n : n;
        memcpy(o->b + o->n, p, k);
        o->n += k;
        p += k;
        n -= k;
    }
}

// ---- matching ---------------------------------------------------------------------------------

static const char *current_tag(const struct tl_reasoning_split *s)
{
    if (!s->tags.open) return NULL;
    if (s->inside) return s->tags.close;
    return s->seen_text ? NULL : s->tags.open;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// Sends out the bytes of held[] that can no longer start the tag.
static void release_held(struct tl_reasoning_split *s, struct out_buf *o, const char *tag)
{
    size_t k = 1;
    while (k < s->n_held && strncmp(s->held + k, tag, s->n_held - k) != 0)
        k++;
    if (k > s->n_held) k = s->n_held;
    for (size_t i = 0; i < k; i++)
        if (!is_space(s->held[i])) s->seen_text = true;
    out_put(o, s->inside, s->held, k);
    memmove(s->held, s->held + k, s->n_held - k);
    s->n_held -= k;
}

void tl_reasoning_feed(struct tl_reasoning_split *s, const char *text, size_t len)
{
    // Once no tag can matter any more (no syntax, or after the block), the text passes whole.
    if (!current_tag(s) && !s->n_held && !s->after_close) {
        if (len) s->sink(s->user, s->inside, text, len);
        return;
    }
    struct out_buf o; // not zero-initialized: b[] is written before it is read
    o.s = s;
    o.is_reasoning = s->inside;
    o.n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (s->after_close) {
            if (is_space(c)) continue;
            s->after_close = false;
        }
        const char *tag = current_tag(s);
        if (!tag) {
            if (!is_space(c)) s->seen_text = true;
            out_put(&o, s->inside, &c, 1);
            continue;
        }
        s->held[s->n_held++] = c;
        while (s->n_held && strncmp(s->held, tag, s->n_held) != 0) {
            release_held(s, &o, tag);
            tag = current_tag(s); // the open tag stops counting once text was seen
            if (!tag) {
                out_put(&o, s->inside, s->held, s->n_held);
                s->n_held = 0;
            }
        }
        if (tag && s->n_held == strlen(tag)) {
            s->n_held = 0;
            if (s->inside) {
                s->inside = false;
                s->seen_text = true;
                s->after_close = true;
            } else {
                s->inside = true;
            }
        }
    }
    out_flush(&o);
}

void tl_reasoning_finish(struct tl_reasoning_split *s)
{
    struct out_buf o;
    o.s = s;
    o.is_reasoning = s->inside;
    o.n = 0;
    out_put(&o, s->inside, s->held, s->n_held);
    s->n_held = 0;
    out_flush(&o);
}
