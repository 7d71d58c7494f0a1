#!/usr/bin/env bash
# Builds the explainer for the browser into web/dist: the app compiled to
# wasm32 (the same code and WGSL kernels as the desktop app), bound to
# JavaScript by wasm-bindgen, shrunk by wasm-opt (binaryen), and this
# folder's index.html. Serve web/dist with any static server (see
# web/README.md).
#
#   bash web/build.sh          build web/dist, installing the tools it lacks
#   bash web/build.sh --plan   only probe the tools and say what a build would
#                              install and use (web/test/hidden-tools.sh runs
#                              this with the tools hidden from PATH)
#
# Every probe for a tool tolerates the tool's absence: this script runs under
# `set -euo pipefail`, where a missing command in a pipeline ends the script.
set -euo pipefail
cd "$(dirname "$0")/.."

plan=0
case "${1:-}" in
    --plan) plan=1 ;;
    '') ;;
    *) echo "web/build.sh: unknown argument '$1' (use --plan, or nothing)" >&2; exit 2 ;;
esac

# What every student downloads (issue 38): the optimised wasm at most 8.5 MB
# gzipped (this round's bound; issue 38's 8 MB was passed by 7 KB when the
# screen reader's picture-in-words came, docs/performance.md), checked at
# the end of every build, so a change that grows it past that is seen where
# it is made. TINYGPT_WASM_MAX_GZ=bytes moves the bound (0: none).
max_gz="${TINYGPT_WASM_MAX_GZ:-8500000}"
case "$max_gz" in
    '' | *[!0-9]*) echo "web/build.sh: TINYGPT_WASM_MAX_GZ='$max_gz' is not a number of bytes (e.g. 8000000, or 0 for no bound)" >&2; exit 2 ;;
esac

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tinygpt-target}"
# cargo is where rustup puts it, when a shell has not added it to PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "web/build.sh: cargo is not on PATH; install rustup (https://rustup.rs); this folder's rust-toolchain.toml then picks Rust 1.99.1" >&2
    exit 1
fi
# The tools this script installs go here (cargo install --root), not into
# ~/.cargo/bin, so a build never changes what the user's shell runs.
tools="${TINYGPT_TOOLS:-$HOME/.cache/tinygpt-tools}"
export PATH="$tools/bin:$PATH"

# The version a tool prints as its Nth word, or nothing when the tool is
# missing or prints something else; never fails.
tool_version() { # tool field
    local out words
    out=$("$1" --version 2>/dev/null) || out=""
    read -r -a words <<<"${out%%$'\n'*}" || true
    printf '%s' "${words[$(($2 - 1))]:-}"
}

# wasm-bindgen's command line must match the wasm-bindgen crate the app links.
bindgen_version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
if [ -z "$bindgen_version" ]; then
    echo "web/build.sh: Cargo.lock names no wasm-bindgen version" >&2
    exit 1
fi
have_bindgen=$(tool_version wasm-bindgen 2)   # "wasm-bindgen 0.2.130"
if [ "$have_bindgen" = "$bindgen_version" ]; then
    bindgen_plan="use wasm-bindgen $bindgen_version from $(command -v wasm-bindgen)"
else
    bindgen_plan="install wasm-bindgen-cli $bindgen_version into $tools (cargo install; about 3 minutes; found: ${have_bindgen:-none})"
fi

# wasm-opt: binaryen 116 or newer. Debian bookworm's binaryen 108 turns
# wasm-bindgen's externref table into a funcref table, and the page then
# fails to start ("WebAssembly.Table.set(): Argument 1 is invalid"), so an
# older one is not used. The npm registry's `binaryen` package (pinned in
# web/tools/package-lock.json) installs in seconds where npm is present;
# without npm, crates.io's `wasm-opt` builds binaryen 116's C++ (~15 min).
min_opt=116
npm_opt=web/tools/node_modules/.bin/wasm-opt
opt_version_ok() { # version
    case "$1" in '' | *[!0-9]*) return 1 ;; esac
    [ "$1" -ge "$min_opt" ]
}
wasm_opt=""
if [ "${TINYGPT_SKIP_WASM_OPT:-0}" = 1 ]; then
    opt_plan="skip wasm-opt (TINYGPT_SKIP_WASM_OPT=1)"
