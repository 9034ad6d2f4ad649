/*
 * tokenloom generate: text generation from the command line through the engine.
 *
 *   tokenloom generate [-m MODEL] -p PROMPT [sampling flags] [engine flags]
 *       streams the continuation of PROMPT to stdout as it is produced; prints prompt and
 *       generation speed on stderr. Greedy with --temp 0; the same --seed gives the same text.
 *
 *   tokenloom generate [-m MODEL] --input prompts.jsonl --output results.jsonl [engine flags]
 *       the batch job (batch_job.c): every line submitted at once, one result line each.
 *
 * This file parses the flags (sampling defaults shared by both modes, engine flags), loads the
 * model, creates the engine and runs one of the two. Design: one thread; requests are
 * submitted up front and tl_engine_step is called until none is pending.
 */
#include "cli/batch_job.h"
#include "cli/cli.h"
#include "cli/engine_flags.h"

#include "core/clock.h"

#include <errno.h>
#include <math.h>
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
        fprintf(stderr, "tokenloom generate: %s: '%s' is not a number in [%.10g, %.10g]\n", name, s,
                lo, hi);
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
        tl_model_destroy(m);
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
        rc = tl_cli_batch_job(e, &defaults, input, output, progress);
    }
    tl_engine_destroy(e);
    tl_model_destroy(m);
    return rc;
}
