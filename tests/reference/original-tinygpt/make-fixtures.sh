#!/usr/bin/env bash
# The original TinyGPT's files for tests/original.rs, written by its own code:
# make_fixture.cpp (its model, src/) writes original.tinygpt and its logits
# (original.json); its browser/convert_to_fp16.ts (plain JavaScript, copied as
# convert_to_fp16.mjs) writes the weights-only fp16 file its gallery ships.
#   bash tests/reference/original-tinygpt/make-fixtures.sh [OUT_DIR]
# OUT_DIR defaults to tests/fixtures/original. Needs g++ (or $CXX) and node.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../../fixtures/original}"
mkdir -p "$out"
bin="$(mktemp -d)/make_fixture"
"${CXX:-g++}" -std=c++17 -O2 -o "$bin" "$here/make_fixture.cpp" \
    "$here"/src/{tensor,matmul,layernorm,attention,adamw}.cpp
"$bin" "$out/original.tinygpt" "$out/original.json"
node "$here/convert_to_fp16.mjs" "$out/original.tinygpt" "$out/original-fp16.tinygpt" >/dev/null
rm -rf "$(dirname "$bin")"
echo "wrote $out/original.tinygpt, original.json, original-fp16.tinygpt"
