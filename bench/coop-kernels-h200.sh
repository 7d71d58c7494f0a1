#!/usr/bin/env bash
# The tensor-core kernel's configurations side by side on the H200 host
# (issue 51): gpu::coop::COOP_KERNELS, each compiled by its name
# (TINYGPT_COOP_KERNEL; d2k16, q4 and q4k32, measured on 2026-12-01, are in
# the list at commit dbfce28), and `old` (the binary of the commit before them,
# .devbin/tg-old.xz, when it is there). First each configuration's parity:
# tests/gpu.rs's mixed-precision tests (every product on the tensor cores at
# ragged shapes and split-K, against the CPU's f32; the gpu test binary
# .devbin/gpu.xz). Then, alternated in $ROUNDS rounds: every matmul of
# $PRESET's step alone (`bench --matmul preset:…`, the coop rows) and whole
# mixed steps at $STEPS (`bench --precision mixed`), f32 once a round beside.
# Raw in $OUT/*.jsonl, a summary in $OUT/summary.txt. The binaries in
# .devbin; run with `carry: [".gl", ".devbin"]`.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $OUT/machine.txt
KERNELS=${KERNELS:-s1 d2}
PRESET=${PRESET:-nanogpt-char}
STEPS=${STEPS:-nanogpt-char,mega}
ROUNDS=${ROUNDS:-2}
[ -f .devbin/gpu.xz ] && xz -dc .devbin/gpu.xz > /tmp/gputest && chmod +x /tmp/gputest
OLD=; [ -f .devbin/tg-old.xz ] && xz -dc .devbin/tg-old.xz > /tmp/tg-old && chmod +x /tmp/tg-old && OLD=old
if [ -x /tmp/gputest ]; then
  for k in $KERNELS; do
    TINYGPT_COOP_KERNEL=$k timeout 240 /tmp/gputest mixed --test-threads 1 > $OUT/parity-$k.txt 2>&1
    echo "parity $k: exit $? $(grep -o 'test result.*' $OUT/parity-$k.txt)" | tee -a $OUT/parity.txt
  done
fi
export REPO=$PWD
cd /tmp
for r in $(seq $ROUNDS); do
  for k in $OLD $KERNELS; do
    bin=/tmp/tg; [ $k = old ] && bin=/tmp/tg-old
    TINYGPT_COOP_KERNEL=$k timeout 120 $bin bench --matmul preset:$PRESET --json 2>/dev/null \
      | grep '"coop' | sed "s/^{/{\"config\":\"$k\",\"round\":$r,/" >> $OUT/matmul.jsonl
    TINYGPT_COOP_KERNEL=$k timeout 120 $bin bench --backend gpu --presets $STEPS --precision mixed --json 2>/dev/null \
      | sed "s/^{/{\"config\":\"$k\",\"round\":$r,/" >> $OUT/steps.jsonl
  done
  timeout 120 /tmp/tg bench --backend gpu --presets $STEPS --json 2>/dev/null \
    | sed "s/^{/{\"config\":\"f32\",\"round\":$r,/" >> $OUT/steps.jsonl
done
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, collections
out = os.environ['OUT']
best = collections.defaultdict(float)
for line in open(out + '/matmul.jsonl'):
    r = json.loads(line)
    key = (r['config'], r['layout'], r['m'], r['k'], r['n'])
    best[key] = max(best[key], r['tflops'])
shapes = sorted({k[1:] for k in best})
configs = list(dict.fromkeys(k[0] for k in best))
print('matmul TFLOP/s (best of the rounds):', ' '.join(f'{c:>7}' for c in configs))
for s in shapes:
    print(f"{s[0]:5} {s[1]:6}x{s[2]:6}x{s[3]:6}", ' '.join(f"{best.get((c,) + s, 0):7.1f}" for c in configs))
print()
for line in open(out + '/steps.jsonl'):
    r = json.loads(line)
    print(f"step {r['config']:6} round {r['round']} {r.get('backend')} {r.get('preset'):13} median {r['median_ms']:.3f} ms (min {r['min_ms']:.3f})")
PY
