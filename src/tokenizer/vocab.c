/*
 * Vocabulary loading: GGUF tokenizer.* metadata or a llama2.c tokenizer.bin, into one immutable
 * struct tl_vocab (vocab_impl.h).
 *
 * Design. Every piece is copied into one owned blob (so the vocabulary outlives the GGUF
 * mapping) and indexed by a hash table (core/hashmap.h: piece hash -> id). Byte-level BPE merges
 * are stored as a second hash table keyed by the two token ids, holding the rank and the id of the
 * merged piece; a merge that names a piece missing from the vocabulary is a format error (and
 * so merging never needs strings). The rules that llama.cpp applies while loading are
 * reproduced, because they change tokenization (the special-token ones live in vocab_specials.c):
 *   - defaults by tokenizer model: "llama" (SPM) has BOS=1, EOS=2, UNK=0, add_bos, a space
 *     prefix; "gpt2" (BPE) has no default ids and no BOS unless the pre-tokenizer type or
 *     tokenizer.ggml.add_bos_token says so;
 *   - special ids from tokenizer.ggml.*_token_id (the value 0xFFFFFFFF / -1 means "not set");
 *   - EOT, EOM and FIM tokens found by their text when no key names them, and such tokens (and
 *     every end-of-generation text such as <|im_end|>) forced to the control type;
 *   - the end-of-generation set: EOS, EOT, EOM, FIM pad/repo/sep and the usual end texts;
 *   - the special-token list used to cut special tokens out of the text: control,
 *     user-defined and unknown tokens, longest piece first (ties by id, for determinism);
 *   - Phi-3 vocabularies (general.name) strip whitespace right of special tokens.
 * Where llama.cpp is nondeterministic (it walks an unordered_map to pick the EOT token when
 * several candidates exist), we take the first candidate in its list order.
 *
 * Invariants: 0 <= every stored id < n_tokens; pieces are unique (a duplicate is a format
 * error, as llama.cpp asserts); empty pieces are renamed "[EMPTY_<id>]" as llama.cpp does.
 *
 * Threads and ownership: loading is single-threaded; the result is immutable and shared
 * read-only by any number of threads. tl_vocab_destroy frees everything the vocab owns.
 */
#include "tokenizer/vocab_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1 << 26)  // far above any real vocabulary; bounds allocations
#define MAX_PIECE_BYTES 65536 // one piece; real ones are < 1 KiB

// ---- lookups ------------------------------------------------------------------------------------

int32_t tl__vocab_find(const struct tl_vocab *v, const char *piece, size_t len)
{
    size_t cursor = 0;
    uint64_t id;
    while (tl_hmap_next(&v->piece_index, tl_hash_bytes(piece, len), &cursor, &id))
        if (v->tokens[id].len == len && memcmp(tl__piece(v, (int32_t)id), piece, len) == 0)
            return (int32_t)id;
    return -1;
}

static uint64_t merge_key(int32_t left, int32_t right)
{
    return ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1; // ids < 2^26: never 0
}

bool tl__vocab_merge(const struct tl_vocab *v, int32_t left, int32_t right, int32_t *rank,
                     int32_t *result)
{
    uint64_t val;
    if (left < 0 || right < 0 || !tl_hmap_get(&v->merges, merge_key(left, right), &val))
        return false;
    *rank = (int32_t)(val >> 32);
    *result = (int32_t)(uint32_t)val;
    return true;
}

// ---- GPT-2 byte mapping -------------------------------------------------------------------------

uint32_t tl__bpe_byte_cp(uint8_t b)
{
    // Printable bytes stand for themselves; the 68 others (0x00-0x20, 0x7F-0xA0, 0xAD) take
    // U+0100.. in byte order.
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33 + (b - 0x7Fu);
    if (b == 0xAD) return 256u + 67;
    return b;
}

int tl__bpe_cp_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 33) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp < 256 + 67) return (int)(0x7F + cp - (256 + 33));
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

// ---- building -----------------------------------------------------------------------------------

