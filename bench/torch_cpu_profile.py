#!/usr/bin/env python3
"""PyTorch's CPU training step, op by op (issue 55): where its time goes at a
preset's shapes, to set beside `tinygpt bench --ops --backend cpu`.

    python3 bench/torch_cpu_profile.py --presets large,xl --threads 16

For each preset: the model and AdamW recipe of tests/reference/tinygpt_torch.py
(same shapes, f32), 5 warm-up steps, then torch.profiler over 10 steps; prints
the ops by self CPU time per step. Then torch.mm alone at the preset's linear
shapes (both the forward's A·Bᵀ and the weight gradient's Aᵀ·B), GFLOP/s.
"""
import argparse, importlib.util, sys, time
from pathlib import Path

import torch

spec = importlib.util.spec_from_file_location(
    "tinygpt_torch", Path(__file__).resolve().parents[1] / "tests" / "reference" / "tinygpt_torch.py")
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)


def step_fn(c, train, rng):
    torch.manual_seed(42)
    model = tt.TinyGPT(c)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=c["weight_decay"]),
                             dict(params=no_decay, weight_decay=0.0)],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])

    def step():
        x, y = tt.sample_batch(train, c["batch"], c["ctx"], rng)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
    return step


def gemm_rate(m, k, n, layout):
    a = torch.randn(m, k) if layout != "tn" else torch.randn(k, m)
    b = torch.randn(n, k) if layout == "nt" else torch.randn(k, n)
    f = {"nt": lambda: a @ b.t(), "nn": lambda: a @ b, "tn": lambda: a.t() @ b}[layout]
    for _ in range(5):
        f()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        f(); reps += 1
    dt = (time.perf_counter() - t0) / reps
    return 2 * m * k * n / dt / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="large,xl")
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, _ = tt.corpus()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    for name in args.presets.split(","):
        c = tt.load_preset(name)
        step = step_fn(c, train, tt.Rng.for_stream(42, "train-batches"))
        for _ in range(5):
            step()
        steps = 10
        t0 = time.perf_counter()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        wall = (time.perf_counter() - t0) / steps * 1e3
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        plain = (time.perf_counter() - t0) / steps * 1e3
        print(f"== {name}: {plain:.2f} ms a step unprofiled ({wall:.2f} profiled)")
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        for e in rows[:25]:
            print(f"  {e.key:40s} {e.self_cpu_time_total / 1e3 / steps:8.3f} ms  x{e.count // steps}")
        rows_bt, d = c["batch"] * c["ctx"], c["d_model"]
        for (m, k, n) in [(rows_bt, d, 3 * d), (rows_bt, d, d), (rows_bt, d, 4 * d), (rows_bt, 4 * d, d)]:
            fw = gemm_rate(m, k, n, "nt")
            dx = gemm_rate(m, n, k, "nn")
            dw = gemm_rate(n, m, k, "tn")
            print(f"  torch.mm {m}x{k}x{n}: forward {fw:7.1f}  dX {dx:7.1f}  dW {dw:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
