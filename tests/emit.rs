//! Standalone repros (`cudafuzz repro SEED --emit cu|python`), checked without a GPU.
//!
//! * The arena images, fp64 reference and launch arguments embedded in both files are parsed back
//!   here and compared with what the library computes for the case (always runs).
//! * The `.cu` file's kernel section compiles with NVRTC from a directory outside the project, so
//!   every project header really is inlined (skipped, with the reason printed, without libnvrtc).
//! * The Python script compiles its kernel with NVRTC through ctypes and writes its decoded
//!   images (skipped without python3 or libnvrtc).
//! * The `.cu` file's host part is compiled with `g++ -DCF_REPRO_HOST_ONLY` against a stub CUDA
//!   runtime whose "kernel" writes chosen bytes, and must say PASS for a perfect output and name
//!   each planted fault (skipped without g++).
//! * The CLI writes a repro without a GPU and never overwrites one without `--force`.
//!
//! Every test name contains `emit`: `cargo nextest run -E 'test(/emit/)'`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::arena::HostImage;
use cudafuzz::case::{Case, Dim, Dtype, Placement, TensorId, TensorLayout};
use cudafuzz::compile::{Arch, CompileRequest, Compiler};
use cudafuzz::corpus::Seed;
use cudafuzz::emit::{decode, emit, emit_cu, emit_python, encode, fnv1a64, inline_source, EmitError, EmitKind, Run, SeedInfo};
use cudafuzz::manifest::{Manifest, ResolvedArg};
use cudafuzz::plan::Plan;
use cudafuzz::reference::{CpuF64, Reference};
use cudafuzz::sanitizer::Tool;

use common::root;

// ---------------------------------------------------------------------------------------------
// The cases.

fn manifest(rel: &str) -> Manifest {
    Manifest::load(&root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A named case with its manifest and the sanitizer tool its repro is for.
struct Subject {
    name: &'static str,
    manifest: Manifest,
    case: Case,
    tool: Option<Tool>,
}

/// fa_s512's example case with q at +8 bytes: the seed's bug (716 at q's 16-byte load).
fn fa_s512_misaligned() -> Subject {
    let m = manifest("kernels/attention/fa_s512.toml");
    let mut case = m.bind(Case::example(""));
    case.layouts.q.offset_bytes = 8;
    Subject { name: "fa_s512_q8", manifest: m, case, tool: None }
}

/// simple_attn, bf16, causal GQA, k in BSHD order with padding (stride gaps) at +6 bytes and o
/// padded at +2: exercises gaps, permuted orders and offsets.
fn simple_attn_strided() -> Subject {
    let m = manifest("kernels/testing/simple_attn.toml");
    let mut case = m.bind(Case::example(""));
    case.dtype = Dtype::Bf16;
    case.causal = true;
    case.heads_q = 4;
    case.heads_kv = 2;
    case.seq_q = 33;
    case.seq_k = 47;
    case.head_dim = 24;
    case.layouts.k = TensorLayout { order: [Dim::B, Dim::S, Dim::H, Dim::D], pad: [0, 1, 0, 3], offset_bytes: 6 };
    case.layouts.o = TensorLayout { order: [Dim::B, Dim::H, Dim::S, Dim::D], pad: [0, 0, 0, 5], offset_bytes: 2 };
    Subject { name: "simple_attn_strided", manifest: m, case, tool: None }
}

/// A mutant of flash_fwd: more than 48 KB of shared memory (the opt-in attribute), an f32 `lse`
/// buffer checked against the reference, headers included through `../` paths and twice.
fn mutant_unchecked_vec() -> Subject {
    let m = manifest("kernels/mutants/unchecked_vec.toml");
    let mut case = m.bind(Case::example(""));
    case.seq_q = 70;
    case.seq_k = 90;
    case.layouts.v.offset_bytes = 4;
    Subject { name: "mutant_unchecked_vec", manifest: m, case, tool: None }
}

/// The planted out-of-bounds read of oob_read_k (head_dim 40), laid out for memcheck.
fn oob_read_k_memcheck() -> Subject {
    let m = manifest("kernels/testing/oob_read_k.toml");
    let mut case = m.bind(Case::example(""));
    case.head_dim = 40;
    case.seq_q = 9;
    case.seq_k = 17;
    Subject { name: "oob_read_k_memcheck", manifest: m, case, tool: Some(Tool::Memcheck) }
}

/// The fp64 reference kernel: uninitialised f64 buffers and an NVRTC option (`--fmad=false`).
fn reference_kernel() -> Subject {
    let m = manifest("kernels/reference/attention_f64.toml");
    let mut case = m.bind(Case::example(""));
    case.dtype = Dtype::F32;
    case.seq_q = 5;
    case.seq_k = 7;
    Subject { name: "attention_f64", manifest: m, case, tool: None }
}

fn subjects() -> Vec<Subject> {
    vec![fa_s512_misaligned(), simple_attn_strided(), mutant_unchecked_vec(), oob_read_k_memcheck(), reference_kernel()]
}

fn seed_info(s: &Subject, file_name: &str) -> SeedInfo {
    SeedInfo { path: format!("seeds/{}.json", s.name), file_name: file_name.to_string(), sanitizer: s.tool, ..SeedInfo::default() }
}

/// What the library computes for a subject: the case as run, its plan, image, launch and
/// fp64 reference.
struct Expected {
    case: Case,
    plan: Plan,
    image: HostImage,
    args: Vec<ResolvedArg>,
    ref_o: Vec<f64>,
    ref_lse: Vec<f64>,
    has_lse: bool,
}

fn expected(s: &Subject) -> Expected {
    let mut case = s.case.clone();
    if s.tool == Some(Tool::Memcheck) {
        case.placement = Placement::Exact;
    }
    let plan = Plan::new(&case);
    let launch = s.manifest.resolve(&case, &plan).unwrap();
    let inputs = cudafuzz::data::generate(&case);
    let image = HostImage::build(&case, &plan, &inputs, &launch.buffers);
    let r = CpuF64.forward(&case, &inputs);
    let has_lse = launch.buffers.iter().any(|b| b.role.is_some());
    Expected { case, plan, image, args: launch.args, ref_o: r.o, ref_lse: r.lse, has_lse }
}

// ---------------------------------------------------------------------------------------------
// Parsing the emitted files back.

fn section<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("no `{start}` in the emitted file")) + start.len();
    let len = text[from..].find(end).unwrap_or_else(|| panic!("no `{end}` after `{start}`"));
    &text[from..from + len]
}

