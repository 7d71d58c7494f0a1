#!/usr/bin/env python3
"""The web build's icons (web/icons/: icon.svg, icon-192.png, icon-512.png):
a causal attention map, six bytes attending to those before them, drawn as
the Attention scene draws one (PuOr's orange for weight). Pure Python (zlib
and struct), so it needs no imaging library.

    python3 scripts/make-web-icons.py
"""
import struct
import zlib
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "web" / "icons"
N = 6
BACKGROUND = (0x16, 0x18, 0x1D)
EMPTY = (0x2A, 0x2E, 0x38)
# Attention weights of a causal head: each row sums to 1 over the bytes it sees.
WEIGHTS = [[(0.55 if j == i else 0.45 / i if i else 1.0) if j <= i else None for j in range(N)] for i in range(N)]


def colour(w):
    if w is None:
        return EMPTY
    # From the background's grey to PuOr's strongest orange (#b35806) through #fdb863.
    lo, mid, hi = (0x3A, 0x33, 0x2C), (0xFD, 0xB8, 0x63), (0xE0, 0x82, 0x14)
    t = min(1.0, w / 0.55)
    a, b, u = (lo, mid, t / 0.5) if t < 0.5 else (mid, hi, (t - 0.5) / 0.5)
    return tuple(round(x + (y - x) * u) for x, y in zip(a, b))


def cells(size):
    margin, gap = size * 0.12, size * 0.02
    cell = (size - 2 * margin - (N - 1) * gap) / N
    for i in range(N):
        for j in range(N):
            x, y = margin + j * (cell + gap), margin + i * (cell + gap)
            yield x, y, cell, colour(WEIGHTS[i][j])


def png(size):
    pixels = [[BACKGROUND] * size for _ in range(size)]
    for x, y, c, rgb in cells(size):
        for py in range(int(y), int(y + c)):
            for px in range(int(x), int(x + c)):
                pixels[py][px] = rgb
    raw = b"".join(b"\0" + bytes(v for p in row for v in p) for row in pixels)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def svg():
    size = 512
    rects = "".join(
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{c:.1f}" height="{c:.1f}" rx="{c * 0.12:.1f}" fill="#{r:02x}{g:02x}{b:02x}"/>'
        for x, y, c, (r, g, b) in cells(size))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {size} {size}">'
            f'<rect width="{size}" height="{size}" rx="64" fill="#{BACKGROUND[0]:02x}{BACKGROUND[1]:02x}{BACKGROUND[2]:02x}"/>'
            f"{rects}</svg>\n")


OUT.mkdir(parents=True, exist_ok=True)
(OUT / "icon.svg").write_text(svg())
for size in (192, 512):
    (OUT / f"icon-{size}.png").write_bytes(png(size))
print(f"wrote {OUT}/icon.svg, icon-192.png, icon-512.png")
