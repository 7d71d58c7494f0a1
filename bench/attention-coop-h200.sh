#!/usr/bin/env bash
# FlashAttention-2 on the tensor cores (issue 51; shaders/attention_coop.wgsl)
# on the H200 host: first the GPU tests of mixed precision (the new kernel
# against the CPU at ragged lengths, every op, 200 steps of small against
# f32; the test binary in .devbin/gpu.xz), then mixed steps with attention
# on the tensor cores (`coop`) and on attention.wgsl's f32 kernels (`f32`,
# TINYGPT_ATTENTION_F32=1), alternated $ROUNDS times at $PRESETS: whole
# steps (`bench --backend gpu --precision mixed`) and each attention entry
# point's time in a step (`bench --kernels --precision mixed`, summed by
# entry). The binary in .devbin (tg.xz); run with `carry: [".gl", ".devbin"]`.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
PRESETS=${PRESETS:-small,large,xl,mega,nanogpt-char}
ROUNDS=${ROUNDS:-2}
export REPO=$PWD
if [ -f .devbin/gpu.xz ] && [ "${TESTS:-1}" = 1 ]; then
  xz -dc .devbin/gpu.xz > /tmp/gpu-tests && chmod +x /tmp/gpu-tests
  timeout ${TEST_TIMEOUT:-240} /tmp/gpu-tests ${TEST_FILTER:-mixed} --test-threads 1 --nocapture > $OUT/tests.txt 2>&1
  echo "tests: exit $?" | tee -a $OUT/tests.txt
  grep -E "^test |relative error|panicked|test result|200 steps" $OUT/tests.txt | head -40
fi
cd /tmp
for r in $(seq $ROUNDS); do
  for k in coop f32; do
    unset TINYGPT_ATTENTION_F32; [ $k = f32 ] && export TINYGPT_ATTENTION_F32=1
    timeout 150 /tmp/tg bench --backend gpu --presets $PRESETS --precision mixed --seconds 2 --json 2>>$OUT/stderr.txt \
      | sed "s/^{/{\"attention\":\"$k\",\"round\":$r,/" >> $OUT/steps.jsonl
    [ $r = 1 ] && timeout 150 /tmp/tg bench --kernels --presets $PRESETS --precision mixed --json 2>>$OUT/stderr.txt \
      | sed "s/^{/{\"attention\":\"$k\",/" >> $OUT/kernels.jsonl
  done
done
unset TINYGPT_ATTENTION_F32
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, re, collections
out = os.environ['OUT']
def preset(name):
    text = open(f"{os.environ['REPO']}/presets/{name}.ron").read()
    get = lambda k: int(re.search(k + r": *(\d+)", text).group(1))
    return get("batch"), get("n_head"), get("d_model") // get("n_head"), get("ctx")
steps = collections.defaultdict(list)
for line in open(out + '/steps.jsonl'):
    r = json.loads(line)
    steps[r['preset']].append(f"{r['attention']} {r['median_ms']:.3f}")
for p, v in steps.items():
    print(f"step {p:13} ms:", '  '.join(v))
for line in open(out + '/kernels.jsonl'):
    r = json.loads(line)
    b, h, d, t = preset(r['preset'])
    pairs = b * h * t * (t + 1) / 2  # causal (query, key) pairs
    # FLOPs per pair of the products: forward S and P·V (4·D; the coop
    # forward computes S twice, not counted), dK/dV S, dP, dV, dK (8·D),
    # dQ S, dP, dQ (6·D).
    per_pair = {'attention_backward_dkdv': 8 * d, 'attention_backward_dkdv_blocks': 8 * d, 'attention_coop_dkdv': 8 * d,
                'attention_backward_dq_rows': 6 * d, 'attention_backward_dq_blocks': 6 * d, 'attention_coop_dq': 6 * d,
                'attention_forward_rows': 4 * d, 'attention_coop_forward': 4 * d}
    by = collections.defaultdict(lambda: [0.0, 0])
    for row in r['rows']:
        if row['entry'].startswith('attention'):
            by[row['entry']][0] += row['ms']
            by[row['entry']][1] += 1
    for e, (ms, n) in sorted(by.items()):
        fl = per_pair.get(e, 0) * pairs * n
        tf = f"{fl / (ms * 1e-3) / 1e12:6.2f} TFLOP/s" if fl else ""
        print(f"kernel {r['attention']:5} {r['preset']:13} {e:32} {n:3}x {ms:8.4f} ms  {tf}")
    print(f"total  {r['attention']:5} {r['preset']:13} {sum(x['ms'] for x in r['rows']):.3f} ms of kernels")
PY
