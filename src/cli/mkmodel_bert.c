/*
 * The BERT side of `tokenloom mkmodel --arch bert`: a WordPiece vocabulary written into the file
 * when no donor is given, and the bert.* keys llama.cpp's converter writes for an encoder
 * (attention.layer_norm_epsilon, attention.causal = false, pooling_type).
 *
 * The vocabulary has BERT's layout of special tokens ([PAD] 0, [unused1..99], [UNK] 100, [CLS]
 * 101, [SEP] 102, [MASK] 103, as bert-base-uncased and its descendants bge / e5 / MiniLM have
 * them), then pieces in llama.cpp's converted spelling: a word start carries U+2581, a
 * continuation is bare (BERT's "##"). Pure function of nothing: the same file every time.
 */
#include "cli/mkmodel_arch.h"

#include "core/alloc.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK "\xe2\x96\x81" // U+2581

static const char *const words[] = {
    "the",  "hello", "world", "quick", "brown",  "fox",   "jumps",    "over",
    "lazy", "dog",   "token", "loom",  "is",     "it",    "and",      "of",
    "to",   "in",    "un",    "embed", "search", "query", "document",
};
static const char *const conts[] = {"ing", "ed", "er", "ly", "aff", "able", "ding", "ize"};
static const char chars[] = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'\"-:;()";

enum { N_SPECIAL = 104 };

int64_t tl__mk_bert_vocab_size(void)
{
    return N_SPECIAL + (int64_t)(sizeof(words) / sizeof(words[0])) +
           (int64_t)(sizeof(conts) / sizeof(conts[0])) + 2 * (int64_t)(sizeof(chars) - 1);
}

tl_status tl__mk_bert_vocab(struct tl_gguf_writer *w)
{
    int64_t n = tl__mk_bert_vocab_size();
    char(*buf)[32] = tl_calloc_array((size_t)n, sizeof(*buf));
    const char **toks = tl_calloc_array((size_t)n, sizeof(*toks));
    int32_t *types = tl_calloc_array((size_t)n, sizeof(*types));
    tl_status st = TL_OK;
    if (!buf || !toks || !types) {
        st = tl__errorf(TL_ERR_NOMEM, "out of memory");
        goto out;
    }
    int64_t k = 0;
    snprintf(buf[k++], 32, "[PAD]");
    for (int i = 1; i < 100; i++)
        snprintf(buf[k++], 32, "[unused%d]", i);
    static const char *const special[] = {"[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < 4; i++)
        snprintf(buf[k++], 32, "%s", special[i]);
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        snprintf(buf[k++], 32, MARK "%s", words[i]);
    for (size_t i = 0; i < sizeof(conts) / sizeof(conts[0]); i++)
        snprintf(buf[k++], 32, "%s", conts[i]);
    for (size_t i = 0; i + 1 < sizeof(chars); i++) {
        snprintf(buf[k++], 32, MARK "%c", chars[i]);
        snprintf(buf[k++], 32, "%c", chars[i]);
    }
    for (int64_t i = 0; i < n; i++) {
        toks[i] = buf[i];
        types[i] = i < N_SPECIAL ? 3 : 1; // control, normal (llama.cpp's token types)
    }
    types[100] = 2; // unknown
    if ((st = tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert")) ||
        (st = tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n)) ||
        (st = tl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TL_GGUF_TYPE_INT32, types,
                                     (uint64_t)n)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 100)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 101)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 102)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 103)))
        goto out;
out:
    free(buf);
    free(toks);
    free(types);
    return st;
}

tl_status tl__mk_bert_keys(struct tl_gguf_writer *w, float eps, uint32_t pooling)
{
    tl_status st = tl_gguf_writer_set_f32(w, "bert.attention.layer_norm_epsilon", eps);
    if (!st) st = tl_gguf_writer_set_bool(w, "bert.attention.causal", false);
    if (!st) st = tl_gguf_writer_set_u32(w, "bert.pooling_type", pooling);
    return st;
}
