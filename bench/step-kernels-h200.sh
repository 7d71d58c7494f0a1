#!/usr/bin/env bash
# The Step scene names the kernels each entry runs, and which ran in f16 on
# the tensor cores (issue 51): nanogpt-char's entries $MIXED (default: the
# first forward ones, and the first backward ones) in mixed precision, then
# $F32 in f32, on the H200 host, for the binary built here (.devbin/tg.xz;
# carry .gl and .devbin). Raw lines in $OUT/step-kernels.jsonl, a summary in
# $OUT/step-kernels.txt, pictures at 1920×1080 in $OUT (the first three).
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
cd /tmp
step() { local run=$1 op=$2; shift 2
  /tmp/tg app --headless --backend gpu --preset nanogpt-char --scene step --step-op $op \
    --frames 60 --width 1920 --height 1080 "$@" 2>/dev/null \
    | grep '^{' | sed "s/^{/{\"run\":\"$run\",/" >> $OUT/step-kernels.jsonl; }
shots=0
for op in ${MIXED:-2 3 4 5 6 70 71 72 73 74 75 76 77}; do
  shot=(); [ $shots -lt 3 ] && shot=(--screenshot $OUT/step-mixed-$op.png); shots=$((shots + 1))
  step "mixed-$op" $op --precision mixed "${shot[@]}"
done
for op in ${F32:-3 72}; do
  step "f32-$op" $op --precision f32 --screenshot $OUT/step-f32-$op.png
done
python3 - <<'PY' | tee $OUT/step-kernels.txt
import json, os
for line in open(os.environ['OUT'] + '/step-kernels.jsonl'):
    r = json.loads(line)
    s = r.get('step') or {}
    print(f"{r['run']}: {r.get('backend')}; entry {s.get('index')} {s.get('op')} ({s.get('phase')}), computed {s.get('computed')}; kernels {s.get('kernels')}; f16 {s.get('f16')}")
    print(f"  describe: {r.get('describe')}")
PY
