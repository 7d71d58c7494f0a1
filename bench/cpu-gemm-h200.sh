#!/usr/bin/env bash
# The CPU backend's GEMM on the device machine's CPU (issue 55): the build
# in .devbin/new.xz (built here, xz'd; run with `carry: [".devbin"]`), its
# large step's ops and the GEMM alone at 1, 8 and 16 threads, then against
# PyTorch's CPU in one lease (bench/vs-pytorch.sh, 5 runs, 16 threads each, small
# to xl). With .devbin/old.xz too (an older build; the two must fit the
# device's 64 MiB carry with the tree) each table is made for both builds.
# Raw lines land in $OUT.
set -u
builds=""
for b in old new; do
  if [ -f .devbin/$b.xz ]; then xz -dc .devbin/$b.xz > /tmp/tg-$b && chmod +x /tmp/tg-$b; builds="$builds $b"; fi
done
{ lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|MHz"; grep -o -w -m1 -E "avx512f|amx_tile" /proc/cpuinfo | sort -u; python3 -c "import torch; print('torch', torch.__version__, torch.backends.mkldnn.is_available())"; } | tee $OUT/machine.txt
presets=small,medium,large,xl
for r in 1 2; do
  for b in $builds; do
    /tmp/tg-$b --threads 16 bench --backend cpu --presets $presets --seconds 2 --json 2>/dev/null \
      | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" | tee -a $OUT/bench.jsonl
  done
done
for b in $builds; do
  for t in 1 8 16; do
    echo "== $b, $t threads" >> $OUT/matmul.txt
    /tmp/tg-$b --threads $t bench --gemm --presets large,xl >> $OUT/matmul.txt 2>&1
  done
  echo "== $b" >> $OUT/ops.txt
  /tmp/tg-$b --threads 16 bench --backend cpu --presets large,xl --ops --seconds 2 >> $OUT/ops.txt 2>&1
done
TINYGPT=/tmp/tg-new bash bench/vs-pytorch.sh --device cpu --threads 16 --runs 5 --seconds 2 --presets $presets --out $OUT/vs
python3 - <<'PY' | tee $OUT/summary.txt
import json, os, statistics
rows = [json.loads(l) for l in open(os.environ['OUT'] + '/bench.jsonl')]
for p in ['small', 'medium', 'large', 'xl']:
    m = {b: statistics.median(r['median_ms'] for r in rows if r['build'] == b and r['preset'] == p) for b in ['old', 'new'] if any(r['build'] == b for r in rows)}
    print(p + ': ' + ', '.join(f"{b} {v:.2f} ms" for b, v in m.items()) + (f" ({m['old'] / m['new']:.2f}x)" if len(m) == 2 else ''))
PY
