/*
 * Tests for src/grammar: GBNF parsing (the shared llama.cpp grammars), acceptance and
 * rejection of known strings, errors with positions (syntax, undefined rules, left recursion,
 * empty languages, huge bounds), and the mask against an independent per-token check: at every
 * step of random walks, the cached trie mask must equal "accept this token's bytes from the
 * current state" for every token, and every finished walk must be accepted by a fresh matcher.
 */
#include "tl_test.h"

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

// ---- helpers --------------------------------------------------------------------------------

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static struct tl_grammar *compile_ok(enum tl_grammar_kind kind, const char *src)
{
    struct tl_grammar *g = NULL;
    tl_status rc = tl_grammar_compile(kind, src, src ? strlen(src) : 0, &g);
    if (rc) fail_msg("compile failed: %s\n%s", tl_last_error(), src ? src : "");
    return g;
}

// Compiling must fail and the message must contain want.
static void compile_err(enum tl_grammar_kind kind, const char *src, const char *want)
{
    struct tl_grammar *g = NULL;
    tl_status rc = tl_grammar_compile(kind, src, strlen(src), &g);
    if (!rc) fail_msg("compiled but should not: %s", src);
    assert_null(g);
    if (!strstr(tl_last_error(), want))
        fail_msg("error '%s' does not mention '%s'", tl_last_error(), want);
}

// As compile_err, when either message is right (a size bound that a slow machine may reach
// only after the compile time limit: both are the same 400).
static void compile_err2(enum tl_grammar_kind kind, const char *src, const char *want,
                         const char *or_want)
{
    struct tl_grammar *g = NULL;
    tl_status rc = tl_grammar_compile(kind, src, strlen(src), &g);
    if (!rc) fail_msg("compiled but should not: %s", src);
    assert_null(g);
    if (!strstr(tl_last_error(), want) && !strstr(tl_last_error(), or_want))
        fail_msg("error '%s' mentions neither '%s' nor '%s'", tl_last_error(), want, or_want);
}

static bool full_match(struct tl_grammar *g, const char *s)
{
    struct tl_gmatcher *m = tl_gmatcher_create(g);
    bool ok = tl_gmatcher_accept_bytes(m, s, strlen(s)) && tl_gmatcher_can_end(m);
    tl_gmatcher_destroy(m);
    return ok;
}

static bool prefix_ok(struct tl_grammar *g, const char *s)
{
    struct tl_gmatcher *m = tl_gmatcher_create(g);
    bool ok = tl_gmatcher_accept_bytes(m, s, strlen(s));
    tl_gmatcher_destroy(m);
    return ok;
}

// ---- a synthetic vocabulary -----------------------------------------------------------------

#define N_PIECES 700
static char *pieces[N_PIECES];
static int n_pieces;

static void add_piece(const char *p)
{
    pieces[n_pieces++] = strdup(p);
}

// Every byte, JSON fragments, words, multi-byte characters, and pseudo-random strings; the
// last id is the end-of-generation token, id 0 a control token (never allowed).
static void make_pieces(void)
{
    if (n_pieces) return;
    add_piece(""); // control
    for (int b = 1; b < 256; b++) {
        char s[2] = {(char)b, 0};
        add_piece(s);
    }
    static const char *frag[] = {
        "{\"",     "\":",  "\": ",  "\", \"", "\",\"",        "\"}",    "},",
        "}",       "],",   "[{",    "[\"",    "true",         "false",  "null",
        "12",      "3.",   "0.5",   "-1",     "e+",           "\\n",    "\\\"",
        "\\u00e9", "\"\n", "\n  ",  "  ",     " \"",          "name",   "age",
        "id",      "é",    "日本",  "ã",      "\xe2\x82\xac", "abc\"",  "a\",",
        "\":{\"",  "x\"}", "2023-", "-01-",   "T12:",         ":00Z",   "@",
        ".com",    "1. ",  " e4",   "O-O",    "Nf3",          "int ",   "return ",
        "- ",      "\n- ", "ok",    "yes",    "no",           "red",    "green",
        "=",       "(",    ")",     "+1",     "hello",        " world", "ぁ",
        "一",      "、",   "ア"};
    for (size_t i = 0; i < sizeof(frag) / sizeof(frag[0]); i++)
        add_piece(frag[i]);
    uint64_t x = 88172645463325252ull;
    static const char alpha[] = "abcdefghij\"{}[],: 0123456789.-\\e\n";
    while (n_pieces < N_PIECES - 1) {
        char s[8];
        uint64_t r = tl_xorshift64s(&x);
        int len = 2 + (int)(r % 5);
        for (int k = 0; k < len; k++)
            s[k] = alpha[(r >> (8 + 5 * k)) % (sizeof(alpha) - 1)];
        s[len] = 0;
        add_piece(s);
    }
    add_piece("</s>"); // eog
}

