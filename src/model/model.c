/*
 * Model lifecycle and the public tl_model_* API: picks the loader by file content (GGUF magic or
 * a llama2.c header), validates the result (hyperparameters against each other and every weight
 * shape against them), and exposes info, tokenization and detokenization. The model is
 * immutable once loaded; every function here that takes a const model is thread-safe.
 */
#include "model/loader.h"

#include "model/arch.h"
#include "model/encode.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

bool tl__model_own(struct tl_model *m, void *buf)
{
    void **grown = tl_realloc_array(m->owned, (size_t)m->n_owned + 1, sizeof(*grown));
    if (!grown) {
        free(buf);
        return false;
    }
    m->owned = grown;
    m->owned[m->n_owned++] = buf;
    return true;
}

// Lets the kernels repack every matrix the forward pass multiplies with (tl_weight_pack:
// Q8_0 becomes a 16-row interleaved copy, ~2x faster batched matmul). The copies live in one
// arena owned by the model, so that they get huge pages: one matrix is mostly under the 4 MiB
// from which tl_aligned_alloc_large asks for them, and with 4 KiB pages a step streaming ~100 MB
// of weights pays a TLB miss every 4 KiB (and the hardware prefetchers stop at each page).
// tok_embd stays as in the file: its rows are read for embedding lookups (a tied `output` gets
// its own packed copy).
int64_t tl_layer_n_weights(const struct tl_layer *L)
{
    return L->n_expert > 0 ? 5 + 3 * (int64_t)L->n_expert : 7;
}

struct tl_weight *tl_layer_weight(struct tl_layer *L, int64_t i)
{
    struct tl_weight *attn[4] = {&L->wq, &L->wk, &L->wv, &L->wo};
    if (i < 4) return attn[i];
    if (L->n_expert == 0) {
        struct tl_weight *ffn[3] = {&L->w_gate, &L->w_up, &L->w_down};
        return ffn[i - 4];
    }
    if (i == 4) return &L->router;
    int64_t e = (i - 5) / 3;
    struct tl_weight *ex[3] = {&L->exp_gate[e], &L->exp_up[e], &L->exp_down[e]};
    return ex[(i - 5) % 3];
}

// Every matrix the forward pass multiplies with: output, then each layer's in order (an
// encoder's: its layers' six, tl__bert_weight).
static int64_t n_packed(const struct tl_model *m)
{
    if (m->bert) return TL_BERT_LAYER_WEIGHTS * (int64_t)m->hp.n_layer;
    int64_t n = 1;
    for (int il = 0; il < m->hp.n_layer; il++)
        n += tl_layer_n_weights(&m->layers[il]);
    return n;
}

static struct tl_weight *packed_weight(struct tl_model *m, int64_t i)
{
    if (m->bert) return tl__bert_weight(m->bert, i);
    if (i == 0) return &m->output;
    i--;
    for (int il = 0;; il++) {
        int64_t nl = tl_layer_n_weights(&m->layers[il]);
        if (i < nl) return tl_layer_weight(&m->layers[il], i);
        i -= nl;
    }
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static tl_status prepare_weights(struct tl_model *m)
{
    const int64_t n = n_packed(m);
    size_t total = 0, bytes;
    for (int64_t i = 0; i < n; i++) {
        tl_status rc = tl_weight_packed_bytes(packed_weight(m, i), &bytes);
        if (rc) return tl__error_prefix(rc, m->path);
        if (total + align64(bytes) < total)
            return tl__errorf(TL_ERR_NOMEM, "%s: packed weights overflow", m->path);
        total += align64(bytes);
    }
    if (!total) return TL_OK;
    char *arena = tl_aligned_alloc_large(total);
    if (!arena || !tl__model_own(m, arena))
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory packing the weights (%zu bytes)",
                          m->path, total);
    size_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        struct tl_weight *w = packed_weight(m, i);
        if (tl_weight_packed_bytes(w, &bytes) || !bytes) continue; // checked above
        tl_weight_pack(w, arena + off);
        off += align64(bytes);
    }
    return TL_OK;
}

