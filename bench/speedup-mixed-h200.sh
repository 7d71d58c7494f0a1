#!/usr/bin/env bash
# The Speedup scene measuring the GPU in f32 and in mixed precision against
# the CPU (issue 51), in the app at 1920×1080, for the binary built here
# (.devbin/tg.xz; carry .gl and .devbin). The JSON line in $OUT/speedup.json,
# the picture in $OUT/speedup-mixed.png.
set -u
. bench/h100-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
cd /tmp
/tmp/tg app --headless --scene speedup --bench ${PRESETS:-small,xl,nanogpt-char} --bench-backends cpu,gpu,gpu-mixed \
  --bench-seconds 1 --frames ${FRAMES:-3000} --fps 60 --width 1920 --height 1080 \
  --force --screenshot $OUT/speedup-mixed.png 2>/dev/null | grep '^{' > $OUT/speedup.json
python3 - <<'PY'
import json, os
r = json.loads(open(os.environ['OUT'] + '/speedup.json').readline())
s = r['speedup']
print('message:', s.get('message'), 'running:', s.get('running'))
for x in s['results']:
    print(f"{x['preset']:>13} {x['backend']:>9} {x['median_ms']:8.2f} ms/step  over CPU {x.get('gpu_over_cpu')}")
PY
