#!/usr/bin/env python3
"""TinyGPT in PyTorch, written here from the model card (not copied from
anywhere), for two jobs:

1. A speed reference: `bench` trains a preset's exact shapes (same model,
   same optimizer recipe, same batches: the same portable SplitMix64 stream as
   `tinygpt`) and prints the same JSON lines as `tinygpt bench --json`, so both
   can run side by side on one machine.

       python3 tests/reference/tinygpt_torch.py bench --presets small,xl --device cuda
       python3 tests/reference/tinygpt_torch.py bench --presets small --device cuda --compile
       python3 tests/reference/tinygpt_torch.py bench --presets small --device cpu --threads 16

2. An independent numerical oracle: `check` loads a checkpoint written by
   `tinygpt train`, rebuilds the fixed batch of `tinygpt eval` (validation
   windows at offsets 0, ctx, 2·ctx, ...), runs this model in float64 and
   compares logits and loss with the ones `tinygpt eval --dump-logits` wrote.

       tinygpt eval --checkpoint run.safetensors --dump-logits logits.bin
       python3 tests/reference/tinygpt_torch.py check --checkpoint run.safetensors --logits logits.bin

Needs PyTorch (and nothing else; safetensors files are parsed by hand). CI does
not run it; the H100 host has PyTorch.
"""

import argparse
import json
import math
import os
import platform
import re
import struct
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 256
MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- presets (RON)

def parse_ron_config(text):
    """The subset of RON the presets use: `(key: value, ...)` with numbers,
    `Constant` and `WarmupCosine(warmup_steps: a, decay_steps: b, min_lr: c)`."""
    text = re.sub(r"//[^\n]*", "", text)
    cfg = {}
    m = re.search(r"schedule\s*:\s*WarmupCosine\s*\(([^)]*)\)", text)
    if m:
        inner = dict((k, float(v)) for k, v in re.findall(r"(\w+)\s*:\s*([-+0-9.eE]+)", m.group(1)))
        cfg["schedule"] = ("WarmupCosine", int(inner["warmup_steps"]), int(inner["decay_steps"]), inner["min_lr"])
        text = text[: m.start()] + text[m.end():]
    else:
        cfg["schedule"] = ("Constant",)
    for key, value in re.findall(r"(\w+)\s*:\s*([-+0-9.eE]+)", text):
        cfg[key] = float(value) if any(c in value for c in ".eE") else int(value)
    defaults = dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, dropout=0.0)
    for k, v in defaults.items():
        cfg.setdefault(k, v)
    return cfg


def load_preset(name):
    return parse_ron_config((ROOT / "presets" / f"{name}.ron").read_text())


def param_count(c):
    d = c["d_model"]
    return VOCAB * d + c["ctx"] * d + 2 * d + c["n_layer"] * (12 * d * d + 13 * d)


# ------------------------------------------------- the portable RNG (src/data/rng.rs)

class Rng:
    """SplitMix64, as tinygpt's `Rng`."""

    def __init__(self, seed):
        self.state = seed & MASK64

    @classmethod
    def for_stream(cls, seed, stream):
        h = 0xCBF29CE484222325
        for b in stream.encode():
            h ^= b
            h = (h * 0x00000100000001B3) & MASK64
        r = cls(seed ^ h)
        r.next_u64()
        return r

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        threshold = ((-n) & MASK64) % n
        while True:
            m = self.next_u64() * n
            if (m & MASK64) >= threshold:
                return m >> 64


def sample_batch(data, batch, ctx, rng):
    """`Batch::sample`: `batch` random windows of ctx + 1 bytes."""
    windows = len(data) - ctx
    xs, ys = [], []
    for _ in range(batch):
        s = rng.below(windows)
        w = data[s: s + ctx + 1]
        xs.append(list(w[:ctx]))
        ys.append(list(w[1:]))
    return torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)


def corpus(path=None):
    data = (Path(path) if path else ROOT / "assets" / "tinyshakespeare.txt").read_bytes()
    split = len(data) * 9 // 10
    return data[:split], data[split:]


# --------------------------------------------------------------------- the model

class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        d = c["d_model"]
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.dropout = c["dropout"]

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, d)
        return F.dropout(self.c_proj(y), self.dropout, self.training)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = c["dropout"]

    def forward(self, x):
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x))), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["d_model"], eps=1e-5)
        self.attn = SelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["d_model"], eps=1e-5)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """Pre-LN GPT with a fused q|k|v projection and the head tied to wte:
    the parameter names are the checkpoint's."""

    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.dropout = c["dropout"]
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(VOCAB, d),
                wpe=nn.Embedding(c["ctx"], d),
                h=nn.ModuleList(Block(c) for _ in range(c["n_layer"])),
                ln_f=nn.LayerNorm(d, eps=1e-5),
            )
        )
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(t, device=idx.device))
        x = F.dropout(x, self.dropout, self.training)
        for block in tr.h:
            x = block(x)
        logits = tr.ln_f(x) @ tr.wte.weight.t()
        loss = None if targets is None else F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return logits, loss


# ----------------------------------------------------------------------- bench

