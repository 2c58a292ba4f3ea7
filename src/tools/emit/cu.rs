//! `--emit cu`: one `.cu` file with the kernel, the case's data and a `main()` that replays it.
//!
//! Layout of the emitted file, top to bottom: a comment with the seed, the case, the saved finding
//! and the exact commands; the host C++ headers; the kernel section (the harness's `-D` defines as
//! `#define`s, then the kernel source with its project headers inlined, see
//! [`inline_source`](super::inline_source)); for a user reference kernel, its source twice, once
//! per run (`reference_section`); the case's data (allocation table, run-length coded images,
//! embedded gold, launches and arguments, the judged outputs); the host program
//! (`cu_program::HOST_PROGRAM`).
//!
//! Guards: under NVRTC (`__CUDACC_RTC__`) only the kernel section is compiled, so the device part
//! can be checked with NVRTC exactly as the harness compiles kernels; with `CF_REPRO_HOST_ONLY`
//! the kernel section is replaced by declarations of the entry points, so the host part compiles
//! with a plain C++ compiler against a stub CUDA runtime (cudafuzz's tests do this).
//!
//! A user reference kernel's source is compiled twice in this one translation unit, as the
//! worker compiles it twice: each copy after its run's defines (the kernel's defines and the
//! include guards of inlined headers are undefined between sections), inside its own namespace
//! (`cfr_gold`, `cfr_baseline`) so that its device functions, variables and typedefs (`cf_elem`,
//! `cf_acc`) do not collide, with the `extern "C"` names it defines for the reference's and the
//! kernel's entries renamed by macros (`extern "C"` ignores namespaces; a source that holds both
//! kernels defines both). What one file cannot separate: macros the kernel's own source defines
//! stay defined in the reference copies, any other `extern "C"` symbol of the reference source
//! collides, and one nvcc command takes the kernel's and the reference's extra options together.
//! The Python repro compiles each program on its own and has none of these limits.
//!
//! The program uses the CUDA runtime API only (`cudaLaunchKernel` with the argument list as the
//! manifest orders it), so `nvcc -arch=native -o repro repro.cu` builds it.

use std::fmt::Write as _;

use super::{
    arg_code, arg_text, arg_value_text, c_escape, dtype_code, header_lines, one_line, prepare, role_code, EmitError, Prepared, Program, ProgramRole, Run,
    SeedInfo, DTYPE_LEGEND,
};
use crate::core::case::Case;
use crate::core::manifest::expr::is_identifier;
use crate::core::manifest::{Manifest, ResolvedLaunch};

/// Writes the `.cu` repro of `case` against `manifest` (see the module docs).
pub fn emit_cu(case: &Case, manifest: &Manifest, seed: &SeedInfo) -> Result<String, EmitError> {
    if matches!(manifest.build, crate::core::target::Build::Prebuilt(_)) {
        return Err(EmitError::PrebuiltModule { manifest: manifest.path.clone() });
    }
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
/// is left to `-arch=native`). One file is one nvcc compile, so a reference kernel's options
/// are added to the kernel's (each once).
fn nvcc_options(p: &Prepared) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for o in p.programs.iter().flat_map(|g| &g.options) {
        if o.starts_with("--gpu-architecture") || o.starts_with("-arch") || o.starts_with("--gpu-name") {
            continue;
        }
        let o = match o.strip_prefix("--std=") {
            Some(s) => format!("-std={s}"),
            None => o.clone(),
        };
        if !out.contains(&o) {
            out.push(o);
        }
    }
    out
}

