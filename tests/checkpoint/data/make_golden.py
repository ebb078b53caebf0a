"""Regenerates golden.safetensors, written by the reference `safetensors` package.

    python3 -m venv /tmp/st && /tmp/st/bin/pip install safetensors numpy
    /tmp/st/bin/python tests/checkpoint/data/make_golden.py

test_safetensors.cpp (GoldenFile*) reads this file, checks every value below
exactly, and checks that Lattice's writer reproduces it byte for byte. Keep
the values here and in the test in step.
"""
import os

import numpy as np
from safetensors import TensorSpec, serialize_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.safetensors")


KEEP_ALIVE = []  # TensorSpec holds raw pointers into these arrays


def raw(dtype, shape, array):
    array = np.ascontiguousarray(array)
    KEEP_ALIVE.append(array)
    return TensorSpec(dtype=dtype, shape=list(shape), data_ptr=array.ctypes.data, data_len=array.nbytes)


tensors = {
    "f64": raw("float64", (2,), np.array([1.5, -2.25], dtype="<f8")),
    "f32": raw("float32", (2, 3), np.array([[0.5, -1.0, 2.0], [3.25, -4.5, 1e-3]], dtype="<f4")),
    # numpy has no bfloat16: raw bit patterns of 1.0, -2.0, 0.15625
    "bf16": raw("bfloat16", (3,), np.array([0x3F80, 0xC000, 0x3E20], dtype="<u2")),
    "f16": raw("float16", (2, 2), np.array([[1.0, -0.5], [65504.0, 0.000061035156]], dtype="<f2")),
    "i32": raw("int32", (4,), np.array([0, -1, 2147483647, -2147483648], dtype="<i4")),
    "u16": raw("uint16", (3,), np.array([0, 50256, 65535], dtype="<u2")),
    "scalar": raw("float32", (), np.array(7.0, dtype="<f4")),
    "empty": raw("float32", (0, 3), np.zeros((0, 3), dtype="<f4")),
}
serialize_file(tensors, OUT, metadata={"format": "pt"})
print(OUT, os.path.getsize(OUT), "bytes")
