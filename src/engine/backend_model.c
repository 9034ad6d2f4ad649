/*
 * The real-model backend of the engine: forward pass, tokenizer and detokenizer of a loaded
 * tl_model. Placeholder until src/model and src/tokenizer are linked in: engines over real
 * models report TL_ERR_UNSUPPORTED.
 */
#include "engine/engine_impl.h"

#include "core/error.h"

tl_status tl__engine_backend_model(const tl_model *m, struct tl_engine_backend *be)
{
    (void)m;
    (void)be;
    return tl__errorf(TL_ERR_UNSUPPORTED, "engine: the model backend is not built yet");
}
