#!/usr/bin/env python3
"""Writes the reference outputs of tests/test_bert.cpp with Hugging Face transformers (the
oracle): 100 sentences of mixed lengths (sentences.txt) and, in reference.safetensors, their
sentence embeddings [100, 384] (mean pooling over the attention mask, L2-normalized, as
sentence-transformers) and the last hidden states of the first 8 ([tokens, 384] each, float32).

    apt install python3-torch && pip install --break-system-packages transformers==4.40.2
    python3 tests/data/bert/make_reference.py MODEL_DIR tests/data/bert

MODEL_DIR is all-MiniLM-L6-v2's folder. Inputs are cut to 256 tokens (max_seq_length).
"""
import os
import random
import sys

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import AutoModel, AutoTokenizer


def sentences(corpus_path):
    rng = random.Random(5)
    lines = [l.rstrip("\n") for l in open(corpus_path, encoding="utf-8", newline="")]
    lines = [l for l in lines if l.strip() and "\x00" not in l and "\r" not in l]
    rng.shuffle(lines)
    picked = lines[:96]
    picked.append("A man is eating food.")
    picked.append("")
    picked.append(" ".join(lines[:40]))  # longer than 256 tokens: truncated
    picked.append("Héllo wörld! 你好, 🙂")
    return picked


def main(model_dir, out):
    here = os.path.dirname(os.path.abspath(__file__))
    texts = sentences(os.path.join(here, "..", "wordpiece", "corpus.txt"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    embeddings = []
    tensors = {}
    with torch.no_grad():
        for i, t in enumerate(texts):
            b = tok([t], padding=False, truncation=True, max_length=256, return_tensors="pt")
            states = model(**b).last_hidden_state[0]
            e = states.mean(0)
            embeddings.append(torch.nn.functional.normalize(e, p=2, dim=0).numpy())
            if i < 8:
                tensors[f"states_{i}"] = states.numpy().astype(np.float32)
    tensors["embeddings"] = np.stack(embeddings).astype(np.float32)
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "sentences.txt"), "w", encoding="utf-8", newline="") as f:
        for t in texts:
            f.write(t + "\n")
    print(len(texts), "sentences")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
