#!/usr/bin/env python3
"""The anchors of bench_bert: all-MiniLM-L6-v2 in PyTorch (transformers) and ONNX Runtime
(fp32, and int8 from quantize_dynamic), on the shapes bench_bert times: throughput at batch
32 x 128 tokens and latency at batch 1 x 16, 2 threads, best of several runs.

    python3 bert_anchors.py torch MODEL_DIR                # Debian python3-torch + transformers
    python3 bert_anchors.py export MODEL_DIR OUT_DIR       # the ONNX files (torch.onnx)
    VENV/bin/python bert_anchors.py ort OUT_DIR            # onnxruntime in a venv

Prints one line per measurement: name, sentences/s at 32 x 128, milliseconds at 1 x 16.
"""
import inspect
import os
import sys
import time

import numpy as np

THREADS = 2


def inputs(n, l):
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 20000, size=(n, l), dtype=np.int64)
    return ids, np.ones((n, l), dtype=np.int64), np.zeros((n, l), dtype=np.int64)


def best_time(f, repeats):
    f()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def report(name, run):
    ids, mask, types = inputs(32, 128)
    t_big = best_time(lambda: run(ids, mask, types), 5)
    ids, mask, types = inputs(1, 16)
    t_one = best_time(lambda: run(ids, mask, types), 50)
    print(f"{name:<24} {32 / t_big:8.1f} sentences/s   {t_one * 1e3:7.2f} ms")


def torch_anchor(model_dir):
    import torch
    from transformers import AutoModel

    torch.set_num_threads(THREADS)
    m = AutoModel.from_pretrained(model_dir).eval()

    def run(ids, mask, types):
        with torch.no_grad():
            return m(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     token_type_ids=torch.from_numpy(types)).last_hidden_state

    report(f"pytorch {torch.__version__} fp32", run)


def export(model_dir, out):
    import torch
    from transformers import AutoModel

    m = AutoModel.from_pretrained(model_dir).eval()
    ids, mask, types = (torch.from_numpy(a) for a in inputs(2, 8))
    os.makedirs(out, exist_ok=True)
    # Newer torch exports through dynamo by default, which reads dynamic_axes differently.
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(m, (ids, mask, types), os.path.join(out, "minilm.onnx"), **legacy,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state"], opset_version=14,
                      dynamic_axes={k: {0: "n", 1: "l"} for k in
                                    ["input_ids", "attention_mask", "token_type_ids",
                                     "last_hidden_state"]})


def ort_anchor(out):
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = os.path.join(out, "minilm.onnx")
    int8 = os.path.join(out, "minilm_int8.onnx")
    if not os.path.exists(int8):
        quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8)
    for name, path in (("fp32", fp32), ("int8", int8)):
        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

        def run(ids, mask, types, s=s):
            return s.run(None, {"input_ids": ids, "attention_mask": mask,
                                "token_type_ids": types})

        report(f"onnxruntime {ort.__version__} {name}", run)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "torch":
        torch_anchor(sys.argv[2])
    elif what == "export":
        export(sys.argv[2], sys.argv[3])
    elif what == "ort":
        ort_anchor(sys.argv[2])
    else:
        sys.exit(f"bert_anchors.py: unknown '{what}' (torch, export, ort)")