def lr_at(c, it):
    s = c["schedule"]
    if s[0] == "Constant":
        return c["lr"]
    _, warmup, decay, min_lr = s
    if it < warmup:
        return c["lr"] * (it + 1) / (warmup + 1)
    if it > decay or decay == warmup:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c["lr"] - min_lr)


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return dict(cpu=cpu, cores=os.cpu_count(), os=platform.system().lower(), arch=platform.machine())


def bench(args):
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.threads:
        torch.set_num_threads(args.threads)
    train, _ = corpus()
    for name in args.presets.split(","):
        c = load_preset(name)
        rng = Rng.for_stream(42, "train-batches")
        t0 = time.perf_counter()
        torch.manual_seed(42)
        model = TinyGPT(c).to(device)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [dict(params=decay, weight_decay=c["weight_decay"]), dict(params=no_decay, weight_decay=0.0)],
            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"], fused=device.type == "cuda",
        )
        fwd = torch.compile(model) if args.compile else model
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        setup_ms = (time.perf_counter() - t0) * 1e3
        step = 0

        def train_step():
            nonlocal step
            x, y = sample_batch(train, c["batch"], c["ctx"], rng)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            for g in opt.param_groups:
                g["lr"] = lr_at(c, step)
            sync()
            start = time.perf_counter()
            _, loss = fwd(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if c["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
            opt.step()
            sync()
            step += 1
            return (time.perf_counter() - start) * 1e3, loss.item()

        first_ms, _ = train_step()
        t0 = time.perf_counter()
        for _ in range(max(args.warmup, 1) - 1):
            train_step()
        warmup_ms = (time.perf_counter() - t0) * 1e3
        times = []
        t0 = time.perf_counter()
        while len(times) < 5 or (len(times) < args.max_steps and time.perf_counter() - t0 < args.seconds):
            times.append(train_step()[0])
        times.sort()
        n = len(times)
        median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
        kind = f"pytorch-{device.type}" + ("-compile" if args.compile else "-eager")
        dev = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
        print(json.dumps(dict(
            preset=name, backend=kind, device=f"torch {torch.__version__} ({dev})", params=param_count(c),
            batch=c["batch"], ctx=c["ctx"], setup_ms=setup_ms, first_step_ms=first_ms, warmup_ms=warmup_ms,
            steps=n, median_ms=median, min_ms=times[0], max_ms=times[-1],
            tokens_per_s=c["batch"] * c["ctx"] / (median / 1e3), machine=machine(),
        )), flush=True)


# ----------------------------------------------------------------------- check

def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in ("F32", "F16"):
            raise SystemExit(f"{path}: tensor {name} has dtype {info['dtype']}")
        b, e = info["data_offsets"]
        dtype = torch.float32 if info["dtype"] == "F32" else torch.float16
        t = torch.frombuffer(bytearray(data[b:e]), dtype=dtype).reshape(info["shape"])
        tensors[name] = t.to(torch.float64)
    return tensors, meta


def check(args):
    tensors, meta = read_safetensors(args.checkpoint)
    c = parse_ron_config(meta["config"])
    c["dropout"] = 0.0
    model = TinyGPT(c).to(torch.float64).eval()
    state = {k: v for k, v in tensors.items() if not k.startswith("adam.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"checkpoint does not match the model: missing {missing}, unexpected {unexpected}")
    _, val = corpus(args.corpus)
    b, t = c["batch"], c["ctx"]
    windows = len(val) - t
    offsets = [(i * t) % windows for i in range(b)]
    x = torch.tensor([list(val[o: o + t]) for o in offsets], dtype=torch.long)
    y = torch.tensor([list(val[o + 1: o + t + 1]) for o in offsets], dtype=torch.long)
    with torch.no_grad():
        logits, loss = model(x, y)
    ours = torch.frombuffer(bytearray(Path(args.logits).read_bytes()), dtype=torch.float32).to(torch.float64)
    ours = ours.reshape(b, t, VOCAB)
    logits_err = ((ours - logits).norm() / logits.norm()).item()
    ours_loss = F.cross_entropy(ours.view(-1, VOCAB), y.view(-1)).item()
    loss_err = abs(ours_loss - loss.item()) / abs(loss.item())
    ok = logits_err <= 1e-5 and loss_err <= 1e-5
    print(json.dumps(dict(logits_rel_err=logits_err, loss_torch=loss.item(), loss_tinygpt_logits=ours_loss,
                          loss_rel_err=loss_err, tolerance=1e-5, ok=ok)))
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="time training steps, printing tinygpt bench's JSON lines")
    b.add_argument("--presets", default="small")
    b.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    b.add_argument("--compile", action="store_true", help="torch.compile the model")
    b.add_argument("--threads", type=int, default=0, help="CPU threads (default: PyTorch's)")
    b.add_argument("--warmup", type=int, default=3)
    b.add_argument("--seconds", type=float, default=3.0)
    b.add_argument("--max-steps", type=int, default=100)
    k = sub.add_parser("check", help="compare a tinygpt checkpoint's logits and loss with this model's")
    k.add_argument("--checkpoint", required=True)
    k.add_argument("--logits", required=True, help="file written by `tinygpt eval --dump-logits`")
    k.add_argument("--corpus", default=None)
    args = ap.parse_args()
    bench(args) if args.cmd == "bench" else check(args)


if __name__ == "__main__":
    main()