elif opt_version_ok "$(tool_version wasm-opt 3)"; then   # "wasm-opt version 116 (...)"
    wasm_opt=$(command -v wasm-opt)
    opt_plan="use wasm-opt $(tool_version wasm-opt 3) from $wasm_opt"
elif [ -x "$npm_opt" ] && opt_version_ok "$(tool_version "$npm_opt" 3)"; then
    wasm_opt="$npm_opt"
    opt_plan="use wasm-opt $(tool_version "$npm_opt" 3) from $npm_opt"
elif command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
    opt_plan="install binaryen (wasm-opt) from the npm registry into web/tools (npm ci; seconds; found: $(tool_version wasm-opt 3 || true))"
else
    opt_plan="install wasm-opt 0.$min_opt.1 (binaryen $min_opt) into $tools (cargo install; builds C++, ~15 minutes; no npm found)"
fi

# The threaded CPU trainer (issue 55; src/web_trainer.rs, run by
# web/trainer-worker.js): the crate's core without Bevy, compiled again
# with wasm threads, which need the standard library rebuilt with atomics
# (`-Z build-std`): a pinned nightly with its rust-src, installed by
# rustup. The app itself stays on the stable toolchain and one thread.
# TINYGPT_SKIP_WORKER=1 builds without it (every page then trains on its
# own thread); so does a machine without rustup.
worker_toolchain=nightly-2026-10-12
have_worker_toolchain=""
if [ "${TINYGPT_SKIP_WORKER:-0}" = 1 ]; then
    worker_plan="build no trainer worker (TINYGPT_SKIP_WORKER=1): pages train on their own thread"
elif ! command -v rustup >/dev/null 2>&1; then
    worker_plan="build no trainer worker: it needs rustup to install $worker_toolchain (pages train on their own thread)"
else
    installed=$(rustup toolchain list 2>/dev/null) || installed=""
    if grep -q "^$worker_toolchain" <<<"$installed"; then
        have_worker_toolchain=1
        worker_plan="build the threaded trainer worker with $worker_toolchain (installed; about 2 minutes)"
    else
        worker_plan="install $worker_toolchain with rust-src and wasm32 (rustup; about 1 minute), then build the threaded trainer worker (about 2 minutes)"
    fi
fi

echo "web/build.sh: $bindgen_plan"
echo "web/build.sh: $opt_plan"
echo "web/build.sh: $worker_plan"
if [ "$max_gz" = 0 ]; then
    echo "web/build.sh: no bound on the wasm's size (TINYGPT_WASM_MAX_GZ=0)"
else
    echo "web/build.sh: fail if the wasm is over $max_gz bytes gzipped (TINYGPT_WASM_MAX_GZ)"
fi
if [ "$plan" = 1 ]; then
    exit 0
fi

# The pinned toolchain and its wasm32 target (rust-toolchain.toml names
# both; a no-op once installed; needed where rustup's automatic install is
# off). A cargo without rustup must be that version already.
if command -v rustup >/dev/null 2>&1; then
    rustup toolchain install >/dev/null || {
        echo "web/build.sh: rustup could not install the toolchain rust-toolchain.toml pins; run 'rustup toolchain install' in $(pwd) and see what it says" >&2
        exit 1
    }
fi
# Not --locked: wasm-bindgen-cli 0.2.130's own lockfile names a
# webpki-roots (1.0.11) that the registry no longer resolves (seen on a
# fresh machine); its version range builds.
if [ "$have_bindgen" != "$bindgen_version" ]; then
    echo "installing wasm-bindgen-cli $bindgen_version (once; a few minutes)"
    cargo install --root "$tools" wasm-bindgen-cli --version "$bindgen_version"
fi

# For size: opt-level "s", one fat-LTO module and one codegen unit per
# crate (7% smaller gzipped than rustc's 16; docs/performance.md), the
# matmul keeping opt-level 3 (Cargo.toml). Set here, so the native release
# build stays as it is. SIMD128 (issue 38): the CPU fallback's loops
# vectorise 4 lanes wide; every browser with WebGPU has had it since 2023
# (Safari 16.4).
CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
    cargo build --release --target wasm32-unknown-unknown --bin tinygpt

