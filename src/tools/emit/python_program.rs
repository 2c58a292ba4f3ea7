//! The program of a Python repro ([`PY_PROGRAM`]): the same steps and oracles as the `.cu`
//! repro's host program, reading the tables the data section declares (`SOURCES`, `PROGRAMS`,
//! `ALLOCS`, `BLOB`, `ARGS`, `EXPECTS`), so it is the same text for every manifest.

/// The script's program: decode, compile, run the reference kernel, allocate, launch, wait, judge.
pub const PY_PROGRAM: &str = r#"# ======== the program (the harness's oracles, ported) ========
FAILURES = []
DTYPE_BYTES = [2, 2, 4, 8, 1, 1, 4, 4, 8]


def f64_from_bits(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def f32_from_bits(bits):
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def value(bits, dtype):
    """An element's value from its bits (data::from_bits)."""
    if dtype == 0:
        return struct.unpack("<e", struct.pack("<H", bits))[0]
    if dtype == 1:
        return f32_from_bits(bits << 16)
    if dtype == 2:
        return f32_from_bits(bits)
    if dtype == 3:
        return f64_from_bits(bits)
    width = DTYPE_BYTES[dtype] * 8
    if dtype in (4, 6, 8) and bits >= 1 << (width - 1):
        bits -= 1 << width
    return float(bits)


def fail(kind, oracle, text):
    print(f"FAIL {kind} ({oracle}): {text}", flush=True)
    FAILURES.append(kind)


def finish():
    if EXPECTED:
        print(f"saved finding: {EXPECTED}")
    if SIGNATURE:
        print(f"saved signature: {SIGNATURE}")
    if FAILURES:
        print(f"RESULT: FAIL ({len(FAILURES)} finding{'' if len(FAILURES) == 1 else 's'})", flush=True)
        return 1
    print("RESULT: PASS", flush=True)
    return 0


def elem_bytes(a):
    return DTYPE_BYTES[a["dtype"]]


def numel(a):
    n = 1
    for x in a["shape"]:
        n *= x
    return n


def elements(a):
    """The element offset of every element, in logical row-major order (plan::for_each_offset)."""
    offs = [0]
    for n, s in zip(a["shape"], a["strides"]):
        offs = [o + i * s for o in offs for i in range(n)]
    return offs


def index_of(a, linear):
    idx = [0] * len(a["shape"])
    for i in range(len(idx) - 1, -1, -1):
        n = max(1, a["shape"][i])
        idx[i] = linear % n
        linear //= n
    return idx


def describe(a, idx):
    """A logical index as the harness writes it, with the dims' names: [batch=0, seq_q=3, 1]."""
    return "[" + ", ".join(f"{d}={v}" if d else str(v) for d, v in zip(a["dims"], idx)) + "]"


def at_linear(a, linear):
    return describe(a, index_of(a, linear))


def element_at(a, byte):
    """The element holding a byte of the span, or None for a stride gap (arena::element_at)."""
    rem = byte // elem_bytes(a)
    shape, strides = a["shape"], a["strides"]
    # sorted() with reverse=True keeps equal keys in their original order, as Rust's stable sort does.
    order = sorted((i for i in range(len(shape)) if strides[i] > 0), key=lambda i: (strides[i], shape[i]), reverse=True)
    idx = [0] * len(shape)
    for i in order:
        q = rem // strides[i]
        if q >= shape[i]:
            return None
        idx[i] = q
        rem -= q * strides[i]
    return idx if rem == 0 else None


def load_bits(data, at, size):
    return int.from_bytes(data[at:at + size], "little")


def element_bits(a, data):
    """Every element's bits in logical order."""
    eb, ds = elem_bytes(a), a["data_offset"]
    return [load_bits(data, ds + off * eb, eb) for off in elements(a)]


def decode_images():
    blob = base64.b64decode("".join(BLOB))
    images = []
    for i, a in enumerate(ALLOCS):
        out = bytearray()
        lit = a["literal_offset"]
        for period, pattern, n in a["runs"]:
            if period == 0:
                out += blob[lit:lit + n]
                lit += n
            else:
                out += (pattern * (n // period + 1))[:n]
        if len(out) != a["total"] or hashlib.sha256(out).hexdigest() != a["sha256"]:
            sys.exit(f"repro: the embedded image of allocation {i} ({a['name']}) does not decode to its checksum: the file was edited or damaged")
        images.append(bytes(out))
    return images, blob


# ---- NVRTC and the CUDA driver through ctypes ----

def _site_dirs():
    dirs = []
    try:
        import site
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:
        pass
    return dirs + [p for p in sys.path if p]


def _loaded_path(fragment):
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def load_nvrtc():
    cands = []
    env = os.environ.get("CUDAFUZZ_NVRTC")
    if env:
        cands += sorted(glob.glob(os.path.join(env, "libnvrtc.so*"))) if os.path.isdir(env) else [env]
    cands += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            cands += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")), reverse=True)
    for d in _site_dirs():
        cands += sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so*")), reverse=True)
    for c in cands:
        try:
            lib = ctypes.CDLL(c)
        except OSError:
            continue
        return lib, (c if os.path.isabs(c) else _loaded_path("libnvrtc.so"))
    sys.exit("repro: libnvrtc not found; set CUDAFUZZ_NVRTC=/path/to/libnvrtc.so.N or LD_LIBRARY_PATH (pip install nvidia-cuda-nvrtc)")


def cuda_include(lib_path):
    cands = [os.environ.get("CUDAFUZZ_CUDA_INCLUDE")]
    if lib_path:
        d = os.path.dirname(os.path.realpath(lib_path))
        cands += [os.path.join(d, "..", "include"), os.path.join(d, "..", "..", "cuda_runtime", "include")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            cands.append(os.path.join(home, "include"))
    for d in _site_dirs():
        cands += sorted(glob.glob(os.path.join(d, "nvidia", "*", "include")))
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "cuda_fp16.h")):
            return os.path.normpath(c)
    return None


def compile_program(program, arch):
    """One program's cubin and its entry's symbol, compiled as the harness compiles it (its own
    defines and options; the entry added as a name expression, so a C++ template is instantiated
    and its mangled name known)."""
    nvrtc, path = load_nvrtc()
    inc = cuda_include(path)
    incs = [inc] if inc else []
    if inc and os.path.isdir(os.path.join(inc, "cccl", "cub")):
        incs.append(os.path.join(inc, "cccl"))  # CUB and libcu++ (CUDA 13 keeps them there)
    opts = [f"--gpu-architecture={arch}"] + program["options"] + [f"--include-path={d}" for d in incs]
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    name, text = SOURCES[program["source"]]
    print(f"nvrtc {major.value}.{minor.value} ({path or 'from the loader path'}), CUDA headers {inc or 'not found'}; {program['what']} {arch}", flush=True)
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), "".join(text).encode(), name.encode(), 0, None, None):
        sys.exit("repro: nvrtcCreateProgram failed")
    cxx_name = not program["entry"].replace("_", "a").isalnum()  # a C++ name expression
    if cxx_name and nvrtc.nvrtcAddNameExpression(prog, program["entry"].encode()):
        sys.exit(f"repro: nvrtcAddNameExpression failed for {program['entry']}")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    nvrtc.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace").strip()
    if res != 0:
        print(f"repro: NVRTC could not compile the {program['what']} (error {res}):\n{text}")
        sys.exit(2)
    if text:
        print(text)
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    if nvrtc.nvrtcGetCUBIN(prog, cubin):
        sys.exit("repro: nvrtcGetCUBIN failed")
    symbol = program["entry"].encode()
    if cxx_name:
        lowered = ctypes.c_char_p()
        if nvrtc.nvrtcGetLoweredName(prog, symbol, ctypes.byref(lowered)) or not lowered.value:
            sys.exit(f"repro: {program['entry']} is not a kernel of the {program['what']}")
        symbol = lowered.value
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw, symbol


