/*
 * Tests for src/server/chat_template.c: family detection from real templates' marker strings
 * and the rendered text of each family, compared with the formats the model authors publish
 * (the expected strings are written out by hand from those formats, not produced by our code).
 */
#include "tl_test.h"

#include "server/chat_template.h"

#define MSG(r, s)                                                                                  \
    {                                                                                              \
        r, s, sizeof(s) - 1                                                                        \
    }

static const struct tl_chat_msg convo[] = {
    MSG(TL_CHAT_SYSTEM, "You are terse."),
    MSG(TL_CHAT_USER, "Hi"),
    MSG(TL_CHAT_ASSISTANT, "Hello."),
    MSG(TL_CHAT_USER, "Bye"),
};
#define N_CONVO ((int)(sizeof(convo) / sizeof(convo[0])))

static void expect_render(enum tl_chat_family f, const struct tl_chat_msg *m, int n,
                          const char *want)
{
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(tl_chat_render(f, m, n, &out, &len), TL_OK);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    free(out);
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
    expect_render(TL_CHAT_CHATML, convo, N_CONVO,
                  "<|im_start|>system\nYou are terse.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello.<|im_end|>\n"
                  "<|im_start|>user\nBye<|im_end|>\n"
                  "<|im_start|>assistant\n");
}

static void test_render_llama2(void **state)
{
    (void)state;
    expect_render(TL_CHAT_LLAMA2, convo, N_CONVO,
                  "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>"
                  "[INST] Bye [/INST]");
    expect_render(TL_CHAT_LLAMA2, convo + 1, 1, "[INST] Hi [/INST]");
}

static void test_render_llama3(void **state)
{
    (void)state;
    const struct tl_chat_msg m[] = {MSG(TL_CHAT_SYSTEM, " You are terse.\n"),
                                    MSG(TL_CHAT_USER, "Hi")};
    expect_render(TL_CHAT_LLAMA3, m, 2,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_render_mistral(void **state)
{
    (void)state;
    expect_render(TL_CHAT_MISTRAL, convo, N_CONVO,
                  "[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
}

static void test_render_zephyr(void **state)
{
    (void)state;
    expect_render(TL_CHAT_ZEPHYR, convo, 2,
                  "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\n");
}

static void test_render_gemma(void **state)
{
    (void)state;
    expect_render(TL_CHAT_GEMMA, convo, N_CONVO,
                  "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nHello.<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n"
                  "<start_of_turn>model\n");
}

static void test_render_phi3(void **state)
{
    (void)state;
    expect_render(TL_CHAT_PHI3, convo + 1, 3,
                  "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n"
                  "<|assistant|>\n");
}

static void test_render_errors_and_binary_content(void **state)
{
    (void)state;
    char *out = (char *)1;
    size_t len = 7;
    assert_int_equal(tl_chat_render(TL_CHAT_CHATML, convo, 0, &out, &len), TL_ERR_INVALID_ARG);
    assert_null(out);
    assert_int_equal(tl_chat_render((enum tl_chat_family)99, convo, 1, &out, &len),
                     TL_ERR_INVALID_ARG);
    // Content with an embedded NUL is carried through byte for byte.
    const struct tl_chat_msg m[] = {{TL_CHAT_USER, "a\0b", 3}};
    assert_int_equal(tl_chat_render(TL_CHAT_CHATML, m, 1, &out, &len), TL_OK);
    const char want[] = "<|im_start|>user\na\0b<|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(out, want, len);
    free(out);
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
             cmocka_unit_test(test_render_errors_and_binary_content),
             cmocka_unit_test(test_stop_texts))
