//! `--emit python`: one Python script that replays a case with PyTorch and the CUDA driver.
//!
//! The script embeds the same data as the `.cu` repro (see [`super`]): each program's source with
//! its project headers inlined and its NVRTC options (`-D` defines, `-lineinfo`, `--std=c++17`,
//! the manifest's options), the run-length coded arena images with their SHA-256, the embedded
//! gold and the launches. It compiles each program with NVRTC through `ctypes` (`libnvrtc`,
//! found as the harness finds it: `$CUDAFUZZ_NVRTC`, the loader path, the CUDA toolkit, pip's
//! `nvidia/*/lib`): the kernel, and for a user reference kernel its source twice, with the gold
//! run's defines and with the baseline run's, exactly as the worker compiles it. It loads the
//! cubins and launches them with `cuLaunchKernel` through `libcuda`, on buffers PyTorch allocates
//! (one `torch.uint8` tensor per allocation, with `PYTORCH_NO_CUDA_MEMORY_CACHING=1` so each is
//! its own `cudaMalloc`, as in the harness); `--backend driver` uses `cuMemAlloc` instead and
//! needs no PyTorch. Then it applies the same oracles as the `.cu` program
//! (`python_program::PY_PROGRAM`; a Python target is called instead of launched:
//! `python_target::PY_TARGET`). `--compile-only --arch sm_90` and `--write-image DIR` need no
//! GPU.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::{
    arg_code, arg_text, arg_value_text, dtype_code, header_lines, one_line, prepare, role_code, EmitError, Prepared, ProgramRole, Run, SeedInfo, DTYPE_LEGEND,
};
use crate::core::case::Case;
use crate::core::manifest::Manifest;

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
        format!("{} python3 {file_name} --backend driver", p.sanitizer_command(p.tool.unwrap_or(crate::run::sanitizer::Tool::Memcheck))),
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

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
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
    programs(&mut o, p);
    allocs(&mut o, p);
    blob(&mut o, p);
    args(&mut o, p);
    expects(&mut o, p);
    target(&mut o, p);
    let _ = writeln!(o, "TIMEOUT_MS = {}", p.timeout_ms);
    let _ = writeln!(o, "CASE = {}", py_str(&p.kernel().case.summary()));
    let _ = writeln!(o, "KERNEL = {}", py_str(&p.kernel_label));
    let expected = seed.finding.as_ref().map(|f| one_line(&f.to_string())).unwrap_or_default();
    let _ = writeln!(o, "EXPECTED = {}", py_str(&expected));
    let _ = writeln!(o, "SIGNATURE = {}\n", py_str(seed.signature.as_ref().map(|s| s.as_str()).unwrap_or("")));
    o.push_str(super::python_target::PY_TARGET);
    o.push_str(super::python_program::PY_PROGRAM);
    o
}

/// A Python float literal of `x` that reads back the same bits.
fn py_float(x: f64) -> String {
    if x.is_nan() {
        "float(\"nan\")".into()
    } else if x.is_infinite() {
        format!("float(\"{}inf\")", if x < 0.0 { "-" } else { "" })
    } else {
        format!("{x:?}")
    }
}

/// `TARGET`: a Python target's module, callable, setup and arguments (`None` for a kernel the
/// repro compiles itself).
fn target(o: &mut String, p: &Prepared) {
    use crate::core::target::CallValue;
    let Some((t, call)) = &p.call else {
        o.push_str("TARGET = None\n");
        return;
    };
    let value = |v: &CallValue| match v {
        CallValue::Tensor(i) => format!("(\"tensor\", {i})"),
        CallValue::Int(i) => format!("(\"value\", {i})"),
        CallValue::Float(x) => format!("(\"value\", {})", py_float(*x)),
        CallValue::Bool(b) => format!("(\"value\", {})", py_bool(*b)),
    };
    let setup = t.setup.as_ref().map(|s| format!("({}, {})", py_str(&s.module), py_str(&s.function))).unwrap_or_else(|| "None".into());
    let _ = writeln!(o, "# The Python target: imported from PATH (relative to the working directory or to this file; --target-path overrides),");
    let _ = writeln!(o, "# its setup run once, then called with views of the allocations above (tensor i: the roster's i-th tensor).");
    let _ = writeln!(
        o,
        "TARGET = dict(path={}, module={}, function={}, setup={setup}, tensors={},\n              args=[{}],\n              kwargs=[{}],\n              returns={:?})",
        py_str(&super::relative_display(&t.path)),
        py_str(&t.callable.module),
        py_str(&t.callable.function),
        py_str(t.tensors.name()),
        call.args.iter().map(value).collect::<Vec<_>>().join(", "),
        call.kwargs.iter().map(|(k, v)| format!("({}, {})", py_str(k), value(v))).collect::<Vec<_>>().join(", "),
        call.returns
    );
}

