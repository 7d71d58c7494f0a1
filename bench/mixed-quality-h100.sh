#!/usr/bin/env bash
# --precision mixed against f32 in quality (issue 51), on the H100 host:
# nanogpt-char's whole run (5000 steps, seed 42, TinyShakespeare) at
# PRECISION (mixed or f32; one per call: each takes about 4-5 minutes),
# one JSON line a step, and where a step's time goes at that precision
# (`bench --kernels`). The binary in .devbin (carry .gl and .devbin).
set -u
. bench/h100-env.sh
P=${PRECISION:-mixed}
STEPS=${STEPS:-5000}
/tmp/tg bench --kernels --precision $P --presets nanogpt-char 2>&1 | tee $OUT/kernels-$P.txt
start=$(date +%s.%N)
/tmp/tg train --preset nanogpt-char --precision $P --steps $STEPS --json --out /tmp/run-$P.safetensors > $OUT/train-$P.jsonl 2> $OUT/train-$P.err
rc=$?
end=$(date +%s.%N)
echo "train $P: exit $rc, $(awk "BEGIN{print $end - $start}") s wall for $STEPS steps" | tee $OUT/wall-$P.txt
tail -3 $OUT/train-$P.err
grep -o '"val_loss":[0-9.]*' $OUT/train-$P.jsonl | sort -t: -k2 -g | head -1 | sed "s/^/best /"
echo "skipped steps: $(grep -c "\"skipped\":true" $OUT/train-$P.jsonl)"