static int piece_bytes(void *ctx, int32_t id, char *buf, int cap)
{
    (void)ctx;
    if (id == 0) return -1;
    int n = (int)strlen(pieces[id]);
    memcpy(buf, pieces[id], (size_t)(n < cap ? n : cap));
    return n;
}

static bool piece_eog(void *ctx, int32_t id)
{
    (void)ctx;
    return id == N_PIECES - 1;
}

// A vocabulary for the walks: the trie, each token's text, the end-of-generation token.
struct walk_vocab {
    struct tl_gvocab *v;
    int32_t n;
    const char *(*text)(int32_t id); // the token's bytes ("" for a token never produced)
    int32_t eog;
};

static const char *piece_text(int32_t id)
{
    return id == 0 ? "" : pieces[id];
}

// Random walks: at each step the mask must equal the per-token check; the finished text must
// be accepted from scratch. Returns how many walks ended (EOG).
static int walks_over(struct tl_grammar *g, const struct walk_vocab *wv, int n_walks, int max_steps,
                      uint64_t seed)
{
    int32_t n = wv->n, eog = wv->eog;
    size_t words = ((size_t)n + 63) / 64;
    uint64_t *mask = malloc(words * sizeof(uint64_t));
    int32_t *allowed = malloc((size_t)n * sizeof(int32_t));
    int ended = 0;
    for (int w = 0; w < n_walks; w++) {
        struct tl_gmatcher *m = tl_gmatcher_create(g);
        char text[8192];
        size_t len = 0;
        for (int step = 0; step < max_steps; step++) {
            assert_true(tl_gmatcher_fill_mask(m, wv->v, mask));
            int32_t n_allowed = 0;
            for (int32_t t = 0; t < n; t++) {
                bool bit = (mask[t >> 6] >> (t & 63)) & 1;
                bool one = tl_gmatcher_allows(m, wv->v, t);
                if (bit != one)
                    fail_msg(
                        "walk %d step %d token %d '%s': mask %d, direct check %d (text '%.*s')", w,
                        step, t, wv->text(t), bit, one, (int)len, text);
                if (bit) allowed[n_allowed++] = t;
            }
            assert_true(n_allowed > 0); // never a dead end
            uint64_t r = tl_xorshift64s(&seed);
            int32_t t = allowed[r % (uint64_t)n_allowed];
            bool can_end = (mask[eog >> 6] >> (eog & 63)) & 1;
            if (can_end && (r >> 40) % 3 == 0) t = eog;
            if (t == eog) {
                assert_true(tl_gmatcher_can_end(m));
                text[len] = 0;
                if (!full_match(g, text)) fail_msg("finished text not accepted: '%s'", text);
                ended++;
                break;
            }
            assert_true(tl_gmatcher_accept_token(m, wv->v, t));
            size_t pl = strlen(wv->text(t));
            if (len + pl >= sizeof(text) - 1) break;
            memcpy(text + len, wv->text(t), pl);
            len += pl;
            text[len] = 0;
            assert_true(prefix_ok(g, text));
        }
        tl_gmatcher_destroy(m);
    }
    free(mask);
    free(allowed);
    return ended;
}

static struct walk_vocab pieces_vocab(void)
{
    make_pieces();
    struct walk_vocab wv = {tl_gvocab_create(N_PIECES, piece_bytes, piece_eog, NULL), N_PIECES,
                            piece_text, N_PIECES - 1};
    assert_non_null(wv.v);
    return wv;
}

static int random_walks(struct tl_grammar *g, int n_walks, int max_steps, uint64_t seed)
{
    struct walk_vocab wv = pieces_vocab();
    int ended = walks_over(g, &wv, n_walks, max_steps, seed);
    tl_gvocab_destroy(wv.v);
    return ended;
}

