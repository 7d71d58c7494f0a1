#!/usr/bin/env bash
# LoRA fine-tuning against full training, ms per step, on the device (issue 37).
set -u
. bench/h100-env.sh
REPO=$PWD
W=/tmp/w; mkdir -p $W; cd $W
find $REPO/src -name '*.rs' | sort | xargs cat > code.txt
cat code.txt code.txt code.txt > code3.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
for p in xl nanogpt-char massive behemoth; do
  steps=40; [ $p = behemoth ] && steps=12
  /tmp/tg train --preset $p --steps 1 --backend gpu --corpus code3.txt --out base-$p.safetensors --json > /dev/null 2> base-$p.err || { echo "base $p failed"; tail -3 base-$p.err; continue; }
  for t in attn attn,mlp; do
    /tmp/tg finetune --base base-$p.safetensors --corpus code3.txt --targets $t --steps $steps --backend gpu --json --out lora-$p-${t/,/-}.safetensors > $OUT/lora-$p-${t/,/-}.jsonl 2> lora.err || tail -3 lora.err
  done
  /tmp/tg train --resume base-$p.safetensors --corpus code3.txt --steps $((steps+1)) --backend gpu --json --out full-$p.safetensors > $OUT/full-$p.jsonl 2> full.err || tail -3 full.err
  ls -la *.safetensors | awk '{print $5, $9}' >> $OUT/sizes.txt
  rm -f *.safetensors
done
python3 - <<'PY' > $OUT/summary.txt
import json, glob, statistics, os
out=os.environ['OUT']
for f in sorted(glob.glob(out+'/*.jsonl')):
    rows=[json.loads(l) for l in open(f) if l.startswith('{')]
    if not rows: print(os.path.basename(f), 'no rows'); continue
    ms=[r['ms'] for r in rows[3:]] or [r['ms'] for r in rows]
    print(f"{os.path.basename(f):32s} steps {len(rows):3d} median {statistics.median(ms):9.2f} ms  min {min(ms):9.2f}  first loss {rows[0]['loss']:.4f} last {rows[-1]['loss']:.4f}")
PY
cat $OUT/summary.txt
