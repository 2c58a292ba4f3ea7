"""cudafuzz: finds memory-safety and correctness bugs in CUDA kernels.

This package is the command line (``python -m cudafuzz``, or the ``cudafuzz`` script) running
inside your own interpreter, so that kernels you call from Python (PyTorch extensions, Triton
kernels, CuPy ``RawKernel``s) can be fuzzed where they live: a manifest's ``[target]`` names
the callable, and cudafuzz calls it with views of its guarded allocations.
"""

from ._native import __version__, main as _main  # noqa: F401

__all__ = ["__version__", "run"]


def run(*args: str) -> int:
    """Runs a cudafuzz command line (``run("fuzz", "--kernel", "my.toml")``) and returns its
    exit status."""
    return _main(["cudafuzz", *args])
