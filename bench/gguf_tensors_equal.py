#!/usr/bin/env python3
"""Compares the tensors of two GGUF files by name: type, shape and bytes.

    python3 bench/gguf_tensors_equal.py A.gguf B.gguf

Used to check that `hilnas export --dtype q4_0|q8_0` writes the tensors
`llama-quantize --pure` makes from hilnas's f32 export (bench/quant_exact.sh).
Metadata and tensor order may differ (llama-quantize adds its own keys and
orders tensors its way); tensor data may not. Exit code 1 on any difference.
Standard library only.
"""
import struct
import sys

SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, pos)
    pos += 20

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8 : p + 8 + n].decode("utf-8", "replace"), p + 8 + n

    def value(p, t):
        if t in SCALARS:
            fmt = "<" + SCALARS[t]
            return struct.unpack_from(fmt, data, p)[0], p + struct.calcsize(fmt)
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            out = []
            for _ in range(n):
                v, p = value(p, et)
                out.append(v)
            return out, p
        sys.exit(f"{path}: unknown metadata type {t}")

    meta = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        meta[key], pos = value(pos + 4, t)
    infos = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        (nd,) = struct.unpack_from("<I", data, pos)
        dims = struct.unpack_from("<" + "Q" * nd, data, pos + 4)
        pos += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", data, pos)
        pos += 12
        infos.append((name, dims, t, off))
    align = meta.get("general.alignment", 32)
    start = (pos + align - 1) // align * align
    block = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 8: (32, 34)}
    tensors = {}
    for name, dims, t, off in infos:
        n = 1
        for d in dims:
            n *= d
        per, size = block[t]
        nbytes = n // per * size
        tensors[name] = (t, dims, data[start + off : start + off + nbytes])
    return meta, tensors


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    _, a = read_gguf(sys.argv[1])
    _, b = read_gguf(sys.argv[2])
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'the first' if name in a else 'the second'} file")
            bad += 1
            continue
        (ta, da, xa), (tb, db, xb) = a[name], b[name]
        if ta != tb or da != db:
            print(f"{name}: type {ta} {list(da)} vs {tb} {list(db)}")
            bad += 1
        elif xa != xb:
            diff = sum(1 for i in range(len(xa)) if xa[i] != xb[i])
            print(f"{name}: {diff} of {len(xa)} bytes differ")
            bad += 1
    print(f"{len(a)} tensors compared, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
