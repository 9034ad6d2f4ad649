#!/usr/bin/env python3
"""WordPiece (tokenizer.ggml.model "bert") against an oracle written here from the algorithm's
published description (BERT's BasicTokenizer + WordpieceTokenizer, as llama.cpp runs them on the
vocabularies its converter writes: word starts carry U+2581, continuations are bare, each code
point is replaced by the first code point of its NFD form), using Python's own unicodedata --
not tokenloom's generated tables. Also a few expectations written out by hand (BERT's classic
"unaffable" -> un ##aff ##able), the [CLS]/[SEP] framing, and bad vocabularies.

A random-vocabulary GGUF (no tensors) is written to a temporary folder; `tokenloom tokenize
--file` must print, for every test string, exactly the oracle's ids. Prints TAP.
"""
import os
import random
import struct
import subprocess
import sys
import tempfile
import unicodedata

BIN = os.environ.get("TL_BIN", "build/tokenloom")
MARK = "\u2581"
# PropList.txt White_Space=yes.
WHITE_SPACE = set([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                   0x2029, 0x202F, 0x205F, 0x3000])

# ---- a GGUF holding only a vocabulary ----------------------------------------------------------


def gguf_str(s):
    b = s.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(b)) + b


def write_vocab(path, tokens, types, extra=()):
    kv = [("general.architecture", 8, gguf_str("bert")),
          ("tokenizer.ggml.model", 8, gguf_str("bert")),
          ("tokenizer.ggml.tokens", 9,
           struct.pack("<IQ", 8, len(tokens)) + b"".join(gguf_str(t) for t in tokens)),
          ("tokenizer.ggml.token_type", 9,
           struct.pack("<IQ", 5, len(types)) + b"".join(struct.pack("<i", t) for t in types))]
    kv += list(extra)
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))
        for k, t, v in kv:
            f.write(gguf_str(k) + struct.pack("<I", t) + v)


def bert_vocab(rng):
    """[PAD], [unused1..99], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then pieces."""
    toks = ["[PAD]"] + ["[unused%d]" % i for i in range(1, 100)] + ["[UNK]", "[CLS]", "[SEP]",
                                                                    "[MASK]"]
    types = [3] * len(toks)
    types[100] = 2
    words = ["the", "a", "hello", "world", "un", "cafe", "over", "lazy", "dog", "quick", "brown",
             "fox", "jumps", "token", "loom", "naive", "resume", "i", "s", "test", "ing", "is"]
    cont = ["aff", "able", "s", "ing", "ed", "er", "ly", "e", "o", "a", "t", "n", "k", "loom",
            "ize", "\u0301", "\u0308"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789") + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    chars += ["\u00a7", "\u00bf", "\u2014", "\u3002", "\u4e2d", "\u6587", "\u5b57", "\u00e9",
              "\u00df", "\u0438", "\u043f", "\u03b1", "\u03c9", "\u1100", "\u1161", "\u1102",
              "\u00b0", "\u20ac"]
    # Random pieces over a small alphabet, so greedy longest-match has real choices to make.
    alpha = "abcdeilnorst"
    rand = {"".join(rng.choice(alpha) for _ in range(rng.randint(2, 6))) for _ in range(400)}
    pieces = []
    for w in words + sorted(rand) + chars:
        pieces.append(MARK + w)
    for w in cont + sorted(rand)[::3] + chars:
        pieces.append(w)
    seen = set(toks)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            toks.append(p)
            types.append(1)
    return toks, types


# ---- the oracle ----------------------------------------------------------------------------------


