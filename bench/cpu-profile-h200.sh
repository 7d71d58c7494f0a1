#!/usr/bin/env bash
# Where the CPU step's time goes, ours beside PyTorch's, on the device
# machine's CPU (issue 55): the machine's core topology, PyTorch's step op by
# op and torch.mm at the linears' shapes (bench/torch_cpu_profile.py), ours
# op by op and the GEMM alone (`tinygpt bench --ops`, `--gemm`), 16 threads
# each, and our GEMM on 8 threads pinned two ways (to tell cores from their
# hyperthreads). The binary is .devbin/tg.xz (run with carry [".gl",
# ".devbin"]); raw text lands in $OUT.
set -u
. bench/h100-env.sh
{ lscpu; for c in 0 1 2 8; do echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null) core $(cat /sys/devices/system/cpu/cpu$c/topology/core_id 2>/dev/null)"; done; } > $OUT/machine.txt 2>&1
presets=${PRESETS:-large,xl}
python3 bench/torch_cpu_profile.py --presets $presets --threads 16 > $OUT/torch.txt 2>&1
/tmp/tg --threads 16 bench --backend cpu --presets $presets --ops --seconds 2 > $OUT/ours-ops.txt 2>&1
/tmp/tg --threads 16 bench --gemm --presets $presets > $OUT/ours-gemm16.txt 2>&1
/tmp/tg --threads 1 bench --gemm --presets $presets > $OUT/ours-gemm1.txt 2>&1
taskset -c 0-7 /tmp/tg --threads 8 bench --gemm --presets large > $OUT/ours-gemm8-cpus0-7.txt 2>&1
taskset -c 0,2,4,6,8,10,12,14 /tmp/tg --threads 8 bench --gemm --presets large > $OUT/ours-gemm8-even.txt 2>&1
python3 - <<'PY' > $OUT/torch-threads.txt 2>&1
import torch, time
for t in (1, 8, 16):
    torch.set_num_threads(t)
    a, b = torch.randn(1536, 192), torch.randn(768, 192)
    for _ in range(5): a @ b.t()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5: a @ b.t(); n += 1
    print(t, "threads: 1536x192x768 A·Bᵀ", round(2*1536*192*768/((time.perf_counter()-t0)/n)/1e9, 1), "GFLOP/s")
PY
cat $OUT/machine.txt | grep -E "Model name|Thread|Core|Socket|NUMA|siblings|MHz|L2|L3"; cat $OUT/torch.txt $OUT/ours-ops.txt $OUT/torch-threads.txt; grep -h "matrixmultiply" $OUT/ours-gemm*.txt | head -60
