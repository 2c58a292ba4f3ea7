//! The oracles on the device (issue 30, step 2): `kernels/harness/judge.cu` counts what the host
//! oracles look for, making the arena's initial contents again from the case, and a run is
//! judged on the host exactly when its counts say so. NVRTC builds the device side without a
//! GPU; on a GPU, runs of every shipped kernel's cases, each with one planted symptom (a
//! redzone, a gap, an input, a sentinel, a NaN, an error past the bound, a special value) or
//! none, are judged both ways, and the device must send a run to the host exactly when the
//! host oracles report it. Cases of the planted bugs then end the same with the device's
//! oracles as with the host's. Each test that needs NVRTC or a GPU skips with a printed reason
//! without one.

mod common;

use cudafuzz::core::plan::{for_each_offset, Plan};
use cudafuzz::engine::arena::{device::DeviceArena, sentinel_bits, HostImage};
use cudafuzz::engine::data;
use cudafuzz::engine::oracle::device::DeviceJudge;
use cudafuzz::engine::oracle::{check_memory, check_values, Judged};
use cudafuzz::engine::reference::{Expected, RefOutputs, Rule, Tolerance};

/// NVRTC builds the device oracles (no GPU needed).
#[test]
fn the_device_oracles_compile() {
    common::harness_compiles("judge.cu", "cf_j_memory");
}

/// The symptoms planted in a run's results, one per case in turn.
const SYMPTOMS: [&str; 10] =
    ["none", "redzone before", "redzone after", "gap", "input element", "sentinel left", "NaN", "past the bound", "special", "relative"];

/// A made-up run of `plan`: every written tensor holds its gold rounded into its type.
fn results(plan: &Plan, image: &HostImage, golds: &[Vec<f64>]) -> Vec<Vec<u8>> {
    let mut after = image.bytes.clone();
    for tp in plan.tensors.iter().filter(|t| t.role.is_written()) {
        let a = &image.layout.allocs[tp.index];
        let span = &mut after[tp.index][a.data_offset as usize..(a.data_offset + a.span_bytes) as usize];
        data::write_strided(&golds[tp.index], tp, span);
    }
    after
}

/// The first byte offset in `tp`'s span that no element covers.
fn a_gap(tp: &cudafuzz::core::plan::TensorPlan) -> Option<usize> {
    let mut covered = vec![false; tp.span_bytes as usize];
    for_each_offset(tp, |_, off| covered[off..off + tp.elem_bytes as usize].iter_mut().for_each(|c| *c = true));
    covered.iter().position(|c| !c)
}

/// Plants symptom `k` into `after` (and the gold and rule); says whether it found a place to.
fn plant(k: usize, plan: &Plan, image: &HostImage, after: &mut [Vec<u8>], golds: &mut [Vec<f64>], rules: &mut [Rule]) -> bool {
    let outputs: Vec<usize> = plan.tensors.iter().filter(|t| t.role.is_judged() && t.dtype.is_float() && t.numel > 0).map(|t| t.index).collect();
    let element0 = |i: usize| {
        image.layout.allocs[i].data_offset as usize + {
            let mut first = None;
            for_each_offset(&plan.tensors[i], |l, off| {
                if l == 0 {
                    first = Some(off)
                }
            });
            first.unwrap_or(0)
        }
    };
    let write0 = |after: &mut [Vec<u8>], i: usize, bits: u64| {
        let (at, eb) = (element0(i), plan.tensors[i].elem_bytes as usize);
        after[i][at..at + eb].copy_from_slice(&bits.to_le_bytes()[..eb]);
    };
    match SYMPTOMS[k] {
        "none" => true,
        "redzone before" => plan.tensors.iter().find(|t| image.layout.allocs[t.index].data_offset > 0).map(|t| after[t.index][0] ^= 0xff).is_some(),
        "redzone after" => plan
            .tensors
            .iter()
            .find(|t| image.layout.allocs[t.index].redzone_after > 0)
            .map(|t| {
                let last = after[t.index].len() - 1;
                after[t.index][last] ^= 0xff
            })
            .is_some(),
        "gap" => plan
            .tensors
            .iter()
            .find_map(|t| a_gap(t).map(|g| (t.index, g)))
            .map(|(i, g)| after[i][image.layout.allocs[i].data_offset as usize + g] ^= 0xff)
            .is_some(),
        "input element" => plan.tensors.iter().find(|t| !t.role.is_written() && t.numel > 0).map(|t| after[t.index][element0(t.index)] ^= 0xff).is_some(),
        "sentinel left" => plan
            .tensors
            .iter()
            .find(|t| t.role.is_written() && t.init.marks_unwritten() && t.numel > 0)
            .map(|t| write0(after, t.index, sentinel_bits(t.dtype)))
            .is_some(),
        "NaN" => outputs.first().map(|&i| write0(after, i, data::to_bits(f64::NAN, plan.tensors[i].dtype))).is_some(),
        "past the bound" => outputs
            .first()
            .map(|&i| {
                // 0.5 where the gold is 0.25: past a bound of 0.1 (every other element is within
                // half a unit in the last place of values below 4).
                golds[i][0] = 0.25;
                write0(after, i, data::to_bits(0.5, plan.tensors[i].dtype));
                rules[i] = Rule::Bound(Tolerance { factor: 2.0, err_lowp: 0.05, floor: 0.0, bound: 0.1 });
            })
            .is_some(),
        "special" => outputs.first().map(|&i| golds[i][0] = f64::INFINITY).is_some(),
        "relative" => outputs
            .first()
            .map(|&i| {
                golds[i][0] = 0.25;
                write0(after, i, data::to_bits(0.5, plan.tensors[i].dtype));
                rules[i] = Rule::Relative(0.1);
            })
            .is_some(),
        s => unreachable!("{s}"),
    }
}

