// y[t][r] = sum_i W[r][i] * x[t][i], W in GGUF Q8_0 rows (n_out, n_in; n_in a multiple of 32):
// blocks of 34 bytes, an f16 scale d then 32 int8 q, value = d * q (kernels.h tl_block_q8_0).
// Dequantized here, multiplied with f32 activations (the CPU instead quantizes x to Q8_0 too;
// see the test's tolerance). Same shape and fixed reduction order as mm_f32.comp with unit =
// one block: invocation l takes blocks b = l, l+32, ..., each summed as s = sum_j q_j * x_j in
// order, then acc = fma(d, s, acc) (as mm_f32.comp), then the fixed tree. Batch-invariant bit for bit.
// Blocks start on 2-byte boundaries: words are assembled from two aligned loads when needed;
// the buffer must extend 4 bytes past the last row (tl_gpu_matmul_weight_bytes).
#version 450
#define TILE 4u
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_in; uint n_out; uint n_tok; } p;
shared float part[TILE][32];

// The 4 bytes at byte offset o (o even).
uint word_at(uint o)
{
    uint i = o >> 2;
    return (o & 2u) == 0u ? w[i] : (w[i] >> 16) | (w[i + 1u] << 16);
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
    uint n_blocks = p.n_in / 32u, rb = row * n_blocks * 34u;
    for (uint b = l; b < n_blocks; b += 32u) {
        uint o = rb + b * 34u;
        uint dw = w[o >> 2];
        float d = unpackHalf2x16((o & 2u) == 0u ? dw & 0xFFFFu : dw >> 16).x;
        precise float s[TILE];
        for (uint k = 0u; k < TILE; k++)
            s[k] = 0.0;
        for (uint j = 0u; j < 8u; j++) {
            int q4 = int(word_at(o + 2u + 4u * j));
            for (uint e = 0u; e < 4u; e++) {
                float q = float(bitfieldExtract(q4, int(8u * e), 8));
                uint xi = b * 32u + 4u * j + e;
                for (uint k = 0u; k < TILE; k++)
                    s[k] = fma(q, x[xb[k] + xi], s[k]);
            }
        }
        for (uint k = 0u; k < TILE; k++)
            acc[k] = fma(d, s[k], acc[k]);
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
