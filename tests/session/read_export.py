"""Reads a memscope export with nothing but json and numpy.frombuffer (issue 6, Python interop)
and prints what it found as one JSON object, for the C++ test to compare with what it wrote."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": None, "I32": "<i4", "I64": "<i8", "U8": "u1", "F64": "<f8"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n :]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = body[begin:end]
        if info["dtype"] == "BF16":  # numpy has no bfloat16: widen the 16 bits into a float32
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"])
    return tensors, metadata


def main():
    tensors, metadata = load(sys.argv[1])
    session = json.loads(metadata["session"])
    events = json.loads(metadata["events"])
    out = {
        "steps": tensors["step"].tolist(),
        "loss": [None if np.isnan(v) else float(v) for v in tensors["loss"]],
        "erank": [None if np.isnan(v) else float(v) for v in tensors["layer1/head0/erank"]],
        "norm_M_shape": list(tensors["layer0/head1/norm_M"].shape),
        "matrix_row": tensors["layer0/head1/M.row"].tolist(),
        "M_shape": list(tensors["layer0/head1/M"].shape),
        "M_first": tensors["layer0/head1/M"][0].astype(np.float64).ravel().tolist(),
        "preset": session["preset"]["name"],
        "events": len(events),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