/// The build and run commands printed in the file's header and by the CLI.
pub fn commands(p: &Prepared, file_name: &str) -> Vec<String> {
    let bin = binary_name(file_name);
    let mut build = "nvcc -arch=native -lineinfo".to_string();
    for o in nvcc_options(p) {
        build.push(' ');
        build.push_str(&o);
    }
    let _ = write!(build, " -o {bin} {file_name}");
    let mut out = vec![build, format!("./{bin}")];
    let tool = p.tool.unwrap_or(crate::run::sanitizer::Tool::Memcheck);
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
    kernel_sections(&mut o, p, &file_name);
    line_here(&mut o, &file_name);
    o.push_str("\n#if !defined(__CUDACC_RTC__)\n");
    data_section(&mut o, p, seed);
    o.push_str(super::cu_program::HOST_PROGRAM);
    o.push_str("#endif  // !__CUDACC_RTC__\n");
    o
}

/// The C++ name a program's entry point is launched by: the kernel's own (inside
/// [`KERNEL_NAMESPACE`] when reference runs are compiled beside it), a reference run's renamed
/// one inside its namespace.
fn entry_expr(g: &Program, with_references: bool) -> String {
    match g.role {
        // A C++ name expression has no `extern "C"` stand-in: both builds define this macro.
        ProgramRole::Kernel if !is_identifier(&g.entry) => STANDIN_MACRO.to_string(),
        ProgramRole::Kernel if with_references => format!("{KERNEL_NAMESPACE}::{}", g.entry),
        ProgramRole::Kernel => g.entry.clone(),
        role => format!("{}::{}", namespace(role), renamed_entry(g)),
    }
}

/// The macro a C++ (name-expression) kernel entry is launched by: its name in the device build,
/// a stand-in's in a host-only one.
const STANDIN_MACRO: &str = "CFR_KERNEL_ENTRY";

/// The namespace of the kernel's copy of the source when reference runs are compiled beside
/// it: every copy in a namespace of its own, so that a call such as `cf_d(__half)` in one copy
/// does not also find, through the argument's global namespace, the same helper of another.
const KERNEL_NAMESPACE: &str = "cfr_kernel";

/// The namespace a reference run's copy of the source is compiled in.
fn namespace(role: ProgramRole) -> String {
    format!("cfr_{}", role.name())
}

/// A reference run's entry, renamed so the two copies (and the kernel) do not collide:
/// `extern "C"` names ignore namespaces.
fn renamed_entry(g: &Program) -> String {
    format!("cfr_{}_{}", g.role.name(), g.entry)
}

/// A `#line` directive naming the next line of the repro itself, after inlined sources whose
/// `#line`s name their own files.
fn line_here(o: &mut String, file_name: &str) {
    let next = o.lines().count() + 2;
    let _ = writeln!(o, "#line {next} \"{}\"", c_escape(file_name));
}

/// The device code: the kernel, then each reference run's copy of its source; stand-in
/// declarations in a host-only build.
fn kernel_sections(o: &mut String, p: &Prepared, file_name: &str) {
    o.push_str("// ======== the kernel, compiled as the harness compiles it (defines first) ========\n");
    o.push_str("#if !defined(CF_REPRO_HOST_ONLY)\n");
    let k = p.kernel();
    let wrapped = p.programs.len() > 1;
    if wrapped {
        for inc in &k.source.kept_includes {
            let _ = writeln!(o, "{inc}");
        }
    }
    for (name, v) in &k.defines {
        let _ = writeln!(o, "#define {name} {v}");
    }
    if wrapped {
        let _ = writeln!(o, "namespace {KERNEL_NAMESPACE} {{");
    }
    push_text(o, &k.source.text);
    if wrapped {
        let _ = writeln!(o, "}}  // namespace {KERNEL_NAMESPACE}");
    }
    undefine(o, k);
    if !is_identifier(&k.entry) {
        let scope = if wrapped { format!("{KERNEL_NAMESPACE}::") } else { String::new() };
        let _ = writeln!(o, "#define {STANDIN_MACRO} {scope}{}", k.entry);
    }
    let kernel_entries: Vec<&str> = std::iter::once(k.entry.as_str()).chain(k.steps.iter().map(|s| s.entry.as_str())).collect();
    for g in &p.programs[1..] {
        line_here(o, file_name);
        reference_section(o, g, &kernel_entries);
    }
    o.push_str("#else  // stand-ins for host-only compiler checks\n");
    if !is_identifier(&k.entry) {
        let _ = writeln!(o, "extern \"C\" void cfr_kernel_standin(void);\n#define {STANDIN_MACRO} cfr_kernel_standin");
    } else if p.programs.len() > 1 {
        let _ = writeln!(o, "namespace {KERNEL_NAMESPACE} {{ extern \"C\" void {}(void); }}", k.entry);
    } else {
        let _ = writeln!(o, "extern \"C\" void {}(void);", k.entry);
    }
    for g in &p.programs[1..] {
        let _ = writeln!(o, "namespace {} {{ extern \"C\" void {}(void); }}", namespace(g.role), renamed_entry(g));
    }
    for s in &k.steps {
        match p.programs.len() > 1 {
            true => drop(writeln!(o, "namespace {KERNEL_NAMESPACE} {{ extern \"C\" void {}(void); }}", s.entry)),
            false => drop(writeln!(o, "extern \"C\" void {}(void);", s.entry)),
        }
    }
    o.push_str("#endif\n");
}

