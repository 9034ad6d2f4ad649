/*
 * llama2.c checkpoint loader (Karpathy's run.c format): a header of seven int32 (dim,
 * hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means
 * the classifier is stored separately), then all weights as f32 in a fixed order, layer-major
 * within each kind. The file is mmap'd and the weights are views into it, so the model computes
 * exactly what the GGUF conversion of the same checkpoint does (same Llama graph, RoPE on
 * adjacent pairs with base 10000, RMS epsilon 1e-5). The vocabulary comes from a llama2.c
 * tokenizer file: the given path, else tok<vocab>.bin or tokenizer.bin beside the checkpoint.
 */
#include "model/loader.h"

#include "core/alloc.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct cursor {
    const float *p; // next weight
    int64_t left;   // floats remaining in the file
};

static const float *take(struct cursor *cur, int64_t n)
{
    if (n < 0 || n > cur->left) return NULL;
    const float *p = cur->p;
    cur->p += n;
    cur->left -= n;
    return p;
}

static struct tl_weight f32_weight(const float *data, int64_t n_out, int64_t n_in)
{
    struct tl_weight w = {.type = TL_DTYPE_F32,
                          .n_in = n_in,
                          .n_out = n_out,
                          .row_bytes = (size_t)n_in * sizeof(float),
                          .data = data};
    return w;
}

static tl_status find_tokenizer(struct tl_model *m, const char *given, int32_t n_vocab, char *buf,
                                size_t cap)
{
    if (given) {
        snprintf(buf, cap, "%s", given);
        return TL_OK;
    }
    const char *slash = strrchr(m->path, '/');
    int dir_len = slash ? (int)(slash - m->path + 1) : 0;
    snprintf(buf, cap, "%.*stok%d.bin", dir_len, m->path, n_vocab);
    if (access(buf, R_OK) == 0) return TL_OK;
    snprintf(buf, cap, "%.*stokenizer.bin", dir_len, m->path);
    if (access(buf, R_OK) == 0) return TL_OK;
    return tl__errorf(TL_ERR_IO,
                      "%s: llama2.c checkpoint needs a tokenizer file (tok%d.bin or tokenizer.bin "
                      "beside it, or --tokenizer)",
                      m->path, n_vocab);
}

tl_status tl__model_load_llama2c(struct tl_model *m, const char *tokenizer_path)
{
    int fd = open(m->path, O_RDONLY);
    if (fd < 0) return tl__errorf(TL_ERR_IO, "%s: cannot open: %s", m->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 28) {
        close(fd);
        return tl__errorf(TL_ERR_FORMAT, "%s: too small for a llama2.c checkpoint header", m->path);
    }
    m->map_bytes = (size_t)st.st_size;
    m->map = mmap(NULL, m->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return tl__errorf(TL_ERR_IO, "%s: mmap failed: %s", m->path, strerror(errno));
    }
    int32_t h[7];
    memcpy(h, m->map, sizeof(h));
    bool shared = h[5] > 0;
    int32_t n_vocab = h[5] < 0 ? -h[5] : h[5];
    struct tl_hparams *hp = &m->hp;
    hp->arch = TL_ARCH_LLAMA;
    hp->n_embd = h[0];
    hp->n_ff = h[1];
    hp->n_layer = h[2];
    hp->n_head = h[3];
    hp->n_head_kv = h[4];
    hp->n_vocab = n_vocab;
    hp->n_ctx_train = h[6];
    if (h[0] <= 0 || h[1] <= 0 || h[2] <= 0 || h[2] > 4096 || h[3] <= 0 || h[4] <= 0 ||
        n_vocab <= 0 || h[6] <= 0 || h[0] % h[3])
        return tl__errorf(TL_ERR_FORMAT, "%s: invalid llama2.c header (%d %d %d %d %d %d %d)",
                          m->path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
    hp->head_dim = h[0] / h[3];
    hp->rms_eps = 1e-5f;
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rope_mode = TL_ROPE_NORMAL;

    int64_t dim = hp->n_embd, ff = hp->n_ff, L = hp->n_layer, hd = hp->head_dim;
    int64_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    struct cursor cur = {(const float *)((const char *)m->map + 28),
                         (int64_t)((m->map_bytes - 28) / sizeof(float))};
    const float *emb = take(&cur, n_vocab * dim);
    const float *rms_att = take(&cur, L * dim);
    const float *wq = take(&cur, L * dim * q_dim);
    const float *wk = take(&cur, L * dim * kv_dim);
    const float *wv = take(&cur, L * dim * kv_dim);
    const float *wo = take(&cur, L * q_dim * dim);
    const float *rms_ffn = take(&cur, L * dim);
    const float *w1 = take(&cur, L * ff * dim);
    const float *w2 = take(&cur, L * dim * ff);
    const float *w3 = take(&cur, L * ff * dim);
    const float *rms_final = take(&cur, dim);
    const float *freqs = take(&cur, hp->n_ctx_train * hd); // unused RoPE tables (real + imag)
    const float *wcls = shared ? emb : take(&cur, n_vocab * dim);
    if (!emb || !rms_att || !wq || !wk || !wv || !wo || !rms_ffn || !w1 || !w2 || !w3 ||
        !rms_final || !freqs || !wcls)
        return tl__errorf(TL_ERR_FORMAT, "%s: truncated llama2.c checkpoint (%zu bytes)", m->path,
                          m->map_bytes);

    m->layers = tl_calloc_array((size_t)L, sizeof(*m->layers));
    if (!m->layers) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", m->path);
    for (int64_t l = 0; l < L; l++) {
        struct tl_layer *ly = &m->layers[l];
        ly->attn_norm = rms_att + l * dim;
        ly->ffn_norm = rms_ffn + l * dim;
        ly->wq = f32_weight(wq + l * dim * q_dim, q_dim, dim);
        ly->wk = f32_weight(wk + l * dim * kv_dim, kv_dim, dim);
        ly->wv = f32_weight(wv + l * dim * kv_dim, kv_dim, dim);
        ly->wo = f32_weight(wo + l * q_dim * dim, dim, q_dim);
        ly->w_gate = f32_weight(w1 + l * ff * dim, ff, dim);
        ly->w_down = f32_weight(w2 + l * dim * ff, dim, ff);
        ly->w_up = f32_weight(w3 + l * ff * dim, ff, dim);
    }
    m->tok_embd = f32_weight(emb, n_vocab, dim);
    m->output = f32_weight(wcls, n_vocab, dim);
    m->output_norm = rms_final;
    m->n_params = n_vocab * dim * (shared ? 1 : 2) +
                  L * (2 * dim + dim * (q_dim + 2 * kv_dim) + q_dim * dim + 3 * ff * dim) + dim;
    m->weight_type = "F32";

    char tok_path[4096];
    tl_status rc = find_tokenizer(m, tokenizer_path, n_vocab, tok_path, sizeof(tok_path));
    if (rc) return rc;
    if ((rc = tl_vocab_load_llama2c(tok_path, &m->vocab))) return rc;
    if (tl_vocab_n_tokens(m->vocab) != n_vocab)
        return tl__errorf(TL_ERR_FORMAT, "%s: tokenizer %s has %d tokens, the checkpoint %d",
                          m->path, tok_path, tl_vocab_n_tokens(m->vocab), n_vocab);
    const char *base = strrchr(m->path, '/');
    base = base ? base + 1 : m->path;
    m->name = tl_strndup(base, strlen(base));
    if (!m->name) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", m->path);
    return TL_OK;
}
