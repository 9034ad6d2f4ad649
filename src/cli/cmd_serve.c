/*
 * tokenloom serve: flag parsing and wiring for the OpenAI-compatible HTTP server
 * (src/server/server.h). The model loads on the server's engine thread while /health answers
 * 503, so the port is open at once; SIGINT/SIGTERM drain in-flight requests and exit 0.
 * Every flag that can be checked without the model (ranges, the listen address, the chat
 * template name, that the model and template files are readable) is checked before the port is
 * bound. --grpc-port adds the Open Inference Protocol front (src/grpc/) on the same server. The
 * engine flags and their vLLM / llama.cpp aliases come from engine_flags.c. The machine the
 * fronts report (kernel ISA, measured ceilings) is found here and handed to the server
 * (front/machine.h; the ceilings through a callback the server runs on its engine thread once
 * the model is loaded), so that the fronts never call into the kernels. Single-threaded until
 * tl_server_run, but for find_ceilings.
 */
#include "cli/cli.h"
#include "cli/args.h"
#include "chat/toolcall.h"
#include "cli/engine_flags.h"
#include "core/log.h"
#include "grammar/grammar.h"
#include "core/clock.h"
#include "grpc/grpc_front.h"
#include "kernels/ceilings.h"
#include "kernels/kernels.h"
#include "server/chat_template.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: tokenloom serve [-m MODEL] [options] [engine flags]\n"
               "\n"
               "  -m, --model PATH          GGUF model or llama2.c checkpoint (default: $MODEL or\n"
               "                            ../shared/models/stories260K.gguf)\n"
               "  --tokenizer PATH          tokenizer for llama2.c checkpoints\n"
               "  --host ADDR               listen address (default 127.0.0.1)\n"
               "  --port N                  listen port (default 8000; 0 = any free port)\n"
               "  --api-key KEY             require 'Authorization: Bearer KEY' (also\n"
               "                            $TOKENLOOM_API_KEY)\n"
               "  --served-model-name NAME  the model id clients send (default: the file's stem)\n"
               "  --chat-template NAME      a built-in chat template instead of the model's:\n"
               "                            chatml, llama2, llama3, mistral, zephyr, gemma, phi3\n"
               "  --chat-template-file PATH a Jinja chat template file instead of the model's\n"
               "  --jinja                   accepted for llama.cpp compatibility (a no-op)\n"
               "  --tool-call-syntax NAME   how the model writes tool calls: hermes, llama3,\n"
               "                            mistral, command-r, command-r7b, functionary-v3.1,\n"
               "                            functionary-v3.2, deepseek-r1, firefunction-v2,\n"
               "                            generic (default: detected from its template)\n"
               "  --max-body-bytes N        larger request bodies get 413 (default 8388608)\n"
               "  --max-queued-requests N   queued engine requests before 429 (default 256)\n"
               "  --shutdown-timeout S      seconds in-flight requests get on SIGINT/SIGTERM\n"
               "                            (default 30)\n"
               "  --http-timeout S          per-connection idle read/write timeout (default 60)\n"
               "  --max-unsent-bytes N      a stream whose client leaves more than N bytes unread\n"
               "                            is cancelled (default 8388608)\n"
               "  --responses-store N       keep at most N finished /v1/responses for\n"
               "                            previous_response_id and GET (default 1000; 0 = none)\n"
               "  --responses-store-bytes N ... and at most N bytes of their JSON (default\n"
               "                            67108864)\n"
               "  --responses-store-ttl S   ... each for at most S seconds (default 3600)\n"
               "  --no-ceilings             do not measure the machine's peak compute and memory\n"
               "                            bandwidth at start (cached per machine in\n"
               "                            ~/.cache/tokenloom): no utilization gauges\n"
               "  --log-format FMT          text (default) or json: one JSON object per line\n"
               "  --grammar-compile-ms N    a grammar or schema still compiling after N ms is a\n"
               "                            400 (default 1000)\n"
               "                            (time, level, msg; access lines add request_id,\n"
               "                            method, path, status, tokens, durations, client)\n"
               "  --grpc-port [N]           also serve the Open Inference Protocol over gRPC\n"
               "                            (off by default; 8500 without a value; 0 = any)\n"
               "\n");
    tl_cli_engine_flags_help(f);
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

// clang-format off
static const char *const serve_flag_names[] = {
    "--model", "-m", "--tokenizer", "--host", "--port", "--api-key", "--served-model-name",
    "--chat-template", "--chat-template-file", "--jinja", "--tool-call-syntax", "--grpc-port",
    "--max-body-bytes", "--no-ceilings",
    "--max-queued-requests", "--shutdown-timeout", "--http-timeout", "--max-unsent-bytes",
    "--responses-store", "--responses-store-bytes", "--responses-store-ttl",
    "--log-format", "--grammar-compile-ms", "--help", NULL};
// clang-format on