fn num(tok: &str) -> u64 {
    let t = tok.trim().trim_end_matches("ull").trim_end_matches("ll").trim_end_matches('u');
    match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {tok:?}")),
        None => t.parse::<i64>().map(|x| x as u64).unwrap_or_else(|_| panic!("bad number {tok:?}")),
    }
}

/// A decoded repro: allocation images, reference, arguments `(kind, alloc, value, f32 bits)`.
struct Parsed {
    images: Vec<Vec<u8>>,
    checksums: Vec<String>,
    ref_o: Vec<f64>,
    ref_lse: Vec<f64>,
    args: Vec<(u64, u64, i64, u32)>,
}

fn doubles(bytes: &[u8]) -> Vec<f64> {
    bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn parse_cu(text: &str) -> Parsed {
    let mut allocs = Vec::new();
    for line in section(text, "cfr_allocs[CFR_N_ALLOCS] = {\n", "\n};").lines() {
        let body = line.trim().trim_start_matches('{');
        let body = &body[..body.find('}').unwrap()];
        let f: Vec<&str> = body.split(", ").collect();
        // name, tensor, total, data_offset, span, uninit, first_run, n_runs, literal_offset, fnv
        allocs.push((num(f[2]), num(f[6]), num(f[7]), num(f[8]), format!("{:016x}", num(f[9]))));
    }
    let mut runs = Vec::new();
    for line in section(text, "cfr_runs[] = {\n", "\n};").lines() {
        let l = line.trim();
        if l.starts_with("//") {
            continue;
        }
        let inner = l.trim_start_matches('{').trim_end_matches("},");
        let (head, pat) = inner.split_once(", {").unwrap();
        let (bytes, period) = head.split_once(", ").unwrap();
        let pattern: Vec<u8> = pat.trim_end_matches('}').split(", ").map(|b| num(b) as u8).collect();
        let (bytes, period) = (num(bytes), num(period) as usize);
        runs.push(if period == 0 { Run::Literal { bytes } } else { Run::Fill { pattern: pattern[..period].to_vec(), bytes } });
    }
    let blob: Vec<u8> = section(text, "cfr_blob[] = {\n", "\n};").split(',').map(str::trim).filter(|t| !t.is_empty()).map(|t| num(t) as u8).collect();
    let mut images = Vec::new();
    let mut checksums = Vec::new();
    for (total, first, n, lit, fnv) in &allocs {
        let img = decode(&runs[*first as usize..(*first + *n) as usize], &blob[*lit as usize..]);
        assert_eq!(img.len() as u64, *total);
        images.push(img);
        checksums.push(fnv.clone());
    }
    let consts = |name: &str| -> (u64, u64) {
        let line = text.lines().find(|l| l.contains(&format!("CFR_{name}_OFFSET = "))).unwrap();
        let v: Vec<u64> = line.split(['=', ',', ';']).filter_map(|t| t.trim().strip_suffix("ull")).map(num).collect();
        (v[0], v[1])
    };
    let (o_off, o_n) = consts("REF_O");
    let (l_off, l_n) = consts("REF_LSE");
    let mut args = Vec::new();
    for line in section(text, "cfr_args[] = {\n", "\n};").lines() {
        let body = line.trim().trim_start_matches('{');
        let f: Vec<&str> = body[..body.find('}').unwrap()].split(", ").collect();
        args.push((num(f[0]), num(f[1]), num(f[2]) as i64, num(f[3]) as u32));
    }
    Parsed {
        images,
        checksums,
        ref_o: doubles(&blob[o_off as usize..(o_off + 8 * o_n) as usize]),
        ref_lse: doubles(&blob[l_off as usize..(l_off + 8 * l_n) as usize]),
        args,
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 {c}"),
        }
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk.iter().filter(|&&c| c != b'=').fold(0u32, |acc, &c| acc << 6 | val(c)) << (6 * pad);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}

fn py_field<'a>(line: &'a str, key: &str) -> &'a str {
    let from = line.find(&format!("{key}=")).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 1;
    let rest = &line[from..];
    &rest[..rest.find([',', ')']).unwrap_or(rest.len())]
}

