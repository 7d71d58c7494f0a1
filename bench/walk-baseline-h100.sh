#!/usr/bin/env bash
# The walk-through against the other scenes on the device machine, idle
# (nanogpt-char: is its frame time the scene's or the preset's?) and
# training xl; as bench/walk-h100.sh (one binary in .devbin/tg.xz, carry
# .gl and .devbin). Raw lines in $OUT.
set -u
. bench/h100-env.sh
cd /tmp
app() { local label=$1; shift
  /tmp/tg app --headless --backend gpu --width 1920 --height 1080 --fps 60 "$@" 2>/dev/null | grep '^{' | sed "s/^{/{\"run\":\"$label\",/" >> $OUT/walk2.jsonl; }
for r in 1 2; do
  app "model-nanogpt-char-idle-$r" --preset nanogpt-char --scene model --frames 600
  app "walk-nanogpt-char-overview-$r" --preset nanogpt-char --scene walk --walk-beat 0 --frames 600
  app "walk-nanogpt-char-fc-$r" --preset nanogpt-char --scene walk --walk-beat 8 --frames 600
  app "flow-nanogpt-char-idle-$r" --preset nanogpt-char --scene flow --frames 600
done
app "model-xl-train" --preset xl --train --scene model --frames 900
app "walk-xl-train" --preset xl --train --scene walk --walk-beat 14 --frames 900
python3 - <<'PY' | tee $OUT/summary2.txt
import json, os
for line in open(os.environ['OUT'] + '/walk2.jsonl'):
    r = json.loads(line)
    print(f"{r['run']}: {r.get('frames')} frames, mean frame {r.get('mean_frame_ms'):.2f} ms, longest {r.get('max_frame_ms'):.1f} ms, ms/step {r.get('train_ms_per_step')}, errors {r.get('errors')}")
PY
