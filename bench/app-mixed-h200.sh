#!/usr/bin/env bash
# The app training in f32 and in mixed precision on Bevy's own device
# (issue 51): nanogpt-char and xl in the Model scene at 1920×1080 and 60 fps,
# f32 then mixed, twice, for the binary built here (.devbin/tg.xz; carry .gl
# and .devbin). Raw lines in $OUT/app-mixed.jsonl, a summary in
# $OUT/app-mixed.txt, the last mixed run's picture in $OUT/mixed.png.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
cd /tmp
app() { local run=$1; shift
  /tmp/tg app --headless --backend gpu --width 1920 --height 1080 --fps 60 --train --scene model "$@" 2>/dev/null \
    | grep '^{' | sed "s/^{/{\"run\":\"$run\",/" >> $OUT/app-mixed.jsonl; }
for r in 1 2; do
  for preset in nanogpt-char xl; do
    app "$preset-f32-$r" --preset $preset --precision f32 --frames 600
    app "$preset-mixed-$r" --preset $preset --precision mixed --frames 600 --force --screenshot $OUT/mixed-$preset.png
  done
done
python3 - <<'PY' | tee $OUT/app-mixed.txt
import json, os
for line in open(os.environ['OUT'] + '/app-mixed.jsonl'):
    r = json.loads(line)
    print(f"{r['run']}: {r['backend']}; {r.get('steps')} steps, ms/step {r.get('train_ms_per_step')}, mean frame {r.get('mean_frame_ms'):.2f} ms, last loss {r.get('last_loss')}, errors {r.get('errors')}")
PY