// ---- a real vocabulary (32000 tokens: big trie walks, the dense transition rows) -------------

static tl_model *vocab_model;
static char (*model_texts)[64];

static int model_bytes(void *ctx, int32_t id, char *buf, int cap)
{
    (void)ctx;
    size_t n = tl_model_token_text(vocab_model, id, buf, (size_t)cap);
    return n == 0 || n > (size_t)cap ? -1 : (int)n;
}

static bool model_eog(void *ctx, int32_t id)
{
    (void)ctx;
    struct tl_model_info info;
    tl_model_get_info(vocab_model, &info);
    return id == info.eos;
}

static const char *model_text(int32_t id)
{
    return model_texts[id];
}

static struct walk_vocab model_vocab(void)
{
    if (!vocab_model)
        assert_int_equal(
            tl_model_load(tl_test_shared("models/llama-2-tiny-random.gguf"), NULL, &vocab_model),
            TL_OK);
    struct tl_model_info info;
    tl_model_get_info(vocab_model, &info);
    if (!model_texts) {
        model_texts = calloc((size_t)info.n_vocab, sizeof(*model_texts));
        for (int32_t t = 0; t < info.n_vocab; t++) {
            int n = model_bytes(NULL, t, model_texts[t], 63);
            // tokens the trie never produces, or with bytes a C string cannot hold
            if (n < 0 || model_eog(NULL, t) || memchr(model_texts[t], 0, (size_t)n)) n = 0;
            model_texts[t][n] = 0;
        }
    }
    struct walk_vocab wv = {tl_gvocab_create(info.n_vocab, model_bytes, model_eog, NULL),
                            info.n_vocab, model_text, info.eos};
    assert_non_null(wv.v);
    return wv;
}

// ---- tests ----------------------------------------------------------------------------------

static const char *const SHARED[] = {"arithmetic", "c",    "chess",    "english",
                                     "japanese",   "json", "json_arr", "list"};

static void test_shared_grammars_parse_and_walk(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(SHARED) / sizeof(SHARED[0]); i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "grammars/%s.gbnf", SHARED[i]);
        size_t len;
        char *src = read_file(tl_test_shared(rel), &len);
        struct tl_grammar *g = NULL;
        if (tl_grammar_compile(TL_GRAMMAR_GBNF, src, len, &g))
            fail_msg("%s: %s", rel, tl_last_error());
        random_walks(g, 6, 60, 0x1234567ull + i);
        tl_grammar_unref(g);
        free(src);
    }
}

static void test_known_strings(void **state)
{
    (void)state;
    size_t len;
    char *src = read_file(tl_test_shared("grammars/json.gbnf"), &len);
    struct tl_grammar *g = NULL;
    assert_int_equal(tl_grammar_compile(TL_GRAMMAR_GBNF, src, len, &g), TL_OK);
    assert_true(full_match(g, "{\"a\": [1, 2.5, \"x\\n\", true, null, {}]}"));
    assert_true(full_match(g, "{\"é日本\":\"\\u00e9\"}"));
    assert_false(full_match(g, "{\"a\": }"));
    assert_false(full_match(g, "{\"a\":1"));
    assert_true(prefix_ok(g, "{\"a\":1"));
    assert_false(prefix_ok(g, "[1]"));             // root is an object
    assert_false(prefix_ok(g, "{\"a\xff"));        // invalid UTF-8 inside a string
    assert_false(prefix_ok(g, "{\"\xed\xa0\x80")); // a surrogate
    assert_true(prefix_ok(g, "{\"\xe6\x97"));      // a partial character is a valid prefix
    tl_grammar_unref(g);
    free(src);

    src = read_file(tl_test_shared("grammars/chess.gbnf"), &len);
    assert_int_equal(tl_grammar_compile(TL_GRAMMAR_GBNF, src, len, &g), TL_OK);
    assert_true(full_match(g, "1. e4 e5\n2. Nf3 Nc6\n"));
    assert_true(full_match(g, "1. e4 e5\n2. O-O-O Qxd8#\n"));
    assert_false(full_match(g, "1. e4 e5\n"));
    tl_grammar_unref(g);
    free(src);

    g = compile_ok(TL_GRAMMAR_GBNF, "root ::= \"a\"{2,3} [\\u00e0-\\u00e5]+ x?\nx ::= \"!\"");
    assert_true(full_match(g, "aaà"));
    assert_true(full_match(g, "aaåâ!"));
    assert_false(full_match(g, "aà"));
    assert_false(full_match(g, "aaaaà"));
    assert_false(full_match(g, "aaæ"));
    tl_grammar_unref(g);
}

