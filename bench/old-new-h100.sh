#!/usr/bin/env bash
# Two builds of tinygpt, alternated on the device machine (issue 49: Bevy
# 0.19 / wgpu 29 against Bevy 0.20 / wgpu 30): `tinygpt bench --backend gpu`
# at small, xl and nanogpt-char, and the app headless training xl in the
# Model scene at 1920×1080, 60 Hz pace. Binaries built here, xz'd into
# .devbin/old.xz and .devbin/new.xz; run with `carry: [".gl", ".devbin"]`.
# Raw JSON lines land in $OUT.
set -u
. bench/h100-env.sh
for b in old new; do xz -dc .devbin/$b.xz > /tmp/tg-$b && chmod +x /tmp/tg-$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
cd /tmp
rounds=${ROUNDS:-2}
for r in $(seq $rounds); do
  for b in old new; do
    /tmp/tg-$b bench --backend gpu --presets small,xl,nanogpt-char --json 2>/dev/null \
      | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" | tee -a $OUT/bench.jsonl
  done
done
for r in $(seq $rounds); do
  for b in old new; do
    /tmp/tg-$b app --headless --preset xl --backend gpu --train --scene model \
      --width 1920 --height 1080 --fps 60 --frames 600 > /tmp/app.json 2>/dev/null & pid=$!
    peak=0
    while kill -0 $pid 2>/dev/null; do
      rss=$(ps -o rss= -p $pid 2>/dev/null | tr -d ' '); [ -n "$rss" ] && [ "$rss" -gt "$peak" ] && peak=$rss
      sleep 0.5
    done
    sed "s/^{/{\"build\":\"$b\",\"round\":$r,\"peak_rss_kb\":$peak,/" /tmp/app.json >> $OUT/app.jsonl
  done
done
python3 - <<'PY' | tee $OUT/summary.txt
import json, os
out = os.environ['OUT']
for line in open(out + '/bench.jsonl'):
    r = json.loads(line)
    print(f"bench {r['build']} round {r['round']} {r.get('preset')}: median {r['median_ms']:.2f} ms/step (min {r['min_ms']:.2f}, {r['steps']} steps) on {r['device']}")
for line in open(out + '/app.jsonl'):
    r = json.loads(line)
    print(f"app xl {r['build']} round {r['round']}: {r.get('train_ms_per_step')} ms/step, steps {r.get('steps')}, "
          f"mean frame {r.get('mean_frame_ms'):.2f} ms, longest {r.get('max_frame_ms'):.1f} ms, peak RSS {r['peak_rss_kb']/1024:.0f} MiB, errors {r.get('errors')}")
PY