out=web/dist
rm -rf "$out"
mkdir -p "$out"
# The name section (function names, 17 MB) only serves debuggers.
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$out" --out-name tinygpt \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/tinygpt.wasm"
raw=$(stat -c %s "$out/tinygpt_bg.wasm")

# The trainer worker: threads need shared memory (`+atomics`, and the
# linker told so: an imported shared memory of up to 4 GB, a page's most,
# with the thread-local storage symbols wasm-bindgen's thread support
# starts each thread with) and the standard library built with it. Its own target
# folder: its flags and toolchain differ from the app's. opt-level 3, not
# "s": only pages that train on the CPU download it, and speed is its
# point.
worker=0
if [ "${TINYGPT_SKIP_WORKER:-0}" != 1 ] && command -v rustup >/dev/null 2>&1; then
    if [ -z "$have_worker_toolchain" ]; then
        echo "installing $worker_toolchain with rust-src and the wasm32 target (once; for the trainer worker)"
    fi
    rustup toolchain install "$worker_toolchain" --profile minimal --component rust-src --target wasm32-unknown-unknown >/dev/null || {
        echo "web/build.sh: rustup could not install $worker_toolchain (the trainer worker's toolchain); run 'rustup toolchain install $worker_toolchain --component rust-src --target wasm32-unknown-unknown', or build without the worker: TINYGPT_SKIP_WORKER=1 bash web/build.sh" >&2
        exit 1
    }
    CARGO_TARGET_DIR="$CARGO_TARGET_DIR/web-worker" \
        CARGO_PROFILE_RELEASE_OPT_LEVEL=3 CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
        CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128 \
            -C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
            -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size \
            -C link-arg=--export=__tls_align -C link-arg=--export=__tls_base" \
        cargo "+$worker_toolchain" rustc --release --target wasm32-unknown-unknown -Z build-std=std,panic_abort \
        --no-default-features --features worker --lib --crate-type cdylib
    wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
        --out-dir "$out/worker" --out-name tinygpt_worker \
        "$CARGO_TARGET_DIR/web-worker/wasm32-unknown-unknown/release/tinygpt.wasm"
    worker=1
fi

if [ "${TINYGPT_SKIP_WASM_OPT:-0}" != 1 ]; then
    if [ -z "$wasm_opt" ]; then
        if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
            echo "installing binaryen's wasm-opt from the npm registry into web/tools (once; seconds)"
            (cd web/tools && npm ci --no-audit --no-fund --loglevel=error)
            wasm_opt="$npm_opt"
        else
            echo "installing wasm-opt (binaryen $min_opt) from crates.io (once; builds binaryen's C++, ~15 min)"
            cargo install --root "$tools" wasm-opt --version "0.$min_opt.1"
            wasm_opt="$tools/bin/wasm-opt"
        fi
    fi
    # -Oz: smallest code; the features are those rustc's wasm32 target
    # enables by default, and SIMD128 (above).
    "$wasm_opt" -Oz --strip-debug --strip-producers \
        --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
        --enable-mutable-globals --enable-multivalue --enable-reference-types --enable-simd \
        "$out/tinygpt_bg.wasm" -o "$out/tinygpt_bg.opt.wasm"
    mv "$out/tinygpt_bg.opt.wasm" "$out/tinygpt_bg.wasm"
    if [ "$worker" = 1 ]; then
        # -O3 for speed; threads as well (shared memory, atomics).
        "$wasm_opt" -O3 --strip-debug --strip-producers --enable-threads \
            --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
            --enable-mutable-globals --enable-multivalue --enable-reference-types --enable-simd \
            "$out/worker/tinygpt_worker_bg.wasm" -o "$out/worker/tinygpt_worker_bg.opt.wasm"
        mv "$out/worker/tinygpt_worker_bg.opt.wasm" "$out/worker/tinygpt_worker_bg.wasm"
    fi
    opt="after wasm-opt -Oz ($(tool_version "$wasm_opt" 3))"
