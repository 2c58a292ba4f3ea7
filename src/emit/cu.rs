//! `--emit cu`: one `.cu` file with the kernel, the case's data and a `main()` that replays it.
//!
//! Layout of the emitted file, top to bottom: a comment with the seed, the case, the saved finding
//! and the exact commands; the host C++ headers; the kernel section (the harness's `-D` defines as
//! `#define`s, then the kernel source with its project headers inlined, see
//! [`inline_source`](super::inline_source)); the case's data (allocation table, run-length coded
//! images, fp64 reference, launch geometry and arguments); the host program ([`HOST_PROGRAM`]).
//!
//! Guards: under NVRTC (`__CUDACC_RTC__`) only the kernel section is compiled, so the device part
//! can be checked with NVRTC exactly as the harness compiles kernels; with `CF_REPRO_HOST_ONLY`
//! the kernel section is replaced by a declaration of the entry point, so the host part compiles
//! with a plain C++ compiler against a stub CUDA runtime (cudafuzz's tests do this).
//!
//! The program uses the CUDA runtime API only (`cudaLaunchKernel` with the argument list as the
//! manifest orders it), so `nvcc -arch=native -o repro repro.cu` builds it.

use std::fmt::Write as _;

use super::{arg_alloc, arg_text, c_escape, dtype_code, header_lines, one_line, prepare, EmitError, Prepared, Run, SeedInfo};
use crate::case::Case;
use crate::manifest::{Manifest, ResolvedArg};

/// Writes the `.cu` repro of `case` against `manifest` (see the module docs).
pub fn emit_cu(case: &Case, manifest: &Manifest, seed: &SeedInfo) -> Result<String, EmitError> {
    let p = prepare(case, manifest, seed.tool())?;
    Ok(render(&p, seed))
}

/// The binary name for a file name (`repro.cu` → `repro`).
fn binary_name(file_name: &str) -> String {
    let stem = std::path::Path::new(file_name).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if stem.is_empty() {
        "repro".to_string()
    } else {
        stem
    }
}

/// The manifest's NVRTC options as nvcc options (`--std=` becomes `-std=`; the architecture
/// is left to `-arch=native`).
fn nvcc_options(options: &[String]) -> Vec<String> {
    options
        .iter()
        .filter(|o| !(o.starts_with("--gpu-architecture") || o.starts_with("-arch") || o.starts_with("--gpu-name")))
        .map(|o| match o.strip_prefix("--std=") {
            Some(s) => format!("-std={s}"),
            None => o.clone(),
        })
        .collect()
}

/// The build and run commands printed in the file's header and by the CLI.
pub fn commands(p: &Prepared, file_name: &str) -> Vec<String> {
    let bin = binary_name(file_name);
    let mut build = "nvcc -arch=native -lineinfo".to_string();
    for o in nvcc_options(&p.options) {
        build.push(' ');
        build.push_str(&o);
    }
    let _ = write!(build, " -o {bin} {file_name}");
    let mut out = vec![build, format!("./{bin}")];
    let tool = p.tool.unwrap_or(crate::sanitizer::Tool::Memcheck);
    out.push(format!("{} ./{bin}", p.sanitizer_command(tool)));
    out
}

pub(super) fn render(p: &Prepared, seed: &SeedInfo) -> String {
    let file_name = if seed.file_name.is_empty() { "repro.cu".to_string() } else { seed.file_name.clone() };
    let mut o = String::with_capacity(1 << 16);
    let cmds = commands(p, &file_name);
    for l in header_lines(p, seed, "CUDA C++", &cmds) {
        if l.is_empty() {
            o.push_str("//\n");
        } else {
            let _ = writeln!(o, "// {}", one_line(&l));
        }
    }
    o.push_str(
        "// Plain `nvcc -arch=native -o repro FILE.cu` builds it too (without -lineinfo, sanitizer reports\n\
         // name no source lines). Options: --timeout-ms N (watchdog; 0 = none), --no-determinism (skip\n\
         // the second, bit-compared run), --write-image DIR (write the decoded arena images, no GPU).\n\
         // The kernel section compiles alone under NVRTC (__CUDACC_RTC__); -DCF_REPRO_HOST_ONLY leaves\n\
         // it out for host-only compiler checks.\n\n",
    );
    o.push_str("#if !defined(__CUDACC_RTC__)\n#include <cmath>\n#include <cstdarg>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <chrono>\n#include <thread>\n#endif\n\n");

    // Kernel section.
    o.push_str("// ======== the kernel, compiled as the harness compiles it (defines first) ========\n");
    o.push_str("#if !defined(CF_REPRO_HOST_ONLY)\n");
    for (k, v) in &p.defines {
        let _ = writeln!(o, "#define {k} {v}");
    }
    o.push_str(&p.source.text);
    if !o.ends_with('\n') {
        o.push('\n');
    }
    for k in p.defines.keys() {
        let _ = writeln!(o, "#undef {k}");
    }
    let _ = writeln!(o, "#else\nextern \"C\" void {}(void);  // stand-in for host-only compiler checks\n#endif", p.entry);
    let next = o.lines().count() + 2;
    let _ = writeln!(o, "#line {next} \"{}\"", c_escape(&file_name));
    o.push_str("\n#if !defined(__CUDACC_RTC__)\n");
    data_section(&mut o, p, seed);
    o.push_str(HOST_PROGRAM);
    o.push_str("#endif  // !__CUDACC_RTC__\n");
    o
}