def load_prebuilt(program, arch):
    """A prebuilt module's bytes for `arch` (sm_XY): each listed file, `{arch}` tried as the
    GPU's own architecture and then each lower minor of its major; and the entry's symbol."""
    major, minor = int(arch[3:-1]), int(arch[-1])
    tried = []
    for pattern in program["module"]:
        names = [pattern.replace("{arch}", f"sm_{major}{m}") for m in range(minor, -1, -1)] if "{arch}" in pattern else [pattern]
        for name in names:
            tried.append(name)
            if os.path.isfile(name):
                with open(name, "rb") as f:
                    data = f.read()
                if not (data.startswith(b"\x7fELF") or data.startswith(b"\x50\xed\x55\xba")):
                    data += b"\0"  # PTX text: the driver reads it up to a NUL
                print(f"prebuilt module {name} ({len(data)} bytes) for {arch}", flush=True)
                return data, program["symbol"].encode()
    sys.exit(f"repro: no prebuilt module for {arch}: none of {', '.join(tried)} exists (run from the folder the repro was written in)")


class Cuda:
    NOT_READY = 600

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            print(f"repro: no CUDA driver (libcuda.so.1): {e}")
            sys.exit(2)

    def name(self, code):
        p, q = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(code, ctypes.byref(p))
        self.lib.cuGetErrorString(code, ctypes.byref(q))
        return (p.value or b"?").decode(), (q.value or b"?").decode()

    def setup(self, what, code):
        if code:
            n, s = self.name(code)
            print(f"repro: {what} failed: {n} ({code}): {s} (not a finding: the case could not run)")
            sys.exit(2)


