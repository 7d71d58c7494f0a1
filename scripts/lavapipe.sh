# Sourced by .ci/run: makes the Vulkan loader use a lavapipe (Mesa's CPU
# Vulkan driver) that the app's tests can run on.
#
# Why: Debian 12's lavapipe (Mesa 22.3) allocates without end while Bevy 0.20
# draws sprites (they are 2D meshes with a material each since 0.20): the
# headless app grows 110-160 MB a second and draws idle frames 4x slower, so
# the app tests cannot pass in a CI machine's memory. Mesa 25's lavapipe
# holds flat (measured in docs/performance.md, issue 49). So where the
# installed lavapipe is Mesa 22 or older on Debian, this fetches the newer one
# from the release's backports (one .deb, its SHA256 checked against the
# archive's index), unpacks it under ~/.cache/tinygpt-tools (nothing is
# installed into the system; the system's libraries serve it), and points the
# loader at it with VK_DRIVER_FILES for the commands that follow.
#
# Left alone: a VK_DRIVER_FILES or VK_ICD_FILENAMES already set (the user
# chose a driver), machines without dpkg, and a lavapipe of Mesa 23 or newer.

tinygpt_lavapipe() {
    if [ -n "${VK_DRIVER_FILES:-}" ] || [ -n "${VK_ICD_FILENAMES:-}" ]; then
        return 0
    fi
    command -v dpkg-query >/dev/null 2>&1 || return 0
    local installed
    installed="$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null)" || return 0
    local major="${installed%%.*}"
    major="${major#*:}"
    case "$major" in
        ''|*[!0-9]*) return 0 ;;
    esac
    [ "$major" -ge 23 ] && return 0

    local arch codename root index
    arch="$(dpkg --print-architecture)"
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    if [ -z "$codename" ]; then
        echo "lavapipe: Mesa $installed's lavapipe leaks under Bevy 0.20 and this system names no Debian release to fetch a newer one from; install mesa-vulkan-drivers 23 or newer" >&2
        return 1
    fi
    root="${XDG_CACHE_HOME:-$HOME/.cache}/tinygpt-tools/lavapipe"
    mkdir -p "$root"
    # Fetched before: use it, with no network.
    local cached=""
    for cached in "$root"/*/lvp_icd.json; do :; done
    if [ -f "$cached" ]; then
        export VK_DRIVER_FILES="$cached"
        echo "lavapipe: the tests run on the lavapipe in $(dirname "$cached") (Mesa $installed's leaks under Bevy 0.20)"
        return 0
    fi
    index="$(mktemp "$root/index.XXXXXX")"
    local mirror="http://deb.debian.org/debian"
    if ! curl -fsSL --retry 3 "$mirror/dists/$codename-backports/main/binary-$arch/Packages.xz" | xz -dc > "$index"; then
        rm -f "$index"
        echo "lavapipe: Mesa $installed's lavapipe leaks under Bevy 0.20 and the newer one could not be fetched from $mirror ($codename-backports); install mesa-vulkan-drivers 23 or newer, or set VK_DRIVER_FILES to a Vulkan driver" >&2
        return 1
    fi
    # The mesa-vulkan-drivers stanza: its version, file and SHA256.
    local version file sha
    read -r version file sha < <(awk '
        /^Package: / { inside = ($2 == "mesa-vulkan-drivers") }
        inside && /^Version: /  { v = $2 }
        inside && /^Filename: / { f = $2 }
        inside && /^SHA256: /   { s = $2 }
        /^$/ { if (inside && f != "") { print v, f, s; exit } inside = 0 }
        END { if (inside && f != "") print v, f, s }
    ' "$index")
    rm -f "$index"
    if [ -z "${file:-}" ] || [ -z "${sha:-}" ]; then
        echo "lavapipe: $codename-backports has no mesa-vulkan-drivers for $arch; install mesa-vulkan-drivers 23 or newer, or set VK_DRIVER_FILES to a Vulkan driver" >&2
        return 1
    fi
    local dir="$root/$version"
    if [ ! -f "$dir/lvp_icd.json" ]; then
        local work
        work="$(mktemp -d "$root/fetch.XXXXXX")"
        echo "lavapipe: Mesa $installed's lavapipe leaks under Bevy 0.20; fetching Mesa $version's from $codename-backports into $dir"
        if ! curl -fsSL --retry 3 -o "$work/mesa.deb" "$mirror/$file" \
            || ! echo "$sha  $work/mesa.deb" | sha256sum -c --status \
            || ! dpkg-deb -x "$work/mesa.deb" "$work/root"; then
            rm -rf "$work"
            echo "lavapipe: $mirror/$file could not be fetched or did not match the archive's SHA256; try again, or install mesa-vulkan-drivers 23 or newer" >&2
            return 1
        fi
        local lib icd
        lib="$(find "$work/root" -name libvulkan_lvp.so | head -n 1)"
        icd="$(find "$work/root" -name 'lvp_icd*.json' | head -n 1)"
        if [ -z "$lib" ] || [ -z "$icd" ]; then
            rm -rf "$work"
            echo "lavapipe: $file holds no libvulkan_lvp.so and lvp_icd.json; install mesa-vulkan-drivers 23 or newer" >&2
            return 1
        fi
        mkdir -p "$work/out"
        mv "$lib" "$work/out/libvulkan_lvp.so"
        # The package's manifest, pointed at the library by its full path.
        sed 's|"library_path": *"[^"]*"|"library_path": "'"$dir"'/libvulkan_lvp.so"|' "$icd" > "$work/out/lvp_icd.json"
        if [ -e "$dir" ]; then
            rm -rf "$work"
            echo "lavapipe: $dir is there but holds no lvp_icd.json; move it away and run again" >&2
            return 1
        fi
        mv "$work/out" "$dir"
        rm -rf "$work"
    fi
    export VK_DRIVER_FILES="$dir/lvp_icd.json"
    echo "lavapipe: the tests run on Mesa $version's lavapipe ($VK_DRIVER_FILES)"
}
