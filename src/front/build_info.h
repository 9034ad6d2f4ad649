/*
 * What this binary is: the version, the git revision it was built from (compiled in by the
 * Makefile; "unknown" outside a git checkout, "-dirty" with uncommitted changes) and the build
 * flags. Reported by `tokenloom version` and /metrics' tokenloom:build_info.
 */
#ifndef TL_FRONT_BUILD_INFO_H
#define TL_FRONT_BUILD_INFO_H

const char *tl_build_version(void);
const char *tl_build_revision(void);
const char *tl_build_flags(void);

#endif