static struct tl_vocab *vocab_alloc(const char *source)
{
    struct tl_vocab *v = calloc(1, sizeof(*v));
    if (!v) return NULL;
    v->source = tl_strndup(source, strlen(source));
    if (!v->source) {
        free(v);
        return NULL;
    }
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = v->sep = -1;
    for (int b = 0; b < 256; b++)
        v->byte_tok[b] = -1;
    return v;
}

void tl_vocab_destroy(struct tl_vocab *v)
{
    if (!v) return;
    tl__pretok_destroy(v->pretok);
    free(v->source);
    free(v->pre);
    free(v->tokens);
    free(v->blob);
    tl_hmap_free(&v->piece_index);
    tl_hmap_free(&v->merges);
    free(v->eog);
    free(v->specials);
    free(v);
}

// Pieces as the loaders see them: pointer + length (not NUL-terminated).
struct piece_ref {
    const char *p;
    size_t n;
};

// Copies n pieces into the blob (empty ones become "[EMPTY_<id>]") and builds the hash index.
static tl_status build_pieces(struct tl_vocab *v, const struct piece_ref *pieces, int32_t n,
                              const char *key)
{
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (pieces[i].n > MAX_PIECE_BYTES)
            return tl__errorf(TL_ERR_FORMAT, "%s: %s[%d] is %zu bytes long (limit %d)", v->source,
                              key, i, pieces[i].n, MAX_PIECE_BYTES);
        total += (pieces[i].n ? pieces[i].n : 24) + 1;
    }
    if (total > UINT32_MAX)
        return tl__errorf(TL_ERR_FORMAT, "%s: %s holds too many bytes", v->source, key);
    v->tokens = tl_calloc_array((size_t)n, sizeof(*v->tokens));
    v->blob = tl_malloc(total ? total : 1);
    if (!v->tokens || !v->blob || tl_hmap_reserve(&v->piece_index, (size_t)n))
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory for %d tokens", v->source, n);
    v->n_tokens = n;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        char *dst = v->blob + off;
        size_t len = pieces[i].n;
        if (len == 0) {
            TL_LOGW("%s: empty token at index %d", v->source, i);
            len = (size_t)snprintf(dst, 24, "[EMPTY_%d]", i);
        } else {
            memcpy(dst, pieces[i].p, len);
        }
        dst[len] = '\0';
        v->tokens[i].off = (uint32_t)off;
        v->tokens[i].len = (uint32_t)len;
        v->tokens[i].type = TL_TOKEN_NORMAL;
        off += len + 1;
        int32_t other = tl__vocab_find(v, dst, len);
        if (other >= 0)
            return tl__errorf(TL_ERR_FORMAT, "%s: %s: token %d repeats the piece of token %d",
                              v->source, key, i, other);
        tl_status rc = tl_hmap_add(&v->piece_index, tl_hash_bytes(dst, len), (uint64_t)i);
        TL_ASSERT(rc == TL_OK); // room for n was reserved
    }
    v->blob_len = off;
    return TL_OK;
}

static void build_byte_table(struct tl_vocab *v)
{
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id;
        if (v->type == TL_VOCAB_SPM) {
            snprintf(buf, sizeof(buf), "<0x%02X>", b);
            id = tl__vocab_find(v, buf, strlen(buf));
            if (id < 0) {
                buf[0] = (char)b;
                id = tl__vocab_find(v, buf, 1);
            }
        } else {
            uint32_t cp = tl__bpe_byte_cp((uint8_t)b);
            size_t n = 0;
            if (cp < 0x80) {
                buf[n++] = (char)cp;
            } else {
                buf[n++] = (char)(0xC0 | (cp >> 6));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            }
            id = tl__vocab_find(v, buf, n);
        }
        v->byte_tok[b] = id;
    }
}

// ---- GGUF ---------------------------------------------------------------------------------------

static tl_status get_flag(struct tl_vocab *v, const struct tl_gguf *g, const char *key, bool *flag)
{
    if (!tl_gguf_get(g, key)) return TL_OK;
    if (!tl_gguf_get_bool(g, key, flag))
        return tl__errorf(TL_ERR_FORMAT, "%s: %s is not a boolean", v->source, key);
    return TL_OK;
}

