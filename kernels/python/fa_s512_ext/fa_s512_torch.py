"""The seed's kernel as its users call it: ``fa_s512(Q, K, V, causal, scale)`` from a PyTorch
extension built with ``torch.utils.cpp_extension.load`` (cached by PyTorch after the first
build). ``build`` is the manifests' setup callable."""

import os

import torch
from torch.utils.cpp_extension import load

_HERE = os.path.dirname(os.path.abspath(__file__))
_KERNELS = os.path.normpath(os.path.join(_HERE, "..", ".."))
_ext = None


def build():
    """Builds (or loads the cached build of) the extension: -lineinfo, so a sanitizer names the
    kernel's source lines."""
    global _ext
    if _ext is None:
        _ext = load(
            name="fa_s512_ext",
            sources=[os.path.join(_HERE, "fa_s512_ext.cu")],
            extra_include_paths=[os.path.join(_KERNELS, "attention"), os.path.join(_KERNELS, "include")],
            extra_cuda_cflags=["-lineinfo", "-O3"],
            verbose=False,
        )
    return _ext


def fa_s512(q, k, v, causal, scale):
    """The extension's entry, as the seed called it."""
    return build().fa_s512(q, k, v, causal, scale)


def fa_s512_smem_from_seq(q, k, v, causal, scale):
    """The wrapper with its planted host-code bug (fa_s512_ext.cu)."""
    return build().fa_s512_smem_from_seq(q, k, v, causal, scale)
