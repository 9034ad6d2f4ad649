/* The default model path for commands run without -m. */
#include "cli/cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *tl_cli_default_model(void)
{
    static char buf[PATH_MAX];
    const char *env = getenv("MODEL");
    if (env && *env) return env;
    const char *rel = "../shared/models/stories260K.gguf";
    if (access(rel, R_OK) == 0) return rel;
    // Relative to the executable: <checkout>/build/tokenloom -> <checkout>/../shared/...
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, sizeof(buf), "%s/../../shared/models/stories260K.gguf", exe);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    return NULL;
}
