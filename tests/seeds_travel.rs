//! Seeds that travel (issue 26 step 4): a seed names its kernel so that it replays from any
//! directory. A shipped kernel is named by name; a user's manifest by its path relative to the
//! seed plus its name and hash. Old seeds, which hold the path the kernel was loaded by, keep
//! replaying from anywhere; no command writes this machine's absolute path into a seed.
//! Host-side only: `case check` and `repro --emit` need no GPU (replay on a GPU is in
//! ci/gpu-check.sh).

use std::path::{Path, PathBuf};
use std::process::Output;

use cudafuzz::core::corpus::{self, Seed};
use cudafuzz::core::exit;

mod common;

/// The binary run in `cwd`, with no kernel forced through the environment.
fn cudafuzz_in(cwd: &Path, args: &[&str]) -> Output {
    common::cudafuzz_in(cwd, args, &[])
}

fn text(o: &Output) -> String {
    common::output_text(o)
}

/// A copy of the shipped silu_and_mul kernel (manifest, source, reference) in `dir/k/`, as a
/// user's own kernel outside the repository, under the manifest name `name`.
fn user_kernel(dir: &Path, name: &str) -> PathBuf {
    common::copy_silu(&dir.join("k"), "mine.toml", &|t| t.replace("name = \"silu_and_mul\"", &format!("name = \"{name}\"")))
}

