#!/usr/bin/env bash
# Two builds of tinygpt alternated on the H200 host: training steps
# (`tinygpt bench --backend gpu`) in f32 and in mixed precision at $PRESETS,
# $ROUNDS rounds, then each kernel's time in one step of $KERNEL_PRESETS
# (`bench --kernels`, summed by entry point) for both builds and precisions.
# First, when .devbin/gpu.xz is there, the new build's GPU tests matching
# $TEST_FILTER. Binaries built here, xz'd into .devbin/old.xz and
# .devbin/new.xz; run with `carry: [".gl", ".devbin"]`. Raw JSON lines and
# a summary land in $OUT.
set -u
. bench/h100-env.sh
for b in old new; do xz -dc .devbin/$b.xz > /tmp/tg-$b && chmod +x /tmp/tg-$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/machine.txt
PRESETS=${PRESETS:-small,xl,mega,nanogpt-char}
KERNEL_PRESETS=${KERNEL_PRESETS:-nanogpt-char}
if [ -f .devbin/gpu.xz ] && [ -n "${TEST_FILTER:-}" ]; then
  xz -dc .devbin/gpu.xz > /tmp/gpu-tests && chmod +x /tmp/gpu-tests
  timeout ${TEST_TIMEOUT:-240} /tmp/gpu-tests $TEST_FILTER --test-threads 1 --nocapture > $OUT/tests.txt 2>&1
  echo "tests: exit $?" | tee -a $OUT/tests.txt
  grep -E "^test |relative error|panicked|test result|200 steps" $OUT/tests.txt | head -40
fi
cd /tmp
for r in $(seq ${ROUNDS:-2}); do
  for b in old new; do
    for prec in f32 mixed; do
      timeout 150 /tmp/tg-$b bench --backend gpu --presets $PRESETS --precision $prec --seconds 2 --json 2>>$OUT/stderr.txt \
        | sed "s/^{/{\"build\":\"$b\",\"precision\":\"$prec\",\"round\":$r,/" >> $OUT/steps.jsonl
    done
  done
done
for b in old new; do
  for prec in f32 mixed; do
    timeout 150 /tmp/tg-$b bench --kernels --presets $KERNEL_PRESETS --precision $prec --json 2>>$OUT/stderr.txt \
      | sed "s/^{/{\"build\":\"$b\",\"precision\":\"$prec\",/" >> $OUT/kernels.jsonl
  done
done
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, collections
out = os.environ['OUT']
steps = collections.defaultdict(list)
for line in open(out + '/steps.jsonl'):
    r = json.loads(line)
    steps[(r['preset'], r['precision'])].append(f"{r['build']} {r['median_ms']:.3f}")
for (p, prec), v in steps.items():
    print(f"step {p:13} {prec:5} ms:", '  '.join(v))
by = collections.defaultdict(dict)
for line in open(out + '/kernels.jsonl'):
    r = json.loads(line)
    for row in r['rows']:
        k = (r['preset'], r['precision'], row['family'], row['entry'])
        by[k][r['build']] = by[k].get(r['build'], 0.0) + row['ms']
for k, v in sorted(by.items(), key=lambda kv: -max(kv[1].values())):
    if max(v.values()) >= 0.1:
        print(f"kernel {k[0]:13} {k[1]:5} {k[2]:16} {k[3]:32} old {v.get('old', 0):7.3f}  new {v.get('new', 0):7.3f} ms")
PY
