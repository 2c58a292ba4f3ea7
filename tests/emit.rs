//! Standalone repros (`cudafuzz repro SEED --emit cu|python`), checked without a GPU.
//!
//! * The arena images (the kernel's and a reference kernel's two runs), embedded gold and launch
//!   arguments embedded in both files are parsed back here and compared with what the library
//!   computes for the case (always runs).
//! * The `.cu` file's device section (the kernel, and a reference kernel compiled twice in its
//!   own namespaces) compiles with NVRTC from a directory outside the project, so every project
//!   header really is inlined (skipped, with the reason printed, without libnvrtc).
//! * The Python script compiles every program with NVRTC through ctypes and writes its decoded
//!   images (skipped without python3 or libnvrtc).
//! * The `.cu` file's host part is compiled with `g++ -DCF_REPRO_HOST_ONLY` against a stub CUDA
//!   runtime, and the Python script is run under a fake driver, whose "kernels" write chosen
//!   bytes: both must say PASS for a perfect output and name each planted fault, per tensor
//!   (skipped without g++ or python3); for a user reference kernel the stub's gold and baseline
//!   runs set the bound, which must be the one the library computes.
//! * The CLI writes a repro without a GPU and never overwrites one without `--force`.
//!
//! The subjects, the parsers and the stubs live in `emit_support/`.
//! Every test name contains `emit`: `cargo nextest run -E 'test(/emit/)'`.

mod common;
mod emit_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudafuzz::core::case::Placement;
use cudafuzz::core::corpus::Seed;
use cudafuzz::core::manifest::ReferenceSpec;
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::compile::{Arch, CompileRequest, Compiler};
use cudafuzz::engine::reference::Rule;
use cudafuzz::run::sanitizer::Tool;
use cudafuzz::tools::emit::{decode, emit, emit_cu, emit_python, encode, fnv1a64, inline_source, EmitError, EmitKind, Run};

use common::root;
use emit_support::parse::{check_expects, expected_args, parse_cu, parse_python};
use emit_support::stub::{gold_values, ptr_arg, repros, span_with, stub_for, Repro, Stub};
use emit_support::subjects::{
    attention_f64, expected, fa_s512_misaligned, mutant_unchecked_vec, row_scale, seed_info, simple_attn_strided, subjects, Expected, Subject,
};

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
            let want = e.images();
            assert_eq!(parsed.images.len(), want.len(), "{what}: allocations");
            assert_eq!(parsed.names, e.alloc_names(), "{what}: allocation names");
            for (i, (got, want)) in parsed.images.iter().zip(&want).enumerate() {
                assert!(got == *want, "{what}: allocation {i} ({}) differs from the HostImage", parsed.names[i]);
            }
            if lang == "cu" {
                let fnv: Vec<String> = want.iter().map(|b| format!("{:016x}", fnv1a64(b))).collect();
                assert_eq!(parsed.checksums, fnv, "{what}: checksums");
            } else {
                assert!(parsed.checksums.iter().all(|c| c.len() == 64), "{what}: sha256 checksums");
            }
            assert_eq!(parsed.args, expected_args(&e), "{what}: kernel arguments");
            check_expects(&parsed, &e, &what);
        }
        // The tensors sit at the case's offsets: residues mod 16 as in the plan.
        let k = e.kernel();
        for tp in &k.plan.tensors {
            assert_eq!(k.image.layout.allocs[tp.index].data_offset % 16, tp.base_residue, "{}: {}", s.name, tp.name);
        }
        if s.tool == Some(Tool::Memcheck) {
            assert!(cu.contains("placement:  exact"), "{}: memcheck repros use exact placement", s.name);
            assert!(k.image.layout.allocs.iter().all(|a| a.redzone_after == 0));
            assert!(cu.contains("compute-sanitizer --tool memcheck --padding="), "{}", s.name);
        }
        assert_eq!(k.case.placement == Placement::Exact, s.tool == Some(Tool::Memcheck));
    }
}

