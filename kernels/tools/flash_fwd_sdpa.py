#!/usr/bin/env python3
"""flash_fwd (kernels/attention/flash_fwd.cu) against PyTorch scaled_dot_product_attention.

Needs a CUDA GPU (sm_90: gpu_selftest compiles with -arch=sm_90), /usr/local/cuda NVRTC, PyTorch
and numpy. Compiling, loading and launching go through gpu_selftest.py (NVRTC with -DCUDAFUZZ=1,
-DCUDAFUZZ_DTYPE_<T>=1 and every manifest [defines] / chosen [params] entry as -DNAME=VALUE, like
the harness; the driver API; the manifests' grid / block / shared_bytes / args expressions; the
shared-memory opt-in above 48 KB). --dry-run builds the case / shape lists and the configurations
and prints them without importing torch or touching CUDA.

usage: flash_fwd_sdpa.py agree [N] [--seed S] [--configs all|first] [--dry-run]
  Fixed cases (f16/bf16; head_dim 64 128 59 111 256 8 1; seq pairs (1,1) (113,203) (1023,1024)
  (512,512) (77,2048); causal on/off; MHA / GQA 8:2 / MQA 4:1; layouts bshd, bhsd, padded rows,
  base offset 2/4/6/8 bytes, non-multiple-of-8 strides, stride_d != 1; a few extras with
  seq_q > seq_k) plus N random ones (default 20). Each case runs on every configuration that fits
  its head_dim: every [params] combination of flash_fwd.toml, flash_fwd_hd128.toml (d <= 128) and
  flash_fwd_hd64.toml (d <= 64), or only the first combination of each with --configs first.
  Reference: SDPA on the same low-precision inputs upcast to f32 (math backend, no TF32); K/V
  heads expanded with repeat_interleave; causal is bottom-right aligned (key j allowed for query
  i iff j <= i + seq_k - seq_q, flash_fwd's rule), given to SDPA as is_causal when seq_q == seq_k
  and as an explicit boolean attn_mask otherwise. Pass: flash_fwd error <= 2 * (error of SDPA in
  f16/bf16, first backend of flash / efficient / math that accepts the case) + 1e-3 on rows with
  an allowed key; rows with none are 0 with lse -inf; no NaN (o starts as 0xFF); no write outside
  o's elements; lse (dense f32 [b, hq, sq], natural log) within 1e-3 * max(1, |ref|) of the f64
  logsumexp of the masked scaled scores. One line per case, then `agree: P/T passed`; exit 1 on
  any failure (2 if a launch leaves the CUDA context broken).
usage: flash_fwd_sdpa.py bench [--json FILE] [--iters N] [--dry-run]
  f16, bshd contiguous, heads 16, batch max(1, 16384 // seq), seq_q = seq_k in 512..8192, causal
  and not, head_dim 64 (flash_fwd_hd64.toml) and 128 (flash_fwd_hd128.toml), every [params]
  combination; SDPA under sdpa_kernel(SDPBackend.FLASH_ATTENTION). TFLOP/s from
  4 * b * h * sq * sk * d (halved when causal) over the median of N (default 20) CUDA-event timed
  launches after 3 warmups. Prints the best configuration per shape; --json writes every row.
"""
import argparse
import itertools
import json
import math
import pathlib
import random
import statistics
import sys
import tomllib
import warnings

TOOLS = pathlib.Path(__file__).resolve().parent
KER = TOOLS.parent
sys.path.insert(0, str(TOOLS))