def kind_of(code, at_launch):
    """launch::classify"""
    if code == 716:
        return "misaligned_address"
    if code == 700:
        return "illegal_address"
    if code == 719:
        return "launch_failure"
    if at_launch or code in (701, 1):
        return "launch_rejected"
    return "cuda_error"


def cuda_failed(cuda, what, code, at_launch):
    n, s = cuda.name(code)
    print(f"CUDA error: {n} ({code}): {s} [{what}]")
    fail(kind_of(code, at_launch), "cuda_status", f"the kernel failed with {n} ({code})")
    status = finish()
    sys.stdout.flush()
    os._exit(status)  # the context is unusable: skip every cleanup


def reference_failed(cuda, program, what, code):
    """A reference run that cannot finish is the reference's problem, not a finding (worker::reference)."""
    n, s = cuda.name(code)
    print(f"repro: the reference kernel's {PROGRAMS[program]['what']} run: {what} failed: {n} ({code}): {s} (not a finding: fix the reference)", flush=True)
    os._exit(2)


class TorchArena:
    def __init__(self, cuda):
        import torch
        self.torch = torch
        torch.cuda.init()

    def alloc(self, n):
        t = self.torch.empty(max(1, n), dtype=self.torch.uint8, device="cuda")
        return t.data_ptr(), t

    def upload(self, handle, offset, data):
        if data:
            src = self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8)
            handle[offset:offset + len(data)].copy_(src)
        self.torch.cuda.synchronize()

    def download(self, handle, n):
        c = handle[:n].cpu()
        return ctypes.string_at(c.data_ptr(), n) if n else b""

    def free(self, handle):
        pass  # the tensor goes with its last reference


class DriverArena:
    def __init__(self, cuda):
        self.cuda = cuda

    def alloc(self, n):
        p = ctypes.c_uint64()
        self.cuda.setup("cuMemAlloc", self.cuda.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(1, n))))
        return p.value, p.value

    def upload(self, handle, offset, data):
        if data:
            self.cuda.setup("cuMemcpyHtoD", self.cuda.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(handle + offset), data, ctypes.c_size_t(len(data))))

    def download(self, handle, n):
        buf = ctypes.create_string_buffer(max(1, n))
        code = self.cuda.lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(handle), ctypes.c_size_t(n))
        if code:
            return code
        return buf.raw[:n]

    def free(self, handle):
        self.cuda.lib.cuMemFree_v2(ctypes.c_uint64(handle))


def launch_spec(program):
    return PROGRAMS[program] if program < len(PROGRAMS) else STEPS[program - len(PROGRAMS)]


