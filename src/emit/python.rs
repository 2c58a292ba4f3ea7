//! `--emit python`: one Python script that replays a case with PyTorch and the CUDA driver.
//!
//! The script embeds the same data as the `.cu` repro (see [`super`]): the kernel source with
//! its project headers inlined, the harness's NVRTC options (`-D` defines, `-lineinfo`,
//! `--std=c++17`, the manifest's options), the run-length coded arena images with their SHA-256,
//! the fp64 reference and the launch. It compiles the kernel with NVRTC through `ctypes`
//! (`libnvrtc`, found as the harness finds it: `$CUDAFUZZ_NVRTC`, the loader path, the CUDA
//! toolkit, pip's `nvidia/*/lib`), loads the cubin and launches it with `cuLaunchKernel` through
//! `libcuda`, on buffers PyTorch allocates (one `torch.uint8` tensor per allocation, with
//! `PYTORCH_NO_CUDA_MEMORY_CACHING=1` so each is its own `cudaMalloc`, as in the harness);
//! `--backend driver` uses `cuMemAlloc` instead and needs no PyTorch. Then it applies the same
//! oracles as the `.cu` program. `--compile-only --arch sm_90` and `--write-image DIR` need no
//! GPU.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::{arg_alloc, arg_text, dtype_code, header_lines, one_line, prepare, EmitError, Prepared, Run, SeedInfo};
use crate::arena::Holder;
use crate::case::Case;
use crate::manifest::{Manifest, ResolvedArg};

/// Writes the Python repro of `case` against `manifest` (see the module docs).
pub fn emit_python(case: &Case, manifest: &Manifest, seed: &SeedInfo) -> Result<String, EmitError> {
    let p = prepare(case, manifest, seed.tool())?;
    Ok(render(&p, seed))
}

/// The run commands printed in the script's header and by the CLI.
pub fn commands(p: &Prepared, file_name: &str) -> Vec<String> {
    vec![
        format!("python3 {file_name}"),
        format!("python3 {file_name} --backend driver    # without PyTorch: cuMemAlloc through ctypes"),
        format!("python3 {file_name} --compile-only --arch sm_90    # NVRTC only, no GPU"),
        format!("{} python3 {file_name} --backend driver", p.sanitizer_command(p.tool.unwrap_or(crate::sanitizer::Tool::Memcheck))),
    ]
}

/// A Python string literal of `s` (double quotes, escapes for `\`, `"`, control and non-ASCII
/// characters).
fn py_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(o, "\\x{:02x}", c as u32);
            }
            c if (c as u32) > 0x7e => {
                if (c as u32) <= 0xffff {
                    let _ = write!(o, "\\u{:04x}", c as u32);
                } else {
                    let _ = write!(o, "\\U{:08x}", c as u32);
                }
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Standard base64 with padding, 76 characters a line.
fn base64_lines(data: &[u8]) -> Vec<String> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        s.push(A[(n >> 18) as usize & 63] as char);
        s.push(A[(n >> 12) as usize & 63] as char);
        s.push(if c.len() > 1 { A[(n >> 6) as usize & 63] as char } else { '=' });
        s.push(if c.len() > 2 { A[n as usize & 63] as char } else { '=' });
    }
    s.as_bytes().chunks(76).map(|c| String::from_utf8_lossy(c).into_owned()).collect()
}

fn py_bytes(b: &[u8]) -> String {
    let mut s = String::from("b\"");
    for x in b {
        let _ = write!(s, "\\x{x:02x}");
    }
    s.push('"');
    s
}

