#!/usr/bin/env python3
"""GPU self-test of the kernels under kernels/, independent of the Rust harness.

Needs a CUDA GPU, the CUDA toolkit's NVRTC (/usr/local/cuda/lib64/libnvrtc.so and
/usr/local/cuda/include), PyTorch and numpy. Compiles each manifest's source with NVRTC exactly as
the manifest says, launches it through the driver API with the manifest's grid / block /
shared_bytes / args expressions, and places every tensor in its own allocation with 0xFF (NaN)
redzones and gaps, like the harness's guarded placement.

usage: gpu_selftest.py MODE [args]
  correct [N]        simple_attn (BLOCK_THREADS 128 and 64) on 8 fixed + N random cases (dtypes,
                     permuted / padded layouts, element-aligned offsets, GQA, causal) vs the GPU
                     reference (error <= 2 x same-precision error + atol, no canary damage); the
                     GPU reference vs torch f64 (ref_o, ref_lse) and vs `lowp_np`, a numpy model of
                     its same-precision formulas (ref_o_lowp, bit for bit)
  chunks             reference: KEY_CHUNK = 2048 vs 64 vs 1 bit for bit, and seq_k > KEY_CHUNK
  bug NAME CASE [BT] one manifest under testing/ on one case of BUG_CASES; prints the outcome
                     (cuda status, unwritten outputs, error, canary damage before/gaps/after)
  perf               GPU time per launch of the reference and simple_attn
  sanitize           one small case through both kernels (run it under compute-sanitizer)
"""
import ctypes
import itertools
import math
import pathlib
import random
import re
import sys
import time
import tomllib

import numpy as np
import torch

KER = pathlib.Path(__file__).resolve().parents[1]
CUDA_INC = "/usr/local/cuda/include"
nvrtc = ctypes.CDLL("/usr/local/cuda/lib64/libnvrtc.so")
cu = ctypes.CDLL("libcuda.so.1")
DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
EB = {"f16": 2, "bf16": 2, "f32": 4}
IDT = {"f16": torch.int16, "bf16": torch.int16, "f32": torch.int32}
DEF = {"f16": "CUDAFUZZ_DTYPE_F16", "bf16": "CUDAFUZZ_DTYPE_BF16", "f32": "CUDAFUZZ_DTYPE_F32"}
R = 256  # redzone bytes


def ck(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA error {rc}")


def nvrtc_compile(src_path, defines, options):
    prog = ctypes.c_void_p()
    src = src_path.read_text().encode()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, src_path.name.encode(), 0, None, None) == 0
    opts = ["-arch=sm_90", "-lineinfo", "--std=c++17", f"-I{KER / 'include'}", f"-I{CUDA_INC}"]
    opts += [f"-D{k}={v}" for k, v in defines.items()] + list(options)
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        raise RuntimeError(f"nvrtc failed: {log.value.decode()}")
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin.raw


def ev(expr, env):
    expr = re.sub(r"\b([qkvo])\.(stride_[bhsd]|offset_bytes)\b", r"\1_\2", expr)
    return int(eval(expr, {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}, env))


