// y[t][r] = sum_i W[r][i] * x[t][i], W in GGUF Q5_K rows (n_in a multiple of 256): super-blocks
// of 176 bytes: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins, qh[32] (the fifth
// bits), 128 bytes of nibbles (kernels/quants.h tl_block_q5_k). Value 64j + 32h + l (j < 4,
// h < 2, l < 32) is d*sc[2j+h] * q - dmin*m[2j+h], q = nibble h of qs[32j + l] | bit (2j + h) of
// qh[l] << 4: exactly the CPU's decode (one rounding, at the subtraction). Same shape and fixed
// reduction order as mm_q4_k.comp (unit = one super-block, index order, then the fixed tree).
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
    uint n_sb = p.n_in / 256u, rb = row * n_sb * 176u;
    for (uint b = l; b < n_sb; b += 32u) {
        uint o = rb + b * 176u; // 4-byte aligned
        vec2 dm = unpackHalf2x16(w[o >> 2]);
        precise float s[TILE];
        for (uint k = 0u; k < TILE; k++)
            s[k] = 0.0;
        for (uint j = 0u; j < 4u; j++)
            for (uint h = 0u; h < 2u; h++) {
                uint sj = 2u * j + h, sc, mn;
                if (sj < 4u) {
                    sc = byte_at(o + 4u + sj) & 63u;
                    mn = byte_at(o + 8u + sj) & 63u;
                } else {
                    sc = (byte_at(o + 8u + sj) & 0xFu) | ((byte_at(o + sj) >> 6) << 4);
                    mn = (byte_at(o + 8u + sj) >> 4) | ((byte_at(o + 4u + sj) >> 6) << 4);
                }
                float d1 = dm.x * float(sc), m1 = dm.y * float(mn);
                for (uint i = 0u; i < 32u; i++) {
                    uint q = byte_at(o + 48u + 32u * j + i);
                    q = h == 0u ? (q & 0xFu) : (q >> 4);
                    q |= ((byte_at(o + 16u + i) >> sj) & 1u) << 4;
                    precise float wv = d1 * float(q) - m1;
                    uint xi = b * 256u + 64u * j + 32u * h + i;
                    for (uint k = 0u; k < TILE; k++)
                        s[k] = fma(wv, x[xb[k] + xi], s[k]);
                }
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
