#!/usr/bin/env bash
# The tensor cores from WGSL (issue 51) against cuBLAS, one lease: our
# `bench --matmul` (the f32 kernels and the cooperative-matrix coop-f16,
# checked against f64 at 256 cells) and cuBLAS f32 and f16 at the same
# shapes. One binary in .devbin/tg.xz (carry .gl and .devbin). Raw output
# in $OUT.
set -u
. bench/h100-env.sh
SHAPES=${SHAPES:-16384x384x1536,16384x1536x384,1024x256x768,4096x4096x4096}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $OUT/device.txt
/tmp/tg bench --matmul "$SHAPES" 2>&1 | tee $OUT/ours.txt
python3 bench/cublas_matmul.py "$SHAPES" 2>&1 | tee $OUT/cublas-f32.txt
python3 bench/cublas_matmul.py "$SHAPES" --f16 2>&1 | tee $OUT/cublas-f16.txt
