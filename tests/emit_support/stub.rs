//! Running emitted repros without a GPU: the `.cu` program's host part built against a stub CUDA
//! runtime ([`STUB_SOURCE`]), the Python script under a fake driver ([`PY_FAKE_DRIVER`]); both
//! "launch" a kernel by copying chosen bytes into its pointer arguments ([`Stub`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::core::manifest::{Manifest, ReferenceSpec, ResolvedArg};

use super::subjects::Expected;
use crate::common::env::Need;

const STUB_HEADER: &str = r#"// Minimal CUDA runtime API for host-only checks of emitted repros (cudafuzz tests).
#pragma once
#include <cstddef>
typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 } cudaError_t;
typedef struct CUstream_st* cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct dim3 { unsigned x, y, z; constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern "C" {
cudaError_t cudaGetDevice(int*);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int);
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
const char* cudaGetErrorName(cudaError_t);
const char* cudaGetErrorString(cudaError_t);
}
"#;

/// The stub runtime: host memory for device memory. Each launch is the kernel's (program K), or
/// a reference kernel's gold (G) or baseline (B) run, told apart by the entry; the "kernel"
/// copies the files named by `CFR_STUB_<P>_FILE{1..4}` to pointer argument `CFR_STUB_<P>_ARG{n}`
/// at byte `CFR_STUB_<P>_AT{n}` and checks nothing. On the kernel's second launch the byte at
/// `CFR_STUB_FLIP_SECOND` of its first region is flipped. `CFR_STUB_SYNC_ERROR` is what
/// synchronising after the kernel returns, `CFR_STUB_REF_SYNC_ERROR` after a reference run.
const STUB_SOURCE: &str = r#"#include "cfr_stub.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
static int launches = 0, last_program = 0;
static long long envi(const char* n, long long d) { const char* v = getenv(n); return v ? atoll(v) : d; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448 : 0;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute a, int v) {
    printf("stub: attribute %d = %d\n", (int)a, v);
    return cudaSuccess;
}
static void write_region(void** args, char program, int n, bool flip) {
    char file[64], arg[64], at[64];
    snprintf(file, sizeof file, "CFR_STUB_%c_FILE%d", program, n);
    snprintf(arg, sizeof arg, "CFR_STUB_%c_ARG%d", program, n);
    snprintf(at, sizeof at, "CFR_STUB_%c_AT%d", program, n);
    const char* path = getenv(file);
    if (!path) return;
    FILE* f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)malloc(len ? len : 1);
    if (fread(buf, 1, len, f) != (size_t)len) abort();
    fclose(f);
    char* base = *(char**)args[envi(arg, 0)] + envi(at, 0);
    memcpy(base, buf, len);
    if (flip && launches == 2 && getenv("CFR_STUB_FLIP_SECOND")) base[envi("CFR_STUB_FLIP_SECOND", 0)] ^= 1;
    free(buf);
}
cudaError_t cudaLaunchKernel(const void* f, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t) {
    int program = 0;
    for (int p = 1; p < 3; p++) if (f && f == cfr_stub_programs[p]) program = p;
    const char names[3] = {'K', 'G', 'B'};
    if (program == 0) launches++;
    last_program = program;
    printf("stub: launch %c grid %u %u %u block %u %u %u smem %zu\n", names[program], g.x, g.y, g.z, b.x, b.y, b.z, smem);
    for (int n = 1; n <= 4; n++) write_region(args, names[program], n, program == 0 && n == 1);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return (cudaError_t)envi(last_program ? "CFR_STUB_REF_SYNC_ERROR" : "CFR_STUB_SYNC_ERROR", 0); }
const char* cudaGetErrorName(cudaError_t e) { return e == 716 ? "cudaErrorMisalignedAddress" : "cudaErrorStub"; }
const char* cudaGetErrorString(cudaError_t e) { return e == 716 ? "misaligned address" : "stub error"; }
"#;

/// A fake CUDA driver for Python repros: loads the script as a module, replaces its `Cuda` (the
/// `libcuda` handle) with a fake that behaves like the stub runtime (same environment variables,
/// same `stub:` lines) and its NVRTC compile with the program's name, then runs its `main()`
/// with `--backend driver` and the given arguments.
pub const PY_FAKE_DRIVER: &str = r#"import ctypes, importlib.util, os, sys

