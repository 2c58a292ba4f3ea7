"""What a Python target's exceptions mean (cudafuzz/_call.py), from their structured fields and
never their text: a framework's CUDA error is a finding with its code, Triton's OutOfResources a
launch refused for resources, anything else the target rejecting the case. No GPU needed: the
frameworks' exception types are stood in for by classes of the same names and fields."""

import json
import sys
import types

import pytest

call = pytest.importorskip("cudafuzz._call", reason="cudafuzz is not installed in this interpreter (pip install the wheel)")


class AcceleratorError(RuntimeError):
    """Stands in for torch.AcceleratorError (it has an integer error_code)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.error_code = code


def test_a_torch_cuda_error_is_classified_by_its_code_whatever_it_says():
    report = call.classify(AcceleratorError("CUDA error: anything at all", 716))
    assert report["outcome"] == "cuda_error" and report["api"] == "runtime" and report["code"] == 716


def test_cupy_errors_are_classified_by_status(monkeypatch):
    driver = types.ModuleType("cupy_backends.cuda.api.driver")

    class CUDADriverError(Exception):
        def __init__(self, status):
            super().__init__(f"status {status}")
            self.status = status

    driver.CUDADriverError = CUDADriverError
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.api.driver", driver)
    report = call.classify(CUDADriverError(701))
    assert (report["outcome"], report["api"], report["code"]) == ("cuda_error", "driver", 701)


def test_tritons_out_of_resources_is_a_launch_refused_for_resources(monkeypatch):
    errors = types.ModuleType("triton.runtime.errors")

    class OutOfResources(Exception):
        pass

    errors.OutOfResources = OutOfResources
    monkeypatch.setitem(sys.modules, "triton.runtime.errors", errors)
    assert call.classify(OutOfResources("shared memory, Required: 300000"))["outcome"] == "out_of_resources"


def test_any_other_exception_is_the_target_rejecting_the_case():
    report = call.classify(ValueError("head_dim must be 64"))
    assert report == {"outcome": "rejected", "exception": "builtins.ValueError", "message": "head_dim must be 64"}
    # Text that mentions CUDA does not make a finding.
    assert call.classify(RuntimeError("CUDA error: misaligned address"))["outcome"] == "rejected"


def test_a_call_reports_returns_and_bad_returns_as_json():
    class Arr:
        def __init__(self, shape, dtype):
            self.shape, self.dtype, self.value = shape, dtype, None

        def __setitem__(self, key, value):
            self.value = value

    out = Arr((2, 3), "f32")
    target = call.Target(lambda x: x, convert=lambda view: view)
    ok = json.loads(target.call([Arr((2, 3), "f32"), out], [("tensor", 0)], [], [1]))
    assert ok == {"outcome": "returned"} and out.value is not None
    bad = json.loads(target.call([Arr((2, 4), "f32"), out], [("tensor", 0)], [], [1]))
    assert bad["outcome"] == "bad_return" and "shape [2, 4]" in bad["detail"]
    raised = json.loads(call.Target(lambda: (_ for _ in ()).throw(KeyError("k")), convert=lambda v: v).call([], [], [], []))
    assert raised["outcome"] == "rejected" and raised["exception"] == "builtins.KeyError"


def test_triton_compiles_are_reported_to_the_watchdog_and_earlier_hooks_still_run(monkeypatch):
    """Triton compiles each new specialisation inside the call: its compile hooks tell the
    worker (``_native.compiling``) so that the watchdog gives compiling its own budget."""
    runtime = types.SimpleNamespace(jit_cache_hook=None, jit_post_compile_hook=None)
    seen = []
    runtime.jit_cache_hook = lambda *a, **k: seen.append("user cache hook") or False
    triton = types.ModuleType("triton")
    triton.knobs = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setattr(call, "_watched", False)
    from cudafuzz import _native

    monkeypatch.setattr(_native, "compiling", lambda started: seen.append(("compiling", started)), raising=False)
    call._watch_compiles()
    call._watch_compiles()  # once only: hooks are not stacked per call
    assert runtime.jit_cache_hook(key="k", repr="r", fn=None, compile={}, is_manual_warmup=False, already_compiled=False) is False
    runtime.jit_post_compile_hook(key="k")
    assert seen == [("compiling", True), "user cache hook", ("compiling", False)]