pub(super) fn render(p: &Prepared, seed: &SeedInfo) -> String {
    let file_name = if seed.file_name.is_empty() { "repro.py".to_string() } else { seed.file_name.clone() };
    let mut o = String::with_capacity(1 << 16);
    o.push_str("#!/usr/bin/env python3\n");
    for l in header_lines(p, seed, "Python: PyTorch + NVRTC + the CUDA driver through ctypes", &commands(p, &file_name)) {
        if l.is_empty() {
            o.push_str("#\n");
        } else {
            let _ = writeln!(o, "# {}", one_line(&l));
        }
    }
    o.push_str(
        "#\n# Options: --timeout-ms N (watchdog; 0 = none), --no-determinism (skip the second, bit-compared run),\n\
         # --write-image DIR (write the decoded arena images; no GPU), --compile-only [--arch sm_XY] (NVRTC only),\n\
         # --backend torch|driver. libnvrtc: $CUDAFUZZ_NVRTC, the loader path, $CUDA_HOME, pip's nvidia/*/lib;\n\
         # CUDA headers: $CUDAFUZZ_CUDA_INCLUDE or found next to libnvrtc.\n\n",
    );
    o.push_str("import os\n\nos.environ.setdefault(\"PYTORCH_NO_CUDA_MEMORY_CACHING\", \"1\")  # one cudaMalloc per tensor, as in the harness\n\n");
    o.push_str("import argparse\nimport base64\nimport ctypes\nimport glob\nimport hashlib\nimport math\nimport struct\nimport sys\nimport time\n\n");

    o.push_str("# ======== the case (generated by cudafuzz; do not edit) ========\n");
    let _ = writeln!(o, "ENTRY = {}", py_str(&p.entry));
    let _ = writeln!(o, "SOURCE_NAME = {}", py_str(p.source.files.first().map(String::as_str).unwrap_or("kernel.cu")));
    let mut opts = vec!["-lineinfo".to_string(), "--std=c++17".to_string()];
    opts.extend(p.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    opts.extend(p.options.iter().cloned());
    let _ = writeln!(o, "NVRTC_OPTIONS = [{}]", opts.iter().map(|s| py_str(s)).collect::<Vec<_>>().join(", "));
    o.push_str("KERNEL_SOURCE = (\n");
    for line in p.source.text.split_inclusive('\n') {
        let _ = writeln!(o, "    {}", py_str(line));
    }
    o.push_str(")\n");
    o.push_str("# One dict per allocation: q, k, v, o, then manifest buffers. runs: (period, pattern, bytes); period 0 = literal bytes from BLOB.\n");
    o.push_str("ALLOCS = [\n");
    let mut lit_off = 0usize;
    for (i, (a, e)) in p.image.layout.allocs.iter().zip(&p.encoded).enumerate() {
        let tensor = match &a.holder {
            Holder::Tensor(t) => t.index() as i32,
            Holder::Buffer(_) => -1,
        };
        let sha: String = Sha256::digest(&p.image.bytes[i]).iter().map(|b| format!("{b:02x}")).collect();
        let runs: Vec<String> = e
            .runs
            .iter()
            .map(|r| match r {
                Run::Literal { bytes } => format!("(0, b\"\", {bytes})"),
                Run::Fill { pattern, bytes } => format!("({}, {}, {bytes})", pattern.len(), py_bytes(pattern)),
            })
            .collect();
        let _ = writeln!(
            o,
            "    dict(name={}, tensor={tensor}, total={}, data_offset={}, span={}, uninit={}, literal_offset={lit_off}, sha256=\"{sha}\",\n         runs=[{}]),",
            py_str(a.holder.name()),
            a.total_bytes(),
            a.data_offset,
            a.span_bytes,
            if p.image.data_uninit[i] { "True" } else { "False" },
            runs.join(", ")
        );
        lit_off += e.literal.len();
    }
    o.push_str("]\n");
    o.push_str("TENSORS = [  # shape and element strides [b, h, s, d], element bytes: q, k, v, o\n");
    for tp in &p.plan.tensors {
        let _ = writeln!(o, "    dict(shape={:?}, strides={:?}, elem_bytes={}),", tp.shape, tp.strides, tp.elem_bytes);
    }
    o.push_str("]\n");
    let mut blob = Vec::new();
    for e in &p.encoded {
        blob.extend_from_slice(&e.literal);
    }
    let ref_o_offset = blob.len();
    let ref_lse_offset = ref_o_offset + 8 * p.ref64.o.len();
    let lse_count = p.reference_lse_count();
    blob.extend_from_slice(&p.reference_bytes());
    o.push_str("# Literal runs of every allocation in order, then the fp64 reference o and lse (little-endian doubles).\nBLOB = (\n");
    for l in base64_lines(&blob) {
        let _ = writeln!(o, "    \"{l}\"");
    }
    o.push_str("    \"\"\n)\n");
    let _ = writeln!(o, "REF_O_OFFSET, REF_O_COUNT = {ref_o_offset}, {}", p.ref64.o.len());
    let _ = writeln!(o, "REF_LSE_OFFSET, REF_LSE_COUNT = {ref_lse_offset}, {lse_count}");
    let (lse_alloc, lse_dtype) = p.lse_slot();
    let _ = writeln!(o, "LSE_ALLOC, LSE_DTYPE = {lse_alloc}, {lse_dtype}  # buffer dtype: 0 f16, 1 bf16, 2 f32, 3 f64, 4 i32, 5 u32");
    let _ = writeln!(
        o,
        "DTYPE = {}  # {}: 0 f16, 1 bf16, 2 f32\nSENTINEL = 0x{:x}  # quiet NaN the output is pre-filled with",
        dtype_code(p.case.dtype),
        p.case.dtype,
        crate::arena::sentinel_bits(p.case.dtype)
    );
    let t = &p.tolerance;
    let _ = writeln!(
        o,
        "# max |out - ref64| <= 2 * {:e} (same-precision error) + {:e} = {:e}\nBOUND_BITS, ERR_LOWP_BITS, FLOOR_BITS = 0x{:016x}, 0x{:016x}, 0x{:016x}",
        t.err_lowp,
        t.floor,
        t.bound,
        t.bound.to_bits(),
        t.err_lowp.to_bits(),
        t.floor.to_bits()
    );
    let l = &p.launch;
    let _ = writeln!(o, "GRID, BLOCK, SHARED_BYTES = {:?}, {:?}, {}", l.grid, l.block, l.shared_bytes);
    o.push_str("ARGS = [  # (kind, allocation or value): the kernel's arguments in the manifest's order\n");
    for (i, a) in l.args.iter().enumerate() {
        let (kind, v) = match *a {
            ResolvedArg::Tensor(_) | ResolvedArg::Buffer(_) => ("ptr", arg_alloc(a).expect("a pointer").to_string()),
            ResolvedArg::I32(x) => ("i32", x.to_string()),
            ResolvedArg::I64(x) => ("i64", x.to_string()),
            ResolvedArg::F32(x) => ("f32", format!("0x{:08x}", x.to_bits())),
        };
        let shown = match *a {
            ResolvedArg::F32(x) => format!(" = {x:?}"),
            _ => String::new(),
        };
        let _ = writeln!(o, "    (\"{kind}\", {v}),  # {i}: {}{shown}", one_line(&arg_text(&p.arg_specs, i)));
    }
    o.push_str("]\n");
    let _ = writeln!(o, "TIMEOUT_MS = {}", p.timeout_ms);
    let _ = writeln!(o, "CASE = {}", py_str(&p.case.summary()));
    let _ = writeln!(o, "KERNEL = {}", py_str(&p.kernel_label));
    let expected = seed.finding.as_ref().map(|f| one_line(&f.to_string())).unwrap_or_default();
    let _ = writeln!(o, "EXPECTED = {}", py_str(&expected));
    let _ = writeln!(o, "SIGNATURE = {}\n", py_str(seed.signature.as_ref().map(|s| s.as_str()).unwrap_or("")));
    o.push_str(PY_PROGRAM);
    o
}

/// The script's program: decode, compile, allocate, launch, wait, judge.
pub const PY_PROGRAM: &str = r#"# ======== the program (the harness's oracles, ported) ========
TENSOR_NAMES = ["q", "k", "v", "o"]
FAILURES = []


def f64_from_bits(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def f32_from_bits(bits):
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def value(bits, dtype):
    if dtype == 0:
        return struct.unpack("<e", struct.pack("<H", bits))[0]
    if dtype == 1:
        return f32_from_bits(bits << 16)
    return f32_from_bits(bits)


def buffer_value(data, at, dtype):
    if dtype == 0:
        return struct.unpack_from("<e", data, at)[0]
    if dtype == 1:
        return f32_from_bits(struct.unpack_from("<H", data, at)[0] << 16)
    if dtype == 2:
        return struct.unpack_from("<f", data, at)[0]
    if dtype == 3:
        return struct.unpack_from("<d", data, at)[0]
    if dtype == 4:
        return float(struct.unpack_from("<i", data, at)[0])
    return float(struct.unpack_from("<I", data, at)[0])


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


def elements(t):
    """(linear, element offset) of every element in logical BHSD order."""
    nb, nh, ns, nd = t["shape"]
    sb, sh, ss, sd = t["strides"]
    out = []
    for b in range(nb):
        for h in range(nh):
            for s in range(ns):
                row = b * sb + h * sh + s * ss
                out.extend(row + d * sd for d in range(nd))
    return out


def numel(t):
    return t["shape"][0] * t["shape"][1] * t["shape"][2] * t["shape"][3]


def index_of(t, linear):
    idx = [0, 0, 0, 0]
    for i in range(3, -1, -1):
        idx[i] = linear % t["shape"][i]
        linear //= t["shape"][i]
    return idx


def element_at(t, byte):
    """The element holding a byte of the span, or None for a stride gap (arena::element_at)."""
    rem = byte // t["elem_bytes"]
    order = sorted(range(4), key=lambda i: (t["strides"][i], t["shape"][i]), reverse=True)
    # sorted() with reverse=True keeps equal keys in their original order, as Rust's stable sort does.
    idx = [0, 0, 0, 0]
    for i in order:
        q = rem // t["strides"][i]
        if q >= t["shape"][i]:
            return None
        idx[i] = q
        rem -= q * t["strides"][i]
    return idx if rem == 0 else None


def fmt_index(idx):
    return f"element [b={idx[0]}, h={idx[1]}, s={idx[2]}, d={idx[3]}]"


def load_bits(data, at, size):
    return int.from_bytes(data[at:at + size], "little")


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


def compile_kernel(arch):
    nvrtc, path = load_nvrtc()
    inc = cuda_include(path)
    opts = [f"--gpu-architecture={arch}"] + NVRTC_OPTIONS + ([f"--include-path={inc}"] if inc else [])
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    print(f"nvrtc {major.value}.{minor.value} ({path or 'from the loader path'}), CUDA headers {inc or 'not found'}; {arch}", flush=True)
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), KERNEL_SOURCE.encode(), SOURCE_NAME.encode(), 0, None, None):
        sys.exit("repro: nvrtcCreateProgram failed")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    nvrtc.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace").strip()
    if res != 0:
        print(f"repro: NVRTC could not compile the kernel (error {res}):\n{text}")
        sys.exit(2)
    if text:
        print(text)
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    if nvrtc.nvrtcGetCUBIN(prog, cubin):
        sys.exit("repro: nvrtcGetCUBIN failed")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw


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