static bool is_gguf_file(const char *path, bool *readable)
{
    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    *readable = f != NULL;
    if (!f) return false;
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

tl_status tl_model_load(const char *path, const struct tl_model_params *params, tl_model **out)
{
    *out = NULL;
    if (!path || !*path) return tl__errorf(TL_ERR_INVALID_ARG, "no model path given");
    struct tl_model *m = tl_calloc_array(1, sizeof(*m));
    if (!m) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
    m->path = tl_strndup(path, strlen(path));
    if (!m->path) {
        free(m);
        return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", path);
    }
    bool readable;
    tl_status rc;
    if (is_gguf_file(path, &readable)) {
        rc = tl__model_load_gguf(m);
    } else if (readable && ends_with(path, ".bin")) {
        rc = tl__model_load_llama2c(m, params ? params->tokenizer_path : NULL);
    } else if (readable) {
        rc = tl__errorf(TL_ERR_FORMAT,
                        "%s: not a GGUF file (bad magic) nor a llama2.c .bin checkpoint", path);
    } else {
        rc = tl__errorf(TL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    if (!rc) rc = tl__model_validate(m);
    if (!rc) rc = prepare_weights(m);
    if (rc) {
        tl_model_destroy(m);
        return rc;
    }
    *out = m;
    return TL_OK;
}

void tl_model_destroy(tl_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++)
        tl_aligned_free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    tl_vocab_destroy(m->vocab);
    tl_gguf_close(m->gguf);
    if (m->map) munmap(m->map, m->map_bytes);
    free(m->chat_template);
    free(m->name);
    free(m->path);
    free(m);
}

// ---- validation ------------------------------------------------------------------------------

static tl_status check_weight(const struct tl_model *m, const char *what, int il,
                              const struct tl_weight *w, int64_t n_in, int64_t n_out)
{
    char name[64];
    if (il >= 0)
        snprintf(name, sizeof(name), "blk.%d.%s", il, what);
    else
        snprintf(name, sizeof(name), "%s", what);
    if (!w->data) return tl__errorf(TL_ERR_FORMAT, "%s: missing tensor %s", m->path, name);
    if (w->n_in != n_in || w->n_out != n_out)
        return tl__errorf(
            TL_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", m->path,
            name, (long long)w->n_in, (long long)w->n_out, (long long)n_in, (long long)n_out);
    if (!tl_kernels_weight_supported(w->type))
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: tensor %s has type %s, which is not supported yet", m->path, name,
                          tl_dtype_name(w->type));
    return TL_OK;
}

tl_status tl__model_validate(const struct tl_model *m)
{
    const struct tl_hparams *hp = &m->hp;
    if (m->bert) // shapes checked by its loader (arch_bert.c)
        return tl_vocab_n_tokens(m->vocab) > hp->n_vocab
                   ? tl__errorf(TL_ERR_FORMAT,
                                "%s: vocabulary has %d tokens but the embedding only %d rows",
                                m->path, tl_vocab_n_tokens(m->vocab), hp->n_vocab)
                   : TL_OK;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_ff <= 0 || hp->n_vocab <= 0 || hp->head_dim <= 0 || hp->n_ctx_train <= 0)
        return tl__errorf(
            TL_ERR_FORMAT,
            "%s: invalid hyperparameters (embd %d, layers %d, heads %d/%d, ff %d, vocab "
            "%d, head_dim %d, ctx %d)",
            m->path, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff, hp->n_vocab,
            hp->head_dim, hp->n_ctx_train);
    if (hp->n_expert < 0 || hp->n_expert_used < 0 || hp->n_expert_used > hp->n_expert ||
        (hp->n_expert > 0 && (hp->n_expert_used == 0 || hp->n_ff_exp <= 0)))
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: invalid experts: %d used of %d, expert feed-forward length %d",
                          m->path, hp->n_expert_used, hp->n_expert, hp->n_ff_exp);
    if (hp->n_head % hp->n_head_kv)
        return tl__errorf(TL_ERR_FORMAT, "%s: head count %d is not a multiple of kv head count %d",
                          m->path, hp->n_head, hp->n_head_kv);
    if (hp->head_dim % 2)
        return tl__errorf(TL_ERR_FORMAT, "%s: head dimension %d is odd (RoPE needs pairs)", m->path,
                          hp->head_dim);
    if (!(hp->rms_eps > 0) || !(hp->rope_freq_base > 0) || !(hp->rope_freq_scale > 0))
        return tl__errorf(TL_ERR_FORMAT, "%s: invalid rms epsilon / rope parameters", m->path);
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    tl_status rc;
    if ((rc = check_weight(m, "token_embd.weight", -1, &m->tok_embd, hp->n_embd, hp->n_vocab)))
        return rc;
    if ((rc = check_weight(m, "output.weight", -1, &m->output, hp->n_embd, hp->n_vocab))) return rc;
    if (!m->output_norm)
        return tl__errorf(TL_ERR_FORMAT, "%s: missing tensor output_norm.weight", m->path);
    if (m->rope_freqs && hp->head_dim / 2 > TL_ROPE_FREQS_MAX_HALF)
        return tl__errorf(TL_ERR_UNSUPPORTED,
                          "%s: rope_freqs.weight with head size %d (at most %d)", m->path,
                          hp->head_dim, 2 * TL_ROPE_FREQS_MAX_HALF);
    for (int i = 0; m->rope_freqs && i < hp->head_dim / 2; i++)
        if (!(m->rope_freqs[i] > 0) || !isfinite(m->rope_freqs[i]))
            return tl__errorf(TL_ERR_FORMAT, "%s: rope_freqs.weight[%d] is %g, expected > 0",
                              m->path, i, (double)m->rope_freqs[i]);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct tl_layer *L = &m->layers[il];
        if (!L->attn_norm || !L->ffn_norm)
            return tl__errorf(TL_ERR_FORMAT, "%s: missing norm tensor in layer %d", m->path, il);
        if ((rc = check_weight(m, "attn_q.weight", il, &L->wq, hp->n_embd, q_dim)) ||
            (rc = check_weight(m, "attn_k.weight", il, &L->wk, hp->n_embd, kv_dim)) ||
            (rc = check_weight(m, "attn_v.weight", il, &L->wv, hp->n_embd, kv_dim)) ||
            (rc = check_weight(m, "attn_output.weight", il, &L->wo, q_dim, hp->n_embd)))
            return rc;
        if (L->n_expert > 0) {
            if ((rc = check_weight(m, "ffn_gate_inp.weight", il, &L->router, hp->n_embd,
                                   L->n_expert)))
                return rc;
            for (int e = 0; e < L->n_expert; e++)
                if ((rc = check_weight(m, "ffn_gate_exps.weight", il, &L->exp_gate[e], hp->n_embd,
                                       hp->n_ff_exp)) ||
                    (rc = check_weight(m, "ffn_up_exps.weight", il, &L->exp_up[e], hp->n_embd,
                                       hp->n_ff_exp)) ||
                    (rc = check_weight(m, "ffn_down_exps.weight", il, &L->exp_down[e], hp->n_ff_exp,
                                       hp->n_embd)))
                    return rc;
        } else if ((rc =
                        check_weight(m, "ffn_gate.weight", il, &L->w_gate, hp->n_embd, hp->n_ff)) ||
                   (rc = check_weight(m, "ffn_up.weight", il, &L->w_up, hp->n_embd, hp->n_ff)) ||
                   (rc =
                        check_weight(m, "ffn_down.weight", il, &L->w_down, hp->n_ff, hp->n_embd))) {
            return rc;
        }
        const struct tl_arch_desc *desc = tl__arch_of(hp->arch);
        if (desc->attn_bias && (!L->bq || !L->bk || !L->bv))
            return tl__errorf(TL_ERR_FORMAT, "%s: missing attention bias in layer %d", m->path, il);
        if (desc->qk_norm && (!L->q_norm || !L->k_norm))
            return tl__errorf(TL_ERR_FORMAT, "%s: missing q/k norm tensor in layer %d", m->path,
                              il);
    }
    int32_t n_tok = tl_vocab_n_tokens(m->vocab);
    if (n_tok > hp->n_vocab)
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: vocabulary has %d tokens but the embedding only %d rows", m->path,
                          n_tok, hp->n_vocab);
    return TL_OK;
}