/// One run of the user's reference kernel: its source under its own defines, inside its own
/// namespace, its entry (and the kernel's entries, should the source define them too) renamed. The CUDA
/// and system headers it includes are included first at global scope, so that their include
/// guards make the copies inside the namespace empty.
fn reference_section(o: &mut String, g: &Program, kernel_entries: &[&str]) {
    let what = match g.role {
        ProgramRole::Gold => "gold run (every floating tensor f64)",
        _ => "baseline run (the case's precision)",
    };
    let _ = writeln!(o, "// ======== the reference kernel, {what}: compiled as the harness compiles it ========");
    for inc in &g.source.kept_includes {
        let _ = writeln!(o, "{inc}");
    }
    for (name, v) in &g.defines {
        let _ = writeln!(o, "#define {name} {v}");
    }
    let renamed: Vec<(&str, String)> = std::iter::once((g.entry.as_str(), renamed_entry(g)))
        // Only `extern "C"` names collide across namespaces; a C++ kernel entry needs no renaming.
        .chain(kernel_entries.iter().filter(|&&e| e != g.entry && is_identifier(e)).map(|&e| (e, format!("cfr_{}_{e}", g.role.name()))))
        .collect();
    for (from, to) in &renamed {
        let _ = writeln!(o, "#define {from} {to}");
    }
    let _ = writeln!(o, "namespace {} {{", namespace(g.role));
    push_text(o, &g.source.text);
    let _ = writeln!(o, "}}  // namespace {}", namespace(g.role));
    for (from, _) in &renamed {
        let _ = writeln!(o, "#undef {from}");
    }
    undefine(o, g);
}

fn push_text(o: &mut String, text: &str) {
    o.push_str(text);
    if !o.ends_with('\n') {
        o.push('\n');
    }
}