fn parse_python(text: &str) -> Parsed {
    let blob_text: String = section(text, "BLOB = (\n", "\n)").lines().map(|l| l.trim().trim_matches('"')).collect();
    let blob = base64_decode(&blob_text);
    let allocs = section(text, "ALLOCS = [\n", "\n]\n");
    let lines: Vec<&str> = allocs.lines().collect();
    let mut images = Vec::new();
    let mut checksums = Vec::new();
    for pair in lines.chunks(2) {
        let (head, runs_line) = (pair[0], pair[1]);
        let total = num(py_field(head, "total"));
        let lit = num(py_field(head, "literal_offset")) as usize;
        checksums.push(py_field(head, "sha256").trim_matches('"').to_string());
        let runs_text = runs_line.trim().trim_start_matches("runs=[(").trim_end_matches(")]),");
        let mut runs = Vec::new();
        for r in runs_text.split("), (").filter(|r| !r.is_empty()) {
            let f: Vec<&str> = r.split(", ").collect();
            let period = num(f[0]) as usize;
            let bytes = num(f[2]);
            let pattern: Vec<u8> = f[1].trim_start_matches("b\"").trim_end_matches('"').split("\\x").filter(|h| !h.is_empty()).map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
            assert_eq!(pattern.len(), period, "{r}");
            runs.push(if period == 0 { Run::Literal { bytes } } else { Run::Fill { pattern, bytes } });
        }
        let img = decode(&runs, &blob[lit..]);
        assert_eq!(img.len() as u64, total);
        images.push(img);
    }
    let pair = |name: &str| -> (usize, usize) {
        let line = text.lines().find(|l| l.starts_with(&format!("{name}_OFFSET, {name}_COUNT = "))).unwrap();
        let (_, v) = line.split_once(" = ").unwrap();
        let (a, b) = v.split_once(", ").unwrap();
        (a.trim().parse().unwrap(), b.trim().parse().unwrap())
    };
    let (o_off, o_n) = pair("REF_O");
    let (l_off, l_n) = pair("REF_LSE");
    let mut args = Vec::new();
    for line in section(text, "ARGS = [", "\n]\n").lines().skip(1) {
        let body = line.trim().trim_start_matches('(');
        let body = &body[..body.find(')').unwrap()];
        let (kind, v) = body.split_once(", ").unwrap();
        let kind = match kind.trim_matches('"') {
            "ptr" => 0,
            "i32" => 1,
            "i64" => 2,
            _ => 3,
        };
        let v = num(v);
        args.push(match kind {
            0 => (0, v, 0, 0),
            3 => (3, 0, 0, v as u32),
            k => (k, 0, v as i64, 0),
        });
    }
    Parsed { images, checksums, ref_o: doubles(&blob[o_off..o_off + 8 * o_n]), ref_lse: doubles(&blob[l_off..l_off + 8 * l_n]), args }
}

fn expected_args(e: &Expected) -> Vec<(u64, u64, i64, u32)> {
    e.args
        .iter()
        .map(|a| match *a {
            ResolvedArg::Tensor(t) => (0, t.index() as u64, 0, 0),
            ResolvedArg::Buffer(b) => (0, cudafuzz::arena::buffer_slot(b) as u64, 0, 0),
            ResolvedArg::I32(x) => (1, 0, x as i64, 0),
            ResolvedArg::I64(x) => (2, 0, x, 0),
            ResolvedArg::F32(x) => (3, 0, 0, x.to_bits()),
        })
        .collect()
}

fn assert_same_bits(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}[{i}]");
    }
}

// ---------------------------------------------------------------------------------------------
// Always-on tests.

