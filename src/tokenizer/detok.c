/*
 * Detokenization: the text of one token (llama.cpp's token_to_piece) and an incremental decoder
 * that only ever emits whole, valid UTF-8 characters.
 *
 * Token text by type (as llama.cpp):
 *   control, unknown: the piece when render_special, else nothing;
 *   user-defined: the piece, always;
 *   normal: SPM: the piece with U+2581 turned back into ' '; BPE: each character of the piece
 *     mapped back to the byte it stands for (GPT-2 byte mapping); a character that stands for no
 *     byte yields llama.cpp's "[UNK_BYTE_0x..]" marker;
 *   byte (SPM "<0xXX>"): that byte;
 *   unused and undefined types: nothing.
 * No clean-up of spaces before punctuation is done (llama.cpp's clean_spaces option, which
 * would break round trips): the text is exactly what the tokens stand for.
 *
 * Incremental decoding. Byte tokens split characters (an emoji is 4 byte tokens), so bytes of a
 * character that is not complete yet wait in the tl_detok until later tokens complete it. Bytes
 * that can never become valid UTF-8 are replaced by U+FFFD at once (one per maximal invalid
 * subpart, the Unicode-recommended practice), and an incomplete character still held at flush
 * time becomes one U+FFFD. The output is therefore always valid UTF-8.
 *
 * Leading space: SPM vocabularies add a space before the text when tokenizing; to undo it,
 * strip_leading_space drops one ' ' at the start of the first piece that produces text (a BOS
 * that renders as nothing does not count, unlike llama.cpp, which would then keep the space).
 *
 * Threads: tl_token_to_text and tl_detokenize only read the vocabulary. A tl_detok belongs to
 * one sequence and one thread at a time.
 */
#include "tokenizer/vocab_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Bounded writer that still counts what did not fit (snprintf-like).
struct writer {
    char *buf;
    size_t cap, len;
};

static void put(struct writer *w, const char *s, size_t n)
{
    if (w->len < w->cap) {
        size_t k = w->cap - w->len < n ? w->cap - w->len : n;
        memcpy(w->buf + w->len, s, k);
    }
    w->len += n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// BPE: piece characters back to bytes.
static void bpe_decode(const char *p, size_t n, struct writer *w)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l = tl_utf8_decode(p + i, n - i, &cp);
        int b = l > 0 ? tl__bpe_cp_byte(cp) : -1;
        if (b >= 0) {
            char c = (char)b;
            put(w, &c, 1);
            i += (size_t)l;
            continue;
        }
        // llama.cpp writes "[UNK_BYTE_0x" + the character's bytes in hex + the whole piece + "]".
        size_t cl = l > 0 ? (size_t)l : 1;
        char hex[16];
        put(w, "[UNK_BYTE_0x", 12);
        for (size_t k = 0; k < cl; k++) {
            snprintf(hex, sizeof(hex), "%02x", (unsigned char)p[i + k]);
            put(w, hex, 2);
        }
        put(w, p, n);
        put(w, "]", 1);
        i += cl;
    }
}

size_t tl_token_to_text(const struct tl_vocab *v, int32_t id, bool render_special, char *buf,
                        size_t cap)
{
    struct writer w = {buf, buf ? cap : 0, 0};
    if (!v || id < 0 || id >= v->n_tokens) return 0;
    const struct tl__token *t = &v->tokens[id];
    const char *p = tl__piece(v, id);
    switch (t->type) {
    case TL_TOKEN_CONTROL:
    case TL_TOKEN_UNKNOWN:
        if (render_special) put(&w, p, t->len);
        break;
    case TL_TOKEN_USER_DEFINED:
        put(&w, p, t->len);
        break;
    case TL_TOKEN_NORMAL:
        if (v->type == TL_VOCAB_BPE) {
            bpe_decode(p, t->len, &w);
            break;
        }
        for (uint32_t i = 0; i < t->len;) {
            if (i + 3 <= t->len && !memcmp(p + i, "\xe2\x96\x81", 3)) {
                put(&w, " ", 1);
                i += 3;
            } else {
                put(&w, p + i, 1);
                i++;
            }
        }
        break;
    case TL_TOKEN_BYTE:
        if (v->type == TL_VOCAB_SPM) {
            int hi = t->len >= 5 ? hexval(p[3]) : -1, lo = t->len >= 5 ? hexval(p[4]) : -1;
            char c = (char)(hi >= 0 && lo >= 0 ? hi * 16 + lo : 0);
            put(&w, &c, 1);
        }
        break;
    default:
        break;
    }
    return w.len;
}

