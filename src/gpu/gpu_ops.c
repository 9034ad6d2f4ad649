/*
 * The device kernels' host side: shape and size checks, push constants and workgroup counts for
 * each op (the shaders in src/gpu/shaders say what they compute and in which order). Errors are
 * recorded in the recorder (sticky) and returned. The RoPE table is computed here on the host in
 * double, as kernels/ref.c does, so the device rotation matches the CPU's bit for bit.
 * Thread-safety: as the recorder.
 */
#include "gpu/gpu_ops.h"

#include "gpu/gpu_impl.h"

#include <math.h>
#include <string.h>

#define MAX_ELEMS ((int64_t)1 << 31)
#define MAX_GROUPS 65535

// Records a failed check in the recorder (sticky) and returns it.
static tl_status bad(tl_gpu_rec *r, tl_status st)
{
    if (!r->err) r->err = st;
    return st;
}

// Whether buffer b holds at least `bytes`; an error naming the op and operand otherwise.
static tl_status need(tl_gpu_rec *r, const char *op, const char *what, const tl_gpu_buffer *b,
                      int64_t bytes)
{
    if (!b) return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu %s: no buffer for %s", op, what));
    if ((uint64_t)bytes > b->bytes)
        return bad(r,
                   tl__errorf(TL_ERR_INVALID_ARG, "gpu %s: %s needs %lld bytes, its buffer has %zu",
                              op, what, (long long)bytes, b->bytes));
    return 0;
}

static tl_status shape(tl_gpu_rec *r, const char *op, int64_t a, int64_t b)
{
    if (a < 1 || b < 1 || a >= MAX_ELEMS || b >= MAX_ELEMS || a * b >= MAX_ELEMS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG,
                                 "gpu %s: shape %lld x %lld (each >= 1, product < 2^31)", op,
                                 (long long)a, (long long)b));
    return 0;
}

tl_status tl_gpu_rmsnorm(tl_gpu_rec *r, tl_gpu_buffer *x, tl_gpu_buffer *w, tl_gpu_buffer *y,
                         int64_t n, int64_t n_rows, float eps)
{
    tl_status st;
    if (r->err) return r->err;
    if ((st = shape(r, "rmsnorm", n, n_rows))) return st;
    if (n_rows > MAX_GROUPS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu rmsnorm: %lld rows (at most %d)",
                                 (long long)n_rows, MAX_GROUPS));
    if ((st = need(r, "rmsnorm", "x", x, n * n_rows * 4)) ||
        (st = need(r, "rmsnorm", "w", w, n * 4)) ||
        (st = need(r, "rmsnorm", "y", y, n * n_rows * 4)))
        return st;
    struct {
        uint32_t n;
        float eps;
    } pc = {(uint32_t)n, eps};
    tl_gpu_buffer *b[] = {x, w, y};
    return tl__gpu_rec_dispatch(r, TL_GPU_K_RMSNORM, b, &pc, sizeof(pc), (uint32_t)n_rows, 1, 1);
}

// One eltwise.comp dispatch over n elements (b's index taken modulo nb for op 3).
static tl_status eltwise(tl_gpu_rec *r, uint32_t op, tl_gpu_buffer *a, tl_gpu_buffer *b,
                         tl_gpu_buffer *y, int64_t n, uint32_t nb)
{
    struct {
        uint32_t n, op, nb;
    } pc = {(uint32_t)n, op, nb};
    int64_t groups = (n + 255) / 256;
    tl_gpu_buffer *bufs[] = {a, b, y};
    return tl__gpu_rec_dispatch(r, TL_GPU_K_ELTWISE, bufs, &pc, sizeof(pc),
                                (uint32_t)(groups < MAX_GROUPS ? groups : MAX_GROUPS), 1, 1);
}

tl_status tl_gpu_eltwise(tl_gpu_rec *r, enum tl_gpu_eltwise_op op, tl_gpu_buffer *a,
                         tl_gpu_buffer *b, tl_gpu_buffer *y, int64_t n)
{
    tl_status st;
    if (r->err) return r->err;
    if (op != TL_GPU_ADD && op != TL_GPU_MUL && op != TL_GPU_SWIGLU)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu eltwise: unknown op %d", (int)op));
    if ((st = shape(r, "eltwise", n, 1))) return st;
    if ((st = need(r, "eltwise", "a", a, n * 4)) || (st = need(r, "eltwise", "b", b, n * 4)) ||
        (st = need(r, "eltwise", "y", y, n * 4)))
        return st;
    return eltwise(r, (uint32_t)op, a, b, y, n, 1);
}