#[test]
fn emit_header_names_seed_case_finding_and_commands() {
    let s = fa_s512_misaligned();
    let mut info = seed_info(&s, "fa.cu");
    let plan = Plan::new(&s.case, &s.manifest).unwrap();
    let mut f = cudafuzz::engine::oracle::Judged { case: &s.case, plan: &plan, kernel: "fa_s512", inside_contract: true }.finding(
        cudafuzz::core::finding::FindingKind::MisalignedAddress,
        cudafuzz::core::finding::Oracle::CudaStatus,
        "the kernel failed with CUDA_ERROR_MISALIGNED_ADDRESS (716)".into(),
    );
    f.cuda_error = Some("CUDA_ERROR_MISALIGNED_ADDRESS (716)".into());
    info.signature = Some(f.signature());
    info.finding = Some(f);
    let out = emit(EmitKind::Cu, &s.case, &s.manifest, &info).unwrap();
    let head: Vec<&str> = out.text.lines().take_while(|l| l.starts_with("//")).collect();
    let head = head.join("\n");
    for want in [
        "// seed:       seeds/fa_s512_q8.json".to_string(),
        format!("// case:       {}", s.case.summary()),
        "misaligned_address (oracle cuda_status) CUDA_ERROR_MISALIGNED_ADDRESS (716)".to_string(),
        "// signature:  misaligned_address/cuda_status/fa_s512/-/-/unaligned:q".to_string(),
        "//   q (input, f16): shape [1, 2, 65, 64]".to_string(),
        "//   o: max |o - gold| <= 2 x ".to_string(),
        "//   nvcc -arch=native -lineinfo -o fa fa.cu".to_string(),
        "//   ./fa".to_string(),
        "//   compute-sanitizer --tool memcheck --padding=".to_string(),
        "ptr % 16 = 8".to_string(),
    ] {
        assert!(head.contains(&want), "missing {want:?} in\n{head}");
    }
    assert_eq!(out.commands[0], "nvcc -arch=native -lineinfo -o fa fa.cu");
    assert!(!out.text.contains(&root().display().to_string()), "no absolute project paths in the repro");
    assert!(out.text.contains("#line 1 \"kernels/attention/fa_s512.cu\""));
    assert!(out.text.contains("CFR_EXPECTED = \"misaligned_address"));
    // The manifest's NVRTC options reach the nvcc command.
    let r = attention_f64();
    let out = emit(EmitKind::Cu, &r.case, &r.manifest, &seed_info(&r, "ref.cu")).unwrap();
    assert_eq!(out.commands[0], "nvcc -arch=native -lineinfo --fmad=false -o ref ref.cu");
    assert!(out.text.contains("// reference:  none in the manifest"), "attention_f64 has no reference");
    let py = emit(EmitKind::Python, &r.case, &r.manifest, &seed_info(&r, "ref.py")).unwrap();
    assert!(py.text.contains("\"--fmad=false\""), "NVRTC options in the script");
    assert_eq!(py.commands[0], "python3 ref.py");
    // A reference kernel: named, with its runs' defines.
    let u = row_scale();
    let out = emit(EmitKind::Cu, &u.case, &u.manifest, &seed_info(&u, "rs.cu")).unwrap();
    for want in [
        "// reference:  the manifest's reference kernel row_scale_ref (",
        "//   y, s pass(es) when max |out - gold| <= 2 x max |baseline - gold| + 4 u max |gold|, u the output's unit roundoff (2^-32 for f64)",
        "// gold defines: CF_T_s=double CF_T_w=double CF_T_x=double CF_T_y=double CUDAFUZZ=1 CUDAFUZZ_DTYPE_F64=1 CUDAFUZZ_REFERENCE=1",
        "// baseline defines: CF_T_s=float CF_T_w=float CF_T_x=float CF_T_y=float CUDAFUZZ=1 CUDAFUZZ_DTYPE_F32=1 CUDAFUZZ_REFERENCE=1",
        "namespace cfr_gold {",
        "#define row_scale_ref cfr_gold_row_scale_ref",
        "(const void*)cfr_baseline::cfr_baseline_row_scale_ref",
    ] {
        assert!(out.text.contains(want), "missing {want:?} in the row_scale repro");
    }
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
    let src = write_project(
        dir.path(),
        "// top\n#include \"once.cuh\"\n#if 0\n#include \"once.cuh\"\n#endif\n# include <local.cuh>\n#include \"plain.cuh\"\nint tail;\n",
    );
    let s = inline_source(&src, &[]).unwrap();
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
    // The guards and the includes left in place are listed, each once.
    assert_eq!(s.guards, ["CFR_ONCE_0", "CFR_ONCE_1"]);
    assert_eq!(s.kept_includes, ["#include <cuda_fp16.h>"]);

    let cyc = write_project(dir.path(), "#include \"cyc.cuh\"\n");
    assert!(matches!(inline_source(&cyc, &[]), Err(EmitError::IncludeCycle { .. })));
    let mac = write_project(dir.path(), "#define H \"plain.cuh\"\n#include H\n");
    let e = inline_source(&mac, &[]).unwrap_err();
    assert!(matches!(e, EmitError::MacroInclude { line: 2, .. }), "{e}");
}

