#!/usr/bin/env python3
"""Writes the small valid safetensors files in corpus/safetensors/ that seed fuzz_safetensors."""
import json
import pathlib
import struct

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += bytes((len(data) + i) % 251 for i in range(n))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


SEEDS = {
    "empty": safetensors([]),
    "one_u8": safetensors([("x", "U8", [3])]),
    "every_dtype": safetensors([(f"t_{dt}", dt, [2, 1]) for dt in SIZES], {"first_step": "0", "wall": "1.5"}),
    "zero_size": safetensors([("z", "F32", [0, 4]), ("s", "F16", []), ("layer0/head0/M", "BF16", [2, 2])]),
}

if __name__ == "__main__":
    out = pathlib.Path(__file__).parent / "corpus" / "safetensors"
    out.mkdir(parents=True, exist_ok=True)
    for name, blob in SEEDS.items():
        (out / f"{name}.safetensors").write_bytes(blob)