tl_status tl_gpu_add_bias(tl_gpu_rec *r, tl_gpu_buffer *x, tl_gpu_buffer *bias, int64_t n,
                          int64_t n_rows)
{
    tl_status st;
    if (r->err) return r->err;
    if ((st = shape(r, "add_bias", n, n_rows))) return st;
    if ((st = need(r, "add_bias", "x", x, n * n_rows * 4)) ||
        (st = need(r, "add_bias", "bias", bias, n * 4)))
        return st;
    return eltwise(r, 3, x, bias, x, n * n_rows, (uint32_t)n);
}

void tl_gpu_rope_table_fill(float *cs, int64_t n_pos, int head_dim, float freq_base,
                            float freq_scale)
{
    // The same double arithmetic as kernels/ref.c (tl__rope_freq, tl__rope_table).
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        double freq = pow(freq_base, -2.0 * i / head_dim);
        for (int64_t p = 0; p < n_pos; p++) {
            double theta = (double)p * freq_scale * freq;
            cs[(p * half + i) * 2] = (float)cos(theta);
            cs[(p * half + i) * 2 + 1] = (float)sin(theta);
        }
    }
}

tl_status tl_gpu_rope(tl_gpu_rec *r, tl_gpu_buffer *x, int64_t n_tok, int n_heads, int head_dim,
                      enum tl_rope_mode mode, tl_gpu_buffer *pos, tl_gpu_buffer *table,
                      int64_t n_table)
{
    tl_status st;
    if (r->err) return r->err;
    if (mode != TL_ROPE_NORMAL && mode != TL_ROPE_NEOX)
        return bad(r, tl__errorf(TL_ERR_UNSUPPORTED, "gpu rope: mode %d", (int)mode));
    if (head_dim < 2 || head_dim % 2)
        return bad(r,
                   tl__errorf(TL_ERR_INVALID_ARG, "gpu rope: head_dim %d (even, >= 2)", head_dim));
    if ((st = shape(r, "rope", n_tok, (int64_t)n_heads * head_dim)) ||
        (st = shape(r, "rope table", n_table, head_dim)))
        return st;
    if (n_tok > MAX_GROUPS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu rope: %lld tokens (at most %d)",
                                 (long long)n_tok, MAX_GROUPS));
    if ((st = need(r, "rope", "x", x, n_tok * n_heads * head_dim * 4)) ||
        (st = need(r, "rope", "pos", pos, n_tok * 4)) ||
        (st = need(r, "rope", "table", table, n_table * head_dim * 4)))
        return st;
    struct {
        uint32_t n_tok, n_heads, head_dim, mode, n_table;
    } pc = {(uint32_t)n_tok, (uint32_t)n_heads, (uint32_t)head_dim, (uint32_t)mode,
            (uint32_t)n_table};
    tl_gpu_buffer *b[] = {x, table, pos};
    return tl__gpu_rec_dispatch(r, TL_GPU_K_ROPE, b, &pc, sizeof(pc), (uint32_t)n_tok, 1, 1);
}

bool tl_gpu_matmul_supported(enum tl_dtype type)
{
    return type == TL_DTYPE_F32 || type == TL_DTYPE_F16 || type == TL_DTYPE_BF16 ||
           type == TL_DTYPE_Q8_0 || type == TL_DTYPE_Q4_K || type == TL_DTYPE_Q5_K ||
           type == TL_DTYPE_Q6_K;
}

