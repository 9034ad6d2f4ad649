// y[t][r] = sum_i W[r][i] * x[t][i], W in GGUF Q6_K rows (n_in a multiple of 256): super-blocks
// of 210 bytes: ql[128] (low nibbles), qh[64] (2 high bits), int8 scales[16], f16 d
// (kernels/quants.h tl_block_q6_k). Value 128n + 32g + l (n < 2, g < 4, l < 32) is
// d * scales[8n + l/16 + 2g] * (q - 32), q = nibble (g < 2: low, else high) of ql[64n + l +
// 32(g & 1)] | ((qh[32n + l] >> 2g) & 3) << 4: exactly the CPU's decode (exact in f32).
// Same shape and fixed reduction order as mm_q4_k.comp (unit = one super-block, index order).
// Super-blocks start on 2-byte boundaries; the buffer is padded (tl_gpu_matmul_weight_bytes).
#version 450
#define TILE 4u
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_in; uint n_out; uint n_tok; } p;
shared float part[TILE][32];

uint byte_at(uint o)
{
    return (w[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu;
}

void main()
{
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= p.n_out)
        return;
    uint t0 = gl_WorkGroupID.z * TILE, l = gl_LocalInvocationID.x;
    uint xb[TILE];
    for (uint k = 0u; k < TILE; k++)
        xb[k] = min(t0 + k, p.n_tok - 1u) * p.n_in;
    precise float acc[TILE];
    for (uint k = 0u; k < TILE; k++)
        acc[k] = 0.0;
    uint n_sb = p.n_in / 256u, rb = row * n_sb * 210u;
    for (uint b = l; b < n_sb; b += 32u) {
        uint o = rb + b * 210u;
        uint od = o + 208u; // the f16 d, 2-byte aligned
        float d = unpackHalf2x16((w[od >> 2] >> ((od & 2u) * 8u)) & 0xFFFFu).x;
        precise float s[TILE];
        for (uint k = 0u; k < TILE; k++)
            s[k] = 0.0;
        for (uint n = 0u; n < 2u; n++)
            for (uint g = 0u; g < 4u; g++)
                for (uint i = 0u; i < 32u; i++) {
                    uint ql = byte_at(o + 64u * n + i + 32u * (g & 1u));
                    uint lo = g < 2u ? (ql & 0xFu) : (ql >> 4);
                    uint hi = (byte_at(o + 128u + 32u * n + i) >> (2u * g)) & 3u;
                    int q = int(lo | (hi << 4)) - 32;
                    int sc = bitfieldExtract(int(byte_at(o + 192u + 8u * n + i / 16u + 2u * g)), 0, 8);
                    precise float wv = (d * float(sc)) * float(q);
                    uint xi = b * 256u + 128u * n + 32u * g + i;
                    for (uint k = 0u; k < TILE; k++)
                        s[k] = fma(wv, x[xb[k] + xi], s[k]);
                }
        for (uint k = 0u; k < TILE; k++)
            acc[k] += s[k];
    }
    for (uint k = 0u; k < TILE; k++)
        part[k][l] = acc[k];
    barrier();
    for (uint h = 16u; h > 0u; h >>= 1) {
        if (l < h)
            for (uint k = 0u; k < TILE; k++)
                part[k][l] += part[k][l + h];
        barrier();
    }
    if (l < TILE && t0 + l < p.n_tok)
        y[(t0 + l) * p.n_out + row] = part[l][0];
}
