/*
 * A self-contained mutation fuzzer for the OpenAI request parser (src/server/openai.c), with no
 * libFuzzer: it mutates valid request bodies (byte flips, truncation, duplication, splices of
 * other seeds and of a dictionary of hostile JSON fragments: NUL and lone-surrogate escapes,
 * 64-bit limits, 1e308, -0, deep brackets, duplicate keys, huge n / logprobs / max_tokens),
 * parses each body as both a completions and a chat request, and checks what must hold:
 *   - a rejected body gives a 400 with a message, a param that fits, and an error object that
 *     serializes;
 *   - an accepted body respects every limit in openai.h (prompts, n, n x prompts, stop count
 *     and length, top_logprobs, token ids below n_vocab, max_tokens >= 0, timeout >= 0);
 *   - its messages render with every chat-template family, and the response builders
 *     (tl_oai_string on the raw body bytes, logprobs, choices, envelope) serialize.
 * Everything is deterministic from the seed, so a failure replays exactly. Run it under ASan
 * and UBSan to catch memory errors:
 *
 *   make BUILD=build-san OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
 *   cc -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_openai.c build-san/libtokenloom.a -o build-san/fuzz_openai \
 *       $(pkg-config --cflags --libs jansson libevent libpcre2-8) -lm -pthread
 *   build-san/fuzz_openai [ITERATIONS [SEED]]      (default 200000 iterations, seed 1)
 *
 * tests/unit/test_server_fuzz.c includes this file (with TL_FUZZ_NO_MAIN) and runs a short
 * deterministic burst in `make test`.
 */
#include "core/hash.h"
#include "server/chat_template.h"
#include "server/openai.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_BODY 8192

static const char *const fuzz_seeds[] = {
    "{\"prompt\":[\"a\",\"b\"],\"max_tokens\":5,\"stop\":[\"x\",\"yy\"],\"logprobs\":2,"
    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"echo\":true}",
    "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\","
    "\"content\":[{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"text\",\"text\":\"there\"}]},"
    "{\"role\":\"assistant\",\"content\":null}],\"top_logprobs\":1,\"logprobs\":true,\"n\":2}",
    "{\"prompt\":[[1,2],[3]],\"seed\":-1,\"temperature\":0.5,\"timeout\":2,\"top_k\":-1,"
    "\"min_p\":0.1,\"presence_penalty\":-2,\"frequency_penalty\":2,\"repetition_penalty\":1.1}",
    "{\"model\":\"m\",\"prompt\":[1,2,3,4],\"n\":64,\"max_tokens\":2147483647,\"priority\":-3,"
    "\"ignore_eos\":true,\"stop\":\"\\n\"}",
    "{\"messages\":[{\"role\":\"developer\",\"content\":\"a\\u0000b\"},{\"role\":\"user\","
    "\"content\":\"\\ud83d\\ude00\"}],\"max_completion_tokens\":3,\"stream\":false}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"},{\"role\":\"assistant\","
    "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"arguments\":\"{}\"}}]}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
    "\"f\",\"parameters\":{}}}],\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,"
    "\"logit_bias\":{\"1\":-100,\"2\":3.5},\"response_format\":{\"type\":\"text\"}}",
};
#define FUZZ_N_SEEDS (sizeof(fuzz_seeds) / sizeof(fuzz_seeds[0]))

static const char *const fuzz_dict[] = {
    "\\u0000",
    "\\ud800",
    "\\udc00\\ud800",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "1e-320",
    "-0",
    "0.0",
    "NaN",
    "Infinity",
    "null",
    "true",
    "[[[[[[[[[[[[[[[[",
    "]]]]]]]]",
    "{}",
    "[]",
    "\"\"",
    ",\"n\":64",
    ",\"n\":65",
    ",\"logprobs\":20",
    ",\"top_logprobs\":21",
    ",\"max_tokens\":0",
    ",\"prompt\":[]",
    ",\"prompt\":[[]]",
    ",\"prompt\":[\"\",[1]]",
    ",\"messages\":[{}]",
    ",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]",
    ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]",
    ",\"stop\":[\"\\u0000\"]",
    ",\"stream_options\":{}",
    ",\"timeout\":604801",
    ",\"seed\":1.5",
    "\xef\xbb\xbf",
    "\xff\xfe",
    "\xc3",
};
#define FUZZ_N_DICT (sizeof(fuzz_dict) / sizeof(fuzz_dict[0]))

// xorshift64* (core/hash.h): fast, deterministic, good enough to pick mutations.
static uint64_t fuzz_next(uint64_t *s)
{
    return tl_xorshift64s(s);
}