// ---- incremental decoding -----------------------------------------------------------------------

void tl_detok_init(struct tl_detok *d, const struct tl_vocab *v, bool render_special)
{
    memset(d, 0, sizeof(*d));
    d->vocab = v;
    d->render_special = render_special;
}

static bool out_put(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (!tl_grow((void **)out, cap, *len + n + 1, 1)) return false;
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = '\0';
    return true;
}

// Is byte c acceptable as continuation byte number k (1-based) after lead byte `lead`?
static bool cont_ok(unsigned char lead, int k, unsigned char c)
{
    if (k == 1) {
        if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
        if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
        if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
        if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
    }
    return c >= 0x80 && c <= 0xBF;
}

static const char REPLACEMENT[3] = {'\xef', '\xbf', '\xbd'};

// Emits the complete characters of b[0..n), replacing invalid parts, and keeps an incomplete
// tail in d->pending.
static bool feed(struct tl_detok *d, const char *b, size_t n, char **out, size_t *len, size_t *cap)
{
    size_t i = 0, run = 0; // run: start of a stretch of valid bytes not yet copied
    while (i < n) {
        unsigned char c = (unsigned char)b[i];
        int sl = tl_utf8_seq_len(c);
        if (sl == 1) {
            i++;
            continue;
        }
        int k = 1;
        while (sl > 1 && k < sl && i + (size_t)k < n && cont_ok(c, k, (unsigned char)b[i + k]))
            k++;
        if (sl > 1 && k == sl) { // complete and valid
            i += (size_t)sl;
            continue;
        }
        if (!out_put(out, len, cap, b + run, i - run)) return false;
        if (sl > 1 && i + (size_t)k == n) { // a valid start that later bytes may complete
            memcpy(d->pending, b + i, n - i);
            d->n_pending = (int)(n - i);
            return true;
        }
        // Invalid: one U+FFFD for the lead plus the continuation bytes that fitted it.
        if (!out_put(out, len, cap, REPLACEMENT, 3)) return false;
        i += sl > 1 ? (size_t)k : 1;
        run = i;
    }
    d->n_pending = 0;
    return out_put(out, len, cap, b + run, n - run);
}

tl_status tl_detok_push(struct tl_detok *d, int32_t id, char **out, size_t *len, size_t *cap)
{
    char small[256];
    size_t n = tl_token_to_text(d->vocab, id, d->render_special, small + 8, sizeof(small) - 8);
    char *buf = small;
    if (n > sizeof(small) - 8) {
        buf = tl_malloc(n + 8);
        if (!buf) return tl__errorf(TL_ERR_NOMEM, "detokenize: out of memory");
        tl_token_to_text(d->vocab, id, d->render_special, buf + 8, n);
    }
    char *piece = buf + 8;
    if (d->strip_leading_space && n > 0) {
        if (piece[0] == ' ') piece++, n--;
        d->strip_leading_space = false;
    }
    // Held bytes go right before the piece (the 8 spare bytes in front are for them).
    piece -= d->n_pending;
    memcpy(piece, d->pending, (size_t)d->n_pending);
    n += (size_t)d->n_pending;
    d->n_pending = 0;
    bool ok = feed(d, piece, n, out, len, cap);
    if (buf != small) free(buf);
    return ok ? TL_OK : tl__errorf(TL_ERR_NOMEM, "detokenize: out of memory");
}

tl_status tl_detok_flush(struct tl_detok *d, char **out, size_t *len, size_t *cap)
{
    bool ok = true;
    if (d->n_pending > 0)
        ok = out_put(out, len, cap, REPLACEMENT, 3);
    else
        ok = tl_grow((void **)out, cap, *len + 1, 1) && ((*out)[*len] = '\0', true);
    d->n_pending = 0;
    return ok ? TL_OK : tl__errorf(TL_ERR_NOMEM, "detokenize: out of memory");
}

char *tl_detokenize(const struct tl_vocab *v, const int32_t *ids, int64_t n, bool render_special)
{
    if (!v || (!ids && n > 0)) return NULL;
    struct tl_detok d;
    tl_detok_init(&d, v, render_special);
    d.strip_leading_space = v->add_space_prefix;
    char *out = NULL;
    size_t len = 0, cap = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tl_detok_push(&d, ids[i], &out, &len, &cap)) {
            free(out);
            return NULL;
        }
    }
    if (tl_detok_flush(&d, &out, &len, &cap)) {
        free(out);
        return NULL;
    }
    return out;
}
