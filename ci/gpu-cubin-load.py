"""Loads every cubin in a folder on the local GPU through the driver API (ctypes, no CUDA
toolkit): shows whether cubins built elsewhere (e.g. by a newer NVRTC from the PyPI wheels)
load on this driver. For each module it also looks up every shipped manifest's entry name.

    python3 ci/gpu-cubin-load.py DIR [KERNELS_DIR]

Prints one line per failure and a summary line last; exit 1 when any cubin fails to load."""
import ctypes
import glob
import os
import re
import sys

cuda = ctypes.CDLL("libcuda.so.1")


def check(what, rc):
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError(f"{what}: {name.value.decode() if name.value else rc}")


def main():
    folder = sys.argv[1]
    kernels = sys.argv[2] if len(sys.argv) > 2 else "kernels"
    entries = set()
    for toml in glob.glob(os.path.join(kernels, "**", "*.toml"), recursive=True):
        m = re.search(r'^entry\s*=\s*"([^"]+)"', open(toml).read(), re.M)
        if m:
            entries.add(m.group(1))
    check("cuInit", cuda.cuInit(0))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    version = ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(version))
    loaded = failed = with_entry = 0
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.cubin"), recursive=True)):
        image = open(path, "rb").read()
        module = ctypes.c_void_p()
        rc = cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(image))
        if rc != 0:
            failed += 1
            try:
                check("cuModuleLoadData", rc)
            except RuntimeError as e:
                print(f"FAILED {os.path.basename(path)}: {e}")
            continue
        loaded += 1
        func = ctypes.c_void_p()
        if any(cuda.cuModuleGetFunction(ctypes.byref(func), module, e.encode()) == 0 for e in entries):
            with_entry += 1
        cuda.cuModuleUnload(module)
    v = version.value
    print(f"driver CUDA {v // 1000}.{(v % 1000) // 10}: {loaded} of {loaded + failed} cubins loaded ({with_entry} with a shipped entry point found), {failed} failed")
    return 1 if failed else 0


sys.exit(main())
