// Stores one row per token (n_tok rows of `row` = n_kv_head * head_dim f32) into a paged K or V
// pool at the token's position, through its sequence's block table: the element order of
// kernels.h's tl_kv_layer, element ((b * block_size + s) * row + i) for position
// pos = b_logical * block_size + s and b = table[b_logical]. meta (int32): meta[2t] = the token's
// position, meta[2t + 1] = the index in meta where its sequence's block table starts.
// kv_type 0: f32 pool; 1: f16 pool (row even), converted with round-to-nearest-even exactly as
// tl_f32_to_fp16 (overflow to inf, NaN stays NaN) done here in integer arithmetic, so the bytes
// equal the CPU's tl_kv_store whatever the device's own conversion does. kv_type 2: Q8_0 pool
// (head_dim a multiple of 32): each block of 32 quantized exactly as tl_quantize_row (d = amax /
// 127 and 1 / d correctly rounded here from the device's division and exact fma residuals,
// q = x * (1/d) rounded half away from zero, d stored as f16), so again the bytes are the CPU's
// (for finite, normal inputs). A position's Q8_0 row starts on a 2-byte boundary, so its first
// and last words may be shared with the neighbouring positions' rows: those are merged with
// atomics, the rest written whole. Block ids are the caller's to get right; one outside the pool
// (or meta) is skipped, never written through.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) buffer Pool { uint pool[]; };
layout(std430, binding = 2) readonly buffer Meta { int meta[]; };
layout(push_constant) uniform P { uint n_tok; uint row; uint block_size; uint kv_type; uint n_blocks; uint n_meta; } p;
#define SH_WORDS 2048u // Q8_0 rows of up to 8188 bytes (the host checks)
shared uint sh[SH_WORDS];

// a / b rounded to nearest even, for a >= 0 and b > 0 finite and normal: the device's division
// (Vulkan allows 2.5 ULP) corrected by comparing exact fma residuals of the nearby floats.
float div_rn(float a, float b)
{
    if (a == 0.0)
        return 0.0;
    float q = a / b, best = q;
    precise float r0 = fma(-q, b, a);
    float best_r = abs(r0);
    for (int k = -4; k <= 4; k++) {
        float c = uintBitsToFloat(uint(int(floatBitsToUint(q)) + k));
        precise float rc = fma(-c, b, a);
        float r = abs(rc);
        if (r < best_r || (r == best_r && (floatBitsToUint(c) & 1u) == 0u)) {
            best = c;
            best_r = r;
        }
    }
    return best;
}

// roundf: to nearest, ties away from zero (|v| < 2^23 here).
float round_away(float v)
{
    float a = abs(v), t = trunc(a);
    if (a - t >= 0.5)
        t += 1.0;
    return v < 0.0 ? -t : t;
}

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
    if (p.kv_type == 2u) {
        uint nb = p.row / 32u, start = base / 32u * 34u, shift = start & 3u;
        uint nw = (shift + nb * 34u + 3u) / 4u;
        for (uint i = l; i < nw; i += 64u)
            sh[i] = 0u;
        barrier();
        for (uint k = l; k < nb; k += 64u) {
            uint x0 = t * p.row + 32u * k;
            float amax = 0.0;
            for (uint j = 0u; j < 32u; j++)
                amax = max(amax, abs(src[x0 + j]));
            float d = div_rn(amax, 127.0);
            float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
            uint o = shift + 34u * k, dh = f32_to_f16(d);
            atomicOr(sh[o >> 2], (dh & 0xFFu) << ((o & 3u) * 8u));
            atomicOr(sh[(o + 1u) >> 2], (dh >> 8) << (((o + 1u) & 3u) * 8u));
            for (uint j = 0u; j < 32u; j++) {
                precise float v = src[x0 + j] * id;
                float qf = clamp(round_away(v), -127.0, 127.0);
                uint qb = uint(int(qf)) & 0xFFu, ob = o + 2u + j;
                atomicOr(sh[ob >> 2], qb << ((ob & 3u) * 8u));
            }
        }
        barrier();
        uint end = shift + nb * 34u; // bytes of the last word used: end - 4 (nw - 1)
        for (uint i = l; i < nw; i += 64u) {
            uint lo = i == 0u ? shift : 0u, hi = i == nw - 1u ? end - 4u * i : 4u;
            uint mask = (hi == 4u ? 0xFFFFFFFFu : (1u << (8u * hi)) - 1u) & ~((1u << (8u * lo)) - 1u);
            uint w = (start >> 2) + i;
            if (mask == 0xFFFFFFFFu) {
                pool[w] = sh[i];
            } else {
                atomicAnd(pool[w], ~mask);
                atomicOr(pool[w], sh[i] & mask);
            }
        }
        return;
    }
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
