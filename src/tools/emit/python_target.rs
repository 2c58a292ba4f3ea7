//! The part of a Python repro that calls a Python target ([`PY_TARGET`]): a DLPack producer over
//! the repro's allocations (ctypes, so no framework stands between the bytes and the view), the
//! import and setup of the target's module, and one call, classified as the harness classifies
//! it. It reads the data section's `TARGET` and `ALLOCS`; the program ([`super::python_program`])
//! calls it when `TARGET` is set. It precedes the program in the script, whose last line runs
//! `main()`.

/// The target's half of the script: views, import, call.
pub const PY_TARGET: &str = r#"# ======== a Python target: DLPack views of the allocations, and the call ========

DL_TYPES = [(2, 16), (4, 16), (2, 32), (2, 64), (0, 8), (1, 8), (0, 32), (1, 32), (0, 64)]  # (code, bits) per dtype


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_KEPT = []  # every managed tensor handed out lives as long as the script: nothing is freed under a consumer
_NO_DELETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda m: None)


class View:
    """A DLPack producer over one allocation, at the case's exact address, shape, element strides and dtype (as the
    harness hands them to the target)."""

    def __init__(self, ptr, a):
        self.ptr, self.a = ptr, a

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        a, n = self.a, len(self.a["shape"])
        shape, strides = (ctypes.c_int64 * n)(*a["shape"]), (ctypes.c_int64 * n)(*a["strides"])
        code, bits = DL_TYPES[a["dtype"]]
        m = _DLManaged()
        m.dl_tensor = _DLTensor(ctypes.c_void_p(self.ptr), _DLDevice(2, 0), n, _DLDataType(code, bits, 1),
                                ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), 0)
        m.deleter = ctypes.cast(_NO_DELETE, ctypes.c_void_p).value
        _KEPT.append((m, shape, strides))
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(m), b"dltensor", None)


def _attribute(module, path):
    import importlib
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def target_callable(target_path):
    """Imports the target (once) and runs its setup; returns (callable, conversion of a View)."""
    if "fn" in TARGET:
        return TARGET["fn"], TARGET["convert"]
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [target_path] if target_path else [os.path.join(os.getcwd(), TARGET["path"]), os.path.join(here, TARGET["path"])]
    found = next((c for c in candidates if os.path.isdir(c)), None)
    if found is None:
        sys.exit(f"repro: the target's folder {TARGET['path']} is not under the working directory or this file's; give it with --target-path DIR")
    sys.path.insert(0, found)
    api = TARGET["tensors"]
    if api == "torch":
        import torch
        convert = torch.from_dlpack
    elif api == "cupy":
        import cupy
        convert = cupy.from_dlpack
    else:
        convert = lambda v: v  # noqa: E731
    if TARGET["setup"]:
        _attribute(*TARGET["setup"])()
    TARGET["fn"], TARGET["convert"] = _attribute(TARGET["module"], TARGET["function"]), convert
    print(f"target: {TARGET['module']}:{TARGET['function']} from {found} ({api} tensors)", flush=True)
    return TARGET["fn"], convert


def _cuda_error(e):
    """(driver code, name) of a framework's CUDA error, from its structured fields (never its text)."""
    code = getattr(e, "error_code", None)
    if type(e).__name__ == "AcceleratorError" and isinstance(code, int):
        return {9: 1, 98: 1}.get(code, code), f"cudaError {code}"
    status = getattr(e, "status", None)
    if type(e).__name__ in ("CUDADriverError", "CUDARuntimeError") and isinstance(status, int):
        return status, f"{type(e).__name__} {status}"
    return None


def call_target(runner, target_path, what):
    """One call of the target on views of the allocations; the context synchronised after it. A CUDA error is a finding,
    any other exception the target refusing the case (exit 3, as the harness does not judge such a case)."""
    fn, convert = target_callable(target_path)
    arrays = {}

    def array(tensor):
        if tensor not in arrays:
            i = next(k for k, a in enumerate(ALLOCS) if a["program"] == 0 and a["tensor"] == tensor)
            arrays[tensor] = convert(View(runner.ptrs[i] + ALLOCS[i]["data_offset"], ALLOCS[i]))
        return arrays[tensor]

    value = lambda arg: array(arg[1]) if arg[0] == "tensor" else arg[1]  # noqa: E731
    raised = None
    try:
        result = fn(*[value(a) for a in TARGET["args"]], **{k: value(a) for k, a in TARGET["kwargs"]})
        if TARGET["returns"]:
            outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            if len(outs) != len(TARGET["returns"]):
                fail("cuda_error", "cuda_status", f"the target returned {len(outs)} value(s), the manifest names {len(TARGET['returns'])}")
            for tensor, out in zip(TARGET["returns"], outs):
                array(tensor)[...] = out
    except Exception as e:  # noqa: BLE001 - classified below
        raised = e
    code = runner.cuda.lib.cuCtxSynchronize()
    if code:
        cuda_failed(runner.cuda, f"cuCtxSynchronize after the {what}", code, False)
    if raised is not None:
        cuda = _cuda_error(raised)
        if cuda is not None:
            fail(kind_of(cuda[0], True), "cuda_status", f"the target raised a CUDA error ({cuda[1]}): {type(raised).__name__}: {raised}")
            finish()
            sys.stdout.flush()
            os._exit(1)
        if type(raised).__name__ == "OutOfResources":
            fail("launch_rejected", "cuda_status", f"the target's launch was refused for its resources: {raised}")
            finish()
            sys.stdout.flush()
            os._exit(1)
        print(f"repro: rejected by the target: {type(raised).__module__}.{type(raised).__name__}: {raised} (not a finding)", flush=True)
        os._exit(3)


"#;
