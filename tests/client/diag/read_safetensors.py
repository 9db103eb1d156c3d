#!/usr/bin/env python3
"""Reads a safetensors file with nothing but json and struct (no Kiln code, no safetensors
package) and prints it as JSON: {"metadata": {...}, "tensors": {name: {"dtype", "shape",
"values"}}}. The call-dump tests use it to show that Kiln's dumps are plain safetensors that
any reader understands; values are decoded per dtype (BF16 by widening to F32)."""
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F16": ("e", 2), "I8": ("b", 1), "U8": ("B", 1), "I32": ("i", 4), "I64": ("q", 8)}


def values(dtype, raw):
    if dtype == "BF16":
        count = len(raw) // 2
        halves = struct.unpack("<%dH" % count, raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    code, size = FORMATS[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // size, code), raw))


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_size].decode("utf-8"))
    data = blob[8 + header_size:]
    out = {"metadata": header.pop("__metadata__", {}), "tensors": {}}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if end > len(data):
            raise SystemExit("%s: data_offsets past the end of the file" % name)
        out["tensors"][name] = {"dtype": entry["dtype"], "shape": entry["shape"],
                                "values": values(entry["dtype"], data[begin:end])}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
