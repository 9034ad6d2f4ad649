/*
 * Differential test of the chat template engine against Jinja2 itself: tests/chat/oracle.py
 * renders every conversation of tests/chat/conversations.json through each real template in
 * $TL_SHARED/templates (and each feature template in tests/chat/templates/) with Jinja2
 * configured as transformers configures it; this test renders the same requests through
 * tl_chat_render_vars and requires the identical string, the identical raise_exception message,
 * or an error where Jinja2 failed. The built-in templates (--chat-template NAME) are written to a
 * temporary folder and go through the same conversations. One test per template; the totals are
 * printed at the end. Run from the repository root (make test does).
 */
#include "tl_test.h"

#include "chat/chat_render.h"

#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>

static json_t *g_cases;
static int g_total, g_matched;

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

// Where two strings first differ, with some context, for the failure message.
static void print_diff(const char *want, const char *got, size_t got_len)
{
    size_t i = 0, wl = strlen(want);
    while (i < wl && i < got_len && want[i] == got[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    printf("#   first difference at byte %zu (want %zu bytes, got %zu)\n", i, wl, got_len);
    printf("#   want: %.*s\n", (int)(wl - from < 160 ? wl - from : 160), want + from);
    printf("#   got:  %.*s\n", (int)(got_len - from < 160 ? got_len - from : 160), got + from);
}

// Renders one oracle case; true when tokenloom agrees with Jinja2.
static bool check_case(const tl_jinja_template *t, json_t *c)
{
    json_t *req = json_object_get(c, "request");
    struct tl_chat_vars v = {
        .messages = json_object_get(req, "messages"),
        .tools = json_is_null(json_object_get(req, "tools")) ? NULL : json_object_get(req, "tools"),
        .kwargs = json_object_get(req, "chat_template_kwargs"),
        .bos_token = "<s>",
        .eos_token = "</s>",
        .add_generation_prompt = json_is_true(json_object_get(req, "add_generation_prompt")),
        .continue_final_message = json_is_true(json_object_get(req, "continue_final_message")),
    };
    char *out = NULL, err[512];
    size_t len = 0;
    enum tl_jinja_error_kind kind;
    tl_status st = tl_chat_render_vars(t, &v, &out, &len, &kind, err, sizeof(err));
    const char *name = json_string_value(json_object_get(c, "conversation"));
    const char *want_err = json_string_value(json_object_get(c, "error"));
    const char *want_msg = json_string_value(json_object_get(c, "message"));
    bool ok;
    if (!want_err) {
        const char *want = json_string_value(json_object_get(c, "expected"));
        ok = st == TL_OK && len == strlen(want) && !memcmp(out, want, len);
        if (!ok) {
            printf("# %s: ", name);
            if (st != TL_OK)
                printf("failed: %s\n", err);
            else
                print_diff(want, out, len);
        }
    } else if (!strcmp(want_err, "raised")) {
        ok = st != TL_OK && kind == TL_JINJA_RAISED && !strcmp(err, want_msg);
        if (!ok)
            printf("# %s: want raise_exception(%s), got %s\n", name, want_msg,
                   st == TL_OK ? "success" : err);
    } else {
        ok = st != TL_OK && kind == TL_JINJA_ERROR;
        if (!ok)
            printf("# %s: Jinja2 failed (%s) but tokenloom %s\n", name, want_msg,
                   st == TL_OK ? "rendered" : err);
    }
    free(out);
    return ok;
}

static void test_template(void **state)
{
    const char *path = *state;
    size_t len = 0;
    char *src = read_file(path, &len);
    assert_non_null(src);
    tl_jinja_template *t = NULL;
    char err[512];
    tl_status st = tl_jinja_parse(src, len, &t, err, sizeof(err));
    free(src);
    if (st) fail_msg("%s: parse error: %s", path, err);
    int n = 0, ok = 0;
    size_t i;
    json_t *c;
    json_array_foreach(g_cases, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "template")), path)) continue;
        n++;
        ok += check_case(t, c);
    }
    tl_jinja_destroy(t);
    g_total += n;
    g_matched += ok;
    printf("# %s: %d of %d cases match Jinja2\n", strrchr(path, '/') + 1, ok, n);
    assert_true(n > 0);
    assert_int_equal(ok, n);
}

