#!/usr/bin/env python3
"""png_not_blank.py PNG [MIN_PERCENT] [MIN_COLOURS]: is a screenshot more than a blank page?

Decodes an 8-bit RGB or RGBA PNG with the standard library only (zlib + struct: IHDR, the
IDAT chunks inflated, the five scanline filters undone), takes the most common colour as the
background, and requires that at least MIN_PERCENT % of the pixels (default 2) differ from it
and that at least MIN_COLOURS distinct colours (default 5) appear. Prints
"PERCENT COLOURS WIDTH HEIGHT" and exits 0, or prints why and exits 1.
"""
import struct
import sys
import zlib
from collections import Counter


def fail(msg):
    print(f"png_not_blank: {msg}", file=sys.stderr)
    sys.exit(1)


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: not a PNG file")
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if ihdr is None or not idat:
        fail(f"{path}: no IHDR or no IDAT chunk")
    width, height, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        fail(f"{path}: only 8-bit non-interlaced RGB/RGBA is supported "
             f"(depth {depth}, colour type {ctype}, interlace {interlace})")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        fail(f"{path}: {len(raw)} bytes of image data, expected {height * (stride + 1)}")
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if ftype == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:  # Up
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif ftype == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif ftype != 0:
            fail(f"{path}: row {y} has unknown filter type {ftype}")
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    if len(sys.argv) < 2:
        fail("usage: png_not_blank.py PNG [MIN_PERCENT] [MIN_COLOURS]")
    path = sys.argv[1]
    min_pct = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    min_colours = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    width, height, bpp, rows = decode(path)
    counts = Counter()
    for line in rows:
        # RGB only: a screenshot's alpha is opaque, and it must not split one colour in two
        counts.update(line[i : i + 3] for i in range(0, len(line), bpp))
    total = width * height
    _, bg_count = counts.most_common(1)[0]
    pct = 100.0 * (total - bg_count) / total if total else 0.0
    if pct < min_pct:
        fail(f"{path}: only {pct:.2f} % of pixels differ from the background (< {min_pct} %)")
    if len(counts) < min_colours:
        fail(f"{path}: only {len(counts)} distinct colours (< {min_colours})")
    print(f"{pct:.2f} {len(counts)} {width} {height}")


if __name__ == "__main__":
    main()
