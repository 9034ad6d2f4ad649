/*
 * A deterministic replay of the GGUF fuzzer (tests/fuzz/fuzz_gguf.c) in `make test`, the way
 * test_server_fuzz replays the request-parser fuzzer. No corpus is stored in the repository: the
 * seeds are written here with the GGUF writer into memory-sized temp files (every value type,
 * arrays of strings, tensors of several types, and the metadata of the shared stories260K model
 * with its tokenizer), then each seed is mutated 20000 times by a seeded generator (bit flips,
 * "interesting" 1/4/8-byte values over length and count fields, truncation, spliced chunks) and
 * every input goes through the harness's LLVMFuzzerTestOneInput, which opens it from memory and
 * touches every byte the parsed object points at. Under `make check` (ASan+UBSan) a read outside
 * the input or an overflow aborts the test. A libFuzzer corpus folder, when $TL_GGUF_CORPUS
 * names one (see the header of fuzz_gguf.c), is replayed file by file as well.
 * Single-threaded.
 */
#include "tl_test.h"

#include "../fuzz/fuzz_gguf.c"

#include <dirent.h>

struct seed {
    uint8_t *data;
    size_t size;
};

// splitmix64 (core/hash.h).
static uint64_t rng_next(uint64_t *s)
{
    return tl_splitmix64(s);
}

static struct seed read_file(const char *path)
{
    struct seed s = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return s;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n > 0 && (s.data = malloc((size_t)n)) && fread(s.data, 1, (size_t)n, f) == (size_t)n)
        s.size = (size_t)n;
    fclose(f);
    return s;
}

// Writes w to a temp file and reads it back as a seed.
static struct seed seed_from_writer(struct tl_gguf_writer *w)
{
    const char *path = tl_test_tmpfile("fuzzseed.gguf");
    assert_int_equal(tl_gguf_writer_write(w, path), TL_OK);
    tl_gguf_writer_destroy(w);
    struct seed s = read_file(path);
    unlink(path);
    assert_non_null(s.data);
    return s;
}

static struct seed seed_all_types(void)
{
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    assert_non_null(w);
    static const char *strs[] = {"a", "", "three"};
    static const float f32s[] = {1.5f, -2.0f, 0.0f};
    static const int32_t i32s[] = {-1, 0, 7, 1 << 30};
    static float t_f32[5 * 3];
    static uint16_t t_f16[4 * 2];
    static uint8_t t_q8[2 * 34];
    assert_int_equal(tl_gguf_writer_set_str(w, "general.architecture", "llama"), TL_OK);
    assert_int_equal(tl_gguf_writer_set_u32(w, "u32", 42), TL_OK);
    assert_int_equal(tl_gguf_writer_set_i32(w, "i32", -42), TL_OK);
    assert_int_equal(tl_gguf_writer_set_u64(w, "u64", 1ull << 40), TL_OK);
    assert_int_equal(tl_gguf_writer_set_f32(w, "f32", 0.25f), TL_OK);
    assert_int_equal(tl_gguf_writer_set_bool(w, "bool", true), TL_OK);
    assert_int_equal(tl_gguf_writer_set_arr_str(w, "arr.str", strs, 3), TL_OK);
    assert_int_equal(tl_gguf_writer_set_arr(w, "arr.f32", TL_GGUF_TYPE_FLOAT32, f32s, 3), TL_OK);
    assert_int_equal(tl_gguf_writer_set_arr(w, "arr.i32", TL_GGUF_TYPE_INT32, i32s, 4), TL_OK);
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "t.f32", TL_DTYPE_F32, 2, (int64_t[]){5, 3}, t_f32), TL_OK);
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "t.f16", TL_DTYPE_F16, 2, (int64_t[]){4, 2}, t_f16), TL_OK);
    assert_int_equal(
        tl_gguf_writer_add_tensor(w, "t.q8_0", TL_DTYPE_Q8_0, 2, (int64_t[]){32, 2}, t_q8), TL_OK);
    return seed_from_writer(w);
}