AGREE_MANIFESTS = ["attention/flash_fwd.toml", "attention/flash_fwd_hd128.toml", "attention/flash_fwd_hd64.toml"]
BENCH_MANIFESTS = {64: "attention/flash_fwd_hd64.toml", 128: "attention/flash_fwd_hd128.toml"}
DIMS = [64, 128, 59, 111, 256, 8, 1]
SEQS = [(1, 1), (113, 203), (1023, 1024), (512, 512), (77, 2048)]
HEADS = [(2, 2), (8, 2), (4, 1)]  # MHA, GQA, MQA
# gpu_selftest.Placed arguments: order (outermost first), pad per order position, base offset in
# bytes from a 256-byte boundary (torch allocation + 256-byte redzone).
LAYOUTS = {
    "bshd": dict(order="bshd"),
    "bhsd": dict(order="bhsd"),
    "rowpad8": dict(order="bhsd", pad=(0, 0, 0, 8)),        # stride_s = d + 8
    "bshd_pad8": dict(order="bshd", pad=(0, 0, 0, 8)),      # stride_h = d + 8, stride_s = h (d + 8)
    "off2": dict(order="bshd", offset=2),
    "off4": dict(order="bhsd", offset=4),
    "off8": dict(order="bshd", offset=8),
    "odd": dict(order="bshd", pad=(0, 1, 1, 3), offset=6),  # stride_h = d + 3, stride_s = (h + 1)(d + 3)
    "odd_rows": dict(order="bhsd", pad=(0, 1, 0, 1), offset=2),  # stride_s = d + 1
    "dmajor": dict(order="bhds"),                           # stride_d = seq, stride_s = 1
}
LNAMES = list(LAYOUTS)
DTYPE_DEF = {"f16": "CUDAFUZZ_DTYPE_F16", "bf16": "CUDAFUZZ_DTYPE_BF16"}


# ---- manifests and configurations (pure Python) ---------------------------------------------
def manifest(rel):
    return tomllib.loads((KER / rel).read_text())


def param_combos(rel):
    """Every combination of the manifest's [params], names sorted (the harness's BTreeMap order)."""
    p = manifest(rel).get("params", {})
    names = sorted(p)
    return [dict(zip(names, vals)) for vals in itertools.product(*(p[n] for n in names))]


def cfg_label(rel, params):
    return f"{pathlib.Path(rel).stem}[{','.join(f'{k}={v}' for k, v in params.items())}]"


def cfg_smem(rel, params):
    m = manifest(rel)
    env = {**m.get("defines", {}), **params}
    return int(eval(m["launch"]["shared_bytes"], {"__builtins__": {}}, env))


def cfg_dflags(rel, dtype, params):
    """The -D options gpu_selftest.Kernel passes (CUDAFUZZ, dtype, [defines], then params)."""
    d = {"CUDAFUZZ": 1, DTYPE_DEF[dtype]: 1, **manifest(rel).get("defines", {}), **params}
    return " ".join(f"-D{k}={v}" for k, v in d.items())


def configs_for(head_dim, which):
    out = []
    for rel in AGREE_MANIFESTS:
        lo, hi = manifest(rel)["contract"]["head_dim"]
        if lo <= head_dim <= hi:
            combos = param_combos(rel)
            out += [(rel, p) for p in (combos if which == "all" else combos[:1])]
    return out


# ---- cases (pure Python) -----------------------------------------------------------------------
def case(dtype, b, hq, hkv, sq, sk, d, causal, lay):
    return dict(dtype=dtype, b=b, hq=hq, hkv=hkv, sq=sq, sk=sk, d=d, causal=causal, lay=lay)


def case_tag(c):
    lay = c["lay"]
    lt = f"all:{lay['q']}" if len(set(lay.values())) == 1 else ",".join(f"{t}:{lay[t]}" for t in "qkvo")
    return (f"{c['dtype']} b{c['b']} h{c['hq']}/{c['hkv']} q{c['sq']} k{c['sk']} d{c['d']} "
            f"{'causal' if c['causal'] else 'full'} {lt}")


def build_cases(n_random, seed):
    cases, i = [], 0
    for dtype in ("f16", "bf16"):
        for d in DIMS:
            for sq, sk in SEQS:
                for causal in (False, True):
                    hq, hkv = HEADS[i % len(HEADS)]
                    blk = i // (2 * len(SEQS))  # (dtype, head_dim) block: shift the layouts, alternate
                    step = blk % 2              # 0: one layout for all four tensors, 1: rotated
                    lay = {t: LNAMES[(i + blk + j * step) % len(LNAMES)] for j, t in enumerate("qkvo")}
                    cases.append(case(dtype, 2 if sq * sk <= 64 * 1024 else 1, hq, hkv, sq, sk, d, causal, lay))
                    i += 1
    extra = [  # seq_q > seq_k causal: the first seq_q - seq_k rows see no key (o = 0, lse = -inf)
        case("f16", 1, 4, 2, 203, 113, 64, True, dict.fromkeys("qkvo", "bshd")),
        case("bf16", 2, 3, 1, 130, 70, 96, True, dict(q="dmajor", k="odd", v="off2", o="odd_rows")),
        case("f16", 1, 8, 1, 1, 4096, 128, True, dict(q="off2", k="bshd_pad8", v="off8", o="off4")),
        case("bf16", 1, 2, 2, 300, 1, 256, True, dict(q="odd", k="off2", v="dmajor", o="rowpad8")),
    ]
    cases += extra
    rng = random.Random(seed)
    for _ in range(n_random):
        hq, hkv = rng.choice([(1, 1), (2, 2), (8, 2), (8, 1), (6, 3), (4, 1)])
        seq = lambda: rng.choice([rng.randint(1, 130), rng.randint(1, 700), rng.randint(1, 2100)])
        cases.append(case(rng.choice(["f16", "bf16"]), rng.choice([1, 2, 3]), hq, hkv, seq(), seq(),
                          rng.choice(DIMS + [rng.randint(1, 256), rng.randint(1, 128), rng.randint(1, 64)]),
                          rng.random() < 0.5, {t: rng.choice(LNAMES) for t in "qkvo"}))
    return cases