// ---- public info and text API ------------------------------------------------------------------

void tl_model_get_info(const tl_model *m, struct tl_model_info *out)
{
    const struct tl_hparams *hp = &m->hp;
    memset(out, 0, sizeof(*out));
    out->arch = tl__arch_of(hp->arch)->name;
    out->name = m->name;
    out->path = m->path;
    out->n_params = m->n_params;
    out->n_vocab = hp->n_vocab;
    out->n_ctx_train = hp->n_ctx_train;
    out->n_embd = hp->n_embd;
    out->n_layer = hp->n_layer;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->n_ff = hp->n_ff;
    out->head_dim = hp->head_dim;
    out->weight_type = m->weight_type;
    out->chat_template = m->chat_template;
    out->bos = tl_vocab_bos(m->vocab);
    out->eos = tl_vocab_eos(m->vocab);
    out->eot = tl_vocab_eot(m->vocab);
}

tl_status tl_model_tokenize(const tl_model *m, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids, int64_t *n_ids)
{
    return tl_tokenize(m->vocab, text, len, add_special, parse_special, ids, n_ids);
}

char *tl_model_detokenize(const tl_model *m, const int32_t *ids, int64_t n, bool render_special)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tl_vocab_n_tokens(m->vocab)) return NULL;
    return tl_detokenize(m->vocab, ids, n, render_special);
}

