// Causal attention through paged K/V pools (kernels.h tl_attention): for token t and head h,
//   out[t][h] = softmax(q[t][h] . K[j] * scale, j < n_ctx) . V[j],  n_ctx = pos[t] + 1,
// K/V rows read through the token's block table (meta as in kv_store.comp), grouped-query:
// head h uses kv head h / (n_head / n_kv_head). Pools of f32 (kv_type 0), f16 (1) or Q8_0 (2).
// One workgroup of 64 per (head, token). Positions go in chunks of 64 from position 0: each
// invocation scores one position of the chunk (a sequential dot product over head_dim with
// fma()); a fixed tree gives the chunk's max and sum; the running max, sum and output
// (invocation l owns dims l, l+64, ...) are rescaled by exp(m_old - m_new) and the chunk's
// p_j * V[j] added in position order (online softmax). Everything depends on n_ctx and head_dim
// only, never on the batch: a token's output is bit-identical alone and in any batch.
#version 450
#define WG 64u
#define MAX_HD 256u
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kpool[]; };
layout(std430, binding = 2) readonly buffer V { uint vpool[]; };
layout(std430, binding = 3) readonly buffer Meta { int meta[]; };
layout(std430, binding = 4) writeonly buffer Out { float outv[]; };
layout(push_constant) uniform P {
    uint n_tok; uint n_head; uint n_kv_head; uint head_dim; uint block_size; uint kv_type;
    float scale; uint n_blocks; uint n_meta;
} p;
shared float qs[MAX_HD];
shared float pj[WG];
shared float red[WG];

uint word(uint which, uint i)
{
    return which == 0u ? kpool[i] : vpool[i];
}

// Element idx of the K (which 0) or V pool as f32, decoded exactly as the CPU's kv_get.
float kv_at(uint which, uint idx)
{
    if (p.kv_type == 0u)
        return uintBitsToFloat(word(which, idx));
    if (p.kv_type == 1u) {
        vec2 h = unpackHalf2x16(word(which, idx >> 1)); // exact
        return (idx & 1u) == 0u ? h.x : h.y;
    }
    // Q8_0: blocks of 34 bytes (f16 d, 32 int8); d * q is exact in f32
    uint o = (idx / 32u) * 34u, ob = o + 2u + idx % 32u;
    float d = unpackHalf2x16((word(which, o >> 2) >> ((o & 2u) * 8u)) & 0xFFFFu).x;
    int q = bitfieldExtract(int(word(which, ob >> 2)), int((ob & 3u) * 8u), 8);
    return d * float(q);
}

// Element index of (position j, kv head, dim 0) through the block table at meta[table].
uint row_base(uint table, uint j, uint kvh)
{
    // A bad table or block id reads a wrong row, never outside the buffers (the host's duty).
    uint b = uint(meta[min(table + j / p.block_size, p.n_meta - 1u)]);
    b = min(b, p.n_blocks - 1u);
    return ((b * p.block_size + j % p.block_size) * p.n_kv_head + kvh) * p.head_dim;
}

void main()
{
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = gl_LocalInvocationID.x;
    uint kvh = h / (p.n_head / p.n_kv_head);
    uint n_ctx = uint(meta[2u * t]) + 1u, table = uint(meta[2u * t + 1u]);
    uint qb = (t * p.n_head + h) * p.head_dim;
    for (uint d = l; d < p.head_dim; d += WG)
        qs[d] = q[qb + d];
    barrier();
    const float lowest = -3.402823e38;
    float m = lowest;
    precise float lsum = 0.0;
    precise float acc[MAX_HD / WG];
    for (uint i = 0u; i < MAX_HD / WG; i++)
        acc[i] = 0.0;
    for (uint c0 = 0u; c0 < n_ctx; c0 += WG) {
        uint j = c0 + l;
        precise float s = lowest;
        if (j < n_ctx) {
            uint kb = row_base(table, j, kvh);
            precise float dot = 0.0;
            for (uint d = 0u; d < p.head_dim; d++)
                dot = fma(qs[d], kv_at(0u, kb + d), dot);
            s = dot * p.scale;
        }
        red[l] = s;
        barrier();
        for (uint k = WG / 2u; k > 0u; k >>= 1) {
            if (l < k)
                red[l] = max(red[l], red[l + k]);
            barrier();
        }
        float m_new = max(m, red[0]);
        barrier();
        float e = j < n_ctx ? exp(s - m_new) : 0.0;
        pj[l] = e;
        red[l] = e;
        barrier();
        for (uint k = WG / 2u; k > 0u; k >>= 1) {
            if (l < k)
                red[l] += red[l + k];
            barrier();
        }
        float alpha = c0 == 0u ? 0.0 : exp(m - m_new);
        lsum = lsum * alpha + red[0];
        uint n = min(WG, n_ctx - c0);
        for (uint i = 0u; i < MAX_HD / WG; i++) {
            uint d = l + i * WG;
            if (d >= p.head_dim)
                break;
            acc[i] *= alpha;
            for (uint jj = 0u; jj < n; jj++)
                acc[i] = fma(pj[jj], kv_at(1u, row_base(table, c0 + jj, kvh) + d), acc[i]);
        }
        m = m_new;
        barrier();
    }
    for (uint i = 0u; i < MAX_HD / WG; i++) {
        uint d = l + i * WG;
        if (d < p.head_dim)
            outv[qb + d] = acc[i] / lsum;
    }
}
