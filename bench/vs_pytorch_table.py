"""The ratio table of bench/vs-pytorch.sh from its JSON lines (stdlib only).

Per preset and side: the median over runs of each run's median ms/step;
ratio = PyTorch ms / ours ms (above 1: we are faster). Ours in f32 is set
against PyTorch in f32 (eager, torch.compile); ours in mixed precision
(`gpu-mixed`, from `--mixed`) against PyTorch under autocast, and also against
eager f32. Usage:
    python3 bench/vs_pytorch_table.py bench-vs-pytorch/vs-pytorch.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict

# PyTorch's sides, in the table's order: (key in the backend name, heading).
TORCH_SIDES = [
    ("eager", "eager"),
    ("compile", "compile"),
    ("eager-autocast-bf16", "eager bf16 autocast"),
    ("eager-autocast-f16", "eager f16 autocast"),
]


def side_of(backend):
    """`cpu`/`gpu` -> ours; `gpu-mixed` -> mixed; `pytorch-cuda-eager-autocast-bf16` -> its key."""
    if backend in ("cpu", "gpu"):
        return "ours"
    if backend == "gpu-mixed":
        return "mixed"
    return backend.split("-", 2)[2]


def main(path):
    times = defaultdict(list)  # (preset, side) -> [median_ms per run]
    devices, order = {}, []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        side = side_of(r["backend"])
        times[(r["preset"], side)].append(r["median_ms"])
        devices[side] = r["device"]
        if r["preset"] not in order:
            order.append(r["preset"])
    med = {k: statistics.median(v) for k, v in times.items()}
    has_mixed = any(k[1] == "mixed" for k in med)
    sides = [(key, head) for key, head in TORCH_SIDES if any(k[1] == key for k in med)]
    head = ["preset", "ours ms"] + (["ours mixed ms"] if has_mixed else [])
    for key, name in sides:
        ours = "mixed" if "autocast" in key else "ours"
        head += [f"PyTorch {name} ms", f"{'mixed' if ours == 'mixed' else 'ours'} vs {name}"]
    if has_mixed and any(k == "eager" for k, _ in sides):
        head += ["mixed vs eager f32"]
    rows = []
    for preset in order:
        if (preset, "ours") not in med and (preset, "mixed") not in med:
            continue
        fmt = lambda side: f"{med[(preset, side)]:.2f}" if (preset, side) in med else "–"
        ratio = lambda theirs, ours: (
            f"{med[(preset, theirs)] / med[(preset, ours)]:.2f}×"
            if (preset, theirs) in med and (preset, ours) in med else "–"
        )
        row = [preset, fmt("ours")] + ([fmt("mixed")] if has_mixed else [])
        for key, _ in sides:
            row += [fmt(key), ratio(key, "mixed" if "autocast" in key else "ours")]
        if has_mixed and any(k == "eager" for k, _ in sides):
            row += [ratio("eager", "mixed")]
        rows.append(row)
    runs = max((len(v) for v in times.values()), default=0)
    print(f"Medians of {runs} runs per side, in one session on one machine.")
    for side, dev in devices.items():
        print(f"- {side}: {dev}")
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