class TorchArena:
    def __init__(self, cuda):
        import torch
        self.torch = torch
        torch.cuda.init()
        self.keep = []

    def alloc(self, n):
        t = self.torch.empty(n, dtype=self.torch.uint8, device="cuda")
        self.keep.append(t)
        return t.data_ptr(), t

    def upload(self, handle, offset, data):
        if data:
            src = self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8)
            handle[offset:offset + len(data)].copy_(src)
        self.torch.cuda.synchronize()

    def download(self, handle):
        c = handle.cpu()
        return ctypes.string_at(c.data_ptr(), c.numel())


class DriverArena:
    def __init__(self, cuda):
        self.cuda = cuda

    def alloc(self, n):
        p = ctypes.c_uint64()
        self.cuda.setup("cuMemAlloc", self.cuda.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)))
        return p.value, (p.value, n)

    def upload(self, handle, offset, data):
        if data:
            self.cuda.setup("cuMemcpyHtoD", self.cuda.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(handle[0] + offset), data, ctypes.c_size_t(len(data))))

    def download(self, handle):
        buf = ctypes.create_string_buffer(handle[1])
        code = self.cuda.lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(handle[0]), ctypes.c_size_t(handle[1]))
        if code:
            cuda_failed(self.cuda, "cuMemcpyDtoH after the launch", code, False)
        return buf.raw