else
    echo "TINYGPT_SKIP_WASM_OPT=1: the wasm is left as wasm-bindgen wrote it"
    opt="without wasm-opt"
fi
# The gallery's models (the shipped TinyShakespeare ones too) and texts are
# not in the wasm: the page fetches one when it is opened and keeps it in a
# cache named after these files' contents, so a changed gallery is fetched
# anew.
mkdir -p "$out/assets/checkpoints" "$out/assets/gallery" "$out/assets/corpora"
cp assets/checkpoints/*.safetensors "$out/assets/checkpoints/"
cp assets/gallery/*.safetensors "$out/assets/gallery/"
cp assets/corpora/* "$out/assets/corpora/"
stamp=$(cat assets/checkpoints/*.safetensors assets/gallery/*.safetensors assets/corpora/* | sha256sum | cut -c1-12)
# Offline (issue 38): the service worker (web/sw.js) keeps the page, the
# wasm and the icons under names carrying this build's stamp, and a new
# build's worker deletes an earlier build's cache; the manifest makes the
# page installable.
# The CJK font leaves the wasm too: the page fetches it only when Chinese
# is chosen (src/app/language.rs), and keeps it with this build's files.
mkdir -p "$out/fonts"
cp assets/fonts/NotoSansCJKsc-subset.otf assets/fonts/LICENSE-NotoSansCJK.txt "$out/fonts/"
cp web/manifest.webmanifest "$out/"
mkdir -p "$out/icons"
cp web/icons/* "$out/icons/"
worker_files=()
if [ "$worker" = 1 ]; then
    mapfile -t worker_files < <(find "$out/worker" -type f | sort)
    worker_files+=(web/trainer-worker.js)
fi
app_stamp=$(cat "$out/tinygpt.js" "$out/tinygpt_bg.wasm" web/index.html web/sw.js web/manifest.webmanifest web/icons/* "$out/fonts/"* \
    "${worker_files[@]}" | sha256sum | cut -c1-12)
# The service worker keeps the trainer worker's files with the page's.
worker_shell=""
if [ "$worker" = 1 ]; then
    for f in trainer-worker.js worker/tinygpt_worker.js worker/tinygpt_worker_bg.wasm; do
        worker_shell+="\"./$f?v=$app_stamp\", "
    done
    while IFS= read -r f; do worker_shell+="\"./$f\", "; done < <(cd "$out" && find worker/snippets -type f | sort)
fi
for page in index.html sw.js; do
    sed -e "s/__GALLERY_STAMP__/$stamp/g" -e "s/__APP_STAMP__/$app_stamp/g" -e "s/__WORKER__/$worker/g" \
        -e "s#/\*__WORKER_SHELL__\*/#$worker_shell#" "web/$page" > "$out/$page"
done
if [ "$worker" = 1 ]; then
    sed -e "s/__APP_STAMP__/$app_stamp/g" web/trainer-worker.js > "$out/trainer-worker.js"
    worker_gz=$(gzip -9 -c "$out/worker/tinygpt_worker_bg.wasm" | wc -c)
    echo "web/dist: worker/tinygpt_worker_bg.wasm (the threaded trainer) $((worker_gz / 1024)) KiB gzipped"
fi

size=$(stat -c %s "$out/tinygpt_bg.wasm")
gz=$(gzip -9 -c "$out/tinygpt_bg.wasm" | wc -c)
echo "web/dist: tinygpt_bg.wasm $((raw / 1024)) KiB from wasm-bindgen, $((size / 1024)) KiB $opt, $((gz / 1024)) KiB gzipped ($gz bytes)"
# What every student downloads: at most 8.5 MB gzipped (max_gz, above).
if [ "${TINYGPT_SKIP_WASM_OPT:-0}" != 1 ] && [ "$max_gz" != 0 ] && [ "$gz" -gt "$max_gz" ]; then
    echo "web/build.sh: the wasm is $gz bytes gzipped, over the $max_gz a class downloads at most; find what grew it (docs/performance.md, \"What the wasm's code is\"), or raise TINYGPT_WASM_MAX_GZ" >&2
    exit 1
fi
