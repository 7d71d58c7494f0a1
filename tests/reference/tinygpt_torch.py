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
       python3 tests/reference/tinygpt_torch.py bench --presets nanogpt-char --device cuda --autocast bf16

2. An independent numerical oracle: `check` loads a checkpoint written by
   `tinygpt train`, rebuilds the fixed batch of `tinygpt eval` (validation
   windows at offsets 0, ctx, 2·ctx, ...), runs this model in float64 and
   compares logits and loss with the ones `tinygpt eval --dump-logits` wrote.

       tinygpt eval --checkpoint run.safetensors --dump-logits logits.bin
       python3 tests/reference/tinygpt_torch.py check --checkpoint run.safetensors --logits logits.bin

3. The way out to multi-GPU PyTorch and back: `continue` trains a tinygpt
   checkpoint on under `torchrun` (DistributedDataParallel, one process per
   GPU, each rank drawing its own batches) with the same model and AdamW
   recipe, its moments carried over, and writes a tinygpt checkpoint back
   (`tinygpt train --resume`, `tinygpt generate` and the app open it).
   `from-nanogpt` converts nanoGPT's own `ckpt.pt` into a tinygpt checkpoint.

       torchrun --nproc_per_node 2 tests/reference/tinygpt_torch.py continue \
           --checkpoint small.safetensors --steps 300 --out small-ddp.safetensors
       python3 tests/reference/tinygpt_torch.py from-nanogpt --ckpt out/ckpt.pt --out nano.safetensors

4. `selftest`: the converter and the checkpoint writer on a model made up on
   the spot (no files needed); .ci/run runs it where PyTorch is installed.

