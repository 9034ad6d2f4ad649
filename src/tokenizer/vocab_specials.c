/*
 * Special-token derivation: what llama.cpp decides about special tokens once the pieces are
 * loaded, applied to a struct tl_vocab by tl__vocab_finish_specials (vocab.c calls it last, for
 * GGUF and llama2.c vocabularies alike).
 *
 * Design. The rules are llama.cpp's, reproduced because they change tokenization (see vocab.c's
 * opening comment for the list): EOT/EOM/FIM ids found by their text when no key names them, such
 * tokens forced to the control type, the sorted end-of-generation set, the special-token list
 * (longest piece first, ties by id, so the order does not depend on the sort algorithm) and the
 * Phi-3 right-strip attributes. Where llama.cpp picks among candidates nondeterministically, the
 * first candidate in list order wins.
 *
 * Threads and ownership: runs once during loading, single-threaded; it writes only into `v`
 * (whose eog and specials arrays it allocates and the vocab then owns).
 */
#include "tokenizer/vocab_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t find_cstr(const struct tl_vocab *v, const char *s)
{
    return tl__vocab_find(v, s, strlen(s));
}

// First token whose piece is one of the NULL-terminated candidates (in list order), or -1.
static int32_t find_any(const struct tl_vocab *v, const char *const *cands)
{
    for (int i = 0; cands[i]; i++) {
        int32_t id = find_cstr(v, cands[i]);
        if (id >= 0) return id;
    }
    return -1;
}

static void force_control(struct tl_vocab *v, int32_t id)
{
    if (id >= 0 && v->tokens[id].type != TL_TOKEN_CONTROL) {
        TL_LOGD("%s: token %d '%s' looks like a control token; treating it as one", v->source, id,
                tl__piece(v, id));
        v->tokens[id].type = TL_TOKEN_CONTROL;
    }
}

// Order of the special list: longer pieces first (llama.cpp's order), ties by id so that the
// result does not depend on the sort algorithm.
static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct tl_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->tokens[x].len, ly = v->tokens[y].len;
    if (lx != ly) return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

tl_status tl__vocab_finish_specials(struct tl_vocab *v, struct tl__fim_ids fim,
                                    const char *model_name, const char *arch)
{
    static const char *const eot_texts[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<|end_of_text|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81"
                                            "sentence\xef\xbd\x9c>",
                                            "<end_of_utterance>",
                                            NULL};
    static const char *const eom_texts[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre_texts[] = {"<|fim_prefix|>",
                                                "<fim-prefix>",
                                                "<fim_prefix>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "begin\xef\xbd\x9c>",
                                                "<PRE>",
                                                "\xe2\x96\x81<PRE>",
                                                "<|code_prefix|>",
                                                NULL};
    static const char *const fim_suf_texts[] = {"<|fim_suffix|>",
                                                "<fim-suffix>",
                                                "<fim_suffix>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "hole\xef\xbd\x9c>",
                                                "<SUF>",
                                                "\xe2\x96\x81<SUF>",
                                                "<|code_suffix|>",
                                                NULL};
    static const char *const fim_mid_texts[] = {"<|fim_middle|>",
                                                "<fim-middle>",
                                                "<fim_middle>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "end\xef\xbd\x9c>",
                                                "<MID>",
                                                "\xe2\x96\x81<MID>",
                                                "<|code_middle|>",
                                                NULL};
    static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                                NULL};
    static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                "<REPO>",       "<reponame>",    NULL};
    static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
    static const char *const eog_texts[] = {
        "<|eot_id|>",      "<|im_end|>",         "<|end|>",    "<|return|>", "<|call|>",
        "<end_of_turn>",   "<|endoftext|>",      "<|eom_id|>", "<EOT>",      "_<EOT>",
        "<|end_of_text|>", "<end_of_utterance>", NULL};

    // Text-based detection only when the file did not name the token; detected ones are control.
    if (v->eot < 0 && (v->eot = find_any(v, eot_texts)) >= 0) force_control(v, v->eot);
    if (v->eom < 0 && (v->eom = find_any(v, eom_texts)) >= 0) force_control(v, v->eom);
    struct {
        int32_t *id;
        const char *const *texts;
    } fims[] = {{&fim.pre, fim_pre_texts}, {&fim.suf, fim_suf_texts}, {&fim.mid, fim_mid_texts},
                {&fim.pad, fim_pad_texts}, {&fim.rep, fim_rep_texts}, {&fim.sep, fim_sep_texts}};
    for (size_t i = 0; i < sizeof(fims) / sizeof(fims[0]); i++)
        if (*fims[i].id < 0 && (*fims[i].id = find_any(v, fims[i].texts)) >= 0)
            force_control(v, *fims[i].id);

    // End-of-generation set (at most a handful of ids; kept sorted for bsearch).
    int32_t eog[32];
    int n_eog = 0;