static void test_errors(void **state)
{
    (void)state;
    compile_err(TL_GRAMMAR_GBNF, "root ::= \"a\" (\"b\"", "line 1, column 14: unclosed '('");
    compile_err(TL_GRAMMAR_GBNF, "root ::= x\n", "rule 'x' is used but never defined");
    compile_err(TL_GRAMMAR_GBNF, "foo ::= \"a\"", "no rule named 'root'");
    compile_err(TL_GRAMMAR_GBNF, "root ::= root \"a\" | \"b\"", "left-recursive");
    compile_err(TL_GRAMMAR_GBNF, "root ::= x \"a\" | \"b\"\nx ::= y? root\ny ::= \"c\"",
                "left-recursive");
    compile_err(TL_GRAMMAR_GBNF, "root ::= (\"a\"?)*", "can match empty text");
    compile_err(TL_GRAMMAR_GBNF, "root ::= \"a\" x\nx ::= \"b\" x", "empty language");
    compile_err(TL_GRAMMAR_GBNF, "root ::= [^\\x00-\\U0010FFFF]", "matches nothing");
    compile_err2(TL_GRAMMAR_GBNF, "root ::= (\"ab\"){0,300000}", "exceed", "took longer than");
    compile_err(TL_GRAMMAR_GBNF, "root ::= (\"a\"{0,1000}){0,1000}", "can match empty text");
    compile_err(TL_GRAMMAR_GBNF, "root ::= \"a\"{5,2}", "n < m");
    compile_err(TL_GRAMMAR_GBNF, "root ::= (\"a\"*){999999}", "can match empty text");
    compile_err(TL_GRAMMAR_GBNF, "root ::= \"\\q\"", "line 1, column 11: unknown escape");
    compile_err(TL_GRAMMAR_GBNF, "root ::= \"a\"\nroot ::= \"b\"",
                "line 2, column 1: rule "
                "defined twice");
    compile_err(TL_GRAMMAR_GBNF, "root ::= [b-a]", "reversed");
    compile_err(TL_GRAMMAR_GBNF, "\n  root = \"a\"", "line 2, column 3");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"patternProperties\":{}}",
                "unsupported JSON Schema keyword 'patternProperties'");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"properties\":{\"a\":{\"$ref\":\"#/$defs/nope\"}}}",
                "at '/a': $ref '#/$defs/nope' points to nothing");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"hostname\"}",
                "unsupported string format 'hostname'");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"type\": \"obj", "not valid JSON");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
                "no number satisfies");
    compile_err2(TL_GRAMMAR_JSON_SCHEMA,
                 "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"maxItems\":100000,"
                 "\"items\":{\"type\":\"array\",\"maxItems\":100000}},\"maxItems\":100000}",
                 "exceed", "took longer than");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}",
                "back-references");
    compile_err(TL_GRAMMAR_JSON_SCHEMA,
                "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}",
                "oneOf branches 0 and 1 may match the same document");
    compile_err(TL_GRAMMAR_JSON_SCHEMA,
                "{\"oneOf\":[{\"properties\":{\"a\":{}}},{\"properties\":{\"b\":{}}}]}",
                "oneOf branches 0 and 1"); // nothing required: {} matches both
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"anyOf\":[{}],\"oneOf\":[{}]}", "'anyOf' and 'oneOf'");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"enum\":[\"a\"],\"pattern\":\"a\"}",
                "'enum' / 'const' together with 'pattern' is not supported");
    compile_err(TL_GRAMMAR_JSON_SCHEMA, "{\"const\":3,\"type\":\"string\"}",
                "no value of 'enum' / 'const'");
    compile_err(TL_GRAMMAR_JSON_SCHEMA,
                "{\"$defs\":{\"a\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/a\","
                "\"type\":\"integer\"}",
                "disagree on 'type'");
    // callee-last chains: the checks are linear (a quadratic fixpoint took 93 s on 20000 rules,
    // ~6 s on 5000: past the compile time limit);
    // one nested 2000 deep (no tail calls) is refused: the matcher's depth bound at its start
    {
        struct gstr flat = {0}, deep = {0};
        tl__gstr_puts(&flat, "root ::= \"x\" r0\n"); // the chain is not at the start
        tl__gstr_puts(&deep, "root ::= r0 \"x\"\n");
        for (int i = 0; i < 5000; i++)
            tl__gstr_printf(&flat, "r%d ::= \"a\"? r%d\n", i, i + 1);
        for (int i = 0; i < 2000; i++)
            tl__gstr_printf(&deep, "r%d ::= r%d \"a\"?\n", i, i + 1);
        tl__gstr_puts(&flat, "r5000 ::= \"b\"?\n");
        tl__gstr_puts(&deep, "r2000 ::= \"b\"?\n");
        struct tl_grammar *g = compile_ok(TL_GRAMMAR_GBNF, flat.p);
        tl_grammar_unref(g);
        compile_err(TL_GRAMMAR_GBNF, deep.p, "nests rule calls deeper than 1024");
        free(flat.p);
        free(deep.p);
    }
    compile_err(TL_GRAMMAR_REGEX, "a(?=b)", "look-around");
    compile_err(TL_GRAMMAR_REGEX, "(ab", "unclosed");
    compile_err(TL_GRAMMAR_CHOICE, "[]", "non-empty");
    compile_err(TL_GRAMMAR_CHOICE, "[\"a\", 3]", "choice 1 is not a string");
}