Needs PyTorch (and nothing else; safetensors files are read and written by
hand). CI runs only `selftest`, and only where PyTorch is installed; the H100
host has PyTorch.
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
import torch.distributed as dist
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
        # Automatic mixed precision as PyTorch recommends it: the forward
        # under autocast (matmuls in bf16 or f16, reductions in f32), f32
        # master weights; f16 adds the GradScaler (bf16 needs none).
        amp_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(args.autocast)
        scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
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
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                _, loss = fwd(x, y)
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
            if c["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
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
        if amp_dtype is not None:
            kind += f"-autocast-{args.autocast}"
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
    report = dict(logits_rel_err=logits_err, loss_torch=loss.item(), loss_tinygpt_logits=ours_loss,
                  loss_rel_err=loss_err, tolerance=1e-5)
    if args.grads or args.step:
        ok = check_step(args, c, meta, tensors, model, x, y, report) and ok
    report["ok"] = ok
    print(json.dumps(report))
    sys.exit(0 if ok else 1)


def rel_err(ours, ref):
    """‖ours − ref‖ / ‖ref‖ (the absolute error where ref is zero)."""
    diff = (ours - ref).norm().item()
    norm = ref.norm().item()
    return diff / norm if norm > 0 else diff


def worst(errors):
    name = max(errors, key=errors.get)
    return dict(worst=name, rel_err=errors[name], tensors=len(errors))


def key_bias(name, t):
    """The key third of a c_attn bias, or None. Its gradient is zero in exact
    arithmetic: softmax ignores a shift shared by one query's scores, and
    q·b_k shifts them all alike. So in f32 it is rounding noise, and AdamW
    (m̂/√v̂ of noise is of order 1) turns that noise into updates of order
    lr, different in any two implementations: the AdamW comparison leaves it
    out and reports it alone."""
    if name.endswith("attn.c_attn.bias"):
        d = t.shape[0] // 3
        return t[d: 2 * d]
    return None


def without_key_bias(name, t):
    if name.endswith("attn.c_attn.bias"):
        d = t.shape[0] // 3
        return torch.cat([t[:d], t[2 * d:]])
    return t


def check_step(args, c, meta, tensors, model, x, y, report):
    """The checkpoint's next step on the same batch, in float64: the
    gradients (before clipping) against `tinygpt eval --dump-grads`, then
    clipping and torch's AdamW (an implementation independent of ours, with
    the checkpoint's moments and step) against `--dump-step`'s weights and
    moments. Tolerances: f32 against float64; ours are stored in f32, so the
    reference's weights are rounded to f32 before the update is compared."""
    ok = True
    model.train()  # dropout is 0: training mode only matters for bookkeeping
    model.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    named = dict(model.named_parameters())
    if args.grads:
        ours, _ = read_safetensors(args.grads)
        errors = {n: rel_err(ours[f"grad.{n}"], p.grad) for n, p in named.items()}
        # The global norm tells whether small tensors' relative errors matter.
        total = math.sqrt(sum((ours[f"grad.{n}"] - p.grad).pow(2).sum().item() for n, p in named.items()))
        norm = math.sqrt(sum(p.grad.pow(2).sum().item() for p in named.values()))
        keys = [(key_bias(n, ours[f"grad.{n}"]), key_bias(n, p.grad)) for n, p in named.items()
                if key_bias(n, p.grad) is not None]
        report["grads"] = dict(worst(errors), global_rel_err=total / norm, grad_norm=norm, tolerance=1e-4,
                               key_bias_max_abs=dict(ours=max(o.abs().max().item() for o, _ in keys),
                                                     torch=max(t.abs().max().item() for _, t in keys)))
        ok = ok and total / norm <= 1e-4 and max(errors.values()) <= 1e-3
    if args.step:
        step = int(meta["step"])
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [dict(params=decay, weight_decay=c["weight_decay"]), dict(params=no_decay, weight_decay=0.0)],
            lr=lr_at(c, step), betas=(c["beta1"], c["beta2"]), eps=c["eps"], foreach=False,
        )
        # The checkpoint's moments, or zeros (as tinygpt starts them) at its step.
        has_moments = all(f"adam.m.{n}" in tensors for n in named)
        for n, p in named.items():
            m = tensors[f"adam.m.{n}"].clone() if has_moments else torch.zeros_like(p)
            v = tensors[f"adam.v.{n}"].clone() if has_moments else torch.zeros_like(p)
            opt.state[p] = dict(step=torch.tensor(float(step), dtype=torch.float64), exp_avg=m, exp_avg_sq=v)
        before = {n: p.detach().clone() for n, p in named.items()}
        opt.step()
        after, after_meta = read_safetensors(args.step)
        if int(after_meta["step"]) != step + 1:
            raise SystemExit(f"{args.step}: step {after_meta['step']}, want {step + 1}")
        ref = {n: p.detach().to(torch.float32).to(torch.float64) for n, p in named.items()}
        cut = without_key_bias
        # The update itself (after − before), the weights and the moments, per tensor.
        updates = {n: rel_err(cut(n, after[n] - before[n]), cut(n, ref[n] - before[n])) for n in named}
        weights = {n: rel_err(cut(n, after[n]), cut(n, ref[n])) for n in named}
        m_err = {n: rel_err(cut(n, after[f"adam.m.{n}"]), cut(n, opt.state[p]["exp_avg"])) for n, p in named.items()}
        v_err = {n: rel_err(cut(n, after[f"adam.v.{n}"]), cut(n, opt.state[p]["exp_avg_sq"]))
                 for n, p in named.items()}
        key_updates = [key_bias(n, after[n] - before[n]).abs().max().item() for n in named
                       if key_bias(n, before[n]) is not None]
        # From zero moments the step is about lr·sign(g) wherever |g| ≫ eps, so
        # elements whose gradient is within f32 rounding of zero flip: the
        # update and the weights get looser bounds there (the moments do not).
        tol_update, tol_weights = (1e-3, 1e-6) if has_moments else (2e-2, 1e-4)
        report["adamw"] = dict(step=step + 1, lr=lr_at(c, step), moments_from_checkpoint=has_moments,
                               weights=worst(weights), update=worst(updates), m=worst(m_err), v=worst(v_err),
                               key_bias_update_max_abs=max(key_updates),
                               tolerance=dict(weights=tol_weights, update=tol_update, moments=1e-3))
        ok = ok and max(weights.values()) <= tol_weights and max(updates.values()) <= tol_update \
            and max(m_err.values()) <= 1e-3 and max(v_err.values()) <= 1e-3
    return ok


# ------------------------------------------ tinygpt checkpoints: out and back

FORMAT = "tinygpt/1"
TOKENIZER = "bytes-256"


