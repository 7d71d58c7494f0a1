#!/usr/bin/env bash
# What the walk-through's numbers on cells cost on the device machine: the
# same beats with the tour's framing (no numbers) and zoomed in (hundreds
# of numbers), alternated, idle on the shipped small and training xl (its
# numbers retyped at every recompute), at 1920×1080 in presenter mode, 60 Hz
# pace. As bench/walk-h100.sh: one binary in .devbin/tg.xz, carry .gl and
# .devbin; raw lines and a picture in $OUT. XL_ZOOM (default 80, the
# most) is xl's zoom: its cells are far smaller than small's.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
cd /tmp
app() { local label=$1; shift
  /tmp/tg app --headless --backend gpu --width 1920 --height 1080 --fps 60 --presenter "$@" 2>/dev/null \
    | grep '^{' | sed "s/^{/{\"run\":\"$label\",/" >> $OUT/numbers.jsonl; }
for r in 1 2; do
  app "small-beat4-framed-$r" --checkpoint small --scene walk --walk-beat 4 --frames 600
  app "small-beat4-zoom24-$r" --checkpoint small --scene walk --walk-beat 4 --walk-zoom 24 --frames 600
  app "small-beat63-zoom40-$r" --checkpoint small --scene walk --walk-beat 63 --walk-zoom 40 --frames 600 \
    $([ $r = 2 ] && echo --screenshot $OUT/walk-numbers.png)
  app "xl-train-beat14-framed-$r" --preset xl --train --scene walk --walk-beat 14 --frames 900
  app "xl-train-beat14-zoom${XL_ZOOM:-80}-$r" --preset xl --train --scene walk --walk-beat 14 --walk-zoom ${XL_ZOOM:-80} --frames 900
done
python3 - <<'PY' | tee $OUT/summary.txt
import json, os
for line in open(os.environ['OUT'] + '/numbers.jsonl'):
    r = json.loads(line)
    w = r.get('walk') or {}
    print(f"{r['run']}: {r.get('frames')} frames, mean frame {r.get('mean_frame_ms'):.2f} ms, longest {r.get('max_frame_ms'):.1f} ms, "
          f"ms/step {r.get('train_ms_per_step')}, numbers {w.get('numbers')}, zoom {w.get('zoom')}, walk on {w.get('device')}, errors {r.get('errors')}")
PY
