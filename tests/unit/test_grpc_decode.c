/*
 * The gRPC front's message handling without a network: ModelInferRequest -> generation
 * parameters (src/grpc/grpc_infer.c) on hand-built requests with known values, every rejected
 * shape of input with its message, the response encoding read back with protobuf-c, and a
 * deterministic fuzz pass: valid requests built at random (each must parse to the values it was
 * built with), then mutated bytes and pure noise through protobuf-c's decoder and the parser
 * (no crash, and each rejection carries a message; each acceptance satisfies the ranges).
 */
#include "tl_test.h"

#include "grpc/grpc_infer.h"
#include "grpc/grpc_reply.h"

#include <math.h>

// ---- builders --------------------------------------------------------------------------------

struct req_builder {
    Inference__ModelInferRequest r;
    Inference__ModelInferRequest__InferInputTensor t[12];
    Inference__ModelInferRequest__InferInputTensor *tp[12];
    Inference__InferTensorContents c[12];
    int64_t shape[12][2];
    ProtobufCBinaryData bytes[12][4];
    int32_t i32[12];
    int64_t i64[12];
    uint64_t u64[12];
    float f32[12];
    double f64[12];
    protobuf_c_boolean b[12];
    ProtobufCBinaryData raw[12];
    uint8_t rawbuf[12][64];
};

static void rb_init(struct req_builder *b)
{
    memset(b, 0, sizeof(*b));
    inference__model_infer_request__init(&b->r);
    b->r.inputs = b->tp;
}

static Inference__ModelInferRequest__InferInputTensor *rb_add(struct req_builder *b,
                                                              const char *name, const char *dt)
{
    size_t i = b->r.n_inputs++;
    inference__model_infer_request__infer_input_tensor__init(&b->t[i]);
    inference__infer_tensor_contents__init(&b->c[i]);
    b->t[i].name = (char *)name;
    b->t[i].datatype = (char *)dt;
    b->t[i].n_shape = 1;
    b->shape[i][0] = 1;
    b->t[i].shape = b->shape[i];
    b->t[i].contents = &b->c[i];
    b->tp[i] = &b->t[i];
    return &b->t[i];
}

static void rb_text(struct req_builder *b, const char *name, const char *s)
{
    size_t i = b->r.n_inputs;
    rb_add(b, name, "BYTES");
    b->bytes[i][0].data = (uint8_t *)s;
    b->bytes[i][0].len = strlen(s);
    b->c[i].n_bytes_contents = 1;
    b->c[i].bytes_contents = b->bytes[i];
}

static void rb_i32(struct req_builder *b, const char *name, int32_t v)
{
    size_t i = b->r.n_inputs;
    rb_add(b, name, "INT32");
    b->i32[i] = v;
    b->c[i].n_int_contents = 1;
    b->c[i].int_contents = &b->i32[i];
}

static void rb_f32(struct req_builder *b, const char *name, float v)
{
    size_t i = b->r.n_inputs;
    rb_add(b, name, "FP32");
    b->f32[i] = v;
    b->c[i].n_fp32_contents = 1;
    b->c[i].fp32_contents = &b->f32[i];
}

static void rb_bool(struct req_builder *b, const char *name, bool v)
{
    size_t i = b->r.n_inputs;
    rb_add(b, name, "BOOL");
    b->b[i] = v;
    b->c[i].n_bool_contents = 1;
    b->c[i].bool_contents = &b->b[i];
}

static bool parse(const Inference__ModelInferRequest *r, struct tl_grpc_gen *g, char *err)
{
    err[0] = 0;
    return tl_grpc_gen_parse(r, g, err, 300);
}

// ---- known values ----------------------------------------------------------------------------

