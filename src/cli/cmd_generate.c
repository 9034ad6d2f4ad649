/*
 * tokenloom generate: text generation from the command line through the engine.
 *
 *   tokenloom generate [-m MODEL] -p PROMPT [sampling flags] [engine flags]
 *       streams the continuation of PROMPT to stdout as it is produced; prints prompt and
 *       generation speed on stderr. Greedy with --temp 0; the same --seed gives the same text.
 *
 *   tokenloom generate [-m MODEL] --input prompts.jsonl --output results.jsonl [engine flags]
 *       the batch job: every line of the input is an OpenAI-completions-like object
 *       ({"prompt": ..., "id": ..., "max_tokens": ..., "temperature": ..., "stop": ...}); all
 *       are submitted at once and the engine batches them; one result line per request is
 *       written in input order. A bad line is reported (stderr and an error line in the
 *       output, naming the line number) and the others still run; the exit code is then 1.
 *
 * Design: one thread. Requests are submitted up front and tl_engine_step is called until none
 * is pending; event callbacks write streamed text (single mode) or collect each result
 * (batch mode), and results are written as soon as every earlier line has finished.
 */
#include "cli/cli.h"
#include "cli/engine_flags.h"

#include "core/clock.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tokenloom generate [-m MODEL] -p PROMPT [options] [engine flags]\n"
            "       tokenloom generate [-m MODEL] --input FILE.jsonl --output FILE.jsonl "
            "[engine flags]\n"
            "\n"
            "  -m, --model PATH          GGUF model or llama2.c checkpoint (default: $MODEL or\n"
            "                            ../shared/models/stories260K.gguf)\n"
            "  --tokenizer PATH          tokenizer for llama2.c checkpoints\n"
            "  -p, --prompt TEXT         the prompt; the continuation streams to stdout\n"
            "  -n, --max-tokens N        tokens to generate (default 128)\n"
            "  --temp T                  temperature; 0 = greedy (default 0.8)\n"
            "  --top-k K                 keep the K most likely tokens; 0 = off (default 40)\n"
            "  --top-p P                 nucleus sampling; 1 = off (default 0.95)\n"
            "  --min-p P                 drop tokens below P x the best one's probability\n"
            "                            (default 0.05)\n"
            "  --seed S                  RNG seed (default: random, printed on stderr)\n"
            "  --repeat-penalty R        CTRL repetition penalty over prompt+output (default 1)\n"
            "  --presence-penalty P      OpenAI presence penalty (default 0)\n"
            "  --frequency-penalty F     OpenAI frequency penalty (default 0)\n"
            "  --stop TEXT               stop string (repeatable); not included in the output\n"
            "  --ignore-eos              keep generating past end-of-generation tokens\n"
            "  --no-special              do not add BOS/special tokens to the prompt\n"
            "\n"
            "batch job:\n"
            "  --input FILE              JSONL, one request per line ('-' = stdin): prompt "
            "(string),\n"
            "                            and optional id, max_tokens (default 16), temperature "
            "(default 1),\n"
            "                            top_p, top_k, min_p, seed, stop (string or array), "
            "ignore_eos,\n"
            "                            presence_penalty, frequency_penalty, "
            "repetition_penalty, priority\n"
            "  --output FILE             JSONL results in input order ('-' = stdout): id, text,\n"
            "                            prompt_tokens, completion_tokens, finish_reason, "
            "ttft_ms,\n"
            "                            total_ms; or id, line, error\n"
            "  --progress / --no-progress  progress bar on stderr (default: when a terminal)\n"
            "\n");
    tl_cli_engine_flags_help(f);
}

// "--name value" or "--name=value" for either spelling; 1 matched, 0 not it, -1 missing value.
static int flag(const char *name, const char *alt, int argc, char **argv, int *i, const char **val)
{
    const char *names[2] = {name, alt};
    for (int k = 0; k < 2; k++) {
        if (!names[k]) continue;
        size_t n = strlen(names[k]);
        if (strncmp(argv[*i], names[k], n) != 0) continue;
        if (argv[*i][n] == '=') {
            *val = argv[*i] + n + 1;
            return 1;
        }
        if (argv[*i][n] != '\0') continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "tokenloom generate: %s needs a value\n", names[k]);
            return -1;
        }
        *val = argv[++*i];
        return 1;
    }
    return 0;
}