def bench_shapes():
    return [(d, s, max(1, 16384 // s), 16, causal)
            for d in (64, 128) for s in (512, 1024, 2048, 4096, 8192) for causal in (False, True)]


def flops(b, h, sq, sk, d, causal):
    return 4 * b * h * sq * sk * d / (2 if causal else 1)


# ---- GPU side ----------------------------------------------------------------------------------
def gpu():
    """Imports torch and gpu_selftest (which loads libnvrtc and libcuda) only when needed."""
    global torch, F, gs, np, SDPBackend, sdpa_kernel
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import gpu_selftest as gs
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if hasattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp"):
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)  # math backend in low precision


def allowed_mask(sq, sk, causal):
    i = torch.arange(sq, device="cuda")[:, None]
    j = torch.arange(sk, device="cuda")[None, :]
    return (j <= i + sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool, device="cuda")


def sdpa(q, k, v, causal, mask, scale):
    if causal and q.shape[2] == k.shape[2]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask if causal else None, scale=scale)


def sdpa_lowp(q, k, v, causal, mask, scale):
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sdpa_kernel(getattr(SDPBackend, name)):
                    return sdpa(q, k, v, causal, mask, scale), name.split("_")[0].lower()
        except RuntimeError:
            continue
    raise RuntimeError("no SDPA backend accepted the case")


def host_canary_damage(placed, host_buf):
    """gpu_selftest's canary count, done on a host copy of the allocation."""
    c = host_buf.clone()
    placed.view(c, gs.IDT[placed.dtype]).fill_(-1)
    bad = (c != 0xFF).nonzero().flatten().numpy()
    lo, hi = gs.R + placed.offset, gs.R + placed.offset + placed.span_bytes
    return (int((bad < lo).sum()), int(((bad >= lo) & (bad < hi)).sum()), int((bad >= hi).sum()))