def upload_alloc(arena, handle, a, img):
    if a["uninit"]:
        end = a["data_offset"] + a["span"]
        arena.upload(handle, 0, img[:a["data_offset"]])
        arena.upload(handle, end, img[end:])
    else:
        arena.upload(handle, 0, img)


def launch(cuda, func, ptrs):
    vals = []
    for kind, v in ARGS:
        if kind == "ptr":
            vals.append(ctypes.c_uint64(ptrs[v] + ALLOCS[v]["data_offset"]))
        elif kind == "i32":
            vals.append(ctypes.c_int32(v))
        elif kind == "i64":
            vals.append(ctypes.c_int64(v))
        else:
            vals.append(ctypes.c_float(f32_from_bits(v)))
    params = (ctypes.c_void_p * max(1, len(vals)))(*[ctypes.addressof(x) for x in vals])
    u = ctypes.c_uint
    return cuda.lib.cuLaunchKernel(func, u(GRID[0]), u(GRID[1]), u(GRID[2]), u(BLOCK[0]), u(BLOCK[1]), u(BLOCK[2]),
                                   u(SHARED_BYTES), None, params, None)


def wait(cuda, timeout_ms):
    start = time.monotonic()
    while True:
        code = cuda.lib.cuStreamQuery(None)
        if code != Cuda.NOT_READY:
            sync = cuda.lib.cuCtxSynchronize()
            return code or sync
        if timeout_ms and (time.monotonic() - start) * 1000 > timeout_ms:
            fail("hang", "watchdog", f"the kernel was still running after {timeout_ms} ms (--timeout-ms changes the limit)")
            finish()
            sys.stdout.flush()
            os._exit(1)
        time.sleep(0.0001)