// Inserts src (n bytes) at `at`, keeping the body under the cap.
static size_t fuzz_insert(char *buf, size_t len, size_t at, const char *src, size_t n)
{
    if (len + n > FUZZ_MAX_BODY) return len;
    memmove(buf + at + n, buf + at, len - at);
    memcpy(buf + at, src, n);
    return len + n;
}

static size_t fuzz_mutate(char *buf, size_t len, uint64_t *rng)
{
    int edits = 1 + (int)(fuzz_next(rng) % 4);
    for (int e = 0; e < edits; e++) {
        uint64_t r = fuzz_next(rng);
        size_t at = len ? (size_t)(r % (len + 1)) : 0;
        switch ((r >> 40) % 7) {
        case 0: // flip a byte
            if (at < len) buf[at] = (char)(r >> 48);
            break;
        case 1: // truncate
            len = at;
            break;
        case 2: // duplicate a run
            if (at < len) {
                size_t n = 1 + (size_t)((r >> 20) % 16);
                if (n > len - at) n = len - at;
                char tmp[16];
                memcpy(tmp, buf + at, n);
                len = fuzz_insert(buf, len, at, tmp, n);
            }
            break;
        case 3: // delete a run
            if (at < len) {
                size_t n = 1 + (size_t)((r >> 20) % 16);
                if (n > len - at) n = len - at;
                memmove(buf + at, buf + at + n, len - at - n);
                len -= n;
            }
            break;
        case 4:
        case 5: { // insert a dictionary fragment
            const char *d = fuzz_dict[(r >> 8) % FUZZ_N_DICT];
            // A ",key":value fragment goes before the closing brace half of the time, where
            // it keeps the body valid JSON and reaches the field checks.
            if (d[0] == ',' && len && buf[len - 1] == '}' && (r & 1)) at = len - 1;
            len = fuzz_insert(buf, len, at, d, strlen(d));
            break;
        }
        default: { // splice: a slice of another seed
            const char *o = fuzz_seeds[(r >> 8) % FUZZ_N_SEEDS];
            size_t ol = strlen(o), from = (size_t)((r >> 16) % ol);
            size_t n = 1 + (size_t)((r >> 28) % (ol - from));
            len = fuzz_insert(buf, len, at, o + from, n);
            break;
        }
        }
    }
    return len;
}

// Returns a description of the first broken invariant, or NULL.
static const char *fuzz_check_accepted(const struct tl_oai_params *p, enum tl_oai_kind k,
                                       const struct tl_oai_limits *lim, const char *body,
                                       size_t len)
{
    if (p->n < 1 || p->n > TL_OAI_MAX_N) return "n out of range";
    if (p->n_stop < 0 || p->n_stop > TL_OAI_MAX_STOP) return "too many stop strings";
    for (int i = 0; i < p->n_stop; i++) {
        size_t sl = strlen(p->stop[i]);
        if (sl == 0 || sl > TL_OAI_MAX_STOP_LEN) return "stop string length";
    }
    if (p->top_logprobs < 0 || p->top_logprobs > TL_OAI_MAX_LOGPROBS) return "top_logprobs";
    if (p->sampling.n_logprobs != p->top_logprobs) return "n_logprobs";
    if (p->max_tokens < 0) return "max_tokens negative";
    if (p->timeout_ms < 0) return "timeout negative";
    if (!(p->sampling.temperature >= 0 && p->sampling.temperature <= 2)) return "temperature";
    if (!(p->sampling.top_p > 0 && p->sampling.top_p <= 1)) return "top_p";
    if (p->include_usage && !p->stream) return "include_usage without stream";
    if (k == TL_OAI_COMPLETION) {
        if (p->n_prompts < 1 || p->prompts == NULL) return "no prompt";
        if (p->n_prompts > 1 && p->n_prompts > TL_OAI_MAX_PROMPTS) return "too many prompts";
        if ((int64_t)p->n * p->n_prompts > TL_OAI_MAX_CHOICES) return "n x prompts";
        for (int i = 0; i < p->n_prompts; i++) {
            const struct tl_oai_prompt *q = &p->prompts[i];
            if (!q->text && !q->tokens) return "prompt without text or tokens";
            for (int64_t t = 0; q->tokens && t < q->n_tokens; t++)
                if (q->tokens[t] < 0 || q->tokens[t] >= lim->n_vocab) return "token id range";
        }
    } else {
        if (p->n_msgs < 1 || p->n_msgs > TL_OAI_MAX_MESSAGES) return "message count";
        // One built-in template per body (rotating): accepted messages always render.
        static struct tl_chat_template tmpl[TL_CHAT_COUNT];
        int f = (int)(len % TL_CHAT_COUNT);
        if (!tmpl[f].jinja &&
            tl_chat_template_init(&tmpl[f], tl_chat_family_name((enum tl_chat_family)f), NULL, NULL,
                                  "<s>", "</s>"))
            return "built-in chat template failed to load";
        char *out = NULL;
        size_t out_len = 0;
        const char *param = NULL;
        json_t *tools = json_object_get(p->root, "tools");
        json_t *kw = json_object_get(p->root, "chat_template_kwargs");
        bool odd_fields = (tools && !json_is_array(tools) && !json_is_null(tools)) ||
                          (kw && !json_is_object(kw) && !json_is_null(kw)) ||
                          json_object_get(p->root, "add_generation_prompt") ||
                          json_object_get(p->root, "continue_final_message") ||
                          json_object_get(p->root, "functions") ||
                          json_object_get(p->root, "documents");
        if (tl_chat_template_apply(&tmpl[f], p->root, &out, &out_len, &param) && !odd_fields)
            return "chat render failed on accepted messages";
        if (out && out[out_len] != '\0') return "chat render output";
        free(out);
    }
    // Response builders on hostile bytes: the body itself as generated text and tokens.
    struct tl_oai_logprobs lp;
    if (!tl_oai_logprobs_init(&lp, k, 0)) return "logprobs init";
    struct tl_token_logprob top[2] = {{1, -0.5f}, {2, -INFINITY}};
    const char *tops[2] = {body, body + len / 2};
    size_t tops_len[2] = {len / 2, len - len / 2};
    if (!tl_oai_logprobs_add(&lp, body, len, NAN, top, tops, tops_len, 2) ||
        !tl_oai_logprobs_add(&lp, body, len / 3, -1.0f, top, tops, tops_len, 2))
        return "logprobs add";
    json_t *choice = k == TL_OAI_CHAT
                         ? tl_oai_chat_choice(0, body, len, tl_oai_logprobs_take(&lp), "stop")
                         : tl_oai_text_choice(0, body, len, tl_oai_logprobs_take(&lp), NULL);
    json_t *env =
        tl_oai_envelope("id", "x", 0, p->model ? p->model : "m", json_pack("[o]", choice));
    char *text = json_dumps(env, JSON_COMPACT);
    json_decref(env);
    tl_oai_logprobs_free(&lp);
    if (!text) return "response does not serialize";
    free(text);
    return NULL;
}

