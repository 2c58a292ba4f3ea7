//! A kernel and its manifest in a folder outside the repository compile (issue 26 step 5): the
//! shipped headers (`cudafuzz.cuh` and its companions) are built into the binary and handed to
//! NVRTC by name, a manifest's `include = [...]` adds the user's own header folders, and
//! `repro --emit cu` inlines both. NVRTC only; fuzzing such a kernel on a GPU is in
//! ci/gpu-check.sh.

use std::path::{Path, PathBuf};
use std::process::Output;

use cudafuzz::core::exit;

mod common;
use common::env::{have, Need};

fn cudafuzz_in(cwd: &Path, args: &[&str]) -> Output {
    common::cudafuzz_in(cwd, args, &[])
}

fn text(o: &Output) -> String {
    common::output_text(o)
}

/// `cudafuzz build --arch sm_90` of `manifest`, run in `dir` with a cache of its own (so it
/// really compiles), which must succeed.
fn build_in(dir: &Path, manifest: &Path) -> Output {
    let o = common::cudafuzz_in(dir, &["build", "--arch", "sm_90", "--kernel", manifest.to_str().unwrap()], &[("CUDAFUZZ_CACHE", &dir.join("cache"))]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    o
}

/// The shipped silu_and_mul kernel (which includes "cudafuzz.cuh") copied into `dir`, with no
/// `kernels/include` anywhere above it; `edit` changes the manifest text.
fn outside(dir: &Path, edit: &dyn Fn(String) -> String) -> PathBuf {
    common::copy_silu(dir, "my_silu.toml", &|t| edit(t.replace("name = \"silu_and_mul\"", "name = \"my_silu\"")))
}

#[test]
fn a_kernel_outside_the_repository_builds_with_the_built_in_headers() {
    if !have(Need::Nvrtc) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    assert!(!tmp.path().ancestors().any(|a| a.join("kernels/include/cudafuzz.cuh").is_file()), "the temp folder is outside any kernels tree");
    let manifest = outside(tmp.path(), &|t| t);
    let o = build_in(tmp.path(), &manifest);
    assert!(text(&o).contains(" 0 failed"), "{}", text(&o));
}

#[test]
fn a_manifest_include_adds_the_users_headers_and_emit_inlines_everything() {
    if !have(Need::Nvrtc) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let inc = tmp.path().join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    // The user's header, found only through `include`: the kernel does not compile without it.
    std::fs::write(inc.join("my_scale.cuh"), "#pragma once\n__device__ __forceinline__ float my_scale(float v) { return v; }\n").unwrap();
    let manifest = outside(tmp.path(), &|t| t.replace("options = []", "options = []\ninclude = [\"inc\"]"));
    let cu = tmp.path().join("silu_and_mul.cu");
    let kernel = std::fs::read_to_string(&cu).unwrap().replace("#include \"cudafuzz.cuh\"", "#include \"cudafuzz.cuh\"\n#include \"my_scale.cuh\"");
    std::fs::write(&cu, kernel).unwrap();
    build_in(tmp.path(), &manifest);

    // A seed of it, emitted as one standalone .cu: the user's header and the built-in ones are
    // inlined, nothing is left to find.
    let o = cudafuzz_in(tmp.path(), &["case", "example", "--kernel", manifest.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    let seed = tmp.path().join("seed.json");
    std::fs::write(&seed, &o.stdout).unwrap();
    let o = cudafuzz_in(tmp.path(), &["repro", seed.to_str().unwrap(), "--emit", "cu", "-o", "-"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    let emitted = String::from_utf8_lossy(&o.stdout);
    assert!(emitted.contains("inlined from inc/my_scale.cuh"), "the user's header is inlined");
    assert!(emitted.contains("inlined from <cudafuzz built-in>/cudafuzz.cuh"), "the built-in header is inlined");
    assert!(!emitted.lines().any(|l| l.trim_start().starts_with("#include \"")), "no quoted include is left");

    // A folder that is not there is a manifest error naming the key.
    let bad = outside(
        &{
            let d = tmp.path().join("bad");
            std::fs::create_dir_all(&d).unwrap();
            d
        },
        &|t| t.replace("options = []", "options = []\ninclude = [\"missing\"]"),
    );
    let o = cudafuzz_in(tmp.path(), &["case", "example", "--kernel", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{}", text(&o));
    assert!(text(&o).contains("include[0]") && text(&o).contains("not a directory"), "{}", text(&o));
}
