/*
 * The KServe v2 LLM tensors and their raw decoding (see kserve_tensors.h).
 *
 * Every count is checked against TL_KSERVE_MAX_ELEMENTS and every length against the bytes
 * left before anything is stored; a fault is one message naming the input.
 *
 * Threads: none of its own; pure.
 */
#include "front/kserve_tensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const struct tl_kserve_tensor_desc tl_kserve_inputs[] = {
    {"text_input", "BYTES", false}, {"stream", "BOOL", true},
    {"max_tokens", "INT32", true},  {"temperature", "FP32", true},
    {"top_p", "FP32", true},        {"top_k", "INT32", true},
    {"seed", "UINT64", true},       {"stop", "BYTES", true},
    {"ignore_eos", "BOOL", true},   {"sampling_parameters", "BYTES", true},
};
const int tl_kserve_n_inputs = (int)(sizeof(tl_kserve_inputs) / sizeof(tl_kserve_inputs[0]));

static bool fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

int tl_kserve_input_index(const char *name)
{
    for (int i = 0; i < tl_kserve_n_inputs; i++)
        if (!strcmp(tl_kserve_inputs[i].name, name)) return i;
    return -1;
}

static const struct tl_kserve_dtype dtypes[] = {
    {"BYTES", TL_KSERVE_BYTES, 0, false}, {"BOOL", TL_KSERVE_BOOL, 1, false},
    {"INT8", TL_KSERVE_INT, 1, false},    {"INT16", TL_KSERVE_INT, 2, false},
    {"INT32", TL_KSERVE_INT, 4, false},   {"INT64", TL_KSERVE_INT, 8, false},
    {"UINT8", TL_KSERVE_INT, 1, true},    {"UINT16", TL_KSERVE_INT, 2, true},
    {"UINT32", TL_KSERVE_INT, 4, true},   {"UINT64", TL_KSERVE_INT, 8, true},
    {"FP32", TL_KSERVE_FLOAT, 4, false},  {"FP64", TL_KSERVE_FLOAT, 8, false},
};

const struct tl_kserve_dtype *tl_kserve_dtype_find(const char *name)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
        if (!strcmp(dtypes[i].name, name)) return &dtypes[i];
    return NULL;
}

static uint64_t le(const uint8_t *p, int size)
{
    uint64_t v = 0;
    for (int k = size - 1; k >= 0; k--)
        v = (v << 8) | p[k];
    return v;
}

static int64_t sign_extend(uint64_t v, int size)
{
    if (size >= 8) return (int64_t)v;
    uint64_t m = 1ull << (size * 8 - 1);
    return (int64_t)((v ^ m) - m);
}

bool tl_kserve_read_raw(const char *name, const struct tl_kserve_dtype *dt, const uint8_t *p,
                        size_t n, struct tl_kserve_elems *e, char *err, size_t cap)
{
    if (dt->kind == TL_KSERVE_BYTES) {
        int64_t k = 0;
        size_t at = 0;
        while (at < n) {
            if (n - at < 4)
                return fail(err, cap, "input '%s': raw BYTES contents end inside a length prefix",
                            name);
            uint64_t l = le(p + at, 4);
            at += 4;
            if (l > n - at)
                return fail(err, cap,
                            "input '%s': raw BYTES element %lld claims %llu bytes, %zu left", name,
                            (long long)k, (unsigned long long)l, n - at);
            if (k >= TL_KSERVE_MAX_ELEMENTS)
                return fail(err, cap, "input '%s' holds more than %d elements", name,
                            TL_KSERVE_MAX_ELEMENTS);
            e->bytes[k] = p + at;
            e->len[k] = (size_t)l;
            k++;
            at += (size_t)l;
        }
        e->n = k;
        return true;
    }
    if (n % (size_t)dt->size)
        return fail(err, cap, "input '%s': raw contents of %zu bytes are not whole %s elements",
                    name, n, dt->name);
    size_t k = n / (size_t)dt->size;
    if (k > TL_KSERVE_MAX_ELEMENTS)
        return fail(err, cap, "input '%s' holds more than %d elements", name,
                    TL_KSERVE_MAX_ELEMENTS);
    for (size_t j = 0; j < k; j++) {
        uint64_t v = le(p + j * (size_t)dt->size, dt->size);
        if (dt->kind == TL_KSERVE_BOOL) {
            e->b[j] = v != 0;
        } else if (dt->kind == TL_KSERVE_INT) {
            e->i[j] = dt->is_unsigned ? (int64_t)v : sign_extend(v, dt->size);
        } else if (dt->size == 4) {
            uint32_t u = (uint32_t)v;
            float f;
            memcpy(&f, &u, 4);
            e->f[j] = f;
        } else {
            double d;
            memcpy(&d, &v, 8);
            e->f[j] = d;
        }
    }
    e->n = (int64_t)k;
    return true;
}

bool tl_kserve_one(const char *name, const struct tl_kserve_elems *e, char *err, size_t cap)
{
    if (e->n != 1)
        return fail(err, cap, "input '%s' must hold exactly one element, got %lld", name,
                    (long long)e->n);
    return true;
}

bool tl_kserve_want_kind(const char *name, const char *datatype, const struct tl_kserve_elems *e,
                         enum tl_kserve_kind k, const char *expected, char *err, size_t cap)
{
    if (e->kind != k)
        return fail(err, cap, "input '%s' has datatype %s; expected %s", name, datatype, expected);
    return true;
}
