#!/usr/bin/env python3
"""Writes the safetensors fixtures of tests/test_safetensors.cpp with the reference
implementation (PyPI `safetensors`, 0.4 or newer, and NumPy), so that the tests check tessera's
reader on files the reference wrote and its writer byte for byte against them.

    python3 -m venv venv && venv/bin/pip install safetensors numpy
    venv/bin/python tests/data/safetensors/make_fixtures.py tests/data/safetensors

The values must match the ones test_safetensors.cpp builds (reference_tensors()).
"""
import os
import sys

import numpy as np
import safetensors


def spec(dtype, shape, arr):
    # dtype: the constructor-style name ("float32"); the header gets the format code ("F32").
    arr = np.ascontiguousarray(arr)
    return safetensors.TensorSpec(dtype=dtype, shape=list(shape), data_ptr=arr.ctypes.data,
                                  data_len=arr.nbytes), arr


def main(out):
    keep = []
    tensors = {}

    def add(name, dtype, shape, arr):
        s, a = spec(dtype, shape, arr)
        keep.append(a)
        tensors[name] = s

    add("f64", "float64", [2, 3], np.arange(6, dtype="<f8") / 3)
    add("f32", "float32", [3, 4], np.arange(12, dtype="<f4") * 0.5 - 1)
    add("f16", "float16", [4], np.array([1, -2, 0.5, 65504], dtype="<f2"))
    add("bf16", "bfloat16", [2, 2], np.array([0x3F80, 0xC000, 0x7F80, 0x0000], dtype="<u2"))
    add("f8e4m3", "float8_e4m3fn", [4], np.array([0x38, 0x40, 0xB8, 0x7E], dtype="u1"))
    add("f8e5m2", "float8_e5m2", [4], np.array([0x3C, 0xC0, 0x7C, 0x00], dtype="u1"))
    add("i64", "int64", [3], np.array([-(2**62), 0, 2**62 - 1], dtype="<i8"))
    add("i32", "int32", [2, 3], np.arange(-3, 3, dtype="<i4"))
    add("i8", "int8", [3], np.array([-128, 0, 127], dtype="i1"))
    add("u8", "uint8", [3], np.array([0, 255, 7], dtype="u1"))
    add("flags", "bool", [3], np.array([1, 0, 1], dtype="u1"))
    add("scalar", "float32", [], np.array([3.25], dtype="<f4"))
    add("empty", "float32", [0, 3], np.zeros(0, dtype="<f4"))
    meta = {"format": "pt"}  # one entry: the reference orders several at random
    with open(os.path.join(out, "all_dtypes.safetensors"), "wb") as f:
        f.write(safetensors.serialize(tensors, meta))

    keep.clear()
    tensors = {}
    add("w", "float32", [2], np.array([1.5, -2.5], dtype="<f4"))
    add("short", "int16", [2], np.array([-1, 2], dtype="<i2"))
    with open(os.path.join(out, "unsupported_dtype.safetensors"), "wb") as f:
        f.write(safetensors.serialize(tensors, None))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
