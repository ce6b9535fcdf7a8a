#!/usr/bin/env python3
"""Writes the tokenizer test corpus (corpus.txt) and the ids Hugging Face `tokenizers` gives
each line (expected_ids.txt: [CLS] ... [SEP], no truncation), for tests/test_wordpiece.cpp.

    python3 -m venv venv && venv/bin/pip install tokenizers
    venv/bin/python tests/data/wordpiece/make_corpus.py MODEL_DIR tests/data/wordpiece

MODEL_DIR is all-MiniLM-L6-v2's folder (tokenizer.json, vocab.txt). The corpus mixes English
prose (Debian package descriptions), accents, CJK, Korean, emoji, punctuation runs, long
words, control and format characters, other scripts and empty lines; the generator is seeded,
so it writes the same corpus again (given the same package descriptions).
"""
import os
import random
import sys

from tokenizers import Tokenizer

ACCENTED = ["café", "naïve", "Ångström", "façade", "jalapeño", "Zürich", "Besançon", "crème brûlée",
            "São Paulo", "Dvořák", "Łódź", "Øresund", "İstanbul", "Straße", "STRASSE", "ẞ", "Ærø",
            "e\u0301t\u0301e\u0301", "Tiếng Việt", "Hà Nội", "Ελληνικά", "ΆΈΉ", "Ⅻ", "ﬁnance"]
CJK = ["你好世界", "中文分词测试", "東京タワー", "ひらがなカタカナ", "한국어 문장입니다", "漢字かな交じり文",
       "𠀀𠀁", "豈更車", "ｆｕｌｌｗｉｄｔｈ", "１２３", "「引用」", "、。"]
EMOJI = ["😀", "🥰", "🫠", "🧑\u200d💻", "👍🏽", "🇫🇷", "❤️", "✨", "🙂🙃", "1️⃣", "🏳️\u200d🌈", "☕"]
PUNCT = ["!!!", "???", "...", "—", "–", "«quoted»", "\"double\"", "'single'", "(paren)", "[bracket]",
         "{brace}", "@#$%^&*", "~`|\\", "<tag/>", "a.b.c", "e-mail", "C++", "x=y+z", "50%", "$100",
         "¿Qué?", "¡Hola!", "‽", "§ 3", "†‡", "…", "··"]
OTHER = ["Привет мир", "עברית", "العربية", "हिन्दी", "ภาษาไทย", "ქართული", "Հայերեն", "∑∫∂√∞",
         "→←↑↓", "©®™", "½¼¾", "x²y³", "H₂O", "ℕℤℚℝ", "ⓐⓑⓒ"]
SPECIAL = ["\t", "\u00a0", "\u3000", "\u2028", "\u200b", "\u200d", "\ufeff", "\x01", "\x7f", "\u0085",
           "\u202e", "\ue000", "\ufffd", "\u2003", "\u180e", "\u0301", "\u0000"]
WORDS = ["the", "a", "model", "tensor", "library", "fast", "compute", "matrix", "run", "GPU", "CPU",
         "token", "embedding", "sentence", "search", "data", "file", "2026", "v1.2.3", "x86-64"]


def long_word(rng):
    n = rng.choice([99, 100, 101, 120, 150])
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


def synthetic(rng):
    pools = [ACCENTED, CJK, EMOJI, PUNCT, OTHER, SPECIAL, WORDS, WORDS, WORDS]
    parts = []
    for _ in range(rng.randint(1, 14)):
        r = rng.random()
        if r < 0.03:
            parts.append(long_word(rng))
        else:
            parts.append(rng.choice(rng.choice(pools)))
    sep = rng.choice([" ", " ", " ", "", "  "])
    return sep.join(parts)


def debian_descriptions(limit):
    lines = []
    try:
        with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Description: "):
                    lines.append(line[len("Description: "):].rstrip("\n"))
                elif line.startswith(" ") and line.strip() not in (".", "") and len(lines) < limit * 3:
                    lines.append(line.strip())
    except OSError:
        pass
    rng = random.Random(7)
    rng.shuffle(lines)
    return lines[:limit]


def main(model_dir, out):
    rng = random.Random(20261128)
    corpus = debian_descriptions(900)
    corpus += [synthetic(rng) for _ in range(1150)]
    corpus += [""] * 10 + [" ", "\t", "   "]
    rng.shuffle(corpus)
    corpus = [c.replace("\n", " ").replace("\r", " ") for c in corpus]
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        for c in corpus:
            f.write(c + "\n")
    with open(os.path.join(out, "expected_ids.txt"), "w", encoding="utf-8", newline="") as f:
        for c in corpus:
            f.write(" ".join(map(str, tok.encode(c).ids)) + "\n")
    print(f"{len(corpus)} lines")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