#[test]
fn emit_embeds_the_exact_host_image_reference_and_arguments() {
    for s in subjects() {
        let e = expected(&s);
        let cu = emit_cu(&s.case, &s.manifest, &seed_info(&s, "repro.cu")).unwrap();
        let py = emit_python(&s.case, &s.manifest, &seed_info(&s, "repro.py")).unwrap();
        for (lang, parsed) in [("cu", parse_cu(&cu)), ("python", parse_python(&py))] {
            let what = format!("{} ({lang})", s.name);
            assert_eq!(parsed.images.len(), e.image.bytes.len(), "{what}: allocations");
            for (i, (got, want)) in parsed.images.iter().zip(&e.image.bytes).enumerate() {
                assert!(got == want, "{what}: allocation {i} ({}) differs from the HostImage", e.image.layout.allocs[i].holder.name());
            }
            if lang == "cu" {
                let fnv: Vec<String> = e.image.bytes.iter().map(|b| format!("{:016x}", fnv1a64(b))).collect();
                assert_eq!(parsed.checksums, fnv, "{what}: checksums");
            } else {
                assert!(parsed.checksums.iter().all(|c| c.len() == 64), "{what}: sha256 checksums");
            }
            assert_same_bits(&parsed.ref_o, &e.ref_o, &format!("{what}: ref o"));
            assert_same_bits(&parsed.ref_lse, if e.has_lse { &e.ref_lse } else { &[] }, &format!("{what}: ref lse"));
            assert_eq!(parsed.args, expected_args(&e), "{what}: kernel arguments");
        }
        // The tensors sit at the case's offsets: residues mod 16 as in the plan.
        for tp in &e.plan.tensors {
            let a = &e.image.layout.allocs[tp.tensor.index()];
            assert_eq!(a.data_offset % 16, tp.base_residue, "{}: {}", s.name, tp.tensor);
        }
        if s.tool == Some(Tool::Memcheck) {
            assert!(cu.contains("placement:  exact"), "{}: memcheck repros use exact placement", s.name);
            assert!(e.image.layout.allocs.iter().all(|a| a.redzone_after == 0));
            assert!(cu.contains("compute-sanitizer --tool memcheck --padding="), "{}", s.name);
        }
        assert_eq!(e.case.placement == Placement::Exact, s.tool == Some(Tool::Memcheck));
    }
}

#[test]
fn emit_header_names_seed_case_finding_and_commands() {
    let s = fa_s512_misaligned();
    let mut info = seed_info(&s, "fa.cu");
    let mut f = cudafuzz::oracle::Judged { case: &s.case, plan: &Plan::new(&s.case), kernel: "fa_s512", inside_contract: true }
        .finding(cudafuzz::finding::FindingKind::MisalignedAddress, cudafuzz::finding::Oracle::CudaStatus, "the kernel failed with CUDA_ERROR_MISALIGNED_ADDRESS (716)".into());
    f.cuda_error = Some("CUDA_ERROR_MISALIGNED_ADDRESS (716)".into());
    info.signature = Some(f.signature());
    info.finding = Some(f);
    let out = emit(EmitKind::Cu, &s.case, &s.manifest, &info).unwrap();
    let head: Vec<&str> = out.text.lines().take_while(|l| l.starts_with("//")).collect();
    let head = head.join("\n");
    for want in [
        "// seed:       seeds/fa_s512_q8.json",
        "// case:       f16 b1 h2/1 q65 k113 d64 q:bhsd@8",
        "misaligned_address (oracle cuda_status) CUDA_ERROR_MISALIGNED_ADDRESS (716)",
        "// signature:  misaligned_address/cuda_status/fa_s512/-/-/unaligned:q",
        "//   nvcc -arch=native -lineinfo -o fa fa.cu",
        "//   ./fa",
        "//   compute-sanitizer --tool memcheck --padding=",
        "ptr % 16 = 8",
    ] {
        assert!(head.contains(want), "missing {want:?} in\n{head}");
    }
    assert_eq!(out.commands[0], "nvcc -arch=native -lineinfo -o fa fa.cu");
    assert!(!out.text.contains(&root().display().to_string()), "no absolute project paths in the repro");
    assert!(out.text.contains("#line 1 \"kernels/attention/fa_s512.cu\""));
    assert!(out.text.contains("CFR_EXPECTED = \"misaligned_address"));
    // The manifest's NVRTC options reach the nvcc command.
    let r = reference_kernel();
    let out = emit(EmitKind::Cu, &r.case, &r.manifest, &seed_info(&r, "ref.cu")).unwrap();
    assert_eq!(out.commands[0], "nvcc -arch=native -lineinfo --fmad=false -o ref ref.cu");
    let py = emit(EmitKind::Python, &r.case, &r.manifest, &seed_info(&r, "ref.py")).unwrap();
    assert!(py.text.contains("\"--fmad=false\""), "NVRTC options in the script");
    assert_eq!(py.commands[0], "python3 ref.py");
}

