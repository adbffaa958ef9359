#!/usr/bin/env python3
"""Packs hilnas binaries with the shared libraries they load, for timing on an
x86-64 host of another CPU model that lacks Debian 12's libraries (issue 35:
the runtime measured on every CPU one gets; bench/portable_bundle.sh).

Debian's libtorch links OpenCV, FFmpeg, oneDNN, ONNX, Gloo, TensorPipe and
ZeroMQ, ~200 MB that hilnas never calls. Each of those libraries is replaced
by a stub of the same soname and symbol versions: its functions trap (ud2),
so a call nobody expected stops the program instead of computing something;
its objects are zeroed storage of their size. oneDNN is the exception:
libtorch's static initialisers create a primitive attribute and check the
handle, so its `*_create`/`*_clone` functions hand out a dummy object and its
functions return dnnl_success; hilnas's runtime never reaches oneDNN (its
matrix products are its own kernels and OpenBLAS), and the bundle's outputs
are checked against the system build's before timing (the shell script).

    portable_bundle.py OUT_DIR BINARY...
"""
import os
import re
import shutil
import subprocess
import sys

STUB = re.compile(r"^(libdnnl\.|libopencv_|libav(codec|format|util|device|filter)\.|"
                  r"libsw(scale|resample)\.|libOpenCL\.|libonnx|libtensorpipe\.|"
                  r"libgloo\.|libzmq\.|libleveldb\.|liblmdb\.)")


def ld_cache():
    cache = {}
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s+(\S+) \(libc6,x86-64.*\) => (\S+)", line)
        if m and m.group(1) not in cache:
            cache[m.group(1)] = m.group(2)
    return cache


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", out)


def closure(binaries, cache):
    keep, stub, todo = {}, {}, [n for b in binaries for n in needed(b)]
    while todo:
        name = todo.pop()
        if name in keep or name in stub:
            continue
        if name not in cache:
            sys.exit(f"portable_bundle: {name} (needed by the binaries) is not in ldconfig's cache")
        if STUB.match(name):
            stub[name] = cache[name]
            continue
        keep[name] = cache[name]
        todo += needed(cache[name])
    return keep, stub


def write_stub(soname, real, out_dir, work):
    """A library named soname defining every dynamic symbol real defines."""
    dnnl = soname.startswith("libdnnl")
    text, data, versions, seen = [".text"], [".data", "stub_object: .zero 4096"], {}, set()
    syms = subprocess.run(["nm", "-D", "-S", "--defined-only", real],
                          capture_output=True, text=True, check=True).stdout
    for line in syms.splitlines():
        f = line.split()
        if len(f) == 4:
            _, size, kind, name = f
        elif len(f) == 3:
            _, kind, name = f
            size = "0"
        else:
            continue
        version = name.split("@")[-1] if "@" in name else None
        name = name.split("@")[0]
        if kind == "A" or name in seen:
            continue
        seen.add(name)
        if version:
            versions.setdefault(version, []).append(name)
        if kind in "TtWiI":
            body = "ud2"
            if dnnl:
                body = "xor %eax,%eax; ret"
                if name.endswith(("_create", "_clone")):
                    body = "leaq stub_object(%rip),%rax; movq %rax,(%rdi); " + body
            text += [f'.globl "{name}"', f'.type "{name}",@function', f'"{name}": {body}']
        else:
            n = max(int(size, 16), 8)
            data += [f'.globl "{name}"', f'.type "{name}",@object', f'.size "{name}",{n}',
                     ".balign 16", f'"{name}": .zero {n}']
    src = os.path.join(work, soname + ".S")
    with open(src, "w") as f:
        f.write("\n".join(text + data) + '\n.section .note.GNU-stack,"",@progbits\n')
    args = ["gcc", "-shared", "-nostdlib", "-o", os.path.join(out_dir, soname), src,
            f"-Wl,-soname,{soname}"]
    if versions:
        script = os.path.join(work, soname + ".map")
        with open(script, "w") as f:
            for v, names in versions.items():
                f.write(v + " {\n  global:\n" + "".join(f'    "{n}";\n' for n in names) + "};\n")
        args.append(f"-Wl,--version-script={script}")
    subprocess.run(args, check=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, binaries = sys.argv[1], sys.argv[2:]
    lib = os.path.join(out, "lib")
    work = os.path.join(out, ".stubs")
    os.makedirs(lib, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    keep, stub = closure(binaries, ld_cache())
    for name, path in sorted(keep.items()):
        shutil.copy(path, os.path.join(lib, name))  # with its mode: the loader must stay executable
    for name, path in sorted(stub.items()):
        write_stub(name, path, lib, work)
    shutil.rmtree(work)
    print(f"{len(keep)} libraries copied, {len(stub)} stubbed: {' '.join(sorted(stub))}")


if __name__ == "__main__":
    main()