// Keywords beside $ref, anyOf and enum apply; oneOf with exclusive branches is exact.
static void test_schema_combinations(void **state)
{
    (void)state;
    struct tl_grammar *g =
        compile_ok(TL_GRAMMAR_JSON_SCHEMA,
                   "{\"type\":\"string\",\"enum\":[\"a\",1,\"bbb\",null,\"cc\"],\"maxLength\":2}");
    assert_true(full_match(g, "\"a\""));
    assert_true(full_match(g, "\"cc\""));
    assert_false(full_match(g, "\"bbb\"")); // too long
    assert_false(full_match(g, "1"));       // not a string
    assert_false(full_match(g, "null"));
    tl_grammar_unref(g);
    g = compile_ok(TL_GRAMMAR_JSON_SCHEMA,
                   "{\"$defs\":{\"b\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":"
                   "\"integer\"}},\"required\":[\"id\"]}},\"$ref\":\"#/$defs/b\","
                   "\"properties\":{\"t\":{\"type\":\"boolean\"}},\"required\":[\"t\"]}");
    assert_true(full_match(g, "{\"id\": 3, \"t\": true}"));
    assert_false(full_match(g, "{\"id\": 3}"));   // the sibling's required
    assert_false(full_match(g, "{\"t\": true}")); // the target's required
    tl_grammar_unref(g);
    g = compile_ok(TL_GRAMMAR_JSON_SCHEMA,
                   "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
                   "\"required\":[\"id\"],\"anyOf\":[{\"properties\":{\"a\":{\"type\":"
                   "\"null\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":"
                   "\"boolean\"}},\"required\":[\"b\"]}]}");
    assert_true(full_match(g, "{\"id\": 1, \"a\": null}"));
    assert_true(full_match(g, "{\"id\": 1, \"b\": false}"));
    assert_false(full_match(g, "{\"a\": null}")); // the sibling's required applies to branches
    tl_grammar_unref(g);
    g = compile_ok(TL_GRAMMAR_JSON_SCHEMA,
                   "{\"allOf\":[{\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":5}}},"
                   "{\"properties\":{\"x\":{\"maximum\":7}},\"required\":[\"x\"]}]}");
    assert_true(full_match(g, "{\"x\": 6}"));
    assert_false(full_match(g, "{\"x\": 4}")); // both parts' constraints on x hold
    assert_false(full_match(g, "{\"x\": 8}"));
    tl_grammar_unref(g);
}

