#!/usr/bin/env bash
# Proves that web/build.sh's tool probes hold on a machine that lacks the
# tools: runs `web/build.sh --plan` (probe only, no build) in a copy of the
# files it reads, with wasm-opt and wasm-bindgen hidden from PATH and an empty
# tool root, then with npm hidden as well, then with tools that are present
# at the wrong versions. Under `set -euo pipefail` a probe that assumes its
# tool exists ends the script with 127 (issue 11); here it fails this check.
# Last, the size bound's setting (TINYGPT_WASM_MAX_GZ) is said or refused.
# Cheap (about a second), so .ci/run runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A copy of what build.sh reads, without web/tools/node_modules.
mkdir -p "$tmp/repo/web/tools"
cp Cargo.lock "$tmp/repo/"
cp web/build.sh "$tmp/repo/web/"
cp web/tools/package.json web/tools/package-lock.json "$tmp/repo/web/tools/"

# A bin folder holding every command on PATH but the hidden ones.
path_without() { # dir hidden-name...
    local dir=$1; shift
    mkdir -p "$dir"
    local IFS=:
    for d in $PATH; do
        [ -d "$d" ] || continue
        for f in "$d"/*; do
            local name=${f##*/}
            [ -x "$f" ] && [ ! -d "$f" ] || continue
            [ -e "$dir/$name" ] && continue
            local skip=0
            for h in "$@"; do [ "$name" = "$h" ] && skip=1; done
            [ "$skip" = 0 ] && ln -s "$f" "$dir/$name"
        done
    done
    # rustup's cargo, as build.sh would find it without PATH's help.
    [ -e "$dir/cargo" ] || ln -s "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" "$dir/cargo"
}

fail=0
check() { # name expected-pattern... -- PATH
    local name=$1; shift
    local patterns=()
    while [ "$1" != -- ]; do patterns+=("$1"); shift; done
    shift
    local out rc=0
    out=$(env PATH="$1" HOME="$tmp/home" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" \
        TINYGPT_TOOLS="$tmp/tools" bash "$tmp/repo/web/build.sh" --plan 2>&1) || rc=$?
    if [ "$rc" != 0 ]; then
        echo "hidden-tools: $name: build.sh --plan exited $rc:"; echo "$out" | sed 's/^/    /'
        fail=1; return
    fi
    for p in "${patterns[@]}"; do
        if ! grep -q -- "$p" <<<"$out"; then
            echo "hidden-tools: $name: expected '$p' in:"; echo "$out" | sed 's/^/    /'
            fail=1; return
        fi
    done
    echo "hidden-tools: $name: ok"
}

hidden="wasm-opt wasm-bindgen wasm-bindgen-test-runner wasm2es6js"
path_without "$tmp/bin-no-tools" $hidden
check "no wasm-opt, no wasm-bindgen" \
    "install wasm-bindgen-cli" "install binaryen (wasm-opt) from the npm registry" -- "$tmp/bin-no-tools"

if [ -e "$tmp/bin-no-tools/npm" ]; then
    path_without "$tmp/bin-no-npm" $hidden npm npx
    check "no npm either" "install wasm-bindgen-cli" "install wasm-opt 0.116.1" -- "$tmp/bin-no-npm"
fi

# Tools present at versions build.sh must not use: Debian's binaryen 108, a
# wasm-bindgen that does not match Cargo.lock.
mkdir -p "$tmp/old"
printf '#!/bin/sh\necho "wasm-opt version 108 (version_108)"\n' >"$tmp/old/wasm-opt"
printf '#!/bin/sh\necho "wasm-bindgen 0.2.1"\n' >"$tmp/old/wasm-bindgen"
chmod +x "$tmp/old/"*
check "old versions" "install wasm-bindgen-cli" "found: 0.2.1" "found: 108" -- "$tmp/old:$tmp/bin-no-tools"

# TINYGPT_SKIP_WASM_OPT=1 is honoured before wasm-opt is probed.
out=$(env PATH="$tmp/bin-no-tools" TINYGPT_TOOLS="$tmp/tools" TINYGPT_SKIP_WASM_OPT=1 \
    bash "$tmp/repo/web/build.sh" --plan 2>&1) || { echo "hidden-tools: skip: exited $?: $out"; fail=1; }
grep -q "skip wasm-opt" <<<"$out" && echo "hidden-tools: TINYGPT_SKIP_WASM_OPT=1: ok" \
    || { echo "hidden-tools: TINYGPT_SKIP_WASM_OPT=1 not honoured: $out"; fail=1; }

# The trainer worker's nightly: without rustup on PATH the plan says the
# worker is left out (pages then train on their own thread), and
# TINYGPT_SKIP_WORKER=1 leaves it out by name.
path_without "$tmp/bin-no-rustup" $hidden rustup
rm -f "$tmp/bin-no-rustup/cargo"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")" >"$tmp/bin-no-rustup/cargo"
chmod +x "$tmp/bin-no-rustup/cargo"
check "no rustup" "build no trainer worker: it needs rustup" -- "$tmp/bin-no-rustup"
TINYGPT_SKIP_WORKER=1 check "TINYGPT_SKIP_WORKER=1" "build no trainer worker (TINYGPT_SKIP_WORKER=1)" -- "$tmp/bin-no-tools"

# The size bound: a number of bytes is taken and said; anything else is
# refused in one line before anything is built.
TINYGPT_WASM_MAX_GZ=7000000 check "TINYGPT_WASM_MAX_GZ=7000000" "over 7000000 bytes gzipped" -- "$tmp/bin-no-tools"
rc=0
out=$(env PATH="$tmp/bin-no-tools" TINYGPT_TOOLS="$tmp/tools" TINYGPT_WASM_MAX_GZ=8MB \
    bash "$tmp/repo/web/build.sh" --plan 2>&1) || rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "TINYGPT_WASM_MAX_GZ='8MB' is not a number" <<<"$out"; then
    echo "hidden-tools: TINYGPT_WASM_MAX_GZ=8MB refused: ok"
else
    echo "hidden-tools: TINYGPT_WASM_MAX_GZ=8MB: expected exit 2 and one line, got $rc: $out"; fail=1
fi

exit $fail