class Kernel:
    def __init__(self, manifest, dtype, params=None, extra_defines=None):
        path = KER / manifest
        self.m = tomllib.loads(path.read_text())
        self.dtype = dtype
        self.params = dict(params or {})
        defines = {"CUDAFUZZ": 1, DEF[dtype]: 1}
        defines.update(self.m.get("defines", {}))
        defines.update(extra_defines or {})
        defines.update(self.params)
        self.defines = defines
        cubin = nvrtc_compile(path.parent / self.m["source"], defines, self.m.get("options", []))
        torch.zeros(1, device="cuda")
        mod = ctypes.c_void_p()
        ck(cu.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
        self.fn = ctypes.c_void_p()
        ck(cu.cuModuleGetFunction(ctypes.byref(self.fn), mod, self.m["entry"].encode()), "getfunction")

    def launch(self, env, ptrs, sync=True):
        env = dict(env)
        env.update(self.defines)
        L = self.m["launch"]
        grid = [ev(e, env) for e in L["grid"]]
        block = [ev(e, env) for e in L["block"]]
        smem = ev(L["shared_bytes"], env)
        if smem >= 48 * 1024:
            ck(cu.cuFuncSetAttribute(self.fn, 8, ctypes.c_int(smem)), "setattr")
        vals = []
        for a in L["args"]:
            (kind, expr), = a.items()
            if kind == "ptr":
                vals.append(ctypes.c_void_p(ptrs[expr]))
            elif kind == "i32":
                vals.append(ctypes.c_int(ev(expr, env)))
            elif kind == "i64":
                vals.append(ctypes.c_longlong(ev(expr, env)))
            elif kind == "f32":
                vals.append(ctypes.c_float(env[expr]))
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        ck(cu.cuLaunchKernel(self.fn, *grid, *block, smem, None, params, None), "launch")
        if sync:
            return cu.cuCtxSynchronize()
        return 0


def strides_of(shape, order, pad):
    # order: string like "bhsd", outermost first; pad aligned with order
    idx = {"b": 0, "h": 1, "s": 2, "d": 3}
    st = [0] * 4
    nxt = 1
    for i in range(3, -1, -1):
        d = idx[order[i]]
        st[d] = nxt
        nxt *= shape[d] + pad[i]
    return st


class Placed:
    """A tensor in its own allocation with redzones and 0xFF canaries."""

    def __init__(self, shape, dtype, order="bhsd", pad=(0, 0, 0, 0), offset=0):
        self.shape, self.dtype, self.offset = shape, dtype, offset
        eb = EB[dtype]
        self.strides = strides_of(shape, order, pad)
        span = 1 + sum((shape[i] - 1) * self.strides[i] for i in range(4))
        self.span_bytes = span * eb
        total = R + offset + self.span_bytes + R
        total = -(-total // 8) * 8
        self.buf = torch.full((total,), 0xFF, dtype=torch.uint8, device="cuda")
        self.ptr = self.buf.data_ptr() + R + offset
        assert (R + offset) % eb == 0, "element-aligned offsets only here"
        self.soff = (R + offset) // eb

    def view(self, buf=None, dt=None):
        b = self.buf if buf is None else buf
        return torch.as_strided(b.view(dt or DT[self.dtype]), self.shape, self.strides, self.soff)

    def write(self, x):
        self.view().copy_(x.to(DT[self.dtype]))

    def canary_damage(self):
        """(before, gaps, after) counts of bytes no longer 0xFF outside the logical elements."""
        c = self.buf.clone()
        self.view(c, IDT[self.dtype]).fill_(-1)
        bad = (c != 0xFF).nonzero().flatten().cpu().numpy()
        lo, hi = R + self.offset, R + self.offset + self.span_bytes
        return (int((bad < lo).sum()), int(((bad >= lo) & (bad < hi)).sum()), int((bad >= hi).sum()))


def make_case(dtype, B, Hq, Hkv, Sq, Sk, D, causal, layouts=None, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    layouts = layouts or {}
    shapes = {"q": [B, Hq, Sq, D], "k": [B, Hkv, Sk, D], "v": [B, Hkv, Sk, D], "o": [B, Hq, Sq, D]}
    T = {t: Placed(shapes[t], dtype, **layouts.get(t, {})) for t in "qkvo"}
    data = {}
    for t in "qkv":
        x = torch.randn(shapes[t], generator=g, dtype=torch.float64).to(DT[dtype])
        T[t].write(x.cuda())
        data[t] = x.double()
    env = dict(batch=B, heads_q=Hq, heads_kv=Hkv, seq_q=Sq, seq_k=Sk, head_dim=D, causal=int(causal),
               scale=float(np.float32(1.0 / math.sqrt(D))), elem_bytes=EB[dtype])
    for t in "qkvo":
        for n, s in zip("bhsd", T[t].strides):
            env[f"{t}_stride_{n}"] = s
        env[f"{t}_offset_bytes"] = T[t].offset
    return T, data, env


def torch_ref(data, env):
    q, k, v = data["q"], data["k"], data["v"]
    g = env["heads_q"] // env["heads_kv"]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = env["scale"] * (q @ k.transpose(-1, -2))
    Sq, Sk = env["seq_q"], env["seq_k"]
    i = torch.arange(Sq)[:, None]
    j = torch.arange(Sk)[None, :]
    allowed = (j <= i + Sk - Sq) if env["causal"] else torch.ones(Sq, Sk, dtype=torch.bool)
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    o = p @ v
    return o, lse


def round_np(x, dtype):
    x = x.astype(np.float32)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        u = x.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        return u.astype(np.uint32).view(np.float32)
    return x


def lowp_np(q, k, v, scale, causal, dtype):
    """Same-precision reference of attention_f64.cu, in numpy float32 (no FMA). q [Sq,D]."""
    Sq, D = q.shape
    Sk = k.shape[0]
    q, k, v = q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
    acc = np.zeros((Sq, Sk), np.float32)
    for d in range(D):
        acc = acc + q[:, d:d + 1] * k[None, :, d]
    s = round_np(acc * np.float32(scale), dtype)
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    allowed = (j <= i + Sk - Sq) if causal else np.ones((Sq, Sk), bool)
    s = np.where(allowed, s, np.float32(-np.inf))
    m = s.max(axis=1)
    with np.errstate(invalid="ignore"):
        e = np.exp((s - m[:, None]).astype(np.float64)).astype(np.float32)
    e = np.where(allowed, e, np.float32(0))
    l = np.add.accumulate(e, axis=1, dtype=np.float32)[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = round_np(e / l[:, None], dtype)
    o = np.zeros((Sq, D), np.float32)
    for jj in range(Sk):
        o = o + p[:, jj:jj + 1] * v[None, jj, :]
    o = round_np(o, dtype)
    o[~allowed.any(axis=1)] = 0
    return o


REFS = {}


def run_ref(T, env, dtype, chunk=None):
    key = (dtype, chunk)
    if key not in REFS:
        REFS[key] = Kernel("reference/attention_f64.toml", dtype,
                           extra_defines={"KEY_CHUNK": chunk} if chunk else None)
    B, Hq, Sq, D = env["batch"], env["heads_q"], env["seq_q"], env["head_dim"]
    ro = torch.full((B, Hq, Sq, D), float("nan"), dtype=torch.float64, device="cuda")
    rl = torch.full((B, Hq, Sq, D), float("nan"), dtype=torch.float64, device="cuda")
    rlse = torch.full((B, Hq, Sq), float("nan"), dtype=torch.float64, device="cuda")
    ptrs = {t: T[t].ptr for t in "qkv"}
    ptrs.update(ref_o=ro.data_ptr(), ref_o_lowp=rl.data_ptr(), ref_lse=rlse.data_ptr())
    rc = REFS[key].launch(env, ptrs)
    assert rc == 0, f"reference failed {rc}"
    return ro.cpu(), rl.cpu(), rlse.cpu()


ORDERS = ["bhsd", "bshd", "hbsd", "sbhd", "bhds", "dbhs", "bsdh"]


def random_layout(rng, dtype):
    eb = EB[dtype]
    offs = [o for o in [0, 2, 4, 6, 8, 12, 16, 24, 30, 32, 64] if o % eb == 0]
    if rng.random() < 0.4:
        return dict(offset=rng.choice(offs))
    return dict(order=rng.choice(ORDERS), pad=(0, rng.choice([0, 1, 3, 8]), rng.choice([0, 1, 3]), rng.choice([0, 1, 8])),
                offset=rng.choice(offs))


def check_ref(T, data, env, dtype, ro, rl, rlse, tag):
    o64, lse64 = torch_ref(data, env)
    err64 = (ro - o64).abs().max().item()
    lse_fin = torch.isfinite(lse64)
    assert torch.equal(lse_fin, torch.isfinite(rlse)), f"{tag}: lse finiteness differs"
    lerr = (rlse[lse_fin] - lse64[lse_fin]).abs().max().item() if lse_fin.any() else 0.0
    assert torch.all(rlse[~lse_fin] == float("-inf"))
    # numpy lowp, per (b, h)
    g = env["heads_q"] // env["heads_kv"]
    mism = total = 0
    maxulp = 0
    for b in range(env["batch"]):
        for h in range(env["heads_q"]):
            ln = lowp_np(data["q"][b, h].numpy(), data["k"][b, h // g].numpy(), data["v"][b, h // g].numpy(),
                         np.float32(env["scale"]), env["causal"], dtype)
            got = rl[b, h].numpy().astype(np.float32)
            assert np.array_equal(rl[b, h].numpy(), got.astype(np.float64))
            neq = got.view(np.int32) != ln.view(np.int32)
            neq &= ~((got == 0) & (ln == 0))
            mism += int(neq.sum())
            total += got.size
            if neq.any():
                maxulp = max(maxulp, int(np.abs(got.view(np.int32).astype(np.int64) - ln.view(np.int32).astype(np.int64))[neq].max()))
    scale_o = max(1e-300, o64.abs().max().item())
    ok = err64 <= 1e-12 * scale_o + 1e-300 and lerr <= 1e-10
    return ok, f"ref: f64 err {err64:.2e} lse err {lerr:.2e} lowp mismatches {mism}/{total} (max {maxulp} ulp of f32)"


def mode_correct(n_random):
    rng = random.Random(1234)
    fixed = [
        ("f16", 1, 2, 1, 65, 113, 64, False, None),
        ("f16", 2, 4, 2, 113, 203, 59, True, None),
        ("bf16", 1, 3, 3, 7, 5, 111, True, None),      # seq_q > seq_k causal: fully masked rows
        ("f32", 1, 2, 1, 1, 1, 1, True, None),
        ("f32", 1, 1, 1, 3, 4096, 256, False, None),   # largest simple_attn contract
        ("f16", 1, 2, 2, 17, 33, 256, True, dict(q=dict(order="bhds", pad=(0, 0, 3, 1), offset=6),
                                                 k=dict(order="dbhs", offset=2), v=dict(order="sbhd", pad=(0, 1, 0, 8), offset=30),
                                                 o=dict(order="bsdh", pad=(0, 0, 1, 0), offset=14))),
        ("bf16", 3, 4, 1, 40, 40, 1, True, dict(q=dict(offset=2), o=dict(offset=2))),
        ("f32", 1, 2, 1, 64, 64, 33, False, dict(q=dict(offset=4), k=dict(offset=12), v=dict(offset=20), o=dict(offset=36))),
    ]
    cases = list(fixed)
    for _ in range(n_random):
        dtype = rng.choice(["f16", "bf16", "f32"])
        hkv = rng.choice([1, 2, 3])
        cases.append((dtype, rng.choice([1, 2]), hkv * rng.choice([1, 2, 4]), hkv, rng.choice([1, 2, 17, 64, 113, 128, 200]),
                      rng.choice([1, 3, 64, 113, 203, 256]), rng.choice([1, 2, 8, 32, 59, 64, 96, 111, 128, 160, 256]),
                      rng.random() < 0.5, {t: random_layout(rng, dtype) for t in "qkvo"}))
    kernels = {}
    fails = 0
    worst = 0.0
    for ci, (dtype, B, Hq, Hkv, Sq, Sk, D, causal, lay) in enumerate(cases):
        T, data, env = make_case(dtype, B, Hq, Hkv, Sq, Sk, D, causal, lay, seed=ci)
        ro, rl, rlse = run_ref(T, env, dtype)
        rok, rmsg = check_ref(T, data, env, dtype, ro, rl, rlse, ci)
        for bt in (128, 64):
            key = (dtype, bt)
            if key not in kernels:
                kernels[key] = Kernel("testing/simple_attn.toml", dtype, {"BLOCK_THREADS": bt})
            T["o"].buf.fill_(0xFF)
            rc = kernels[key].launch(env, {t: T[t].ptr for t in "qkvo"})
            o = T["o"].view().double().cpu()
            err = (o - ro).abs().max().item()
            lerr = (rl - ro).abs().max().item()
            atol = {"f16": 1e-4, "bf16": 1e-3, "f32": 1e-6}[dtype]
            dmg = T["o"].canary_damage()
            ok = rc == 0 and not torch.isnan(o).any() and err <= 2 * lerr + atol and dmg == (0, 0, 0) and rok
            ratio = err / (2 * lerr + atol)
            worst = max(worst, ratio)
            fails += not ok
            if not ok or (bt == 128 and ci < 8):
                print(f"{'ok  ' if ok else 'FAIL'} case {ci} {dtype} b{B} h{Hq}/{Hkv} q{Sq} k{Sk} d{D} causal={causal} bt={bt} "
                      f"lay={lay} rc={rc} err={err:.2e} lowp_err={lerr:.2e} ratio={ratio:.3f} canary={dmg} | {rmsg}")
    print(f"correct: {len(cases) * 2 - fails} passed, {fails} failed; worst err/(2*lowp_err+atol) = {worst:.3f}")


def mode_chunks():
    fails = 0
    for dtype, B, Hq, Hkv, Sq, Sk, D, causal in [("f16", 1, 2, 1, 70, 300, 64, True), ("bf16", 2, 2, 2, 9, 257, 33, False),
                                                 ("f32", 1, 1, 1, 5, 129, 8, True)]:
        T, data, env = make_case(dtype, B, Hq, Hkv, Sq, Sk, D, causal, {"k": dict(order="bshd", pad=(0, 1, 0, 2), offset=8)})
        a = run_ref(T, env, dtype)
        b = run_ref(T, env, dtype, chunk=64)
        c = run_ref(T, env, dtype, chunk=1)
        same = all(torch.equal(x.nan_to_num(), y.nan_to_num()) and torch.equal(x.nan_to_num(), z.nan_to_num()) for x, y, z in zip(a, b, c))
        fails += not same
        print(f"{'ok  ' if same else 'FAIL'} chunk 2048 vs 64 vs 1 bitwise: {dtype} q{Sq} k{Sk} d{D} causal={causal}")
    # long rows: seq_k > KEY_CHUNK with the shipped defines
    for dtype, Sq, Sk, D, causal in [("f16", 4, 5000, 64, True), ("f32", 2, 4097, 16, False), ("bf16", 3, 20000, 4, True)]:
        T, data, env = make_case(dtype, 1, 2, 1, Sq, Sk, D, causal)
        ro, rl, rlse = run_ref(T, env, dtype)
        ok, msg = check_ref(T, data, env, dtype, ro, rl, rlse, "long")
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} long row {dtype} q{Sq} k{Sk} d{D} causal={causal}: {msg}")
    print(f"chunks: {fails} failed")


BUG_CASES = {
    "aligned_f16_d64": ("f16", 1, 2, 1, 65, 113, 64, False, None),
    "q_off8_f16_d64": ("f16", 1, 2, 1, 65, 113, 64, False, {"q": dict(offset=8)}),
    "q_off2_f16_d64": ("f16", 1, 2, 1, 65, 113, 64, False, {"q": dict(offset=2)}),
    "q_off4_bf16_d128": ("bf16", 1, 2, 1, 16, 16, 128, True, {"q": dict(offset=4)}),
    "aligned_f16_d59": ("f16", 1, 2, 1, 65, 113, 59, False, None),
    "aligned_f32_d64": ("f32", 2, 4, 2, 33, 70, 64, True, None),
    "q_off4_f32_d64": ("f32", 1, 2, 1, 65, 113, 64, False, {"q": dict(offset=4)}),
    "aligned_bf16_d8_causal": ("bf16", 1, 1, 1, 8, 8, 8, True, None),
    "padded_o_f16": ("f16", 1, 2, 1, 20, 30, 40, False, {"o": dict(pad=(0, 0, 0, 8))}),
}


def mode_bug(name, case, bt=128):
    dtype, B, Hq, Hkv, Sq, Sk, D, causal, lay = BUG_CASES[case]
    T, data, env = make_case(dtype, B, Hq, Hkv, Sq, Sk, D, causal, lay)
    ro, rl, rlse = run_ref(T, env, dtype)
    k = Kernel(f"testing/{name}.toml", dtype, {"BLOCK_THREADS": bt})
    t0 = time.time()
    rc = k.launch(env, {t: T[t].ptr for t in "qkvo"})
    dt = time.time() - t0
    if rc != 0:
        print(f"RESULT {name} {case}: cuda_status={rc} after {dt:.3f}s")
        return
    o = T["o"].view().double().cpu()
    nan = int(torch.isnan(o).sum())
    err = (o.nan_to_num() - ro).abs().max().item()
    lerr = (rl - ro).abs().max().item()
    print(f"RESULT {name} {case}: cuda_status=0 unwritten={nan} err={err:.2e} lowp_err={lerr:.2e} canary(before,gaps,after)={T['o'].canary_damage()}")


class Prepared:
    """A launch with its arguments built once (for timing)."""

    def __init__(self, kern, env, ptrs):
        env = dict(env)
        env.update(kern.defines)
        L = kern.m["launch"]
        self.kern = kern
        self.grid = [ev(e, env) for e in L["grid"]]
        self.block = [ev(e, env) for e in L["block"]]
        self.smem = ev(L["shared_bytes"], env)
        if self.smem >= 48 * 1024:
            ck(cu.cuFuncSetAttribute(kern.fn, 8, ctypes.c_int(self.smem)), "setattr")
        self.vals = []
        for a in L["args"]:
            (kind, expr), = a.items()
            self.vals.append({"ptr": lambda: ctypes.c_void_p(ptrs[expr]), "i32": lambda: ctypes.c_int(ev(expr, env)),
                              "i64": lambda: ctypes.c_longlong(ev(expr, env)), "f32": lambda: ctypes.c_float(env[expr])}[kind]())
        self.params = (ctypes.c_void_p * len(self.vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in self.vals])

    def time_us(self, n=200):
        def go():
            ck(cu.cuLaunchKernel(self.kern.fn, *self.grid, *self.block, self.smem, None, self.params, None), "launch")
        go()
        assert cu.cuCtxSynchronize() == 0
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(torch.cuda.default_stream())
        for _ in range(n):
            go()
        b.record(torch.cuda.default_stream())
        assert cu.cuCtxSynchronize() == 0
        return a.elapsed_time(b) * 1000 / n


def mode_perf():
    for dtype, B, Hq, Hkv, Sq, Sk, D in [("f16", 1, 1, 1, 8, 8, 16), ("f16", 1, 2, 1, 65, 113, 64), ("bf16", 2, 4, 2, 128, 256, 128),
                                         ("f32", 1, 1, 1, 1024, 1024, 128), ("f16", 1, 1, 1, 16, 16384, 128)]:
        T, data, env = make_case(dtype, B, Hq, Hkv, Sq, Sk, D, True)
        run_ref(T, env, dtype)
        ro = torch.empty((B, Hq, Sq, D), dtype=torch.float64, device="cuda")
        rl = torch.empty_like(ro)
        rlse = torch.empty((B, Hq, Sq), dtype=torch.float64, device="cuda")
        ptrs = {t: T[t].ptr for t in "qkvo"}
        ptrs.update(ref_o=ro.data_ptr(), ref_o_lowp=rl.data_ptr(), ref_lse=rlse.data_ptr())
        tr = Prepared(REFS[(dtype, None)], env, ptrs).time_us()
        ts = Prepared(Kernel("testing/simple_attn.toml", dtype, {"BLOCK_THREADS": 128}), env, ptrs).time_us()
        print(f"perf {dtype} b{B} h{Hq}/{Hkv} q{Sq} k{Sk} d{D} causal: reference {tr:.1f} us, simple_attn {ts:.1f} us (GPU time per launch, back to back)")


def mode_sanitize():
    """One small odd-layout case through simple_attn and the reference (run under compute-sanitizer)."""
    for dtype in ("f16", "f32"):
        T, data, env = make_case(dtype, 1, 2, 1, 9, 70, 40, True, {"k": dict(order="bshd", pad=(0, 1, 0, 2), offset=4),
                                                                  "o": dict(order="bhds", pad=(0, 0, 1, 1), offset=12)})
        ro, rl, rlse = run_ref(T, env, dtype)
        run_ref(T, env, dtype, chunk=16)
        for bt in (64, 128):
            rc = Kernel("testing/simple_attn.toml", dtype, {"BLOCK_THREADS": bt}).launch(env, {t: T[t].ptr for t in "qkvo"})
            err = (T["o"].view().double().cpu() - ro).abs().max().item()
            print(f"sanitize run {dtype} bt={bt}: rc={rc} err={err:.2e}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "correct":
        mode_correct(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
    elif mode == "chunks":
        mode_chunks()
    elif mode == "bug":
        mode_bug(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 128)
    elif mode == "perf":
        mode_perf()
    elif mode == "sanitize":
        mode_sanitize()
