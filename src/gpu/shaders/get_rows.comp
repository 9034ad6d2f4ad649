// Embedding lookup: y[t] = row ids[t] of a weight table (n_rows, n) in its file type, decoded to
// f32 exactly as tl_dequantize_row decodes it (every decode below is exact in f32 but the K-quant
// minimum's one subtraction, done in the CPU's order), so the rows are bit-identical to the
// CPU's. type: 0 F32, 1 F16, 30 BF16, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K (core/dtype.h numbers);
// n a multiple of the type's block. One workgroup per token; an id outside the table gives a
// row of zeros (the host checks ids; this keeps a bad one from reading past the table).
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_tok; uint n; uint n_rows; uint type; uint row_bytes; } p;

uint byte_at(uint o)
{
    return (w[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu;
}

float half_at(uint o) // o even
{
    return unpackHalf2x16((w[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu).x;
}

// K-quant 6-bit scale (which 0) or min (1) of sub-block j from the 12 bytes at o.
uint scale_min(uint o, uint j, uint which)
{
    if (j < 4u)
        return byte_at(o + j + 4u * which) & 63u;
    uint b = byte_at(o + j + 4u);
    return which == 0u ? (b & 0xFu) | ((byte_at(o + j - 4u) >> 6) << 4)
                       : (b >> 4) | ((byte_at(o + j) >> 6) << 4);
}

float decode(uint rb, uint i)
{
    if (p.type == 0u)
        return uintBitsToFloat(w[(rb >> 2) + i]);
    if (p.type == 1u)
        return half_at(rb + 2u * i);
    if (p.type == 30u) {
        uint o = rb + 2u * i;
        return uintBitsToFloat(((w[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu) << 16);
    }
    if (p.type == 8u) {
        uint o = rb + (i / 32u) * 34u;
        return half_at(o) * float(bitfieldExtract(int(byte_at(o + 2u + i % 32u)), 0, 8));
    }
    uint r = i % 256u;
    if (p.type == 12u || p.type == 13u) {
        uint sz = p.type == 12u ? 144u : 176u, qs = p.type == 12u ? 16u : 48u;
        uint o = rb + (i / 256u) * sz, j = r / 64u, h = (r / 32u) % 2u, l = r % 32u;
        vec2 dm = unpackHalf2x16(w[o >> 2]);
        uint q = byte_at(o + qs + 32u * j + l);
        q = h == 0u ? (q & 0xFu) : (q >> 4);
        if (p.type == 13u)
            q |= ((byte_at(o + 16u + l) >> (2u * j + h)) & 1u) << 4;
        float d1 = dm.x * float(scale_min(o + 4u, 2u * j + h, 0u));
        float m1 = dm.y * float(scale_min(o + 4u, 2u * j + h, 1u));
        precise float v = d1 * float(q) - m1;
        return v;
    }
    // Q6_K
    uint o = rb + (i / 256u) * 210u, n = r / 128u, g = (r % 128u) / 32u, l = r % 32u;
    uint ql = byte_at(o + 64u * n + l + 32u * (g & 1u));
    uint lo = g < 2u ? (ql & 0xFu) : (ql >> 4);
    uint hi = (byte_at(o + 128u + 32u * n + l) >> (2u * g)) & 3u;
    int sc = bitfieldExtract(int(byte_at(o + 192u + 8u * n + l / 16u + 2u * g)), 0, 8);
    return (half_at(o + 208u) * float(sc)) * float(int(lo | (hi << 4)) - 32);
}

void main()
{
    uint t = gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
    int id = ids[t];
    bool ok = id >= 0 && uint(id) < p.n_rows;
    uint rb = ok ? uint(id) * p.row_bytes : 0u;
    for (uint i = l; i < p.n; i += 64u)
        y[t * p.n + i] = ok ? decode(rb, i) : 0.0;
}
