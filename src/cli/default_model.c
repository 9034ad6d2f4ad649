/* The shared models folder and the default model path for commands run without -m.
 *
 * One lookup serves every command: $TL_SHARED/models, then ../shared/models from the current
 * directory, then the folder beside the executable's checkout. Not thread-safe only in that
 * tl_cli_default_model returns a static buffer; the CLI calls it once from main's thread. */
#include "cli/cli.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool tl_cli_find_shared_model(const char *file, char *buf, size_t cap)
{
    const char *root = getenv("TL_SHARED");
    if (root && *root) {
        snprintf(buf, cap, "%s/models/%s", root, file);
        if (access(buf, R_OK) == 0) return true;
    }
    snprintf(buf, cap, "../shared/models/%s", file);
    if (access(buf, R_OK) == 0) return true;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, cap, "%s/../../shared/models/%s", exe, file);
            if (access(buf, R_OK) == 0) return true;
        }
    }
    return false;
}

const char *tl_cli_default_model(void)
{
    static char buf[PATH_MAX];
    const char *env = getenv("MODEL");
    if (env && *env) return env;
    return tl_cli_find_shared_model("stories260K.gguf", buf, sizeof(buf)) ? buf : NULL;
}
