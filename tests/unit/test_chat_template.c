/*
 * Tests for src/server/chat_template.c: family detection from real templates' marker strings
 * (it picks the stop texts), choosing the template (file > built-in name > GGUF > ChatML
 * fallback; parse errors name line and column), and the built-in templates' rendering of a
 * request body, compared with the formats the model authors publish (the expected strings are
 * written out by hand from those formats, not produced by our code; test_jinja_oracle also
 * checks every built-in against Jinja2).
 */
#include "tl_test.h"

#include "server/chat_template.h"

#include <jansson.h>

static const char *convo_json = "[{\"role\": \"system\", \"content\": \"You are terse.\"},"
                                "{\"role\": \"user\", \"content\": \"Hi\"},"
                                "{\"role\": \"assistant\", \"content\": \"Hello.\"},"
                                "{\"role\": \"user\", \"content\": \"Bye\"}]";

// Renders {"messages": messages[from:from+n]} with the built-in `name`; compares with want.
static void expect_render_n(const char *name, int from, int n, const char *want)
{
    struct tl_chat_template t;
    assert_int_equal(tl_chat_template_init(&t, name, NULL, NULL, "<s>", "</s>"), TL_OK);
    json_t *all = json_loads(convo_json, 0, NULL);
    json_t *msgs = json_array();
    for (int i = from; i < from + n; i++)
        json_array_append(msgs, json_array_get(all, (size_t)i));
    json_t *body = json_pack("{so}", "messages", msgs);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(tl_chat_template_apply(&t, body, &out, &len, NULL), TL_OK);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    free(out);
    json_decref(body);
    json_decref(all);
    tl_chat_template_free(&t);
}

static void test_detect_families(void **state)
{
    (void)state;
    bool fb = true;
    // Fragments of the templates shipped in the models' tokenizer_config.json.
    assert_int_equal(tl_chat_detect("{% for message in messages %}{{'<|im_start|>' + "
                                    "message['role'] + '\\n' + message['content'] + "
                                    "'<|im_end|>' + '\\n'}}{% endfor %}",
                                    &fb),
                     TL_CHAT_CHATML);
    assert_false(fb);
    assert_int_equal(tl_chat_detect("{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
                                    "<<SYS>>\\n{{ system_message }}\\n<</SYS>>\\n\\n{% endif %}"
                                    "{{ '[INST] ' + content + ' [/INST]' }}",
                                    &fb),
                     TL_CHAT_LLAMA2);
    assert_int_equal(tl_chat_detect("{{ '<|start_header_id|>' + message['role'] + "
                                    "'<|end_header_id|>\\n\\n' + message['content'] | trim + "
                                    "'<|eot_id|>' }}",
                                    &fb),
                     TL_CHAT_LLAMA3);
    assert_int_equal(tl_chat_detect("{{ bos_token }}{% for message in messages %}{{ '[INST] ' + "
                                    "message['content'] + ' [/INST]' }}{% else %}{{ "
                                    "message['content'] + eos_token}}{% endfor %}",
                                    &fb),
                     TL_CHAT_MISTRAL);
    assert_int_equal(tl_chat_detect("{% if message['role'] == 'user' %}{{ '<|user|>\\n' + "
                                    "message['content'] + eos_token }}{% endif %}",
                                    &fb),
                     TL_CHAT_ZEPHYR);
    assert_int_equal(tl_chat_detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | "
                                    "trim + '<end_of_turn>\\n' }}",
                                    &fb),
                     TL_CHAT_GEMMA);
    assert_int_equal(tl_chat_detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + "
                                    "'\\n' + '<|assistant|>' + '\\n'}}",
                                    &fb),
                     TL_CHAT_PHI3);
    assert_false(fb);
}