// The listen address must be an IPv4/IPv6 literal or a name that resolves; a dotted quad that
// is not an address (999.1.1.1) is refused without a lookup.
static int check_host(const char *host)
{
    unsigned char addr[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1) return 0;
    if (*host && strspn(host, "0123456789.") == strlen(host)) {
        fprintf(stderr, "tokenloom serve: --host: '%s' is not a valid IPv4 address\n", host);
        return -1;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = *host ? getaddrinfo(host, NULL, &hints, &res) : EAI_NONAME;
    if (rc != 0) {
        fprintf(stderr, "tokenloom serve: --host: cannot resolve '%s': %s\n", host,
                gai_strerror(rc));
        return -1;
    }
    freeaddrinfo(res);
    return 0;
}

// A file the server would only open after binding the port: checked now.
static int check_readable(const char *flag, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0) {
        fprintf(stderr, "tokenloom serve: %s: %s: %s\n", flag, path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tokenloom serve: %s: %s is a directory\n", flag, path);
        return -1;
    }
    return 0;
}

// The server's messages may begin with its own "serve: "; the CLI adds "tokenloom serve: ".
static const char *server_error(void)
{
    const char *e = tl_last_error();
    return strncmp(e, "serve: ", 7) ? e : e + 7;
}

// A failure after the flags were read goes through the log, so that with --log-format json
// every line on stderr is JSON (flag errors before that are plain usage messages).
static void runtime_error(const char *msg)
{
    if (tl_log_get_format() == TL_LOG_FORMAT_JSON)
        TL_LOGE("serve: %s", msg);
    else
        fprintf(stderr, "tokenloom serve: %s\n", msg);
}

// The machine's ceilings for /metrics and /stats (the server calls this on its engine thread
// once the model is loaded): from the per-machine cache, else measured (about half a second).
// A failed measurement only leaves utilization unreported.
static bool find_ceilings(int32_t n_threads, struct tl_machine_ceilings *out)
{
    int64_t t0 = tl_time_us();
    bool cached = false;
    struct tl_ceilings c;
    if (tl_ceilings_get(n_threads, NULL, &c, &cached)) {
        TL_LOGW("serve: cannot measure the machine's ceilings (utilization not reported): %s",
                tl_last_error());
        return false;
    }
    TL_LOGI("serve: machine ceilings on %d thread(s), %s kernels (%s in %.0f ms): int8 %.1f GOP/s, "
            "f32 FMA %.1f GFLOP/s, memory read %.1f GB/s",
            c.n_threads, c.isa, cached ? "cached" : "measured",
            (double)(tl_time_us() - t0) / 1000.0, c.int8_ops_per_s / 1e9, c.fp32_flops_per_s / 1e9,
            c.mem_read_bytes_per_s / 1e9);
    out->int8_ops_per_s = c.int8_ops_per_s;
    out->fp32_flops_per_s = c.fp32_flops_per_s;
    out->mem_read_bytes_per_s = c.mem_read_bytes_per_s;
    out->n_threads = c.n_threads;
    snprintf(out->isa, sizeof(out->isa), "%s", c.isa);
    snprintf(out->cpu, sizeof(out->cpu), "%s", c.cpu);
    return true;
}

int tl_cmd_serve(int argc, char **argv)
{
    struct tl_server_config c;
    tl_server_config_default(&c);
    c.handle_signals = true;
    c.model_path = NULL;
    int grpc_port = -1; // off
    bool no_ceilings = false;
    const char *env_key = getenv("TOKENLOOM_API_KEY");
    if (env_key && *env_key) c.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        long long n;
        double d;
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--jinja")) continue; // llama.cpp's; templates are always used
        if (!strcmp(argv[i], "--no-ceilings")) {
            no_ceilings = true;
            continue;
        }
        if (!strcmp(argv[i], "--grpc-port")) {
            // The value is optional: a number may follow (serve takes no positional arguments).
            grpc_port = TL_GRPC_DEFAULT_PORT;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
                if (tl_cli_int("serve", "--grpc-port", argv[++i], 0, 65535, &n)) return 2;
                grpc_port = (int)n;
            }
        } else if (!strncmp(argv[i], "--grpc-port=", 12)) {
            if (tl_cli_int("serve", "--grpc-port", argv[i] + 12, 0, 65535, &n)) return 2;
            grpc_port = (int)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--model", "-m"), argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.model_path = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--tokenizer"), argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.model_params.tokenizer_path = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--host"), argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.host = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--port"), argc, argv, &i, &v)) != 0) {
            if (m < 0 || tl_cli_int("serve", "--port", v, 0, 65535, &n)) return 2;
            c.port = (int)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--api-key"), argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.api_key = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--served-model-name"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0) return 2;
            c.served_model_name = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--chat-template-file"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0) return 2;
            c.chat_template_file = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--chat-template"), argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            enum tl_chat_family fam;
            if (*v && !tl_chat_family_from_name(v, &fam)) {
                fprintf(stderr,
                        "tokenloom serve: --chat-template: unknown template '%s' (chatml, llama2, "
                        "llama3, mistral, zephyr, gemma, phi3)\n",
                        v);
                return 2;
            }
            c.chat_template = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--tool-call-syntax"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0) return 2;
            c.tool_call_syntax = v;
        } else if ((m = tl_cli_flag("serve", NAMES("--max-body-bytes"), argc, argv, &i, &v)) != 0) {
            if (m < 0 || tl_cli_int("serve", "--max-body-bytes", v, 1, 1ll << 40, &n)) return 2;
            c.max_body_bytes = (size_t)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--max-queued-requests"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0 || tl_cli_int("serve", "--max-queued-requests", v, 1, 1 << 24, &n)) return 2;
            c.max_queued_requests = (int)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--shutdown-timeout"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0 || tl_cli_real("serve", "--shutdown-timeout", v, 0, 86400, &d)) return 2;
            c.shutdown_timeout_s = d;
        } else if ((m = tl_cli_flag("serve", NAMES("--max-unsent-bytes"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0 || tl_cli_int("serve", "--max-unsent-bytes", v, 4096, 1ll << 40, &n))
                return 2;
            c.max_unsent_bytes = (size_t)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--grammar-compile-ms"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0 || tl_cli_int("serve", "--grammar-compile-ms", v, 1, 600000, &n)) return 2;
            tl_grammar_set_compile_limit_ms((int)n);
        } else if ((m = tl_cli_flag("serve", NAMES("--log-format"), argc, argv, &i, &v)) != 0) {
            enum tl_log_format fmt;
            if (m < 0) return 2;
            if (!tl_log_format_from_name(v, &fmt)) {
                fprintf(stderr, "tokenloom serve: --log-format: '%s' is not text or json\n", v);
                return 2;
            }
            tl_log_set_format(fmt);
        } else if ((m = tl_cli_flag("serve", NAMES("--responses-store"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0 || tl_cli_int("serve", "--responses-store", v, 0, 1 << 24, &n)) return 2;
            c.responses_store_max = (int)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--responses-store-bytes"), argc, argv, &i,
                                    &v)) != 0) {
            if (m < 0 || tl_cli_int("serve", "--responses-store-bytes", v, 1, 1ll << 40, &n))
                return 2;
            c.responses_store_bytes = (size_t)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--responses-store-ttl"), argc, argv, &i, &v)) !=
                   0) {
            if (m < 0 || tl_cli_int("serve", "--responses-store-ttl", v, 1, 86400 * 365, &n))
                return 2;
            c.responses_store_ttl_s = (double)n;
        } else if ((m = tl_cli_flag("serve", NAMES("--http-timeout"), argc, argv, &i, &v)) != 0) {
            if (m < 0 || tl_cli_int("serve", "--http-timeout", v, 1, 86400, &n)) return 2;
            c.http_timeout_s = (int)n;
        } else {
            int e = tl_cli_engine_flag("serve", &c.engine, argc, argv, &i);
            if (e < 0) return 2;
            if (e == 0)
                return tl_cli_unknown_option("serve", argv[i], serve_flag_names,
                                             tl_cli_engine_flag_names, NULL);
        }
    }
    if (!c.model_path) c.model_path = tl_cli_default_model();
    if (!c.model_path) {
        fprintf(stderr, "tokenloom serve: no model: pass -m PATH or set $MODEL (see README: "
                        "'make run' without ../shared)\n");
        return 2;
    }
    // Everything that can be checked without the model is checked before the port is bound.
    if (check_host(c.host) || check_readable("--model", c.model_path)) return 2;
    if (c.model_params.tokenizer_path &&
        check_readable("--tokenizer", c.model_params.tokenizer_path))
        return 2;
    if (c.chat_template_file && check_readable("--chat-template-file", c.chat_template_file))
        return 2;
    enum tl_tool_syntax tool_syntax;
    if (c.tool_call_syntax && *c.tool_call_syntax &&
        !tl_tool_syntax_from_name(c.tool_call_syntax, &tool_syntax)) {
        fprintf(stderr, "tokenloom serve: --tool-call-syntax: unknown syntax '%s'\n",
                c.tool_call_syntax);
        return 2;
    }
    snprintf(c.machine.kernels_isa, sizeof(c.machine.kernels_isa), "%s", tl_kernels_isa());
    c.find_ceilings = no_ceilings ? NULL : find_ceilings;
    struct tl_server *s = tl_server_create(&c);
    if (!s) {
        runtime_error(server_error());
        return 1;
    }
    struct tl_grpc_front *g = NULL;
    if (grpc_port >= 0) {
        struct tl_grpc_config gc = {.host = c.host,
                                    .port = grpc_port,
                                    .max_message_bytes = c.max_body_bytes,
                                    .max_unsent_bytes = c.max_unsent_bytes,
                                    .api_key = c.api_key};
        struct tl_engine_share share;
        tl_server_engine_share(s, &share);
        g = tl_grpc_start(&share, &gc);
        if (!g) {
            runtime_error(server_error());
            tl_server_destroy(s);
            return 1;
        }
        TL_LOGI("serve: gRPC (Open Inference Protocol) on %s:%d", c.host, tl_grpc_port(g));
    }
    TL_LOGI("serve: listening on http://%s:%d, loading %s", c.host, tl_server_port(s),
            c.model_path);
    int rc = tl_server_run(s);
    tl_grpc_stop(g);
    tl_server_destroy(s);
    return rc;
}
