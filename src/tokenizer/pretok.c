/*
 * Byte-level BPE pre-tokenizer: splits text into pre-tokens with the regex list that llama.cpp
 * uses for each tokenizer.ggml.pre type, run with PCRE2 (UTF + UCP, JIT when available), then
 * byte-maps each pre-token to GPT-2's printable characters.
 *
 * How llama.cpp splits, and how we reproduce it (all facts of its unicode.cpp):
 *   - The text is decoded leniently into code points (invalid bytes become U+FFFD; overlong
 *     forms and surrogates are accepted as decoded), and pre-tokens are re-encoded from them.
 *   - The regexes of a type are applied in order; each one splits every piece left by the
 *     previous ones, and the text between matches becomes a piece of its own. A regex never sees
 *     outside its piece (a lookahead at a piece end sees the end of the subject).
 *   - llama.cpp runs each regex in one of three ways, and each way classifies characters a bit
 *     differently. We give each regex a mode and feed PCRE2 a "subject" transformed so that
 *     PCRE2's Unicode classes behave like llama.cpp's:
 *       MODE_UNICODE: the GPT-2 and Llama-3 regexes, which llama.cpp runs as hand-written
 *         splitters over its own Unicode tables. Its whitespace set is Unicode's White_Space,
 *         which unlike PCRE2's \s excludes U+180E; so U+180E (and surrogates or code points past
 *         U+10FFFF, which PCRE2 cannot hold) become U+200B, a format character like them.
 *       MODE_COLLAPSED: regexes with \p{..} classes, which llama.cpp runs with std::regex over a
 *         "collapsed" text where every non-ASCII character is one byte per category. The
 *         categories are Unicode's, except that its ASCII table for \p{S} forgets '~'. So '~'
 *         becomes U+E07E (a private-use character: no category, not space) in the subject, and
 *         a literal '~' in such a pattern is written \x{E07E}.
 *       MODE_WIDE: regexes without \p classes, run with std::wregex on the code points where
 *         non-ASCII whitespace is replaced by U+000B; we do the same replacement.
 *     In all modes '$' only matches at the end (PCRE2_DOLLAR_ENDONLY, as in ECMAScript), and
 *     empty matches advance like std::regex_iterator (retry non-empty at the same place, else
 *     move one character on).
 *   - The AFMoE digit rule is a hand-written splitter in llama.cpp (not a regex): each run of
 *     digits is cut into a leading 1-2 digits (length mod 3) and groups of 3, and the text
 *     before a run is glued to the run's first group. We reproduce that (MODE_AFMOE_DIGITS).
 *   - Pre-token bytes are then mapped byte by byte to GPT-2's characters.
 * Known remaining differences: PCRE2's Unicode tables (Unicode 15 in Debian 12's 10.42) may
 * classify characters assigned after them differently from llama.cpp's tables; code points past
 * U+10FFFF (from bytes F4 90.. or F5..F7) make llama.cpp throw, we encode them as U+FFFD; the
 * Kimi-K2 splitter is approximated by a regex.
 *
 * Patterns are written here as PCRE2 strings; they are facts taken from llama.cpp's tables
 * (non-ASCII characters spelled as \x{..} so that no editor can normalize them).
 *
 * Threads and ownership: a tl__pretok is immutable after creation; pcre2 compiled code is
 * shared and each split call allocates its own match data and JIT stack.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/vocab_impl.h"

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

enum re_mode { MODE_UNICODE, MODE_COLLAPSED, MODE_WIDE, MODE_AFMOE_DIGITS, N_MODES };

struct re_def {
    const char *pattern;
    enum re_mode mode;
};

#define MAX_RES 6

struct pre_def {
    const char *canon;     // our name for the kind
    const char *names[12]; // tokenizer.ggml.pre values, NULL-terminated
    bool ignore_merges, add_bos, no_bos;
    struct re_def res[MAX_RES]; // NULL-terminated by pattern
};

// ---- the patterns -------------------------------------------------------------------------------

#define CONTR_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

#define RE_LLAMA3                                                                                  \
    CONTR_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"           \
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_QWEN2                                                                                   \
    CONTR_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"                \
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

// Upper-then-lower letter runs, with llama.cpp's adaptation of \p{Lu}/\p{Ll} (capture groups
// made non-capturing; matching is unchanged).
#define UPPERS "(?:(?=[\\p{L}])[^a-z])"
#define LOWERS "(?:(?=[\\p{L}])[^A-Z])"
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "*" LOWERS "+|[^\\r\\n\\p{L}\\p{N}]?" UPPERS "+" LOWERS "*"    \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "*" LOWERS "+" CONTR_CI "?|[^\\r\\n\\p{L}\\p{N}]?" UPPERS      \
    "+" LOWERS "*" CONTR_CI                                                                        \
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_BAILING                                                                                 \
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"              \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"

#define RE_SEED_CODER                                                                              \
    CONTR_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+"  \
             "|\\s+(?!\\S)|\\s+"

// DeepSeek-V3 / AFMoE main pattern (collapsed mode: literal '~' written as U+E07E).
#define RE_DEEPSEEK3                                                                               \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}\\x{E07E}][A-Za-z]+"                                \
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+"        \
    "|\\s+(?!\\S)|\\s+"

#define RE_CJK_DEEPSEEK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

// DeepSeek-LLM's cased-letter class.
#define RE_DEEPSEEK_LLM_LETTERS                                                                    \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"            \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}" \
    "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"         \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"  \
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"                 \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"                 \
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"         \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"        \
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"                 \
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}"         \
    "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"                   \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"         \
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"                  \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"                 \
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"                 \
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"           \
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"

#define RE_DEEPSEEK_LLM_PUNCT                                                                      \
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"

#define RE_AFMOE_CJK                                                                               \
    "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{F900}-\\x{FAFF}\\x{3040}-\\x{309F}"                \
    "\\x{30A0}-\\x{30FF}\\x{FF65}-\\x{FF9F}\\x{2F00}-\\x{2FDF}\\x{0E00}-\\x{0E7F}"                 \
    "\\x{0E80}-\\x{0EFF}\\x{1780}-\\x{17FF}\\x{1000}-\\x{109F}\\x{AA60}-\\x{AA7F}"                 \
    "\\x{A9E0}-\\x{A9FF}\\x{AC00}-\\x{D7AF}\\x{1100}-\\x{11FF}]+"

// Kimi-K2: llama.cpp's hand-written splitter, as a regex (Han runs; letter runs without Han
// and without the upper/lower distinction, with an optional contraction; digits by 3; ...).
#define RE_KIMI_K2                                                                                 \
    "\\p{Han}+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})\\p{L})+" CONTR_CI "?|\\p{N}{1,3}"             \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define U(p)                                                                                       \
    {                                                                                              \
        p, MODE_UNICODE                                                                            \
    }
#define C(p)                                                                                       \
    {                                                                                              \
        p, MODE_COLLAPSED                                                                          \
    }
#define W(p)                                                                                       \
    {                                                                                              \
        p, MODE_WIDE                                                                               \
    }

static const struct pre_def PRE_DEFS[] = {
    // index 0 is the fallback for unknown names
    {"default",
     {"default", NULL},
     false,
     false,
     false,
     {C("[\\p{P}\\$\\+<=>\\^\\x{E07E}\\|]+"), U(RE_GPT2), C("\\p{N}+"), W("[0-9][0-9][0-9]")}},
    {"llama3",
     {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      NULL},
     true,
     true,
     false,
     {U(RE_LLAMA3)}},
    {"dbrx", {"dbrx", "smaug-bpe", NULL}, false, false, false, {U(RE_LLAMA3)}},
    {"deepseek-llm",
     {"deepseek-llm", NULL},
     false,
     false,
     false,
     {W("[\\r\\n]"), W(RE_DEEPSEEK_LLM_LETTERS), W(RE_DEEPSEEK_LLM_PUNCT), W("\\s+$"),
      W(RE_CJK_DEEPSEEK), C("\\p{N}+")}},
    {"deepseek-v3",
     {"deepseek-v3", "hunyuan-dense", NULL},
     false,
     false,
     false,
     {C("\\p{N}{1,3}"), W("[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"),
      C(RE_DEEPSEEK3)}},
    {"deepseek-coder",
     {"deepseek-coder", NULL},
     false,
     false,
     false,
     {W("[\\r\\n]"), C("\\s?\\p{L}+"), C("\\s?\\p{P}+"), W(RE_CJK_DEEPSEEK), C("\\p{N}")}},
    {"falcon",
     {"falcon", NULL},
     false,
     false,
     false,
     {C("[\\p{P}\\$\\+<=>\\^\\x{E07E}\\|`]+"), U(RE_GPT2), W("[0-9][0-9][0-9]")}},
    {"starcoder",
     {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", NULL},
     false,
     false,
     false,
     {C("\\p{N}"), U(RE_GPT2)}},
    {"gpt-2",
     {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "exaone4", "jina-v1-en", NULL},
     false,
     false,
     false,
     {U(RE_GPT2)}},
    {"gpt-2",
     {"jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion", "granite-docling", NULL},
     false,
     false,
     false,
     {U(RE_GPT2)}},
    {"qwen2",
     {"qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan", "grok-2", NULL},
     false,
     false,
     false,
     {C(RE_QWEN2)}},
    {"poro", {"poro-chat", "bloom", "gpt3-finnish", NULL}, false, false, false, {W(RE_PORO)}},
    {"chatglm4", {"glm4", "chatglm-bpe", NULL}, false, false, true, {U(RE_LLAMA3)}},
    {"viking", {"viking", NULL}, false, false, false, {W(RE_PORO), C("\\p{N}")}},
    {"tekken", {"tekken", NULL}, true, true, false, {C(RE_TEKKEN)}},
    {"chameleon",
     {"chameleon", NULL},
     false,
     true,
     false,
     {W("<sentinel:[0-9]+>"), W("(?:IMGIMG)(?:(?:A|B|C|D|E|F|G|H|I){1,4})Z"),
      W("(?:[\\t\\n]|    |  )"), C("\\p{N}"), C("[\\p{P}!-/:-@\\[-`{-}\\x{E07E}]"), U(RE_GPT2)}},
    {"gpt-4o", {"gpt-4o", "llama4", "minimax-m2", NULL}, false, false, false, {C(RE_GPT4O)}},
    {"kimi-k2", {"kimi-k2", NULL}, false, false, false, {U(RE_KIMI_K2)}},
    {"superbpe",
     {"superbpe", NULL},
     false,
     false,
     false,
     {C("\\p{N}+"), W("(?=(?:[0-9]{3})+(?![0-9]))")}},
    {"bailingmoe",
     {"bailingmoe", "bailingmoe2", "llada-moe", NULL},
     false,
     false,
     false,
     {C(RE_BAILING)}},
    {"seed-coder", {"seed-coder", NULL}, false, false, false, {C(RE_SEED_CODER)}},
    {"afmoe",
     {"afmoe", NULL},
     false,
     false,
     false,
     {{"\\p{N}+", MODE_AFMOE_DIGITS}, W(RE_AFMOE_CJK), C(RE_DEEPSEEK3)}},
};

#define N_PRE_DEFS ((int)(sizeof(PRE_DEFS) / sizeof(PRE_DEFS[0])))

bool tl__pretok_lookup(const char *name, int *kind, bool *ignore_merges, bool *add_bos,
                       bool *no_bos)
{
    for (int k = 0; k < N_PRE_DEFS; k++) {
        for (int i = 0; PRE_DEFS[k].names[i]; i++) {
            if (strcmp(PRE_DEFS[k].names[i], name) == 0) {
                *kind = k;
                *ignore_merges = PRE_DEFS[k].ignore_merges;
                *add_bos = PRE_DEFS[k].add_bos;
                *no_bos = PRE_DEFS[k].no_bos;
                return true;
            }
        }
    }
    *kind = 0;
    *ignore_merges = *add_bos = *no_bos = false;
    return false;
}

const char *tl__pretok_kind_name(int kind)
{
    return kind >= 0 && kind < N_PRE_DEFS ? PRE_DEFS[kind].canon : "default";
}

// ---- compiled form ------------------------------------------------------------------------------

struct tl__pretok {
    int n;
    pcre2_code *code[MAX_RES]; // owned
    enum re_mode mode[MAX_RES];
    bool need_mode[N_MODES];
};

void tl__pretok_destroy(struct tl__pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++)
        pcre2_code_free(p->code[i]);
    free(p);
}

tl_status tl__pretok_create(int kind, const char *source, struct tl__pretok **out)
{
    *out = NULL;
    if (kind < 0 || kind >= N_PRE_DEFS) kind = 0;
    const struct pre_def *d = &PRE_DEFS[kind];
    struct tl__pretok *p = calloc(1, sizeof(*p));
    if (!p) return tl__errorf(TL_ERR_NOMEM, "%s: out of memory", source);
    for (int i = 0; i < MAX_RES && d->res[i].pattern; i++) {
        int err;
        PCRE2_SIZE eoff;
        pcre2_code *c =
            pcre2_compile((PCRE2_SPTR)d->res[i].pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &eoff, NULL);
        if (!c) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            tl__pretok_destroy(p);
            return tl__errorf(TL_ERR_UNSUPPORTED,
                              "%s: pre-tokenizer '%s' regex %d does not compile at %zu: %s", source,
                              d->canon, i, (size_t)eoff, (const char *)msg);
        }
        // JIT is an optimisation: when unavailable pcre2_match interprets.
        (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
        p->code[p->n] = c;
        p->mode[p->n] = d->res[i].mode;
        p->need_mode[d->res[i].mode == MODE_AFMOE_DIGITS ? MODE_COLLAPSED : d->res[i].mode] = true;
        p->n++;
    }
    *out = p;
    return TL_OK;
}

// ---- code points --------------------------------------------------------------------------------

// llama.cpp's lenient UTF-8 decoding: only the lead byte's length and the continuation bytes'
// top bits are checked; anything else is one U+FFFD per byte.
static uint32_t decode_lenient(const unsigned char *s, size_t n, size_t *adv)
{
    unsigned char b = s[0];
    if (!(b & 0x80)) {
        *adv = 1;
        return b;
    }
    *adv = 1;
    if (!(b & 0x40)) return 0xFFFD;
    if (!(b & 0x20)) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0xFFFD;
        *adv = 2;
        return ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (!(b & 0x10)) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0xFFFD;
        *adv = 3;
        return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    if (!(b & 0x08)) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0xFFFD;
        *adv = 4;
        return ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
    return 0xFFFD;
}

// UTF-8 of any code point below 0x110000, surrogates included (llama.cpp encodes them).
static int encode_any(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x10000) return encode_any(cp, o);
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// Unicode White_Space (llama.cpp's whitespace table).
static bool is_ws(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

// The character PCRE2 sees in place of cp in a given mode (see the header comment).
static uint32_t subject_cp(uint32_t cp, enum re_mode mode)
{
    if (cp == 0x180E || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0x200B;
    if (mode == MODE_COLLAPSED && cp == '~') return 0xE07E;
    if (mode == MODE_WIDE && cp > 0x7F && is_ws(cp)) return 0x0B;
    return cp;
}

// One transformed subject: bytes and the byte offset of each code point (n+1 entries).
struct subject {
    char *bytes;  // owned
    int64_t *off; // owned
};

static bool subject_build(struct subject *s, const uint32_t *cps, int64_t n, enum re_mode mode)
{
    s->bytes = tl_malloc_array((size_t)n + 1, 4);
    s->off = tl_malloc_array((size_t)n + 1, sizeof(int64_t));
    if (!s->bytes || !s->off) return false;
    int64_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        s->off[i] = o;
        o += encode_any(subject_cp(cps[i], mode), s->bytes + o);
    }
    s->off[n] = o;
    return true;
}

// Code point index of byte offset `b` (which lies on a character boundary) within [lo, hi].
static int64_t cp_index(const int64_t *off, int64_t lo, int64_t hi, int64_t b)
{
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (off[mid] < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// ---- splitting ----------------------------------------------------------------------------------

struct ranges {
    int64_t *v; // owned: pairs (start, end) of code point indices
    size_t n, cap;
};

static bool ranges_push(struct ranges *r, int64_t a, int64_t b)
{
    if (a >= b) return true;
    if (!tl_grow((void **)&r->v, &r->cap, 2 * (r->n + 1), sizeof(int64_t))) return false;
    r->v[2 * r->n] = a;
    r->v[2 * r->n + 1] = b;
    r->n++;
    return true;
}

struct matcher {
    pcre2_match_data *md;       // owned
    pcre2_match_context *mctx;  // owned
    pcre2_jit_stack *jit_stack; // owned, may be NULL
};

static tl_status match_error(int rc)
{
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    if (rc == PCRE2_ERROR_NOMEMORY)
        return tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory in the regex matcher");
    return tl__errorf(TL_ERR_TOO_LONG, "pre-tokenizer regex failed: %s", (const char *)msg);
}

// Appends to `out` the pieces of [a, b) split by regex `code`: matches and the gaps between.
static tl_status split_piece(const struct matcher *m, const pcre2_code *code,
                             const struct subject *s, int64_t a, int64_t b, struct ranges *out)
{
    const char *subj = s->bytes + s->off[a];
    PCRE2_SIZE len = (PCRE2_SIZE)(s->off[b] - s->off[a]);
    PCRE2_SIZE pos = 0;
    int64_t last = a;
    uint32_t opts = 0;
    while (pos <= len) {
        int rc = pcre2_match(code, (PCRE2_SPTR)subj, len, pos, opts | PCRE2_NO_UTF_CHECK, m->md,
                             m->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!opts) break;
            // No non-empty match where the empty one was: move on by one character.
            opts = 0;
            if (pos >= len) break;
            pos++;
            while (pos < len && ((unsigned char)subj[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if (rc < 0) return match_error(rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        int64_t cs = cp_index(s->off, a, b, s->off[a] + (int64_t)ov[0]);
        int64_t ce = cp_index(s->off, a, b, s->off[a] + (int64_t)ov[1]);
        if (!ranges_push(out, last, cs) || !ranges_push(out, cs, ce))
            return tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
        last = ce;
        if (ov[1] == ov[0]) {
            pos = ov[1];
            opts = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        } else {
            pos = ov[1];
            opts = 0;
        }
    }
    if (!ranges_push(out, last, b)) return tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
    return TL_OK;
}

// AFMoE digits: llama.cpp cuts each digit run into len%3 leading digits then groups of three,
// and the text before a run joins the run's first group.
static tl_status split_afmoe(const struct matcher *m, const pcre2_code *code,
                             const struct subject *s, int64_t a, int64_t b, struct ranges *out)
{
    struct ranges runs = {0};
    tl_status rc = split_piece(m, code, s, a, b, &runs);
    if (rc) {
        free(runs.v);
        return rc;
    }
    // `runs` holds the digit runs and the gaps between them, in order; a range is a run when
    // the digit regex matches all of it (a gap never starts with a digit).
    int64_t prev = a;
    for (size_t i = 0; i < runs.n; i++) {
        int64_t ra = runs.v[2 * i], rb = runs.v[2 * i + 1];
        const char *subj = s->bytes + s->off[ra];
        PCRE2_SIZE len = (PCRE2_SIZE)(s->off[rb] - s->off[ra]);
        int mr = pcre2_match(code, (PCRE2_SPTR)subj, len, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                             m->md, m->mctx);
        if (mr < 0 && mr != PCRE2_ERROR_NOMATCH) {
            free(runs.v);
            return match_error(mr);
        }
        bool digits = mr >= 0 && pcre2_get_ovector_pointer(m->md)[1] == len;
        if (!digits) continue;
        int64_t count = rb - ra, cur = ra, rem = count % 3;
        bool ok = true;
        if (rem) {
            ok &= ranges_push(out, prev, cur + rem);
            prev = cur += rem;
        }
        while (cur < rb) {
            ok &= ranges_push(out, prev, cur + 3);
            prev = cur += 3;
        }
        if (!ok) {
            free(runs.v);
            return tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
        }
    }
    free(runs.v);
    if (!ranges_push(out, prev, b)) return tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
    return TL_OK;
}

tl_status tl__pretok_split(const struct tl__pretok *p, const char *text, size_t len, char **buf,
                           int64_t **starts, int64_t *n_out)
{
    *buf = NULL;
    *starts = NULL;
    *n_out = 0;
    tl_status rc = TL_OK;
    struct subject subj[N_MODES] = {{0}};
    struct ranges cur = {0}, next = {0};
    struct matcher m = {0};
    char *wbuf = NULL;
    int64_t *wstarts = NULL;
    uint32_t *cps = tl_malloc_array(len + 1, sizeof(uint32_t));
    if (!cps) return tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory for %zu bytes", len);
    int64_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t adv;
        cps[n++] = decode_lenient((const unsigned char *)text + i, len - i, &adv);
        i += adv;
    }
    for (int md = 0; md < N_MODES; md++) {
        if (p->need_mode[md] && !subject_build(&subj[md], cps, n, (enum re_mode)md)) {
            rc = tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
            goto out_free_scratch;
        }
    }
    m.md = pcre2_match_data_create(4, NULL);
    m.mctx = pcre2_match_context_create(NULL);
    if (!m.md || !m.mctx) {
        rc = tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
        goto out_free_scratch;
    }
    // Deeply nested repeats can need a large backtracking stack on long inputs.
    m.jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
    if (m.jit_stack) pcre2_jit_stack_assign(m.mctx, NULL, m.jit_stack);
    pcre2_set_heap_limit(m.mctx, 1024 * 1024); // KiB: 1 GiB of backtracking frames at most
    pcre2_set_match_limit(m.mctx, UINT32_MAX);

    if (n > 0 && !ranges_push(&cur, 0, n)) {
        rc = tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
        goto out_free_scratch;
    }
    for (int r = 0; r < p->n; r++) {
        next.n = 0;
        enum re_mode mode = p->mode[r];
        const struct subject *s = &subj[mode == MODE_AFMOE_DIGITS ? MODE_COLLAPSED : mode];
        for (size_t i = 0; i < cur.n; i++) {
            int64_t a = cur.v[2 * i], b = cur.v[2 * i + 1];
            rc = mode == MODE_AFMOE_DIGITS ? split_afmoe(&m, p->code[r], s, a, b, &next)
                                           : split_piece(&m, p->code[r], s, a, b, &next);
            if (rc) goto out_free_scratch;
        }
        struct ranges t = cur;
        cur = next;
        next = t;
    }

    // Pre-token bytes (re-encoded code points), each byte mapped to its GPT-2 character (1-2
    // bytes): at most 4 * 2 bytes per code point.
    wbuf = tl_malloc_array((size_t)n + 1, 8);
    wstarts = tl_malloc_array(cur.n + 1, sizeof(int64_t));
    if (!wbuf || !wstarts) {
        rc = tl__errorf(TL_ERR_NOMEM, "pre-tokenizer: out of memory");
        goto out_free_scratch;
    }
    int64_t o = 0;
    for (size_t i = 0; i < cur.n; i++) {
        wstarts[i] = o;
        for (int64_t k = cur.v[2 * i]; k < cur.v[2 * i + 1]; k++) {
            char u[4];
            int ul = encode_any(cps[k], u);
            for (int j = 0; j < ul; j++) {
                uint32_t c = tl__bpe_byte_cp((uint8_t)u[j]);
                if (c < 0x80) {
                    wbuf[o++] = (char)c;
                } else {
                    wbuf[o++] = (char)(0xC0 | (c >> 6));
                    wbuf[o++] = (char)(0x80 | (c & 0x3F));
                }
            }
        }
    }
    wstarts[cur.n] = o;
    *buf = wbuf;
    *starts = wstarts;
    *n_out = (int64_t)cur.n;
    wbuf = NULL;
    wstarts = NULL;
out_free_scratch:
    free(wbuf);
    free(wstarts);
    if (m.jit_stack) pcre2_jit_stack_free(m.jit_stack);
    pcre2_match_context_free(m.mctx);
    pcre2_match_data_free(m.md);
    free(cur.v);
    free(next.v);
    for (int md = 0; md < N_MODES; md++) {
        free(subj[md].bytes);
        free(subj[md].off);
    }
    free(cps);
    return rc;
}