static void test_detect_fallback(void **state)
{
    (void)state;
    bool fb = false;
    assert_int_equal(tl_chat_detect(NULL, &fb), TL_CHAT_CHATML);
    assert_true(fb);
    fb = false;
    assert_int_equal(tl_chat_detect("{{ messages }} something unknown", &fb), TL_CHAT_CHATML);
    assert_true(fb);
    assert_int_equal(tl_chat_detect("", NULL), TL_CHAT_CHATML);
}

static void test_family_names_roundtrip(void **state)
{
    (void)state;
    for (int i = 0; i < TL_CHAT_COUNT; i++) {
        enum tl_chat_family f;
        assert_true(tl_chat_family_from_name(tl_chat_family_name((enum tl_chat_family)i), &f));
        assert_int_equal(f, i);
    }
    enum tl_chat_family f;
    assert_false(tl_chat_family_from_name("jinja", &f));
}

static void test_render_chatml(void **state)
{
    (void)state;
    expect_render_n("chatml", 0, 4,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello.<|im_end|>\n"
                  "<|im_start|>user\nBye<|im_end|>\n"
                  "<|im_start|>assistant\n");
}

static void test_render_llama2(void **state)
{
    (void)state;
    expect_render_n("llama2", 0, 4,
                    "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>"
                    "[INST] Bye [/INST]");
    expect_render_n("llama2", 1, 1, "<s>[INST] Hi [/INST]");
}