/// Appends `bytes` as a C initializer list body, 24 bytes a line.
fn hex_bytes(o: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for chunk in bytes.chunks(24) {
        o.push_str("  ");
        for &b in chunk {
            o.push_str("0x");
            o.push(HEX[(b >> 4) as usize] as char);
            o.push(HEX[(b & 15) as usize] as char);
            o.push(',');
        }
        o.push('\n');
    }
}

fn data_section(o: &mut String, p: &Prepared, seed: &SeedInfo) {
    o.push_str("// ======== the case's data (generated by cudafuzz; do not edit) ========\n");
    let _ = writeln!(o, "#define CFR_ENTRY {}", p.entry);
    o.push_str(
        "struct cfr_run { unsigned long long bytes; unsigned int period; unsigned char pattern[4]; };\n\
         struct cfr_alloc {\n\
         \x20   const char* name;\n\
         \x20   int tensor;                      // 0 q, 1 k, 2 v, 3 o; -1 a manifest buffer\n\
         \x20   unsigned long long total;        // allocation bytes\n\
         \x20   unsigned long long data_offset;  // first data byte: redzone before + the case's offset\n\
         \x20   unsigned long long span;         // data bytes, first to last element\n\
         \x20   int uninit;                      // data left uninitialised on the device (redzones only)\n\
         \x20   unsigned long long first_run, n_runs, literal_offset;\n\
         \x20   unsigned long long fnv1a64;      // checksum of the decoded image\n\
         };\n\
         struct cfr_tensor { unsigned shape[4]; unsigned long long strides[4]; unsigned elem_bytes; };\n\
         struct cfr_arg { int kind; unsigned long long alloc; long long value; unsigned int f32_bits; };  // kind: 0 pointer, 1 i32, 2 i64, 3 f32\n",
    );
    let n = p.image.layout.allocs.len();
    let _ = writeln!(o, "static const int CFR_N_ALLOCS = {n};");
    o.push_str("static const cfr_alloc cfr_allocs[CFR_N_ALLOCS] = {\n");
    let mut first_run = 0usize;
    let mut lit_off = 0usize;
    for (i, (a, e)) in p.image.layout.allocs.iter().zip(&p.encoded).enumerate() {
        let tensor = match &a.holder {
            crate::arena::Holder::Tensor(t) => t.index() as i32,
            crate::arena::Holder::Buffer(_) => -1,
        };
        let _ = writeln!(
            o,
            "  {{\"{}\", {tensor}, {}ull, {}ull, {}ull, {}, {first_run}ull, {}ull, {lit_off}ull, 0x{:016x}ull}},  // canary 0x{:02x}, redzone after {}",
            c_escape(a.holder.name()),
            a.total_bytes(),
            a.data_offset,
            a.span_bytes,
            p.image.data_uninit[i] as i32,
            e.runs.len(),
            super::fnv1a64(&p.image.bytes[i]),
            a.canary,
            a.redzone_after
        );
        first_run += e.runs.len();
        lit_off += e.literal.len();
    }
    o.push_str("};\n");
    o.push_str("static const cfr_tensor cfr_tensors[4] = {\n");
    for tp in &p.plan.tensors {
        let _ = writeln!(
            o,
            "  {{{{{}u, {}u, {}u, {}u}}, {{{}ull, {}ull, {}ull, {}ull}}, {}u}},  // {} [b, h, s, d]",
            tp.shape[0], tp.shape[1], tp.shape[2], tp.shape[3], tp.strides[0], tp.strides[1], tp.strides[2], tp.strides[3], tp.elem_bytes, tp.tensor
        );
    }
    o.push_str("};\n");
    o.push_str("static const cfr_run cfr_runs[] = {\n");
    let mut any_run = false;
    for (i, e) in p.encoded.iter().enumerate() {
        let _ = writeln!(o, "  // allocation {i}: {}", c_escape(p.image.layout.allocs[i].holder.name()));
        for r in &e.runs {
            any_run = true;
            match r {
                Run::Literal { bytes } => {
                    let _ = writeln!(o, "  {{{bytes}ull, 0u, {{0, 0, 0, 0}}}},");
                }
                Run::Fill { pattern, bytes } => {
                    let mut pat = [0u8; 4];
                    pat[..pattern.len()].copy_from_slice(pattern);
                    let _ = writeln!(
                        o,
                        "  {{{bytes}ull, {}u, {{0x{:02x}, 0x{:02x}, 0x{:02x}, 0x{:02x}}}}},",
                        pattern.len(),
                        pat[0],
                        pat[1],
                        pat[2],
                        pat[3]
                    );
                }
            }
        }
    }
    if !any_run {
        o.push_str("  {0ull, 0u, {0, 0, 0, 0}},\n");
    }
    o.push_str("};\n");
    // The blob: literal runs of every allocation, then the reference.
    let ref_o_offset = lit_off;
    let ref_lse_offset = ref_o_offset + 8 * p.ref64.o.len();
    let lse_count = p.reference_lse_count();
    o.push_str("// Literal runs of every allocation in order, then the fp64 reference o, then the reference lse (little-endian doubles).\n");
    o.push_str("static const unsigned char cfr_blob[] = {\n");
    for e in &p.encoded {
        hex_bytes(o, &e.literal);
    }
    hex_bytes(o, &p.reference_bytes());
    o.push_str("  0x00,\n};\n");
    let _ = writeln!(o, "static const unsigned long long CFR_REF_O_OFFSET = {ref_o_offset}ull, CFR_REF_O_COUNT = {}ull;", p.ref64.o.len());
    let _ = writeln!(o, "static const unsigned long long CFR_REF_LSE_OFFSET = {ref_lse_offset}ull, CFR_REF_LSE_COUNT = {lse_count}ull;");
    let (lse_alloc, lse_dtype) = p.lse_slot();
    let _ = writeln!(o, "static const int CFR_LSE_ALLOC = {lse_alloc}, CFR_LSE_DTYPE = {lse_dtype};  // buffer dtype: 0 f16, 1 bf16, 2 f32, 3 f64, 4 i32, 5 u32");
    let _ = writeln!(
        o,
        "static const int CFR_DTYPE = {};  // {}: 0 f16, 1 bf16, 2 f32\nstatic const unsigned CFR_SENTINEL = 0x{:x}u;  // quiet NaN the output is pre-filled with",
        dtype_code(p.case.dtype),
        p.case.dtype,
        crate::arena::sentinel_bits(p.case.dtype)
    );
    let t = &p.tolerance;
    let _ = writeln!(
        o,
        "// Error bound (FlashAttention's rule): max |out - ref64| <= 2 * {:e} (same-precision error) + {:e} = {:e}\nstatic const unsigned long long CFR_BOUND_BITS = 0x{:016x}ull, CFR_ERR_LOWP_BITS = 0x{:016x}ull, CFR_FLOOR_BITS = 0x{:016x}ull;",
        t.err_lowp,
        t.floor,
        t.bound,
        t.bound.to_bits(),
        t.err_lowp.to_bits(),
        t.floor.to_bits()
    );
    let l = &p.launch;
    let _ = writeln!(
        o,
        "static const unsigned CFR_GRID[3] = {{{}u, {}u, {}u}}, CFR_BLOCK[3] = {{{}u, {}u, {}u}};\nstatic const unsigned CFR_SHARED_BYTES = {}u;",
        l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_bytes
    );
    let _ = writeln!(o, "static const int CFR_N_ARGS = {};", l.args.len());
    o.push_str("static const cfr_arg cfr_args[] = {\n");
    for (i, a) in l.args.iter().enumerate() {
        let (kind, alloc, value, bits, shown) = match *a {
            ResolvedArg::Tensor(_) | ResolvedArg::Buffer(_) => {
                let al = arg_alloc(a).expect("a pointer");
                (0, al, 0i64, 0u32, format!("-> {} + {}", p.image.layout.allocs[al].holder.name(), p.image.layout.allocs[al].data_offset))
            }
            ResolvedArg::I32(x) => (1, 0, x as i64, 0, format!("= {x}")),
            ResolvedArg::I64(x) => (2, 0, x, 0, format!("= {x}")),
            ResolvedArg::F32(x) => (3, 0, 0, x.to_bits(), format!("= {x:?}")),
        };
        let _ = writeln!(o, "  {{{kind}, {alloc}ull, {value}ll, 0x{bits:08x}u}},  // {i}: {} {}", one_line(&arg_text(&p.arg_specs, i)), shown);
    }
    if l.args.is_empty() {
        o.push_str("  {0, 0ull, 0ll, 0u},\n");
    }
    o.push_str("};\n");
    let _ = writeln!(o, "static const unsigned long long CFR_TIMEOUT_MS = {}ull;", p.timeout_ms);
    let _ = writeln!(o, "static const char* const CFR_CASE = \"{}\";", c_escape(&p.case.summary()));
    let _ = writeln!(o, "static const char* const CFR_KERNEL = \"{}\";", c_escape(&p.kernel_label));
    let expected = seed.finding.as_ref().map(|f| one_line(&f.to_string())).unwrap_or_default();
    let _ = writeln!(o, "static const char* const CFR_EXPECTED = \"{}\";", c_escape(&expected));
    let _ = writeln!(o, "static const char* const CFR_SIGNATURE = \"{}\";\n", c_escape(seed.signature.as_ref().map(|s| s.as_str()).unwrap_or("")));
}