// ---------------------------------------------------------------------------------------------
// NVRTC.

fn compiler(dir: &Path) -> Option<Compiler> {
    common::env::compiler(&dir.join("cache"))
}

#[test]
fn emit_cu_kernel_section_compiles_with_nvrtc_outside_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let Some(c) = compiler(dir.path()) else { return };
    for s in subjects() {
        let text = emit_cu(&s.case, &s.manifest, &seed_info(&s, "repro.cu")).unwrap();
        let path = dir.path().join(format!("{}.cu", s.name));
        std::fs::write(&path, &text).unwrap();
        // No defines and no project include directories: the file carries both. A reference
        // kernel's two copies are in the same module, under their renamed entries.
        let mut entries = vec![s.manifest.entry.clone()];
        if let ReferenceSpec::Kernel(k) = &s.manifest.reference {
            entries.extend(["gold", "baseline"].map(|r| format!("cfr_{r}_{}", k.entry)));
        }
        for entry in entries {
            let req = CompileRequest {
                source: path.clone(),
                entry,
                defines: BTreeMap::new(),
                options: s.manifest.options.clone(),
                arch: Arch::new(9, 0),
                build: Default::default(),
            };
            let out = c.compile(&req).unwrap_or_else(|e| panic!("{}: {}", s.name, cudafuzz::core::error::chain(&e)));
            assert!(out.cubin.starts_with(b"\x7fELF"), "{}", s.name);
        }
    }
}

fn python3() -> Option<PathBuf> {
    common::env::python3()
}

