/*
 * Reading the LLM tensors of a ModelInferRequest (see grpc_infer.h): the protobuf side (typed
 * `contents`, shapes, which raw entry) here, the datatypes and the raw form in
 * front/kserve_tensors.c.
 *
 * Every input is checked before anything is used: its name is known and given once, its
 * datatype is one its kind accepts, its shape has non-negative dimensions whose product is the
 * number of elements the data holds (from `contents` or the matching `raw_input_contents`
 * entry, never both), and its values are in range. sampling_parameters (a JSON object) is
 * applied first, so explicit tensors override it. Each fault becomes one message naming the
 * input; the server answers it as INVALID_ARGUMENT.
 *
 * Ownership: the request stays the caller's; tl_grpc_gen owns copies of the prompt and stops.
 * Threads: none of its own; pure.
 */
#include "grpc/grpc_infer.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

// Reads the typed `contents` of one input: the field of its datatype.
static bool read_contents(const char *name, const struct tl_kserve_dtype *dt,
                          const Inference__InferTensorContents *c, struct tl_kserve_elems *e,
                          char *err, size_t cap)
{
    size_t n = 0;
    if (c) {
        if (dt->kind == TL_KSERVE_BYTES)
            n = c->n_bytes_contents;
        else if (dt->kind == TL_KSERVE_BOOL)
            n = c->n_bool_contents;
        else if (!strcmp(dt->name, "INT64"))
            n = c->n_int64_contents;
        else if (!strcmp(dt->name, "UINT64"))
            n = c->n_uint64_contents;
        else if (dt->kind == TL_KSERVE_INT)
            n = dt->is_unsigned ? c->n_uint_contents : c->n_int_contents;
        else
            n = dt->size == 4 ? c->n_fp32_contents : c->n_fp64_contents;
    }
    if (n > TL_KSERVE_MAX_ELEMENTS)
        return fail(err, cap, "input '%s' holds more than %d elements", name,
                    TL_KSERVE_MAX_ELEMENTS);
    for (size_t j = 0; j < n; j++) {
        if (dt->kind == TL_KSERVE_BYTES) {
            e->bytes[j] = c->bytes_contents[j].data;
            e->len[j] = c->bytes_contents[j].len;
        } else if (dt->kind == TL_KSERVE_BOOL) {
            e->b[j] = c->bool_contents[j] != 0;
        } else if (!strcmp(dt->name, "INT64")) {
            e->i[j] = c->int64_contents[j];
        } else if (!strcmp(dt->name, "UINT64")) {
            e->i[j] = (int64_t)c->uint64_contents[j];
        } else if (dt->kind == TL_KSERVE_INT) {
            e->i[j] = dt->is_unsigned ? (int64_t)c->uint_contents[j] : c->int_contents[j];
        } else {
            e->f[j] = dt->size == 4 ? c->fp32_contents[j] : c->fp64_contents[j];
        }
    }
    e->n = (int64_t)n;
    return true;
}

