#!/usr/bin/env python3
"""nanoGPT's own model.py against tinygpt, both ways (needs PyTorch and a
nanoGPT checkout; the H100 host has PyTorch, CI does not run this):

1. tinygpt -> nanoGPT: the shipped tiny checkpoint loads into nanoGPT's GPT
   (its state dict, with lm_head tied to wte) and gives the logits that
   `tinygpt eval --dump-logits` gives, on tinygpt's fixed validation batch.
2. nanoGPT -> tinygpt: a nanoGPT model trained a few steps with its own
   configure_optimizers and saved as its train.py saves ckpt.pt is converted
   with `tinygpt_torch.py from-nanogpt`; tinygpt's logits of the result are
   nanoGPT's, and `tinygpt train --resume` continues it.

    python3 tests/reference/nanogpt_check.py --nanogpt ~/nanoGPT --tinygpt target/release/tinygpt
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import tinygpt_torch as ref  # noqa: E402


def tinygpt_logits(tinygpt, checkpoint, dump, b, t):
    out = subprocess.run([tinygpt, "eval", "--checkpoint", str(checkpoint), "--backend", "cpu",
                          "--dump-logits", str(dump)], check=True, capture_output=True, text=True)
    logits = torch.frombuffer(bytearray(Path(dump).read_bytes()), dtype=torch.float32)
    return logits.reshape(b, t, ref.VOCAB).to(torch.float64), out.stdout.strip()


def fixed_batch(c):
    """`tinygpt eval`'s batch: validation windows at offsets 0, ctx, 2·ctx, …"""
    _, val = ref.corpus()
    b, t = c["batch"], c["ctx"]
    windows = len(val) - t
    offsets = [(i * t) % windows for i in range(b)]
    return torch.tensor([list(val[o: o + t]) for o in offsets], dtype=torch.long)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanogpt", required=True, help="a nanoGPT checkout (its model.py)")
    ap.add_argument("--tinygpt", required=True, help="the tinygpt binary")
    args = ap.parse_args()
    sys.path.insert(0, args.nanogpt)
    from model import GPT, GPTConfig  # nanoGPT's

    tmp = Path(tempfile.mkdtemp())
    report = {}

    # 1. tinygpt -> nanoGPT
    ship = ROOT / "assets" / "checkpoints" / "tiny.safetensors"
    tensors, meta = ref.read_safetensors(ship)
    c = ref.parse_ron_config(meta["config"])
    nano = GPT(GPTConfig(block_size=c["ctx"], vocab_size=ref.VOCAB, n_layer=c["n_layer"], n_head=c["n_head"],
                         n_embd=c["d_model"], dropout=0.0, bias=True)).to(torch.float64).eval()
    sd = {k: v for k, v in tensors.items() if not k.startswith("adam.")}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    missing, unexpected = nano.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias")]  # the mask buffer of older nanoGPTs
    assert not missing and not unexpected, (missing, unexpected)
    x = fixed_batch(c)
    with torch.no_grad():
        theirs = torch.stack([nano(x[i: i + 1], x[i: i + 1])[0][0] for i in range(len(x))])
    ours, line = tinygpt_logits(args.tinygpt, ship, tmp / "tiny.bin", c["batch"], c["ctx"])
    report["tinygpt_to_nanogpt_logits_rel_err"] = rel(ours, theirs)

    # 2. nanoGPT -> tinygpt
    torch.manual_seed(0)
    conf = dict(block_size=32, vocab_size=ref.VOCAB, n_layer=2, n_head=3, n_embd=48, dropout=0.0, bias=True)
    model = GPT(GPTConfig(**conf))
    config = dict(batch_size=16, learning_rate=1e-3, beta1=0.9, beta2=0.95, weight_decay=0.1, grad_clip=1.0,
                  decay_lr=False)
    opt = model.configure_optimizers(config["weight_decay"], config["learning_rate"], (0.9, 0.95), "cpu")
    train, _ = ref.corpus()
    rng = ref.Rng(7)
    for _ in range(20):
        xb, yb = ref.sample_batch(train, 16, 32, rng)
        _, loss = model(xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    ckpt = dict(model=model.state_dict(), optimizer=opt.state_dict(), model_args=conf, iter_num=20,
                best_val_loss=torch.tensor(9.0), config=config)
    torch.save(ckpt, tmp / "ckpt.pt")
    conv = subprocess.run([sys.executable, str(HERE / "tinygpt_torch.py"), "from-nanogpt", "--ckpt",
                           str(tmp / "ckpt.pt"), "--out", str(tmp / "nano.safetensors")],
                          check=True, capture_output=True, text=True)
    report["from_nanogpt"] = json.loads(conv.stdout)
    c2 = ref.parse_ron_config(report["from_nanogpt"]["config"])
    x2 = fixed_batch(c2)
    model = model.to(torch.float64).eval()
    with torch.no_grad():
        theirs2 = torch.stack([model(x2[i: i + 1], x2[i: i + 1])[0][0] for i in range(len(x2))])
    ours2, _ = tinygpt_logits(args.tinygpt, tmp / "nano.safetensors", tmp / "nano.bin", c2["batch"], c2["ctx"])
    report["nanogpt_to_tinygpt_logits_rel_err"] = rel(ours2, theirs2)
    resumed = subprocess.run([args.tinygpt, "train", "--resume", str(tmp / "nano.safetensors"), "--steps", "30",
                              "--backend", "cpu", "--json", "--out", str(tmp / "nano-30.safetensors")],
                             check=True, capture_output=True, text=True)
    steps = [json.loads(line) for line in resumed.stdout.splitlines() if line.startswith("{")]
    report["resumed"] = dict(first=steps[0], last=steps[-1], nanogpt_last_loss=loss.item())
    ok = report["tinygpt_to_nanogpt_logits_rel_err"] < 1e-5 and report["nanogpt_to_tinygpt_logits_rel_err"] < 1e-5
    report["ok"] = ok
    print(json.dumps(report))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