#[test]
fn emit_python_compiles_with_nvrtc_and_writes_the_host_image() {
    let dir = tempfile::tempdir().unwrap();
    let Some(py) = python3() else { return };
    let c = compiler(dir.path());
    for s in [fa_s512_misaligned(), mutant_unchecked_vec(), simple_attn_strided(), row_scale()] {
        let e = expected(&s);
        let script = dir.path().join(format!("{}.py", s.name));
        std::fs::write(&script, emit_python(&s.case, &s.manifest, &seed_info(&s, "repro.py")).unwrap()).unwrap();
        let images = dir.path().join(format!("{}-img", s.name));
        std::fs::create_dir_all(&images).unwrap();
        let o = Command::new(&py).arg(&script).arg("--write-image").arg(&images).output().unwrap();
        assert!(o.status.success(), "{}: {}{}", s.name, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        for (i, (name, want)) in e.alloc_names().iter().zip(e.images()).enumerate() {
            let got = std::fs::read(images.join(format!("alloc{i}-{name}.bin"))).unwrap();
            assert!(got == *want, "{}: allocation {i} written by the script differs", s.name);
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
        assert_eq!(out.matches("bytes of cubin").count(), e.programs.len(), "{}: one cubin per program: {out}", s.name);
    }
}

// ---------------------------------------------------------------------------------------------
// The host program against a stub CUDA runtime.

/// The planted faults of one subject, judged by one repro.
fn judge_subject(dir: &Path, s: &Subject, e: &Expected, r: &Repro) {
    let what = format!("{} ({})", s.name, r.lang());
    let gold = gold_values(e);
    let reference = (e.programs.len() > 1).then_some((&gold[..], &gold[..]));
    let perfect = stub_for(dir, s.name, e, &gold, reference);
    let first = gold[0].0;
    let out_tp = &e.kernel().plan.tensors[first];
    let name = &out_tp.name;
    let file = |tag: &str, bytes: &[u8]| {
        let p = dir.join(format!("{}-{tag}.bin", s.name));
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };

    // A perfect kernel passes, and both runs launch with the manifest's geometry.
    let (code, out) = r.run(&[], &perfect.env);
    assert_eq!(code, 0, "{what}: {out}");
    assert!(out.contains("RESULT: PASS") && out.matches("stub: launch K").count() == 2, "{what}: {out}");
    assert_eq!(out.matches("stub: launch G").count() + out.matches("stub: launch B").count(), e.programs.len() - 1, "{what}: {out}");
    let l = s.manifest.resolve(&e.kernel().plan.vars).unwrap();
    assert!(
        out.contains(&format!("grid {} {} {} block {} {} {} smem {}", l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_bytes)),
        "{what}: {out}"
    );
    assert_eq!(out.contains("stub: attribute 8 ="), l.shared_bytes > 48 * 1024, "{what}: opt-in attribute: {out}");
    let residue = e.kernel().plan.tensors[0].base_residue;
    assert!(out.contains(&format!("ptr % 16 = {residue})")), "{what}: {out}");
    if gold.len() > 1 {
        // The second output left as it started: judged by its own rule.
        let (code, out) = r.run(&["--no-determinism"], &stub_for(dir, s.name, e, &gold[..1], reference).env);
        let second = &e.kernel().plan.tensors[gold[1].0].name;
        let judged = out.contains(&format!(" of {second} ")) || out.contains(&format!("|{second} - ref64|"));
        assert!(code == 1 && judged, "{what}: {second} left as initialised: {out}");
    }

    // Nothing written: every element of the first output still holds the sentinel.
    let (code, out) = r.run(&["--no-determinism"], &stub_for(dir, s.name, e, &[], reference).env);
    let unwritten = format!("FAIL unwritten_output (sentinel): {} of {} elements of {name} were never written", out_tp.numel, out_tp.numel);
    assert!(code == 1 && out.contains(&unwritten), "{what}: {out}");

    // One byte past the output's end: canary damage, located in bytes. One byte before it.
    let arg = ptr_arg(e, 0, first);
    let env = perfect.clone().region('K', 4, file("past", &[0x42]), arg, out_tp.span_bytes as i64 + 2);
    let (code, out) = r.run(&["--no-determinism"], &env.env);
    assert!(code == 1 && out.contains(&format!("1 bytes after the end of {name} were overwritten, up to 3 bytes past its last byte")), "{what}: {out}");
    let env = perfect.clone().region('K', 4, file("before", &[0x42]), arg, -5);
    let (code, out) = r.run(&["--no-determinism"], &env.env);
    assert!(code == 1 && out.contains(&format!("of the redzone before {name} were overwritten")) && out.contains("nearest 5 bytes before"), "{what}: {out}");

    // A wrong value: the error bound, at the right element.
    let linear = out_tp.shape.iter().zip(&s.wrong_at).fold(0u64, |acc, (n, i)| acc * n + i) as usize;
    let mut wrong = gold.clone();
    wrong[0].1[linear] += 0.5;
    let (code, out) = r.run(&["--no-determinism"], &stub_for(dir, &format!("{}-wrong", s.name), e, &wrong, reference).env);
    let at = out_tp.describe_index(&s.wrong_at);
    assert!(code == 1 && out.contains("FAIL numerical_error (reference)") && out.contains(&format!("worst at {at}")), "{what}: {out}");

    // A race: the second run differs in one element.
    let byte = out_tp.byte_offset(&s.wrong_at);
    let (code, out) = r.run(&[], &perfect.clone().with("CFR_STUB_FLIP_SECOND", byte.to_string()).env);
    assert!(code == 1 && out.contains(&format!("FAIL nondeterminism (determinism): 1 elements of {name} differ")) && out.contains(&at), "{what}: {out}");

    // The fault: CUDA's error name and string, exit 1.
    let (code, out) = r.run(&[], &perfect.clone().with("CFR_STUB_SYNC_ERROR", "716".into()).env);
    assert!(code == 1 && out.contains("CUDA error: cudaErrorMisalignedAddress (716): misaligned address"), "{what}: {out}");
    assert!(out.contains("FAIL misaligned_address (cuda_status)"), "{what}: {out}");

    // The decoded images are the HostImages, byte for byte.
    let img = dir.join(format!("{}-{}-img", s.name, r.lang()));
    std::fs::create_dir_all(&img).unwrap();
    let (code, out) = r.run(&["--write-image", img.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    for (i, (n, want)) in e.alloc_names().iter().zip(e.images()).enumerate() {
        let got = std::fs::read(img.join(format!("alloc{i}-{n}.bin"))).unwrap();
        assert!(got == *want, "{what}: allocation {i} decoded by the program differs");
    }
}

/// The repros of a subject that this machine can run.
fn repros_of(dir: &Path, s: &Subject) -> Vec<Repro> {
    let cu = emit_cu(&s.case, &s.manifest, &seed_info(s, "repro.cu")).unwrap();
    let py = emit_python(&s.case, &s.manifest, &seed_info(s, "repro.py")).unwrap();
    repros(dir, s.name, &s.manifest, &cu, &py)
}

#[test]
fn emit_host_programs_judge_like_the_harness_against_a_stub_runtime() {
    let dir = tempfile::tempdir().unwrap();
    for s in [fa_s512_misaligned(), simple_attn_strided(), mutant_unchecked_vec(), row_scale()] {
        let e = expected(&s);
        for r in repros_of(dir.path(), &s) {
            judge_subject(dir.path(), &s, &e, &r);
        }
    }

    // Gaps: a write between rows of o (simple_attn_strided pads o's rows) is told apart.
    let s = simple_attn_strided();
    let e = expected(&s);
    let o = e.kernel().plan.tensor("o").unwrap();
    let gold = gold_values(&e);
    let mut gap = span_with(&e, o.index, &gold[0].1);
    let row = o.byte_offset(&[0, 0, 1, 0]) as usize;
    gap[row - 1] ^= 0xFF; // the last padding byte of row 0
    let p = dir.path().join("gap.bin");
    std::fs::write(&p, &gap).unwrap();
    let env = Stub::default().region('K', 1, p.display().to_string(), ptr_arg(&e, 0, o.index), 0);
    for r in repros_of(dir.path(), &s) {
        let (code, out) = r.run(&["--no-determinism"], &env.env);
        let want = format!("1 bytes in the stride gaps of o were overwritten (write between rows); first at stride gap byte {}", row - 1);
        assert!(code == 1 && out.contains(&want), "{}: {out}", r.lang());
    }
}

#[test]
fn emit_host_programs_without_a_reference_judge_memory_only() {
    // attention_f64 has no reference and starts its outputs uninitialised: nothing written
    // passes, a byte past an output's end does not.
    let dir = tempfile::tempdir().unwrap();
    let s = attention_f64();
    let e = expected(&s);
    let o = e.kernel().plan.tensor("ref_o").unwrap();
    let past = dir.path().join("past.bin");
    std::fs::write(&past, [0x42]).unwrap();
    let env = Stub::default().region('K', 1, past.display().to_string(), ptr_arg(&e, 0, o.index), o.span_bytes as i64);
    for r in repros_of(dir.path(), &s) {
        let (code, out) = r.run(&[], &[]);
        assert!(code == 0 && out.contains("RESULT: PASS"), "{}: {out}", r.lang());
        let (code, out) = r.run(&["--no-determinism"], &env.env);
        assert!(code == 1 && out.contains("1 bytes after the end of ref_o were overwritten, up to 1 bytes past its last byte"), "{}: {out}", r.lang());
    }
}

/// `x` as C's `%.3e` (and Python's `:.3e`) prints it (`1.234e-04`).
fn c_exp(x: f64) -> String {
    let s = format!("{x:.3e}");
    let (m, e) = s.split_once('e').unwrap();
    let e: i32 = e.parse().unwrap();
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

#[test]
fn emit_reference_kernel_runs_set_the_bound_the_library_computes() {
    let dir = tempfile::tempdir().unwrap();
    let s = row_scale();
    let e = expected(&s);
    let ReferenceSpec::Kernel(k) = &s.manifest.reference else { unreachable!() };
    // The baseline is 1e-3 off the gold in one element of y: y's bound is 2e-3 plus the floor.
    let gold = gold_values(&e);
    let mut baseline = gold.clone();
    baseline[0].1[4] += 1e-3;
    // The library reads the baseline run's outputs as their type holds them.
    let held = |i: usize, v: &[f64]| v.iter().map(|&x| cudafuzz::engine::data::round_to(x, e.programs[2].plan.tensors[i].dtype)).collect::<Vec<f64>>();
    let runs: Vec<(usize, Vec<f64>, Vec<f64>)> = gold.iter().zip(&baseline).map(|((i, g), (_, b))| (*i, g.clone(), held(*i, b))).collect();
    let refs = cudafuzz::engine::reference::kernel_expected(k.factor, k.floor, &e.kernel().plan, runs);
    let Rule::Bound(y) = refs.expected[0].rule else { unreachable!() };
    assert!((y.bound - 2e-3).abs() < 1e-5, "{y:?}");
    for r in repros_of(dir.path(), &s) {
        let lang = r.lang();
        let (code, out) = r.run(&[], &stub_for(dir.path(), "base", &e, &gold, Some((&gold, &baseline))).env);
        assert_eq!(code, 0, "{lang}: {out}");
        for x in &refs.expected {
            let Rule::Bound(t) = x.rule else { unreachable!() };
            let line = format!(
                "reference: {} may be {} from the gold: 2 x {} (baseline error) + {} (floor)",
                x.name,
                c_exp(t.bound),
                c_exp(t.err_lowp),
                c_exp(t.floor)
            );
            assert!(out.contains(&line), "{lang}: missing {line:?} in\n{out}");
        }
        // Inside the bound passes, outside fails (f32 keeps the planted errors exact enough).
        for (delta, pass) in [(1.5e-3, true), (3e-3, false)] {
            let mut kernel = gold.clone();
            kernel[0].1[7] += delta;
            let (code, out) = r.run(&["--no-determinism"], &stub_for(dir.path(), &format!("d{delta}"), &e, &kernel, Some((&gold, &baseline))).env);
            assert_eq!(code == 0, pass, "{lang} {delta}: {out}");
            if !pass {
                assert!(out.contains("FAIL numerical_error (reference): max |y - ref64| = 3.000e-03 exceeds 2 x 1.000e-03"), "{lang}: {out}");
            }
        }
        // A reference run that leaves its output unwritten, or fails, is not a finding: exit 2.
        let (code, out) = r.run(&[], &stub_for(dir.path(), "none", &e, &gold, Some((&[], &baseline))).env);
        assert!(code == 2 && out.contains("the reference kernel (gold run) left 15 of 15 elements of gold.y unwritten: fix the reference"), "{lang}: {out}");
        let env = stub_for(dir.path(), "sync", &e, &gold, Some((&gold, &baseline))).with("CFR_STUB_REF_SYNC_ERROR", "700".into());
        let (code, out) = r.run(&[], &env.env);
        let failed = out.contains("the reference kernel's gold run: ") && out.contains("Synchronize failed");
        assert!(code == 2 && failed && !out.contains("RESULT"), "{lang}: {out}");
    }
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
    // Without -o the repro goes into the output directory, never beside the seed.
    let out = dir.path().join("out");
    let out_s = out.to_str().unwrap();
    let out_cu = out.join("repro/fa8.cu");

    let o = cudafuzz(&["repro", seed_s, "--emit", "cu", "--out", out_s]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains(&format!("wrote {}", out_cu.display())), "says where: {text}");
    assert!(!dir.path().join("fa8.cu").exists(), "nothing written beside the seed");
    assert!(text.contains("nvcc -arch=native -lineinfo -o fa8 fa8.cu") && text.contains("./fa8"), "{text}");
    let first = std::fs::read_to_string(&out_cu).unwrap();
    assert!(first.contains("(const void*)fa_s512_fwd"));

    std::fs::write(&out_cu, "keep me").unwrap();
    let o = cudafuzz(&["repro", seed_s, "--emit", "cu", "--out", out_s]);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::USAGE));
    assert!(String::from_utf8_lossy(&o.stderr).contains("exists; pass --force"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&out_cu).unwrap(), "keep me");
    let o = cudafuzz(&["repro", seed_s, "--emit", "cu", "--force", "--out", out_s]);
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
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::USAGE));
    let o = cudafuzz(&["repro", seed_s, "-o", "x.cu"]);
    assert_eq!(o.status.code(), Some(cudafuzz::core::exit::USAGE), "-o needs --emit");
}