#[test]
fn emit_run_coding_round_trips_and_compresses_runs() {
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 0..200 {
        let mut data = Vec::new();
        while data.len() < 3000 {
            match next() % 4 {
                0 => data.extend((0..next() % 100).map(|_| next() as u8)),
                1 => data.extend(std::iter::repeat_n(next() as u8, (next() % 200) as usize)),
                2 => {
                    let p = [next() as u8, next() as u8];
                    data.extend((0..next() % 200).map(|j| p[j as usize % 2]));
                }
                _ => {
                    let p = (next() as u32).to_le_bytes();
                    data.extend((0..next() % 300).map(|j| p[j as usize % 4]));
                }
            }
        }
        let e = encode(&data);
        assert_eq!(decode(&e.runs, &e.literal), data, "round {round}");
        assert_eq!(e.runs.iter().map(Run::bytes).sum::<u64>(), data.len() as u64);
    }
    let mut img = vec![0xFFu8; 5000];
    img.extend(std::iter::repeat_n([0x55u8, 0x7E], 4000).flatten());
    let e = encode(&img);
    assert_eq!(e.runs.len(), 2, "{:?}", e.runs);
    assert!(e.literal.is_empty());
}

/// A throwaway project: `<tmp>/kernels/include/{once,plain,cyc}.cuh`, `<tmp>/kernels/k/k.cu`.
fn write_project(dir: &Path, main: &str) -> PathBuf {
    let inc = dir.join("kernels/include");
    let k = dir.join("kernels/k");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::create_dir_all(&k).unwrap();
    std::fs::write(inc.join("once.cuh"), "#pragma once\n#define ONCE_VALUE 7\n#include <cuda_fp16.h>\n#include \"plain.cuh\"\n").unwrap();
    std::fs::write(inc.join("plain.cuh"), "PLAIN_COUNT += 1;\n").unwrap();
    std::fs::write(inc.join("cyc.cuh"), "#include \"cyc.cuh\"\n").unwrap();
    std::fs::write(k.join("local.cuh"), "#pragma once\n#include \"once.cuh\"\nint local_marker;\n").unwrap();
    let src = k.join("k.cu");
    std::fs::write(&src, main).unwrap();
    src
}

#[test]
fn emit_inlines_project_headers_with_guards_and_line_directives() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_project(dir.path(), "// top\n#include \"once.cuh\"\n#if 0\n#include \"once.cuh\"\n#endif\n# include <local.cuh>\n#include \"plain.cuh\"\nint tail;\n");
    let s = inline_source(&src).unwrap();
    let t = &s.text;
    // once.cuh is inlined at each include, behind one guard; plain.cuh (no pragma) every time.
    assert_eq!(t.matches("#define ONCE_VALUE 7").count(), 3, "{t}");
    assert_eq!(t.matches("#ifndef CFR_ONCE_0").count(), 3, "{t}");
    assert_eq!(t.matches("PLAIN_COUNT += 1;").count(), 4, "{t}");
    assert!(t.contains("#include <cuda_fp16.h>"), "CUDA headers stay includes");
    assert!(t.contains("int local_marker;"), "angled includes found in the project are inlined too");
    assert!(!t.contains("#pragma once"), "{t}");
    // After each inlined header the including file's numbering resumes.
    assert!(t.contains("#line 3 \"") && t.contains("k.cu\"\n#if 0"), "{t}");
    assert_eq!(s.files.len(), 4, "{:?}", s.files);
    assert!(s.files.iter().all(|f| !f.starts_with('/')), "{:?}", s.files);

    let cyc = write_project(dir.path(), "#include \"cyc.cuh\"\n");
    assert!(matches!(inline_source(&cyc), Err(EmitError::IncludeCycle { .. })));
    let mac = write_project(dir.path(), "#define H \"plain.cuh\"\n#include H\n");
    let e = inline_source(&mac).unwrap_err();
    assert!(matches!(e, EmitError::MacroInclude { line: 2, .. }), "{e}");
}

// ---------------------------------------------------------------------------------------------
// NVRTC.

fn compiler(dir: &Path) -> Option<Compiler> {
    match Compiler::new(Some(dir.join("cache"))) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn emit_cu_kernel_section_compiles_with_nvrtc_outside_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let Some(c) = compiler(dir.path()) else { return };
    for s in subjects() {
        let text = emit_cu(&s.case, &s.manifest, &seed_info(&s, "repro.cu")).unwrap();
        let path = dir.path().join(format!("{}.cu", s.name));
        std::fs::write(&path, &text).unwrap();
        // No defines and no project include directories: the file carries both.
        let req = CompileRequest { source: path, entry: s.manifest.entry.clone(), defines: BTreeMap::new(), options: s.manifest.options.clone(), arch: Arch::new(9, 0) };
        let out = c.compile(&req).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert!(out.cubin.starts_with(b"\x7fELF"), "{}", s.name);
    }
}

fn python3() -> Option<PathBuf> {
    let ok = Command::new("python3").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if ok {
        Some(PathBuf::from("python3"))
    } else {
        eprintln!("skipped: no python3 on PATH");
        None
    }
}