#define ADD_EOG(x)                                                                                 \
    do {                                                                                           \
        int32_t id_ = (x);                                                                         \
        bool seen_ = false;                                                                        \
        for (int k_ = 0; k_ < n_eog; k_++)                                                         \
            seen_ |= eog[k_] == id_;                                                               \
        if (id_ >= 0 && !seen_ && n_eog < 32) eog[n_eog++] = id_;                                  \
    } while (0)
    ADD_EOG(fim.pad);
    ADD_EOG(fim.rep);
    ADD_EOG(fim.sep);
    for (int i = 0; eog_texts[i]; i++) {
        int32_t id = find_cstr(v, eog_texts[i]);
        if (id >= 0) {
            ADD_EOG(id);
            force_control(v, id);
        }
    }
    // gpt-oss: these always render (llama.cpp makes them user-defined).
    static const char *const render_texts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                               "<|constrain|>", NULL};
    for (int i = 0; render_texts[i]; i++) {
        int32_t id = find_cstr(v, render_texts[i]);
        if (id >= 0) v->tokens[id].type = TL_TOKEN_USER_DEFINED;
    }
    ADD_EOG(v->eos);
    ADD_EOG(v->eot);
    ADD_EOG(v->eom);
#undef ADD_EOG
    // o200k_harmony: with <|return|> and <|call|> present, <|end|> ends a message, not the turn.
    int32_t id_ret = find_cstr(v, "<|return|>"), id_call = find_cstr(v, "<|call|>");
    int32_t id_end = find_cstr(v, "<|end|>");
    if (id_ret >= 0 && id_call >= 0 && id_end >= 0) {
        for (int i = 0; i < n_eog; i++)
            if (eog[i] == id_end) eog[i] = eog[--n_eog];
        v->tokens[id_end].type = TL_TOKEN_USER_DEFINED;
        if (v->eot == id_end) v->eot = -1;
    }
    qsort(eog, (size_t)n_eog, sizeof(eog[0]), tl__cmp_i32);
    v->eog = tl_malloc_array((size_t)(n_eog ? n_eog : 1), sizeof(int32_t));
    if (!v->eog) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", v->source);
    memcpy(v->eog, eog, (size_t)n_eog * sizeof(int32_t));
    v->n_eog = n_eog;

    // Special tokens that are cut out of the text before encoding.
    int32_t n_sp = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint8_t t = v->tokens[i].type;
        n_sp += t == TL_TOKEN_CONTROL || t == TL_TOKEN_USER_DEFINED || t == TL_TOKEN_UNKNOWN;
    }
    v->specials = tl_malloc_array((size_t)(n_sp ? n_sp : 1), sizeof(int32_t));
    if (!v->specials) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", v->source);
    n_sp = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint8_t t = v->tokens[i].type;
        if (t == TL_TOKEN_CONTROL || t == TL_TOKEN_USER_DEFINED || t == TL_TOKEN_UNKNOWN)
            v->specials[n_sp++] = i;
    }
    qsort_r(v->specials, (size_t)n_sp, sizeof(int32_t), cmp_special, v);
    v->n_specials = n_sp;

    // Per-model strip attributes (llama.cpp sets these by name: the GGUF has no field for them).
    char lname[256];
    size_t ln = strlen(model_name);
    if (ln >= sizeof(lname)) ln = sizeof(lname) - 1;
    for (size_t i = 0; i < ln; i++)
        lname[i] = (char)tolower((unsigned char)model_name[i]);
    lname[ln] = '\0';
    const char *pre = v->pre ? v->pre : "";
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
        int32_t id = find_cstr(v, "<mask>");
        if (id >= 0) v->tokens[id].flags |= TL__TOK_LSTRIP;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (int32_t i = 0; i < n_sp; i++)
            v->tokens[v->specials[i]].flags |= TL__TOK_RSTRIP;
        int32_t id = find_cstr(v, "</s>");
        if (id >= 0) v->tokens[id].flags |= TL__TOK_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
        for (int i = 0; keep[i]; i++)
            if ((id = find_cstr(v, keep[i])) >= 0) v->tokens[id].flags &= ~TL__TOK_RSTRIP;
    }
    return TL_OK;
}
