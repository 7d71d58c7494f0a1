#!/usr/bin/env python3
"""cuBLAS f32 (TF32 off) at the shapes and layouts `tinygpt bench --matmul`
times, for the side-by-side table of docs/performance.md (issue 34).

    python3 bench/cublas_matmul.py 16384x384x1536,16384x1536x384,1024x256x768 [--json] [--f16]

--f16: f16 operands and output (cuBLAS accumulates in f32), for the tensor
cores' row (issue 51), kernel `cublas-f16`.

Layouts as in shaders/matmul.wgsl: A·Bᵀ with A (M, K), B (N, K); A·B with
A (M, K), B (K, N); Aᵀ·B with A (K, M), B (K, N). TFLOP/s = 2·M·K·N / time,
the best of 5 timings of 20 calls each (CUDA events), after a warm-up.
Run it in the same lease as ours: GPU clocks differ between machines and days.
"""
import json
import sys

import torch


def timed(fn, reps=20, tries=5):
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(tries):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args or "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        sys.exit(0 if args else 2)
    as_json = "--json" in sys.argv
    half = "--f16" in sys.argv
    dtype = torch.float16 if half else torch.float32
    name = "cublas-f16" if half else "cublas"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    if not as_json:
        kind = "f16 (f32 accumulation)" if half else "f32, TF32 off"
        print(f"cuBLAS {kind}, on {torch.cuda.get_device_name()} (torch {torch.__version__})")
    for shape in args[0].split(","):
        m, k, n = (int(d) for d in shape.split("x"))
        g = torch.Generator(device=dev).manual_seed(3)
        # the operands as stored, and the views torch.mm multiplies
        a_mk = torch.randn(m, k, device=dev, generator=g).to(dtype)
        a_km = torch.randn(k, m, device=dev, generator=g).to(dtype)
        b_nk = torch.randn(n, k, device=dev, generator=g).to(dtype)
        b_kn = torch.randn(k, n, device=dev, generator=g).to(dtype)
        layouts = {"A·Bᵀ": (a_mk, b_nk.t()), "A·B": (a_mk, b_kn), "Aᵀ·B": (a_km.t(), b_kn)}
        out = torch.empty(m, n, device=dev, dtype=dtype)
        for layout, (a, b) in layouts.items():
            secs = timed(lambda: torch.mm(a, b, out=out))
            tflops = 2 * m * k * n / secs / 1e12
            if as_json:
                print(json.dumps({"kernel": name, "layout": layout, "m": m, "k": k, "n": n, "tflops": tflops}))
            else:
                print(f"{m}x{k}x{n} {layout:<5} {name:<10} {tflops:6.2f}")


if __name__ == "__main__":
    main()
