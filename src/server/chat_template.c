/*
 * The server's chat template (see chat_template.h): choosing the template at startup, the family
 * detection that picks the stop texts, and rendering a request body through src/chat.
 *
 * Detection looks for each family's turn markers in the Jinja source, most specific first
 * (Llama 3's header ids, Gemma's turns, ChatML's im_start, Phi-3's <|end|>, Zephyr's <|user|>,
 * then [INST] split into Llama 2 when the template mentions <<SYS>> and Mistral otherwise).
 *
 * Ownership: struct tl_chat_template owns its parsed template and strings. Built once, then
 * read-only: tl_chat_template_apply is thread-safe.
 */
#include "server/chat_template.h"

#include "chat/chat_render.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const family_names[TL_CHAT_COUNT] = {
    "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3",
};

const char *tl_chat_family_name(enum tl_chat_family f)
{
    return (unsigned)f < TL_CHAT_COUNT ? family_names[f] : "?";
}

bool tl_chat_family_from_name(const char *name, enum tl_chat_family *out)
{
    for (int i = 0; i < TL_CHAT_COUNT; i++) {
        if (!strcmp(name, family_names[i])) {
            *out = (enum tl_chat_family)i;
            return true;
        }
    }
    return false;
}

enum tl_chat_family tl_chat_detect(const char *tmpl, bool *fallback)
{
    bool fb = false;
    enum tl_chat_family f = TL_CHAT_CHATML;
    if (!tmpl || !*tmpl)
        fb = true;
    else if (strstr(tmpl, "<|start_header_id|>"))
        f = TL_CHAT_LLAMA3;
    else if (strstr(tmpl, "<start_of_turn>"))
        f = TL_CHAT_GEMMA;
    else if (strstr(tmpl, "<|im_start|>"))
        f = TL_CHAT_CHATML;
    else if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>"))
        f = TL_CHAT_PHI3;
    else if (strstr(tmpl, "<|user|>"))
        f = TL_CHAT_ZEPHYR;
    else if (strstr(tmpl, "[INST]") && strstr(tmpl, "<<SYS>>"))
        f = TL_CHAT_LLAMA2;
    else if (strstr(tmpl, "[INST]"))
        f = TL_CHAT_MISTRAL;
    else
        fb = true;
    if (fallback) *fallback = fb;
    return f;
}

int tl_chat_stop_texts(enum tl_chat_family f, const char *out[2])
{
    switch (f) {
    case TL_CHAT_CHATML:
        out[0] = "<|im_end|>";
        return 1;
    case TL_CHAT_LLAMA3:
        out[0] = "<|eot_id|>";
        out[1] = "<|end_of_text|>";
        return 2;
    case TL_CHAT_GEMMA:
        out[0] = "<end_of_turn>";
        return 1;
    case TL_CHAT_PHI3:
        out[0] = "<|end|>";
        return 1;
    case TL_CHAT_LLAMA2:
    case TL_CHAT_MISTRAL:
    case TL_CHAT_ZEPHYR:
        out[0] = "</s>";
        return 1;
    case TL_CHAT_COUNT:
        break;
    }
    return 0;
}

// ---- choosing and parsing