/// Undefines a program's defines and include guards, so the next copy sees neither.
fn undefine(o: &mut String, g: &Program) {
    for name in g.defines.keys().chain(&g.source.guards) {
        let _ = writeln!(o, "#undef {name}");
    }
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

const STRUCTS: &str = "struct cfr_run { unsigned long long bytes; unsigned int period; unsigned char pattern[4]; };\n\
struct cfr_alloc {\n\
\x20   const char* name;                  // the tensor (a reference run's: gold.NAME, baseline.NAME)\n\
\x20   int program;                       // 0 the kernel, 1 the reference kernel's gold run, 2 its baseline run\n\
\x20   int tensor;                        // position in the manifest's tensor roster\n\
\x20   int role;                          // 0 input, 1 output, 2 in_out, 3 scratch\n\
\x20   int dtype;                         // see the dtypes above\n\
\x20   int sentinel;                      // initial contents are the sentinel: elements still holding it were never written\n\
\x20   unsigned long long sentinel_bits;\n\
\x20   unsigned long long total;          // allocation bytes\n\
\x20   unsigned long long data_offset;    // first data byte: redzone before + the case's offset\n\
\x20   unsigned long long span;           // data bytes, first to last element\n\
\x20   unsigned long long tail;           // don't-care bytes past the span (a capacity), never checked\n\
\x20   int uninit;                        // data left uninitialised on the device (redzones only)\n\
\x20   unsigned long long first_run, n_runs, literal_offset;\n\
\x20   unsigned long long fnv1a64;        // checksum of the decoded image\n\
\x20   int rank;\n\
\x20   unsigned long long shape[8], strides[8];  // logical shape, element strides (0: broadcast)\n\
\x20   const char* dims[8];               // the dim each logical dimension is, or null\n\
\x20   int order_dependent;               // its bits may differ between two runs (atomics): no bitwise check\n\
};\n\
struct cfr_launch { const char* what; unsigned grid[3], block[3], shared_bytes; int first_arg, n_args, shared_opt_in, skip; };  // skip: the host launches nothing\n\
struct cfr_arg { int kind; unsigned long long value; };  // kind: 0 pointer (value: allocation), 1 i32, 2 u32, 3 i64, 4 u64, 5 f32, 6 f64 (bits)\n\
struct cfr_expect {\n\
\x20   int alloc;                         // the judged output (one of the kernel's allocations)\n\
\x20   int rule;                          // 0: max |out - gold| <= bound; 1: each element within rel * max(1, |gold|)\n\
\x20   int gold_alloc, baseline_alloc;    // -1: the fp64 gold is embedded; else the reference runs' allocations\n\
\x20   unsigned long long gold_offset;    // the embedded gold's first byte in cfr_blob (little-endian doubles)\n\
\x20   unsigned long long bits[4];        // f64 bits. Embedded, rule 0: factor, same-precision error, floor, bound;\n\
\x20                                      // rule 1: rel. Reference runs: factor, floor (NaN: 4 u max |gold|), u\n\
};\n";

fn data_section(o: &mut String, p: &Prepared, seed: &SeedInfo) {
    o.push_str("// ======== the case's data (generated by cudafuzz; do not edit) ========\n");
    let n_allocs: usize = p.programs.iter().map(|g| g.plan.tensors.len()).sum();
    let _ = writeln!(o, "#define CFR_N_PROGRAMS {}\n#define CFR_N_ALLOCS {n_allocs}", p.programs.len());
    let _ = writeln!(o, "// dtypes: {DTYPE_LEGEND}");
    o.push_str(STRUCTS);
    alloc_table(o, p);
    runs_and_blob(o, p);
    launches(o, p);
    expects(o, p);
    let _ = writeln!(o, "static const unsigned long long CFR_TIMEOUT_MS = {}ull;", p.timeout_ms);
    let _ = writeln!(o, "static const char* const CFR_CASE = \"{}\";", c_escape(&p.kernel().case.summary()));
    let _ = writeln!(o, "static const char* const CFR_KERNEL = \"{}\";", c_escape(&p.kernel_label));
    let expected = seed.finding.as_ref().map(|f| one_line(&f.to_string())).unwrap_or_default();
    let _ = writeln!(o, "static const char* const CFR_EXPECTED = \"{}\";", c_escape(&expected));
    let _ = writeln!(o, "static const char* const CFR_SIGNATURE = \"{}\";\n", c_escape(seed.signature.as_ref().map(|s| s.as_str()).unwrap_or("")));
}

/// `cfr_allocs`: every program's allocations in order, one line each.
fn alloc_table(o: &mut String, p: &Prepared) {
    o.push_str("static const cfr_alloc cfr_allocs[CFR_N_ALLOCS] = {\n");
    for r in p.alloc_rows() {
        let (tp, a) = (r.tensor, r.layout);
        let list = |v: &[u64]| (0..8).map(|d| format!("{}ull", v.get(d).copied().unwrap_or(0))).collect::<Vec<_>>().join(", ");
        let dims: Vec<String> = (0..8)
            .map(|d| match tp.dim_names.get(d).and_then(|n| n.as_deref()) {
                Some(n) => format!("\"{}\"", c_escape(n)),
                None => "nullptr".to_string(),
            })
            .collect();
        let _ = write!(
            o,
            "  {{\"{}\", {}, {}, {}, {}, {}, 0x{:x}ull, ",
            c_escape(&r.name),
            r.program,
            tp.index,
            role_code(tp.role),
            dtype_code(tp.dtype),
            r.sentinel as i32,
            crate::engine::arena::sentinel_bits(tp.dtype)
        );
        let _ = write!(o, "{}ull, {}ull, {}ull, {}ull, {}, ", a.total_bytes(), a.data_offset, a.span_bytes, a.tail_bytes, r.uninit as i32);
        let _ = write!(o, "{}ull, {}ull, {}ull, 0x{:016x}ull, ", r.first_run, r.encoded.runs.len(), r.literal_offset, super::fnv1a64(r.bytes));
        let _ = writeln!(
            o,
            "{}, {{{}}}, {{{}}}, {{{}}}, {}}},  // canary 0x{:02x}, redzone after {}",
            tp.rank(),
            list(&tp.shape),
            list(&tp.strides),
            dims.join(", "),
            tp.order_dependent as i32,
            a.canary,
            a.redzone_after
        );
    }
    o.push_str("};\n");
}

/// `cfr_runs` (every allocation's runs in order) and `cfr_blob` (their literal bytes, then the
/// embedded gold).
fn runs_and_blob(o: &mut String, p: &Prepared) {
    o.push_str("static const cfr_run cfr_runs[] = {\n");
    let mut any_run = false;
    for g in &p.programs {
        for (i, e) in g.encoded.iter().enumerate() {
            let _ = writeln!(o, "  // allocation {}", c_escape(&g.alloc_name(i)));
            for r in &e.runs {
                any_run = true;
                match r {
                    Run::Literal { bytes } => {
                        let _ = writeln!(o, "  {{{bytes}ull, 0u, {{0, 0, 0, 0}}}},");
                    }
                    Run::Fill { pattern, bytes } => {
                        let mut pat = [0u8; 4];
                        pat[..pattern.len()].copy_from_slice(pattern);
                        let _ =
                            writeln!(o, "  {{{bytes}ull, {}u, {{0x{:02x}, 0x{:02x}, 0x{:02x}, 0x{:02x}}}}},", pattern.len(), pat[0], pat[1], pat[2], pat[3]);
                    }
                }
            }
        }
    }
    if !any_run {
        o.push_str("  {0ull, 0u, {0, 0, 0, 0}},\n");
    }
    o.push_str("};\n");
    o.push_str("// Literal runs of every allocation in order, then the embedded fp64 gold (little-endian doubles).\n");
    o.push_str("static const unsigned char cfr_blob[] = {\n");
    for g in &p.programs {
        for e in &g.encoded {
            hex_bytes(o, &e.literal);
        }
    }
    hex_bytes(o, &p.gold_bytes());
    // Eight bytes of padding: never read, they keep the blob at least one double long, so a
    // compiler sees no read past it on paths an empty case never takes.
    o.push_str("  0, 0, 0, 0, 0, 0, 0, 0,\n};\n");
}

/// `cfr_entries`, `cfr_launches` and `cfr_args`: each program's entry, geometry and arguments;
/// then `cfr_step_entries` and `cfr_steps`, a launch sequence's later launches of the kernel
/// (a last entry that launches nothing keeps the arrays non-empty).
fn launches(o: &mut String, p: &Prepared) {
    let wrapped = p.programs.len() > 1;
    let entries: Vec<String> = p.programs.iter().map(|g| format!("(const void*){}", entry_expr(g, wrapped))).collect();
    let _ = writeln!(o, "static const void* const cfr_entries[CFR_N_PROGRAMS] = {{{}}};", entries.join(", "));
    o.push_str("static const cfr_launch cfr_launches[CFR_N_PROGRAMS] = {\n");
    let mut first = 0usize;
    let mut launch_line = |o: &mut String, what: &str, l: &ResolvedLaunch| {
        let _ = writeln!(
            o,
            "  {{\"{what}\", {{{}u, {}u, {}u}}, {{{}u, {}u, {}u}}, {}u, {first}, {}, {}, {}}},",
            l.grid[0],
            l.grid[1],
            l.grid[2],
            l.block[0],
            l.block[1],
            l.block[2],
            l.shared_bytes,
            l.args.len(),
            i32::from(l.shared_opt_in),
            i32::from(l.skip)
        );
        first += l.args.len();
    };
    for g in &p.programs {
        launch_line(o, g.role.name(), &g.launch);
    }
    o.push_str("};\n");
    let steps = &p.kernel().steps;
    let scope = if wrapped { format!("{KERNEL_NAMESPACE}::") } else { String::new() };
    let step_entries: Vec<String> = steps.iter().map(|s| format!("(const void*){scope}{}", s.entry)).chain(["nullptr".to_string()]).collect();
    let _ = writeln!(o, "#define CFR_N_STEPS {}", steps.len());
    let _ = writeln!(o, "static const void* const cfr_step_entries[CFR_N_STEPS + 1] = {{{}}};", step_entries.join(", "));
    o.push_str("static const cfr_launch cfr_steps[CFR_N_STEPS + 1] = {\n");
    for (i, s) in steps.iter().enumerate() {
        launch_line(o, &format!("launch {}: {}", i + 1, s.entry), &s.launch);
    }
    o.push_str("  {\"none\", {0u, 0u, 0u}, {0u, 0u, 0u}, 0u, 0, 0, 0, 1},\n};\n");
    o.push_str("static const cfr_arg cfr_args[] = {\n");
    let mut any = false;
    let kernel_base = p.alloc_base(0);
    let step_args = steps.iter().map(|s| (p.kernel(), kernel_base, &s.launch, &s.arg_specs, format!("{} launch", s.entry)));
    let program_args = p.programs.iter().enumerate().map(|(pi, g)| (g, p.alloc_base(pi), &g.launch, &g.arg_specs, g.role.name().to_string()));
    for (g, base, launch, specs, what) in program_args.chain(step_args) {
        for (i, a) in launch.args.iter().enumerate() {
            let (kind, value) = arg_code(a, base);
            let shown = match kind {
                0 => format!("-> {}", g.alloc_name(value as usize - base)),
                _ => arg_value_text(a),
            };
            let _ = writeln!(o, "  {{{kind}, 0x{value:x}ull}},  // {what} {i}: {} {}", one_line(&arg_text(specs, i)), shown);
            any = true;
        }
    }
    if !any {
        o.push_str("  {0, 0ull},\n");
    }
    o.push_str("};\n");
}

/// `cfr_expects`: one line per judged output.
fn expects(o: &mut String, p: &Prepared) {
    let rows = p.expect_rows();
    let _ = writeln!(o, "#define CFR_N_EXPECT {}", rows.len());
    o.push_str("static const cfr_expect cfr_expects[] = {\n");
    for r in &rows {
        let (gold, baseline) = r.runs.map_or((-1, -1), |(g, b)| (g as i64, b as i64));
        let _ = writeln!(o, "  {{{}, {}, {gold}, {baseline}, {}ull, {{{}}}}},  // {}", r.alloc, r.rule, r.gold_offset, bits_list(r.numbers), one_line(&r.note));
    }
    if rows.is_empty() {
        o.push_str("  {-1, 0, -1, -1, 0ull, {0ull, 0ull, 0ull, 0ull}},\n");
    }
    o.push_str("};\n");
}

fn bits_list(v: [f64; 4]) -> String {
    v.iter().map(|x| format!("0x{:016x}ull", x.to_bits())).collect::<Vec<_>>().join(", ")
}