#[test]
fn emit_python_compiles_with_nvrtc_and_writes_the_host_image() {
    let dir = tempfile::tempdir().unwrap();
    let Some(py) = python3() else { return };
    let c = compiler(dir.path());
    for s in [fa_s512_misaligned(), mutant_unchecked_vec(), simple_attn_strided()] {
        let e = expected(&s);
        let script = dir.path().join(format!("{}.py", s.name));
        std::fs::write(&script, emit_python(&s.case, &s.manifest, &seed_info(&s, "repro.py")).unwrap()).unwrap();
        let images = dir.path().join(format!("{}-img", s.name));
        std::fs::create_dir_all(&images).unwrap();
        let o = Command::new(&py).arg(&script).arg("--write-image").arg(&images).output().unwrap();
        assert!(o.status.success(), "{}: {}{}", s.name, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        for (i, a) in e.image.layout.allocs.iter().enumerate() {
            let got = std::fs::read(images.join(format!("alloc{i}-{}.bin", a.holder.name()))).unwrap();
            assert!(got == e.image.bytes[i], "{}: allocation {i} written by the script differs", s.name);
        }
        let Some(c) = &c else { continue };
        let mut cmd = Command::new(&py);
        cmd.arg(&script).args(["--compile-only", "--arch", "sm_90"]);
        if let Some(p) = c.nvrtc_path() {
            cmd.env("CUDAFUZZ_NVRTC", p);
        }
        if let Some(i) = c.cuda_include() {
            cmd.env("CUDAFUZZ_CUDA_INCLUDE", i);
        }
        let o = cmd.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && out.contains("bytes of cubin"), "{}: {out}{}", s.name, String::from_utf8_lossy(&o.stderr));
    }
}

// ---------------------------------------------------------------------------------------------
// The host program against a stub CUDA runtime.

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

/// The stub runtime: host memory for device memory; the "kernel" copies the files named by
/// `CFR_STUB_FILE{1,2}` to pointer argument `CFR_STUB_ARG{1,2}` at byte `CFR_STUB_AT{1,2}`,
/// checks the launch geometry, and on the second launch flips the byte at
/// `CFR_STUB_FLIP_SECOND` of the first written region; `CFR_STUB_SYNC_ERROR` is what
/// synchronising returns.
const STUB_SOURCE: &str = r#"#include "cfr_stub.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
static int launches = 0;
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
static void write_region(void** args, const char* file, const char* arg, const char* at, bool flip) {
    const char* path = getenv(file);
    if (!path) return;
    FILE* f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)malloc(n ? n : 1);
    if (fread(buf, 1, n, f) != (size_t)n) abort();
    fclose(f);
    char* base = *(char**)args[envi(arg, 3)] + envi(at, 0);
    memcpy(base, buf, n);
    if (flip && launches == 2 && getenv("CFR_STUB_FLIP_SECOND")) base[envi("CFR_STUB_FLIP_SECOND", 0)] ^= 1;
    free(buf);
}
cudaError_t cudaLaunchKernel(const void*, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t) {
    launches++;
    printf("stub: launch %d grid %u %u %u block %u %u %u smem %zu\n", launches, g.x, g.y, g.z, b.x, b.y, b.z, smem);
    write_region(args, "CFR_STUB_FILE1", "CFR_STUB_ARG1", "CFR_STUB_AT1", true);
    write_region(args, "CFR_STUB_FILE2", "CFR_STUB_ARG2", "CFR_STUB_AT2", false);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return (cudaError_t)envi("CFR_STUB_SYNC_ERROR", 0); }
const char* cudaGetErrorName(cudaError_t e) { return e == 716 ? "cudaErrorMisalignedAddress" : "cudaErrorStub"; }
const char* cudaGetErrorString(cudaError_t e) { return e == 716 ? "misaligned address" : "stub error"; }
"#;

fn gxx() -> Option<&'static str> {
    let ok = Command::new("g++").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        eprintln!("skipped: no g++ on PATH");
    }
    ok.then_some("g++")
}

