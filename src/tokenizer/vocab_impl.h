/*
 * Private layout of struct tl_vocab, shared by the tokenizer's .c files (vocab.c loads it,
 * tokenize.c / spm.c / bpe.c / pretok.c encode with it, detok.c decodes with it). Nothing outside
 * src/tokenizer includes this header.
 *
 * A vocabulary is immutable once loaded; every function here that takes a const vocab is safe
 * to call from many threads at once. Per-call scratch memory is allocated by the caller.
 */
#ifndef TL_TOKENIZER_VOCAB_IMPL_H
#define TL_TOKENIZER_VOCAB_IMPL_H

#include "core/alloc.h"
#include "core/hashmap.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Extra per-token flags (llama.cpp's LSTRIP/RSTRIP attributes, set by model name): when such a
// special token is cut out of the text, whitespace to its left/right is dropped with it.
#define TL__TOK_LSTRIP 0x01
#define TL__TOK_RSTRIP 0x02

struct tl__token {
    uint32_t off;  // piece bytes at vocab->blob + off (NUL-terminated there)
    uint32_t len;  // piece length in bytes
    float score;   // SPM merge priority (higher first); 0 when the file has no scores
    uint8_t type;  // enum tl_token_attr, or 0 for an undefined/unknown type value
    uint8_t flags; // TL__TOK_*
};

struct tl__pretok; // compiled pre-tokenizer regexes (pretok.c)

struct tl_vocab {
    enum tl_vocab_type type;
    char *source; // owned: file name for messages
    char *pre;    // owned: tokenizer.ggml.pre as given ("default" if none)
    int pre_kind; // pretok.c's index of the pre-tokenizer definition

    int32_t n_tokens;
    struct tl__token *tokens; // owned, (n_tokens)
    char *blob;               // owned: every piece, NUL-terminated, back to back
    size_t blob_len;

    struct tl_hmap piece_index; // tl_hash_bytes(piece) -> id

    // BPE merge rules: ((uint64_t)left << 32 | right) + 1 -> (uint64_t)rank << 32 | result,
    // rank = position in tokenizer.ggml.merges (lower first), result = id of the concatenated
    // piece or -1 (as uint32_t) when the vocabulary lacks it. Empty for SPM.
    struct tl_hmap merges;
    int64_t n_merges;

    int32_t bos, eos, eot, eom, unk, pad; // -1 when absent
    int32_t sep;                          // WordPiece: [SEP], appended after the text; -1
    bool add_bos, add_eos, add_sep;
    uint32_t max_piece_len; // WordPiece: the longest piece in bytes (bounds the greedy match)
    bool add_space_prefix;  // SPM: prepend " " to the text (and after special tokens)
    bool ignore_merges;     // BPE: a pre-token that is a whole token is not merged

    int32_t *eog; // owned: sorted end-of-generation ids
    int32_t n_eog;

    int32_t *specials; // owned: control/user-defined/unknown ids, longest piece first
    int32_t n_specials;

    int32_t byte_tok[256];     // SPM: id of <0xXX> (or the raw byte), -1 if none
                               // BPE: id of the piece of the byte's GPT-2 character, -1
    struct tl__pretok *pretok; // owned (BPE only)
};

// Id of an exact piece, or -1.
int32_t tl__vocab_find(const struct tl_vocab *v, const char *piece, size_t len);

// qsort/bsearch order of int32_t ids.
static inline int tl__cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

// Ids read from the FIM keys (-1 when absent), handed to tl__vocab_finish_specials.
struct tl__fim_ids {
    int32_t pre, suf, mid, pad, rep, sep;
};

// Fixed ids from keys plus the text-based detection, EOG set, special list and attributes
// (vocab_specials.c). `model_name` is general.name, `arch` general.architecture ("" if unknown).
tl_status tl__vocab_finish_specials(struct tl_vocab *v, struct tl__fim_ids fim,
                                    const char *model_name, const char *arch);

// Merge rule for a pair of ids, or NULL.
bool tl__vocab_merge(const struct tl_vocab *v, int32_t left, int32_t right, int32_t *rank,
                     int32_t *result);

static inline const char *tl__piece(const struct tl_vocab *v, int32_t id)
{
    return v->blob + v->tokens[id].off;
}

// GPT-2's byte <-> unicode mapping: the code point standing for byte b (printable Latin-1 bytes
// stand for themselves, the other 68 for U+0100..U+0143 in byte order), and the inverse (-1 if
// the code point stands for no byte).
uint32_t tl__bpe_byte_cp(uint8_t b);
int tl__bpe_cp_byte(uint32_t cp);

// ---- growable token output -------------------------------------------------------------------

struct tl__ids {
    int32_t *ids; // owned
    int64_t n, cap;
};

// Appends id, growing the array; false when out of memory (o unchanged). Inline here, a leaf,
// so that the encoders (bpe.c, spm.c) and tokenize.c do not call into each other for it.
static inline bool tl__ids_push(struct tl__ids *o, int32_t id)
{
    size_t cap = (size_t)o->cap;
    if (!tl_grow((void **)&o->ids, &cap, (size_t)o->n + 1, sizeof(int32_t))) return false;
    o->cap = (int64_t)cap;
    o->ids[o->n++] = id;
    return true;
}

// ---- encoders (one text fragment without special tokens) --------------------------------------

// SPM: text is already space-escaped (" " -> U+2581) and prefixed as needed.
tl_status tl__spm_encode(const struct tl_vocab *v, const char *text, size_t len,
                         struct tl__ids *out);

// Byte-level BPE: runs the pre-tokenizer, byte-maps each pre-token and merges it by rank.
tl_status tl__bpe_encode(const struct tl_vocab *v, const char *text, size_t len,
                         struct tl__ids *out);

// WordPiece (wpm.c): normalizes, splits into words and cuts each into the longest pieces.
tl_status tl__wpm_encode(const struct tl_vocab *v, const char *text, size_t len,
                         struct tl__ids *out);

// ---- pre-tokenizer (pretok.c) ------------------------------------------------------------------

// Looks up tokenizer.ggml.pre. OUT: *kind; returns false for an unknown name (kind is then the
// default). Sets the vocabulary flags that llama.cpp ties to the pre-tokenizer type.
bool tl__pretok_lookup(const char *name, int *kind, bool *ignore_merges, bool *add_bos,
                       bool *no_bos);
// The canonical name of a kind ("default", "llama3", ...).
const char *tl__pretok_kind_name(int kind);
// Compiles the regexes of `kind`. OUT: *out. Errors name `source`.
tl_status tl__pretok_create(int kind, const char *source, struct tl__pretok **out);
void tl__pretok_destroy(struct tl__pretok *p);

// Splits text into pre-tokens. Each pre-token is returned as the byte range of a string built
// in *buf (llama.cpp re-encodes the text from code points, so invalid UTF-8 becomes U+FFFD):
// pre-token i is (*buf)[starts[i] .. starts[i+1]). OUT: *buf (malloc'd), *starts (malloc'd,
// n+1 entries), *n.
tl_status tl__pretok_split(const struct tl__pretok *p, const char *text, size_t len, char **buf,
                           int64_t **starts, int64_t *n);

#endif