def is_cjk(cp):
    return any(a <= cp <= b for a, b in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def words_of(text):
    words, cur = [], ""
    for ch in text:
        cp = ord(unicodedata.normalize("NFD", ch)[0])
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cp in WHITE_SPACE:
            if cur:
                words.append(cur)
            cur = ""
            continue
        if cp in (0, 0xFFFD) or cat in ("Cc", "Cf", "Co", "Cs"):
            continue
        low = ch.lower()[0]
        if cat[0] == "P" or (cp < 0x7F and cat[0] == "S") or is_cjk(cp):
            if cur:
                words.append(cur)
            words.append(low)
            cur = ""
        else:
            cur += low
    if cur:
        words.append(cur)
    return words


def oracle(text, index, unk=100):
    out = []
    for w in words_of(text):
        w = (MARK + w).encode("utf-8")
        got, i = [], 0
        while i < len(w):
            for j in range(len(w), i, -1):
                tid = index.get(w[i:j])
                if tid is not None:
                    got.append(tid)
                    i = j
                    break
            else:
                got = None
                break
        out += got if got else [unk]
    return out


# ---- test strings --------------------------------------------------------------------------------

FIXED = [
    "Hello, World!", "unaffable", "The quick brown fox jumps over the lazy dog.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9", "Cafe\u0301 (decomposed)", "  leading and  double  spaces ",
    "tabs\tand\nnewlines\r\n", "\u4e2d\u6587\u5b57 mixed\u4e2dtext", "ALL CAPS \u00c9T\u00c9",
    "\u00df \u0130stanbul \u03a9mega", "nul\x00byte", "ctrl\x01\x1f\x7f\u200bchars",
    "\ufffd replacement", "emoji \U0001F600 \U0001F468\u200d\U0001F469", "\ud55c\uad6d\uc5b4",
    "a\u00a0b\u3000c\u2003d", "$5 + 3% = #tag @user ^_^ `code` |pipe| ~tilde",
    "\u00a7 \u00bf \u2014 \u3002 \u00b0 \u20ac \u00bd", "x" * 300, "", "   ",
    "tokenloom tokenizes tokens", "s" * 5 + "ing" * 3,
]


def random_strings(rng, n):
    pool = (list("abcdeilnorst") * 6 + list("ABCDEILNORST") * 2 + [" "] * 12 +
            list(".,!?;:'\"()[]{}-_/\\@#$%^&*+=<>|~`") +
            ["\u00e9", "\u00c9", "\u00ef", "e\u0301", "\u00df", "\u4e2d", "\u6587", "\u3002",
             "\u00a0", "\u2003", "\t", "\n", "\x00", "\x07", "\u200b", "\ufeff", "\u00a7", "\u00b0",
             "\u20ac", "\U0001F600", "\ud55c", "\u0438", "\u0418", "\u03a9", "\u1e9e", "\u2160",
             "\u00bd", "\u0301", "\ue000", "\u0378"])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def main():
    rng = random.Random(20261202)
    toks, types = bert_vocab(rng)
    index = {t.encode("utf-8"): i for i, t in enumerate(toks) if types[i] == 1}
    tests = FIXED + random_strings(rng, 300)
    checks = []
    tmp = tempfile.mkdtemp()
    try:
        vocab = os.path.join(tmp, "bert-vocab.gguf")
        write_vocab(vocab, toks, types)
        inp = os.path.join(tmp, "t.inp")
        with open(inp, "wb") as f:
            f.write("\n__ggml_vocab_test__\n".join(tests).encode("utf-8") +
                    b"\n__ggml_vocab_test__\n")
        r = subprocess.run([BIN, "tokenize", "-m", vocab, "--file", inp], capture_output=True)
        got = r.stdout.decode().split("\n")
        bad = []
        for k, t in enumerate(tests):
            want = " " + " ".join(str(i) for i in oracle(t, index)) if oracle(t, index) else ""
            have = got[k] if k < len(got) else "<missing>"
            if have.rstrip() != want.rstrip():
                bad.append("%r: want [%s] got [%s]" % (t[:40], want, have))
        checks.append((r.returncode == 0 and not bad,
                       "%d strings match the oracle (%d fixed, %d random)" %
                       (len(tests), len(FIXED), len(tests) - len(FIXED)),
                       bad[:8] + [r.stderr.decode()[:300]]))

        # By hand: BERT's classic example, accents dropped, punctuation split, framing.
        def ids(*pieces):
            return " ".join(str(toks.index(p)) for p in pieces)

        def run(text, *args):
            p = subprocess.run([BIN, "tokenize", "-m", vocab, *args], input=text.encode(),
                               capture_output=True)
            return p.stdout.decode().strip(), p.returncode, p.stderr.decode()

        for text, want, args in [
                ("unaffable", ids(MARK + "un", "aff", "able"), ["--no-bos"]),
                ("Hello, World!", ids(MARK + "hello", MARK + ",", MARK + "world", MARK + "!"),
                 ["--no-bos"]),
                ("Caf\u00e9", ids(MARK + "cafe"), ["--no-bos"]),
                ("Hello", "101 " + ids(MARK + "hello") + " 102", []),
                ("[CLS] hello [SEP]", "101 101 " + ids(MARK + "hello") + " 102 102",
                 ["--parse-special"]),
                ("\u0416\u0416 hello", "100 " + ids(MARK + "hello"), ["--no-bos"])]:
            out, rc, err = run(text, *args)
            checks.append((out == want and rc == 0, "by hand: %r -> [%s]" % (text, want),
                           ["got [%s] rc=%d %s" % (out, rc, err.strip())]))

        # A vocabulary without [UNK] (fewer than 101 tokens): an uncuttable word is an error.
        small = os.path.join(tmp, "small.gguf")
        write_vocab(small, ["[PAD]", MARK + "hi"], [3, 1])
        p = subprocess.run([BIN, "tokenize", "-m", small, "--no-bos"], input=b"hi there",
                           capture_output=True)
        checks.append((p.returncode == 1 and b"[UNK]" in p.stderr and p.stdout == b"",
                       "no [UNK]: one clear error, exit 1", [p.stderr.decode().strip()]))
        p = subprocess.run([BIN, "tokenize", "-m", small, "--no-bos"], input=b"hi hi",
                           capture_output=True)
        checks.append((p.returncode == 0 and p.stdout.decode().split() == ["1", "1"],
                       "no [UNK]: cuttable words still tokenize", [p.stdout.decode()]))
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    print("1..%d" % len(checks))
    for k, (ok, name, diag) in enumerate(checks, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", k, name))
        if not ok:
            for d in diag:
                print("# " + d.replace("\n", "\n# "))
    return 0 if all(c[0] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