/// `case example` for `kernel`, run in `cwd` and saved as `cwd/name`.
fn example_in(cwd: &Path, kernel: &str, name: &str) -> (PathBuf, String) {
    let o = cudafuzz_in(cwd, &["case", "example", "--kernel", kernel]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    let json = String::from_utf8(o.stdout).unwrap();
    let path = cwd.join(name);
    std::fs::write(&path, &json).unwrap();
    (path, json)
}

fn no_machine_path(json: &str, tmp: &Path) {
    assert!(!json.contains(&tmp.display().to_string()), "a machine path in the seed:\n{json}");
    assert!(!json.contains(env!("CARGO_MANIFEST_DIR")), "the source tree's path in the seed:\n{json}");
}

#[test]
fn a_shipped_kernel_is_named_by_name_and_replays_from_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (seed, json) = example_in(&a, "simple_attn", "s.json");
    no_machine_path(&json, tmp.path());
    let (loaded, _) = corpus::load(&seed, None).unwrap();
    assert_eq!(loaded.case.kernel, "simple_attn");
    assert_eq!(loaded.manifest, None, "a shipped kernel carries no hash");
    let o = cudafuzz_in(&b, &["case", "check", seed.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(text(&o).contains("contract of simple_attn: inside"), "{}", text(&o));
    // The standalone repro from yet another folder, to stdout.
    let o = cudafuzz_in(tmp.path(), &["repro", seed.to_str().unwrap(), "--emit", "cu", "-o", "-"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("// cudafuzz standalone repro"));
}

#[test]
fn a_user_kernel_is_named_relative_to_the_seed_with_its_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = user_kernel(tmp.path(), "my_silu");
    let seeds = tmp.path().join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    let (seed, json) = example_in(&seeds, manifest.to_str().unwrap(), "mine.json");
    no_machine_path(&json, tmp.path());
    let (loaded, _) = corpus::load(&seed, None).unwrap();
    assert_eq!(loaded.case.kernel, "../k/mine.toml");
    let origin = loaded.manifest.clone().expect("a user kernel carries its name and hash");
    assert_eq!(origin.name, "my_silu");
    assert_eq!(Some(origin.sha256.clone()), cudafuzz::core::registry::file_sha256(&manifest));

    // From any directory, with no warning.
    let elsewhere = tempfile::tempdir().unwrap();
    let o = cudafuzz_in(elsewhere.path(), &["case", "check", seed.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(text(&o).contains("contract of my_silu: inside") && !text(&o).contains("warning"), "{}", text(&o));
    let o = cudafuzz_in(elsewhere.path(), &["repro", seed.to_str().unwrap(), "--emit", "python", "-o", "-"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));

    // Moved two folders down (as a run moves a bug's examples into <bug>/examples/): the folders
    // above the seed are searched too.
    let deeper = seeds.join("B0123456789/examples");
    std::fs::create_dir_all(&deeper).unwrap();
    let moved = deeper.join("mine.json");
    std::fs::rename(&seed, &moved).unwrap();
    let o = cudafuzz_in(elsewhere.path(), &["case", "check", moved.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));

    // The manifest changed since: a warning, and the seed still replays.
    let edited = std::fs::read_to_string(&manifest).unwrap() + "\n# edited after the seed was saved\n";
    std::fs::write(&manifest, edited).unwrap();
    let o = cudafuzz_in(elsewhere.path(), &["case", "check", moved.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(text(&o).contains("warning") && text(&o).contains("changed since the seed was saved") && text(&o).contains("mine.json"), "{}", text(&o));
}

#[test]
fn a_user_kernel_sharing_a_shipped_name_is_never_replaced_by_the_shipped_one() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = user_kernel(tmp.path(), "silu_and_mul");
    let (seed, _) = example_in(tmp.path(), manifest.to_str().unwrap(), "mine.json");
    std::fs::remove_file(&manifest).unwrap();
    let o = cudafuzz_in(tmp.path(), &["case", "check", seed.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::USAGE), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("mine.json") && t.contains("a shipped kernel is also named `silu_and_mul`") && t.contains("--kernel"), "{t}");
    // Told where the manifest now is, it replays.
    let moved = user_kernel(&tmp.path().join("moved"), "silu_and_mul");
    let o = cudafuzz_in(tmp.path(), &["case", "check", seed.to_str().unwrap(), "--kernel", moved.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
}

#[test]
fn kernel_overrides_the_seed_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (seed, _) = example_in(tmp.path(), "simple_attn", "s.json");
    let o = cudafuzz_in(tmp.path(), &["case", "check", seed.to_str().unwrap(), "--kernel", "vec_load_q"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(text(&o).contains("contract of vec_load_q") && text(&o).contains("the seed was saved for simple_attn"), "{}", text(&o));
}

#[test]
fn seeds_saved_before_kernels_were_named_this_way_replay_from_anywhere() {
    let elsewhere = tempfile::tempdir().unwrap();
    let dir = common::root().join("seeds/expected");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let (seed, _): (Seed, _) = corpus::load(&path, None).unwrap();
        assert!(seed.case.kernel.starts_with("kernels/"), "an old seed naming its kernel by the source tree's path: {}", seed.case.kernel);
        let o = cudafuzz_in(elsewhere.path(), &["case", "check", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(exit::OK), "{}: {}", path.display(), text(&o));
        checked += 1;
    }
    assert!(checked > 0, "the committed seeds were found");
}

#[test]
fn a_campaign_saves_a_user_kernels_seed_relative_to_its_new_seeds_folder() {
    use cudafuzz::core::finding::{Finding, FindingKind, Oracle};
    let tmp = tempfile::tempdir().unwrap();
    let manifest = cudafuzz::core::manifest::Manifest::load(&user_kernel(tmp.path(), "my_silu")).unwrap();
    let case = cudafuzz::core::generate::example(&manifest);
    // The keeper's folder does not exist yet, as at a campaign's first finding.
    let mut keeper = cudafuzz::SeedKeeper::new(tmp.path().join("out/seeds"));
    let kept = keeper.keep(&manifest, &case, &Finding::new(FindingKind::MisalignedAddress, Oracle::CudaStatus, "my_silu", String::new())).unwrap();
    let path = match kept {
        cudafuzz::run::campaign::Kept::New(p) => p,
        other => panic!("{other:?}"),
    };
    let (seed, _) = corpus::load(&path, None).unwrap();
    assert_eq!(seed.case.kernel, "../../k/mine.toml");
    assert_eq!(seed.manifest.as_ref().map(|o| o.name.as_str()), Some("my_silu"));
    no_machine_path(&std::fs::read_to_string(&path).unwrap(), tmp.path());
}
