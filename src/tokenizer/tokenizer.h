/*
 * Vocabularies and tokenizers, read from a GGUF's tokenizer.* metadata (or a llama2.c
 * tokenizer.bin): SentencePiece-style BPE by scores with byte fallback ("llama"), and byte-level
 * BPE by merge ranks with a pre-tokenizer regex chosen by tokenizer.ggml.pre ("gpt2"), run with
 * PCRE2 in UTF-8/UCP mode, and WordPiece ("bert", the embedding models' tokenizer). Output
 * matches llama.cpp's tokenizer token for token.
 *
 * A tl_vocab is immutable after loading and may be used from any thread at once. A tl_detok is
 * per-sequence state for incremental decoding and belongs to one thread.
 */
#ifndef TL_TOKENIZER_H
#define TL_TOKENIZER_H

#include <tokenloom.h>

#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tl_vocab_type {
    TL_VOCAB_SPM = 1, // tokenizer.ggml.model = "llama"
    TL_VOCAB_BPE = 2, // tokenizer.ggml.model = "gpt2"
    TL_VOCAB_WPM = 3, // tokenizer.ggml.model = "bert" (WordPiece)
};

// Token attributes (tokenizer.ggml.token_type): normal, unknown, control, user-defined, unused,
// byte.
enum tl_token_attr {
    TL_TOKEN_NORMAL = 1,
    TL_TOKEN_UNKNOWN = 2,
    TL_TOKEN_CONTROL = 3,
    TL_TOKEN_USER_DEFINED = 4,
    TL_TOKEN_UNUSED = 5,
    TL_TOKEN_BYTE = 6,
};

struct tl_vocab;

// Loads the vocabulary from a GGUF's metadata. OUT: *out. Errors name the file and the key.
tl_status tl_vocab_load_gguf(const struct tl_gguf *g, struct tl_vocab **out) TL_WARN_UNUSED;
// Loads a llama2.c tokenizer file (tok512.bin, tokenizer.bin): an SPM vocabulary with scores,
// BOS=1, EOS=2, byte tokens <0x00>..<0xFF> at ids 3..258.
tl_status tl_vocab_load_llama2c(const char *path, struct tl_vocab **out) TL_WARN_UNUSED;
void tl_vocab_destroy(struct tl_vocab *v); // NULL is a no-op

enum tl_vocab_type tl_vocab_type(const struct tl_vocab *v);
const char *tl_vocab_pre(const struct tl_vocab *v); // pre-tokenizer name ("default" if none)
int32_t tl_vocab_n_tokens(const struct tl_vocab *v);
int32_t tl_vocab_bos(const struct tl_vocab *v);  // -1 if none
int32_t tl_vocab_eos(const struct tl_vocab *v);  // -1 if none
int32_t tl_vocab_eot(const struct tl_vocab *v);  // end-of-turn (<|eot_id|>, <|im_end|>...), -1
bool tl_vocab_add_bos(const struct tl_vocab *v); // tokenizer.ggml.add_bos_token (or default)
bool tl_vocab_add_eos(const struct tl_vocab *v);
// True for tokens that end generation by default (EOS, EOT, and other end-of-generation ids).
bool tl_vocab_is_eog(const struct tl_vocab *v, int32_t id);
enum tl_token_attr tl_vocab_attr(const struct tl_vocab *v, int32_t id);
// The raw piece of a token as stored in the vocabulary ("▁the", "<0x0A>", "Ġthe"); NULL when
// id is out of range.
const char *tl_vocab_piece(const struct tl_vocab *v, int32_t id, size_t *len);
// Id of an exact piece, or -1.
int32_t tl_vocab_find(const struct tl_vocab *v, const char *piece, size_t len);

// Tokenizes text[0..len) (any bytes; invalid UTF-8 is tokenized as bytes where the vocabulary
// allows, never rejected here). add_special: add BOS/EOS as the vocabulary's flags say.
// parse_special: recognise control/user-defined token texts such as "<|im_start|>" in the text.
// OUT: *out (malloc'd, caller frees) and *n_out.
tl_status tl_tokenize(const struct tl_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t **out, int64_t *n_out) TL_WARN_UNUSED;

// The text a token stands for, with the vocabulary's space and byte handling undone ("▁the" ->
// " the", "<0x0A>" -> "\n", "Ġthe" -> " the"). Control tokens give "" unless render_special.
// Writes up to cap bytes and returns the full length (like snprintf, no NUL added).
size_t tl_token_to_text(const struct tl_vocab *v, int32_t id, bool render_special, char *buf,
                        size_t cap);

// Incremental decoder for one sequence: push tokens, get back text that always ends on a UTF-8
// character boundary; bytes of an incomplete character are held until completed. A streamed
// continuation keeps its leading space; when decoding a text from its start, set
// strip_leading_space to drop the space an SPM vocabulary's add_space_prefix put there (as
// llama.cpp's detokenizer does; tl_detokenize does this).
struct tl_detok {
    const struct tl_vocab *vocab; // borrowed
    bool render_special;
    bool strip_leading_space; // false after init; cleared once the first piece is out
    char pending[8];          // bytes of an incomplete UTF-8 character
    int n_pending;
};
void tl_detok_init(struct tl_detok *d, const struct tl_vocab *v, bool render_special);
// Appends the complete text produced by token id to out (a growable buffer: *out, *len, *cap);
// TL_ERR_NOMEM (error set) on allocation failure.
tl_status tl_detok_push(struct tl_detok *d, int32_t id, char **out, size_t *len,
                        size_t *cap) TL_WARN_UNUSED;
// Flushes held bytes at the end of a sequence (invalid leftovers become U+FFFD).
tl_status tl_detok_flush(struct tl_detok *d, char **out, size_t *len, size_t *cap) TL_WARN_UNUSED;

// Detokenizes a whole token list into a NUL-terminated malloc'd string (NULL on failure).
char *tl_detokenize(const struct tl_vocab *v, const int32_t *ids, int64_t n, bool render_special);

#endif
