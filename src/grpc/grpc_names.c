/*
 * The names of the gRPC front (see grpc_impl.h): its methods, as their paths end and as the
 * metrics and logs label them, and the gRPC status codes; which method a call's path asks for.
 * A leaf of src/grpc: constant tables and pure functions, any thread.
 */
#include "grpc/grpc_impl.h"

#include <string.h>

#define SERVICE "/inference.GRPCInferenceService/"
#define HEALTH_CHECK "/grpc.health.v1.Health/Check"

static const char *const method_names[TL_GM_COUNT] = {
    "ServerLive", "ServerReady",      "ModelReady",  "ServerMetadata", "ModelMetadata",
    "ModelInfer", "ModelStreamInfer", "HealthCheck", "other",
};

static const char *const code_names[TL_GRPC_N_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *tl__grpc_code_name(grpc_status_code code)
{
    return code >= 0 && code < TL_GRPC_N_CODES ? code_names[code] : "UNKNOWN";
}

const char *tl__grpc_method_name(enum tl_grpc_method m)
{
    return m >= 0 && m < TL_GM_COUNT ? method_names[m] : "other";
}

enum tl_grpc_method tl__grpc_method_of(const grpc_slice *path)
{
    size_t n = GRPC_SLICE_LENGTH(*path), ns = strlen(SERVICE);
    const char *p = (const char *)GRPC_SLICE_START_PTR(*path);
    if (n == strlen(HEALTH_CHECK) && !memcmp(p, HEALTH_CHECK, n)) return TL_GM_HEALTH;
    if (n <= ns || memcmp(p, SERVICE, ns)) return TL_GM_OTHER;
    for (int m = 0; m < TL_GM_HEALTH; m++)
        if (strlen(method_names[m]) == n - ns && !memcmp(p + ns, method_names[m], n - ns))
            return (enum tl_grpc_method)m;
    return TL_GM_OTHER;
}