def check_memory(before, after):
    """Canaries in redzones and gaps, unchanged inputs, no sentinel left (oracle::check_memory)."""
    for a, b, n in zip(ALLOCS, before, after):
        if b == n and a["tensor"] != 3:  # an untouched output is checked too: every sentinel left
            continue
        ds, de = a["data_offset"], a["data_offset"] + a["span"]
        diff = [x for x in range(ds) if b[x] != n[x]]
        if diff:
            fail("canary_damage", "canary", f"{len(diff)} bytes of the redzone before {a['name']} were overwritten (write before the start); "
                 f"nearest {ds - diff[-1]} bytes before the first byte")
        diff = [x for x in range(de, a["total"]) if b[x] != n[x]]
        if diff:
            fail("canary_damage", "canary", f"{len(diff)} bytes after the end of {a['name']} were overwritten, up to {diff[-1] - de + 1} bytes past "
                 f"its last byte (write past the end); first {diff[0] - de + 1} bytes past the last byte")
        if a["tensor"] < 0:
            continue
        t = TENSORS[a["tensor"]]
        eb = t["elem_bytes"]
        gapless = numel(t) * eb == a["span"]
        changed = [x for x in range(a["span"]) if b[ds + x] != n[ds + x]]
        if not gapless:
            gaps = [x for x in changed if element_at(t, x) is None]
            if gaps:
                fail("canary_damage", "canary", f"{len(gaps)} bytes in the stride gaps of {a['name']} were overwritten (write between rows); "
                     f"first at stride gap byte {gaps[0]}")
        if a["tensor"] == 3:
            sentinel = SENTINEL.to_bytes(4, "little")[:eb]
            left = [i for i, off in enumerate(elements(t)) if n[ds + off * eb:ds + off * eb + eb] == sentinel]
            if left:
                fail("unwritten_output", "sentinel", f"{len(left)} of {numel(t)} output elements were never written; first at {fmt_index(index_of(t, left[0]))}")
        else:
            inside = [x for x in changed if gapless or element_at(t, x) is not None]
            if inside:
                fail("input_clobbered", "input_integrity", f"{len(inside)} bytes of input {a['name']} changed during the launch; "
                     f"first at {fmt_index(element_at(t, inside[0]))}")