size_t tl_model_token_text(const tl_model *m, int32_t id, char *buf, size_t cap)
{
    return tl_token_to_text(m->vocab, id, false, buf, cap);
}

// ---- batches ---------------------------------------------------------------------------------

tl_status tl_batch_check(const struct tl_batch *b, int32_t n_vocab, int64_t max_tok,
                         int64_t max_ctx)
{
    if (b->n_tok <= 0 || b->n_tok > max_tok)
        return tl__errorf(TL_ERR_INVALID_ARG, "batch of %lld tokens (limit %lld)",
                          (long long)b->n_tok, (long long)max_tok);
    if (b->n_out < 0 || b->n_out > b->n_tok)
        return tl__errorf(TL_ERR_INVALID_ARG, "batch asks for %lld outputs of %lld tokens",
                          (long long)b->n_out, (long long)b->n_tok);
    for (int64_t t = 0; t < b->n_tok; t++) {
        if (b->token[t] < 0 || b->token[t] >= n_vocab)
            return tl__errorf(TL_ERR_INVALID_ARG, "token id %d out of range [0, %d)", b->token[t],
                              n_vocab);
        if (b->pos[t] < 0 || b->pos[t] >= max_ctx)
            return tl__errorf(TL_ERR_INVALID_ARG, "position %d out of range [0, %lld)", b->pos[t],
                              (long long)max_ctx);
    }
    for (int64_t i = 0; i < b->n_out; i++)
        if (b->out_idx[i] < 0 || b->out_idx[i] >= b->n_tok)
            return tl__errorf(TL_ERR_INVALID_ARG, "output index %d out of range", b->out_idx[i]);
    return TL_OK;
}
