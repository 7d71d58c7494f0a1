#!/usr/bin/env bash
# The round trip from tinygpt to multi-GPU PyTorch and back, end to end, on a
# host with PyTorch and GPUs (the README's "Bigger than one machine"):
#   1. selftest: the nanoGPT converter and the checkpoint writer;
#   2. one step from the shipped tiny in tinygpt and in PyTorch: the same loss
#      (the same weights, AdamW moments and next batch);
#   3. the shipped small continued for STEPS steps under torchrun on 1 GPU,
#      then on every GPU (DistributedDataParallel);
#   4. tinygpt resumes the multi-GPU result and trains on; it writes text;
#   5. the fixture tests/torch_roundtrip.rs reads: tiny continued by PyTorch.
# Usage: bash tests/reference/roundtrip.sh TINYGPT OUTDIR [STEPS]
set -euo pipefail
tg=${1:?usage: roundtrip.sh TINYGPT OUTDIR [STEPS]}
out=${2:?usage: roundtrip.sh TINYGPT OUTDIR [STEPS]}
steps=${3:-300}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py="$here/tinygpt_torch.py"
shipped="$root/assets/checkpoints"
mkdir -p "$out"
# NVLink multicast off (it can take a shared host's GPUs down), unbuffered logs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
echo "== $gpus GPU(s): $(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))')"

echo "== 1. selftest"
python3 "$py" selftest --out "$out/from-nanogpt.safetensors"

echo "== 2. one step from the shipped tiny, in tinygpt (CPU) and in PyTorch (GPU)"
"$tg" train --resume "$shipped/tiny.safetensors" --steps 2001 --backend cpu --json \
    --out "$out/tiny-tinygpt-2001.safetensors" | tail -1 | tee "$out/step-tinygpt.json"
python3 "$py" continue --checkpoint "$shipped/tiny.safetensors" --steps 1 --log-every 1 \
    --out "$out/tiny-torch-2001.safetensors" | tee "$out/step-torch.jsonl"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
ours = json.loads(open(f"{out}/step-tinygpt.json").read())["loss"]
torch_loss = next(json.loads(l)["loss"] for l in open(f"{out}/step-torch.jsonl") if '"step"' in l)
rel = abs(ours - torch_loss) / ours
print(json.dumps(dict(step=2001, tinygpt=ours, torch=torch_loss, rel_err=rel)))
assert rel < 1e-4, "the first step's loss differs"
PY

echo "== 3. the shipped small, $steps steps on 1 GPU, then on $gpus"
torchrun --standalone --nproc_per_node 1 "$py" continue --checkpoint "$shipped/small.safetensors" \
    --steps "$steps" --out "$out/small-torch-1gpu.safetensors" | tee "$out/small-1gpu.jsonl"
torchrun --standalone --nproc_per_node "$gpus" "$py" continue --checkpoint "$shipped/small.safetensors" \
    --steps "$steps" --out "$out/small-torch-${gpus}gpu.safetensors" | tee "$out/small-${gpus}gpu.jsonl"

echo "== 4. tinygpt resumes the $gpus-GPU run, trains 100 more steps and writes"
end=$((1500 + steps))
"$tg" train --resume "$out/small-torch-${gpus}gpu.safetensors" --steps $((end + 100)) --json \
    --out "$out/small-back.safetensors" > "$out/small-back.jsonl"
head -1 "$out/small-back.jsonl"
tail -1 "$out/small-back.jsonl"
"$tg" generate --checkpoint "$out/small-back.safetensors" --prompt "ROMEO:" --tokens 200 --seed 1

echo "== 5. the test fixture: tiny continued 200 steps by PyTorch"
python3 "$py" continue --checkpoint "$shipped/tiny.safetensors" --steps 200 \
    --out "$out/tiny-torch.safetensors" | tail -1