/// The host program: decode, allocate, upload, launch, wait, judge (the harness's oracles).
pub const HOST_PROGRAM: &str = r#"// ======== the host program (the harness's oracles, ported) ========
static const char* const cfr_tensor_names[4] = {"q", "k", "v", "o"};
static int cfr_failures = 0;

static double cfr_f64_from_bits(unsigned long long b) { double d; memcpy(&d, &b, 8); return d; }

static double cfr_half(unsigned h) {
    unsigned s = h >> 15, e = (h >> 10) & 31u, m = h & 1023u;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m + 1024u), (int)e - 25);
    return s ? -v : v;
}

static double cfr_f32(unsigned u) { float f; memcpy(&f, &u, 4); return (double)f; }

static unsigned cfr_load_bits(const unsigned char* p, unsigned bytes) {
    unsigned v = 0;
    for (unsigned k = 0; k < bytes; k++) v |= (unsigned)p[k] << (8 * k);
    return v;
}

// A tensor element's value from its bits (f16, bf16, f32).
static double cfr_value(unsigned bits, int dtype) {
    if (dtype == 0) return cfr_half(bits);
    if (dtype == 1) return cfr_f32(bits << 16);
    return cfr_f32(bits);
}

// A buffer element's value (f16, bf16, f32, f64, i32, u32).
static double cfr_buffer_value(const unsigned char* p, int dtype) {
    switch (dtype) {
    case 0: return cfr_half(cfr_load_bits(p, 2));
    case 1: return cfr_f32(cfr_load_bits(p, 2) << 16);
    case 2: return cfr_f32(cfr_load_bits(p, 4));
    case 3: { unsigned long long b = 0; for (int k = 0; k < 8; k++) b |= (unsigned long long)p[k] << (8 * k); return cfr_f64_from_bits(b); }
    case 4: return (double)(int)cfr_load_bits(p, 4);
    default: return (double)cfr_load_bits(p, 4);
    }
}

