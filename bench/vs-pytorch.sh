#!/usr/bin/env bash
# Ours against PyTorch, side by side on one machine in one session (issue 17):
# `tinygpt bench` and `tests/reference/tinygpt_torch.py bench` on the same
# presets (same shapes, fp32, TF32 off), alternated RUNS times, then the ratio
# table from the medians (tinygpt-over-PyTorch speed: >1 means we are faster).
#
#   bash bench/vs-pytorch.sh                       # GPU vs CUDA eager + torch.compile, every preset
#   bash bench/vs-pytorch.sh --device cpu --threads 16 --presets small,medium,large,xl
#   bash bench/vs-pytorch.sh --presets tiny,small --runs 5 --no-compile --out bench-out
#   bash bench/vs-pytorch.sh --compile-runs 1      # torch.compile (slow to compile) in the first run only
#   bash bench/vs-pytorch.sh --mixed --no-compile  # also ours --precision mixed against eager autocast (bf16, f16 + GradScaler)
#
# Needs the release binary (built here if missing) and python3 with torch.
# Writes DIR/vs-pytorch.jsonl (every measurement) and DIR/vs-pytorch.md (the
# table, also printed). docs/performance.md keeps only tables from this script.
# With --mixed each run also times ours in mixed precision (the tensor cores;
# the GPU only) and PyTorch eager under autocast, bf16 and f16.
set -euo pipefail
cd "$(dirname "$0")/.."

presets="tiny,small,medium,large,xl,huge,massive,mega,nanogpt-char"
device="gpu"
runs=3
compile=1
mixed=0
compile_runs=""
threads=""
out="bench-vs-pytorch"
seconds=3
while [ $# -gt 0 ]; do
    case "$1" in
        --presets) presets="$2"; shift 2 ;;
        --device) device="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --no-compile) compile=0; shift ;;
        --mixed) mixed=1; shift ;;
        --compile-runs) compile_runs="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$mixed" = 1 ] && [ "$device" != gpu ]; then
    echo "--mixed is the GPU's tensor cores: drop it, or use --device gpu" >&2; exit 2
fi
case "$device" in
    gpu) torch_device="cuda" ;;
    cpu) torch_device="cpu" ;;
    *) echo "--device is gpu or cpu, not $device" >&2; exit 2 ;;
esac

tinygpt="${TINYGPT:-}"
if [ -z "$tinygpt" ]; then
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tinygpt-target}"
    tinygpt="$CARGO_TARGET_DIR/release/tinygpt"
    [ -x "$tinygpt" ] || cargo build --release
fi
# The PyTorch side (TINYGPT_TORCH overrides, e.g. a different python).
read -r -a torch_cmd <<< "${TINYGPT_TORCH:-python3 tests/reference/tinygpt_torch.py}"
if ! "${torch_cmd[@]}" --help >/dev/null 2>&1; then
    echo "cannot run ${torch_cmd[*]}: this script needs python3 with torch (pip install torch)" >&2
    exit 1
fi

mkdir -p "$out"
log="$out/vs-pytorch.jsonl"
: > "$log"
ours_threads=(); torch_threads=()
if [ -n "$threads" ]; then ours_threads=(--threads "$threads"); torch_threads=(--threads "$threads"); fi
for run in $(seq 1 "$runs"); do
    echo "run $run of $runs: tinygpt ($device)" >&2
    ours_precision=(); if [ "$mixed" = 1 ]; then ours_precision=(--precision f32,mixed); fi
    "$tinygpt" "${ours_threads[@]}" bench --backend "$device" "${ours_precision[@]}" --presets "$presets" --seconds "$seconds" --json >> "$log"
    echo "run $run of $runs: PyTorch eager ($torch_device)" >&2
    "${torch_cmd[@]}" bench --device "$torch_device" --presets "$presets" --seconds "$seconds" "${torch_threads[@]}" >> "$log"
    if [ "$mixed" = 1 ]; then
        for amp in bf16 f16; do
            echo "run $run of $runs: PyTorch eager, autocast $amp ($torch_device)" >&2
            "${torch_cmd[@]}" bench --device "$torch_device" --presets "$presets" --seconds "$seconds" --autocast "$amp" >> "$log"
        done
    fi
    if [ "$compile" = 1 ] && [ "$torch_device" = cuda ] && [ "$run" -le "${compile_runs:-$runs}" ]; then
        echo "run $run of $runs: torch.compile ($torch_device)" >&2
        "${torch_cmd[@]}" bench --device "$torch_device" --presets "$presets" --seconds "$seconds" --compile >> "$log"
    fi
done
python3 bench/vs_pytorch_table.py "$log" | tee "$out/vs-pytorch.md"
