#!/usr/bin/env bash
# Inside the model's frame rate at nanogpt-char, idle, for one binary built
# here (.devbin/tg.xz; carry .gl and .devbin), labelled $1 (before/after):
# the walk-through's overview and fc beat, One byte and the Model scene,
# twice each; then xl training in the walk-through. Run it once per binary
# on the same warm machine (two binaries do not fit one call's carry).
# Raw lines in $OUT/fps.jsonl, a summary in $OUT/fps.txt.
set -u
label=${1:-now}
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
cd /tmp
app() { local run=$1; shift
  /tmp/tg app --headless --backend gpu --width 1920 --height 1080 --fps 60 "$@" 2>/dev/null | grep '^{' | sed "s/^{/{\"run\":\"$label-$run\",/" >> $OUT/fps.jsonl; }
for r in 1 2; do
  app "walk-overview-$r" --preset nanogpt-char --scene flow --walk-beat 0 --frames 600
  app "walk-fc-$r" --preset nanogpt-char --scene flow --walk-beat 8 --frames 600
  app "path-$r" --preset nanogpt-char --scene path --frames 600
  app "model-$r" --preset nanogpt-char --scene model --frames 600
done
app "walk-xl-train" --preset xl --train --scene flow --walk-beat 14 --frames 900
python3 - <<'PY' | tee $OUT/fps.txt
import json, os
for line in open(os.environ['OUT'] + '/fps.jsonl'):
    r = json.loads(line)
    print(f"{r['run']}: {r.get('frames')} frames, mean frame {r.get('mean_frame_ms'):.2f} ms, longest {r.get('max_frame_ms'):.1f} ms, ms/step {r.get('train_ms_per_step')}, errors {r.get('errors')}")
PY