spec = importlib.util.spec_from_file_location("repro", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
NAMES = "KGB"


def envi(k, d=0):
    v = os.environ.get(k)
    return int(v) if v is not None else d


class FakeLib:
    def __init__(self):
        self.keep, self.launches, self.last = [], 0, 0

    def cuInit(self, flags): return 0
    def cuDeviceGet(self, dev, i): dev._obj.value = 0; return 0
    def cuDeviceGetAttribute(self, v, attr, dev): v._obj.value = {75: 9, 76: 0, 97: 232448}.get(attr, 0); return 0
    def cuCtxGetCurrent(self, ctx): ctx._obj.value = 1; return 0
    def cuModuleLoadData(self, module, cubin): module._obj.value = ["kernel", "gold", "baseline"].index(cubin.decode()) + 1; return 0
    def cuModuleGetFunction(self, func, module, name): func._obj.value = module.value; return 0
    def cuFuncSetAttribute(self, func, attr, v): print(f"stub: attribute {attr} = {v.value}"); return 0
    def cuMemFree_v2(self, p): return 0
    def cuStreamQuery(self, s): return 0
    def cuCtxSynchronize(self): return envi("CFR_STUB_REF_SYNC_ERROR" if self.last else "CFR_STUB_SYNC_ERROR")
    def cuGetErrorName(self, code, p): p._obj.value = b"cudaErrorMisalignedAddress" if code == 716 else b"cudaErrorStub"; return 0
    def cuGetErrorString(self, code, p): p._obj.value = b"misaligned address" if code == 716 else b"stub error"; return 0
    def cuMemcpyHtoD_v2(self, dst, data, n): ctypes.memmove(dst.value, data, n.value); return 0
    def cuMemcpyDtoH_v2(self, buf, src, n): ctypes.memmove(buf, src.value, n.value); return 0

    def cuMemAlloc_v2(self, p, n):
        buf = ctypes.create_string_buffer(n.value + 256)
        self.keep.append(buf)
        p._obj.value = (ctypes.addressof(buf) + 255) // 256 * 256
        return 0

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        program = func.value - 1
        self.launches += program == 0
        self.last = program
        print(f"stub: launch {NAMES[program]} grid {gx.value} {gy.value} {gz.value} block {bx.value} {by.value} {bz.value} smem {smem.value}")
        for n in range(1, 5):
            self.region(params, NAMES[program], n, program == 0 and n == 1)
        return 0

    def region(self, params, p, n, flip):
        path = os.environ.get(f"CFR_STUB_{p}_FILE{n}")
        if not path:
            return
        with open(path, "rb") as f:
            data = f.read()
        base = ctypes.c_uint64.from_address(params[envi(f"CFR_STUB_{p}_ARG{n}")]).value + envi(f"CFR_STUB_{p}_AT{n}")
        ctypes.memmove(base, data, len(data))
        if flip and self.launches == 2 and "CFR_STUB_FLIP_SECOND" in os.environ:
            ctypes.c_uint8.from_address(base + envi("CFR_STUB_FLIP_SECOND")).value ^= 1


def fake_init(self):
    self.lib = FakeLib()


m.Cuda.__init__ = fake_init
m.compile_program = lambda program, arch: (program["what"].encode(), program["entry"].encode())
sys.argv = ["repro", "--backend", "driver"] + sys.argv[2:]
sys.exit(m.main())
"#;

/// An emitted repro the stub tests run.
pub enum Repro {
    /// The `.cu` program's host part, built against the stub runtime.
    Cu(PathBuf),
    /// The Python script, and the fake driver that runs it.
    Py(PathBuf, PathBuf),
}

impl Repro {
    /// `cu` or `python`.
    pub fn lang(&self) -> &'static str {
        match self {
            Repro::Cu(_) => "cu",
            Repro::Py(..) => "python",
        }
    }

    /// Runs it with `args` in the environment `env`: exit status and output.
    pub fn run(&self, args: &[&str], env: &[(String, String)]) -> (i32, String) {
        let mut cmd = match self {
            Repro::Cu(exe) => Command::new(exe),
            Repro::Py(script, driver) => {
                let mut c = Command::new("python3");
                c.arg(driver).arg(script);
                c
            }
        };
        let o: Output = cmd.args(args).envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))).output().unwrap();
        (o.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    }
}

fn have(need: Need) -> bool {
    crate::common::env::have(need)
}

/// The repros of a subject that this machine can run: the `.cu` one with g++, the Python one
/// with python3; `cu` and `py` are their texts.
pub fn repros(dir: &Path, name: &str, m: &Manifest, cu: &str, py: &str) -> Vec<Repro> {
    let mut out = Vec::new();
    if have(Need::Gxx) {
        out.push(Repro::Cu(build_host(dir, name, cu, m)));
    }
    if have(Need::Python3) {
        let (script, driver) = (dir.join(format!("{name}.py")), dir.join("fake_driver.py"));
        std::fs::write(&script, py).unwrap();
        std::fs::write(&driver, PY_FAKE_DRIVER).unwrap();
        out.push(Repro::Py(script, driver));
    }
    out
}

