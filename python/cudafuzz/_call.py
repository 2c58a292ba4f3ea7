"""The Python half of a Python target's worker: importing the target, making its tensors, calling
it, and saying what came of it as plain data.

cudafuzz's worker (Rust, in ``_native``) calls :func:`setup` once per target and
:meth:`Target.call` once per case. Errors are classified from the structured data the
frameworks expose (an error code, an exception type), never from their messages.
"""

import gc
import importlib
import json
import sys
import traceback


def _attribute(module, path):
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _converter(tensors):
    """The function that turns a cudafuzz view into the target's array type."""
    if tensors == "torch":
        import torch

        return torch.from_dlpack
    if tensors == "cupy":
        import cupy

        return cupy.from_dlpack
    if tensors == "numpy":
        import numpy

        return numpy.from_dlpack
    return lambda view: view


def _use_device(tensors, ordinal):
    """Makes ``ordinal`` the current device of every framework the target has loaded, so that
    what it allocates lands next to the views."""
    if ordinal is None:
        return
    if tensors == "torch" or "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(ordinal)
    if tensors == "cupy" or "cupy" in sys.modules:
        import cupy

        cupy.cuda.Device(ordinal).use()


_watched = False
# Whether a compile started inside the current call and has not reported its end.
_compiling = False


def _watch_compiles():
    """Reports each Triton JIT compile to the worker (``_native.compiling``), so that the
    watchdog gives compiling its own budget: Triton compiles every new specialisation (a pointer
    offset of 2, 4 or 8 bytes is one) and autotunes inside the call. Installed once Triton is
    loaded; a Triton without these hooks keeps the kernel's limit for its compiles."""
    global _watched
    if _watched or "triton" not in sys.modules:
        return
    _watched = True
    runtime = getattr(getattr(sys.modules["triton"], "knobs", None), "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_cache_hook") or not hasattr(runtime, "jit_post_compile_hook"):
        return
    from cudafuzz import _native

    def starting(previous):
        def hook(*args, **kwargs):
            global _compiling
            _compiling = True
            _native.compiling(True)
            skipped = previous(*args, **kwargs) if previous is not None else False
            if skipped:  # an earlier hook took the compile over: nothing is compiled here
                _compiling = False
                _native.compiling(False)
            return skipped

        return hook

    def ended(previous):
        def hook(*args, **kwargs):
            global _compiling
            _compiling = False
            _native.compiling(False)
            return previous(*args, **kwargs) if previous is not None else None

        return hook

    runtime.jit_cache_hook = starting(runtime.jit_cache_hook)
    runtime.jit_post_compile_hook = ended(runtime.jit_post_compile_hook)


def _compile_over():
    """After a call: a compile that started and never reported its end (it raised, and the
    autotuner went on) is over now."""
    global _compiling
    if _compiling:
        _compiling = False
        from cudafuzz import _native

        _native.compiling(False)


def setup(path, module, function, setup_callable, tensors, ordinal):
    """Imports the target and runs its setup; returns ``(Target, None)``, or ``(None, the
    traceback)`` when anything fails."""
    try:
        if path not in sys.path:
            sys.path.insert(0, path)
        convert = _converter(tensors)
        _use_device(tensors, ordinal)
        if setup_callable is not None:
            _attribute(*setup_callable)()
        fn = _attribute(module, function)
        _use_device(tensors, ordinal)
        _watch_compiles()
        if not callable(fn):
            raise TypeError(f"{module}:{function} is a {type(fn).__name__}, not a callable")
        return Target(fn, convert), None
    except BaseException:  # noqa: BLE001 - any failure of the user's setup is reported, not raised
        return None, traceback.format_exc()


def _cuda_error(e):
    """``(api, code)`` when ``e`` is a framework's CUDA error, from its structured fields."""
    code = getattr(e, "error_code", None)
    if type(e).__name__ == "AcceleratorError" and isinstance(code, int):
        return "runtime", code
    status = getattr(e, "status", None)
    for module, api in (("cupy_backends.cuda.api.driver", "driver"), ("cupy_backends.cuda.api.runtime", "runtime")):
        m = sys.modules.get(module)
        if m is None or not isinstance(status, int):
            continue
        kind = getattr(m, "CUDADriverError" if api == "driver" else "CUDARuntimeError", None)
        if kind is not None and isinstance(e, kind):
            return api, status
    return None


def _out_of_resources(e):
    m = sys.modules.get("triton.runtime.errors")
    kind = getattr(m, "OutOfResources", None) if m is not None else None
    return kind is not None and isinstance(e, kind)


def _describe(e):
    return f"{type(e).__module__}.{type(e).__qualname__}: {e}"


def classify(e):
    """What an exception raised by the target means, as the worker's report."""
    cuda = _cuda_error(e)
    if cuda is not None:
        return {"outcome": "cuda_error", "api": cuda[0], "code": cuda[1], "detail": _describe(e)}
    if _out_of_resources(e):
        return {"outcome": "out_of_resources", "detail": _describe(e)}
    return {"outcome": "rejected", "exception": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)}


class Target:
    """A prepared target: the callable and the conversion of views to its arrays."""

    def __init__(self, fn, convert):
        self.fn = fn
        self.convert = convert
        # What the last call made (arrays, its result, an exception and its frames): kept until
        # the worker has seen the context healthy (release). Freeing a framework's tensor
        # after a sticky error makes its allocator raise in a destructor, which aborts the
        # interpreter before the worker can report the error; a poisoned worker exits without
        # freeing anything.
        self.held = None

    def release(self, collect=False):
        """Drops what the last call made (the context is known to be healthy); ``collect`` also
        runs the garbage collector, for views a reference cycle still holds (it costs
        milliseconds with a framework loaded, so only when views are known to be left)."""
        self.held = None
        if collect:
            gc.collect()

    def call(self, views, args, kwargs, returns):
        """Calls the target once; returns the report as JSON."""
        arrays = {}
        result = raised = None

        def array(i):
            if i not in arrays:
                arrays[i] = self.convert(views[i])
            return arrays[i]

        def value(arg):
            kind, x = arg
            return array(x) if kind == "tensor" else x

        _watch_compiles()
        try:
            result = self.fn(*[value(a) for a in args], **{k: value(a) for k, a in kwargs})
            report = self._returned(result, returns, array) if returns else {"outcome": "returned"}
        except Exception as e:  # noqa: BLE001 - every exception is the target's, and classified
            report = classify(e)
            raised = e
        _compile_over()
        # A target that imports Triton inside its first call: its later compiles are reported.
        _watch_compiles()
        self.held = (arrays, result, raised)
        return json.dumps(report)

    def _returned(self, result, returns, array):
        outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(outs) != len(returns):
            return {"outcome": "bad_return", "detail": f"returned {len(outs)} value(s), the manifest's target.returns names {len(returns)}"}
        for i, (index, out) in enumerate(zip(returns, outs)):
            dst = array(index)
            shape = tuple(getattr(out, "shape", ()))
            if shape != tuple(dst.shape):
                return {"outcome": "bad_return", "detail": f"return value {i} has shape {list(shape)}, its output has {list(dst.shape)}"}
            if getattr(out, "dtype", None) != dst.dtype:
                return {"outcome": "bad_return", "detail": f"return value {i} is {getattr(out, 'dtype', type(out).__name__)}, its output is {dst.dtype}"}
            dst[...] = out
        return {"outcome": "returned"}


