/*
 * tokenloom tokenize: prints the token ids of a text with a model's tokenizer.
 *
 *   tokenloom tokenize [-m MODEL] [--no-bos] [--parse-special] [--file F.inp]
 *
 * Without --file the whole of stdin (any bytes) is one text; the ids go to stdout space-separated
 * on one line, with BOS/EOS added as the vocabulary says unless --no-bos. With --file, F is a
 * test file in llama.cpp's format (strings separated by "\n__ggml_vocab_test__\n"), each string
 * is tokenized without BOS/EOS and printed on its own line as " id id id" -- the format of
 * llama.cpp's .out files, so `diff` against them checks the tokenizer.
 *
 * Only the vocabulary is loaded (tl_gguf_open + tl_vocab_load_gguf), so vocabulary-only GGUF
 * files work; a file that is not GGUF is read as a llama.cpp tokenizer.bin (llama2.c format).
 * Exit codes: 0 ok, 1 runtime error (message on stderr), 2 usage error.
 */
#include "cli/args.h"
#include "cli/cli.h"

#include "core/alloc.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tokenloom tokenize [-m MODEL] [--no-bos] [--parse-special] [--file F.inp]\n"
            "  -m, --model PATH     GGUF model or vocabulary (or a llama2.c tokenizer.bin)\n"
            "                       (default: $MODEL or the shared stories260K.gguf)\n"
            "  --no-bos             do not add BOS/EOS tokens\n"
            "  --parse-special      recognise control tokens such as <|im_start|> in the text\n"
            "  -f, --file F.inp     tokenize each test string of a llama.cpp .inp file (no BOS)\n"
            "                       and print one line of ids per string\n"
            "Reads the text from stdin and prints the token ids on one line.\n");
}

// Reads a whole stream. OUT: *out (malloc'd), *len. False on error.
static bool read_all(FILE *f, char **out, size_t *len)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (!tl_grow((void **)&buf, &cap, n + 65536, 1)) {
            free(buf);
            return false;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return false;
    }
    *out = buf;
    *len = n;
    return true;
}

static bool is_gguf(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return true; // let the GGUF reader report the error
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    return got < 4 || memcmp(magic, "GGUF", 4) == 0;
}

static int load_vocab(const char *path, struct tl_vocab **v)
{
    if (!is_gguf(path)) {
        if (tl_vocab_load_llama2c(path, v)) {
            fprintf(stderr, "tokenloom: %s\n", tl_last_error());
            return 1;
        }
        return 0;
    }
    struct tl_gguf *g;
    if (tl_gguf_open(path, &g)) {
        fprintf(stderr, "tokenloom: %s\n", tl_last_error());
        return 1;
    }
    tl_status rc = tl_vocab_load_gguf(g, v);
    if (rc) fprintf(stderr, "tokenloom: %s\n", tl_last_error());
    tl_gguf_close(g);
    return rc ? 1 : 0;
}

static void print_ids(const int32_t *ids, int64_t n, bool leading_space)
{
    for (int64_t i = 0; i < n; i++)
        printf(leading_space || i ? " %" PRId32 : "%" PRId32, ids[i]);
    putchar('\n');
}

static int tokenize_one(const struct tl_vocab *v, const char *text, size_t len, bool add_special,
                        bool parse_special, bool leading_space)
{
    int32_t *ids;
    int64_t n;
    if (tl_tokenize(v, text, len, add_special, parse_special, &ids, &n)) {
        fprintf(stderr, "tokenloom: %s\n", tl_last_error());
        return 1;
    }
    print_ids(ids, n, leading_space);
    free(ids);
    return 0;
}

// Each string of a llama.cpp .inp file: the text before each "\n__ggml_vocab_test__\n".
static int tokenize_file(const struct tl_vocab *v, const char *path, bool parse_special)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof(sep) - 1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tokenloom: %s: cannot open\n", path);
        return 1;
    }
    char *data;
    size_t len;
    bool ok = read_all(f, &data, &len);
    fclose(f);
    if (!ok) {
        fprintf(stderr, "tokenloom: %s: read error\n", path);
        return 1;
    }
    int rc = 0;
    size_t pos = 0;
    while (pos < len && rc == 0) {
        const char *hit = memmem(data + pos, len - pos, sep, sep_len);
        // A last string without a separator still counts (a file edited by hand).
        size_t end = hit ? (size_t)(hit - data) : len;
        rc = tokenize_one(v, data + pos, end - pos, false, parse_special, true);
        pos = hit ? end + sep_len : len;
    }
    free(data);
    return rc;
}

int tl_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    bool no_bos = false, parse_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-f") ||
                   !strcmp(a, "--file")) {
            fprintf(stderr, "tokenloom tokenize: %s needs a value\n", a);
            return 2;
        } else {
            static const char *const known[] = {
                "--model", "-m", "--file", "-f", "--no-bos", "--parse-special", "--help", NULL};
            return tl_cli_unknown_option("tokenize", a, known, NULL);
        }
    }
    if (!model) model = tl_cli_default_model();
    if (!model) {
        fprintf(stderr, "tokenloom tokenize: no model (use -m or set $MODEL)\n");
        return 2;
    }
    struct tl_vocab *v;
    int rc = load_vocab(model, &v);
    if (rc) return rc;
    if (file) {
        rc = tokenize_file(v, file, parse_special);
    } else {
        char *text;
        size_t len;
        if (!read_all(stdin, &text, &len)) {
            fprintf(stderr, "tokenloom: cannot read stdin\n");
            rc = 1;
        } else {
            rc = tokenize_one(v, text, len, !no_bos, parse_special, false);
            free(text);
        }
    }
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "tokenloom: write error\n");
        rc = 1;
    }
    tl_vocab_destroy(v);
    return rc;
}
