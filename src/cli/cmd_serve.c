/*
 * tokenloom serve: flag parsing and wiring for the OpenAI-compatible HTTP server
 * (src/server/server.h). The model loads on the server's engine thread while /health answers
 * 503, so the port is open at once; SIGINT/SIGTERM drain in-flight requests and exit 0.
 */
#include "cli/cli.h"
#include "cli/engine_flags.h"
#include "grpc/grpc_front.h"
#include "server/server.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
               "  --served-model-name NAME  the model id clients send (default: the model's name)\n"
               "  --chat-template NAME      a built-in chat template instead of the model's:\n"
               "                            chatml, llama2, llama3, mistral, zephyr, gemma, phi3\n"
               "  --chat-template-file PATH a Jinja chat template file instead of the model's\n"
               "  --max-body-bytes N        larger request bodies get 413 (default 8388608)\n"
               "  --max-queued-requests N   queued engine requests before 429 (default 256)\n"
               "  --shutdown-timeout S      seconds in-flight requests get on SIGINT/SIGTERM\n"
               "                            (default 30)\n"
               "  --http-timeout S          per-connection idle read/write timeout (default 60)\n"
               "  --max-unsent-bytes N      a stream whose client leaves more than N bytes unread\n"
               "                            is cancelled (default 8388608)\n"
               "  --grpc-port [N]           also serve the Open Inference Protocol over gRPC\n"
               "                            (off by default; 8500 without a value; 0 = any)\n"
               "\n");
    tl_cli_engine_flags_help(f);
}

// "--name value" or "--name=value"; 1 matched (value set), 0 not this flag, -1 missing value.
static int flag(const char *name, const char *alt, int argc, char **argv, int *i, const char **val)
{
    const char *a = argv[*i];
    const char *names[2] = {name, alt};
    for (int k = 0; k < 2; k++) {
        if (!names[k]) continue;
        size_t n = strlen(names[k]);
        if (strncmp(a, names[k], n) != 0) continue;
        if (a[n] == '=') {
            *val = a + n + 1;
            return 1;
        }
        if (a[n] != '\0') continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "tokenloom serve: %s needs a value\n", names[k]);
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
        fprintf(stderr, "tokenloom serve: %s: '%s' is not a number in [%g, %g]\n", name, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int tl_cmd_serve(int argc, char **argv)
{
    struct tl_server_config c;
    tl_server_config_default(&c);
    c.handle_signals = true;
    c.model_path = NULL;
    int grpc_port = -1; // off
    const char *env_key = getenv("TOKENLOOM_API_KEY");
    if (env_key && *env_key) c.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        double d;
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--grpc-port")) {
            // The value is optional: a number may follow (serve takes no positional arguments).
            grpc_port = TL_GRPC_DEFAULT_PORT;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
                if (num("--grpc-port", argv[++i], 0, 65535, &d)) return 2;
                grpc_port = (int)d;
            }
        } else if (!strncmp(argv[i], "--grpc-port=", 12)) {
            if (num("--grpc-port", argv[i] + 12, 0, 65535, &d)) return 2;
            grpc_port = (int)d;
        } else if ((m = flag("--model", "-m", argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.model_path = v;
        } else if ((m = flag("--tokenizer", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.model_params.tokenizer_path = v;
        } else if ((m = flag("--host", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.host = v;
        } else if ((m = flag("--port", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0 || num("--port", v, 0, 65535, &d)) return 2;
            c.port = (int)d;
        } else if ((m = flag("--api-key", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.api_key = v;
        } else if ((m = flag("--served-model-name", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.served_model_name = v;
        } else if ((m = flag("--chat-template-file", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.chat_template_file = v;
        } else if ((m = flag("--chat-template", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0) return 2;
            c.chat_template = v;
        } else if ((m = flag("--max-body-bytes", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0 || num("--max-body-bytes", v, 1, (double)(1ull << 40), &d)) return 2;
            c.max_body_bytes = (size_t)d;
        } else if ((m = flag("--max-queued-requests", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0 || num("--max-queued-requests", v, 1, 1 << 24, &d)) return 2;
            c.max_queued_requests = (int)d;
        } else if ((m = flag("--shutdown-timeout", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0 || num("--shutdown-timeout", v, 0, 86400, &d)) return 2;
            c.shutdown_timeout_s = d;
        } else if ((m = flag("--max-unsent-bytes", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0 || num("--max-unsent-bytes", v, 4096, (double)(1ull << 40), &d)) return 2;
            c.max_unsent_bytes = (size_t)d;
        } else if ((m = flag("--http-timeout", NULL, argc, argv, &i, &v)) != 0) {
            if (m < 0 || num("--http-timeout", v, 1, 86400, &d)) return 2;
            c.http_timeout_s = (int)d;
        } else {
            int e = tl_cli_engine_flag(&c.engine, argc, argv, &i);
            if (e < 0) return 2;
            if (e == 0) {
                fprintf(stderr, "tokenloom serve: unknown option '%s'\n", argv[i]);
                usage(stderr);
                return 2;
            }
        }
    }
    if (!c.model_path) c.model_path = tl_cli_default_model();
    if (!c.model_path) {
        fprintf(stderr, "tokenloom serve: no model: pass -m PATH or set $MODEL\n");
        return 2;
    }
    struct tl_server *s = tl_server_create(&c);
    if (!s) {
        fprintf(stderr, "tokenloom serve: %s\n", tl_last_error());
        return 1;
    }
    struct tl_grpc_front *g = NULL;
    if (grpc_port >= 0) {
        struct tl_grpc_config gc = {.host = c.host,
                                    .port = grpc_port,
                                    .max_message_bytes = c.max_body_bytes,
                                    .max_unsent_bytes = c.max_unsent_bytes,
                                    .api_key = c.api_key};
        g = tl_grpc_start(s, &gc);
        if (!g) {
            fprintf(stderr, "tokenloom serve: %s\n", tl_last_error());
            tl_server_destroy(s);
            return 1;
        }
        fprintf(stderr, "tokenloom serve: gRPC (Open Inference Protocol) on %s:%d\n", c.host,
                tl_grpc_port(g));
    }
    fprintf(stderr, "tokenloom serve: listening on http://%s:%d, loading %s\n", c.host,
            tl_server_port(s), c.model_path);
    int rc = tl_server_run(s);
    tl_grpc_stop(g);
    tl_server_destroy(s);
    return rc;
}
