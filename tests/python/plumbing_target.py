"""The callable of plumbing.toml: reads every view it is given with a DLPack reader of its own
(ctypes over the capsule, so no framework stands between the producer and the check) and
records what it saw for test_plumbing.py."""

import ctypes

SEEN = []


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def read(view):
    """What a DLPack consumer sees of ``view``: address, shape, strides, dtype, device, and the
    bits of every element in logical (row-major) order."""
    capsule = view.__dlpack__()
    t = DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor")).dl_tensor
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = [t.strides[i] for i in range(t.ndim)]
    size = t.dtype.bits // 8
    base = t.data + t.byte_offset
    bits = []

    def walk(dim, addr):
        if dim == t.ndim:
            bits.append(int.from_bytes(ctypes.string_at(addr, size), "little"))
            return
        for i in range(shape[dim]):
            walk(dim + 1, addr + i * strides[dim] * size)

    walk(0, base)
    seen = {
        "ptr": base,
        "shape": shape,
        "strides": strides,
        "dtype": [t.dtype.code, t.dtype.bits, t.dtype.lanes],
        "device": [t.device.device_type, t.device.device_id],
        "byte_offset": t.byte_offset,
        "bits": bits,
    }
    del capsule  # never consumed: its destructor frees the managed tensor
    return seen


def record(x, bias, index, rows, cols_depth, y, *, bytes, wide, small, unsigned, acc, flag, scale, count, stride):
    views = {"x": x, "bias": bias, "index": index, "y": y, "bytes": bytes, "wide": wide, "small": small, "unsigned": unsigned, "acc": acc}
    SEEN.append(
        {
            "tensors": {name: read(v) for name, v in views.items()},
            "names": {name: v.name for name, v in views.items()},
            "numpy": _numpy_bits(views),
            "scalars": {"rows": rows, "cols_depth": cols_depth, "flag": flag, "scale": scale, "count": count, "stride": stride},
            "types": {"rows": type(rows).__name__, "flag": type(flag).__name__, "scale": type(scale).__name__, "count": type(count).__name__},
        }
    )


def _numpy_bits(views):
    """The same elements read through numpy.from_dlpack, for the types numpy knows (not bf16)."""
    try:
        import numpy
    except ImportError:
        return None
    out = {}
    unsigned = {1: numpy.uint8, 2: numpy.uint16, 4: numpy.uint32, 8: numpy.uint64}
    for name, v in views.items():
        if v.dtype == "bf16":
            continue
        a = numpy.from_dlpack(v)
        out[name] = [int(b) for b in numpy.ascontiguousarray(a).view(unsigned[a.itemsize]).ravel()]
    return out