static char *read_text_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *grown = cap <= ((size_t)4 << 20) ? realloc(buf, cap) : NULL;
            if (!grown) {
                free(buf);
                fclose(f);
                errno = EFBIG;
                return NULL;
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static tl_status parse_into(struct tl_chat_template *t, const char *src, size_t len,
                            const char *what)
{
    char err[512];
    if (tl_jinja_parse(src, len, &t->jinja, err, sizeof(err)))
        return tl__errorf(TL_ERR_FORMAT, "chat template (%s): %s", what, err);
    return TL_OK;
}

tl_status tl_chat_template_init(struct tl_chat_template *t, const char *name, const char *file,
                                const char *gguf_src, const char *bos, const char *eos)
{
    memset(t, 0, sizeof(*t));
    t->bos_token = strdup(bos ? bos : "");
    t->eos_token = strdup(eos ? eos : "");
    if (!t->bos_token || !t->eos_token) goto nomem;
    tl_status st;
    char label[1024];
    if (file && *file) {
        size_t len = 0;
        char *src = read_text_file(file, &len);
        if (!src) {
            tl_chat_template_free(t);
            return tl__errorf(TL_ERR_IO, "--chat-template-file %s: %s", file, strerror(errno));
        }
        snprintf(label, sizeof(label), "file:%s", file);
        st = parse_into(t, src, len, label);
        t->family = tl_chat_detect(src, NULL);
        free(src);
    } else if (name && *name) {
        const char *src = tl_chat_builtin_source(name);
        if (!src || !tl_chat_family_from_name(name, &t->family)) {
            tl_chat_template_free(t);
            return tl__errorf(TL_ERR_INVALID_ARG,
                              "unknown chat template '%s' (chatml, llama2, llama3, mistral, "
                              "zephyr, gemma, phi3; --chat-template-file loads a Jinja file)",
                              name);
        }
        snprintf(label, sizeof(label), "%s", name);
        st = parse_into(t, src, strlen(src), label);
    } else if (gguf_src && *gguf_src) {
        snprintf(label, sizeof(label), "gguf");
        st = parse_into(t, gguf_src, strlen(gguf_src),
                        "the GGUF's tokenizer.chat_template; "
                        "--chat-template NAME or "
                        "--chat-template-file PATH overrides it");
        t->family = tl_chat_detect(gguf_src, NULL);
    } else {
        snprintf(label, sizeof(label), "chatml");
        t->fallback = true;
        t->family = TL_CHAT_CHATML;
        const char *src = tl_chat_builtin_source("chatml");
        st = parse_into(t, src, strlen(src), label);
    }
    if (st) {
        tl_chat_template_free(t);
        return st;
    }
    if (!(t->source_name = strdup(label))) goto nomem;
    return TL_OK;
nomem:
    tl_chat_template_free(t);
    return tl__errorf(TL_ERR_NOMEM, "out of memory");
}

void tl_chat_template_free(struct tl_chat_template *t)
{
    tl_jinja_destroy(t->jinja);
    free(t->source_name);
    free(t->bos_token);
    free(t->eos_token);
    memset(t, 0, sizeof(*t));
}

// ---- rendering a request

static tl_status bad_field(const char **param, const char *name, const char *msg)
{
    if (param) *param = name;
    return tl__errorf(TL_ERR_INVALID_ARG, "'%s' %s", name, msg);
}

// Legacy "functions" as the tools list ([{"type": "function", "function": f}, ...]).
static json_t *functions_as_tools(const json_t *functions)
{
    json_t *tools = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(functions, i, f)
    {
        json_array_append_new(tools, json_pack("{s:s,s:O}", "type", "function", "function", f));
    }
    return tools;
}

tl_status tl_chat_template_apply(const struct tl_chat_template *t, const json_t *body, char **out,
                                 size_t *out_len, const char **param)
{
    *out = NULL;
    *out_len = 0;
    if (param) *param = NULL;
    json_t *agp = json_object_get(body, "add_generation_prompt");
    json_t *cont = json_object_get(body, "continue_final_message");
    json_t *kwargs = json_object_get(body, "chat_template_kwargs");
    json_t *tools = json_object_get(body, "tools");
    json_t *functions = json_object_get(body, "functions");
    json_t *documents = json_object_get(body, "documents");
    if (agp && !json_is_null(agp) && !json_is_boolean(agp))
        return bad_field(param, "add_generation_prompt", "must be a boolean");
    if (cont && !json_is_null(cont) && !json_is_boolean(cont))
        return bad_field(param, "continue_final_message", "must be a boolean");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs))
        return bad_field(param, "chat_template_kwargs", "must be an object");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return bad_field(param, "tools", "must be a list");
    if (functions && !json_is_null(functions) && !json_is_array(functions))
        return bad_field(param, "functions", "must be a list");
    if (documents && !json_is_null(documents) && !json_is_array(documents))
        return bad_field(param, "documents", "must be a list");
    json_t *legacy = NULL;
    if ((!tools || json_is_null(tools)) && json_is_array(functions))
        tools = legacy = functions_as_tools(functions);
    struct tl_chat_vars v = {
        .messages = json_object_get(body, "messages"),
        .tools = json_is_array(tools) ? tools : NULL,
        .documents = json_is_array(documents) ? documents : NULL,
        .kwargs = json_is_object(kwargs) ? kwargs : NULL,
        .bos_token = t->bos_token,
        .eos_token = t->eos_token,
        .add_generation_prompt = !agp || json_is_null(agp) || json_is_true(agp),
        .continue_final_message = json_is_true(cont),
    };
    // vLLM: continue_final_message replaces the generation prompt unless both are asked for.
    if (v.continue_final_message && (!agp || json_is_null(agp))) v.add_generation_prompt = false;
    char err[512];
    enum tl_jinja_error_kind kind;
    tl_status st = tl_chat_render_vars(t->jinja, &v, out, out_len, &kind, err, sizeof(err));
    json_decref(legacy);
    if (st == TL_OK) return TL_OK;
    if (param) *param = "messages";
    if (st == TL_ERR_NOMEM) return tl__errorf(TL_ERR_NOMEM, "%s", err);
    if (kind == TL_JINJA_RAISED) return tl__errorf(TL_ERR_INVALID_ARG, "%s", err);
    return tl__errorf(TL_ERR_INVALID_ARG, "chat template error: %s", err);
}