// Writes each built-in template to dir/builtin-NAME.jinja.
static bool write_builtins(const char *dir)
{
    if (mkdir(dir, 0700)) return false;
    for (int i = 0; tl_chat_builtin_names[i]; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/builtin-%s.jinja", dir, tl_chat_builtin_names[i]);
        FILE *f = fopen(path, "wb");
        if (!f) return false;
        fputs(tl_chat_builtin_source(tl_chat_builtin_names[i]), f);
        fclose(f);
    }
    return true;
}

static void remove_builtins(const char *dir)
{
    for (int i = 0; tl_chat_builtin_names[i]; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/builtin-%s.jinja", dir, tl_chat_builtin_names[i]);
        unlink(path);
    }
    rmdir(dir);
}

// Counts the *.jinja files in dir (0 if it cannot be read).
static size_t count_templates(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 6 && !strcmp(e->d_name + l - 6, ".jinja")) n++;
    }
    closedir(d);
    return n;
}

// The number of cases the oracle must produce, counted from its inputs independently of its
// output: every conversation through every real and built-in template, plus one case per
// feature template. An empty or truncated oracle output then fails instead of passing vacuously.
static size_t expected_cases(const char *builtins)
{
    json_error_t jerr;
    json_t *conv = json_load_file("tests/chat/conversations.json", 0, &jerr);
    size_t n_conv = json_object_size(json_object_get(conv, "conversations"));
    json_decref(conv);
    size_t n_real = count_templates(tl_test_shared("templates"));
    size_t n_builtin = count_templates(builtins);
    size_t n_feature = count_templates("tests/chat/templates");
    if (!n_conv || !n_real || !n_builtin || !n_feature) return 0;
    return (n_real + n_builtin) * n_conv + n_feature;
}

int main(void)
{
    char builtins[256];
    snprintf(builtins, sizeof(builtins), "%s", tl_test_tmpfile("builtins"));
    if (!write_builtins(builtins)) {
        printf("1..1\nnot ok 1 - cannot write %s\n", builtins);
        return 1;
    }
    const char *out = tl_test_tmpfile("oracle.json");
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "python3 tests/chat/oracle.py --templates '%s' --templates '%s' --out '%s'",
             tl_test_shared("templates"), builtins, out);
    if (system(cmd) != 0) {
        printf("1..1\nnot ok 1 - oracle: '%s' failed (python3-jinja2 installed? run from the "
               "repository root)\n",
               cmd);
        return 1;
    }
    json_error_t jerr;
    g_cases = json_load_file(out, 0, &jerr);
    unlink(out);
    if (!json_is_array(g_cases)) {
        printf("1..1\nnot ok 1 - oracle output unreadable: %s\n", jerr.text);
        return 1;
    }
    size_t want = expected_cases(builtins);
    if (!want || json_array_size(g_cases) != want) {
        printf("1..1\nnot ok 1 - oracle produced %zu cases, expected %zu (templates x "
               "conversations + feature templates)\n",
               json_array_size(g_cases), want);
        json_decref(g_cases);
        remove_builtins(builtins);
        return 1;
    }
    // One test per distinct template, in the oracle's order.
    struct CMUnitTest *tests = calloc(json_array_size(g_cases), sizeof(*tests));
    char **paths = calloc(json_array_size(g_cases), sizeof(*paths));
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(g_cases, i, c)
    {
        const char *p = json_string_value(json_object_get(c, "template"));
        if (n && !strcmp(paths[n - 1], p)) continue;
        paths[n] = strdup(p);
        tests[n].name = strrchr(paths[n], '/') + 1;
        tests[n].test_func = test_template;
        tests[n].initial_state = paths[n];
        n++;
    }
    const char *filter = getenv("TL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    int rc = _cmocka_run_group_tests("jinja_oracle", tests, (size_t)n, NULL, NULL);
    printf("# jinja oracle: %d of %d (template, conversation) cases match Jinja2\n", g_matched,
           g_total);
    for (int k = 0; k < n; k++)
        free(paths[k]);
    free(paths);
    free(tests);
    json_decref(g_cases);
    remove_builtins(builtins);
    return rc;
}
