// y[t][r] = sum_i W[r][i] * x[t][i], W in F32 rows (n_out, n_in); x (n_tok, n_in); y (n_tok, n_out).
// One workgroup of 32 invocations per output row and tile of 4 tokens (each weight element read
// once per tile). The reduction order of every output element is fixed, whatever n_tok and
// wherever the token sits in its tile: invocation l sums elements i = l, l+32, l+64, ... in
// increasing order with fma() (fused where the device fuses it; lavapipe does a multiply and an
// add: either way the same operations in the same order for every token), then a fixed
// binary tree over the 32 partial sums. So a row's result is bit-identical alone and in a batch.
// Workgroups: x * y covers the rows (row = wg.y * num_wg.x + wg.x), z the token tiles.
#version 450
#define TILE 4u
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_in; uint n_out; uint n_tok; } p;
shared float part[TILE][32];

void main()
{
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= p.n_out)
        return; // the whole workgroup: barriers below stay in uniform control flow
    uint t0 = gl_WorkGroupID.z * TILE, l = gl_LocalInvocationID.x;
    uint xb[TILE];
    for (uint k = 0u; k < TILE; k++)
        xb[k] = min(t0 + k, p.n_tok - 1u) * p.n_in; // past the batch: read a real row, discard
    precise float acc[TILE];
    for (uint k = 0u; k < TILE; k++)
        acc[k] = 0.0;
    uint wb = row * p.n_in;
    for (uint i = l; i < p.n_in; i += 32u) {
        float wv = w[wb + i];
        for (uint k = 0u; k < TILE; k++)
            acc[k] = fma(wv, x[xb[k] + i], acc[k]);
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
