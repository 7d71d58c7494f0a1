#!/usr/bin/env bash
# The 3D walk-through on the device machine (issue 50): the app headless at
# 1920×1080, 60 Hz pace, training xl in the Model scene and in the walk
# scene, alternated (ms/step and frame pace side by side), then
# nanogpt-char's tensors drawn idle (its initial weights, T up to 256,
# C 384, 6 layers) and the shipped small's tour. One binary built here,
# xz'd into .devbin/tg.xz; run with `carry: [".gl", ".devbin"]`. Raw JSON
# lines and two pictures land in $OUT.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
cd /tmp
app() { # label, then the app's arguments
  local label=$1; shift
  /tmp/tg app --headless --backend gpu --width 1920 --height 1080 --fps 60 "$@" 2>/dev/null \
    | grep '^{' | sed "s/^{/{\"run\":\"$label\",/" | tee -a $OUT/walk.jsonl | cut -c1-200
}
for r in 1 2; do
  app "model-xl-$r" --preset xl --train --scene model --frames 900
  app "walk-xl-$r" --preset xl --train --scene walk --walk-beat 14 --frames 900 \
    $([ $r = 2 ] && echo --screenshot $OUT/walk-xl.png)
done
app "walk-nanogpt-char-overview" --preset nanogpt-char --scene walk --walk-beat 0 --frames 600
app "walk-nanogpt-char-fc" --preset nanogpt-char --scene walk --walk-beat 8 --frames 600 --screenshot $OUT/walk-nanogpt-char.png
app "walk-small-tour" --checkpoint small --scene walk --walk-beat 0 --frames 600
python3 - <<'PY' | tee $OUT/summary.txt
import json, os
for line in open(os.environ['OUT'] + '/walk.jsonl'):
    r = json.loads(line)
    w = r.get('walk') or {}
    print(f"{r['run']}: {r.get('frames')} frames, mean frame {r.get('mean_frame_ms'):.2f} ms, longest {r.get('max_frame_ms'):.1f} ms, "
          f"ms/step {r.get('train_ms_per_step')}, step {r.get('step')}, walk step {w.get('step')} on {w.get('device')}, errors {r.get('errors')}")
PY
