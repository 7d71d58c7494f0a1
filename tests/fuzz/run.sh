#!/usr/bin/env bash
# Fuzzes every parser target of tests/fuzz.rs for SECONDS each (default 60),
# one after another, and prints how many inputs each ran.
#   bash tests/fuzz/run.sh 300            # five minutes per target
#   TINYGPT_FUZZ_SEED=0x1234 bash tests/fuzz/run.sh   # replay a failure's seed
# A failing input is written to $TMPDIR/tinygpt-fuzz-failures/; keep it as a
# regression in tests/fuzz/regressions/TARGET/ once it is fixed.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tinygpt-target}"
export TINYGPT_FUZZ_SECONDS="${1:-60}"
failed=""
for target in checkpoint_loader tinygpt_reader preset_parser lesson_parser link_fragment corpus_loader; do
    log="$(mktemp)"
    if cargo test --release --test fuzz -- --exact "fuzz_$target" --nocapture --test-threads 1 >"$log" 2>&1; then
        grep -oE 'fuzz [a-z]+: .*' "$log" || true
    else
        grep -vE '^\s*$|Running|Finished|Compiling' "$log" | tail -20
        failed="$failed $target"
    fi
    rm -f "$log"
done
if [ -n "$failed" ]; then
    echo "fuzzing found failures in:$failed" >&2
    exit 1
fi
