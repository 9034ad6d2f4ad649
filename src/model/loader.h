/*
 * Internal to src/model: the two file loaders and the helpers they share. loader_gguf.c reads
 * GGUF files, loader_llama2c.c reads llama2.c checkpoints; both fill a struct tl_model that
 * model.c then checks with tl__model_validate.
 */
#ifndef TL_MODEL_LOADER_H
#define TL_MODEL_LOADER_H

#include "model/model.h"

tl_status tl__model_load_gguf(struct tl_model *m) TL_WARN_UNUSED;
tl_status tl__model_load_llama2c(struct tl_model *m, const char *tokenizer_path) TL_WARN_UNUSED;

// Keeps a buffer the model owns (freed with it). False on allocation failure (buf is freed).
bool tl__model_own(struct tl_model *m, void *buf);

// Checks hyperparameters and weight shapes against each other; errors name the file.
tl_status tl__model_validate(const struct tl_model *m) TL_WARN_UNUSED;

// For an encoder's own loader (load_encoder in arch.h), the GGUF loader's tensor readers: a 1-D
// f32 vector of n elements (F16/BF16 converted into an owned buffer), and a 2-D matrix view.
// A missing tensor is an error naming it when required, else leaves *out NULL / w->data NULL.
tl_status tl__gguf_vec(struct tl_model *m, const char *name, int64_t n, bool required,
                       const float **out) TL_WARN_UNUSED;
tl_status tl__gguf_mat(struct tl_model *m, const char *name, bool required,
                       struct tl_weight *w) TL_WARN_UNUSED;

#endif
