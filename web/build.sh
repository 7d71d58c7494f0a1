#!/usr/bin/env bash
# Builds the explainer for the browser into web/dist: the app compiled to
# wasm32 (the same code and WGSL kernels as the desktop app), bound to
# JavaScript by wasm-bindgen, shrunk by wasm-opt (binaryen), and this
# folder's index.html. Serve web/dist with any static
# server (see web/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tinygpt-target}"
export PATH="$HOME/.cargo/bin:$PATH"
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true

# wasm-bindgen's command line must match the wasm-bindgen crate the app links.
version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
if [ -z "$version" ]; then
    echo "web/build.sh: Cargo.lock names no wasm-bindgen version" >&2
    exit 1
fi
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }')" != "$version" ]; then
    echo "installing wasm-bindgen-cli $version (once; a few minutes)"
    cargo install wasm-bindgen-cli --version "$version"
fi

# For size: opt-level "s" and one fat-LTO module (the matmul keeps opt-level
# 3; see Cargo.toml). Set here, so the native release build stays as it is.
export CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=fat
cargo build --release --target wasm32-unknown-unknown --bin tinygpt

out=web/dist
rm -rf "$out"
mkdir -p "$out"
# The name section (function names, 17 MB) only serves debuggers.
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$out" --out-name tinygpt \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/tinygpt.wasm"
raw=$(stat -c %s "$out/tinygpt_bg.wasm")

# wasm-opt from binaryen 116 (crates.io's `wasm-opt`, which builds it): Debian
# bookworm's binaryen 108 turns wasm-bindgen's externref table into a funcref
# table, and the page then fails to start ("WebAssembly.Table.set(): Argument
# 1 is invalid"), so it is not used.
opt_version=116
have=$(wasm-opt --version 2>/dev/null | awk '{ print $3 }')
case "$have" in '' | *[!0-9]*) have=0 ;; esac
if [ "$have" -lt "$opt_version" ] && [ "${TINYGPT_SKIP_WASM_OPT:-0}" != 1 ]; then
    echo "installing wasm-opt (binaryen $opt_version) from crates.io (once; builds binaryen's C++, ~15 min)"
    cargo install wasm-opt --version "0.$opt_version.1"
fi
if [ "${TINYGPT_SKIP_WASM_OPT:-0}" != 1 ]; then
    # -Oz: smallest code; the features are those rustc's wasm32 target
    # enables by default.
    wasm-opt -Oz --strip-debug --strip-producers \
        --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
        --enable-mutable-globals --enable-multivalue --enable-reference-types \
        "$out/tinygpt_bg.wasm" -o "$out/tinygpt_bg.opt.wasm"
    mv "$out/tinygpt_bg.opt.wasm" "$out/tinygpt_bg.wasm"
    opt="after wasm-opt -Oz"
else
    echo "TINYGPT_SKIP_WASM_OPT=1: the wasm is left as wasm-bindgen wrote it"
    opt="without wasm-opt"
fi
cp web/index.html "$out/"

size=$(stat -c %s "$out/tinygpt_bg.wasm")
gz=$(gzip -9 -c "$out/tinygpt_bg.wasm" | wc -c)
echo "web/dist: tinygpt_bg.wasm $((raw / 1024)) KiB from wasm-bindgen, $((size / 1024)) KiB $opt, $((gz / 1024)) KiB gzipped"
