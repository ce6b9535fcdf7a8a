#!/usr/bin/env python3
"""A folder shaped like all-MiniLM-L6-v2 with random weights, for timing where the model cannot
travel (a GPU machine's call carries 64 MiB; the model is 87 MB). Speed does not depend on the
weights' values; accuracy does, so nothing but timing may use this folder.

    python3 random_minilm.py OUT_DIR VOCAB_DIR

Writes OUT_DIR/config.json (the model's), model.safetensors (BERT's initialisation: normal with
standard deviation 0.02, layer norms at one and zero, as transformers' BertModel draws them),
sentence_bert_config.json, and copies vocab.txt and tokenizer.json from VOCAB_DIR (the repository
keeps the model's own in tests/data/wordpiece). Needs numpy and safetensors only; bench_bert and
bert_anchors.py (torch, export) load the folder as they load the real one.
"""
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import save_file

CONFIG = {
    "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02,
    "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
    "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0,
    "position_embedding_type": "absolute", "type_vocab_size": 2, "vocab_size": 30522,
}


def weights(rng):
    h, f = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    out = {}

    def normal(name, *shape):
        out[name] = (rng.standard_normal(shape) * CONFIG["initializer_range"]).astype(np.float32)

    def norm(name):
        out[name + ".weight"] = np.ones(h, np.float32)
        out[name + ".bias"] = np.zeros(h, np.float32)

    def linear(name, n_out, n_in):
        normal(name + ".weight", n_out, n_in)
        out[name + ".bias"] = np.zeros(n_out, np.float32)

    normal("embeddings.word_embeddings.weight", CONFIG["vocab_size"], h)
    normal("embeddings.position_embeddings.weight", CONFIG["max_position_embeddings"], h)
    normal("embeddings.token_type_embeddings.weight", CONFIG["type_vocab_size"], h)
    norm("embeddings.LayerNorm")
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for part in ("query", "key", "value"):
            linear(p + "attention.self." + part, h, h)
        linear(p + "attention.output.dense", h, h)
        norm(p + "attention.output.LayerNorm")
        linear(p + "intermediate.dense", f, h)
        linear(p + "output.dense", h, f)
        norm(p + "output.LayerNorm")
    linear("pooler.dense", h, h)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: random_minilm.py OUT_DIR VOCAB_DIR")
    out, vocab = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 256, "do_lower_case": False}, f)
    for name in ("vocab.txt", "tokenizer.json"):
        shutil.copy(os.path.join(vocab, name), os.path.join(out, name))
    save_file(weights(np.random.default_rng(1)), os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})


if __name__ == "__main__":
    main()