/// On a GPU: for cases of every shipped kernel with each symptom planted in turn, the device
/// sends a run to the host exactly when the host oracles report it.
#[test]
fn the_device_sends_a_run_to_the_host_exactly_when_the_host_oracles_report_it() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    if common::lacks_gpu(false) {
        return;
    }
    let gpu = cudafuzz::engine::gpu::Gpu::open(0).expect("open the GPU");
    let mut judge = DeviceJudge::load(&gpu).unwrap_or_else(|e| panic!("{e}"));
    cudafuzz::engine::arena::device::pooled(true);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x10d6e);
    let (mut runs, mut planted, mut elements) = (0usize, [0usize; SYMPTOMS.len()], 0u64);
    for m in common::shipped() {
        for (k, case) in common::v2_cases(&m, 0x1d6e, 20) {
            let Ok(plan) = Plan::new(&case, &m) else { continue };
            if plan.reaches_past_int32() {
                continue;
            }
            let image = HostImage::build(&case, &plan, &data::generate(&case, &plan, &m));
            let recipes = data::recipes(&case, &plan, &m);
            let remade = |r: &data::Recipe| matches!(r, data::Recipe::Counter { .. } | data::Recipe::Constant(_));
            if (0..plan.tensors.len()).any(|i| !image.holds_whole(i) || !remade(&recipes[i])) {
                continue;
            }
            // Gold values a kernel would round into its type; a loose bound, unless a symptom
            // tightens it.
            let mut golds: Vec<Vec<f64>> = plan.tensors.iter().map(|t| (0..t.numel).map(|_| (rng.next_u32() as f64 / 4e9) * 8.0 - 4.0).collect()).collect();
            let mut rules: Vec<Rule> = vec![Rule::Bound(Tolerance { factor: 2.0, err_lowp: 0.5, floor: 0.0, bound: 1.0 }); plan.tensors.len()];
            let symptom = k % SYMPTOMS.len();
            let mut after = results(&plan, &image, &golds);
            if !plant(symptom, &plan, &image, &mut after, &mut golds, &mut rules) {
                continue;
            }
            let refs = RefOutputs {
                expected: plan
                    .tensors
                    .iter()
                    .filter(|t| t.role.is_judged())
                    .map(|t| Expected { index: t.index, name: t.name.clone(), gold: golds[t.index].clone(), rule: rules[t.index] })
                    .collect(),
            };
            let label = format!("{}: {}: {}", m.name, case.summary(), SYMPTOMS[symptom]);
            let judged = Judged { case: &case, plan: &plan, kernel: &m.name, inside_contract: true };
            let mut host = check_memory(&judged, &image, &after);
            host.extend(check_values(&judged, &image, &after, &refs));

            let now = DeviceArena::upload(&HostImage { bytes: after.clone(), ..image.clone() }).unwrap();
            judge.begin(plan.tensors.len()).unwrap();
            let bases: Vec<u64> = now.allocs.iter().map(|&(ptr, _)| ptr).collect();
            assert!(judge.memory(&plan, &image.layout.allocs, &bases, &recipes).unwrap());
            let golds_of: Vec<&[f64]> = refs.expected.iter().map(|e| e.gold.as_slice()).collect();
            let staged = judge.stage_gold(&golds_of).unwrap();
            for (e, g) in refs.expected.iter().zip(staged) {
                let data = now.allocs[e.index].0 + image.layout.allocs[e.index].data_offset;
                judge.values(&plan.tensors[e.index], data, g, e.gold.len() as u64, &e.rule).unwrap();
                elements += e.gold.len() as u64;
            }
            let summary = judge.read().unwrap();
            assert_eq!(summary.needs_host(&plan), !host.is_empty(), "{label}: device counts {:?}, host findings {host:#?}", summary.tensors);
            assert_eq!(host.is_empty(), symptom == 0, "{label}: the planted symptom is a host finding: {host:#?}");

            runs += 1;
            planted[symptom] += 1;
        }
    }
    eprintln!("device oracles: {runs} runs, {elements} judged elements; symptoms planted: {:?}", SYMPTOMS.iter().zip(planted).collect::<Vec<_>>());
    assert!(runs > 100 && planted.iter().all(|&n| n > 0), "{runs} runs, symptoms {planted:?}");
}