// The datatype, shape and data of input idx, checked against each other.
static bool read_input(const Inference__ModelInferRequest *r, size_t idx, struct tl_kserve_elems *e,
                       char *err, size_t cap)
{
    const Inference__ModelInferRequest__InferInputTensor *t = r->inputs[idx];
    const struct tl_kserve_dtype *dt = tl_kserve_dtype_find(t->datatype);
    if (!dt) return fail(err, cap, "input '%s' has unknown datatype '%s'", t->name, t->datatype);
    memset(e, 0, sizeof(*e));
    e->kind = dt->kind;
    e->is_unsigned = dt->is_unsigned;
    int64_t want = 1;
    for (size_t d = 0; d < t->n_shape; d++) {
        if (t->shape[d] < 0)
            return fail(err, cap, "input '%s' has a negative dimension in its shape", t->name);
        if (t->shape[d] > TL_KSERVE_MAX_ELEMENTS || want * t->shape[d] > TL_KSERVE_MAX_ELEMENTS)
            want = TL_KSERVE_MAX_ELEMENTS + 1; // too many either way; stays above the bound
        else
            want *= t->shape[d];
    }
    if (t->n_shape == 0) return fail(err, cap, "input '%s' has no shape", t->name);
    bool raw = r->n_raw_input_contents > 0;
    if (raw && t->contents)
        return fail(err, cap, "input '%s' has both contents and raw_input_contents", t->name);
    bool ok = raw ? tl_kserve_read_raw(t->name, dt, r->raw_input_contents[idx].data,
                                       r->raw_input_contents[idx].len, e, err, cap)
                  : read_contents(t->name, dt, t->contents, e, err, cap);
    if (!ok) return false;
    if (want > TL_KSERVE_MAX_ELEMENTS)
        return fail(err, cap, "input '%s': its shape asks for more than %d elements", t->name,
                    TL_KSERVE_MAX_ELEMENTS);
    if (e->n != want)
        return fail(err, cap, "input '%s': its shape holds %lld element(s) but its data %lld",
                    t->name, (long long)want, (long long)e->n);
    return true;
}

static bool set_int(const char *name, int64_t v, int64_t lo, int64_t hi, int64_t *out, char *err,
                    size_t cap)
{
    if (v < lo || v > hi)
        return fail(err, cap, "'%s' must be between %lld and %lld, got %lld", name, (long long)lo,
                    (long long)hi, (long long)v);
    *out = v;
    return true;
}

static bool set_float(const char *name, double v, double lo, double hi, bool lo_open, float *out,
                      char *err, size_t cap)
{
    if (!isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo))
        return fail(err, cap, "'%s' must be %s %g and at most %g, got %g", name,
                    lo_open ? "above" : "at least", lo, hi, v);
    *out = (float)v;
    return true;
}

static bool add_stop(struct tl_grpc_gen *g, const uint8_t *s, size_t len, char *err, size_t cap)
{
    if (g->n_stop >= TL_GRPC_MAX_STOP)
        return fail(err, cap, "'stop' may hold at most %d strings", TL_GRPC_MAX_STOP);
    if (len == 0 || len > TL_GRPC_MAX_STOP_LEN)
        return fail(err, cap, "a 'stop' string must have 1 to %d bytes", TL_GRPC_MAX_STOP_LEN);
    if (memchr(s, 0, len)) return fail(err, cap, "a 'stop' string may not contain NUL");
    char *c = malloc(len + 1);
    if (!c) return fail(err, cap, "out of memory");
    memcpy(c, s, len);
    c[len] = 0;
    g->stop[g->n_stop++] = c;
    return true;
}