/// Builds the host part of a `.cu` repro with the stub runtime.
fn build_host(dir: &Path, name: &str, text: &str, entry: &str) -> PathBuf {
    std::fs::write(dir.join("cfr_stub.h"), STUB_HEADER).unwrap();
    std::fs::write(dir.join("stub.cpp"), format!("{STUB_SOURCE}extern \"C\" void {entry}(void) {{}}\n")).unwrap();
    let src = dir.join(format!("{name}.cu"));
    std::fs::write(&src, text).unwrap();
    let exe = dir.join(name);
    let o = Command::new("g++")
        .current_dir(dir)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-DCF_REPRO_HOST_ONLY", "-include", "cfr_stub.h", "-x", "c++"])
        .arg(&src)
        .args(["-x", "c++", "stub.cpp", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{name}: g++ failed:\n{}", String::from_utf8_lossy(&o.stderr));
    exe
}

fn run(exe: &Path, args: &[&str], env: &[(&str, String)]) -> (i32, String) {
    let o: Output = Command::new(exe).args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str()))).output().unwrap();
    (o.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// The data span of o holding the fp64 reference rounded to the dtype (a perfect kernel's output).
fn perfect_o(e: &Expected) -> Vec<u8> {
    let o = TensorId::O.index();
    let a = &e.image.layout.allocs[o];
    let mut span = e.image.bytes[o][a.data_offset as usize..(a.data_offset + a.span_bytes) as usize].to_vec();
    cudafuzz::data::write_strided(&e.ref_o, e.plan.tensor(TensorId::O), e.case.dtype, &mut span);
    span
}

#[test]
fn emit_cu_host_program_judges_like_the_harness_against_a_stub_runtime() {
    if gxx().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for s in [fa_s512_misaligned(), simple_attn_strided(), mutant_unchecked_vec()] {
        let e = expected(&s);
        let text = emit_cu(&s.case, &s.manifest, &seed_info(&s, "repro.cu")).unwrap();
        let exe = build_host(dir.path(), s.name, &text, &s.manifest.entry);
        let o_arg = e.args.iter().position(|a| *a == ResolvedArg::Tensor(TensorId::O)).unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(format!("{}-{name}.bin", s.name));
            std::fs::write(&p, bytes).unwrap();
            p.display().to_string()
        };
        let perfect = vec![("CFR_STUB_FILE1", file("perfect", &perfect_o(&e))), ("CFR_STUB_ARG1", o_arg.to_string())];
        let mut perfect_all = perfect.clone();
        if e.has_lse {
            let lse_arg = e.args.iter().position(|a| matches!(a, ResolvedArg::Buffer(_))).unwrap();
            let lse: Vec<u8> = e.ref_lse.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect();
            perfect_all.push(("CFR_STUB_FILE2", file("lse", &lse)));
            perfect_all.push(("CFR_STUB_ARG2", lse_arg.to_string()));
        }

        // A perfect kernel passes, and both runs launch with the manifest's geometry.
        let (code, out) = run(&exe, &[], &perfect_all);
        assert_eq!(code, 0, "{}: {out}", s.name);
        assert!(out.contains("RESULT: PASS") && out.matches("stub: launch").count() == 2, "{}: {out}", s.name);
        let l = s.manifest.resolve(&e.case, &e.plan).unwrap();
        assert!(out.contains(&format!("grid {} {} {} block {} {} {} smem {}", l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_bytes)), "{}: {out}", s.name);
        assert_eq!(out.contains("stub: attribute 8 ="), l.shared_bytes > 48 * 1024, "{}: opt-in attribute: {out}", s.name);
        let q_residue = e.plan.tensor(TensorId::Q).base_residue;
        assert!(out.contains(&format!("ptr % 16 = {q_residue})")), "{}: {out}", s.name);
        if e.has_lse {
            let (code, out) = run(&exe, &["--no-determinism"], &perfect);
            assert!(code == 1 && out.contains("log-sum-exp values differ"), "{}: lse left at -inf: {out}", s.name);
        }

        // Nothing written: every output element still holds the sentinel.
        let (code, out) = run(&exe, &["--no-determinism"], &[]);
        assert!(code == 1 && out.contains("FAIL unwritten_output (sentinel)"), "{}: {out}", s.name);

        // One byte past o's end: canary damage, located in bytes.
        let span = e.plan.tensor(TensorId::O).span_bytes;
        let mut env = perfect_all.clone();
        env.push(("CFR_STUB_FILE2", file("past", &[0x42])));
        env.push(("CFR_STUB_ARG2", o_arg.to_string()));
        env.push(("CFR_STUB_AT2", (span + 2).to_string()));
        let (code, out) = run(&exe, &["--no-determinism"], &env);
        assert!(code == 1 && out.contains("1 bytes after the end of o were overwritten, up to 3 bytes past its last byte"), "{}: {out}", s.name);
        // One byte before it.
        let mut env = perfect_all.clone();
        env.push(("CFR_STUB_FILE2", file("before", &[0x42])));
        env.push(("CFR_STUB_ARG2", o_arg.to_string()));
        env.push(("CFR_STUB_AT2", "-5".to_string()));
        let (code, out) = run(&exe, &["--no-determinism"], &env);
        assert!(code == 1 && out.contains("of the redzone before o were overwritten") && out.contains("nearest 5 bytes before"), "{}: {out}", s.name);

        // A wrong value: the error bound, at the right element.
        let mut wrong = perfect_o(&e);
        let at = e.plan.tensor(TensorId::O).byte_offset([0, 1, 3, 2]) as usize;
        let eb = e.plan.tensor(TensorId::O).elem_bytes as usize;
        let x = cudafuzz::data::from_bits(u32::from_le_bytes({
            let mut b = [0u8; 4];
            b[..eb].copy_from_slice(&wrong[at..at + eb]);
            b
        }), e.case.dtype);
        let bits = cudafuzz::data::to_bits(x + 0.5, e.case.dtype).to_le_bytes();
        wrong[at..at + eb].copy_from_slice(&bits[..eb]);
        let mut env = perfect_all.clone();
        env[0] = ("CFR_STUB_FILE1", file("wrong", &wrong));
        let (code, out) = run(&exe, &["--no-determinism"], &env);
        assert!(code == 1 && out.contains("FAIL numerical_error (reference)") && out.contains("worst at element [b=0, h=1, s=3, d=2]"), "{}: {out}", s.name);

        // A race: the second run differs in one element.
        let mut env = perfect_all.clone();
        env.push(("CFR_STUB_FLIP_SECOND", at.to_string()));
        let (code, out) = run(&exe, &[], &env);
        assert!(code == 1 && out.contains("FAIL nondeterminism (determinism): 1 output elements differ") && out.contains("[b=0, h=1, s=3, d=2]"), "{}: {out}", s.name);

        // The fault: CUDA's error name and string, exit 1.
        let (code, out) = run(&exe, &[], &[("CFR_STUB_SYNC_ERROR", "716".to_string())]);
        assert!(code == 1 && out.contains("CUDA error: cudaErrorMisalignedAddress (716): misaligned address"), "{}: {out}", s.name);
        assert!(out.contains("FAIL misaligned_address (cuda_status)"), "{}: {out}", s.name);

        // The decoded images are the HostImage, byte for byte.
        let img = dir.path().join(format!("{}-img", s.name));
        std::fs::create_dir_all(&img).unwrap();
        let (code, out) = run(&exe, &["--write-image", img.to_str().unwrap()], &[]);
        assert_eq!(code, 0, "{out}");
        for (i, a) in e.image.layout.allocs.iter().enumerate() {
            let got = std::fs::read(img.join(format!("alloc{i}-{}.bin", a.holder.name()))).unwrap();
            assert!(got == e.image.bytes[i], "{}: allocation {i} decoded by the program differs", s.name);
        }
    }

    // Gaps: a write between rows of o (simple_attn_strided pads o's rows) is told apart.
    let s = simple_attn_strided();
    let e = expected(&s);
    let exe = dir.path().join(s.name);
    let o_arg = e.args.iter().position(|a| *a == ResolvedArg::Tensor(TensorId::O)).unwrap();
    let mut gap = perfect_o(&e);
    let row = e.plan.tensor(TensorId::O).byte_offset([0, 0, 1, 0]) as usize;
    gap[row - 1] ^= 0xFF; // the last padding byte of row 0
    let p = dir.path().join("gap.bin");
    std::fs::write(&p, &gap).unwrap();
    let (code, out) = run(&exe, &["--no-determinism"], &[("CFR_STUB_FILE1", p.display().to_string()), ("CFR_STUB_ARG1", o_arg.to_string())]);
    assert!(code == 1 && out.contains(&format!("1 bytes in the stride gaps of o were overwritten (write between rows); first at stride gap byte {}", row - 1)), "{out}");
}