// Reads a token-id key. Absent, -1 and 0xFFFFFFFF leave *id unchanged (llama.cpp keeps its
// default then); any other value must be a valid id.
static tl_status get_id(struct tl_vocab *v, const struct tl_gguf *g, const char *key, int32_t *id)
{
    int64_t x;
    if (!tl_gguf_get(g, key)) return TL_OK;
    if (!tl_gguf_get_i64(g, key, &x))
        return tl__errorf(TL_ERR_FORMAT, "%s: %s is not an integer", v->source, key);
    if (x == -1 || x == (int64_t)UINT32_MAX) return TL_OK;
    if (x < 0 || x >= v->n_tokens)
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: %s = %lld is out of range (the vocabulary has %d tokens)", v->source,
                          key, (long long)x, v->n_tokens);
    *id = (int32_t)x;
    return TL_OK;
}

static tl_status load_merges(struct tl_vocab *v, const struct tl_gguf *g)
{
    const char *key = "tokenizer.ggml.merges";
    const struct tl_gguf_value *arr = tl_gguf_get_arr(g, key);
    if (!arr)
        return tl__errorf(TL_ERR_FORMAT, "%s: missing %s (required by tokenizer model gpt2)",
                          v->source, key);
    if (arr->arr.elem_type != TL_GGUF_TYPE_STRING)
        return tl__errorf(TL_ERR_FORMAT, "%s: %s is not an array of strings", v->source, key);
    if (arr->arr.n > (uint64_t)MAX_TOKENS)
        return tl__errorf(TL_ERR_FORMAT, "%s: %s has %llu entries (limit %d)", v->source, key,
                          (unsigned long long)arr->arr.n, MAX_TOKENS);
    int64_t n = (int64_t)arr->arr.n;
    if (tl_hmap_reserve(&v->merges, (size_t)n))
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory for %s", v->source, key);
    v->n_merges = n;
    for (int64_t r = 0; r < n; r++) {
        struct tl_gguf_str s = arr->arr.items[r].str;
        // Split at the first space after the first byte (a piece never starts with a space in a
        // byte-level vocabulary, but it may be one: llama.cpp searches from position 1).
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp)
            return tl__errorf(TL_ERR_FORMAT, "%s: %s[%lld] has no space between its two pieces",
                              v->source, key, (long long)r);
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        int32_t a = tl__vocab_find(v, s.ptr, ll), b = tl__vocab_find(v, sp + 1, rl);
        if (a < 0 || b < 0)
            return tl__errorf(TL_ERR_FORMAT,
                              "%s: %s[%lld] '%.*s' names a piece that is not in "
                              "tokenizer.ggml.tokens",
                              v->source, key, (long long)r, (int)(s.len > 80 ? 80 : s.len), s.ptr);
        uint64_t k = merge_key(a, b);
        if (tl_hmap_get(&v->merges, k, NULL)) continue; // first rank wins, as in llama.cpp
        // The merged piece (usually present; when not, the merged symbol falls back to bytes).
        int32_t res = -1;
        size_t tl = ll + rl;
        if (tl <= MAX_PIECE_BYTES) {
            char tmp[512];
            char *buf = tl <= sizeof(tmp) ? tmp : tl_malloc(tl);
            if (!buf) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", v->source);
            memcpy(buf, s.ptr, ll);
            memcpy(buf + ll, sp + 1, rl);
            res = tl__vocab_find(v, buf, tl);
            if (buf != tmp) free(buf);
        }
        tl_status rc = tl_hmap_put(&v->merges, k, (uint64_t)r << 32 | (uint32_t)res);
        TL_ASSERT(rc == TL_OK); // room for n was reserved
    }
    return TL_OK;
}

