#!/usr/bin/python3
"""The GPU's matrix-multiply rate, measured: the ceiling every GPU share in the README is taken of.

One JSON line per dtype: an n x n x n product (n = 8192), the mean of 10 timed products after 3
warm-ups, timed with CUDA events. fp32 is run twice, with TF32 off (true fp32) and on.
"""
import json
import torch


def rate(dtype, n=8192, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / 10
    return 2 * n**3 / seconds / 1e12


def main():
    device = torch.cuda.get_device_name()
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("bf16", torch.bfloat16, False)):
        print(json.dumps({"bench": "gpu_peak", "device": device, "torch": torch.__version__,
                          "dtype": name, "tflops": round(rate(dtype, tf32=tf32), 1)}), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()