static void test_render_llama3(void **state)
{
    (void)state;
    expect_render_n("llama3", 0, 2,
                  "<s><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_render_mistral(void **state)
{
    (void)state;
    expect_render_n("mistral", 0, 4,
                  "<s>[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
}

static void test_render_zephyr(void **state)
{
    (void)state;
    expect_render_n("zephyr", 0, 2,
                  "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\n");
}

static void test_render_gemma(void **state)
{
    (void)state;
    expect_render_n("gemma", 0, 4,
                  "<s><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nHello.<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n"
                  "<start_of_turn>model\n");
}

static void test_render_phi3(void **state)
{
    (void)state;
    expect_render_n("phi3", 1, 3,
                  "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n"
                  "<|assistant|>\n");
}

// Renders body (JSON text) with t; returns the status, the output and the param.
static tl_status apply(const struct tl_chat_template *t, const char *body_text, char **out,
                       size_t *len, const char **param)
{
    json_t *body = json_loads(body_text, JSON_ALLOW_NUL, NULL);
    assert_non_null(body);
    tl_status st = tl_chat_template_apply(t, body, out, len, param);
    json_decref(body);
    return st;
}

static void test_choice_and_errors(void **state)
{
    (void)state;
    struct tl_chat_template t;
    // No template anywhere: ChatML, reported as a fallback.
    assert_int_equal(tl_chat_template_init(&t, NULL, NULL, NULL, "<s>", "</s>"), TL_OK);
    assert_true(t.fallback);
    assert_string_equal(t.source_name, "chatml");
    // Content with an embedded NUL is carried through byte for byte.
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(apply(&t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}",
                           &out, &len, NULL),
                     TL_OK);
    const char want[] = "<|im_start|>user\na\0b<|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(out, want, len);
    free(out);
    const char *param = NULL;
    assert_int_equal(apply(&t, "{\"messages\": [], \"add_generation_prompt\": 1}", &out, &len,
                           &param),
                     TL_ERR_INVALID_ARG);
    assert_string_equal(param, "add_generation_prompt");
    assert_int_equal(apply(&t, "{\"messages\": [], \"chat_template_kwargs\": []}", &out, &len,
                           &param),
                     TL_ERR_INVALID_ARG);
    assert_string_equal(param, "chat_template_kwargs");
    tl_chat_template_free(&t);

    // The GGUF's template is used and reported as such; a raise_exception is a 400 carrying
    // exactly its message; a name overrides the GGUF's template.
    const char *gguf = "{% if messages[0].role != 'user' %}{{ raise_exception('Users first!') }}"
                       "{% endif %}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                       "{% endfor %}{{ enable_thinking is defined and enable_thinking }}";
    assert_int_equal(tl_chat_template_init(&t, NULL, NULL, gguf, "<s>", "</s>"), TL_OK);
    assert_false(t.fallback);
    assert_string_equal(t.source_name, "gguf");
    assert_int_equal(apply(&t,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                           "\"chat_template_kwargs\": {\"enable_thinking\": true}}",
                           &out, &len, NULL),
                     TL_OK);
    assert_string_equal(out, "[user]xTrue");
    free(out);
    assert_int_equal(apply(&t, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}",
                           &out, &len, &param),
                     TL_ERR_INVALID_ARG);
    assert_string_equal(tl_last_error(), "Users first!");
    assert_string_equal(param, "messages");
    tl_chat_template_free(&t);
    assert_int_equal(tl_chat_template_init(&t, "zephyr", NULL, gguf, "<s>", "</s>"), TL_OK);
    assert_string_equal(t.source_name, "zephyr");
    assert_int_equal(t.family, TL_CHAT_ZEPHYR);
    tl_chat_template_free(&t);

    // A GGUF template that does not parse: a startup error naming line and column.
    assert_int_equal(tl_chat_template_init(&t, NULL, NULL, "ok\n{% for x in %}", NULL, NULL),
                     TL_ERR_FORMAT);
    if (!strstr(tl_last_error(), "line 2, column 13"))
        fail_msg("message lacks the position: %s", tl_last_error());
    assert_int_equal(tl_chat_template_init(&t, "nope", NULL, NULL, NULL, NULL),
                     TL_ERR_INVALID_ARG);
    assert_int_equal(tl_chat_template_init(&t, NULL, "/nonexistent/t.jinja", NULL, NULL, NULL),
                     TL_ERR_IO);
    // A file overrides everything.
    const char *path = tl_test_tmpfile("tmpl.jinja");
    FILE *f = fopen(path, "w");
    fputs("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{% endfor %}", f);
    fclose(f);
    assert_int_equal(tl_chat_template_init(&t, "chatml", path, gguf, "<s>", "</s>"), TL_OK);
    assert_int_equal(strncmp(t.source_name, "file:", 5), 0);
    assert_int_equal(apply(&t, "{\"messages\": [{\"role\": \"tool\", \"content\": \"r\"}]}",
                           &out, &len, NULL),
                     TL_OK);
    assert_string_equal(out, "<s><tool>");
    free(out);
    tl_chat_template_free(&t);
    unlink(path);
}

static void test_stop_texts(void **state)
{
    (void)state;
    const char *s[2];
    assert_int_equal(tl_chat_stop_texts(TL_CHAT_CHATML, s), 1);
    assert_string_equal(s[0], "<|im_end|>");
    assert_int_equal(tl_chat_stop_texts(TL_CHAT_LLAMA3, s), 2);
    assert_string_equal(s[0], "<|eot_id|>");
    assert_int_equal(tl_chat_stop_texts(TL_CHAT_GEMMA, s), 1);
    assert_string_equal(s[0], "<end_of_turn>");
    assert_int_equal(tl_chat_stop_texts(TL_CHAT_PHI3, s), 1);
    assert_string_equal(s[0], "<|end|>");
    assert_int_equal(tl_chat_stop_texts(TL_CHAT_MISTRAL, s), 1);
    assert_string_equal(s[0], "</s>");
}

TL_TEST_MAIN(cmocka_unit_test(test_detect_families), cmocka_unit_test(test_detect_fallback),
             cmocka_unit_test(test_family_names_roundtrip), cmocka_unit_test(test_render_chatml),
             cmocka_unit_test(test_render_llama2), cmocka_unit_test(test_render_llama3),
             cmocka_unit_test(test_render_mistral), cmocka_unit_test(test_render_zephyr),
             cmocka_unit_test(test_render_gemma), cmocka_unit_test(test_render_phi3),
             cmocka_unit_test(test_choice_and_errors),
             cmocka_unit_test(test_stop_texts))
