#!/usr/bin/env bash
# The register-tiled dK/dV (attention_backward_dkdv_reg) against the blocked
# one it replaces (TINYGPT_DKDV_BLOCKS=1), and the tensor-core kernels as
# shipped, on the H200 host (issue 51). First `tinygpt correctness` at
# nanogpt-char (one step, CPU against GPU, every tensor: D = 64, which only
# a device with 48 KiB of workgroup memory runs on the new kernel) and
# tests/gpu.rs's attention, per-op, whole-step and mixed tests (.devbin/gpu.xz).
# Then, alternated in two rounds, `blocks` and `reg`: whole steps in f32 and
# mixed at $PRESETS, and every kernel of one step (`bench --kernels`) at
# $KERNEL_PRESETS; one mixed --kernels at nanogpt-char; mixed with every
# product on the tensor cores (TINYGPT_COOP_EVERYWHERE=1) at $EVERYWHERE.
# Raw in $OUT/*.jsonl, a summary in $OUT/summary.txt. The binaries in
# .devbin; run with `carry: [".gl", ".devbin"]`.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
PRESETS=${PRESETS:-xl,mega,nanogpt-char}
KERNEL_PRESETS=${KERNEL_PRESETS:-mega,nanogpt-char}
EVERYWHERE=${EVERYWHERE:-xl,huge,massive,mega}
[ -f .devbin/gpu.xz ] && xz -dc .devbin/gpu.xz > /tmp/gputest && chmod +x /tmp/gputest
if [ -x /tmp/gputest ]; then
  timeout 200 /tmp/gputest attention every_kernel_matches twenty_steps_match_the_cpu mixed --test-threads 4 > $OUT/gputests.txt 2>&1
  echo "gpu tests: exit $? $(grep -o 'test result.*' $OUT/gputests.txt)" | tee -a $OUT/machine.txt
fi
export REPO=$PWD
cd /tmp
timeout 120 /tmp/tg correctness --preset nanogpt-char > $OUT/correctness.txt 2>&1
echo "correctness nanogpt-char: exit $?" | tee -a $OUT/correctness.txt
head -14 $OUT/correctness.txt
tag() { sed "s/^{/{\"kernels\":\"$1\",\"round\":$2,/"; }
for r in 1 2; do
  for k in blocks reg; do
    unset TINYGPT_DKDV_BLOCKS; [ $k = blocks ] && export TINYGPT_DKDV_BLOCKS=1
    timeout 120 /tmp/tg bench --backend gpu --presets $PRESETS --precision f32,mixed --seconds 2 --json 2>/dev/null | tag $k $r >> $OUT/steps.jsonl
    timeout 120 /tmp/tg bench --kernels --presets $KERNEL_PRESETS --json 2>/dev/null | tag $k $r >> $OUT/kernels.jsonl
  done
done
unset TINYGPT_DKDV_BLOCKS
timeout 120 /tmp/tg bench --kernels --presets nanogpt-char --precision mixed --json 2>/dev/null | tag reg-mixed 1 >> $OUT/kernels.jsonl
TINYGPT_COOP_EVERYWHERE=1 timeout 120 /tmp/tg bench --backend gpu --presets $EVERYWHERE --precision mixed --seconds 2 --json 2>/dev/null | tag everywhere 1 >> $OUT/steps.jsonl
timeout 120 /tmp/tg bench --backend gpu --presets $EVERYWHERE --precision mixed --seconds 2 --json 2>/dev/null | tag reg 3 >> $OUT/steps.jsonl
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, re, collections
out = os.environ['OUT']
def preset(name):
    text = open(f"{os.environ['REPO']}/presets/{name}.ron").read()
    get = lambda k: int(re.search(k + r": *(\d+)", text).group(1))
    return get("batch"), get("n_head"), get("d_model") // get("n_head"), get("ctx")
for line in open(out + '/steps.jsonl'):
    r = json.loads(line)
    print(f"step {r['kernels']:10} round {r['round']} {r['backend']:9} {r['preset']:13} median {r['median_ms']:.3f} ms (min {r['min_ms']:.3f})")
per_pair = {'attention_backward_dkdv': 8, 'attention_backward_dkdv_blocks': 8, 'attention_backward_dkdv_reg': 8,
            'attention_backward_dq_rows': 6, 'attention_backward_dq_blocks': 6, 'attention_forward_rows': 4}
for line in open(out + '/kernels.jsonl'):
    r = json.loads(line)
    b, h, d, t = preset(r['preset'])
    pairs = b * h * t * (t + 1) / 2
    by = collections.defaultdict(lambda: [0.0, 0])
    for row in r['rows']:
        if row['entry'].startswith('attention'):
            by[row['entry']][0] += row['ms']
            by[row['entry']][1] += 1
    for e, (ms, n) in sorted(by.items()):
        fl = per_pair.get(e, 0) * d * pairs * n
        tf = f"{fl / (ms * 1e-3) / 1e12:6.2f} TFLOP/s" if fl else ""
        print(f"kernel {r['kernels']:10} round {r['round']} {r['preset']:13} {e:32} {n:3}x {ms:8.4f} ms  {tf}")
    for f in r['families']:
        print(f"family {r['kernels']:10} round {r['round']} {r['preset']:13} {f['family']:32} {f['ms']:8.4f} ms  {f['gflops'] / 1e3:6.2f} TFLOP/s")
PY
