// Stores one row per token (n_tok rows of `row` = n_kv_head * head_dim f32) into a paged K or V
// pool at the token's position, through its sequence's block table: the element order of
// kernels.h's tl_kv_layer, element ((b * block_size + s) * row + i) for position
// pos = b_logical * block_size + s and b = table[b_logical]. meta (int32): meta[2t] = the token's
// position, meta[2t + 1] = the index in meta where its sequence's block table starts.
// kv_type 0: f32 pool; 1: f16 pool (row even), converted with round-to-nearest-even exactly as
// tl_f32_to_fp16 (overflow to inf, NaN stays NaN) done here in integer arithmetic, so the bytes
// equal the CPU's tl_kv_store whatever the device's own conversion does. Block ids are the
// caller's to get right; one outside the pool (or meta) is skipped, never written through.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) buffer Pool { uint pool[]; };
layout(std430, binding = 2) readonly buffer Meta { int meta[]; };
layout(push_constant) uniform P { uint n_tok; uint row; uint block_size; uint kv_type; uint n_blocks; uint n_meta; } p;

uint f32_to_f16(float f)
{
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u, a = x & 0x7FFFFFFFu;
    if (a >= 0x7F800000u)
        return sign | (a > 0x7F800000u ? 0x7E00u : 0x7C00u); // NaN (quiet), inf
    if (a >= 0x477FF000u)
        return sign | 0x7C00u; // >= 65520 rounds to inf
    if (a < 0x38800000u) {     // below 2^-14: an f16 subnormal or zero
        if (a <= 0x33000000u)
            return sign; // <= 2^-25 rounds to zero (the tie goes to even)
        uint e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
        uint q = m >> shift, rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (q & 1u) != 0u))
            q++;
        return sign | q;
    }
    uint r = a - 0x38000000u; // rebias the exponent from 127 to 15
    uint q = r >> 13, rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u))
        q++;
    return sign | q;
}

void main()
{
    uint t = gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
    uint pos = uint(meta[2u * t]), table = uint(meta[2u * t + 1u]);
    uint bi = table + pos / p.block_size;
    if (bi >= p.n_meta)
        return; // a table outside meta: nothing to store (the host checks; this keeps it safe)
    uint b = uint(meta[bi]);
    if (b >= p.n_blocks)
        return; // a block outside the pool, likewise
    uint base = (b * p.block_size + pos % p.block_size) * p.row;
    if (p.kv_type == 0u) {
        for (uint i = l; i < p.row; i += 64u)
            pool[base + i] = floatBitsToUint(src[t * p.row + i]);
    } else {
        for (uint i = l; i < p.row / 2u; i += 64u) {
            uint lo = f32_to_f16(src[t * p.row + 2u * i]), hi = f32_to_f16(src[t * p.row + 2u * i + 1u]);
            pool[base / 2u + i] = lo | (hi << 16);
        }
    }
}