/// `SOURCES` (the kernel's, then the reference kernel's, each once) and `PROGRAMS` (entry,
/// source, NVRTC options and launch geometry of each).
fn programs(o: &mut String, p: &Prepared) {
    o.push_str("SOURCES = [  # (file name, text) of each source, project headers inlined\n");
    for g in p.programs.iter().filter(|g| g.role != ProgramRole::Baseline) {
        let _ = writeln!(o, "    ({}, (", py_str(g.source.files.first().map(String::as_str).unwrap_or("kernel.cu")));
        for line in g.source.text.split_inclusive('\n') {
            let _ = writeln!(o, "        {}", py_str(line));
        }
        o.push_str("    \"\")),\n");
    }
    o.push_str("]\nPROGRAMS = [  # the kernel, then the reference kernel's gold and baseline runs: compiled and launched as the harness does\n");
    for g in &p.programs {
        let source = if g.role == ProgramRole::Kernel { 0 } else { 1 };
        let mut opts = vec!["-lineinfo".to_string()];
        if !g.options.iter().any(|o| crate::engine::compile::is_std_option(o)) {
            opts.push(crate::engine::compile::DEFAULT_STD.to_string());
        }
        opts.extend(g.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        opts.extend(g.options.iter().cloned());
        let l = &g.launch;
        let _ = writeln!(
            o,
            "    dict(what={}, entry={}, source={source}, grid={:?}, block={:?}, shared_bytes={}, shared_opt_in={}, skip={},\n         options=[{}]{}),",
            py_str(g.role.name()),
            py_str(&g.entry),
            l.grid,
            l.block,
            l.shared_bytes,
            if l.shared_opt_in { "True" } else { "False" },
            if l.skip { "True" } else { "False" },
            opts.iter().map(|s| py_str(s)).collect::<Vec<_>>().join(", "),
            match &g.prebuilt {
                Some((files, symbol)) =>
                    format!(",\n         module=[{}], symbol={}", files.iter().map(|f| py_str(f)).collect::<Vec<_>>().join(", "), py_str(symbol)),
                None => String::new(),
            }
        );
    }
    o.push_str("]\n");
    o.push_str("STEPS = [  # a launch sequence's later launches of the kernel, in order, on its allocations (launch index len(PROGRAMS) + i)\n");
    for s in &p.kernel().steps {
        let l = &s.launch;
        let _ = writeln!(
            o,
            "    dict(what={}, entry={}, grid={:?}, block={:?}, shared_bytes={}, shared_opt_in={}, skip={}),",
            py_str(&format!("launch {}", s.entry)),
            py_str(&s.entry),
            l.grid,
            l.block,
            l.shared_bytes,
            if l.shared_opt_in { "True" } else { "False" },
            if l.skip { "True" } else { "False" }
        );
    }
    o.push_str("]\n");
}

/// `ALLOCS`: every program's allocations in order, two lines each (the runs on the second).
fn allocs(o: &mut String, p: &Prepared) {
    let _ = writeln!(o, "# One dict per allocation; dtype: {DTYPE_LEGEND}; role: 0 input, 1 output, 2 in_out, 3 scratch.");
    o.push_str("# runs: (period, pattern, bytes); period 0 = literal bytes from BLOB.\nALLOCS = [\n");
    for r in p.alloc_rows() {
        let (tp, a) = (r.tensor, r.layout);
        let sha: String = Sha256::digest(r.bytes).iter().map(|b| format!("{b:02x}")).collect();
        let runs: Vec<String> = r
            .encoded
            .runs
            .iter()
            .map(|run| match run {
                Run::Literal { bytes } => format!("(0, b\"\", {bytes})"),
                Run::Fill { pattern, bytes } => format!("({}, {}, {bytes})", pattern.len(), py_bytes(pattern)),
            })
            .collect();
        let dims: Vec<String> = tp.dim_names.iter().map(|d| d.as_deref().map_or("None".to_string(), py_str)).collect();
        let _ = write!(
            o,
            "    dict(name={}, program={}, tensor={}, role={}, dtype={}, ",
            py_str(&r.name),
            r.program,
            tp.index,
            role_code(tp.role),
            dtype_code(tp.dtype)
        );
        let _ = write!(o, "sentinel={}, sentinel_bits=0x{:x}, ", py_bool(r.sentinel), crate::engine::arena::sentinel_bits(tp.dtype));
        let _ =
            write!(o, "total={}, data_offset={}, span={}, tail={}, uninit={}, ", a.total_bytes(), a.data_offset, a.span_bytes, a.tail_bytes, py_bool(r.uninit));
        let _ =
            writeln!(o, "literal_offset={}, sha256=\"{sha}\", shape={:?}, strides={:?}, dims=[{}],", r.literal_offset, tp.shape, tp.strides, dims.join(", "));
        let order = if tp.order_dependent { ", order_dependent=True" } else { "" };
        let _ = writeln!(o, "         runs=[{}]{order}),", runs.join(", "));
    }
    o.push_str("]\n");
}

/// `BLOB`: every allocation's literal runs, then the embedded gold, in base64.
fn blob(o: &mut String, p: &Prepared) {
    let mut blob: Vec<u8> = p.programs.iter().flat_map(|g| &g.encoded).flat_map(|e| e.literal.iter().copied()).collect();
    blob.extend_from_slice(&p.gold_bytes());
    o.push_str("# Literal runs of every allocation in order, then the embedded fp64 gold (little-endian doubles).\nBLOB = (\n");
    for l in base64_lines(&blob) {
        let _ = writeln!(o, "    \"{l}\"");
    }
    o.push_str("    \"\"\n)\n");
}

/// `ARGS`: `(program, kind, value)` of every argument of every launch, in order.
fn args(o: &mut String, p: &Prepared) {
    const KINDS: [&str; 7] = ["ptr", "i32", "u32", "i64", "u64", "f32", "f64"];
    o.push_str("ARGS = [  # (program, kind, allocation or value; floats as their bits): each launch's arguments in the manifest's order\n");
    let steps =
        p.kernel().steps.iter().enumerate().map(|(si, s)| (p.programs.len() + si, p.alloc_base(0), &s.launch, &s.arg_specs, format!("{} launch", s.entry)));
    let launches = p.programs.iter().enumerate().map(|(pi, g)| (pi, p.alloc_base(pi), &g.launch, &g.arg_specs, g.role.name().to_string()));
    for (pi, base, launch, specs, what) in launches.chain(steps) {
        for (i, a) in launch.args.iter().enumerate() {
            let (kind, value) = arg_code(a, base);
            let v = match kind {
                1 => (value as i64 as i32).to_string(),
                3 => (value as i64).to_string(),
                5 | 6 => format!("0x{value:x}"),
                _ => value.to_string(),
            };
            let _ = writeln!(o, "    ({pi}, \"{}\", {v}),  # {what} {i}: {} {}", KINDS[kind as usize], one_line(&arg_text(specs, i)), arg_value_text(a));
        }
    }
    o.push_str("]\n");
}

/// `EXPECTS`: one dict per judged output (see the `.cu` repro's `cfr_expect` for the fields).
fn expects(o: &mut String, p: &Prepared) {
    o.push_str("# One dict per judged output. rule 0: max |out - gold| <= bound; 1: each element within rel * max(1, |gold|).\n");
    o.push_str("# gold_alloc -1: the fp64 gold is embedded at gold_offset, bits (f64) = factor, same-precision error, floor, bound (rule 1: rel);\n");
    o.push_str("# else the reference kernel's runs hold gold and baseline, bits = factor, floor (NaN: 4 u max |gold|), u.\nEXPECTS = [\n");
    for r in p.expect_rows() {
        let (gold, baseline) = r.runs.map_or((-1, -1), |(g, b)| (g as i64, b as i64));
        let bits: Vec<String> = r.numbers.iter().map(|x| format!("0x{:016x}", x.to_bits())).collect();
        let _ = writeln!(
            o,
            "    dict(alloc={}, rule={}, gold_alloc={gold}, baseline_alloc={baseline}, gold_offset={}, bits=[{}]),  # {}",
            r.alloc,
            r.rule,
            r.gold_offset,
            bits.join(", "),
            one_line(&r.note)
        );
    }
    o.push_str("]\n");
}
