#!/usr/bin/env bash
# Writes the UI's fonts into assets/fonts/: DejaVu Sans (the label font)
# cut to what the app draws, and from egui's own (the
# epaint_default_fonts crate, which bevy_egui's `default_fonts` feature
# would compile in whole, 1.4 MB): Ubuntu Light as it is (egui's text),
# Hack cut to Latin and the signs the app prints in monospace, and egui's
# two emoji fonts cut to the icons the app and egui draw (📷 💾 ⏸ ⏭ …).
# The wasm then carries about 0.6 MB (gzipped) less. Run it after adding an
# icon or a sign to the app's texts; tests/i18n.rs fails until the fonts
# cover every character again.
#
# Needs fonttools' pyftsubset (apt-get install fonttools, or pip install
# fonttools), the crate's source (cargo fetch puts it in ~/.cargo) and the
# Noto CJK fonts (apt-get install fonts-noto-cjk).
set -euo pipefail
cd "$(dirname "$0")/.."

fonts="${EPAINT_FONTS:-$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/epaint_default_fonts-0.36.2/fonts 2>/dev/null | head -1)}"
if [ -z "$fonts" ] || [ ! -f "$fonts/Hack-Regular.ttf" ]; then
    echo "scripts/make-ui-fonts.sh: epaint_default_fonts 0.36.2's fonts not found; run cargo fetch, or set EPAINT_FONTS to its fonts/ folder" >&2
    exit 1
fi
if ! command -v pyftsubset >/dev/null 2>&1; then
    echo "scripts/make-ui-fonts.sh: pyftsubset not found; install fonttools (apt-get install fonttools, or pip install fonttools)" >&2
    exit 1
fi
out=assets/fonts
text=$(mktemp)
trap 'rm -f "$text"' EXIT
# Every character the app's code, catalogues and lessons use, and the
# signs egui's own widgets draw (menus, the clipboard, the plot's icons).
cat $(git ls-files 'src/app/*.rs' 'locales/*.ftl' 'scenes/*.ron') >"$text"
printf '⏵⏷⏶⏴📋⟲⚠☀🌙⌘⌃⇧⌥°−…–—·' >>"$text"
common=(--no-hinting --desubroutinize --name-languages='*' --layout-features='*')
# Monospace: Latin, Latin-1 and Extended-A, punctuation, arrows, maths,
# the control pictures (␣) and shapes, and whatever else the texts use.
pyftsubset "$fonts/Hack-Regular.ttf" "${common[@]}" --text-file="$text" \
    --unicodes='U+0020-007E,U+00A0-017F,U+2000-206F,U+2190-21FF,U+2200-22FF,U+2400-243F,U+2500-25FF' \
    --output-file="$out/Hack-subset.ttf"
# The label font (the scenes' labels, and egui's fallback for × · ᵀ √ ␣ ↵):
# DejaVu Sans cut to Latin, Greek, the signs and what the texts use.
pyftsubset assets/fonts/DejaVuSans.ttf "${common[@]}" --text-file="$text" \
    --unicodes='U+0020-007E,U+00A0-024F,U+0370-03FF,U+1D00-1DBF,U+2000-209F,U+2100-214F,U+2190-23FF,U+2400-243F,U+2500-25FF,U+2600-27BF,U+2900-297F' \
    --output-file="$out/DejaVuSans-subset.ttf"
for f in NotoEmoji-Regular emoji-icon-font; do
    pyftsubset "$fonts/$f.ttf" "${common[@]}" --text-file="$text" --output-file="$out/$f-subset.ttf"
done
# The language menu's 中文, drawn in every language: two glyphs of Noto
# Sans CJK SC (the whole subset, scripts/make-cjk-font.sh, loads only for
# Chinese).
noto_cjk="${NOTO_CJK:-/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc}"
if [ ! -f "$noto_cjk" ]; then
    echo "scripts/make-ui-fonts.sh: $noto_cjk not found; install fonts-noto-cjk or set NOTO_CJK to NotoSansCJK-Regular.ttc" >&2
    exit 1
fi
pyftsubset "$noto_cjk" --font-number=2 "${common[@]}" --text='中文' \
    --output-file="$out/NotoSansCJKsc-menu.otf"
cp "$fonts/Ubuntu-Light.ttf" "$out/"
cp "$fonts/UFL.txt" "$out/LICENSE-Ubuntu.txt"
cp "$fonts/Hack-Regular.txt" "$out/LICENSE-Hack.txt"
cp "$fonts/OFL.txt" "$out/LICENSE-NotoEmoji.txt"
cp "$fonts/emoji-icon-font-mit-license.txt" "$out/LICENSE-emoji-icon-font.txt"
ls -l "$out"/NotoSansCJKsc-menu.otf "$out"/DejaVuSans-subset.ttf "$out"/Hack-subset.ttf "$out"/NotoEmoji-Regular-subset.ttf "$out"/emoji-icon-font-subset.ttf "$out"/Ubuntu-Light.ttf
