// Elementwise ops over n floats, the CPU's definitions (kernels/ref.c):
//   op 0 add:    y[i] = a[i] + b[i]                      (tl_add)
//   op 1 mul:    y[i] = a[i] * b[i]
//   op 2 swiglu: y[i] = a[i] / (1 + exp(-a[i])) * b[i]   (tl_swiglu: a = gate, b = up)
//   op 3 bias:   y[i] = a[i] + b[i % nb]                 (tl_add of one row b to every row of a)
// add and mul are correctly rounded in Vulkan, so they equal the CPU bit for bit; swiglu uses the
// device's exp and division (Vulkan's precision table: exp 3 + 2|x| ULP, division 2.5 ULP).
// y may alias a or b. A grid-stride loop covers any n with at most 65535 workgroups.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; uint op; uint nb; } p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        precise float v;
        if (p.op == 0u)
            v = a[i] + b[i];
        else if (p.op == 3u)
            v = a[i] + b[i % p.nb];
        else if (p.op == 1u)
            v = a[i] * b[i];
        else {
            float g = a[i];
            v = g / (1.0 + exp(-g)) * b[i];
        }
        y[i] = v;
    }
}
