/*
 * The table of model families (arch.h) and the typed key readers their hparam hooks share.
 * Each family's descriptor lives in its own arch_<family>.c; this file only lists them, so
 * adding a family is one descriptor and one line here.
 */
#include "model/arch.h"

#include "core/error.h"

#include <stdio.h>

static const struct tl_arch_desc *const families[] = {
    &tl__arch_llama,   &tl__arch_qwen2, &tl__arch_qwen3, &tl__arch_qwen3moe, &tl__arch_granite,
    &tl__arch_smollm3, &tl__arch_phi3,  &tl__arch_bert,  &tl__arch_gemma2,   &tl__arch_gemma3,
};
enum { N_FAMILIES = sizeof(families) / sizeof(families[0]) };

const struct tl_arch_desc *tl__arch_find(struct tl_gguf_str name)
{
    for (int i = 0; i < N_FAMILIES; i++)
        if (tl_gguf_str_eq(name, families[i]->name)) return families[i];
    return NULL;
}

const struct tl_arch_desc *tl__arch_of(enum tl_arch arch)
{
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->arch == arch) return families[i];
    return &tl__arch_llama; // not reached for a valid enum value
}

const char *tl__arch_names(void)
{
    return "llama, qwen2, qwen3, qwen3moe, granite, smollm3, phi3, bert, gemma2, gemma3";
}

// ---- keys ---------------------------------------------------------------------------------------

static void key_name(const struct tl_arch_keys *k, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", k->prefix, suffix);
}

tl_status tl__arch_u32_req(const struct tl_arch_keys *k, const char *suffix, int32_t *out)
{
    char key[128];
    uint32_t v;
    key_name(k, suffix, key, sizeof(key));
    if (!tl_gguf_get_u32(k->gguf, key, &v))
        return tl__errorf(TL_ERR_FORMAT, "%s: missing or invalid key %s", k->path, key);
    if (v > INT32_MAX) return tl__errorf(TL_ERR_FORMAT, "%s: key %s out of range", k->path, key);
    *out = (int32_t)v;
    return TL_OK;
}

void tl__arch_u32_opt(const struct tl_arch_keys *k, const char *suffix, int32_t *out)
{
    char key[128];
    uint32_t v;
    key_name(k, suffix, key, sizeof(key));
    if (tl_gguf_get_u32(k->gguf, key, &v) && v <= INT32_MAX) *out = (int32_t)v;
}

tl_status tl__arch_f32_req(const struct tl_arch_keys *k, const char *suffix, float *out)
{
    char key[128];
    key_name(k, suffix, key, sizeof(key));
    if (!tl_gguf_get_f32(k->gguf, key, out))
        return tl__errorf(TL_ERR_FORMAT, "%s: missing or invalid key %s", k->path, key);
    return TL_OK;
}

void tl__arch_f32_opt(const struct tl_arch_keys *k, const char *suffix, float *out)
{
    char key[128];
    key_name(k, suffix, key, sizeof(key));
    tl_gguf_get_f32(k->gguf, key, out);
}

void tl__arch_bool_opt(const struct tl_arch_keys *k, const char *suffix, bool *out)
{
    char key[128];
    key_name(k, suffix, key, sizeof(key));
    tl_gguf_get_bool(k->gguf, key, out);
}

// ---- experts ------------------------------------------------------------------------------------

tl_status tl__arch_read_experts(const struct tl_arch_keys *k, enum tl_arch_experts experts,
                                struct tl_hparams *hp)
{
    tl_status rc;
    if (experts == TL_EXPERTS_REQUIRED) {
        if ((rc = tl__arch_u32_req(k, "expert_count", &hp->n_expert))) return rc;
    } else {
        tl__arch_u32_opt(k, "expert_count", &hp->n_expert);
        if (hp->n_expert == 0) return TL_OK;
    }
    if ((rc = tl__arch_u32_req(k, "expert_used_count", &hp->n_expert_used))) return rc;
    if (hp->n_expert <= 0 || hp->n_expert > 4096)
        return tl__errorf(TL_ERR_FORMAT, "%s: key %s.expert_count is %d, expected 1..4096", k->path,
                          k->prefix, hp->n_expert);
    if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
        return tl__errorf(TL_ERR_FORMAT,
                          "%s: key %s.expert_used_count is %d, expected 1..expert_count (%d)",
                          k->path, k->prefix, hp->n_expert_used, hp->n_expert);
    return TL_OK;
}