static void test_parse_contents(void **state)
{
    (void)state;
    struct req_builder b;
    rb_init(&b);
    rb_text(&b, "text_input", "Once upon a time");
    rb_i32(&b, "max_tokens", 33);
    rb_f32(&b, "temperature", 0.5f);
    rb_f32(&b, "top_p", 0.25f);
    rb_i32(&b, "top_k", -1);
    rb_bool(&b, "stream", true);
    rb_bool(&b, "ignore_eos", true);
    rb_text(&b, "stop", "dog");
    size_t i = b.r.n_inputs;
    rb_add(&b, "seed", "UINT64");
    b.u64[i] = 0xFFFFFFFFFFFFFFF0ull;
    b.c[i].n_uint64_contents = 1;
    b.c[i].uint64_contents = &b.u64[i];
    struct tl_grpc_gen g;
    char err[300];
    assert_true(parse(&b.r, &g, err));
    assert_int_equal(g.prompt_len, 16);
    assert_string_equal(g.prompt, "Once upon a time");
    assert_int_equal(g.max_tokens, 33);
    assert_true(g.sampling.temperature == 0.5f && g.sampling.top_p == 0.25f);
    assert_int_equal(g.sampling.top_k, 0); // -1 = off, as vLLM
    assert_true(g.stream && g.ignore_eos && g.seed_set);
    assert_true(g.sampling.seed == 0xFFFFFFFFFFFFFFF0ull);
    assert_int_equal(g.n_stop, 1);
    assert_string_equal(g.stop[0], "dog");
    tl_grpc_gen_free(&g);
}

static void test_parse_defaults_and_json(void **state)
{
    (void)state;
    struct req_builder b;
    rb_init(&b);
    rb_text(&b, "text_input", "hi");
    struct tl_grpc_gen g;
    char err[300];
    assert_true(parse(&b.r, &g, err));
    struct tl_sampling def;
    tl_sampling_default(&def);
    assert_int_equal(g.max_tokens, 16);
    assert_true(g.sampling.temperature == def.temperature && !g.stream && !g.seed_set);
    tl_grpc_gen_free(&g);
    // sampling_parameters applies first; an explicit tensor overrides it, whatever the order.
    rb_i32(&b, "max_tokens", 5);
    rb_text(&b, "sampling_parameters",
            "{\"max_tokens\": 9, \"temperature\": 0, \"stop\": [\"a\", \"bc\"], \"seed\": 7, "
            "\"ignore_eos\": true, \"top_k\": 3}");
    assert_true(parse(&b.r, &g, err));
    assert_int_equal(g.max_tokens, 5);
    assert_true(g.sampling.temperature == 0.0f && g.ignore_eos && g.seed_set);
    assert_int_equal(g.sampling.seed, 7);
    assert_int_equal(g.sampling.top_k, 3);
    assert_int_equal(g.n_stop, 2);
    assert_string_equal(g.stop[1], "bc");
    tl_grpc_gen_free(&g);
}

static void test_parse_raw(void **state)
{
    (void)state;
    struct req_builder b;
    rb_init(&b);
    rb_add(&b, "text_input", "BYTES")->contents = NULL;
    rb_add(&b, "max_tokens", "INT64")->contents = NULL;
    rb_add(&b, "temperature", "FP64")->contents = NULL;
    rb_add(&b, "stop", "BYTES")->contents = NULL;
    b.shape[3][0] = 2;
    // text_input: "abc"; max_tokens: 300 (INT64 LE); temperature 1.5 (FP64 LE); stop: "x","yz"
    uint8_t t[] = {3, 0, 0, 0, 'a', 'b', 'c'};
    uint8_t m[8] = {0x2C, 0x01};
    double d = 1.5;
    uint8_t f[8];
    memcpy(f, &d, 8);
    uint8_t s[] = {1, 0, 0, 0, 'x', 2, 0, 0, 0, 'y', 'z'};
    ProtobufCBinaryData raw[4] = {{sizeof(t), t}, {8, m}, {8, f}, {sizeof(s), s}};
    b.r.n_raw_input_contents = 4;
    b.r.raw_input_contents = raw;
    struct tl_grpc_gen g;
    char err[300];
    assert_true(parse(&b.r, &g, err));
    assert_string_equal(g.prompt, "abc");
    assert_int_equal(g.max_tokens, 300);
    assert_true(g.sampling.temperature == 1.5f);
    assert_int_equal(g.n_stop, 2);
    assert_string_equal(g.stop[1], "yz");
    tl_grpc_gen_free(&g);
    b.shape[3][0] = 3; // shape says 3 stops, data holds 2
    assert_false(parse(&b.r, &g, err));
    assert_non_null(strstr(err, "stop"));
    b.shape[3][0] = 2;
    raw[0].len = 6; // the length prefix claims 3 bytes, 2 remain
    assert_false(parse(&b.r, &g, err));
    assert_non_null(strstr(err, "text_input"));
    raw[0].len = sizeof(t);
    b.r.n_raw_input_contents = 3; // one entry per input
    assert_false(parse(&b.r, &g, err));
    assert_non_null(strstr(err, "raw_input_contents"));
}

