#!/usr/bin/env bash
# Inside the model in a mixed-precision run on the device machine (issue
# 51): the narration's line on which of the training step's kernels ran
# each beat's op on the tensor cores. nanogpt-char on the GPU, --precision
# mixed; the headless line's walk.beats[*].training_kernels and
# walk.precision_line at a forward and a backward beat of block 0's qkv
# linear, and at its attention, with screenshots at 1280×720 and 1920×1080.
# The binary is .devbin/tg.xz (carry [".gl", ".devbin"]); output in $OUT.
set -u
. bench/h100-env.sh
shot() { # beat width height name
  /tmp/tg app --headless --preset nanogpt-char --backend gpu --precision mixed --scene flow \
    --walk-beat $1 --frames 90 --width $2 --height $3 --screenshot $OUT/$4.png > $OUT/$4.json 2> $OUT/$4.err
}
shot 3 1280 720 qkv-forward-720
python3 - <<'PY' > $OUT/beats.txt
import json, os
r = json.loads(open(os.environ['OUT'] + '/qkv-forward-720.json').read().strip().splitlines()[-1])
w = r['walk']
print('backend:', r.get('backend'))
for i, b in enumerate(w['beats']):
    print(i, b['pass'], b['kind'], b['node'], ' '.join(b['training_kernels']))
print('line at beat', w['beat'], ':', w.get('precision_line'))
PY
back=$(grep -E "^[0-9]+ backward qkv h.0.attn.qkv" $OUT/beats.txt | cut -d' ' -f1)
att=$(grep -E "^[0-9]+ forward attention h.0.attn.y" $OUT/beats.txt | cut -d' ' -f1)
shot ${back:-40} 1280 720 qkv-backward-720
shot ${back:-40} 1920 1080 qkv-backward-1080
shot ${att:-5} 1280 720 attention-forward-720
for f in qkv-backward-720 attention-forward-720; do
  python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(sys.argv[1], r['walk']['beat'], r['walk'].get('precision_line'))" $OUT/$f.json >> $OUT/beats.txt
done
cat $OUT/beats.txt; tail -3 $OUT/*.err
