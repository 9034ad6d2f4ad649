/*
 * tl_tokenize: cuts special tokens out of the text, then encodes each remaining fragment with
 * the vocabulary's encoder (spm.c, bpe.c or wpm.c) and adds BOS/EOS (WordPiece: [CLS]/[SEP]).
 * Mirrors llama.cpp's llama_vocab::tokenize and tokenizer_st_partition.
 *
 * Special tokens. The candidates are the vocabulary's control, user-defined and unknown tokens,
 * longest piece first. Each candidate in turn is searched for in every text fragment left by the
 * previous ones, left to right; every occurrence becomes a token fragment. With parse_special
 * false, control and unknown tokens are skipped, but user-defined tokens are still cut out (as
 * llama.cpp and Hugging Face tokenizers do: e.g. DeepSeek-Coder's user-defined "ü" piece must
 * stay one token). Tokens with the RSTRIP/LSTRIP flag swallow the whitespace beside them.
 * A cheap prefilter (which byte pairs occur in the text) skips candidates that cannot occur, so
 * vocabularies with thousands of special tokens cost little.
 *
 * SPM fragments get a leading space when the vocabulary adds a space prefix and the fragment is
 * the first one or follows a special token; spaces are then escaped as U+2581.
 *
 * Limits: texts above TL__MAX_TEXT (32 MiB) get TL_ERR_TOO_LONG: scratch memory is tens of bytes
 * per input byte, and no context window comes near that size.
 *
 * Threads: tl_tokenize only reads the vocabulary; all scratch memory is per call.
 */
#include "tokenizer/vocab_impl.h"

#include "core/alloc.h"
#include "core/error.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define TL__MAX_TEXT ((size_t)32 << 20)

// ---- special-token partition --------------------------------------------------------------------

struct frag {
    int32_t tok;     // token id, or -1 for raw text
    size_t off, len; // raw text range
};

struct frags {
    struct frag *v; // owned
    size_t n, cap;
};

static bool frags_push(struct frags *f, int32_t tok, size_t off, size_t len)
{
    if (!tl_grow((void **)&f->v, &f->cap, f->n + 1, sizeof(struct frag))) return false;
    f->v[f->n++] = (struct frag){tok, off, len};
    return true;
}

// Cuts every occurrence of special token `id` out of the raw fragments of `in` into `out`.
// Returns false on allocation failure.
static bool cut_token(const struct tl_vocab *v, int32_t id, const char *text,
                      const struct frags *in, struct frags *out)
{
    const char *piece = tl__piece(v, id);
    size_t plen = v->tokens[id].len;
    uint8_t flags = v->tokens[id].flags;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct frag f = in->v[i];
        if (f.tok >= 0 || f.len < plen) {
            if (!frags_push(out, f.tok, f.off, f.len)) return false;
            continue;
        }
        size_t off = f.off, len = f.len;
        while (len > 0) {
            const char *m = memmem(text + off, len, piece, plen);
            if (!m) break;
            size_t at = (size_t)(m - text);
            size_t left = at - off;
            if (flags & TL__TOK_LSTRIP)
                while (left > 0 && isspace((unsigned char)text[off + left - 1]))
                    left--;
            if (left > 0 && !frags_push(out, -1, off, left)) return false;
            if (!frags_push(out, id, 0, 0)) return false;
            size_t roff = at + plen, rlen = off + len - roff;
            if (flags & TL__TOK_RSTRIP)
                while (rlen > 0 && isspace((unsigned char)text[roff]))
                    roff++, rlen--;
            off = roff;
            len = rlen;
        }
        if (len > 0 && !frags_push(out, -1, off, len)) return false;
    }
    return true;
}