def run_agree(cases, which):
    gpu()
    kernels, passed, worst = {}, 0, (0.0, "")
    for ci, c in enumerate(cases):
        dtype, B, Hq, Hkv, Sq, Sk, D, causal = (c[x] for x in ("dtype", "b", "hq", "hkv", "sq", "sk", "d", "causal"))
        T, _data, env = gs.make_case(dtype, B, Hq, Hkv, Sq, Sk, D, causal, {t: LAYOUTS[c["lay"][t]] for t in "qkvo"}, seed=ci)
        scale, g = env["scale"], Hq // Hkv
        # PyTorch works on dense copies of the same values: torch ops on views at +2/+4/+8-byte
        # bases raised 716 themselves on an H200 (torch 2.x), so only flash_fwd reads the layouts.
        q = _data["q"].to(gs.DT[dtype]).cuda()
        k, v = (_data[t].to(gs.DT[dtype]).cuda().repeat_interleave(g, dim=1) for t in "kv")
        allowed = allowed_mask(Sq, Sk, causal)
        valid = allowed.any(dim=1)  # rows with at least one allowed key
        with sdpa_kernel(SDPBackend.MATH):
            ref = sdpa(q.float(), k.float(), v.float(), causal, allowed, scale)
        low, backend = sdpa_lowp(q.contiguous(), k.contiguous(), v.contiguous(), causal, allowed, scale)
        low_err = (low.float() - ref)[:, :, valid].abs().max().item() if valid.any() else 0.0
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        lse_ref = torch.logsumexp(s.masked_fill(~allowed, float("-inf")), dim=-1)
        del s
        lse_fin = torch.isfinite(lse_ref)
        tol = 2 * low_err + 1e-3
        cfg_err, fails = [], []
        for rel, params in configs_for(D, which):
            label = cfg_label(rel, params)
            key = (rel, dtype, tuple(params.items()))
            if key not in kernels:
                try:
                    kernels[key] = gs.Kernel(rel, dtype, params)
                except RuntimeError as e:  # NVRTC or module load failure: fail every case it serves
                    kernels[key] = f"build failed: {str(e)[:300]}"
            if isinstance(kernels[key], str):
                fails.append(f"{label}: {kernels[key]}")
                continue
            T["o"].buf.fill_(0xFF)
            lse = torch.full((B * Hq * Sq,), float("nan"), dtype=torch.float32, device="cuda")
            ptrs = {t: T[t].ptr for t in "qkvo"}
            ptrs["lse"] = lse.data_ptr()
            try:
                rc = kernels[key].launch(env, ptrs)
            except RuntimeError as e:  # rejected launch (not sticky): record and go on
                fails.append(f"{label}: {e}")
                continue
            if rc != 0:
                print(f"FAIL #{ci} {case_tag(c)} {label}: cuCtxSynchronize = {rc}; the context is unusable, stopping")
                sys.exit(2)
            o_host = T["o"].buf.cpu()  # read the layout on the host (see above)
            o = T["o"].view(o_host).float().cuda()
            lse = lse.view(B, Hq, Sq)
            why = []
            if torch.isnan(o).any():
                why.append(f"{int(torch.isnan(o).sum())} NaN/unwritten")
            err = (o - ref)[:, :, valid].abs().max().item() if valid.any() else 0.0
            if not err <= tol:
                why.append(f"err {err:.2e} > {tol:.2e}")
            if (~valid).any() and (o[:, :, ~valid] != 0).any():
                why.append("fully masked rows not 0")
            lse_rel = ((lse[lse_fin].double() - lse_ref[lse_fin]).abs() / lse_ref[lse_fin].abs().clamp(min=1)).max().item() if lse_fin.any() else 0.0
            if not torch.equal(torch.isfinite(lse), lse_fin) or not (lse[~lse_fin] == float("-inf")).all() or not lse_rel <= 1e-3:
                why.append(f"lse rel err {lse_rel:.2e} / finiteness")
            dmg = host_canary_damage(T["o"], o_host)
            if dmg != (0, 0, 0):
                why.append(f"writes outside o {dmg}")
            cfg_err.append((err, lse_rel, label))
            worst = max(worst, (err / tol, f"#{ci} {label}"))
            if why:
                fails.append(f"{label}: {'; '.join(why)}")
        ok = not fails and bool(cfg_err)
        passed += ok
        e, l_, lab = max(cfg_err) if cfg_err else (float("nan"), float("nan"), "-")
        print(f"{'ok  ' if ok else 'FAIL'} #{ci} {case_tag(c)} | sdpa[{backend}] err {low_err:.2e} | flash_fwd worst "
              f"err {e:.2e} ({lab}), lse rel {max(x[1] for x in cfg_err) if cfg_err else float('nan'):.1e}, "
              f"{len(cfg_err)} configs" + "".join(f"\n     {f}" for f in fails), flush=True)
    print(f"worst flash_fwd err / (2 * sdpa err + 1e-3) = {worst[0]:.3f} ({worst[1]})")
    print(f"agree: {passed}/{len(cases)} passed")
    return passed == len(cases)


