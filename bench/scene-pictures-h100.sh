#!/usr/bin/env bash
# The README's pictures of the scenes: each scene headless on the device
# machine's GPU, the shipped small open, the wide view (no side panels) at
# 1280×720, after enough frames for its numbers to arrive. One binary in
# .devbin/tg.xz, carry .gl and .devbin; the PNGs land in $OUT.
set -u
. bench/h100-env.sh
cd /tmp
shot() { local key=$1; shift
  /tmp/tg app --headless --backend gpu --width 1280 --height 720 --wide --checkpoint small \
    --scene "$key" --screenshot $OUT/scene-$key.png "$@" 2>/dev/null | grep '^{' | cut -c1-300; }
shot walk --walk-beat 14 --frames 240
shot flow --frames 240
shot probe --frames 240
shot model --frames 240
shot attention --frames 240
shot step --step-op 12 --frames 240
shot flash --frames 240
shot correctness --frames 600
shot speedup --bench tiny,small --bench-seconds 2 --frames 1800
ls -la $OUT