static tl_status partition(const struct tl_vocab *v, const char *text, size_t len,
                           bool parse_special, struct frags *res)
{
    struct frags a = {0}, b = {0};
    tl_status rc = TL_OK;
    uint64_t *pairs = NULL; // bitmap of byte pairs present in the text
    uint8_t bytes[32] = {0};
    if (len == 0) goto out_free_scratch;
    if (!frags_push(&a, -1, 0, len)) goto out_nomem;
    pairs = calloc(65536 / 64, sizeof(uint64_t));
    if (!pairs) goto out_nomem;
    for (size_t i = 0; i < len; i++) {
        unsigned c = (unsigned char)text[i];
        bytes[c >> 3] |= (uint8_t)(1u << (c & 7));
        if (i + 1 < len) {
            unsigned p = c << 8 | (unsigned char)text[i + 1];
            pairs[p >> 6] |= 1ull << (p & 63);
        }
    }
    for (int32_t k = 0; k < v->n_specials; k++) {
        int32_t id = v->specials[k];
        uint8_t t = v->tokens[id].type;
        if (!parse_special && (t == TL_TOKEN_CONTROL || t == TL_TOKEN_UNKNOWN)) continue;
        const unsigned char *p = (const unsigned char *)tl__piece(v, id);
        size_t pl = v->tokens[id].len;
        if (pl > len) continue;
        if (!(bytes[p[0] >> 3] & (1u << (p[0] & 7)))) continue;
        bool maybe = true;
        for (size_t j = 0; j + 1 < pl && maybe; j += 2) {
            unsigned q = (unsigned)p[j] << 8 | p[j + 1];
            maybe = (pairs[q >> 6] >> (q & 63)) & 1;
        }
        if (!maybe) continue;
        if (!cut_token(v, id, text, &a, &b)) goto out_nomem;
        struct frags t2 = a;
        a = b;
        b = t2;
    }
    goto out_free_scratch;
out_nomem:
    rc = tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
out_free_scratch:
    free(pairs);
    free(b.v);
    if (rc) {
        free(a.v);
        a = (struct frags){0};
    }
    *res = a;
    return rc;
}

// ---- tl_tokenize --------------------------------------------------------------------------------

// SPM fragment: optional leading space, then every ' ' escaped as U+2581.
static tl_status spm_fragment(const struct tl_vocab *v, const char *s, size_t n, bool prefix,
                              char **buf, size_t *cap, struct tl__ids *out)
{
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    size_t need = n + 2 * spaces + (prefix ? 3 : 0) + 1;
    if (!tl_grow((void **)buf, cap, need, 1))
        return tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
    char *d = *buf;
    size_t o = 0;
    if (prefix) {
        memcpy(d, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(d + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            d[o++] = s[i];
        }
    }
    return tl__spm_encode(v, d, o, out);
}

tl_status tl_tokenize(const struct tl_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t **out, int64_t *n_out)
{
    if (!out || !n_out) return tl__errorf(TL_ERR_INVALID_ARG, "tl_tokenize: no output");
    *out = NULL;
    *n_out = 0;
    if (!v || (!text && len)) return tl__errorf(TL_ERR_INVALID_ARG, "tl_tokenize: no text");
    if (len > TL__MAX_TEXT)
        return tl__errorf(TL_ERR_TOO_LONG, "tokenize: text of %zu bytes exceeds the %zu-byte limit",
                          len, TL__MAX_TEXT);
    struct frags fr;
    tl_status rc = partition(v, text, len, parse_special, &fr);
    if (rc) return rc;
    struct tl__ids ids = {0};
    char *buf = NULL;
    size_t cap = 0;
    // Always return a non-NULL array, even for zero tokens.
    if (!tl__ids_push(&ids, 0)) goto out_nomem;
    ids.n = 0;
    if (add_special && v->add_bos && v->bos >= 0 && !tl__ids_push(&ids, v->bos)) goto out_nomem;
    bool prev_special = true;
    for (size_t i = 0; i < fr.n && !rc; i++) {
        const struct frag *f = &fr.v[i];
        if (f->tok >= 0) {
            if (!tl__ids_push(&ids, f->tok)) goto out_nomem;
            prev_special = true;
            continue;
        }
        if (v->type == TL_VOCAB_SPM) {
            rc = spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, &buf,
                              &cap, &ids);
        } else if (v->type == TL_VOCAB_WPM) {
            rc = tl__wpm_encode(v, text + f->off, f->len, &ids);
        } else {
            rc = tl__bpe_encode(v, text + f->off, f->len, &ids);
        }
        prev_special = false;
    }
    if (rc) goto out_free_scratch;
    if (add_special && v->add_eos && v->eos >= 0 && !tl__ids_push(&ids, v->eos)) goto out_nomem;
    if (add_special && v->add_sep && v->sep >= 0 && !tl__ids_push(&ids, v->sep)) goto out_nomem;
    *out = ids.ids;
    *n_out = ids.n;
    ids.ids = NULL;
    goto out_free_scratch;
out_nomem:
    rc = tl__errorf(TL_ERR_NOMEM, "tokenize: out of memory");
out_free_scratch:
    free(ids.ids);
    free(buf);
    free(fr.v);
    return rc;
}
