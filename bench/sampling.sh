#!/usr/bin/env bash
# Sampling speed in bytes/s with the window full (issue 29: the window slides
# one byte at a time, as nanoGPT's generate() does), per preset and backend.
#
#   bash bench/sampling.sh                               # small, xl, nanogpt-char on cpu and gpu
#   bash bench/sampling.sh --presets small --backends cpu --bytes 200,1200
#   TINYGPT=/path/to/other/tinygpt bash bench/sampling.sh   # another build, to compare
#
# Each preset's checkpoint is its initial weights after one training step
# (the speed does not depend on what was learned). The prompt is longer than
# the context, so every byte is generated with the window full. The rate is
# (N2 - N1) / (t2 - t1) from two greedy runs of N1 and N2 bytes, so loading
# the checkpoint and starting the GPU cancel out. Prints one line per
# measurement: preset, backend, bytes/s, ms/byte.
set -euo pipefail
cd "$(dirname "$0")/.."

presets="small,xl,nanogpt-char"
backends="cpu,gpu"
bytes="100,600"
while [ $# -gt 0 ]; do
    case "$1" in
        --presets) presets="$2"; shift 2 ;;
        --backends) backends="$2"; shift 2 ;;
        --bytes) bytes="$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
IFS=, read -r n1 n2 <<< "$bytes"

tinygpt="${TINYGPT:-}"
if [ -z "$tinygpt" ]; then
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tinygpt-target}"
    tinygpt="$CARGO_TARGET_DIR/release/tinygpt"
    [ -x "$tinygpt" ] || cargo build --release
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# 600 bytes of the corpus: longer than any preset's context.
prompt="$(head -c 600 assets/tinyshakespeare.txt)"

now() { date +%s.%N; }
printf '%-14s %-4s %10s %9s\n' preset backend bytes/s ms/byte
for preset in ${presets//,/ }; do
    ck="$work/$preset.safetensors"
    "$tinygpt" train --preset "$preset" --steps 1 --backend auto --json --out "$ck" >/dev/null 2>&1
    for backend in ${backends//,/ }; do
        t=()
        for n in "$n1" "$n2"; do
            start=$(now)
            "$tinygpt" generate --checkpoint "$ck" --backend "$backend" --temperature 0 \
                --prompt "$prompt" --tokens "$n" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
            t+=("$(awk -v a="$(now)" -v b="$start" 'BEGIN { print a - b }')")
        done
        awk -v p="$preset" -v b="$backend" -v n="$((n2 - n1))" -v t1="${t[0]}" -v t2="${t[1]}" \
            'BEGIN { r = n / (t2 - t1); printf "%-14s %-4s %10.1f %9.2f\n", p, b, r, 1000 / r }'
    done
done
