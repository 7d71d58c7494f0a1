#!/usr/bin/env bash
# Training's attention backward on the H200 host (issue 51): the blocked
# kernels (attention_backward_dkdv_blocks, attention_backward_dq_blocks)
# against the ones they replace (the 16×16-tile dK/dV, TINYGPT_DKDV_TILES=1;
# the row dQ, TINYGPT_DQ_ROWS=1), alternated in one lease as `old` (both
# replaced ones), `dkdv` (the blocked dK/dV, the row dQ) and `chosen` (what
# the planner picks: the blocked dK/dV, and the blocked dQ below
# kernels::ATTENTION_DQ_ROWS_FROM query rows): whole steps
# (`bench --backend gpu`) and each attention entry point's time in a step
# (`bench --kernels --json`, summed by entry). First `tinygpt correctness`
# (one step, CPU against GPU, every tensor) at small and nanogpt-char.
# PRESETS picks the presets. The binary in .devbin (tg.xz); run with
# `carry: [".gl", ".devbin"]`.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
PRESETS=${PRESETS:-small,xl,nanogpt-char}
export REPO=$PWD
cd /tmp
# One step on the CPU and on the GPU (the blocked kernels) from the same
# weights and batch, every tensor compared.
for p in small nanogpt-char; do
  timeout 120 /tmp/tg correctness --preset $p > $OUT/correctness-$p.txt 2>&1
  echo "correctness $p: exit $?" | tee -a $OUT/correctness-$p.txt
  head -14 $OUT/correctness-$p.txt
done
for r in 1 2; do
  for k in old dkdv chosen; do
    unset TINYGPT_DKDV_TILES TINYGPT_DQ_ROWS
    [ $k = old ] && export TINYGPT_DKDV_TILES=1
    [ $k != chosen ] && export TINYGPT_DQ_ROWS=1
    /tmp/tg bench --backend gpu --presets $PRESETS --json 2>/dev/null \
      | sed "s/^{/{\"kernels\":\"$k\",\"round\":$r,/" >> $OUT/steps.jsonl
    /tmp/tg bench --kernels --presets $PRESETS --json 2>/dev/null \
      | sed "s/^{/{\"kernels\":\"$k\",\"round\":$r,/" >> $OUT/kernels.jsonl
  done
done
unset TINYGPT_DKDV_TILES TINYGPT_DQ_ROWS
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, re, collections
out = os.environ['OUT']
def preset(name):
    text = open(f"{os.environ['REPO']}/presets/{name}.ron").read()
    get = lambda k: int(re.search(k + r": *(\d+)", text).group(1))
    return get("batch"), get("n_head"), get("d_model") // get("n_head"), get("ctx")
for line in open(out + '/steps.jsonl'):
    r = json.loads(line)
    print(f"step {r['kernels']:6} round {r['round']} {r.get('preset'):13} median {r['median_ms']:.3f} ms/step (min {r['min_ms']:.3f})")
for line in open(out + '/kernels.jsonl'):
    r = json.loads(line)
    b, h, d, t = preset(r['preset'])
    pairs = b * h * t * (t + 1) / 2  # causal (query, key) pairs
    # FLOPs per pair: dK/dV recomputes S and dP and accumulates dV and dK
    # (4 products of D), dQ recomputes S and dP and accumulates dQ (3).
    per_pair = {'attention_backward_dkdv': 8 * d, 'attention_backward_dkdv_blocks': 8 * d,
                'attention_backward_dq_rows': 6 * d, 'attention_backward_dq_blocks': 6 * d,
                'attention_forward_rows': 4 * d}
    by = collections.defaultdict(lambda: [0.0, 0])
    for row in r['rows']:
        if row['entry'].startswith('attention'):
            by[row['entry']][0] += row['ms']
            by[row['entry']][1] += 1
    for e, (ms, n) in sorted(by.items()):
        fl = per_pair.get(e, 0) * pairs * n
        tf = f"{fl / (ms * 1e-3) / 1e12:6.2f} TFLOP/s" if fl else ""
        print(f"kernel {r['kernels']:6} round {r['round']} {r['preset']:13} {e:32} {n:3}x {ms:8.4f} ms  {tf}")
    for f in r['families']:
        if 'attention' in f['family']:
            print(f"family {r['kernels']:6} round {r['round']} {r['preset']:13} {f['family']:32} {f['ms']:8.4f} ms  {f['gflops'] / 1e3:6.2f} TFLOP/s")
PY