static void test_parse_errors(void **state)
{
    (void)state;
    struct {
        int kind;
        const char *want;
    } cases[] = {
        {0, "text_input"},
        {1, "max_tokens"},
        {2, "shape"},
        {3, "unknown input"},
        {4, "twice"},
        {5, "temperature"},
        {6, "top_p"},
        {7, "stop"},
        {8, "sampling_parameters"},
        {9, "datatype"},
        {10, "unknown output"},
        {11, "empty"},
        {12, "negative"},
        {13, "max_tokens"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct req_builder b;
        rb_init(&b);
        Inference__ModelInferRequest__InferRequestedOutputTensor out;
        Inference__ModelInferRequest__InferRequestedOutputTensor *outs[1] = {&out};
        if (cases[k].kind != 0 && cases[k].kind != 11) rb_text(&b, "text_input", "hi");
        switch (cases[k].kind) {
        case 0:
            rb_i32(&b, "max_tokens", 3);
            break;
        case 1:
            rb_f32(&b, "max_tokens", 3);
            break;
        case 2:
            rb_i32(&b, "top_k", 3);
            b.shape[1][0] = 2;
            break;
        case 3:
            rb_i32(&b, "beam_width", 3);
            break;
        case 4:
            rb_i32(&b, "top_k", 3);
            rb_i32(&b, "top_k", 4);
            break;
        case 5:
            rb_f32(&b, "temperature", 2.5f);
            break;
        case 6:
            rb_f32(&b, "top_p", 0);
            break;
        case 7:
            rb_text(&b, "stop", "");
            break;
        case 8:
            rb_text(&b, "sampling_parameters", "{\"n\": 2}");
            break;
        case 9:
            rb_add(&b, "seed", "COMPLEX64");
            break;
        case 10:
            inference__model_infer_request__infer_requested_output_tensor__init(&out);
            out.name = "logits";
            b.r.n_outputs = 1;
            b.r.outputs = outs;
            break;
        case 11:
            rb_text(&b, "text_input", "");
            break;
        case 12:
            rb_i32(&b, "top_k", 1);
            b.shape[1][0] = -1;
            break;
        case 13:
            rb_i32(&b, "max_tokens", 0);
            break;
        }
        struct tl_grpc_gen g;
        char err[300];
        if (parse(&b.r, &g, err)) fail_msg("case %zu accepted", k);
        if (!strstr(err, cases[k].want))
            fail_msg("case %zu: '%s' lacks '%s'", k, err, cases[k].want);
        assert_null(g.prompt); // nothing left owned on failure
    }
}

// ---- responses -------------------------------------------------------------------------------

static void test_reply_roundtrip(void **state)
{
    (void)state;
    struct tl_grpc_result r = {.model_name = "m",
                               .id = "q1",
                               .text = "hello",
                               .text_len = 5,
                               .final = true,
                               .finish_reason = "length",
                               .n_prompt = 4,
                               .n_generated = 7,
                               .n_cached = 2};
    size_t len;
    uint8_t *buf = tl_grpc_pack_result(&r, true, &len);
    assert_non_null(buf);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(NULL, len, buf);
    assert_non_null(s);
    Inference__ModelInferResponse *x = s->infer_response;
    assert_string_equal(x->model_name, "m");
    assert_string_equal(x->id, "q1");
    assert_int_equal(x->n_outputs, 1);
    assert_string_equal(x->outputs[0]->name, "text_output");
    assert_string_equal(x->outputs[0]->datatype, "BYTES");
    assert_int_equal(x->n_raw_output_contents, 1);
    assert_int_equal(x->raw_output_contents[0].len, 9);
    assert_memory_equal(x->raw_output_contents[0].data, "\x05\0\0\0hello", 9);
    int found = 0;
    for (size_t i = 0; i < x->n_parameters; i++) {
        const char *k = x->parameters[i]->key;
        const Inference__InferParameter *v = x->parameters[i]->value;
        if (!strcmp(k, "triton_final_response")) found += v->bool_param == 1;
        if (!strcmp(k, "finish_reason")) found += !strcmp(v->string_param, "length");
        if (!strcmp(k, "completion_tokens")) found += v->int64_param == 7;
        if (!strcmp(k, "prompt_tokens")) found += v->int64_param == 4;
    }
    assert_int_equal(found, 4);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    free(buf);
    buf = tl_grpc_pack_model_metadata("m", &len);
    Inference__ModelMetadataResponse *mm =
        inference__model_metadata_response__unpack(NULL, len, buf);
    assert_non_null(mm);
    assert_int_equal((int)mm->n_inputs, tl_kserve_n_inputs);
    for (int i = 0; i < tl_kserve_n_inputs; i++) {
        assert_string_equal(mm->inputs[i]->name, tl_kserve_inputs[i].name);
        assert_string_equal(mm->inputs[i]->datatype, tl_kserve_inputs[i].datatype);
    }
    inference__model_metadata_response__free_unpacked(mm, NULL);
    free(buf);
}

// ---- fuzz ------------------------------------------------------------------------------------

// splitmix64 (core/hash.h).
static uint64_t rng_next(uint64_t *s)
{
    return tl_splitmix64(s);
}

static void check_accepted(const struct tl_grpc_gen *g)
{
    assert_non_null(g->prompt);
    assert_true(g->prompt_len > 0);
    assert_true(g->max_tokens >= 1);
    assert_true(g->sampling.temperature >= 0 && g->sampling.temperature <= 2);
    assert_true(g->sampling.top_p > 0 && g->sampling.top_p <= 1);
    assert_true(g->sampling.top_k >= 0);
    assert_true(g->n_stop >= 0 && g->n_stop <= TL_GRPC_MAX_STOP);
    for (int i = 0; i < g->n_stop; i++)
        assert_true(strlen(g->stop[i]) >= 1 && strlen(g->stop[i]) <= TL_GRPC_MAX_STOP_LEN);
}

static void run_decoded(const uint8_t *buf, size_t len, long *accepted)
{
    Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, len, buf);
    if (!q) return; // the server answers INVALID_ARGUMENT ("malformed protobuf")
    struct tl_grpc_gen g;
    char err[300];
    if (parse(q, &g, err)) {
        check_accepted(&g);
        tl_grpc_gen_free(&g);
        (*accepted)++;
    } else {
        assert_true(err[0] != 0);
    }
    inference__model_infer_request__free_unpacked(q, NULL);
}

