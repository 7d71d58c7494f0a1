#!/usr/bin/env bash
# Where the tensor cores pay now (issue 51): mixed-precision steps with the
# products on them only where `matmul_tiles::coop_pays` said (`pays`) and
# on every product (`everywhere`, TINYGPT_COOP_EVERYWHERE=1), at $PRESETS,
# $ROUNDS rounds alternated; then ours (f32, and mixed with every product on
# the tensor cores) against PyTorch eager in f32 and under autocast (bf16,
# f16), `bench/vs-pytorch.sh --mixed --no-compile`, in the same lease, into
# $OUT/vs/. The binary in .devbin (tg.xz); run with `carry: [".gl", ".devbin"]`.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
PRESETS=${PRESETS:-small,medium,large,xl,huge,massive,mega,nanogpt-char}
ROUNDS=${ROUNDS:-1}
REPO=$PWD
cd /tmp
for r in $(seq $ROUNDS); do
  for mode in pays everywhere; do
    unset TINYGPT_COOP_EVERYWHERE; [ $mode = everywhere ] && export TINYGPT_COOP_EVERYWHERE=1
    timeout 150 /tmp/tg bench --backend gpu --presets $PRESETS --precision mixed --seconds 2 --json 2>/dev/null \
      | sed "s/^{/{\"mode\":\"$mode\",\"round\":$r,/" >> $OUT/rule.jsonl
  done
done
python3 - <<'PY' | tee $OUT/rule.txt
import json, os, collections
rows = collections.defaultdict(list)
for line in open(os.environ['OUT'] + '/rule.jsonl'):
    r = json.loads(line)
    rows[r['preset']].append((r['mode'], r['median_ms']))
for p, v in rows.items():
    print(f"{p:13}", '  '.join(f"{m} {ms:.3f}" for m, ms in v))
PY
cd $REPO
TINYGPT_COOP_EVERYWHERE=1 TINYGPT=/tmp/tg bash bench/vs-pytorch.sh --mixed --no-compile --runs ${VS_RUNS:-2} --seconds 2 --presets $PRESETS --out $OUT/vs
