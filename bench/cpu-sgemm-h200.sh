#!/usr/bin/env bash
# The CPU backend's own f32 GEMM (src/cpu/sgemm.rs) on the device machine's
# AVX-512 CPU (issue 55), against matrixmultiply in the same binary
# (TINYGPT_CPU_GEMM=matrixmultiply): first that tiny's README command makes
# the shipped checkpoint bit for bit on both paths, then the GEMM alone at 1
# and 16 threads, then whole steps alternated three times, then the ops.
# The binary is .devbin/tg.xz (carry [".gl", ".devbin"]); raw text in $OUT.
set -u
. bench/h100-env.sh
for p in matrixmultiply avx2 auto; do
  TINYGPT_CPU_GEMM=$p /tmp/tg train --preset tiny --backend cpu --seed 1337 --out /tmp/tiny-$p.safetensors > /dev/null 2>&1
done
python3 - <<'PY' | tee $OUT/bits.txt
import json, struct
def tensors(path):
    b = open(path, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]: 8 + n + v['data_offsets'][1]] for k, v in h.items()
            if k != '__metadata__' and not k.startswith('timelapse.')}
kept = tensors('assets/checkpoints/tiny.safetensors')
for p in ['matrixmultiply', 'avx2', 'auto']:
    made = tensors(f'/tmp/tiny-{p}.safetensors')
    bad = [k for k in kept if made.get(k) != kept[k]]
    print(f"tiny on {p}: {len(kept) - len(bad)} of {len(kept)} tensors bit for bit the shipped" + (f"; differ: {bad[:5]}" if bad else ""))
PY
for t in 1 16; do
  echo "== $t threads" >> $OUT/gemm.txt
  /tmp/tg --threads $t bench --gemm --presets large,xl 2>&1 | grep -v hand-written >> $OUT/gemm.txt
done
for r in 1 2 3; do
  for p in matrixmultiply auto; do
    TINYGPT_CPU_GEMM=$p /tmp/tg --threads 16 bench --backend cpu --presets small,medium,large,xl --seconds 2 --json 2>/dev/null \
      | sed "s/^{/{\"gemm\":\"$p\",\"round\":$r,/" >> $OUT/steps.jsonl
  done
done
/tmp/tg --threads 16 bench --backend cpu --presets large,xl --ops --seconds 2 > $OUT/ops.txt 2>&1
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, statistics
rows = [json.loads(l) for l in open(os.environ['OUT'] + '/steps.jsonl')]
for p in ['small', 'medium', 'large', 'xl']:
    m = {g: statistics.median(r['median_ms'] for r in rows if r['gemm'] == g and r['preset'] == p) for g in ['matrixmultiply', 'auto']}
    each = {g: [round(r['median_ms'], 2) for r in rows if r['gemm'] == g and r['preset'] == p] for g in m}
    print(f"{p}: matrixmultiply {m['matrixmultiply']:.2f} ms {each['matrixmultiply']}, ours {m['auto']:.2f} ms {each['auto']} ({m['matrixmultiply'] / m['auto']:.2f}x)")
PY
cat $OUT/gemm.txt; head -24 $OUT/ops.txt
