#!/usr/bin/env bash
# Writes assets/fonts/NotoSansCJKsc-subset.otf: Noto Sans CJK SC (Regular)
# cut down to the characters the Chinese catalogue and lessons use
# (locales/zh/tinygpt.ftl, scenes/zh/*.ron) and common CJK punctuation, so
# the browser downloads a few hundred KB, and only when Chinese is chosen.
# Run it after changing a Chinese text; tests/i18n.rs fails until the font
# covers every character again.
#
# Needs fonttools' pyftsubset and the Noto CJK fonts (Debian/Ubuntu:
# apt-get install fonttools fonts-noto-cjk). Licence: SIL OFL 1.1
# (assets/fonts/LICENSE-NotoSansCJK.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

source_font="${NOTO_CJK:-/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc}"
if [ ! -f "$source_font" ]; then
    echo "scripts/make-cjk-font.sh: $source_font not found; install fonts-noto-cjk or set NOTO_CJK to NotoSansCJK-Regular.ttc" >&2
    exit 1
fi
if ! command -v pyftsubset >/dev/null 2>&1; then
    echo "scripts/make-cjk-font.sh: pyftsubset not found; install fonttools (apt-get install fonttools, or pip install fonttools)" >&2
    exit 1
fi
text=$(mktemp)
trap 'rm -f "$text"' EXIT
# Every character of the Chinese texts, and CJK punctuation a learner may
# meet in them.
cat locales/zh/tinygpt.ftl scenes/zh/*.ron >"$text"
printf '，。、：；？！“”‘’（）《》【】…—·～　' >>"$text"
# Font 2 of the collection is Simplified Chinese. No hinting (the app
# renders unhinted), no layout features beyond the defaults.
pyftsubset "$source_font" --font-number=2 --text-file="$text" \
    --no-hinting --desubroutinize --name-languages='*' \
    --output-file=assets/fonts/NotoSansCJKsc-subset.otf
ls -l assets/fonts/NotoSansCJKsc-subset.otf