// ---------------------------------------------------------------------------------------------
// The command line.

fn cudafuzz(args: &[&str]) -> Output {
    Command::new(common::exe()).current_dir(root()).args(args).output().expect("the binary runs")
}

#[test]
fn emit_from_the_cli_needs_no_gpu_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let s = fa_s512_misaligned();
    let mut case = s.case.clone();
    case.kernel = "fa_s512".into();
    let seed = dir.path().join("fa8.json");
    std::fs::write(&seed, Seed::new(case).to_json()).unwrap();
    let seed_s = seed.to_str().unwrap();
    let out_cu = dir.path().join("fa8.cu");

    let o = cudafuzz(&["repro", seed_s, "--emit", "cu"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("nvcc -arch=native -lineinfo -o fa8 fa8.cu") && text.contains("./fa8"), "{text}");
    let first = std::fs::read_to_string(&out_cu).unwrap();
    assert!(first.contains("#define CFR_ENTRY fa_s512_fwd"));

    std::fs::write(&out_cu, "keep me").unwrap();
    let o = cudafuzz(&["repro", seed_s, "--emit", "cu"]);
    assert_eq!(o.status.code(), Some(cudafuzz::exit::USAGE));
    assert!(String::from_utf8_lossy(&o.stderr).contains("exists; pass --force"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&out_cu).unwrap(), "keep me");
    let o = cudafuzz(&["repro", seed_s, "--emit", "cu", "--force"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out_cu).unwrap(), first);

    let py = dir.path().join("x.py");
    let o = cudafuzz(&["repro", seed_s, "--emit", "python", "-o", py.to_str().unwrap(), "--sanitize", "memcheck"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let script = std::fs::read_to_string(&py).unwrap();
    assert!(script.starts_with("#!/usr/bin/env python3") && script.contains("placement:  exact"));
    let o = cudafuzz(&["repro", seed_s, "--emit", "cu", "-o", "-"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("// cudafuzz standalone repro"));
    let o = cudafuzz(&["repro", seed_s, "--emit", "cu", "-o", "-", "--sanitize", "memcheck,racecheck"]);
    assert_eq!(o.status.code(), Some(cudafuzz::exit::USAGE));
    let o = cudafuzz(&["repro", seed_s, "-o", "x.cu"]);
    assert_eq!(o.status.code(), Some(cudafuzz::exit::USAGE), "-o needs --emit");
}