static int num(const char *name, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tokenloom generate: %s: '%s' is not a number in [%g, %g]\n", name, s, lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int integer(const char *name, const char *s, double lo, double hi, double *out)
{
    if (num(name, s, lo, hi, out)) return -1;
    if (*out != floor(*out)) {
        fprintf(stderr, "tokenloom generate: %s: '%s' is not an integer\n", name, s);
        return -1;
    }
    return 0;
}

// ---- single prompt ----------------------------------------------------------------------------

struct single {
    bool done;
    struct tl_event last; // the DONE event
};

static void single_event(void *user, const struct tl_event *ev)
{
    struct single *s = user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    if (ev->type == TL_EVENT_DONE) {
        s->done = true;
        s->last = *ev;
        s->last.text = NULL;
        s->last.error = NULL;
        if (ev->finish == TL_FINISH_ERROR)
            fprintf(stderr, "\ntokenloom generate: %s\n", ev->error ? ev->error : "error");
    }
}

static int run_single(tl_engine *e, struct tl_request *r)
{
    struct single s = {0};
    r->on_event = single_event;
    r->user = &s;
    uint64_t id;
    if (tl_engine_submit(e, r, &id)) {
        fprintf(stderr, "tokenloom generate: %s\n", tl_last_error());
        return 1;
    }
    int64_t n = 1;
    while (n > 0)
        if (tl_engine_step(e, &n)) {
            fprintf(stderr, "tokenloom generate: %s\n", tl_last_error());
            return 1;
        }
    fputc('\n', stdout);
    fflush(stdout);
    const struct tl_event *d = &s.last;
    double ttft = (double)d->ttft_us / 1e6, gen = (double)(d->total_us - d->ttft_us) / 1e6;
    // The first token comes with the prompt pass; the others are decode steps.
    fprintf(stderr,
            "prompt: %lld tokens (%lld cached) in %.1f ms, %.1f tok/s | generation: %lld "
            "tokens in %.1f ms, %.1f tok/s | finish: %s\n",
            (long long)d->n_prompt_tokens, (long long)d->n_cached_tokens, ttft * 1e3,
            ttft > 0 ? (double)d->n_prompt_tokens / ttft : 0.0, (long long)d->n_generated,
            gen * 1e3, gen > 0 && d->n_generated > 1 ? (double)(d->n_generated - 1) / gen : 0.0,
            tl_finish_reason_str(d->finish));
    return d->finish == TL_FINISH_ERROR ? 1 : 0;
}

// ---- batch job --------------------------------------------------------------------------------

struct job {
    long line;   // 1-based line number in the input
    json_t *id;  // owned: the request's id (string or number), or the line number
    char *error; // owned: why this line failed (no request was run), or NULL
    char *text;  // owned: generated text
    size_t len, cap;
    bool done;
    struct tl_event result; // the DONE event (pointers cleared)
    char *run_error;        // owned: DONE error message
};

struct batch {
    struct job *jobs; // owned, (n_jobs)
    size_t n_jobs, cap_jobs;
    size_t next_out; // results written so far (in order)
    size_t n_done, n_failed;
    int64_t gen_tokens, prompt_tokens;
    FILE *out;
    bool progress;
    int64_t t_start_us, t_progress_us;
};

static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static void batch_event(void *user, const struct tl_event *ev)
{
    struct job *j = user;
    if (ev->text_len) {
        if (j->len + ev->text_len + 1 > j->cap) {
            size_t ncap = j->cap ? j->cap * 2 : 256;
            while (ncap < j->len + ev->text_len + 1)
                ncap *= 2;
            char *t = realloc(j->text, ncap);
            if (!t) return; // keep what we have; reported as truncated text
            j->text = t;
            j->cap = ncap;
        }
        memcpy(j->text + j->len, ev->text, ev->text_len);
        j->len += ev->text_len;
    }
    if (ev->type == TL_EVENT_DONE) {
        j->done = true;
        j->result = *ev;
        j->result.text = NULL;
        j->result.error = NULL;
        if (ev->error) j->run_error = strdup(ev->error);
    }
}

// Reads an optional field of type `want`; returns 0 (absent or ok) or -1 with *err set.
static int get_num(json_t *o, const char *key, double lo, double hi, bool integral, double *out,
                   bool *present, char **err)
{
    json_t *v = json_object_get(o, key);
    *present = v != NULL;
    if (!v || json_is_null(v)) {
        *present = false;
        return 0;
    }
    if (!json_is_number(v) || (integral && !json_is_integer(v))) {
        *err = dupf("'%s' must be %s", key, integral ? "an integer" : "a number");
        return -1;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        *err = dupf("'%s' must be in [%g, %g] (got %g)", key, lo, hi, d);
        return -1;
    }
    *out = d;
    return 0;
}

// Fills r from one JSON line. Returns 0, or -1 with *err (malloc'd) set. The strings of stop
// (owned, *stops) stay valid until freed by the caller.
static int parse_line(json_t *o, const struct tl_request *defaults, struct tl_request *r,
                      const char ***stops, int32_t **tokens, char **err)
{
    static const char *known[] = {"prompt",
                                  "id",
                                  "custom_id",
                                  "max_tokens",
                                  "temperature",
                                  "top_p",
                                  "top_k",
                                  "min_p",
                                  "seed",
                                  "stop",
                                  "ignore_eos",
                                  "presence_penalty",
                                  "frequency_penalty",
                                  "repetition_penalty",
                                  "priority",
                                  "logprobs",
                                  "n_logprobs"};
    *r = *defaults;
    if (!json_is_object(o)) {
        *err = dupf("a line must be a JSON object");
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val)
    {
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            ok |= !strcmp(key, known[k]);
        if (!ok) {
            *err = dupf("unknown field '%s'", key);
            return -1;
        }
    }
    json_t *p = json_object_get(o, "prompt");
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        r->prompt_len = json_string_length(p);
        if (r->prompt_len == 0) {
            *err = dupf("'prompt' is empty");
            return -1;
        }
    } else if (json_is_array(p) && json_array_size(p) > 0 && json_array_size(p) < (1u << 24)) {
        size_t n = json_array_size(p);
        *tokens = malloc(n * sizeof(int32_t));
        if (!*tokens) {
            *err = dupf("out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(p, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) > INT32_MAX) {
                *err = dupf("'prompt' token %zu is not a token id", i);
                return -1;
            }
            (*tokens)[i] = (int32_t)json_integer_value(t);
        }
        r->prompt_tokens = *tokens;
        r->n_prompt_tokens = (int64_t)n;
    } else {
        *err = dupf(p ? "'prompt' must be a string or an array of token ids" : "missing 'prompt'");
        return -1;
    }
    double d;
    bool has;
    if (get_num(o, "max_tokens", 1, INT32_MAX, true, &d, &has, err)) return -1;
    if (has) r->max_tokens = (int32_t)d;
    if (get_num(o, "temperature", 0, 1e6, false, &d, &has, err)) return -1;
    if (has) r->sampling.temperature = (float)d;
    if (get_num(o, "top_p", 1e-9, 1, false, &d, &has, err)) return -1;
    if (has) r->sampling.top_p = (float)d;
    if (get_num(o, "top_k", -1, INT32_MAX, true, &d, &has, err)) return -1;
    if (has) r->sampling.top_k = d < 0 ? 0 : (int32_t)d; // -1 = off, as vLLM
    if (get_num(o, "min_p", 0, 1, false, &d, &has, err)) return -1;
    if (has) r->sampling.min_p = (float)d;
    if (get_num(o, "seed", -9.3e18, 1.8e19, true, &d, &has, err)) return -1;
    if (has) {
        json_int_t s = json_integer_value(json_object_get(o, "seed"));
        r->sampling.seed = (uint64_t)s;
    }
    if (get_num(o, "presence_penalty", -2, 2, false, &d, &has, err)) return -1;
    if (has) r->sampling.presence_penalty = (float)d;
    if (get_num(o, "frequency_penalty", -2, 2, false, &d, &has, err)) return -1;
    if (has) r->sampling.frequency_penalty = (float)d;
    if (get_num(o, "repetition_penalty", 1e-6, 1e6, false, &d, &has, err)) return -1;
    if (has) r->sampling.repetition_penalty = (float)d;
    if (get_num(o, "priority", INT32_MIN, INT32_MAX, true, &d, &has, err)) return -1;
    if (has) r->priority = (int32_t)d;
    json_t *lp = json_object_get(o, "logprobs");
    if (!lp) lp = json_object_get(o, "n_logprobs");
    if (lp && !json_is_null(lp)) {
        if (!json_is_integer(lp) || json_integer_value(lp) < 0 || json_integer_value(lp) > 20) {
            *err = dupf("'logprobs' must be an integer in [0, 20]");
            return -1;
        }
        r->sampling.n_logprobs = (int32_t)json_integer_value(lp);
    }
    json_t *ie = json_object_get(o, "ignore_eos");
    if (ie && !json_is_null(ie)) {
        if (!json_is_boolean(ie)) {
            *err = dupf("'ignore_eos' must be true or false");
            return -1;
        }
        r->ignore_eos = json_is_true(ie);
    }
    json_t *st = json_object_get(o, "stop");
    if (json_is_string(st)) {
        *stops = malloc(sizeof(char *));
        if (!*stops) goto out_nomem;
        (*stops)[0] = json_string_value(st);
        r->stop = *stops;
        r->n_stop = 1;
    } else if (json_is_array(st)) {
        size_t n = json_array_size(st);
        if (n > 64) {
            *err = dupf("'stop' has more than 64 strings");
            return -1;
        }
        *stops = malloc((n ? n : 1) * sizeof(char *));
        if (!*stops) goto out_nomem;
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(st, i);
            if (!json_is_string(s)) {
                *err = dupf("'stop' must be a string or an array of strings");
                return -1;
            }
            (*stops)[i] = json_string_value(s);
        }
        r->stop = *stops;
        r->n_stop = (int32_t)n;
    } else if (st && !json_is_null(st)) {
        *err = dupf("'stop' must be a string or an array of strings");
        return -1;
    }
    return 0;
