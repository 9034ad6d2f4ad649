// y[t][r] = sum_i W[r][i] * x[t][i], W in F16 rows (n_out, n_in; n_in even, so every row starts
// on a 4-byte word); x (n_tok, n_in) f32; y (n_tok, n_out) f32. Same shape and the same fixed
// reduction order as mm_f32.comp, with unit = one word (two f16 values, in order): invocation l
// takes words j = l, l+32, ..., then the fixed tree. Batch-invariant bit for bit.
#version 450
#define TILE 4u
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_in; uint n_out; uint n_tok; } p;
shared float part[TILE][32];

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
    uint n_words = p.n_in / 2u, wb = row * n_words;
    for (uint j = l; j < n_words; j += 32u) {
        vec2 wv = unpackHalf2x16(w[wb + j]);
        for (uint k = 0u; k < TILE; k++) {
            acc[k] = fma(wv.x, x[xb[k] + 2u * j], acc[k]);
            acc[k] = fma(wv.y, x[xb[k] + 2u * j + 1u], acc[k]);
        }
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
