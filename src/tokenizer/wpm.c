/*
 * WordPiece (tokenizer.ggml.model "bert"), as llama.cpp runs it on the vocabularies its
 * converter writes: word-initial pieces carry a U+2581 prefix ("▁hello") and continuation
 * pieces are bare ("llo"), where the original BERT vocabulary had "hello" and "##llo".
 *
 * Preprocessing, one code point at a time: replace it by the first code point of its canonical
 * decomposition (so precomposed accents fall away); whitespace ends the current word; NUL,
 * U+FFFD, invalid UTF-8 and control characters are dropped; the rest is lowercased; punctuation,
 * ASCII symbols and CJK ideographs become words of their own; anything else extends the word.
 *
 * Each word, prefixed with U+2581, is cut greedily: at each position the longest piece of the
 * vocabulary that matches (at most the vocabulary's longest piece) is taken. A word that cannot
 * be cut to the end becomes one [UNK] token, dropping the pieces already matched.
 *
 * Threads: reads the vocabulary only; scratch memory is per call.
 */
#include "tokenizer/unicode_data.h"
#include "tokenizer/vocab_impl.h"

#include "core/error.h"
#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" // U+2581, the word-start prefix

// The CJK ideograph blocks BERT's basic tokenizer splits on (the ranges of Hugging Face's
// _is_chinese_char, with the extension-C/D range llama.cpp and HF's Rust code use).
static bool is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Cuts one word (w[0..n), starting with SPACE_MARK) into pieces, or one [UNK].
static tl_status cut_word(const struct tl_vocab *v, const char *w, size_t n, struct tl__ids *out)
{
    int64_t start = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = i + v->max_piece_len < n ? i + v->max_piece_len : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tl__vocab_find(v, w + i, j - i)) >= 0) break;
        if (id < 0) {
            out->n = start;
            break;
        }
        if (!tl__ids_push(out, id)) return tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
        i = j;
    }
    if (out->n > start) return TL_OK;
    if (v->unk < 0)
        return tl__errorf(TL_ERR_INVALID_ARG,
                          "tokenize: a word has no WordPiece and the vocabulary has no [UNK]");
    if (!tl__ids_push(out, v->unk)) return tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
    return TL_OK;
}

struct word {
    char *buf; // owned: SPACE_MARK + the word's bytes
    size_t len, cap;
};

static tl_status flush(const struct tl_vocab *v, struct word *w, struct tl__ids *out)
{
    if (w->len <= 3) return TL_OK;
    tl_status rc = cut_word(v, w->buf, w->len, out);
    w->len = 3;
    return rc;
}

static bool append(struct word *w, uint32_t cp)
{
    if (!tl_grow((void **)&w->buf, &w->cap, w->len + 4, 1)) return false;
    w->len += (size_t)tl_utf8_encode(cp, w->buf + w->len);
    return true;
}

tl_status tl__wpm_encode(const struct tl_vocab *v, const char *text, size_t len,
                         struct tl__ids *out)
{
    struct word w = {0};
    tl_status rc = TL_OK;
    if (!tl_grow((void **)&w.buf, &w.cap, 64, 1)) goto out_nomem;
    memcpy(w.buf, SPACE_MARK, 3);
    w.len = 3;
    for (size_t i = 0; i < len && !rc;) {
        uint32_t cp;
        int k = tl_utf8_decode(text + i, len - i, &cp);
        if (k <= 0) { // an invalid byte reads as U+FFFD, which is dropped
            i++;
            continue;
        }
        i += (size_t)k;
        cp = tl__ucd_nfd_first_of(cp);
        enum tl__ucd_class c = tl__ucd_class(cp);
        if (c == TL__UCD_SPACE) {
            rc = flush(v, &w, out);
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || c == TL__UCD_CONTROL) continue;
        uint32_t lo = tl__ucd_lower_first_of(cp);
        if (c == TL__UCD_PUNCT || (cp < 0x7F && c == TL__UCD_SYMBOL) || is_cjk(cp)) {
            if ((rc = flush(v, &w, out))) break;
            if (!append(&w, lo)) goto out_nomem;
            rc = flush(v, &w, out);
        } else if (!append(&w, lo)) {
            goto out_nomem;
        }
    }
    if (!rc) rc = flush(v, &w, out);
    free(w.buf);
    return rc;
out_nomem:
    free(w.buf);
    return tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
}
