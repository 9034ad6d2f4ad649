// RoPE in place on x (n_tok, n_heads, head_dim), the CPU's definition (kernels/ref.c):
// for pair i < head_dim/2 of every head of token t, with (c, s) = table[pos[t]][i]
//   normal (mode 0, Llama GGUF layout): (x[2i], x[2i+1])   <- (a*c - b*s, a*s + b*c)
//   neox   (mode 2, Qwen2):             (x[i], x[i+d/2])   <- same
// The cos/sin table is computed on the host exactly as the CPU computes it (double angles,
// gpu_ops.c tl_gpu_rope_table_fill) and the products are `precise` (no fused multiply-add), so
// the result equals tl_rope bit for bit. A position outside the table leaves its row unchanged
// (the caller guarantees pos < n_table; this only keeps a bad position from reading past it).
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer T { float cs[]; }; // (n_table, head_dim/2, 2)
layout(std430, binding = 2) readonly buffer Pos { int pos[]; };  // (n_tok)
layout(push_constant) uniform P { uint n_tok; uint n_heads; uint head_dim; uint mode; uint n_table; } p;

void main()
{
    uint t = gl_WorkGroupID.x;
    int ps = pos[t];
    if (ps < 0 || uint(ps) >= p.n_table)
        return;
    uint half_d = p.head_dim / 2u;
    uint tb = uint(ps) * half_d * 2u;
    for (uint k = gl_LocalInvocationID.x; k < p.n_heads * half_d; k += 64u) {
        uint h = k / half_d, i = k % half_d;
        uint base = (t * p.n_heads + h) * p.head_dim;
        uint i0 = p.mode == 2u ? base + i : base + 2u * i;
        uint i1 = p.mode == 2u ? base + i + half_d : base + 2u * i + 1u;
        float c = cs[tb + 2u * i], s = cs[tb + 2u * i + 1u];
        float a = x[i0], b = x[i1];
        precise float ac = a * c, bs = b * s, as_ = a * s, bc = b * c;
        precise float r0 = ac - bs, r1 = as_ + bc;
        x[i0] = r0;
        x[i1] = r1;
    }
}