static unsigned cfr_buffer_size(int dtype) { return dtype <= 1 ? 2u : dtype == 3 ? 8u : 4u; }

static void cfr_fail(const char* kind, const char* oracle, const char* fmt, ...) {
    printf("FAIL %s (%s): ", kind, oracle);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    cfr_failures++;
}

// Every element in logical BHSD order: f(linear, index, element offset).
template <typename F> static void cfr_for_each(const cfr_tensor& t, F f) {
    unsigned long long linear = 0;
    unsigned idx[4];
    for (idx[0] = 0; idx[0] < t.shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < t.shape[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < t.shape[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < t.shape[3]; idx[3]++) {
                    unsigned long long off = 0;
                    for (int i = 0; i < 4; i++) off += (unsigned long long)idx[i] * t.strides[i];
                    f(linear++, idx, off);
                }
}

static void cfr_index(const cfr_tensor& t, unsigned long long linear, unsigned idx[4]) {
    for (int i = 3; i >= 0; i--) { idx[i] = (unsigned)(linear % t.shape[i]); linear /= t.shape[i]; }
}

// The element holding a byte of the span, or false for a stride gap (arena::element_at).
static bool cfr_element_at(const cfr_tensor& t, unsigned long long byte, unsigned idx[4]) {
    unsigned long long rem = byte / t.elem_bytes;
    int order[4] = {0, 1, 2, 3};
    for (int i = 1; i < 4; i++) {  // stable sort by (stride, extent), largest first
        int x = order[i], j = i - 1;
        while (j >= 0 && (t.strides[order[j]] < t.strides[x] || (t.strides[order[j]] == t.strides[x] && t.shape[order[j]] < t.shape[x]))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = x;
    }
    for (int k = 0; k < 4; k++) {
        int i = order[k];
        unsigned long long q = rem / t.strides[i];
        if (q >= t.shape[i]) return false;
        idx[i] = (unsigned)q;
        rem -= q * t.strides[i];
    }
    return rem == 0;
}

static unsigned long long cfr_numel(const cfr_tensor& t) {
    return (unsigned long long)t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3];
}

#define CFR_IDX(idx) idx[0], idx[1], idx[2], idx[3]
#define CFR_IDX_FMT "element [b=%u, h=%u, s=%u, d=%u]"

static unsigned long long cfr_fnv1a64(const unsigned char* p, unsigned long long n) {
    unsigned long long h = 0xcbf29ce484222325ull;
    for (unsigned long long i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

static unsigned char* cfr_decode(int i) {
    const cfr_alloc& a = cfr_allocs[i];
    unsigned char* out = (unsigned char*)malloc(a.total ? a.total : 1);
    if (!out) { fprintf(stderr, "repro: out of host memory\n"); exit(2); }
    unsigned long long pos = 0, lit = a.literal_offset;
    for (unsigned long long r = a.first_run; r < a.first_run + a.n_runs; r++) {
        const cfr_run& run = cfr_runs[r];
        if (pos + run.bytes > a.total) break;
        if (run.period == 0) { memcpy(out + pos, cfr_blob + lit, run.bytes); lit += run.bytes; }
        else for (unsigned long long j = 0; j < run.bytes; j++) out[pos + j] = run.pattern[j % run.period];
        pos += run.bytes;
    }
    if (pos != a.total || cfr_fnv1a64(out, a.total) != a.fnv1a64) {
        fprintf(stderr, "repro: the embedded image of allocation %d (%s) does not decode to its checksum: the file was edited or damaged\n", i, a.name);
        exit(2);
    }
    return out;
}

static const char* cfr_kind_of(cudaError_t e, bool at_launch) {
    if ((int)e == 716) return "misaligned_address";
    if ((int)e == 700) return "illegal_address";
    if ((int)e == 719) return "launch_failure";
    if (at_launch || (int)e == 701 || (int)e == 1) return "launch_rejected";
    return "cuda_error";
}

static int cfr_finish(void) {
    if (CFR_EXPECTED[0]) printf("saved finding: %s\n", CFR_EXPECTED);
    if (CFR_SIGNATURE[0]) printf("saved signature: %s\n", CFR_SIGNATURE);
    if (cfr_failures) printf("RESULT: FAIL (%d finding%s)\n", cfr_failures, cfr_failures == 1 ? "" : "s");
    else printf("RESULT: PASS\n");
    fflush(stdout);
    return cfr_failures ? 1 : 0;
}

static void cfr_cuda_failed(const char* what, cudaError_t e, bool at_launch) {
    printf("CUDA error: %s (%d): %s [%s]\n", cudaGetErrorName(e), (int)e, cudaGetErrorString(e), what);
    cfr_fail(cfr_kind_of(e, at_launch), "cuda_status", "the kernel failed with %s (%d)", cudaGetErrorName(e), (int)e);
    exit(cfr_finish());
}

static void cfr_setup(const char* what, cudaError_t e) {
    if (e == cudaSuccess) return;
    printf("repro: %s failed: %s (%d): %s (not a finding: the case could not run)\n", what, cudaGetErrorName(e), (int)e, cudaGetErrorString(e));
    exit(2);
}

static cudaError_t cfr_launch(unsigned char* const* dev) {
    void* params[CFR_N_ARGS > 0 ? CFR_N_ARGS : 1];
    void* ptrs[CFR_N_ARGS > 0 ? CFR_N_ARGS : 1];
    int i32s[CFR_N_ARGS > 0 ? CFR_N_ARGS : 1];
    long long i64s[CFR_N_ARGS > 0 ? CFR_N_ARGS : 1];
    float f32s[CFR_N_ARGS > 0 ? CFR_N_ARGS : 1];
    for (int i = 0; i < CFR_N_ARGS; i++) {
        const cfr_arg& a = cfr_args[i];
        switch (a.kind) {
        case 0: ptrs[i] = dev[a.alloc] + cfr_allocs[a.alloc].data_offset; params[i] = &ptrs[i]; break;
        case 1: i32s[i] = (int)a.value; params[i] = &i32s[i]; break;
        case 2: i64s[i] = a.value; params[i] = &i64s[i]; break;
        default: memcpy(&f32s[i], &a.f32_bits, 4); params[i] = &f32s[i]; break;
        }
    }
    return cudaLaunchKernel((const void*)CFR_ENTRY, dim3(CFR_GRID[0], CFR_GRID[1], CFR_GRID[2]),
                            dim3(CFR_BLOCK[0], CFR_BLOCK[1], CFR_BLOCK[2]), params, CFR_SHARED_BYTES, 0);
}

// Waits for the kernel with a watchdog; returns the launch's CUDA status.
static cudaError_t cfr_wait(unsigned long long timeout_ms) {
    auto start = std::chrono::steady_clock::now();
    for (;;) {
        cudaError_t e = cudaStreamQuery(0);
        if (e != cudaErrorNotReady) {
            cudaError_t s = cudaDeviceSynchronize();
            return e != cudaSuccess ? e : s;
        }
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
        if (timeout_ms > 0 && (unsigned long long)ms > timeout_ms) {
            cfr_fail("hang", "watchdog", "the kernel was still running after %llu ms (--timeout-ms changes the limit)", timeout_ms);
            cfr_finish();
            fflush(stdout);
            _Exit(1);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

static void cfr_download(unsigned char* host, const unsigned char* dev, unsigned long long n) {
    cudaError_t e = cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) cfr_cuda_failed("cudaMemcpy device to host after the launch", e, false);
}

// Canaries in redzones and gaps, unchanged inputs, no sentinel left (oracle::check_memory).
static void cfr_check_memory(unsigned char* const* before, unsigned char* const* after) {
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        const cfr_alloc& a = cfr_allocs[i];
        const unsigned char* b = before[i];
        const unsigned char* n = after[i];
        // An untouched allocation is fine, except the output: a kernel that writes nothing
        // leaves every sentinel (oracle::check_memory skips it; the repro does not).
        if (a.tensor != 3 && memcmp(b, n, a.total) == 0) continue;
        unsigned long long ds = a.data_offset, de = ds + a.span;
        unsigned long long count = 0, pos = 0;
        bool found = false;
        for (unsigned long long x = ds; x-- > 0;) if (b[x] != n[x]) { if (!found) { pos = x; found = true; } count++; }
        if (found)
            cfr_fail("canary_damage", "canary", "%llu bytes of the redzone before %s were overwritten (write before the start); nearest %llu bytes before the first byte",
                     count, a.name, ds - pos);
        count = 0; found = false;
        unsigned long long last = 0;
        for (unsigned long long x = de; x < a.total; x++) if (b[x] != n[x]) { if (!found) { pos = x; found = true; } last = x; count++; }
        if (found)
            cfr_fail("canary_damage", "canary", "%llu bytes after the end of %s were overwritten, up to %llu bytes past its last byte (write past the end); first %llu bytes past the last byte",
                     count, a.name, last - de + 1, pos - de + 1);
        if (a.tensor < 0) continue;
        const cfr_tensor& t = cfr_tensors[a.tensor];
        bool gapless = cfr_numel(t) * t.elem_bytes == a.span;
        unsigned idx[4];
        if (!gapless) {
            count = 0; found = false;
            for (unsigned long long x = 0; x < a.span; x++)
                if (b[ds + x] != n[ds + x] && !cfr_element_at(t, x, idx)) { if (!found) { pos = x; found = true; } count++; }
            if (found)
                cfr_fail("canary_damage", "canary", "%llu bytes in the stride gaps of %s were overwritten (write between rows); first at stride gap byte %llu", count, a.name, pos);
        }
        if (a.tensor == 3) {
            unsigned long long left = 0, first = 0;
            cfr_for_each(t, [&](unsigned long long linear, const unsigned*, unsigned long long off) {
                if (cfr_load_bits(n + ds + off * t.elem_bytes, t.elem_bytes) == CFR_SENTINEL) { if (!left) first = linear; left++; }
            });
            if (left) {
                cfr_index(t, first, idx);
                cfr_fail("unwritten_output", "sentinel", "%llu of %llu output elements were never written; first at " CFR_IDX_FMT, left, cfr_numel(t), CFR_IDX(idx));
            }
        } else if (memcmp(b + ds, n + ds, a.span) != 0) {
            count = 0; found = false;
            for (unsigned long long x = 0; x < a.span; x++)
                if (b[ds + x] != n[ds + x] && (gapless || cfr_element_at(t, x, idx))) { if (!found) { pos = x; found = true; } count++; }
            if (found) {
                cfr_element_at(t, pos, idx);
                cfr_fail("input_clobbered", "input_integrity", "%llu bytes of input %s changed during the launch; first at " CFR_IDX_FMT, count, a.name, CFR_IDX(idx));
            }
        }
    }
}

// NaN leak, the error bound against the fp64 reference, and the lse buffer (oracle::check_values).
static void cfr_check_values(unsigned char* const* after) {
    const cfr_tensor& t = cfr_tensors[3];
    const unsigned char* o = after[3] + cfr_allocs[3].data_offset;
    const double bound = cfr_f64_from_bits(CFR_BOUND_BITS);
    if (cfr_numel(t) != CFR_REF_O_COUNT) { fprintf(stderr, "repro: the reference does not match o's shape: the file was edited\n"); exit(2); }
    unsigned long long nonfinite = 0, first_nf = 0, over = 0;
    long long worst_i = -1;
    double worst = 0.0, err = 0.0, worst_x = 0.0;
    cfr_for_each(t, [&](unsigned long long i, const unsigned*, unsigned long long off) {
        unsigned bits = cfr_load_bits(o + off * t.elem_bytes, t.elem_bytes);
        if (bits == CFR_SENTINEL) return;
        double x = cfr_value(bits, CFR_DTYPE);
        double r;
        memcpy(&r, cfr_blob + CFR_REF_O_OFFSET + 8 * i, 8);
        if (!std::isfinite(x) && std::isfinite(r)) { if (!nonfinite) first_nf = i; nonfinite++; return; }
        double e = fabs(x - r);
        if (e > worst || worst_i < 0) { worst = e; worst_i = (long long)i; worst_x = x; }
        if (x != r) { double d = fabs(x - r); if (std::isnan(d)) err = INFINITY; else if (d > err) err = d; }
        if (e > bound) over++;
    });
    unsigned idx[4];
    if (nonfinite) {
        cfr_index(t, first_nf, idx);
        cfr_fail("nan_leak", "nan_leak", "%llu output elements are NaN or infinite while the inputs and the fp64 reference are finite (out-of-bounds read of a poisoned redzone or gap?); first at " CFR_IDX_FMT,
                 nonfinite, CFR_IDX(idx));
    }
    if (err > bound) {
        double r;
        memcpy(&r, cfr_blob + CFR_REF_O_OFFSET + 8 * (unsigned long long)worst_i, 8);
        cfr_index(t, (unsigned long long)worst_i, idx);
        cfr_fail("numerical_error", "reference", "max |out - ref64| = %.3e exceeds 2 x %.3e (same-precision error) + %.3e = %.3e; %llu elements over; worst at " CFR_IDX_FMT ": %.9g vs reference %.9g",
                 err, cfr_f64_from_bits(CFR_ERR_LOWP_BITS), cfr_f64_from_bits(CFR_FLOOR_BITS), bound, over, CFR_IDX(idx), worst_x, r);
    }
    if (CFR_LSE_ALLOC >= 0) {
        const cfr_alloc& a = cfr_allocs[CFR_LSE_ALLOC];
        unsigned size = cfr_buffer_size(CFR_LSE_DTYPE);
        unsigned long long n = a.span / size;
        if (n > CFR_REF_LSE_COUNT) n = CFR_REF_LSE_COUNT;
        unsigned long long bad = 0, first = 0;
        double fx = 0, fr = 0;
        for (unsigned long long i = 0; i < n; i++) {
            double x = cfr_buffer_value(after[CFR_LSE_ALLOC] + a.data_offset + i * size, CFR_LSE_DTYPE);
            double r;
            memcpy(&r, cfr_blob + CFR_REF_LSE_OFFSET + 8 * i, 8);
            bool ok = std::isfinite(r) ? fabs(x - r) <= 1e-3 * (fabs(r) > 1.0 ? fabs(r) : 1.0) : x == r;
            if (!ok) { if (!bad) { first = i; fx = x; fr = r; } bad++; }
        }
        if (bad) cfr_fail("numerical_error", "reference", "%llu log-sum-exp values differ from the reference; first at row %llu: %g vs %g", bad, first, fx, fr);
    }
}

int main(int argc, char** argv) {
    unsigned long long timeout_ms = CFR_TIMEOUT_MS;
    bool determinism = true;
    const char* image_dir = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = strtoull(argv[++i], nullptr, 10);
        else if (!strcmp(argv[i], "--no-determinism")) determinism = false;
        else if (!strcmp(argv[i], "--write-image") && i + 1 < argc) image_dir = argv[++i];
        else {
            printf("usage: %s [--timeout-ms N] [--no-determinism] [--write-image DIR]\n", argv[0]);
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    printf("cudafuzz repro: %s, case %s\n", CFR_KERNEL, CFR_CASE);
    unsigned char* image[CFR_N_ALLOCS];
    for (int i = 0; i < CFR_N_ALLOCS; i++) image[i] = cfr_decode(i);
    if (image_dir) {
        for (int i = 0; i < CFR_N_ALLOCS; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/alloc%d-%s.bin", image_dir, i, cfr_allocs[i].name);
            FILE* f = fopen(path, "wb");
            if (!f || fwrite(image[i], 1, cfr_allocs[i].total, f) != cfr_allocs[i].total) { fprintf(stderr, "repro: cannot write %s\n", path); return 2; }
            fclose(f);
            printf("wrote %s (%llu bytes)\n", path, cfr_allocs[i].total);
        }
        return 0;
    }
    int device = 0, major = 0, minor = 0;
    cfr_setup("cudaGetDevice", cudaGetDevice(&device));
    cfr_setup("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cfr_setup("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    printf("device %d: sm_%d%d\n", device, major, minor);
    // One allocation per tensor and buffer: cudaMalloc returns 256-byte-aligned pointers, so
    // the case's byte offset alone decides each tensor's residue mod 16, as in the harness.
    unsigned char* dev[CFR_N_ALLOCS];
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        const cfr_alloc& a = cfr_allocs[i];
        cfr_setup("cudaMalloc", cudaMalloc((void**)&dev[i], a.total));
        if ((unsigned long long)(size_t)dev[i] % 256 != 0) printf("warning: allocation %s is not 256-byte aligned\n", a.name);
        if (a.uninit) {
            cfr_setup("cudaMemcpy", cudaMemcpy(dev[i], image[i], a.data_offset, cudaMemcpyHostToDevice));
            unsigned long long end = a.data_offset + a.span;
            cfr_setup("cudaMemcpy", cudaMemcpy(dev[i] + end, image[i] + end, a.total - end, cudaMemcpyHostToDevice));
        } else {
            cfr_setup("cudaMemcpy", cudaMemcpy(dev[i], image[i], a.total, cudaMemcpyHostToDevice));
        }
    }
    for (int i = 0; i < 4; i++)
        printf("  %s at %p (data %p, ptr %% 16 = %llu)\n", cfr_tensor_names[i], (void*)dev[i], (void*)(dev[i] + cfr_allocs[i].data_offset),
               (unsigned long long)(size_t)(dev[i] + cfr_allocs[i].data_offset) % 16);
    if (CFR_SHARED_BYTES > 48u * 1024u) {
        int optin = 0;
        cfr_setup("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        if ((unsigned)optin < CFR_SHARED_BYTES) {
            cfr_fail("launch_rejected", "cuda_status", "launch asks for %u bytes of dynamic shared memory; this GPU allows at most %d", CFR_SHARED_BYTES, optin);
            return cfr_finish();
        }
        cudaError_t e = cudaFuncSetAttribute((const void*)CFR_ENTRY, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)CFR_SHARED_BYTES);
        if (e != cudaSuccess) cfr_cuda_failed("cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", e, true);
    }
    printf("launch: grid (%u, %u, %u), block (%u, %u, %u), %u bytes of dynamic shared memory\n", CFR_GRID[0], CFR_GRID[1], CFR_GRID[2],
           CFR_BLOCK[0], CFR_BLOCK[1], CFR_BLOCK[2], CFR_SHARED_BYTES);
    fflush(stdout);
    cudaError_t e = cfr_launch(dev);
    if (e != cudaSuccess) cfr_cuda_failed("cudaLaunchKernel", e, true);
    e = cfr_wait(timeout_ms);
    if (e != cudaSuccess) cfr_cuda_failed("cudaDeviceSynchronize after the launch", e, false);
    unsigned char* after[CFR_N_ALLOCS];
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        after[i] = (unsigned char*)malloc(cfr_allocs[i].total ? cfr_allocs[i].total : 1);
        cfr_download(after[i], dev[i], cfr_allocs[i].total);
    }
    cfr_check_memory(image, after);
    cfr_check_values(after);
    if (determinism) {
        // The same launch again on a fresh output; the two outputs must be bit-identical.
        cfr_setup("cudaMemcpy", cudaMemcpy(dev[3], image[3], cfr_allocs[3].total, cudaMemcpyHostToDevice));
        e = cfr_launch(dev);
        if (e != cudaSuccess) cfr_cuda_failed("cudaLaunchKernel (second run)", e, true);
        e = cfr_wait(timeout_ms);
        if (e != cudaSuccess) cfr_cuda_failed("cudaDeviceSynchronize after the second run", e, false);
        unsigned char* again = (unsigned char*)malloc(cfr_allocs[3].total ? cfr_allocs[3].total : 1);
        cfr_download(again, dev[3], cfr_allocs[3].total);
        const cfr_tensor& t = cfr_tensors[3];
        const unsigned long long ds = cfr_allocs[3].data_offset;
        unsigned long long diff = 0, first = 0;
        cfr_for_each(t, [&](unsigned long long i, const unsigned*, unsigned long long off) {
            unsigned long long at = ds + off * t.elem_bytes;
            if (cfr_load_bits(after[3] + at, t.elem_bytes) != cfr_load_bits(again + at, t.elem_bytes)) { if (!diff) first = i; diff++; }
        });
        if (diff) {
            unsigned idx[4];
            cfr_index(t, first, idx);
            cfr_fail("nondeterminism", "determinism", "%llu output elements differ between two runs of the same case (a race?); first at " CFR_IDX_FMT, diff, CFR_IDX(idx));
        }
        free(again);
    }
    for (int i = 0; i < CFR_N_ALLOCS; i++) { cudaFree(dev[i]); free(image[i]); free(after[i]); }
    return cfr_finish();
}
"#;