out_nomem:
    *err = dupf("out of memory");
    return -1;
}

static void write_result(struct batch *b, struct job *j)
{
    json_t *o = json_object();
    json_object_set(o, "id", j->id);
    if (j->error) {
        json_object_set_new(o, "line", json_integer(j->line));
        json_object_set_new(o, "error", json_string(j->error));
    } else {
        const struct tl_event *d = &j->result;
        json_object_set_new(o, "text", json_stringn(j->text ? j->text : "", j->len));
        json_object_set_new(o, "prompt_tokens", json_integer(d->n_prompt_tokens));
        json_object_set_new(o, "completion_tokens", json_integer(d->n_generated));
        json_object_set_new(o, "cached_tokens", json_integer(d->n_cached_tokens));
        json_object_set_new(o, "finish_reason", json_string(tl_finish_reason_str(d->finish)));
        json_object_set_new(o, "ttft_ms", json_real(round((double)d->ttft_us / 10.0) / 100.0));
        json_object_set_new(o, "total_ms", json_real(round((double)d->total_us / 10.0) / 100.0));
        if (j->run_error) json_object_set_new(o, "error", json_string(j->run_error));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (s) {
        fputs(s, b->out);
        fputc('\n', b->out);
        free(s);
    }
    json_decref(o);
}

static void flush_results(struct batch *b)
{
    while (b->next_out < b->n_jobs) {
        struct job *j = &b->jobs[b->next_out];
        if (!j->error && !j->done) break;
        write_result(b, j);
        b->next_out++;
    }
    fflush(b->out);
}

static void show_progress(struct batch *b, bool final)
{
    if (!b->progress) return;
    int64_t now = tl_time_us();
    if (!final && now - b->t_progress_us < 100000) return;
    b->t_progress_us = now;
    size_t done = 0;
    for (size_t i = 0; i < b->n_jobs; i++)
        done += b->jobs[i].done || b->jobs[i].error;
    int width = 30, fill = b->n_jobs ? (int)((double)done / (double)b->n_jobs * width) : width;
    double secs = (double)(now - b->t_start_us) / 1e6;
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu  %.1f tok/s  %.1fs", fill,
            "==============================", width - fill, "", done, b->n_jobs,
            secs > 0 ? (double)b->gen_tokens / secs : 0.0, secs);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

static int run_batch(tl_engine *e, const struct tl_request *defaults, const char *in_path,
                     const char *out_path, int progress)
{
    FILE *in = strcmp(in_path, "-") ? fopen(in_path, "r") : stdin;
    if (!in) {
        fprintf(stderr, "tokenloom generate: %s: %s\n", in_path, strerror(errno));
        return 1;
    }
    struct batch b = {0};
    b.out = strcmp(out_path, "-") ? fopen(out_path, "w") : stdout;
    if (!b.out) {
        fprintf(stderr, "tokenloom generate: %s: %s\n", out_path, strerror(errno));
        if (in != stdin) fclose(in);
        return 1;
    }
    b.progress = progress < 0 ? isatty(2) : progress;
    b.t_start_us = tl_time_us();
    int rc = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t n;
    long line_no = 0;
    // First read every line, so that job pointers (the callbacks' user data) are stable.
    json_t **objs = NULL;
    size_t cap_objs = 0;
    while ((n = getline(&line, &line_cap, in)) >= 0) {
        line_no++;
        size_t k = 0;
        while (k < (size_t)n && strchr(" \t\r\n", line[k]))
            k++;
        if (k == (size_t)n) continue; // blank lines are not requests
        if (b.n_jobs == b.cap_jobs) {
            size_t nc = b.cap_jobs ? b.cap_jobs * 2 : 64;
            struct job *nj = realloc(b.jobs, nc * sizeof(*nj));
            json_t **no = realloc(objs, nc * sizeof(*no));
            if (nj) b.jobs = nj;
            if (no) objs = no;
            if (!nj || !no) {
                fprintf(stderr, "tokenloom generate: out of memory at line %ld\n", line_no);
                rc = 1;
                break;
            }
            b.cap_jobs = cap_objs = nc;
        }
        struct job *j = &b.jobs[b.n_jobs];
        memset(j, 0, sizeof(*j));
        j->line = line_no;
        json_error_t jerr;
        objs[b.n_jobs] = json_loadb(line, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
        if (!objs[b.n_jobs]) j->error = dupf("invalid JSON: %s", jerr.text);
        json_t *id = objs[b.n_jobs] && json_is_object(objs[b.n_jobs])
                         ? json_object_get(objs[b.n_jobs], "id")
                         : NULL;
        if (!id && objs[b.n_jobs] && json_is_object(objs[b.n_jobs]))
            id = json_object_get(objs[b.n_jobs], "custom_id");
        j->id = id ? json_incref(id) : json_integer(line_no);
        b.n_jobs++;
    }
    (void)cap_objs;
    free(line);
    if (in != stdin) fclose(in);

    for (size_t i = 0; i < b.n_jobs && !rc; i++) {
        struct job *j = &b.jobs[i];
        if (j->error) continue;
        struct tl_request r;
        const char **stops = NULL;
        int32_t *tokens = NULL;
        if (parse_line(objs[i], defaults, &r, &stops, &tokens, &j->error) == 0) {
            r.on_event = batch_event;
            r.user = j;
            uint64_t id;
            if (tl_engine_submit(e, &r, &id)) j->error = dupf("%s", tl_last_error());
        }
        free(stops);
        free(tokens);
    }
    for (size_t i = 0; i < b.n_jobs; i++) {
        if (!b.jobs[i].error) continue;
        b.n_failed++;
        fprintf(stderr, "tokenloom generate: %s:%ld: %s\n", in_path, b.jobs[i].line,
                b.jobs[i].error);
    }
    flush_results(&b);
    int64_t n_pending = 1;
    while (!rc && n_pending > 0) {
        if (tl_engine_step(e, &n_pending)) {
            fprintf(stderr, "tokenloom generate: %s\n", tl_last_error());
            rc = 1;
            break;
        }
        struct tl_engine_stats st;
        tl_engine_get_stats(e, &st);
        b.gen_tokens = st.generation_tokens_total;
        b.prompt_tokens = st.prompt_tokens_total;
        flush_results(&b);
        show_progress(&b, false);
    }
    show_progress(&b, true);
    double secs = (double)(tl_time_us() - b.t_start_us) / 1e6;
    fprintf(stderr,
            "%zu requests (%zu failed): %lld prompt tokens computed, %lld generated in %.2f s: "
            "%.1f tok/s generation\n",
            b.n_jobs, b.n_failed, (long long)b.prompt_tokens, (long long)b.gen_tokens, secs,
            secs > 0 ? (double)b.gen_tokens / secs : 0.0);
    for (size_t i = 0; i < b.n_jobs; i++) {
        json_decref(objs[i]);
        json_decref(b.jobs[i].id);
        free(b.jobs[i].error);
        free(b.jobs[i].text);
        free(b.jobs[i].run_error);
    }
    free(objs);
    free(b.jobs);
    if (b.out != stdout && fclose(b.out) != 0) {
        fprintf(stderr, "tokenloom generate: %s: %s\n", out_path, strerror(errno));
        rc = 1;
    }
    return rc ? rc : b.n_failed ? 1 : 0;
}

// ---- entry ------------------------------------------------------------------------------------

int tl_cmd_generate(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = NULL, *input = NULL, *output = NULL;
    struct tl_model_params mp = {0};
    struct tl_engine_config cfg;
    tl_engine_config_default(&cfg);
    struct tl_request r;
    tl_request_default(&r);
    r.max_tokens = 128;
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.min_p = 0.05f;
    bool seed_given = false;
    int progress = -1;
    const char *stops[64];
    int32_t n_stops = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        double d;
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        int ef = tl_cli_engine_flag(&cfg, argc, argv, &i);
        if (ef < 0) return 2;
        if (ef > 0) continue;
        if ((m = flag("--model", "-m", argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            model_path = v;
            continue;
        }
        if ((m = flag("--tokenizer", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            mp.tokenizer_path = v;
            continue;
        }
        if ((m = flag("--prompt", "-p", argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            prompt = v;
            continue;
        }
        if ((m = flag("--input", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            input = v;
            continue;
        }
        if ((m = flag("--output", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            output = v;
            continue;
        }
        if ((m = flag("--max-tokens", "-n", argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (integer("--max-tokens", v, 1, INT32_MAX, &d)) return 2;
            r.max_tokens = (int32_t)d;
            continue;
        }
        if ((m = flag("--temp", "--temperature", argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (num("--temp", v, 0, 1e6, &d)) return 2;
            r.sampling.temperature = (float)d;
            continue;
        }
        if ((m = flag("--top-k", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (integer("--top-k", v, 0, INT32_MAX, &d)) return 2;
            r.sampling.top_k = (int32_t)d;
            continue;
        }
        if ((m = flag("--top-p", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (num("--top-p", v, 1e-9, 1, &d)) return 2;
            r.sampling.top_p = (float)d;
            continue;
        }
        if ((m = flag("--min-p", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (num("--min-p", v, 0, 1, &d)) return 2;
            r.sampling.min_p = (float)d;
            continue;
        }
        if ((m = flag("--seed", "-s", argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') {
                fprintf(stderr,
                        "tokenloom generate: --seed: '%s' is not a 64-bit unsigned "
                        "integer\n",
                        v);
                return 2;
            }
            r.sampling.seed = s;
            seed_given = true;
            continue;
        }
        if ((m = flag("--repeat-penalty", "--repetition-penalty", argc, argv, &i, &v)) < 0)
            return 2;
        if (m) {
            if (num("--repeat-penalty", v, 1e-6, 1e6, &d)) return 2;
            r.sampling.repetition_penalty = (float)d;
            continue;
        }
        if ((m = flag("--presence-penalty", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (num("--presence-penalty", v, -2, 2, &d)) return 2;
            r.sampling.presence_penalty = (float)d;
            continue;
        }
        if ((m = flag("--frequency-penalty", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (num("--frequency-penalty", v, -2, 2, &d)) return 2;
            r.sampling.frequency_penalty = (float)d;
            continue;
        }
        if ((m = flag("--stop", NULL, argc, argv, &i, &v)) < 0) return 2;
        if (m) {
            if (n_stops == 64) {
                fprintf(stderr, "tokenloom generate: at most 64 --stop strings\n");
                return 2;
            }
            stops[n_stops++] = v;
            continue;
        }
        if (!strcmp(argv[i], "--ignore-eos")) {
            r.ignore_eos = true;
        } else if (!strcmp(argv[i], "--no-special")) {
            r.add_special = false;
        } else if (!strcmp(argv[i], "--progress")) {
            progress = 1;
        } else if (!strcmp(argv[i], "--no-progress")) {
            progress = 0;
        } else {
            fprintf(stderr, "tokenloom generate: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!prompt && !input) {
        fprintf(stderr, "tokenloom generate: give -p PROMPT or --input FILE.jsonl\n");
        usage(stderr);
        return 2;
    }
    if (prompt && input) {
        fprintf(stderr, "tokenloom generate: -p and --input are exclusive\n");
        return 2;
    }
    if (input && !output) {
        fprintf(stderr, "tokenloom generate: --input needs --output FILE.jsonl ('-' = stdout)\n");
        return 2;
    }
    if (!model_path) model_path = tl_cli_default_model();
    if (!model_path) {
        fprintf(stderr, "tokenloom generate: no model: give -m PATH or set $MODEL\n");
        return 2;
    }

    tl_model *m = NULL;
    if (tl_model_load(model_path, &mp, &m)) {
        fprintf(stderr, "tokenloom generate: %s\n", tl_last_error());
        return 1;
    }
    // When the context is not given, a single prompt needs only one sequence's worth of KV.
    if (prompt && cfg.kv_blocks == 0 && cfg.kv_bytes == 0) cfg.max_batch_size = 1;
    tl_engine *e = NULL;
    if (tl_engine_create(m, &cfg, &e)) {
        fprintf(stderr, "tokenloom generate: %s\n", tl_last_error());
        tl_model_free(m);
        return 1;
    }
    int rc;
    if (prompt) {
        if (!seed_given) {
            r.sampling.seed = (uint64_t)tl_wall_time_us() ^ ((uint64_t)getpid() << 32);
            fprintf(stderr, "seed: %llu\n", (unsigned long long)r.sampling.seed);
        }
        r.prompt = prompt;
        r.prompt_len = strlen(prompt);
        r.stop = stops;
        r.n_stop = n_stops;
        rc = run_single(e, &r);
    } else {
        // Batch defaults follow the OpenAI completions API: max_tokens 16, temperature 1, no
        // top-k/top-p/min-p, seed 0 unless the line gives one.
        struct tl_request defaults;
        tl_request_default(&defaults);
        defaults.max_tokens = 16;
        defaults.add_special = r.add_special;
        defaults.ignore_eos = r.ignore_eos;
        rc = run_batch(e, &defaults, input, output, progress);
    }
    tl_engine_destroy(e);
    tl_model_free(m);
    return rc;
}
