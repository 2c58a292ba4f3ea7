#!/usr/bin/env python3
"""Compile every kernel manifest under kernels/ in every configuration, with no GPU.

For each manifest (*.toml below kernels/, except under include/), each dtype of its contract,
each combination of its [params] values and each requested arch, this compiles the source
the way the harness does: -DCUDAFUZZ=1, -DCUDAFUZZ_DTYPE_<T>=1, every [defines] and [params]
entry as -DNAME=VALUE, the manifest's `options`, -I kernels/include. It prints one line per
build with registers, spills and static shared memory, and exits non-zero if any build fails.

Compilers (either or both):
  --nvcc PATH    nvcc (e.g. from the wheels nvidia-cuda-nvcc + nvidia-cuda-runtime +
                 nvidia-cuda-cccl): `nvcc -c --resource-usage`.
  --nvrtc PATH   libnvrtc.so (wheel nvidia-cuda-nvrtc): compiles through NVRTC exactly as the
                 harness does (no standard library), to a cubin. Add --cuda-include DIR if this
                 NVRTC needs cuda_fp16.h / cuda_bf16.h from a runtime include directory.

Example:
  pip install --target /tmp/nvcc nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-nvrtc
  python3 kernels/tools/compile_check.py --nvcc /tmp/nvcc/nvidia/cu13/bin/nvcc \\
      --nvrtc /tmp/nvcc/nvidia/cu13/lib/libnvrtc.so.13 --arch sm_80 --arch sm_90
"""
import argparse
import ctypes
import itertools
import pathlib
import re
import subprocess
import sys
import tempfile
import tomllib

KERNELS = pathlib.Path(__file__).resolve().parents[1]
DTYPE_DEFINE = {"f16": "CUDAFUZZ_DTYPE_F16", "bf16": "CUDAFUZZ_DTYPE_BF16", "f32": "CUDAFUZZ_DTYPE_F32"}


def configurations(manifest):
    """(label, defines) for every dtype x params combination of one manifest."""
    params = manifest.get("params", {})
    names = sorted(params)
    for dtype in manifest["contract"]["dtypes"]:
        for values in itertools.product(*(params[n] for n in names)):
            defines = {"CUDAFUZZ": 1, DTYPE_DEFINE[dtype]: 1}
            defines.update(manifest.get("defines", {}))
            defines.update(zip(names, values))
            label = " ".join([dtype] + [f"{n}={v}" for n, v in zip(names, values)])
            yield label, defines


def nvcc_build(nvcc, source, defines, options, arch):
    cmd = [nvcc, "-c", f"-arch={arch}", "-lineinfo", "-std=c++17", "--resource-usage",
           f"-I{KERNELS / 'include'}"]
    cmd += [f"-D{k}={v}" for k, v in defines.items()] + list(options)
    with tempfile.TemporaryDirectory() as tmp:
        cmd += [str(source), "-o", str(pathlib.Path(tmp) / "k.o")]
        r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    usage = ""
    m = re.search(r"Used (\d+) registers.*", out)
    if m:
        regs = m.group(1)
        smem = re.search(r"(\d+) bytes smem", out)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
        stack = re.search(r"(\d+) bytes stack frame", out)
        usage = (f"regs={regs} smem_static={smem.group(1) if smem else 0}"
                 f" stack={stack.group(1) if stack else 0}"
                 f" spill={spill.group(1) + '/' + spill.group(2) if spill else '0/0'}")
    return r.returncode == 0, usage, out, " ".join(cmd)


class Nvrtc:
    def __init__(self, path, cuda_include):
        self.lib = ctypes.CDLL(path)
        self.cuda_include = cuda_include

    def build(self, source, defines, options, arch):
        lib = self.lib
        prog = ctypes.c_void_p()
        src = source.read_text().encode()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, source.name.encode(), 0, None, None)
        assert rc == 0, f"nvrtcCreateProgram: {rc}"
        opts = [f"-arch={arch}", "-lineinfo", "--std=c++17", f"-I{KERNELS / 'include'}"]
        if self.cuda_include:
            opts.append(f"-I{self.cuda_include}")
        opts += [f"-D{k}={v}" for k, v in defines.items()] + list(options)
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        cubin = 0
        if rc == 0:
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            cubin = size.value
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc == 0, f"cubin={cubin}B", log.value.decode(errors="replace"), "nvrtc " + " ".join(opts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvcc")
    ap.add_argument("--nvrtc")
    ap.add_argument("--cuda-include")
    ap.add_argument("--arch", action="append", help="repeatable; default sm_80 and sm_90")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each command and its output")
    ap.add_argument("manifests", nargs="*", help="default: every *.toml under kernels/")
    args = ap.parse_args()
    if not args.nvcc and not args.nvrtc:
        ap.error("give --nvcc and/or --nvrtc")
    archs = args.arch or ["sm_80", "sm_90"]
    manifests = [pathlib.Path(m) for m in args.manifests] or sorted(KERNELS.rglob("*.toml"))
    compilers = []
    if args.nvcc:
        compilers.append(("nvcc", lambda *a: nvcc_build(args.nvcc, *a)))
    if args.nvrtc:
        compilers.append(("nvrtc", Nvrtc(args.nvrtc, args.cuda_include).build))
    failed = total = 0
    for path in manifests:
        manifest = tomllib.loads(path.read_text())
        source = path.parent / manifest["source"]
        options = manifest.get("options", [])
        for (label, defines), arch, (cname, build) in itertools.product(
                configurations(manifest), archs, compilers):
            ok, usage, out, cmd = build(source, defines, options, arch)
            total += 1
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {cname:5} {arch} {manifest['name']:14} {label:24} {usage}")
            if args.verbose or not ok:
                print("  $ " + cmd)
                print("".join("  " + line + "\n" for line in out.strip().splitlines()), end="")
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