// The shared model's metadata (tokenizer arrays included) with one small tensor; NULL data when
// the shared folder is missing.
static struct seed seed_shared_metadata(void)
{
    struct seed s = {0};
    struct tl_gguf *g;
    if (tl_gguf_open(tl_test_shared("models/stories260K.gguf"), &g) != TL_OK) return s;
    struct tl_gguf_writer *w = tl_gguf_writer_create();
    assert_non_null(w);
    for (int64_t i = 0; i < tl_gguf_n_kv(g); i++) {
        const struct tl_gguf_kv *kv = tl_gguf_kv_at(g, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        if (!strcmp(key, "general.alignment")) continue;
        assert_int_equal(tl_gguf_writer_set_value(w, key, &kv->value), TL_OK);
    }
    static float t[8];
    assert_int_equal(tl_gguf_writer_add_tensor(w, "t", TL_DTYPE_F32, 1, (int64_t[]){8}, t), TL_OK);
    s = seed_from_writer(w);
    tl_gguf_close(g);
    return s;
}

static const uint64_t interesting[] = {0,          1,          2,          0x7f,       0x80,
                                       0xff,       0x7fff,     0xffff,     0x7fffffff, 0x80000000,
                                       0xffffffff, 1ull << 32, 1ull << 62, 1ull << 63, UINT64_MAX};

// One mutation of seed into buf (capacity seed size + 64); returns the new size.
static size_t mutate(const struct seed *seed, uint8_t *buf, uint64_t *rng)
{
    size_t n = seed->size;
    memcpy(buf, seed->data, n);
    int rounds = 1 + (int)(rng_next(rng) % 4);
    for (int r = 0; r < rounds && n > 8; r++) {
        // Most length/count fields live in the metadata near the start: bias positions there.
        size_t lim = rng_next(rng) % 4 ? (n < 2048 ? n : 2048) : n;
        size_t at = (size_t)(rng_next(rng) % lim);
        switch (rng_next(rng) % 6) {
        case 0:
            buf[at] ^= (uint8_t)(1u << (rng_next(rng) % 8));
            break;
        case 1:
            buf[at] = (uint8_t)interesting[rng_next(rng) % 6];
            break;
        case 2:
        case 3: {
            uint64_t v = interesting[rng_next(rng) % (sizeof(interesting) / sizeof(*interesting))];
            size_t width = rng_next(rng) % 2 ? 8 : 4;
            if (at + width <= n) memcpy(buf + at, &v, width);
            break;
        }
        case 4:
            n = at + 1;
            break; // truncate
        default: { // copy a chunk from elsewhere in the seed
            size_t from = (size_t)(rng_next(rng) % seed->size);
            size_t len = 1 + (size_t)(rng_next(rng) % 32);
            if (from + len <= seed->size && at + len <= n) memcpy(buf + at, seed->data + from, len);
            break;
        }
        }
    }
    return n;
}

static void replay_seed(const struct seed *s, uint64_t seed_no)
{
    // Each input in its own allocation of exactly its size, so ASan sees reads past the end.
    assert_int_equal(LLVMFuzzerTestOneInput(s->data, s->size), 0);
    struct tl_gguf *g;
    assert_int_equal(tl_gguf_open_mem(s->data, s->size, "seed", &g), TL_OK); // seeds are valid
    tl_gguf_close(g);
    uint8_t *buf = malloc(s->size + 64);
    assert_non_null(buf);
    uint64_t rng = seed_no * 1000003u;
    long opened = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = mutate(s, buf, &rng);
        uint8_t *exact = malloc(n ? n : 1);
        assert_non_null(exact);
        memcpy(exact, buf, n);
        assert_int_equal(LLVMFuzzerTestOneInput(exact, n), 0);
        if (tl_gguf_open_mem(exact, n, "m", &g) == TL_OK) {
            opened++;
            tl_gguf_close(g);
        } else {
            assert_true(tl_last_error()[0] != '\0'); // every refusal says why
        }
        free(exact);
    }
    free(buf);
    fprintf(stderr, "# seed %llu: %zu bytes, %ld of 20000 opened\n", (unsigned long long)seed_no,
            s->size, opened);
    // Some mutations must keep the file valid, or the accepted path is never exercised.
    assert_true(opened > 100);
}

// Replays a libFuzzer corpus folder when $TL_GGUF_CORPUS names one; returns the files read.
static int replay_corpus_folder(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        struct seed s = read_file(path);
        if (s.data) assert_int_equal(LLVMFuzzerTestOneInput(s.data, s.size), 0);
        free(s.data);
        n++;
    }
    closedir(d);
    return n;
}

static void test_gguf_fuzz_seeds(void **state)
{
    (void)state;
    struct seed a = seed_all_types();
    replay_seed(&a, 1);
    free(a.data);
    struct seed b = seed_shared_metadata();
    if (b.data) {
        replay_seed(&b, 2);
        free(b.data);
    }
    const char *dir = getenv("TL_GGUF_CORPUS");
    if (dir && *dir) assert_true(replay_corpus_folder(dir) > 0);
}

TL_TEST_MAIN(cmocka_unit_test(test_gguf_fuzz_seeds))