// Bytes of one row in the model file's layout; 0 when the shape does not fit the type.
static int64_t row_bytes(enum tl_dtype type, int64_t n_in)
{
    switch (type) {
    case TL_DTYPE_F32:
        return n_in * 4;
    case TL_DTYPE_F16:
    case TL_DTYPE_BF16:
        return n_in % 2 ? 0 : n_in * 2;
    case TL_DTYPE_Q8_0:
        return n_in % TL_QK8_0 ? 0 : n_in / TL_QK8_0 * (int64_t)sizeof(struct tl_block_q8_0);
    case TL_DTYPE_Q4_K: // super-blocks of 256 values in 144 bytes (kernels/quants.h)
        return n_in % 256 ? 0 : n_in / 256 * 144;
    case TL_DTYPE_Q5_K: // 256 values in 176 bytes
        return n_in % 256 ? 0 : n_in / 256 * 176;
    case TL_DTYPE_Q6_K: // 256 values in 210 bytes
        return n_in % 256 ? 0 : n_in / 256 * 210;
    default:
        return 0;
    }
}

size_t tl_gpu_matmul_weight_bytes(enum tl_dtype type, int64_t n_in, int64_t n_out)
{
    int64_t rb = n_in > 0 && n_in < MAX_ELEMS ? row_bytes(type, n_in) : 0;
    if (!rb || n_out < 1 || n_out >= MAX_ELEMS) return 0;
    // Q8_0 and Q6_K rows are 2-byte aligned; a shader may read the 4-byte word after the last
    // block.
    return (size_t)((rb * n_out + 3) / 4 * 4 + 4);
}

tl_status tl_gpu_matmul(tl_gpu_rec *r, enum tl_dtype type, tl_gpu_buffer *w, int64_t n_in,
                        int64_t n_out, tl_gpu_buffer *x, int64_t n_tok, tl_gpu_buffer *y)
{
    tl_status st;
    if (r->err) return r->err;
    enum tl_gpu_kernel k = type == TL_DTYPE_F32    ? TL_GPU_K_MM_F32
                           : type == TL_DTYPE_F16  ? TL_GPU_K_MM_F16
                           : type == TL_DTYPE_Q8_0 ? TL_GPU_K_MM_Q8_0
                           : type == TL_DTYPE_Q4_K ? TL_GPU_K_MM_Q4_K
                           : type == TL_DTYPE_Q6_K ? TL_GPU_K_MM_Q6_K
                           : type == TL_DTYPE_BF16 ? TL_GPU_K_MM_BF16
                           : type == TL_DTYPE_Q5_K ? TL_GPU_K_MM_Q5_K
                                                   : TL_GPU_K_COUNT;
    if (k == TL_GPU_K_COUNT)
        return bad(r, tl__errorf(TL_ERR_UNSUPPORTED,
                                 "gpu matmul: weight type %s is not supported on the device yet "
                                 "(F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K)",
                                 tl_dtype_name(type)));
    if ((st = shape(r, "matmul weight", n_out, n_in)) || (st = shape(r, "matmul x", n_tok, n_in)) ||
        (st = shape(r, "matmul y", n_tok, n_out)))
        return st;
    size_t wbytes = tl_gpu_matmul_weight_bytes(type, n_in, n_out);
    if (!wbytes)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG,
                                 "gpu matmul: %s rows of %lld elements "
                                 "(F16, BF16: even; Q8_0: a multiple of 32; K-quants: of 256)",
                                 tl_dtype_name(type), (long long)n_in));
    if ((st = need(r, "matmul", "W", w, (int64_t)wbytes)) ||
        (st = need(r, "matmul", "x", x, n_tok * n_in * 4)) ||
        (st = need(r, "matmul", "y", y, n_tok * n_out * 4)))
        return st;
    int64_t tiles = (n_tok + 3) / 4; // TILE in the shaders
    int64_t gx = n_out < MAX_GROUPS ? n_out : MAX_GROUPS, gy = (n_out + gx - 1) / gx;
    if (tiles > MAX_GROUPS || gy > MAX_GROUPS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG,
                                 "gpu matmul: %lld tokens x %lld rows is too "
                                 "many workgroups",
                                 (long long)n_tok, (long long)n_out));
    struct {
        uint32_t n_in, n_out, n_tok;
    } pc = {(uint32_t)n_in, (uint32_t)n_out, (uint32_t)n_tok};
    tl_gpu_buffer *b[] = {w, x, y};
    return tl__gpu_rec_dispatch(r, k, b, &pc, sizeof(pc), (uint32_t)gx, (uint32_t)gy,
                                (uint32_t)tiles);
}