static void test_regex_and_choices(void **state)
{
    (void)state;
    struct tl_grammar *g = compile_ok(TL_GRAMMAR_REGEX, "^[A-Z][a-z]{1,3}(-\\d+)?|x.y$");
    assert_true(full_match(g, "Abc"));
    assert_true(full_match(g, "Ab-123"));
    assert_true(full_match(g, "x日y"));
    assert_false(full_match(g, "x\ny"));
    assert_false(full_match(g, "Abcde"));
    assert_false(full_match(g, "ab"));
    random_walks(g, 10, 30, 77);
    tl_grammar_unref(g);
    g = compile_ok(TL_GRAMMAR_CHOICE, "[\"red\", \"green\", \"gr\\\"ay\"]");
    assert_true(full_match(g, "red"));
    assert_true(full_match(g, "gr\"ay"));
    assert_false(full_match(g, "re"));
    assert_int_equal(random_walks(g, 10, 30, 5), 10);
    tl_grammar_unref(g);
}

static void test_schema_walks(void **state)
{
    (void)state;
    static const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\"]}",
        "{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",1,null]},\"minItems\":1,"
        "\"maxItems\":3}",
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
        "\"next\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"},"
        "\"properties\":{\"id\":{\"const\":7}}}",
        "{\"type\":\"string\",\"format\":\"date-time\"}",
        "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"},\"x\":{"
        "\"type\":\"integer\"}},\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{"
        "\"k\":{\"const\":\"b\"}},\"required\":[\"k\"]}]}",
        "{\"type\":\"string\",\"enum\":[\"a\",1,\"bbb\",null],\"maxLength\":2}",
    };
    for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
        struct tl_grammar *g = compile_ok(TL_GRAMMAR_JSON_SCHEMA, schemas[i]);
        random_walks(g, 8, 80, 1000 + i);
        tl_grammar_unref(g);
    }
    struct tl_grammar *g = compile_ok(TL_GRAMMAR_JSON_OBJECT, NULL);
    assert_true(full_match(g, "{\"a\": [1, {\"b\": null}]}"));
    assert_false(full_match(g, "[1]"));
    random_walks(g, 8, 80, 99);
    tl_grammar_unref(g);
}

// The 32000-token vocabulary (trie walks big enough for the dense transition rows and the
// byte classes) and a grammar used with two vocabularies in turn: each vocabulary gets its own
// cache, and every mask still equals the per-token check (a cache bound to the first
// vocabulary would hand the second one wrong bits, or none cached).
static void test_model_vocab_and_two_vocabs(void **state)
{
    (void)state;
    struct walk_vocab big = model_vocab(), small = pieces_vocab();
    static const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"email\":{\"type\":"
        "\"string\",\"format\":\"email\"}},\"required\":[\"name\",\"age\"]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\"},"
        "\"maxItems\":5}",
    };
    for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
        struct tl_grammar *g = compile_ok(TL_GRAMMAR_JSON_SCHEMA, schemas[i]);
        for (int round = 0; round < 2; round++) { // the second round finds the caches warm
            walks_over(g, &big, 1, 40, 500 + i * 10 + (uint64_t)round);
            walks_over(g, &small, 3, 40, 600 + i * 10 + (uint64_t)round);
        }
        // both vocabularies' entries are cached, each in its own cache
        assert_true(tl__gmask_cache_entries(g, big.v) > 0);
        assert_true(tl__gmask_cache_entries(g, small.v) > 0);
        tl_grammar_unref(g);
    }
    size_t len;
    char *src = read_file(tl_test_shared("grammars/json.gbnf"), &len);
    struct tl_grammar *g = NULL;
    assert_int_equal(tl_grammar_compile(TL_GRAMMAR_GBNF, src, len, &g), TL_OK);
    walks_over(g, &small, 2, 40, 7);
    walks_over(g, &big, 2, 40, 8);
    tl_grammar_unref(g);
    free(src);
    tl_gvocab_destroy(big.v);
    tl_gvocab_destroy(small.v);
    tl_model_destroy(vocab_model);
    vocab_model = NULL;
    free(model_texts);
    model_texts = NULL;
}

TL_TEST_MAIN(cmocka_unit_test(test_known_strings), cmocka_unit_test(test_errors),
             cmocka_unit_test(test_model_vocab_and_two_vocabs),
             cmocka_unit_test(test_schema_combinations), cmocka_unit_test(test_regex_and_choices),
             cmocka_unit_test(test_shared_grammars_parse_and_walk),
             cmocka_unit_test(test_schema_walks))