static void clear_stops(struct tl_grpc_gen *g)
{
    for (int i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    g->n_stop = 0;
}

// sampling_parameters: a JSON object (Triton's vLLM backend), keys as the tensors.
static bool apply_json(struct tl_grpc_gen *g, const uint8_t *text, size_t len, char *err,
                       size_t cap)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return fail(err, cap, "'sampling_parameters' is not a JSON object%s%s", root ? "" : ": ",
                    root ? "" : je.text);
    }
    bool ok = true;
    const char *key;
    json_t *v;
    int64_t iv = 0;
    json_object_foreach(root, key, v)
    {
        bool is_num = json_is_number(v), is_int = json_is_integer(v);
        if (!strcmp(key, "max_tokens") && is_int) {
            ok = set_int("max_tokens", json_integer_value(v), 1, INT32_MAX, &iv, err, cap);
            if (ok) g->max_tokens = (int32_t)iv;
        } else if (!strcmp(key, "top_k") && is_int) {
            ok = set_int("top_k", json_integer_value(v), -1, INT32_MAX, &iv, err, cap);
            if (ok) g->sampling.top_k = iv < 0 ? 0 : (int32_t)iv;
        } else if (!strcmp(key, "seed") && is_int) {
            g->sampling.seed = (uint64_t)json_integer_value(v);
            g->seed_set = true;
        } else if (!strcmp(key, "temperature") && is_num) {
            ok = set_float("temperature", json_number_value(v), 0, 2, false,
                           &g->sampling.temperature, err, cap);
        } else if (!strcmp(key, "top_p") && is_num) {
            ok = set_float("top_p", json_number_value(v), 0, 1, true, &g->sampling.top_p, err, cap);
        } else if (!strcmp(key, "ignore_eos") && json_is_boolean(v)) {
            g->ignore_eos = json_is_true(v);
        } else if (!strcmp(key, "stop") && json_is_string(v)) {
            clear_stops(g);
            ok =
                add_stop(g, (const uint8_t *)json_string_value(v), json_string_length(v), err, cap);
        } else if (!strcmp(key, "stop") && json_is_array(v)) {
            clear_stops(g);
            size_t i;
            json_t *s;
            json_array_foreach(v, i, s)
            {
                if (!ok) break;
                if (!json_is_string(s)) {
                    ok = fail(err, cap, "'stop' must hold only strings");
                    break;
                }
                ok = add_stop(g, (const uint8_t *)json_string_value(s), json_string_length(s), err,
                              cap);
            }
        } else {
            ok = fail(err, cap,
                      "'sampling_parameters': '%s' is unknown or has the wrong type (known: "
                      "max_tokens, temperature, top_p, top_k, seed, stop, ignore_eos)",
                      key);
        }
        if (!ok) break;
    }
    json_decref(root);
    return ok;
}

// Applies one typed input (not sampling_parameters).
static bool apply_input(struct tl_grpc_gen *g, const char *name, const char *datatype,
                        const struct tl_kserve_elems *e, char *err, size_t cap)
{
    int64_t iv = 0;
    if (!strcmp(name, "text_input")) {
        if (!tl_kserve_want_kind(name, datatype, e, TL_KSERVE_BYTES, "BYTES", err, cap) ||
            !tl_kserve_one(name, e, err, cap))
            return false;
        if (e->len[0] == 0) return fail(err, cap, "input 'text_input' is empty");
        g->prompt = malloc(e->len[0] + 1);
        if (!g->prompt) return fail(err, cap, "out of memory");
        memcpy(g->prompt, e->bytes[0], e->len[0]);
        g->prompt[e->len[0]] = 0;
        g->prompt_len = e->len[0];
        return true;
    }
    if (!strcmp(name, "stop")) {
        if (!tl_kserve_want_kind(name, datatype, e, TL_KSERVE_BYTES, "BYTES", err, cap))
            return false;
        clear_stops(g);
        for (int64_t i = 0; i < e->n; i++)
            if (!add_stop(g, e->bytes[i], e->len[i], err, cap)) return false;
        return true;
    }
    if (!strcmp(name, "stream") || !strcmp(name, "ignore_eos")) {
        if (!tl_kserve_want_kind(name, datatype, e, TL_KSERVE_BOOL, "BOOL", err, cap) ||
            !tl_kserve_one(name, e, err, cap))
            return false;
        *(!strcmp(name, "stream") ? &g->stream : &g->ignore_eos) = e->b[0];
        return true;
    }
    if (!strcmp(name, "temperature") || !strcmp(name, "top_p")) {
        if (!tl_kserve_want_kind(name, datatype, e, TL_KSERVE_FLOAT, "FP32 (or FP64)", err, cap) ||
            !tl_kserve_one(name, e, err, cap))
            return false;
        if (!strcmp(name, "temperature"))
            return set_float(name, e->f[0], 0, 2, false, &g->sampling.temperature, err, cap);
        return set_float(name, e->f[0], 0, 1, true, &g->sampling.top_p, err, cap);
    }
    if (!strcmp(name, "seed")) {
        if (!tl_kserve_want_kind(name, datatype, e, TL_KSERVE_INT,
                                 "UINT64 (or another integer type)", err, cap) ||
            !tl_kserve_one(name, e, err, cap))
            return false;
        g->sampling.seed = (uint64_t)e->i[0];
        g->seed_set = true;
        return true;
    }
    // max_tokens, top_k
    if (!tl_kserve_want_kind(name, datatype, e, TL_KSERVE_INT, "INT32 (or another integer type)",
                             err, cap) ||
        !tl_kserve_one(name, e, err, cap))
        return false;
    if (e->is_unsigned && e->i[0] < 0)
        return fail(err, cap, "'%s' is too large", name); // a uint64 above INT64_MAX
    if (!strcmp(name, "max_tokens")) {
        if (!set_int(name, e->i[0], 1, INT32_MAX, &iv, err, cap)) return false;
        g->max_tokens = (int32_t)iv;
        return true;
    }
    if (!set_int(name, e->i[0], -1, INT32_MAX, &iv, err, cap)) return false;
    g->sampling.top_k = iv < 0 ? 0 : (int32_t)iv; // -1 means off, as in vLLM
    return true;
}