tl_status tl_gpu_get_rows(tl_gpu_rec *r, enum tl_dtype type, tl_gpu_buffer *w, int64_t n,
                          int64_t n_rows, tl_gpu_buffer *ids, int64_t n_tok, tl_gpu_buffer *y)
{
    tl_status st;
    if (r->err) return r->err;
    if (!tl_gpu_matmul_supported(type))
        return bad(r, tl__errorf(TL_ERR_UNSUPPORTED,
                                 "gpu get_rows: weight type %s is not supported on the device yet",
                                 tl_dtype_name(type)));
    if ((st = shape(r, "get_rows", n_rows, n)) || (st = shape(r, "get_rows y", n_tok, n)))
        return st;
    size_t wbytes = tl_gpu_matmul_weight_bytes(type, n, n_rows);
    if (!wbytes)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu get_rows: %s rows of %lld values",
                                 tl_dtype_name(type), (long long)n));
    if (n_tok > MAX_GROUPS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu get_rows: %lld tokens (at most %d)",
                                 (long long)n_tok, MAX_GROUPS));
    if ((st = need(r, "get_rows", "W", w, (int64_t)wbytes)) ||
        (st = need(r, "get_rows", "ids", ids, n_tok * 4)) ||
        (st = need(r, "get_rows", "y", y, n_tok * n * 4)))
        return st;
    struct {
        uint32_t n_tok, n, n_rows, type, row_bytes;
    } pc = {(uint32_t)n_tok, (uint32_t)n, (uint32_t)n_rows, (uint32_t)type,
            (uint32_t)row_bytes(type, n)};
    tl_gpu_buffer *b[] = {w, ids, y};
    return tl__gpu_rec_dispatch(r, TL_GPU_K_GET_ROWS, b, &pc, sizeof(pc), (uint32_t)n_tok, 1, 1);
}

// ---- paged KV cache and attention -------------------------------------------------------------

size_t tl_gpu_kv_pool_bytes(enum tl_dtype type, int64_t n_blocks, int block_size, int n_kv_head,
                            int head_dim)
{
    if ((type != TL_DTYPE_F32 && type != TL_DTYPE_F16 && type != TL_DTYPE_Q8_0) || n_blocks < 1 ||
        block_size < 1 || n_kv_head < 1 || head_dim < 1 || head_dim > 256 ||
        (type == TL_DTYPE_F16 && head_dim % 2) || (type == TL_DTYPE_Q8_0 && head_dim % 32))
        return 0;
    int64_t row = (int64_t)n_kv_head * head_dim;
    // Q8_0: kv_store assembles a position's row in 8 KiB of shared memory
    if (row >= MAX_ELEMS || n_blocks * block_size >= MAX_ELEMS / row ||
        (type == TL_DTYPE_Q8_0 && row / 32 * 34 + 4 > 8192))
        return 0;
    int64_t n = n_blocks * block_size * row;
    if (type == TL_DTYPE_Q8_0) return (size_t)((n / 32 * 34 + 3) / 4 * 4); // whole words
    return (size_t)n * (type == TL_DTYPE_F32 ? 4 : 2);
}

// The shaders' kv_type: 0 F32, 1 F16, 2 Q8_0.
static uint32_t kv_type_code(enum tl_dtype type)
{
    return type == TL_DTYPE_F16 ? 1 : type == TL_DTYPE_Q8_0 ? 2 : 0;
}

static tl_status check_kv(tl_gpu_rec *r, const char *op, const struct tl_gpu_kv *kv, int64_t n_tok,
                          const tl_gpu_buffer *meta, int64_t n_meta)
{
    tl_status st;
    size_t pool =
        tl_gpu_kv_pool_bytes(kv->type, kv->n_blocks, kv->block_size, kv->n_kv_head, kv->head_dim);
    if (!pool)
        return bad(r, tl__errorf(kv->type == TL_DTYPE_F32 || kv->type == TL_DTYPE_F16 ||
                                         kv->type == TL_DTYPE_Q8_0
                                     ? TL_ERR_INVALID_ARG
                                     : TL_ERR_UNSUPPORTED,
                                 "gpu %s: a %s KV pool of %lld blocks x %d x %d heads x %d (F32, "
                                 "F16 or Q8_0, head_dim <= 256, even for F16, a multiple of 32 "
                                 "for Q8_0)",
                                 op, tl_dtype_name(kv->type), (long long)kv->n_blocks,
                                 kv->block_size, kv->n_kv_head, kv->head_dim));
    if ((st = shape(r, op, n_tok, 1)) || (st = shape(r, op, n_meta, 1))) return st;
    if (n_meta < 2 * n_tok)
        return bad(r,
                   tl__errorf(TL_ERR_INVALID_ARG, "gpu %s: meta has %lld entries for %lld tokens",
                              op, (long long)n_meta, (long long)n_tok));
    if ((st = need(r, op, "K pool", kv->k, (int64_t)pool)) ||
        (st = need(r, op, "V pool", kv->v, (int64_t)pool)) ||
        (st = need(r, op, "meta", meta, n_meta * 4)))
        return st;
    return 0;
}