def write_safetensors(path, tensors, meta):
    """Writes `tensors` (name -> tensor, stored as float32) and the string
    metadata `meta` as safetensors, through a temporary file renamed over
    `path` (as tinygpt writes checkpoints: an interrupted write loses nothing)."""
    header = {"__metadata__": meta}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.float32).contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = Path(f"{path}.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def config_ron(c):
    """A config dict as the RON tinygpt reads (`Config`, src/model/config.rs)."""
    s = c["schedule"]
    sched = "Constant" if s[0] == "Constant" else (
        f"WarmupCosine(warmup_steps:{int(s[1])},decay_steps:{int(s[2])},min_lr:{float(s[3])!r})")
    ints = ["n_layer", "n_head", "d_model", "ctx", "batch", "steps"]
    floats = ["lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "dropout"]
    parts = [f"{k}:{int(c[k])}" for k in ints] + [f"{k}:{float(c[k])!r}" for k in floats]
    parts += [f"schedule:{sched}", f"eval_interval:{int(c.get('eval_interval', 100))}",
              f"eval_batches:{int(c.get('eval_batches', 8))}"]
    return "(" + ",".join(parts) + ")"


def checkpoint_meta(config_text, step, seed, history, sampler_state=None):
    meta = {"format": FORMAT, "config": config_text, "step": str(step), "seed": str(seed),
            "tokenizer": TOKENIZER, "loss_history": json.dumps(history)}
    if sampler_state is not None:
        meta["sampler_state"] = str(sampler_state)
    return meta


def decay_groups(model):
    """tinygpt's (and nanoGPT's) AdamW groups: weight decay on ≥2-D tensors only."""
    named = list(model.named_parameters())
    return [(n, p) for n, p in named if p.dim() >= 2], [(n, p) for n, p in named if p.dim() < 2]


def read_tinygpt(path):
    """A tinygpt checkpoint: (config dict, metadata, params, moments or None)."""
    tensors, meta = read_safetensors(path)
    if meta.get("format") != FORMAT:
        raise SystemExit(f"{path}: not a tinygpt checkpoint (metadata format {meta.get('format')!r}, "
                         f"want {FORMAT!r}); write one with `tinygpt train --out FILE`")
    if "lab:" in meta["config"]:
        raise SystemExit(f"{path}: this run is a 'break it' lab (its config says {meta['config']}); "
                         "the PyTorch model here is the intact one, so it cannot continue it")
    c = parse_ron_config(meta["config"])
    params = {k: v.to(torch.float32) for k, v in tensors.items() if not k.startswith("adam.")}
    m = {k[len("adam.m."):]: v.to(torch.float32) for k, v in tensors.items() if k.startswith("adam.m.")}
    v = {k[len("adam.v."):]: v.to(torch.float32) for k, v in tensors.items() if k.startswith("adam.v.")}
    moments = (m, v) if m and set(m) == set(params) == set(v) else None
    return c, meta, params, moments


def continue_run(args):
    """Trains a tinygpt checkpoint on under torchrun and writes it back."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device == "cuda" and torch.cuda.is_available()
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    c, meta, params, moments = read_tinygpt(args.checkpoint)
    start, seed = int(meta["step"]), int(meta["seed"])
    model = TinyGPT(c).to(device)
    model.load_state_dict(params, strict=True)
    decay, no_decay = decay_groups(model)
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(
        [dict(params=[p for _, p in decay], weight_decay=c["weight_decay"]),
         dict(params=[p for _, p in no_decay], weight_decay=0.0)],
        lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"], fused=fused,
    )
    if moments is not None:
        m, v = moments
        for name, p in model.named_parameters():
            opt.state[p] = dict(
                step=torch.tensor(float(start), dtype=torch.float32, device=device if fused else "cpu"),
                exp_avg=m[name].to(device).clone(), exp_avg_sq=v[name].to(device).clone())
    elif rank == 0:
        print(json.dumps(dict(note="the checkpoint has no AdamW moments: they start from zero")), flush=True)
    net = nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None) if world > 1 else model
    train, val = corpus(args.corpus)
    # Rank 0 continues tinygpt's own batch stream; the others draw their own.
    if rank == 0 and "sampler_state" in meta:
        rng = Rng(int(meta["sampler_state"]))
    else:
        rng = Rng.for_stream(seed, "train-batches" if rank == 0 else f"train-batches-rank{rank}")
    history = json.loads(meta.get("loss_history", "[]"))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    b, t = c["batch"], c["ctx"]
    timed_from, t0 = min(5, args.steps - 1), None
    for k in range(args.steps):
        if k == timed_from:
            sync()
            t0 = time.perf_counter()
        it = start + k
        x, y = sample_batch(train, b, t, rng)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(c, it)
        _, loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        if (k + 1) % args.log_every == 0 or k + 1 == args.steps:
            mean = loss.detach().clone()
            if world > 1:
                dist.all_reduce(mean)
                mean /= world
            mean = mean.item()
            if not math.isfinite(mean):
                raise SystemExit(f"the loss is {mean} at step {it + 1}: the run diverged; nothing was written")
            history.append(dict(step=it + 1, loss=mean))
            if rank == 0:
                print(json.dumps(dict(step=it + 1, loss=mean)), flush=True)
    sync()
    elapsed = time.perf_counter() - t0 if t0 is not None else float("nan")
    timed = args.steps - timed_from
    end = start + args.steps
    if rank == 0:
        # Validation loss on tinygpt's own fixed windows (`validation_batches`).
        vr = Rng.for_stream(seed, "val-batches")
        model.eval()
        with torch.no_grad():
            losses = [model(*(z.to(device) for z in sample_batch(val, b, t, vr)))[1].item()
                      for _ in range(c["eval_batches"])]
        val_loss = sum(losses) / len(losses)
        history[-1]["val_loss"] = val_loss
        tensors = {n: p for n, p in model.named_parameters()}
        for n, p in model.named_parameters():
            st = opt.state[p]
            tensors[f"adam.m.{n}"] = st["exp_avg"]
            tensors[f"adam.v.{n}"] = st["exp_avg_sq"]
        config_text = re.sub(r"([(,]\s*)steps\s*:\s*\d+", lambda mm: f"{mm.group(1)}steps:{max(end, c['steps'])}",
                             meta["config"], count=1)
        write_safetensors(args.out, tensors, checkpoint_meta(config_text, end, seed, history, rng.state))
        dev = torch.cuda.get_device_name(device) if cuda else "cpu"
        print(json.dumps(dict(
            done=end, from_step=start, gpus=world, device=f"torch {torch.__version__} ({dev})",
            val_loss=val_loss, steps_timed=timed, ms_per_step=elapsed * 1e3 / timed,
            tokens_per_s=world * b * t * timed / elapsed, out=str(args.out))), flush=True)
    if world > 1:
        dist.destroy_process_group()


def nanogpt_to_tinygpt(ckpt, seed=1337, source="ckpt.pt"):
    """nanoGPT's checkpoint dict (`model`, `model_args`, `config`, `iter_num`,
    `optimizer`) as (config RON, tensors, step), or SystemExit saying what
    tinygpt cannot represent."""
    margs = ckpt.get("model_args")
    sd = ckpt.get("model")
    if margs is None or sd is None:
        raise SystemExit(f"{source}: no `model_args` or `model`: this is not a nanoGPT checkpoint "
                         "(nanoGPT's train.py writes out_dir/ckpt.pt)")
    sd = {k.removeprefix("_orig_mod."): v for k, v in sd.items()}
    vocab = margs.get("vocab_size")
    if vocab != VOCAB:
        raise SystemExit(f"{source}: the model's vocabulary has {vocab} tokens; tinygpt's is the 256 byte "
                         "values, so its embeddings cannot be mapped (train nanoGPT with vocab_size = 256 "
                         "on bytes)")
    if not margs.get("bias", True):
        raise SystemExit(f"{source}: the model has no biases (bias = False); tinygpt's Linear and "
                         "LayerNorm layers have them (train nanoGPT with bias = True)")
    head, wte = sd.get("lm_head.weight"), sd.get("transformer.wte.weight")
    if head is not None and wte is not None and not torch.equal(head, wte):
        raise SystemExit(f"{source}: the LM head is not tied to the token embedding; tinygpt's head is "
                         "wte itself")
    cfg = ckpt.get("config") or {}
    c = dict(n_layer=margs["n_layer"], n_head=margs["n_head"], d_model=margs["n_embd"], ctx=margs["block_size"],
             batch=cfg.get("batch_size", 12), steps=max(int(ckpt.get("iter_num", 0)), 1),
             lr=cfg.get("learning_rate", 6e-4), beta1=cfg.get("beta1", 0.9), beta2=cfg.get("beta2", 0.95),
             eps=1e-8, weight_decay=cfg.get("weight_decay", 0.1), grad_clip=cfg.get("grad_clip", 1.0),
             dropout=margs.get("dropout", 0.0))
    if c["d_model"] % c["n_head"] or c["d_model"] // c["n_head"] > 128:
        raise SystemExit(f"{source}: head size {c['d_model']}/{c['n_head']} must be a whole number ≤ 128 "
                         "(the largest tinygpt's attention kernels take)")
    if cfg.get("decay_lr", False):
        c["schedule"] = ("WarmupCosine", cfg.get("warmup_iters", 0), cfg.get("lr_decay_iters", c["steps"]),
                         cfg.get("min_lr", c["lr"] / 10))
    else:
        c["schedule"] = ("Constant",)
    model = TinyGPT(c)
    tensors = {}
    for n, p in model.named_parameters():
        if n not in sd:
            raise SystemExit(f"{source}: tensor `{n}` is missing")
        if tuple(sd[n].shape) != tuple(p.shape):
            raise SystemExit(f"{source}: tensor `{n}` has shape {tuple(sd[n].shape)}, want {tuple(p.shape)}")
        tensors[n] = sd[n].to(torch.float32)
    extra = [k for k in sd if k not in tensors and k != "lm_head.weight" and not k.endswith(".attn.bias")]
    if extra:
        raise SystemExit(f"{source}: tensors tinygpt does not have: {extra[:5]}")
    # AdamW's moments, in nanoGPT's group order (≥2-D tensors, then the rest).
    state = (ckpt.get("optimizer") or {}).get("state", {})
    decay, no_decay = decay_groups(model)
    order = [n for n, _ in decay] + [n for n, _ in no_decay]
    if len(state) == len(order) and all("exp_avg" in state[i] for i in range(len(order))):
        for i, n in enumerate(order):
            tensors[f"adam.m.{n}"] = state[i]["exp_avg"].to(torch.float32)
            tensors[f"adam.v.{n}"] = state[i]["exp_avg_sq"].to(torch.float32)
    return config_ron(c), tensors, c["steps"]


def from_nanogpt(args):
    try:
        ckpt = torch.load(args.ckpt, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - say what failed, whatever it was
        raise SystemExit(f"{args.ckpt}: cannot read it as a PyTorch checkpoint: {e}")
    config_text, tensors, step = nanogpt_to_tinygpt(ckpt, args.seed, args.ckpt)
    write_safetensors(args.out, tensors, checkpoint_meta(config_text, step, args.seed, []))
    moments = any(k.startswith("adam.") for k in tensors)
    print(json.dumps(dict(out=str(args.out), step=step, config=config_text, moments=moments)))


def selftest(args):
    """The converter and the writer on a nanoGPT checkpoint made up here."""
    torch.manual_seed(0)
    c = dict(n_layer=1, n_head=2, d_model=32, ctx=16, dropout=0.0)
    model = TinyGPT(c)
    decay, no_decay = decay_groups(model)
    opt = torch.optim.AdamW([dict(params=[p for _, p in decay], weight_decay=0.1),
                             dict(params=[p for _, p in no_decay], weight_decay=0.0)], lr=1e-3)
    x = torch.randint(0, VOCAB, (2, 16))
    for _ in range(3):
        opt.zero_grad()
        model(x, x)[1].backward()
        opt.step()
    sd = {f"_orig_mod.{k}": v.clone() for k, v in model.state_dict().items()}
    sd["_orig_mod.lm_head.weight"] = sd["_orig_mod.transformer.wte.weight"]
    sd["_orig_mod.transformer.h.0.attn.bias"] = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)
    margs = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, bias=True, vocab_size=VOCAB, dropout=0.0)
    ckpt = dict(model=sd, model_args=margs, optimizer=opt.state_dict(), iter_num=3,
                config=dict(batch_size=4, learning_rate=1e-3, decay_lr=True, warmup_iters=1,
                            lr_decay_iters=10, min_lr=1e-4))
    config_text, tensors, step = nanogpt_to_tinygpt(ckpt)
    assert step == 3 and "WarmupCosine(warmup_steps:1,decay_steps:10" in config_text, config_text
    back = parse_ron_config(config_text)
    assert (back["n_layer"], back["n_head"], back["d_model"], back["ctx"], back["batch"]) == (1, 2, 32, 16, 4)
    for n, p in model.named_parameters():
        assert torch.equal(tensors[n], p.detach()), n
        assert torch.equal(tensors[f"adam.m.{n}"], opt.state[p]["exp_avg"]), n
        assert torch.equal(tensors[f"adam.v.{n}"], opt.state[p]["exp_avg_sq"]), n
    out = Path(args.out)
    write_safetensors(out, tensors, checkpoint_meta(config_text, step, 1337, []))
    read, meta = read_safetensors(out)
    assert meta["format"] == FORMAT and meta["config"] == config_text and meta["step"] == "3"
    assert set(read) == set(tensors) and all(torch.equal(read[k].to(torch.float32), tensors[k]) for k in read)
    refusals = [
        (dict(margs, vocab_size=50304), "vocabulary has 50304 tokens"),
        (dict(margs, bias=False), "no biases"),
    ]
    for bad_args, want in refusals:
        try:
            nanogpt_to_tinygpt(dict(ckpt, model_args=bad_args))
            raise AssertionError(f"not refused: {want}")
        except SystemExit as e:
            assert want in str(e), e
    untied = dict(sd)
    untied["_orig_mod.lm_head.weight"] = torch.zeros_like(sd["_orig_mod.lm_head.weight"])
    try:
        nanogpt_to_tinygpt(dict(ckpt, model=untied))
        raise AssertionError("an untied head was not refused")
    except SystemExit as e:
        assert "not tied" in str(e), e
    print(json.dumps(dict(selftest="ok", out=str(out), tensors=len(tensors))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="time training steps, printing tinygpt bench's JSON lines")
    b.add_argument("--presets", default="small")
    b.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    b.add_argument("--compile", action="store_true", help="torch.compile the model")
    b.add_argument("--autocast", choices=["bf16", "f16"], default=None,
                   help="automatic mixed precision: the forward under torch.autocast (f16 adds the GradScaler)")
    b.add_argument("--threads", type=int, default=0, help="CPU threads (default: PyTorch's)")
    b.add_argument("--warmup", type=int, default=3)
    b.add_argument("--seconds", type=float, default=3.0)
    b.add_argument("--max-steps", type=int, default=100)
    k = sub.add_parser("check", help="compare a tinygpt checkpoint's logits and loss with this model's")
    k.add_argument("--checkpoint", required=True)
    k.add_argument("--logits", required=True, help="file written by `tinygpt eval --dump-logits`")
    k.add_argument("--corpus", default=None)
    k.add_argument("--grads", default=None, help="file written by `tinygpt eval --dump-grads`")
    k.add_argument("--step", default=None, help="file written by `tinygpt eval --dump-step`")
    r = sub.add_parser("continue", help="train a tinygpt checkpoint on (under torchrun) and write it back")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--steps", type=int, required=True, help="optimizer steps to take")
    r.add_argument("--out", required=True, help="the tinygpt checkpoint to write")
    r.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    r.add_argument("--corpus", default=None)
    r.add_argument("--log-every", type=int, default=50)
    n = sub.add_parser("from-nanogpt", help="convert nanoGPT's ckpt.pt into a tinygpt checkpoint")
    n.add_argument("--ckpt", required=True)
    n.add_argument("--out", required=True)
    n.add_argument("--seed", type=int, default=1337, help="the seed tinygpt's batches continue from")
    t = sub.add_parser("selftest", help="check the converter and the checkpoint writer")
    t.add_argument("--out", default="/tmp/tinygpt-selftest.safetensors")
    args = ap.parse_args()
    if args.cmd == "continue" and args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    dict(bench=bench, check=check, selftest=selftest, **{"continue": continue_run, "from-nanogpt": from_nanogpt})[
        args.cmd](args)


if __name__ == "__main__":
    main()