/// Builds the host part of a `.cu` repro with the stub runtime; the stub defines the entry points
/// the repro declares in a host-only build.
fn build_host(dir: &Path, name: &str, text: &str, m: &Manifest) -> PathBuf {
    let mut defs = format!("extern \"C\" void {}(void) {{}}\n", m.entry);
    let mut programs = format!("(const void*){}", m.entry);
    match &m.reference {
        ReferenceSpec::Kernel(k) => {
            for r in ["gold", "baseline"] {
                defs.push_str(&format!("extern \"C\" void cfr_{r}_{}(void) {{}}\n", k.entry));
                programs.push_str(&format!(", (const void*)cfr_{r}_{}", k.entry));
            }
        }
        _ => programs.push_str(", nullptr, nullptr"),
    }
    std::fs::write(dir.join("cfr_stub.h"), STUB_HEADER).unwrap();
    std::fs::write(dir.join(format!("{name}-stub.cpp")), format!("{defs}static const void* cfr_stub_programs[3] = {{{programs}}};\n{STUB_SOURCE}")).unwrap();
    let src = dir.join(format!("{name}.cu"));
    std::fs::write(&src, text).unwrap();
    let exe = dir.join(name);
    let o = Command::new("g++")
        .current_dir(dir)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-DCF_REPRO_HOST_ONLY", "-include", "cfr_stub.h", "-x", "c++"])
        .arg(&src)
        .args(["-x", "c++", "-include", "cfr_stub.h"])
        .arg(format!("{name}-stub.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{name}: g++ failed:\n{}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// Values of some judged outputs, `(roster position, logical values)`.
pub type Values = [(usize, Vec<f64>)];

/// An environment for the stub: regions written by program `p` (`K`, `G`, `B`).
#[derive(Clone, Default)]
pub struct Stub {
    pub env: Vec<(String, String)>,
}

impl Stub {
    /// Program `p` writes `bytes` (kept in `file`) to pointer argument `arg` at byte `at`, as region `n`.
    pub fn region(mut self, p: char, n: usize, file: String, arg: usize, at: i64) -> Stub {
        self.env.retain(|(k, _)| !k.starts_with(&format!("CFR_STUB_{p}_")) || !k.ends_with(&n.to_string()));
        self.env.push((format!("CFR_STUB_{p}_FILE{n}"), file));
        self.env.push((format!("CFR_STUB_{p}_ARG{n}"), arg.to_string()));
        self.env.push((format!("CFR_STUB_{p}_AT{n}"), at.to_string()));
        self
    }

    /// Sets one more variable.
    pub fn with(mut self, k: &str, v: String) -> Stub {
        self.env.push((k.to_string(), v));
        self
    }
}

/// The data span of a kernel output holding `values` (logical order) rounded to its type, with
/// its stride gaps as the image has them.
pub fn span_with(e: &Expected, index: usize, values: &[f64]) -> Vec<u8> {
    let k = e.kernel();
    let a = &k.image.layout.allocs[index];
    let mut span = k.image.bytes[index][a.data_offset as usize..(a.data_offset + a.span_bytes) as usize].to_vec();
    cudafuzz::engine::data::write_strided(values, &k.plan.tensors[index], &mut span);
    span
}

/// The pointer argument of tensor `index` in program `p`'s launch.
pub fn ptr_arg(e: &Expected, p: usize, index: usize) -> usize {
    e.programs[p].args.iter().position(|a| *a == ResolvedArg::Tensor(index)).unwrap()
}

/// The gold values of every judged output: the host gold, or for a reference kernel values the
/// stub's gold run writes (a simple ramp).
pub fn gold_values(e: &Expected) -> Vec<(usize, Vec<f64>)> {
    if !e.gold.is_empty() {
        return e.gold.iter().map(|(i, g, _)| (*i, g.clone())).collect();
    }
    e.judged().iter().map(|&i| (i, (0..e.kernel().plan.tensors[i].numel).map(|j| 0.375 + 0.125 * j as f64).collect())).collect()
}

/// A stub whose kernel writes `outputs` (judged outputs' values), and whose reference runs (if
/// any) write `gold` and `baseline`.
pub fn stub_for(dir: &Path, name: &str, e: &Expected, outputs: &Values, reference: Option<(&Values, &Values)>) -> Stub {
    let file = |tag: &str, bytes: &[u8]| {
        let p = dir.join(format!("{name}-{tag}.bin"));
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let mut stub = Stub::default();
    for (n, (i, v)) in outputs.iter().enumerate() {
        stub = stub.region('K', n + 1, file(&format!("k{i}"), &span_with(e, *i, v)), ptr_arg(e, 0, *i), 0);
    }
    let Some((gold, baseline)) = reference else { return stub };
    for (p, tag, runs) in [(1, 'G', gold), (2, 'B', baseline)] {
        for (n, (i, v)) in runs.iter().enumerate() {
            let tp = &e.programs[p].plan.tensors[*i];
            let bytes: Vec<u8> =
                v.iter().flat_map(|&x| cudafuzz::engine::data::to_bits(x, tp.dtype).to_le_bytes()[..tp.elem_bytes as usize].to_vec()).collect();
            stub = stub.region(tag, n + 1, file(&format!("{tag}{i}"), &bytes), ptr_arg(e, p, *i), 0);
        }
    }
    stub
}
