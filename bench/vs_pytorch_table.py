"""The ratio table of bench/vs-pytorch.sh from its JSON lines (stdlib only).

Per preset and side: the median over runs of each run's median ms/step;
ratio = PyTorch ms / ours ms (above 1: we are faster). Usage:
    python3 bench/vs_pytorch_table.py bench-vs-pytorch/vs-pytorch.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    times = defaultdict(list)  # (preset, side) -> [median_ms per run]
    devices, order = {}, []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        backend = r["backend"]
        side = "ours" if backend in ("cpu", "gpu") else backend.split("-")[-1]  # eager | compile
        times[(r["preset"], side)].append(r["median_ms"])
        devices[side] = r["device"]
        if r["preset"] not in order:
            order.append(r["preset"])
    sides = [s for s in ("eager", "compile") if any(k[1] == s for k in times)]
    head = ["preset", "ours ms"]
    for s in sides:
        head += [f"PyTorch {s} ms", f"ratio vs {s}"]
    rows = []
    for preset in order:
        ours = times.get((preset, "ours"))
        if not ours:
            continue
        m = statistics.median(ours)
        row = [preset, f"{m:.2f}"]
        for s in sides:
            t = times.get((preset, s))
            if t:
                tm = statistics.median(t)
                row += [f"{tm:.2f}", f"{tm / m:.2f}×"]
            else:
                row += ["–", "–"]
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
