/*
 * The built-in chat templates, written as Jinja: the families tokenloom rendered in C before it
 * had a template engine, chosen with --chat-template NAME (or used when a GGUF carries no
 * template: chatml). Each follows its family's published prompt format; families without a
 * system role (Llama 2 puts it in the first [INST] block; Mistral and Gemma have none) fold the
 * system text into the first user turn, separated by a blank line. A template writes the BOS
 * token itself where its family starts with one (the server tokenizes chat prompts without
 * adding special tokens, as vLLM does).
 *
 * Static data; thread-safe.
 */
#include "chat/chat_render.h"

#include <string.h>

// Splits an optional leading system message off into `system` and `turns`.
#define SPLIT_SYSTEM                                                                               \
    "{%- if messages and messages[0].role == 'system' -%}"                                         \
    "{%- set system = messages[0].content -%}{%- set turns = messages[1:] -%}"                     \
    "{%- else -%}{%- set system = '' -%}{%- set turns = messages -%}{%- endif -%}"

static const char chatml[] =
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif -%}";

static const char llama2[] =
    SPLIT_SYSTEM "{%- for m in turns -%}"
                 "{%- if m.role == 'user' -%}"
                 "{%- set text = m.content | trim -%}"
                 "{%- if loop.first and system -%}"
                 "{%- set text = '<<SYS>>\\n' + (system | trim) + '\\n<</SYS>>\\n\\n' + text -%}"
                 "{%- endif -%}"
                 "{{ bos_token + '[INST] ' + text + ' [/INST]' }}"
                 "{%- elif m.role == 'assistant' -%}"
                 "{{ ' ' + ((m.content or '') | trim) + ' ' + eos_token }}"
                 "{%- endif -%}"
                 "{%- endfor -%}";

static const char llama3[] =
    "{{- bos_token -}}"
    "{%- for m in messages -%}"
    "{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + ((m.content or '') | trim) "
    "+ '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif -%}";

static const char mistral[] = SPLIT_SYSTEM
    "{{- bos_token -}}"
    "{%- for m in turns -%}"
    "{%- if m.role == 'user' -%}"
    "{%- set text = m.content | trim -%}"
    "{%- if loop.first and system %}{% set text = (system | trim) + '\\n\\n' + text %}{% endif -%}"
    "{{ '[INST] ' + text + ' [/INST]' }}"
    "{%- elif m.role == 'assistant' -%}"
    "{{ ((m.content or '') | trim) + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}";

static const char zephyr[] = "{%- for m in messages -%}"
                             "{{ '<|' + m.role + '|>\\n' + (m.content or '') + eos_token + '\\n' }}"
                             "{%- endfor -%}"
                             "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif -%}";

static const char gemma[] = SPLIT_SYSTEM
    "{{- bos_token -}}"
    "{%- for m in turns -%}"
    "{%- set role = 'model' if m.role == 'assistant' else m.role -%}"
    "{%- set text = (m.content or '') | trim -%}"
    "{%- if loop.first and system %}{% set text = (system | trim) + '\\n\\n' + text %}{% endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + text + '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif -%}";

static const char phi3[] = "{%- for m in messages -%}"
                           "{{ '<|' + m.role + '|>\\n' + (m.content or '') + '<|end|>\\n' }}"
                           "{%- endfor -%}"
                           "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif -%}";

const char *const tl_chat_builtin_names[] = {"chatml", "llama2", "llama3", "mistral",
                                             "zephyr", "gemma",  "phi3",   NULL};
static const char *const sources[] = {chatml, llama2, llama3, mistral, zephyr, gemma, phi3};

const char *tl_chat_builtin_source(const char *name)
{
    for (int i = 0; tl_chat_builtin_names[i]; i++)
        if (!strcmp(tl_chat_builtin_names[i], name)) return sources[i];
    return NULL;
}
