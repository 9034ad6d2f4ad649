/*
 * The batch job of `tokenloom generate --input prompts.jsonl --output results.jsonl`: every line
 * of the input is an OpenAI-completions-like object ({"prompt": ..., "id": ..., "max_tokens":
 * ..., "temperature": ..., "stop": ...}); all are submitted to the engine at once and it batches
 * them; one result line per request is written in input order, as soon as every earlier line
 * has finished. A bad line is reported (stderr and an error line in the output, naming the line
 * number) and the others still run; the exit code is then 1. One thread: the caller's.
 */
#include "cli/batch_job.h"
#include "grammar/grammar.h"

#include "core/clock.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
        // %.10g keeps integer bounds such as INT32_MAX whole (%g would print 2.14748e+09)
        *err = dupf("'%s' must be in [%.10g, %.10g] (got %.10g)", key, lo, hi, d);
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
                                  "n_logprobs",
                                  "response_format",
                                  "grammar",
                                  "json_schema",
                                  "guided_json",
                                  "guided_regex",
                                  "guided_choice",
                                  "guided_grammar",
                                  "structured_outputs"};
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
                *err = dupf(json_is_string(t) ? "'prompt' must be one string per line (a list of "
                                                "strings is not a batch here: one line each)"
                                              : "'prompt' token %zu is not a token id",
                            i);
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
    // Structured output, as the server reads it (src/grammar/fields.c). The caller drops this
    // reference after submitting, also when a later field is rejected.
    const char *gparam = NULL;
    if (tl_grammar_from_fields(o, &r->grammar, &gparam)) {
        *err = dupf("'%s': %s", gparam ? gparam : "structured output", tl_last_error());
        return -1;
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

int tl_cli_batch_job(tl_engine *e, const struct tl_request *defaults, const char *in_path,
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
        tl_grammar_unref(r.grammar);
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