def time_ms(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(2_000_000)  # keep the GPU busy while the CPU queues the timed launches
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


def run_bench(json_path, iters):
    gpu()
    rows, kernels = [], {}
    hdr = f"{'hdim':>4} {'seq':>5} {'batch':>5} {'causal':>6}  {'best config':<40} {'flash_fwd':>9} {'sdpa':>7} {'ratio':>6} {'maxdiff':>8}"
    print(hdr + "\n" + "-" * len(hdr))
    for d, s, b, h, causal in bench_shapes():
        rel = BENCH_MANIFESTS[d]
        q, k, v, o = (torch.randn(b, s, h, d, dtype=torch.float16, device="cuda").transpose(1, 2) for _ in range(4))
        lse = torch.empty(b * h * s, dtype=torch.float32, device="cuda")
        scale = float(np.float32(1.0 / math.sqrt(d)))
        env = dict(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d, causal=int(causal), scale=scale)
        for t, x in zip("qkvo", (q, k, v, o)):
            env.update({f"{t}_stride_{n}": st for n, st in zip("bhsd", x.stride())})
        ptrs = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(), "lse": lse.data_ptr()}
        fl = flops(b, h, s, s, d, causal)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            ref = call()
            sdpa_tf = fl / time_ms(call, iters) / 1e9
        per, diffs = {}, {}
        for params in param_combos(rel):
            label = cfg_label(rel, params)
            key = (rel, tuple(params.items()))
            if key not in kernels:
                kernels[key] = gs.Kernel(rel, "f16", params)
            p = gs.Prepared(kernels[key], env, ptrs)
            launch = lambda p=p: gs.ck(gs.cu.cuLaunchKernel(p.kern.fn, *p.grid, *p.block, p.smem, None, p.params, None), "launch")
            o.fill_(float("nan"))
            launch()
            gs.ck(gs.cu.cuCtxSynchronize(), "sync")
            diffs[label] = (o.float() - ref.float()).abs().max().item()  # NaN if anything is unwritten
            per[label] = fl / time_ms(launch, iters) / 1e9
        best = max(per, key=per.get)
        row = dict(head_dim=d, seq=s, batch=b, heads=h, causal=causal, flops=fl, best_config=best,
                   flash_fwd_tflops=per[best], sdpa_flash_tflops=sdpa_tf, ratio=per[best] / sdpa_tf,
                   max_abs_diff_vs_sdpa=diffs[best], all_configs={k_: dict(tflops=per[k_], max_abs_diff=diffs[k_]) for k_ in per})
        rows.append(row)
        print(f"{d:>4} {s:>5} {b:>5} {str(causal):>6}  {best:<40} {per[best]:>9.1f} {sdpa_tf:>7.1f} {row['ratio']:>6.2f} {diffs[best]:>8.1e}", flush=True)
        del q, k, v, o, ref
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), iters=iters, rows=rows), indent=1))
        print(f"wrote {json_path}")


def dry_run_agree(cases, which):
    print("configurations (compiled per dtype; -D flags shown for f16):")
    for rel in AGREE_MANIFESTS:
        lo, hi = manifest(rel)["contract"]["head_dim"]
        for p in param_combos(rel)[: None if which == "all" else 1]:
            print(f"  {cfg_label(rel, p):<44} head_dim {lo}..{hi}  shared {cfg_smem(rel, p):>6} B  {cfg_dflags(rel, 'f16', p)}")
    for ci, c in enumerate(cases):
        print(f"#{ci} {case_tag(c)} | {len(configs_for(c['d'], which))} configs")
    print(f"agree (dry run): {len(cases)} cases, {sum(len(configs_for(c['d'], which)) for c in cases)} launches")


def dry_run_bench():
    for d, s, b, h, causal in bench_shapes():
        rel = BENCH_MANIFESTS[d]
        cfgs = ", ".join(f"{cfg_label(rel, p)} ({cfg_smem(rel, p)} B)" for p in param_combos(rel))
        print(f"d{d} seq {s} batch {b} heads {h} causal={causal} {flops(b, h, s, s, d, causal) / 1e9:.1f} GFLOP | {cfgs}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("agree")
    a.add_argument("n", nargs="?", type=int, default=20, help="random cases on top of the fixed ones")
    a.add_argument("--seed", type=int, default=1234)
    a.add_argument("--configs", choices=["all", "first"], default="all")
    a.add_argument("--dry-run", action="store_true")
    b = sub.add_parser("bench")
    b.add_argument("--json")
    b.add_argument("--iters", type=int, default=20)
    b.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.mode == "agree":
        cases = build_cases(args.n, args.seed)
        if args.dry_run:
            return dry_run_agree(cases, args.configs)
        sys.exit(0 if run_agree(cases, args.configs) else 1)
    if args.dry_run:
        return dry_run_bench()
    if args.iters < 10:
        ap.error("--iters must be at least 10")
    run_bench(args.json, args.iters)


if __name__ == "__main__":
    main()