static void test_fuzz_decode(void **state)
{
    (void)state;
    static const char *words[] = {"Once", "upon", "a", "time", "\xc3\xa9t\xc3\xa9", "\n"};
    for (uint64_t seed = 1; seed <= 3; seed++) {
        uint64_t s = seed;
        long accepted = 0, valid_built = 0;
        for (int it = 0; it < 20000; it++) {
            // A valid request with random values, known by construction.
            struct req_builder b;
            rb_init(&b);
            char prompt[64] = "";
            int nw = 1 + (int)(rng_next(&s) % 5);
            for (int w = 0; w < nw; w++)
                strcat(prompt, words[rng_next(&s) % 6]);
            rb_text(&b, "text_input", prompt);
            int32_t mt = 1 + (int32_t)(rng_next(&s) % 1000);
            float temp = (float)(rng_next(&s) % 201) / 100.0f;
            if (rng_next(&s) & 1) rb_i32(&b, "max_tokens", mt);
            if (rng_next(&s) & 1) rb_f32(&b, "temperature", temp);
            if (rng_next(&s) & 1) rb_bool(&b, "stream", true);
            if (rng_next(&s) & 1) rb_text(&b, "stop", words[rng_next(&s) % 4]);
            // Shuffle the inputs: order must not matter.
            for (size_t i = b.r.n_inputs; i > 1; i--) {
                size_t j = rng_next(&s) % i;
                Inference__ModelInferRequest__InferInputTensor *tmp = b.tp[i - 1];
                b.tp[i - 1] = b.tp[j];
                b.tp[j] = tmp;
            }
            struct tl_grpc_gen g;
            char err[300];
            if (!parse(&b.r, &g, err)) fail_msg("valid request rejected: %s", err);
            assert_string_equal(g.prompt, prompt);
            for (size_t i = 0; i < b.r.n_inputs; i++) {
                if (!strcmp(b.tp[i]->name, "max_tokens")) assert_int_equal(g.max_tokens, mt);
                if (!strcmp(b.tp[i]->name, "temperature"))
                    assert_true(g.sampling.temperature == temp);
                if (!strcmp(b.tp[i]->name, "stream")) assert_true(g.stream);
            }
            tl_grpc_gen_free(&g);
            valid_built++;
            // Packed, then mutated: flips, truncation, insertions, duplicated spans.
            size_t len = inference__model_infer_request__get_packed_size(&b.r);
            uint8_t buf[1024];
            if (len > sizeof(buf) / 2) continue;
            inference__model_infer_request__pack(&b.r, buf);
            int n_mut = 1 + (int)(rng_next(&s) % 3);
            for (int m = 0; m < n_mut && len > 0; m++) {
                size_t at = rng_next(&s) % len;
                switch (rng_next(&s) % 5) {
                case 0:
                    buf[at] ^= (uint8_t)(1u << (rng_next(&s) % 8));
                    break;
                case 1:
                    buf[at] = (uint8_t)rng_next(&s);
                    break;
                case 2:
                    len = at;
                    break;
                case 3:
                    if (len + 1 < sizeof(buf)) {
                        memmove(buf + at + 1, buf + at, len - at);
                        buf[at] = (uint8_t)rng_next(&s);
                        len++;
                    }
                    break;
                default: {
                    size_t n = rng_next(&s) % (len - at + 1);
                    if (len + n <= sizeof(buf)) {
                        memmove(buf + at + n, buf + at, len - at);
                        len += n;
                    }
                }
                }
            }
            run_decoded(buf, len, &accepted);
            // Pure noise.
            size_t nl = rng_next(&s) % 96;
            for (size_t i = 0; i < nl; i++)
                buf[i] = (uint8_t)rng_next(&s);
            run_decoded(buf, nl, &accepted);
        }
        assert_int_equal(valid_built, 20000);
        // Mutations leave some requests valid, or the accepted-path checks test nothing.
        if (accepted <= 500)
            fail_msg("seed %llu: only %ld mutated requests accepted", (unsigned long long)seed,
                     accepted);
    }
}

TL_TEST_MAIN(cmocka_unit_test(test_parse_contents), cmocka_unit_test(test_parse_defaults_and_json),
             cmocka_unit_test(test_parse_raw), cmocka_unit_test(test_parse_errors),
             cmocka_unit_test(test_reply_roundtrip), cmocka_unit_test(test_fuzz_decode))
