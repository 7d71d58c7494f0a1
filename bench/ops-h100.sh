#!/usr/bin/env bash
# Where a build's training step spends its time on the device machine, op by
# op (issue 49: Bevy 0.19 / wgpu 29 against Bevy 0.20 / wgpu 30, whose xl
# step was 5% slower). One build per call (.devbin/tg.xz, built here; run
# with `carry: [".gl", ".devbin"]`), the two calls on one warm machine:
#   BUILD=old bash bench/ops-h100.sh   then   BUILD=new bash bench/ops-h100.sh
# `tinygpt bench --ops` (per-op GPU timings, a table) and the plain step (JSON lines),
# ROUNDS times, at PRESETS, into $OUT.
set -u
. bench/h100-env.sh
build=${BUILD:-tg}
presets=${PRESETS:-xl}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
cd /tmp
for r in $(seq ${ROUNDS:-2}); do
  /tmp/tg bench --backend gpu --presets $presets --json 2>/dev/null \
    | sed "s/^{/{\"build\":\"$build\",\"round\":$r,/" | tee -a $OUT/bench-$build.jsonl
  echo "== $build round $r" >> $OUT/ops-$build.txt
  /tmp/tg bench --backend gpu --presets $presets --ops 2>/dev/null >> $OUT/ops-$build.txt
done
cat $OUT/ops-$build.txt