def check_values(after, blob):
    """NaN leak, the error bound against the fp64 reference, the lse buffer (oracle::check_values)."""
    t = TENSORS[3]
    eb = t["elem_bytes"]
    data = after[3]
    ds = ALLOCS[3]["data_offset"]
    bound = f64_from_bits(BOUND_BITS)
    ref = struct.unpack_from(f"<{REF_O_COUNT}d", blob, REF_O_OFFSET)
    nonfinite, first_nf, over, worst, worst_i, worst_x, err = 0, 0, 0, 0.0, -1, 0.0, 0.0
    for i, off in enumerate(elements(t)):
        bits = load_bits(data, ds + off * eb, eb)
        if bits == SENTINEL:
            continue
        x, r = value(bits, DTYPE), ref[i]
        if not math.isfinite(x) and math.isfinite(r):
            if not nonfinite:
                first_nf = i
            nonfinite += 1
            continue
        e = abs(x - r)
        if e > worst or worst_i < 0:
            worst, worst_i, worst_x = e, i, x
        if x != r:
            err = math.inf if math.isnan(e) else max(err, e)
        if e > bound:
            over += 1
    if nonfinite:
        fail("nan_leak", "nan_leak", f"{nonfinite} output elements are NaN or infinite while the inputs and the fp64 reference are finite "
             f"(out-of-bounds read of a poisoned redzone or gap?); first at {fmt_index(index_of(t, first_nf))}")
    if err > bound:
        fail("numerical_error", "reference", f"max |out - ref64| = {err:.3e} exceeds 2 x {f64_from_bits(ERR_LOWP_BITS):.3e} (same-precision error) "
             f"+ {f64_from_bits(FLOOR_BITS):.3e} = {bound:.3e}; {over} elements over; worst at {fmt_index(index_of(t, worst_i))}: "
             f"{worst_x!r} vs reference {ref[worst_i]!r}")
    if LSE_ALLOC >= 0:
        a = ALLOCS[LSE_ALLOC]
        size = 2 if LSE_DTYPE <= 1 else 8 if LSE_DTYPE == 3 else 4
        refs = struct.unpack_from(f"<{REF_LSE_COUNT}d", blob, REF_LSE_OFFSET)
        bad, first = 0, None
        for i in range(min(a["span"] // size, REF_LSE_COUNT)):
            x, r = buffer_value(after[LSE_ALLOC], a["data_offset"] + i * size, LSE_DTYPE), refs[i]
            ok = abs(x - r) <= 1e-3 * max(abs(r), 1.0) if math.isfinite(r) else x == r
            if not ok:
                bad += 1
                first = first or (i, x, r)
        if bad:
            fail("numerical_error", "reference", f"{bad} log-sum-exp values differ from the reference; first at row {first[0]}: {first[1]} vs {first[2]}")


def main():
    ap = argparse.ArgumentParser(description=f"cudafuzz repro of {KERNEL}: {CASE}")
    ap.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS, help="watchdog in milliseconds (0: none)")
    ap.add_argument("--no-determinism", action="store_true", help="skip the second, bit-compared run")
    ap.add_argument("--write-image", metavar="DIR", help="write the decoded arena images to DIR and exit (no GPU)")
    ap.add_argument("--compile-only", action="store_true", help="compile the kernel with NVRTC and exit")
    ap.add_argument("--arch", help="sm_XY to compile for (default: the GPU's)")
    ap.add_argument("--backend", choices=["torch", "driver"], help="who allocates device memory (default: torch when importable)")
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
        cubin = compile_kernel(args.arch or "sm_90")
        print(f"compiled {ENTRY}: {len(cubin)} bytes of cubin")
        return 0

    cuda = Cuda()
    cuda.setup("cuInit", cuda.lib.cuInit(0))
    dev = ctypes.c_int()
    cuda.setup("cuDeviceGet", cuda.lib.cuDeviceGet(ctypes.byref(dev), 0))
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.setup("cuDeviceGetAttribute", cuda.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev))
    cuda.setup("cuDeviceGetAttribute", cuda.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev))
    backend = args.backend
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
    cubin = compile_kernel(args.arch or f"sm_{major.value}{minor.value}")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.setup("cuModuleLoadData", cuda.lib.cuModuleLoadData(ctypes.byref(module), cubin))
    cuda.setup("cuModuleGetFunction", cuda.lib.cuModuleGetFunction(ctypes.byref(func), module, ENTRY.encode()))

    # One allocation per tensor and buffer (256-byte aligned), as in the harness.
    ptrs, handles = [], []
    for a, img in zip(ALLOCS, images):
        p, h = arena.alloc(a["total"])
        if p % 256:
            print(f"warning: allocation {a['name']} is not 256-byte aligned")
        upload_alloc(arena, h, a, img)
        ptrs.append(p)
        handles.append(h)
    for i in range(4):
        data = ptrs[i] + ALLOCS[i]["data_offset"]
        print(f"  {TENSOR_NAMES[i]} at 0x{ptrs[i]:x} (data 0x{data:x}, ptr % 16 = {data % 16})")
    if SHARED_BYTES > 48 * 1024:
        optin = ctypes.c_int()
        cuda.setup("cuDeviceGetAttribute", cuda.lib.cuDeviceGetAttribute(ctypes.byref(optin), 97, dev))
        if optin.value < SHARED_BYTES:
            fail("launch_rejected", "cuda_status", f"launch asks for {SHARED_BYTES} bytes of dynamic shared memory; this GPU allows at most {optin.value}")
            return finish()
        code = cuda.lib.cuFuncSetAttribute(func, 8, ctypes.c_int(SHARED_BYTES))
        if code:
            cuda_failed(cuda, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", code, True)
    print(f"launch: grid {tuple(GRID)}, block {tuple(BLOCK)}, {SHARED_BYTES} bytes of dynamic shared memory", flush=True)
    code = launch(cuda, func, ptrs)
    if code:
        cuda_failed(cuda, "cuLaunchKernel", code, True)
    code = wait(cuda, args.timeout_ms)
    if code:
        cuda_failed(cuda, "cuCtxSynchronize after the launch", code, False)
    after = [arena.download(h) for h in handles]
    check_memory(images, after)
    check_values(after, blob)
    if not args.no_determinism:
        upload_alloc(arena, handles[3], ALLOCS[3], images[3])
        code = launch(cuda, func, ptrs)
        if code:
            cuda_failed(cuda, "cuLaunchKernel (second run)", code, True)
        code = wait(cuda, args.timeout_ms)
        if code:
            cuda_failed(cuda, "cuCtxSynchronize after the second run", code, False)
        again = arena.download(handles[3])
        t, ds = TENSORS[3], ALLOCS[3]["data_offset"]
        eb = t["elem_bytes"]
        diff = [i for i, off in enumerate(elements(t)) if load_bits(after[3], ds + off * eb, eb) != load_bits(again, ds + off * eb, eb)]
        if diff:
            fail("nondeterminism", "determinism", f"{len(diff)} output elements differ between two runs of the same case (a race?); "
                 f"first at {fmt_index(index_of(t, diff[0]))}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
"#;
