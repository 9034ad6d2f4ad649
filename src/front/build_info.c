/*
 * The build's identity (see build_info.h). The Makefile passes TL_GIT_REV and TL_BUILD_FLAGS
 * to this file alone (and rebuilds it when they change), so a new commit recompiles one file.
 *
 * Thread model: constant strings.
 */
#include "front/build_info.h"

#include "tokenloom.h"

#ifndef TL_GIT_REV
#define TL_GIT_REV "unknown"
#endif
#ifndef TL_BUILD_FLAGS
#define TL_BUILD_FLAGS ""
#endif

const char *tl_build_version(void)
{
    return TL_VERSION_STRING;
}

const char *tl_build_revision(void)
{
    return TL_GIT_REV;
}

const char *tl_build_flags(void)
{
    return TL_BUILD_FLAGS;
}
