// The Python program the browser tests run: four lines 1.5 s apart (one more on stderr), so output can be seen
// arriving; then a small valid PNG (zlib + struct, no imaging library) of `width` x `height` and a CSV.
export function slowCode({ width, height, csv }) {
  return `import struct, sys, time, zlib

def png(width, height, rgb):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")

for i in range(1, 5):
    print(f"line {i}", flush=True)
    time.sleep(1.5)
print("a note on stderr", file=sys.stderr, flush=True)
with open("out.png", "wb") as f:
    f.write(png(${width}, ${height}, (220, 60, 40)))
with open("out.csv", "w") as f:
    f.write(${JSON.stringify(csv)})
`;
}