class Runner:
    """The device side: one allocation per tensor of a program, its launch and its watchdog."""

    def __init__(self, cuda, arena, images, funcs, timeout_ms):
        self.cuda, self.arena, self.images, self.funcs, self.timeout_ms = cuda, arena, images, funcs, timeout_ms
        self.ptrs, self.handles = {}, {}

    def upload(self, i):
        a, img = ALLOCS[i], self.images[i]
        if a["uninit"]:
            end = a["data_offset"] + a["span"]
            self.arena.upload(self.handles[i], 0, img[:a["data_offset"]])
            self.arena.upload(self.handles[i], end, img[end:])
        else:
            self.arena.upload(self.handles[i], 0, img)

    def allocate(self, program):
        """cudaMalloc-style allocations are 256-byte aligned: the case's byte offset alone sets each residue, as in the harness."""
        for i, a in enumerate(ALLOCS):
            if a["program"] != program:
                continue
            self.ptrs[i], self.handles[i] = self.arena.alloc(a["total"])
            if self.ptrs[i] % 256:
                print(f"warning: allocation {a['name']} is not 256-byte aligned")
            self.upload(i)

    def release(self, program):
        for i, a in enumerate(ALLOCS):
            if a["program"] == program and i in self.handles:
                self.arena.free(self.handles.pop(i))
                self.ptrs.pop(i)

    def download(self, i, on_error):
        got = self.arena.download(self.handles[i], ALLOCS[i]["total"])
        if isinstance(got, int):
            on_error(got)
        return got

    def launch(self, program):
        """Launch `program` (0 the kernel, then the reference runs; len(PROGRAMS) + i a sequence's later launch i)."""
        spec = launch_spec(program)
        if spec["skip"]:
            return 0  # the host's guard holds: it launches nothing
        if program >= len(PROGRAMS) and spec["shared_opt_in"] and spec["shared_bytes"] > 48 * 1024:
            code = self.cuda.lib.cuFuncSetAttribute(self.funcs[program], 8, ctypes.c_int(spec["shared_bytes"]))
            if code:
                return code
        vals = []
        for p, kind, v in ARGS:
            if p != program:
                continue
            if kind == "ptr":
                vals.append(ctypes.c_uint64(self.ptrs[v] + ALLOCS[v]["data_offset"]))
            elif kind == "f32":
                vals.append(ctypes.c_float(f32_from_bits(v)))
            elif kind == "f64":
                vals.append(ctypes.c_double(f64_from_bits(v)))
            else:
                vals.append({"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64}[kind](v))
        params = (ctypes.c_void_p * max(1, len(vals)))(*[ctypes.addressof(x) for x in vals])
        g, b, u = spec["grid"], spec["block"], ctypes.c_uint
        return self.cuda.lib.cuLaunchKernel(self.funcs[program], u(g[0]), u(g[1]), u(g[2]), u(b[0]), u(b[1]), u(b[2]),
                                            u(spec["shared_bytes"]), None, params, None)

    def reserve_shared(self, program, dev):
        """The opt-in attribute for more than 48 KiB of dynamic shared memory (launch::Module::reserve_shared): (ok, limit, code)."""
        want = PROGRAMS[program]["shared_bytes"]
        if not PROGRAMS[program]["shared_opt_in"] or want <= 48 * 1024:
            return True, 0, 0
        optin = ctypes.c_int()
        self.cuda.setup("cuDeviceGetAttribute", self.cuda.lib.cuDeviceGetAttribute(ctypes.byref(optin), 97, dev))
        if optin.value < want:
            return False, optin.value, 0
        return True, optin.value, self.cuda.lib.cuFuncSetAttribute(self.funcs[program], 8, ctypes.c_int(want))

    def wait(self, program):
        start = time.monotonic()
        while True:
            code = self.cuda.lib.cuStreamQuery(None)
            if code != Cuda.NOT_READY:
                sync = self.cuda.lib.cuCtxSynchronize()
                return code or sync
            if self.timeout_ms and (time.monotonic() - start) * 1000 > self.timeout_ms:
                if program:
                    print(f"repro: the reference kernel's {PROGRAMS[program]['what']} run was still running after {self.timeout_ms} ms (not a finding: fix the reference)", flush=True)
                    os._exit(2)
                fail("hang", "watchdog", f"the kernel was still running after {self.timeout_ms} ms (--timeout-ms changes the limit)")
                finish()
                sys.stdout.flush()
                os._exit(1)
            time.sleep(0.0001)


def values_of(a, data):
    return [value(b, a["dtype"]) for b in element_bits(a, data)]


def run_reference(runner, program, dev):
    """One run of the user's reference kernel (worker::reference): its own dense arena; each judged output is read back
    and must hold no sentinel (a reference that leaves elements unwritten is the reference's bug, not a finding)."""
    what = PROGRAMS[program]["what"]
    runner.allocate(program)
    ok, limit, code = runner.reserve_shared(program, dev)
    if not ok:
        print(f"repro: the reference kernel's {what} run asks for {PROGRAMS[program]['shared_bytes']} bytes of dynamic shared memory; this GPU allows {limit}")
        sys.exit(2)
    if code:
        reference_failed(runner.cuda, program, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", code)
    print(f"reference kernel, {what} run: grid {tuple(PROGRAMS[program]['grid'])}, block {tuple(PROGRAMS[program]['block'])}", flush=True)
    code = runner.launch(program)
    if code:
        reference_failed(runner.cuda, program, "cuLaunchKernel", code)
    code = runner.wait(program)
    if code:
        reference_failed(runner.cuda, program, "cuCtxSynchronize", code)
    out = []
    for e in EXPECTS:
        i = e["gold_alloc"] if program == 1 else e["baseline_alloc"]
        a = ALLOCS[i]
        data = runner.download(i, lambda c: reference_failed(runner.cuda, program, "cuMemcpyDtoH", c))
        left = sum(1 for b in element_bits(a, data) if b == a["sentinel_bits"]) if a["sentinel"] else 0
        if left:
            print(f"repro: the reference kernel ({what} run) left {left} of {numel(a)} elements of {a['name']} unwritten: fix the reference")
            sys.exit(2)
        out.append(values_of(a, data))
    runner.release(program)
    return out


def kernel_judgement(e, gold, baseline):
    """reference::kernel_expected: factor x max |baseline - gold| over the elements finite in both, plus the floor
    (the manifest's, or 4 u max |gold|)."""
    err = max((abs(b - g) for g, b in zip(gold, baseline) if math.isfinite(g) and math.isfinite(b) and g != b), default=0.0)
    peak = max((abs(g) for g in gold if math.isfinite(g)), default=0.0)
    factor, floor, u = (f64_from_bits(x) for x in e["bits"][:3])
    if math.isnan(floor):
        floor = 4.0 * u * peak
    print(f"reference: {ALLOCS[e['alloc']]['name']} may be {factor * err + floor:.3e} from the gold: {factor:g} x {err:.3e} (baseline error) + {floor:.3e} (floor)")
    return dict(alloc=e["alloc"], rule=0, gold=gold, factor=factor, err_lowp=err, floor=floor, bound=factor * err + floor, rel=0.0)


def judgements(runner, dev, blob):
    """The judged outputs' gold and rules: embedded, or from the reference kernel's runs (first, as in the worker)."""
    if len(PROGRAMS) == 1:
        out = []
        for e in EXPECTS:
            n = numel(ALLOCS[e["alloc"]])
            gold = list(struct.unpack_from(f"<{n}d", blob, e["gold_offset"]))
            b = [f64_from_bits(x) for x in e["bits"]]
            rule = dict(factor=b[0], err_lowp=b[1], floor=b[2], bound=b[3], rel=0.0) if e["rule"] == 0 else dict(factor=0.0, err_lowp=0.0, floor=0.0, bound=0.0, rel=b[0])
            out.append(dict(alloc=e["alloc"], rule=e["rule"], gold=gold, **rule))
        return out
    gold, baseline = run_reference(runner, 1, dev), run_reference(runner, 2, dev)
    return [kernel_judgement(e, g, b) for e, g, b in zip(EXPECTS, gold, baseline)]


def check_memory(before, after):
    """Canaries in redzones and gaps, unchanged inputs, no sentinel left (oracle::check_memory)."""
    for a, b, n in zip(ALLOCS, before, after):
        if a["program"] != 0:
            continue
        sentinel = a["role"] != 0 and a["sentinel"]
        if b == n and not sentinel:  # an output pre-filled with the sentinel is checked even when untouched
            continue
        ds, de = a["data_offset"], a["data_offset"] + a["span"]
        diff = [x for x in range(ds) if b[x] != n[x]]
        if diff:
            fail("canary_damage", "canary", f"{len(diff)} bytes of the redzone before {a['name']} were overwritten (write before the start); "
                 f"nearest {ds - diff[-1]} bytes before the first byte")
        de += a["tail"]  # the don't-care tail of a capacity is never checked
        diff = [x for x in range(de, a["total"]) if b[x] != n[x]]
        if diff:
            fail("canary_damage", "canary", f"{len(diff)} bytes after the end of {a['name']} were overwritten, up to {diff[-1] - de + 1} bytes past "
                 f"its last byte (write past the end); first {diff[0] - de + 1} bytes past the last byte")
        gapless = numel(a) * elem_bytes(a) == a["span"]
        changed = [x for x in range(a["span"]) if b[ds + x] != n[ds + x]]
        inside = changed if gapless else [x for x in changed if element_at(a, x) is not None]
        gaps = [] if gapless else [x for x in changed if element_at(a, x) is None]
        if gaps:
            fail("canary_damage", "canary", f"{len(gaps)} bytes in the stride gaps of {a['name']} were overwritten (write between rows); "
                 f"first at stride gap byte {gaps[0]}")
        if sentinel:
            left = [i for i, bits in enumerate(element_bits(a, n)) if bits == a["sentinel_bits"]]
            if left:
                fail("unwritten_output", "sentinel", f"{len(left)} of {numel(a)} elements of {a['name']} were never written; first at {at_linear(a, left[0])}")
        elif a["role"] == 0 and inside:
            fail("input_clobbered", "input_integrity", f"{len(inside)} bytes of input {a['name']} changed during the launch; "
                 f"first at {describe(a, element_at(a, inside[0]))}")


def check_output(j, data):
    """Non-finite values the reference does not have, and the output's rule (oracle::check_values)."""
    a = ALLOCS[j["alloc"]]
    nonfinite, special, compared = [], [], []
    for i, bits in enumerate(element_bits(a, data)):
        if a["sentinel"] and bits == a["sentinel_bits"]:
            continue  # reported by the memory oracle
        x, r = value(bits, a["dtype"]), j["gold"][i]
        if not math.isfinite(r):
            if not (x == r or (math.isnan(x) and math.isnan(r))):
                special.append(i)
        elif not math.isfinite(x):
            nonfinite.append(i)
        else:
            compared.append((i, x, r))
    name = a["name"]
    if nonfinite:
        fail("nan_leak", "nan_leak", f"{len(nonfinite)} elements of {name} are NaN or infinite where the fp64 reference is finite "
             f"(out-of-bounds read of a poisoned redzone or gap?); first at {at_linear(a, nonfinite[0])}")
    if special:
        fail("numerical_error", "reference", f"{len(special)} elements of {name} are not the NaN or infinity the fp64 reference has there; "
             f"first at {at_linear(a, special[0])}")
    if j["rule"] == 0:
        err = max((abs(x - r) for _, x, r in compared if x != r), default=0.0)
        if err > j["bound"]:
            over = sum(1 for _, x, r in compared if abs(x - r) > j["bound"])
            worst = max(range(len(compared)), key=lambda k: (abs(compared[k][1] - compared[k][2]), k))  # the last largest, as Iterator::max_by
            i, x, r = compared[worst]
            fail("numerical_error", "reference", f"max |{name} - ref64| = {err:.3e} exceeds {j['factor']:g} x {j['err_lowp']:.3e} (same-precision error) "
                 f"+ {j['floor']:.3e} = {j['bound']:.3e}; {over} elements over; worst at {at_linear(a, i)}: {x!r} vs reference {r!r}")
    else:
        bad = [(i, x, r) for i, x, r in compared if abs(x - r) > j["rel"] * max(1.0, abs(r))]
        if bad:
            i, x, r = bad[0]
            fail("numerical_error", "reference", f"{len(bad)} values of {name} differ from the reference by more than {j['rel']:g} (relative); "
                 f"first: {x!r} vs {r!r} at {at_linear(a, i)}")


def check_determinism(runner, after, target_path=None):
    """The kernel run again on fresh written tensors; every judged output not declared order_dependent must be bit-identical
    (oracle::check_determinism)."""
    for i, a in enumerate(ALLOCS):
        if a["program"] == 0 and a["role"] != 0:
            runner.upload(i)
    if TARGET:
        call_target(runner, target_path, "second call")
    else:
        launch_and_wait(runner, " (second run)", "the second run")
    for i, a in enumerate(ALLOCS):
        if a["program"] != 0 or a["role"] not in (1, 2) or a.get("order_dependent"):
            continue
        again = runner.download(i, lambda c: cuda_failed(runner.cuda, "cuMemcpyDtoH after the second run", c, False))
        diff = [k for k, (x, y) in enumerate(zip(element_bits(a, after[i]), element_bits(a, again))) if x != y]
        if diff:
            fail("nondeterminism", "determinism", f"{len(diff)} elements of {a['name']} differ between two runs of the same case (a race?); "
                 f"first at {at_linear(a, diff[0])}")


def run_kernel(runner, dev, judged, images, determinism, target_path=None):
    """The kernel under test: allocate, launch (or call the Python target), wait, download, judge."""
    runner.allocate(0)
    for i, a in enumerate(ALLOCS):
        if a["program"] == 0:
            data = runner.ptrs[i] + a["data_offset"]
            print(f"  {a['name']} at 0x{runner.ptrs[i]:x} (data 0x{data:x}, ptr % 16 = {data % 16})")
    if TARGET:
        call_target(runner, target_path, "call")
        return judge_kernel(runner, judged, images, determinism, target_path)
    p = PROGRAMS[0]
    ok, limit, code = runner.reserve_shared(0, dev)
    if not ok:
        fail("launch_rejected", "cuda_status", f"launch asks for {p['shared_bytes']} bytes of dynamic shared memory; this GPU allows at most {limit}")
        return finish()
    if code:
        cuda_failed(runner.cuda, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", code, True)
    if p["skip"]:
        print("launch: none (the host's guard, `skip`, holds for this case: it launches nothing)", flush=True)
    else:
        print(f"launch: grid {tuple(p['grid'])}, block {tuple(p['block'])}, {p['shared_bytes']} bytes of dynamic shared memory", flush=True)
    for t in STEPS:
        print(f"then {t['what']}: " + ("none (its guard holds)" if t["skip"] else f"grid {tuple(t['grid'])}, block {tuple(t['block'])}, {t['shared_bytes']} bytes of dynamic shared memory"), flush=True)
    launch_and_wait(runner, "", "the launch")
    return judge_kernel(runner, judged, images, determinism)


def launch_and_wait(runner, launch_note, after):
    """The kernel launched and waited for; a CUDA error on either ends the script as a finding."""
    for program in [0] + [len(PROGRAMS) + i for i in range(len(STEPS))]:
        code = runner.launch(program)
        if code:
            cuda_failed(runner.cuda, f"cuLaunchKernel{launch_note}" + (f" ({launch_spec(program)['what']})" if program else ""), code, True)
    code = runner.wait(0)
    if code:
        cuda_failed(runner.cuda, f"cuCtxSynchronize after {after}", code, False)


def judge_kernel(runner, judged, images, determinism, target_path=None):
    after = [runner.download(i, lambda c: cuda_failed(runner.cuda, "cuMemcpyDtoH after the launch", c, False)) if a["program"] == 0 else None
             for i, a in enumerate(ALLOCS)]
    check_memory(images, after)
    for j in judged:
        check_output(j, after[j["alloc"]])
    if determinism:
        check_determinism(runner, after, target_path)
    return finish()


def open_device(cuda, backend):
    cuda.setup("cuInit", cuda.lib.cuInit(0))
    dev = ctypes.c_int()
    cuda.setup("cuDeviceGet", cuda.lib.cuDeviceGet(ctypes.byref(dev), 0))
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.setup("cuDeviceGetAttribute", cuda.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev))
    cuda.setup("cuDeviceGetAttribute", cuda.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev))
    if backend is None:
        try:
            import torch  # noqa: F401
            backend = "torch"
        except ImportError:
            backend = "driver"
    arena = TorchArena(cuda) if backend == "torch" else DriverArena(cuda)
    ctx = ctypes.c_void_p()
    cuda.lib.cuCtxGetCurrent(ctypes.byref(ctx))
    if not ctx.value:
        cuda.setup("cuDevicePrimaryCtxRetain", cuda.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        cuda.setup("cuCtxSetCurrent", cuda.lib.cuCtxSetCurrent(ctx))
    print(f"device 0: sm_{major.value}{minor.value}; memory from {backend}", flush=True)
    return dev, f"sm_{major.value}{minor.value}", arena


def main():
    ap = argparse.ArgumentParser(description=f"cudafuzz repro of {KERNEL}: {CASE}")
    ap.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS, help="watchdog in milliseconds (0: none)")
    ap.add_argument("--no-determinism", action="store_true", help="skip the second, bit-compared run")
    ap.add_argument("--write-image", metavar="DIR", help="write the decoded arena images to DIR and exit (no GPU)")
    ap.add_argument("--compile-only", action="store_true", help="compile every program with NVRTC and exit")
    ap.add_argument("--arch", help="sm_XY to compile for (default: the GPU's)")
    ap.add_argument("--backend", choices=["torch", "driver"], help="who allocates device memory (default: torch when importable)")
    ap.add_argument("--target-path", metavar="DIR", help="the folder a Python target's module is imported from")
    args = ap.parse_args()
    print(f"cudafuzz repro: {KERNEL}, case {CASE}", flush=True)
    images, blob = decode_images()
    if args.write_image:
        for i, (a, img) in enumerate(zip(ALLOCS, images)):
            path = os.path.join(args.write_image, f"alloc{i}-{a['name']}.bin")
            with open(path, "wb") as f:
                f.write(img)
            print(f"wrote {path} ({len(img)} bytes)")
        return 0
    if args.compile_only:
        for p in PROGRAMS[1:] if TARGET else PROGRAMS:
            cubin, _ = load_prebuilt(p, args.arch or "sm_90") if p.get("module") else compile_program(p, args.arch or "sm_90")
            print(f"compiled {p['what']} {p['entry']}: {len(cubin)} bytes of cubin")
        return 0
    cuda = Cuda()
    dev, arch, arena = open_device(cuda, args.backend)
    funcs = []
    for k, p in enumerate(PROGRAMS):
        if TARGET and k == 0:
            funcs.append(None)  # a Python target: called, not launched
            continue
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        cubin, symbol = load_prebuilt(p, args.arch or arch) if p.get("module") else compile_program(p, args.arch or arch)
        cuda.setup("cuModuleLoadData", cuda.lib.cuModuleLoadData(ctypes.byref(module), cubin))
        cuda.setup("cuModuleGetFunction", cuda.lib.cuModuleGetFunction(ctypes.byref(func), module, symbol))
        funcs.append(func)
        if k == 0:
            kernel_module = module
    for s in STEPS:  # a sequence's later kernels: plain entries of the kernel's module
        func = ctypes.c_void_p()
        cuda.setup(f"cuModuleGetFunction({s['entry']})", cuda.lib.cuModuleGetFunction(ctypes.byref(func), kernel_module, s["entry"].encode()))
        funcs.append(func)
    runner = Runner(cuda, arena, images, funcs, args.timeout_ms)
    judged = judgements(runner, dev, blob)
    return run_kernel(runner, dev, judged, images, not args.no_determinism, args.target_path)


if __name__ == "__main__":
    sys.exit(main())
"#;
