/*
 * Chat template detection and rendering (see chat_template.h).
 *
 * Detection looks for each family's turn markers in the Jinja source, most specific first
 * (Llama 3's header ids, Gemma's turns, ChatML's im_start, Phi-3's <|end|>, Zephyr's <|user|>,
 * then [INST] split into Llama 2 when the template mentions <<SYS>> and Mistral otherwise).
 *
 * Rendering follows each family's published format. Families without a system role (Llama 2
 * puts it inside the first [INST] block; Mistral and Gemma have none) fold system messages into
 * the next user turn, separated by a blank line. Llama 2, Llama 3 and Mistral strip the
 * surrounding whitespace of each message as their reference templates do. The BOS token is
 * never written here: the tokenizer adds it (add_special), so it is never doubled.
 *
 * Pure functions over caller-owned input; thread-safe.
 */
#include "server/chat_template.h"

#include "core/error.h"
#include "core/strbuf.h"

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

// Adds content with leading and trailing ASCII whitespace removed (as Jinja's `| trim`).
static void add_trimmed(struct tl_sb *sb, const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    tl_sb_add(sb, s, n);
}

static const char *role_name(enum tl_chat_role r)
{
    return r == TL_CHAT_SYSTEM ? "system" : r == TL_CHAT_USER ? "user" : "assistant";
}

// ChatML, Llama 3, Zephyr and Phi-3: every message is its own turn with a role header.
static void render_turns(struct tl_sb *sb, enum tl_chat_family f, const struct tl_chat_msg *m,
                         int n)
{
    for (int i = 0; i < n; i++) {
        const char *role = role_name(m[i].role);
        switch (f) {
        case TL_CHAT_LLAMA3:
            tl_sb_printf(sb, "<|start_header_id|>%s<|end_header_id|>\n\n", role);
            add_trimmed(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, "<|eot_id|>");
            break;
        case TL_CHAT_ZEPHYR:
            tl_sb_printf(sb, "<|%s|>\n", role);
            tl_sb_add(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, "</s>\n");
            break;
        case TL_CHAT_PHI3:
            tl_sb_printf(sb, "<|%s|>\n", role);
            tl_sb_add(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, "<|end|>\n");
            break;
        default: // ChatML
            tl_sb_printf(sb, "<|im_start|>%s\n", role);
            tl_sb_add(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, "<|im_end|>\n");
            break;
        }
    }
    switch (f) {
    case TL_CHAT_LLAMA3:
        tl_sb_adds(sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case TL_CHAT_ZEPHYR:
    case TL_CHAT_PHI3:
        tl_sb_adds(sb, "<|assistant|>\n");
        break;
    default:
        tl_sb_adds(sb, "<|im_start|>assistant\n");
        break;
    }
}

// Llama 2, Mistral and Gemma: user/assistant alternate; system text joins the next user turn.
static void render_inst(struct tl_sb *sb, enum tl_chat_family f, const struct tl_chat_msg *m, int n)
{
    struct tl_sb sys;
    tl_sb_init(&sys);
    for (int i = 0; i < n; i++) {
        if (m[i].role == TL_CHAT_SYSTEM) {
            if (sys.len) tl_sb_adds(&sys, "\n\n");
            add_trimmed(&sys, m[i].content, m[i].content_len);
            continue;
        }
        if (m[i].role == TL_CHAT_USER) {
            if (f == TL_CHAT_GEMMA) {
                tl_sb_adds(sb, "<start_of_turn>user\n");
                if (sys.len) {
                    tl_sb_add(sb, sys.buf, sys.len);
                    tl_sb_adds(sb, "\n\n");
                }
                add_trimmed(sb, m[i].content, m[i].content_len);
                tl_sb_adds(sb, "<end_of_turn>\n");
            } else {
                tl_sb_adds(sb, "[INST] ");
                if (sys.len && f == TL_CHAT_LLAMA2) {
                    tl_sb_adds(sb, "<<SYS>>\n");
                    tl_sb_add(sb, sys.buf, sys.len);
                    tl_sb_adds(sb, "\n<</SYS>>\n\n");
                } else if (sys.len) {
                    tl_sb_add(sb, sys.buf, sys.len);
                    tl_sb_adds(sb, "\n\n");
                }
                add_trimmed(sb, m[i].content, m[i].content_len);
                tl_sb_adds(sb, " [/INST]");
            }
            sys.len = 0;
            continue;
        }
        // assistant
        if (f == TL_CHAT_GEMMA) {
            tl_sb_adds(sb, "<start_of_turn>model\n");
            add_trimmed(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, "<end_of_turn>\n");
        } else if (f == TL_CHAT_LLAMA2) {
            tl_sb_adds(sb, " ");
            add_trimmed(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, " </s><s>");
        } else {
            add_trimmed(sb, m[i].content, m[i].content_len);
            tl_sb_adds(sb, "</s>");
        }
    }
    if (sys.failed) sb->failed = true;
    // A system message with no user turn after it still has to reach the model.
    if (sys.len) {
        if (f == TL_CHAT_GEMMA) {
            tl_sb_adds(sb, "<start_of_turn>user\n");
            tl_sb_add(sb, sys.buf, sys.len);
            tl_sb_adds(sb, "<end_of_turn>\n");
        } else if (f == TL_CHAT_LLAMA2) {
            tl_sb_adds(sb, "[INST] <<SYS>>\n");
            tl_sb_add(sb, sys.buf, sys.len);
            tl_sb_adds(sb, "\n<</SYS>>\n\n [/INST]");
        } else {
            tl_sb_adds(sb, "[INST] ");
            tl_sb_add(sb, sys.buf, sys.len);
            tl_sb_adds(sb, " [/INST]");
        }
    }
    if (f == TL_CHAT_GEMMA) tl_sb_adds(sb, "<start_of_turn>model\n");
    tl_sb_free(&sys);
}

tl_status tl_chat_render(enum tl_chat_family f, const struct tl_chat_msg *msgs, int n_msgs,
                         char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if ((unsigned)f >= TL_CHAT_COUNT)
        return tl__errorf(TL_ERR_INVALID_ARG, "chat template: unknown family %d", (int)f);
    if (n_msgs <= 0) return tl__errorf(TL_ERR_INVALID_ARG, "messages: at least one is needed");
    struct tl_sb sb;
    tl_sb_init(&sb);
    if (f == TL_CHAT_LLAMA2 || f == TL_CHAT_MISTRAL || f == TL_CHAT_GEMMA)
        render_inst(&sb, f, msgs, n_msgs);
    else
        render_turns(&sb, f, msgs, n_msgs);
    char *s = tl_sb_take(&sb, out_len);
    if (!s) return tl__errorf(TL_ERR_NOMEM, "chat template: out of memory");
    *out = s;
    return TL_OK;
}