static const char *fuzz_check_rejected(const struct tl_oai_error *e)
{
    if (e->http_status != 400) return "rejected without a 400";
    if (!e->message[0]) return "error without a message";
    if (strlen(e->param) >= sizeof(e->param)) return "param overflow";
    json_t *j = tl_oai_error_json(e);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) return "error object does not serialize";
    free(text);
    return NULL;
}

// Runs `iters` mutated bodies from `seed`. Returns 0, or 1 after printing the failing body.
static int fuzz_openai_run(uint64_t seed, long iters, long *n_accepted)
{
    static char buf[FUZZ_MAX_BODY + 1];
    const struct tl_oai_limits lim = {.n_vocab = 512};
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    long accepted = 0;
    for (long it = 0; it < iters; it++) {
        const char *s0 = fuzz_seeds[(size_t)it % FUZZ_N_SEEDS];
        size_t len = strlen(s0);
        memcpy(buf, s0, len);
        len = fuzz_mutate(buf, len, &rng);
        buf[len] = '\0';
        for (int k = 0; k < 2; k++) {
            enum tl_oai_kind kind = k ? TL_OAI_CHAT : TL_OAI_COMPLETION;
            struct tl_oai_params p;
            struct tl_oai_error e;
            memset(&e, 0, sizeof(e));
            const char *why;
            if (tl_oai_parse(kind, buf, len, &lim, &p, &e)) {
                accepted++;
                why = fuzz_check_accepted(&p, kind, &lim, buf, len);
                tl_oai_params_free(&p);
            } else {
                why = fuzz_check_rejected(&e);
            }
            if (why) {
                fprintf(stderr, "fuzz_openai: seed %llu iteration %ld (%s): %s\nbody (%zu bytes): ",
                        (unsigned long long)seed, it, kind ? "chat" : "completion", why, len);
                fwrite(buf, 1, len, stderr);
                fputc('\n', stderr);
                return 1;
            }
        }
    }
    if (n_accepted) *n_accepted = accepted;
    return 0;
}

#ifndef TL_FUZZ_NO_MAIN
int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    long accepted = 0;
    int rc = fuzz_openai_run(seed, iters, &accepted);
    if (!rc)
        printf("fuzz_openai: %ld bodies x 2 kinds from seed %llu: ok (%ld parses accepted)\n",
               iters, (unsigned long long)seed, accepted);
    return rc;
}
#endif
