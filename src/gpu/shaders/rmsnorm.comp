// RMSNorm of one row per workgroup, the CPU's definition (kernels/ref.c tl__ref_rmsnorm):
//   y[i] = x[i] * w[i] / sqrt(mean(x^2) + eps)
// The sum of squares is reduced in one fixed order per row (each invocation strides the row,
// then a fixed binary tree in shared memory), whatever the number of rows: batch-invariant.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; float eps; } p;
shared float part[256];

void main()
{
    uint row = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    uint base = row * p.n;
    float s = 0.0;
    for (uint i = t; i < p.n; i += 256u)
        s += x[base + i] * x[base + i];
    part[t] = s;
    barrier();
    for (uint h = 128u; h > 0u; h >>= 1) {
        if (t < h)
            part[t] += part[t + h];
        barrier();
    }
    float scale = inversesqrt(part[0] / float(p.n) + p.eps);
    for (uint i = t; i < p.n; i += 256u)
        y[base + i] = x[base + i] * scale * w[i];
}
