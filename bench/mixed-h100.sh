#!/usr/bin/env bash
# --precision mixed (issue 51) on the H100 host, one lease: the tests of the
# tensor cores' training path (tests/gpu.rs's mixed-precision tests, their
# binary built here as .devbin/gpu-tests.xz), the training kernel `coop`
# beside the f32 kernels at the step's shapes (`bench --matmul`), and whole
# training steps in f32 and mixed (`bench --precision f32,mixed`). The
# binaries in .devbin (carry .gl and .devbin). Raw output in $OUT.
set -u
. bench/h100-env.sh
PRESETS=${PRESETS:-small,medium,large,xl,nanogpt-char,mega}
SHAPES=${SHAPES:-16384x384x1536,16384x1536x384,preset:nanogpt-char}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $OUT/device.txt
if [ -f .devbin/gpu-tests.xz ]; then
    xz -dc .devbin/gpu-tests.xz > /tmp/gpu-tests && chmod +x /tmp/gpu-tests
    /tmp/gpu-tests --test-threads=1 --nocapture ${TESTS:-mixed overflow tensor_cores} 2>&1 | tee $OUT/tests.txt
fi
/tmp/tg bench --matmul "$SHAPES" 2>&1 | tee $OUT/matmul.txt
/tmp/tg bench --backend gpu --precision f32,mixed --presets "$PRESETS" --seconds ${SECONDS_EACH:-2} 2>&1 | tee $OUT/steps.txt
# Every product on the tensor cores, where they pay or not (the rule's A/B).
TINYGPT_COOP_EVERYWHERE=1 /tmp/tg bench --backend gpu --precision mixed --presets "$PRESETS" --seconds ${SECONDS_EACH:-2} 2>&1 | tee $OUT/steps-everywhere.txt