/// Workers on GPU 0 with the built-in ops' GPU references, started with the data path `path`
/// (`CUDAFUZZ_DATA_PATH`, which workers inherit): `fill` judges on the host, `device` there.
fn workers(path: &str) -> cudafuzz::run::supervisor::Supervisor {
    use cudafuzz::run::supervisor::{Supervisor, SupervisorConfig};
    std::env::set_var("CUDAFUZZ_DATA_PATH", path);
    let journal = std::env::temp_dir().join(format!("cudafuzz-test-journal-{}-{path}.jsonl", std::process::id()));
    let sup = Supervisor::new(SupervisorConfig {
        exe: common::exe(),
        gpu: 0,
        reference_dir: Some(common::root().join("kernels/reference")),
        journal: Some(journal),
        stop: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        sanitizer: None,
    })
    .unwrap();
    std::env::remove_var("CUDAFUZZ_DATA_PATH");
    sup
}

/// On a GPU: generated cases of every planted bug (`kernels/mutants`) and of the testing kernels
/// (`kernels/testing`: planted bugs and the correct attention kernel), run by workers that judge on the device and by workers that judge on the
/// host, end the same way with the same findings, detail included. A race's findings vary from
/// run to run in their counts and first elements: where either side reports a race
/// (nondeterminism), or the host's own verdict changes when the case runs again, only the kinds
/// of finding and their tensors are compared, and the case is counted as racy. A kernel that
/// reads or writes past its tensors (a NaN leak: it read the canary; a redzone or gap
/// overwritten) may reach past its arena too, into memory that neither path controls and that
/// each path's references and oracles use in their own order between the two runs of a case:
/// whether its second run reads the same there is not a property of the path, so a
/// nondeterminism finding is left out of such a case's kinds.
#[test]
fn runs_judged_on_the_device_end_as_runs_judged_on_the_host() {
    use cudafuzz::core::finding::FindingKind;
    use cudafuzz::core::verdict::{Outcome, RunOptions};
    if common::lacks_gpu(false) {
        return;
    }
    // What a race's findings keep from run to run: their kinds, oracles and tensors.
    let has = |o: &Outcome, kind: FindingKind| matches!(o, Outcome::Fail { findings } if findings.iter().any(|f| f.kind == kind));
    let kinds = |o: &Outcome, outside: bool| match o {
        Outcome::Fail { findings } => findings
            .iter()
            .filter(|f| !(outside && f.kind == FindingKind::Nondeterminism))
            .map(|f| format!("{:?} {:?} {:?}", f.kind, f.oracle, f.tensor))
            .collect::<std::collections::BTreeSet<_>>(),
        other => std::iter::once(format!("{other:?}")).collect(),
    };
    let (mut host, mut device) = (workers("fill"), workers("device"));
    // The planted bugs, and the testing kernels but the one that hangs (its cases only time out).
    let planted = |m: &cudafuzz::core::manifest::Manifest| {
        let path = m.path.to_string_lossy();
        path.contains("/mutants/") || (path.contains("/testing/") && !path.ends_with("hang.toml"))
    };
    let kernels: Vec<_> = common::shipped().into_iter().filter(planted).collect();
    let (mut same, mut failing, mut racy, mut outside) = (0usize, 0usize, 0usize, 0usize);
    for m in &kernels {
        let ctx = cudafuzz::core::generate::DecodeContext::new(m);
        let timeout = std::time::Duration::from_millis(m.launch.timeout_ms.unwrap_or(10_000));
        for i in 0..6u64 {
            let mut case = m.bind(cudafuzz::run::campaign::generated_case(&ctx, 0x1d6e, i));
            case.data = cudafuzz::core::case::DataScheme::V2;
            let opts = RunOptions::default();
            let on_host = host.run(&case, m, &opts, timeout).unwrap();
            let on_device = device.run(&case, m, &opts, timeout).unwrap();
            let raced = |o: &Outcome| has(o, FindingKind::Nondeterminism);
            if on_host.outcome != on_device.outcome {
                let unstable = raced(&on_host.outcome) || raced(&on_device.outcome) || host.run(&case, m, &opts, timeout).unwrap().outcome != on_host.outcome;
                let outside_tensors = |o: &Outcome| has(o, FindingKind::NanLeak) || has(o, FindingKind::CanaryDamage);
                let read_outside = outside_tensors(&on_host.outcome) && outside_tensors(&on_device.outcome);
                assert!(
                    unstable && kinds(&on_host.outcome, read_outside) == kinds(&on_device.outcome, read_outside),
                    "{}: {}: judged on the host {:#?}\non the device {:#?}",
                    m.name,
                    case.summary(),
                    on_host.outcome,
                    on_device.outcome
                );
                if read_outside && kinds(&on_host.outcome, false) != kinds(&on_device.outcome, false) {
                    outside += 1;
                } else {
                    racy += 1;
                }
                continue;
            }
            failing += usize::from(matches!(on_host.outcome, Outcome::Fail { .. }));
            same += 1;
        }
    }
    eprintln!(
        "{same} cases of {} kernels end the same judged on the device and on the host ({failing} with findings); {racy} racy cases with the same kinds of finding; {outside} cases reaching past their tensors that differ only in a nondeterminism finding",
        kernels.len()
    );
    assert!(same > 100 && failing > 20, "{same} cases, {failing} failing");
}
