/*
 * Chat template rendering cost: a 20-turn conversation with two tools, each assistant turn
 * holding a tool call and each followed by its tool result, rendered through the longest shared
 * template (meetkai-functionary-medium-v3.2, 12.8 KB of Jinja) and every other shared template.
 * Reports microseconds per render (best of 5 batches; thread CPU time, so a loaded machine's
 * stolen time does not count) and the parse cost. The server renders on its event loop, so
 * this number is the loop stall per chat request.
 *
 *   ./build/bench/bench_jinja [--templates DIR] [--iters N]
 */
#include "chat/chat_render.h"

#include <stdbool.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

// turns user turns; with_calls: each answered by a tool call, its result and a text reply (vLLM
// passes the call's arguments parsed, which Functionary and DeepSeek templates refuse), else by
// a text reply only.
static json_t *conversation(int turns, bool with_calls)
{
    json_t *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content",
                                          "You are a helpful assistant with tools."));
    for (int i = 0; i < turns; i++) {
        char text[160], id[16], args[96];
        snprintf(text, sizeof(text), "Turn %d: what is the weather in city number %d, and %d+%d?",
                 i, i, i, i + 1);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", text));
        if (!with_calls) {
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content",
                                                  "I would need a tool for that; it is sunny."));
            continue;
        }
        snprintf(id, sizeof(id), "call%05d", i);
        snprintf(args, sizeof(args), "{\"city\": \"City %d\", \"unit\": \"celsius\"}", i);
        json_array_append_new(
            msgs, json_pack("{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]}", "role", "assistant", "content",
                            "", "tool_calls", "id", id, "type", "function", "function", "name",
                            "get_weather", "arguments", args));
        json_array_append_new(msgs, json_pack("{s:s,s:s,s:s,s:s}", "role", "tool", "tool_call_id",
                                              id, "name", "get_weather", "content",
                                              "{\"temperature\": 21.5, \"sky\": \"clear\"}"));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content",
                                              "It is 21.5 degrees and clear."));
    }
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", "Thanks!"));
    return msgs;
}

static json_t *tools(void)
{
    return json_pack(
        "[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s},s:{s:s,s:[s,s]}},s:[s]}}},"
        "{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s},s:{s:s}},s:[s,s]}}}]",
        "type", "function", "function", "name", "get_weather", "description", "Current weather.",
        "parameters", "type", "object", "properties", "city", "type", "string", "unit", "type",
        "string", "enum", "celsius", "fahrenheit", "required", "city", "type", "function",
        "function", "name", "add", "description", "Adds two integers.", "parameters", "type",
        "object", "properties", "a", "type", "integer", "b", "type", "integer", "required", "a",
        "b");
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = buf ? (size_t)n : 0;
    return buf;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    const char *dir = "../shared/templates";
    int iters = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--templates")) dir = argv[i + 1];
        if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_jinja: cannot open %s\n", dir);
        return 1;
    }
    char *names[64];
    int n_names = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n_names < 64)
        if (strstr(e->d_name, ".jinja")) names[n_names++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n_names, sizeof(names[0]), by_name);
    json_t *tl = tools();
    json_t *convs[2] = {conversation(20, true), conversation(20, false)};
    printf("20 user turns with 2 tools: A = each answered by a tool call + result + reply (%zu "
           "messages), B = text replies (%zu messages)\nbest of 5 x %d renders, thread CPU time "
           "(microseconds)\n",
           json_array_size(convs[0]), json_array_size(convs[1]), iters);
    printf("%-52s %6s %8s %9s %-14s %9s %s\n", "template", "bytes", "parse", "render A", "",
           "render B", "");
    for (int k = 0; k < n_names; k++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
        size_t len;
        char *src = read_file(path, &len);
        if (!src) continue;
        char err[512];
        tl_jinja_template *t = NULL;
        double p0 = thread_cpu_us();
        tl_status st = tl_jinja_parse(src, len, &t, err, sizeof(err));
        double parse_us = thread_cpu_us() - p0;
        if (st) {
            printf("%-52s parse error: %s\n", names[k], err);
            free(src);
            continue;
        }
        printf("%-52s %6zu %8.1f", names[k], len, parse_us);
        for (int cv = 0; cv < 2; cv++) {
            struct tl_chat_vars v = {.messages = convs[cv],
                                     .tools = tl,
                                     .bos_token = "<s>",
                                     .eos_token = "</s>",
                                     .add_generation_prompt = true};
            double best = 1e30;
            size_t out_len = 0;
            const char *result = "ok";
            for (int rep = 0; rep < 5; rep++) {
                double t0 = thread_cpu_us();
                for (int i = 0; i < iters; i++) {
                    char *out = NULL;
                    enum tl_jinja_error_kind kind;
                    if (tl_chat_render_vars(t, &v, &out, &out_len, &kind, err, sizeof(err)))
                        result = kind == TL_JINJA_RAISED ? "raised" : "error";
                    free(out);
                }
                double us = (thread_cpu_us() - t0) / iters;
                if (us < best) best = us;
            }
            char what[32];
            snprintf(what, sizeof(what), "%s %zuB", result, out_len);
            printf(" %9.1f %-14s", best, what);
        }
        printf("\n");
        tl_jinja_destroy(t);
        free(src);
        free(names[k]);
    }
    json_decref(convs[0]);
    json_decref(convs[1]);
    json_decref(tl);
    return 0;
}