void tl_grpc_gen_free(struct tl_grpc_gen *g)
{
    if (!g) return;
    free(g->prompt);
    clear_stops(g);
    memset(g, 0, sizeof(*g));
}

bool tl_grpc_gen_parse(const Inference__ModelInferRequest *r, struct tl_grpc_gen *g, char *err,
                       size_t cap)
{
    memset(g, 0, sizeof(*g));
    tl_sampling_default(&g->sampling);
    g->max_tokens = 16;
    if (r->n_raw_input_contents && r->n_raw_input_contents != r->n_inputs)
        return fail(err, cap, "raw_input_contents has %zu entries for %zu inputs",
                    r->n_raw_input_contents, r->n_inputs);
    for (size_t i = 0; i < r->n_outputs; i++)
        if (strcmp(r->outputs[i]->name, "text_output"))
            return fail(err, cap, "unknown output '%s'; this model has only 'text_output'",
                        r->outputs[i]->name);
    // Names first: each known and given once. sampling_parameters goes before the tensors.
    int seen[16] = {0};
    for (size_t i = 0; i < r->n_inputs; i++) {
        int k = tl_kserve_input_index(r->inputs[i]->name);
        if (k < 0)
            return fail(err, cap,
                        "unknown input '%s' (inputs: text_input, stream, max_tokens, "
                        "temperature, top_p, top_k, seed, stop, ignore_eos, sampling_parameters)",
                        r->inputs[i]->name);
        if (seen[k]++) return fail(err, cap, "input '%s' is given twice", r->inputs[i]->name);
    }
    if (!seen[0]) return fail(err, cap, "the required input 'text_input' is missing");
    struct tl_kserve_elems *e = malloc(sizeof(*e));
    if (!e) return fail(err, cap, "out of memory");
    bool ok = true;
    for (int pass = 0; pass < 2 && ok; pass++) {
        for (size_t i = 0; i < r->n_inputs && ok; i++) {
            const char *name = r->inputs[i]->name;
            bool is_json = !strcmp(name, "sampling_parameters");
            if (is_json != (pass == 0)) continue;
            ok = read_input(r, i, e, err, cap);
            if (!ok) break;
            if (is_json) {
                ok = tl_kserve_want_kind(name, r->inputs[i]->datatype, e, TL_KSERVE_BYTES, "BYTES",
                                         err, cap) &&
                     tl_kserve_one(name, e, err, cap) &&
                     apply_json(g, e->bytes[0], e->len[0], err, cap);
            } else {
                ok = apply_input(g, name, r->inputs[i]->datatype, e, err, cap);
            }
        }
    }
    free(e);
    if (!ok) tl_grpc_gen_free(g);
    return ok;
}
