/*
 * libFuzzer harness for the GGUF reader (`make test` replays it on mutated seeds through
 * tests/unit/test_gguf_fuzz.c; long runs use libFuzzer as below). Each input is parsed with
 * tl_gguf_open_mem; when it opens, every key, array element and tensor byte range the object
 * exposes is read, so a pointer outside the input is caught by ASan.
 *
 * Build and run (clang):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iinclude -Isrc \
 *       tests/fuzz/fuzz_gguf.c src/gguf/gguf.c src/gguf/gguf_value.c src/gguf/gguf_writer.c src/core/[a-z]*.c \
 *       -o build/fuzz_gguf -lm -pthread
 *   mkdir -p build/fuzz-corpus
 *   build/tokenloom mkmodel -o build/fuzz-corpus/tiny.gguf --dim 32 --layers 1 --heads 2 \
 *       --ff 32 --type q8_0
 *   build/fuzz_gguf -max_len=65536 build/fuzz-corpus
 * Seeds come from mkmodel (and the shared test files may be added to the corpus folder); none
 * are stored in the repository.
 */
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>

static volatile uint64_t sink; // keeps the reads from being optimized away

static void touch_value(const struct tl_gguf_value *v)
{
    if (v->type == TL_GGUF_TYPE_STRING) {
        if (v->str.len) sink += (uint8_t)v->str.ptr[0] + (uint8_t)v->str.ptr[v->str.len - 1];
        return;
    }
    if (v->type != TL_GGUF_TYPE_ARRAY) {
        sink += v->u64;
        return;
    }
    for (uint64_t i = 0; i < v->arr.n; i++) {
        double d;
        if (v->arr.items) touch_value(&v->arr.items[i]);
        else if (tl_gguf_arr_f64(v, i, &d)) sink += d != 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tl_gguf *g;
    if (tl_gguf_open_mem(data, size, "fuzz", &g) != TL_OK) return 0;
    for (int64_t i = 0; i < tl_gguf_n_kv(g); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, i);
        touch_value(&kv->value);
        if (kv->key.len && tl_gguf_get(g, "general.architecture")) sink++;
    }
    for (int64_t i = 0; i < tl_gguf_n_tensors(g); i++) {
        const struct tl_gguf_tensor *t = tl_gguf_tensor_at(g, i);
        if (t->n_bytes)
            sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
    }
    tl_gguf_close(g);
    return 0;
}