tl_status tl_gpu_kv_store(tl_gpu_rec *r, const struct tl_gpu_kv *kv, tl_gpu_buffer *k,
                          tl_gpu_buffer *v, int64_t n_tok, tl_gpu_buffer *meta, int64_t n_meta)
{
    tl_status st;
    if (r->err) return r->err;
    if ((st = check_kv(r, "kv_store", kv, n_tok, meta, n_meta))) return st;
    int64_t row = (int64_t)kv->n_kv_head * kv->head_dim;
    if (n_tok > MAX_GROUPS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG, "gpu kv_store: %lld tokens (at most %d)",
                                 (long long)n_tok, MAX_GROUPS));
    if ((st = need(r, "kv_store", "k", k, n_tok * row * 4)) ||
        (st = need(r, "kv_store", "v", v, n_tok * row * 4)))
        return st;
    struct {
        uint32_t n_tok, row, block_size, kv_type, n_blocks, n_meta;
    } pc = {(uint32_t)n_tok,        (uint32_t)row,          (uint32_t)kv->block_size,
            kv_type_code(kv->type), (uint32_t)kv->n_blocks, (uint32_t)n_meta};
    tl_gpu_buffer *bk[] = {k, kv->k, meta}, *bv[] = {v, kv->v, meta};
    st = tl__gpu_rec_dispatch(r, TL_GPU_K_KV_STORE, bk, &pc, sizeof(pc), (uint32_t)n_tok, 1, 1);
    if (st) return st;
    return tl__gpu_rec_dispatch(r, TL_GPU_K_KV_STORE, bv, &pc, sizeof(pc), (uint32_t)n_tok, 1, 1);
}

tl_status tl_gpu_attention(tl_gpu_rec *r, const struct tl_gpu_kv *kv, tl_gpu_buffer *q,
                           int64_t n_tok, int n_head, float scale, tl_gpu_buffer *meta,
                           int64_t n_meta, tl_gpu_buffer *out)
{
    tl_status st;
    if (r->err) return r->err;
    if ((st = check_kv(r, "attention", kv, n_tok, meta, n_meta))) return st;
    if (n_head < 1 || n_head % kv->n_kv_head || n_head > MAX_GROUPS || n_tok > MAX_GROUPS)
        return bad(r, tl__errorf(TL_ERR_INVALID_ARG,
                                 "gpu attention: %d heads over %d KV heads, %lld tokens (a "
                                 "multiple; each at most %d)",
                                 n_head, kv->n_kv_head, (long long)n_tok, MAX_GROUPS));
    int64_t qbytes = n_tok * n_head * kv->head_dim * 4;
    if ((st = need(r, "attention", "q", q, qbytes)) ||
        (st = need(r, "attention", "out", out, qbytes)))
        return st;
    struct {
        uint32_t n_tok, n_head, n_kv_head, head_dim, block_size, kv_type;
        float scale;
        uint32_t n_blocks, n_meta;
    } pc = {(uint32_t)n_tok,
            (uint32_t)n_head,
            (uint32_t)kv->n_kv_head,
            (uint32_t)kv->head_dim,
            (uint32_t)kv->block_size,
            kv_type_code(kv->type),
            scale,
            (uint32_t)kv->n_blocks,
            (uint32_t)n_meta};
    tl_gpu_buffer *b[] = {q, kv->k, kv->v, meta, out};
    return tl__gpu_rec_dispatch(r, TL_GPU_K_ATTENTION, b, &pc, sizeof(pc), (uint32_t)n_head,
                                (uint32_t)n_tok, 1);
}