static tl_status load_gguf(struct tl_vocab *v, const struct tl_gguf *g)
{
    tl_status rc;
    struct tl_gguf_str model, pre, name = {0, NULL}, arch = {0, NULL};
    if (!tl_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return tl__errorf(TL_ERR_FORMAT, "%s: missing tokenizer.ggml.model", v->source);
    if (tl_gguf_str_eq(model, "llama")) {
        v->type = TL_VOCAB_SPM;
    } else if (tl_gguf_str_eq(model, "gpt2")) {
        v->type = TL_VOCAB_BPE;
    } else if (tl_gguf_str_eq(model, "bert")) {
        v->type = TL_VOCAB_WPM;
    } else {
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, bert)",
                          v->source, (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }
    bool has_pre = tl_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (has_pre) {
        v->pre = tl_strndup(pre.ptr, (size_t)(pre.len > 256 ? 256 : pre.len));
    } else {
        v->pre = tl_strndup("default", 7);
    }
    if (!v->pre) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", v->source);
    tl_gguf_get_str(g, "general.name", &name);
    tl_gguf_get_str(g, "general.architecture", &arch);

    // Tokens, scores, types.
    const char *tkey = "tokenizer.ggml.tokens";
    const struct tl_gguf_value *toks = tl_gguf_get_arr(g, tkey);
    if (!toks) return tl__errorf(TL_ERR_FORMAT, "%s: missing %s", v->source, tkey);
    if (toks->arr.elem_type != TL_GGUF_TYPE_STRING)
        return tl__errorf(TL_ERR_FORMAT, "%s: %s is not an array of strings", v->source, tkey);
    if (toks->arr.n == 0 || toks->arr.n > MAX_TOKENS)
        return tl__errorf(TL_ERR_FORMAT, "%s: %s has %llu entries (expected 1..%d)", v->source,
                          tkey, (unsigned long long)toks->arr.n, MAX_TOKENS);
    int32_t n = (int32_t)toks->arr.n;
    struct piece_ref *refs = tl_malloc_array((size_t)n, sizeof(*refs));
    if (!refs) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", v->source);
    for (int32_t i = 0; i < n; i++) {
        refs[i].p = toks->arr.items[i].str.ptr;
        refs[i].n = (size_t)toks->arr.items[i].str.len;
    }
    rc = build_pieces(v, refs, n, tkey);
    free(refs);
    if (rc) return rc;

    const char *skey = "tokenizer.ggml.scores";
    const struct tl_gguf_value *scores = tl_gguf_get(g, skey);
    if (scores) {
        if (scores->type != TL_GGUF_TYPE_ARRAY || (scores->arr.elem_type != TL_GGUF_TYPE_FLOAT32 &&
                                                   scores->arr.elem_type != TL_GGUF_TYPE_FLOAT64))
            return tl__errorf(TL_ERR_FORMAT, "%s: %s is not an array of floats", v->source, skey);
        if (scores->arr.n != (uint64_t)n)
            return tl__errorf(TL_ERR_FORMAT, "%s: %s has %llu entries, %s has %d", v->source, skey,
                              (unsigned long long)scores->arr.n, tkey, n);
        for (int32_t i = 0; i < n; i++) {
            double d = 0;
            tl_gguf_arr_f64(scores, (uint64_t)i, &d);
            v->tokens[i].score = (float)d;
        }
    }
    const char *ykey = "tokenizer.ggml.token_type";
    const struct tl_gguf_value *types = tl_gguf_get(g, ykey);
    if (types) {
        if (types->type != TL_GGUF_TYPE_ARRAY || types->arr.elem_type == TL_GGUF_TYPE_STRING ||
            types->arr.elem_type == TL_GGUF_TYPE_ARRAY ||
            types->arr.elem_type == TL_GGUF_TYPE_FLOAT32 ||
            types->arr.elem_type == TL_GGUF_TYPE_FLOAT64)
            return tl__errorf(TL_ERR_FORMAT, "%s: %s is not an array of integers", v->source, ykey);
        if (types->arr.n != (uint64_t)n)
            return tl__errorf(TL_ERR_FORMAT, "%s: %s has %llu entries, %s has %d", v->source, ykey,
                              (unsigned long long)types->arr.n, tkey, n);
        for (int32_t i = 0; i < n; i++) {
            int64_t t = 0;
            tl_gguf_arr_i64(types, (uint64_t)i, &t);
            v->tokens[i].type = (t >= TL_TOKEN_NORMAL && t <= TL_TOKEN_BYTE) ? (uint8_t)t : 0;
        }
    }

    // Defaults by model type, then the pre-tokenizer, then explicit keys.
    bool no_bos = false; // chatglm: no BOS by default (our BPE default is none anyway)
    if (v->type == TL_VOCAB_SPM) {
        v->bos = n > 1 ? 1 : -1;
        v->eos = n > 2 ? 2 : -1;
        v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
        v->pre_kind = 0;
    } else if (v->type == TL_VOCAB_WPM) {
        // BERT's ids ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102), as llama.cpp defaults them;
        // the text is framed as [CLS] text [SEP].
        v->pad = n > 0 ? 0 : -1;
        v->unk = n > 100 ? 100 : -1;
        v->bos = n > 101 ? 101 : -1;
        v->sep = n > 102 ? 102 : -1;
        v->add_bos = v->add_sep = true;
        v->pre_kind = 0;
        for (int32_t i = 0; i < n; i++)
            if (v->tokens[i].len > v->max_piece_len) v->max_piece_len = v->tokens[i].len;
    } else {
        bool known =
            tl__pretok_lookup(v->pre, &v->pre_kind, &v->ignore_merges, &v->add_bos, &no_bos);
        if (!known)
            TL_LOGW("%s: unknown pre-tokenizer type '%s' (tokenizer.ggml.pre); using the default "
                    "regexes",
                    v->source, v->pre);
        else if (!has_pre)
            TL_LOGW("%s: missing tokenizer.ggml.pre; using the default pre-tokenizer", v->source);
    }
    if ((rc = get_flag(v, g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix))) return rc;

    struct tl__fim_ids fim = {-1, -1, -1, -1, -1, -1};
    struct {
        const char *key;
        int32_t *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},
        {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},
        {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},
        {"tokenizer.ggml.padding_token_id", &v->pad},
        {"tokenizer.ggml.cls_token_id", &v->bos}, // older BERT files: [CLS] is what starts them
        {"tokenizer.ggml.seperator_token_id", &v->sep}, // sic: llama.cpp's spelling
        {"tokenizer.ggml.fim_pre_token_id", &fim.pre},
        {"tokenizer.ggml.fim_suf_token_id", &fim.suf},
        {"tokenizer.ggml.fim_mid_token_id", &fim.mid},
        {"tokenizer.ggml.fim_pad_token_id", &fim.pad},
        {"tokenizer.ggml.fim_rep_token_id", &fim.rep},
        {"tokenizer.ggml.fim_sep_token_id", &fim.sep},
        {"tokenizer.ggml.prefix_token_id", &fim.pre},
        {"tokenizer.ggml.suffix_token_id", &fim.suf},
        {"tokenizer.ggml.middle_token_id", &fim.mid},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if ((rc = get_id(v, g, ids[i].key, ids[i].id))) return rc;
    // Keys that llama.cpp reads but that do not change tokenization: still validate them.
    int32_t unused = -1;
    if ((rc = get_id(v, g, "tokenizer.ggml.mask_token_id", &unused))) return rc;
    if ((rc = get_flag(v, g, "tokenizer.ggml.add_bos_token", &v->add_bos))) return rc;
    if ((rc = get_flag(v, g, "tokenizer.ggml.add_eos_token", &v->add_eos))) return rc;
    if ((rc = get_flag(v, g, "tokenizer.ggml.add_sep_token", &v->add_sep))) return rc;

    if (v->type == TL_VOCAB_BPE && (rc = load_merges(v, g))) return rc;

    char nbuf[256], abuf[128];
    snprintf(nbuf, sizeof(nbuf), "%.*s", (int)(name.len > 255 ? 255 : name.len),
             name.ptr ? name.ptr : "");
    snprintf(abuf, sizeof(abuf), "%.*s", (int)(arch.len > 127 ? 127 : arch.len),
             arch.ptr ? arch.ptr : "");
    if ((rc = tl__vocab_finish_specials(v, fim, nbuf, abuf))) return rc;
    build_byte_table(v);
    if (v->type == TL_VOCAB_BPE && (rc = tl__pretok_create(v->pre_kind, v->source, &v->pretok)))
        return rc;
    return TL_OK;
}

tl_status tl_vocab_load_gguf(const struct tl_gguf *g, struct tl_vocab **out)
{
    *out = NULL;
    if (!g) return tl__errorf(TL_ERR_INVALID_ARG, "tl_vocab_load_gguf: no file");
    struct tl_vocab *v = vocab_alloc(tl_gguf_path(g) ? tl_gguf_path(g) : "(gguf)");
    if (!v) return tl__errorf(TL_ERR_NOMEM, "out of memory loading a vocabulary");
    tl_status rc = load_gguf(v, g);
    if (rc) {
        tl_vocab_destroy(v);
        return rc;
    }
    *out = v;
    return TL_OK;
}

// ---- llama2.c tokenizer.bin ---------------------------------------------------------------------
//
// Layout: int32 max_token_length, then for each token: float32 score, int32 length, the bytes.
// The token count is not stored: it is whatever the file holds. Pieces use ' ' where
// SentencePiece uses U+2581, and BOS/EOS are stored as "\n<s>\n" / "\n</s>\n"; we convert back so
// that the vocabulary equals the GGUF conversion of the same SentencePiece model.

static tl_status load_llama2c(struct tl_vocab *v, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return tl__errorf(TL_ERR_IO, "%s: cannot open tokenizer file", path);
    tl_status rc = TL_OK;
    char *data = NULL;
    size_t size = 0, cap = 0;
    for (;;) {
        if (!tl_grow((void **)&data, &cap, size + 65536, 1)) {
            rc = tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
            goto out_file;
        }
        size_t got = fread(data + size, 1, cap - size, f);
        size += got;
        if (got == 0) break;
        if (size > ((size_t)1 << 30)) {
            rc = tl__errorf(TL_ERR_FORMAT, "%s: tokenizer file larger than 1 GiB", path);
            goto out_file;
        }
    }
    if (ferror(f)) {
        rc = tl__errorf(TL_ERR_IO, "%s: read error", path);
        goto out_file;
    }
    if (size < 4) {
        rc = tl__errorf(TL_ERR_FORMAT, "%s: truncated header (max_token_length)", path);
        goto out_file;
    }
    int32_t max_len;
    memcpy(&max_len, data, 4);
    if (max_len <= 0 || max_len > MAX_PIECE_BYTES) {
        rc = tl__errorf(TL_ERR_FORMAT, "%s: max_token_length %d is out of range", path, max_len);
        goto out_file;
    }
    // First pass: count and validate.
    int32_t n = 0;
    for (size_t off = 4; off < size; n++) {
        int32_t len;
        if (size - off < 8) {
            rc = tl__errorf(TL_ERR_FORMAT, "%s: token %d: truncated score/length", path, n);
            goto out_file;
        }
        memcpy(&len, data + off + 4, 4);
        if (len < 0 || len > max_len || (size_t)len > size - off - 8) {
            rc = tl__errorf(TL_ERR_FORMAT, "%s: token %d: bad length %d", path, n, len);
            goto out_file;
        }
        if (n >= MAX_TOKENS) {
            rc = tl__errorf(TL_ERR_FORMAT, "%s: more than %d tokens", path, MAX_TOKENS);
            goto out_file;
        }
        off += 8 + (size_t)len;
    }
    if (n < 3) {
        rc = tl__errorf(TL_ERR_FORMAT, "%s: only %d tokens (need <unk>, <s>, </s>)", path, n);
        goto out_file;
    }
    // Second pass: rewrite pieces (' ' -> U+2581, BOS/EOS names) into one scratch buffer.
    size_t scratch_cap = (size - 4) * 3 + 16;
    char *scratch = tl_malloc(scratch_cap);
    struct piece_ref *refs = tl_malloc_array((size_t)n, sizeof(*refs));
    float *scores = tl_malloc_array((size_t)n, sizeof(float));
    if (!scratch || !refs || !scores) {
        rc = tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
        goto out_bufs;
    }
    size_t soff = 0, off = 4;
    for (int32_t i = 0; i < n; i++) {
        int32_t len;
        memcpy(&scores[i], data + off, 4);
        memcpy(&len, data + off + 4, 4);
        const char *p = data + off + 8;
        off += 8 + (size_t)len;
        char *dst = scratch + soff;
        size_t m = 0;
        if (i == 1 && len == 5 && !memcmp(p, "\n<s>\n", 5)) {
            memcpy(dst, "<s>", 3), m = 3;
        } else if (i == 2 && len == 6 && !memcmp(p, "\n</s>\n", 6)) {
            memcpy(dst, "</s>", 4), m = 4;
        } else {
            for (int32_t k = 0; k < len; k++) {
                if (p[k] == ' ') {
                    memcpy(dst + m, "\xe2\x96\x81", 3);
                    m += 3;
                } else {
                    dst[m++] = p[k];
                }
            }
        }
        refs[i].p = dst;
        refs[i].n = m;
        soff += m;
    }
    if ((rc = build_pieces(v, refs, n, "token"))) goto out_bufs;
    for (int32_t i = 0; i < n; i++) {
        const char *p = tl__piece(v, i);
        uint32_t len = v->tokens[i].len;
        v->tokens[i].score = scores[i];
        unsigned hi, lo;
        if (i == 0)
            v->tokens[i].type = TL_TOKEN_UNKNOWN;
        else if (i <= 2)
            v->tokens[i].type = TL_TOKEN_CONTROL;
        else if (len == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' && isxdigit((unsigned char)p[3]) &&
                 isxdigit((unsigned char)p[4]) && sscanf(p + 3, "%1x%1x", &hi, &lo) == 2)
            v->tokens[i].type = TL_TOKEN_BYTE;
    }
    v->type = TL_VOCAB_SPM;
    v->pre = tl_strndup("default", 7);
    if (!v->pre) {
        rc = tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
        goto out_bufs;
    }
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->add_bos = true;
    v->add_space_prefix = true;
    struct tl__fim_ids fim = {-1, -1, -1, -1, -1, -1};
    if ((rc = tl__vocab_finish_specials(v, fim, "", ""))) goto out_bufs;
    build_byte_table(v);
out_bufs:
    free(scratch);
    free(refs);
    free(scores);
out_file:
    free(data);
    fclose(f);
    return rc;
}

tl_status tl_vocab_load_llama2c(const char *path, struct tl_vocab **out)
{
    *out = NULL;
    if (!path) return tl__errorf(TL_ERR_INVALID_ARG, "tl_vocab_load_llama2c: no path");
    struct tl_vocab *v = vocab_alloc(path);
    if (!v) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
    tl_status rc = load_llama2c(v, path);
    if (rc) {
        tl_vocab_destroy(v);
        return rc;
    }
    *out = v;
    return TL_OK;
}

// ---- accessors ----------------------------------------------------------------------------------

enum tl_vocab_type tl_vocab_type(const struct tl_vocab *v)
{
    return v->type;
}

const char *tl_vocab_pre(const struct tl_vocab *v)
{
    return v->pre ? v->pre : "default";
}

int32_t tl_vocab_n_tokens(const struct tl_vocab *v)
{
    return v->n_tokens;
}

int32_t tl_vocab_bos(const struct tl_vocab *v)
{
    return v->bos;
}

int32_t tl_vocab_eos(const struct tl_vocab *v)
{
    return v->eos;
}

int32_t tl_vocab_eot(const struct tl_vocab *v)
{
    return v->eot;
}

bool tl_vocab_add_bos(const struct tl_vocab *v)
{
    return v->add_bos && v->bos >= 0;
}

bool tl_vocab_add_eos(const struct tl_vocab *v)
{
    return v->add_eos && v->eos >= 0;
}

bool tl_vocab_is_eog(const struct tl_vocab *v, int32_t id)
{
    if (id < 0) return false;
    return bsearch(&id, v->eog, (size_t)v->n_eog, sizeof(int32_t), tl__cmp_i32) != NULL;
}

enum tl_token_attr tl_vocab_attr(const struct tl_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens) return 0;
    return (enum tl_token_attr)v->tokens[id].type;
}

const char *tl_vocab_piece(const struct tl_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = v->tokens[id].len;
    return tl__piece(v, id);
}

int32_t tl_vocab_find(const struct tl_vocab *v, const char *piece, size_t len)
{
    if (!piece) return -1;
    return tl__vocab_find(v, piece, len);
}
