#!/usr/bin/env bash
# The roofline against the datasheet (issue 54): `tinygpt bench --kernels`
# for small and nanogpt-char, then the Speedup scene's kernel view of small
# headless at 1280×720 and 1920×1080 (presenter). One binary in
# .devbin/tg.xz, carry .gl and .devbin; the PNGs land in $OUT.
set -u
. bench/h100-env.sh
cd /tmp
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
/tmp/tg bench --kernels --presets small,nanogpt-char 2>&1 | tail -40
for size in 1280x720 1920x1080; do
  w=${size%x*}; h=${size#*x}
  extra=""; [ "$w" = 1920 ] && extra="--presenter"
  /tmp/tg app --headless --backend gpu --width $w --height $h --checkpoint small \
    --scene speedup --kernels small --frames 1500 $extra \
    --screenshot $OUT/kernels-$size.png 2>/dev/null | grep '^{' | cut -c1-400
done
ls -la $OUT
