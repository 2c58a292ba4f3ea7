//! What a repro embeds, computed on the host with the library's own code: [`prepare`] turns a
//! case into a [`Prepared`] one: its [`Program`]s (the kernel under test and, for a user
//! reference kernel, that kernel's gold and baseline runs), each with its arena image, launch and
//! compile defines, and the [`Judge`] of its outputs.

use std::collections::BTreeMap;

use super::{encode, inline_source, relative_display, EmitError, Encoded, InlinedSource, MAX_EMBED_BYTES};
use crate::core::case::{Case, Placement};
use crate::core::manifest::{ArgSpec, Manifest, ReferenceKernel, ReferenceSpec, ResolvedLaunch};
use crate::core::plan::{check_contract, ContractVerdict, Plan, TensorPlan};
use crate::engine::arena::{AllocLayout, HostImage};
use crate::engine::compile::{request_for, Arch};
use crate::engine::data::{self, Inputs};
use crate::engine::reference::{cpu_op_reference, RefOutputs, Rule};
use crate::engine::reference::{kernel_manifest, reference_case};
use crate::run::sanitizer::{padding_for, Tool};
use crate::run::supervisor::kernel_timeout;

/// Which kernel a [`Program`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramRole {
    /// The kernel under test, on the case's own layouts.
    Kernel,
    /// The user's reference kernel with every floating tensor in f64.
    Gold,
    /// The user's reference kernel at the case's precision.
    Baseline,
}

impl ProgramRole {
    /// `kernel`, `gold`, `baseline`.
    pub fn name(self) -> &'static str {
        match self {
            ProgramRole::Kernel => "kernel",
            ProgramRole::Gold => "gold",
            ProgramRole::Baseline => "baseline",
        }
    }

    /// What a repro puts before a tensor's name to name this program's allocation of it (`gold.o`):
    /// the kernel's allocations keep the bare names findings use.
    pub fn prefix(self) -> &'static str {
        match self {
            ProgramRole::Kernel => "",
            ProgramRole::Gold => "gold.",
            ProgramRole::Baseline => "baseline.",
        }
    }
}

/// One kernel as a repro runs it: its source, how it is compiled, its arena and its launch.
#[derive(Clone, Debug)]
pub struct Program {
    /// Which kernel this is.
    pub role: ProgramRole,
    /// Its entry point: an `extern "C"` name or a C++ name expression.
    pub entry: String,
    /// A prebuilt module's files (`{arch}` in them standing for the GPU's architecture, as
    /// written relative to where the repro was emitted) and the entry's symbol in them; `None`
    /// when the program is compiled from its source.
    pub prebuilt: Option<(Vec<String>, String)>,
    /// Its source with the project headers inlined.
    pub source: InlinedSource,
    /// The `-D` defines of the harness's compile, in order.
    pub defines: BTreeMap<String, String>,
    /// Extra compiler options of the manifest (or of its `[reference]`).
    pub options: Vec<String>,
    /// The case it plans: the case as it runs, or the reference run's dense copy.
    pub case: Case,
    /// Its plan.
    pub plan: Plan,
    /// The initial bytes of its allocations (one per tensor, roster order), held whole.
    pub image: HostImage,
    /// Each allocation's bytes, run-length coded.
    pub encoded: Vec<Encoded>,
    /// Grid, block, shared memory and arguments.
    pub launch: ResolvedLaunch,
    /// The argument list as declared (for the expressions shown next to each value).
    pub arg_specs: Vec<ArgSpec>,
    /// A launch sequence's later launches (`[[launch]]`), in order, on this program's
    /// allocations; empty for one launch and for the reference runs.
    pub steps: Vec<Step>,
}

/// A later launch of the kernel's launch sequence: another entry of the same module.
#[derive(Clone, Debug)]
pub struct Step {
    /// Its `extern "C"` entry.
    pub entry: String,
    /// Its launch for the case.
    pub launch: ResolvedLaunch,
    /// Its argument list as declared.
    pub arg_specs: Vec<ArgSpec>,
}

impl Program {
    /// Plans nothing itself: lays out `case` (planned as `plan` against `m`) with the drawn
    /// `inputs`, resolves the launch and the compile request.
    fn new(role: ProgramRole, m: &Manifest, case: Case, plan: Plan, inputs: &Inputs) -> Result<Program, EmitError> {
        let launch = m.resolve(&plan.vars).map_err(|source| EmitError::Manifest { manifest: m.path.clone(), source: Box::new(source) })?;
        let image = HostImage::build(&case, &plan, inputs).held_whole();
        let encoded = image.bytes.iter().map(|b| encode(b)).collect();
        if role == ProgramRole::Kernel && m.target.python().is_some() {
            // A Python target: nothing to compile, its call is the repro's TARGET.
            let module = InlinedSource { text: String::new(), files: vec![relative_display(&m.source)], guards: Vec::new(), kept_includes: Vec::new() };
            return Ok(Program {
                role,
                entry: m.entry.clone(),
                prebuilt: None,
                source: module,
                defines: BTreeMap::new(),
                options: Vec::new(),
                arg_specs: Vec::new(),
                case,
                plan,
                image,
                encoded,
                launch,
                steps: Vec::new(),
            });
        }
        // The arch is irrelevant here: only the defines and options are used.
        let req = request_for(m, &plan.vars.params, case.dtype, Arch::new(9, 0), &BTreeMap::new());
        let resolved = m.resolve_steps(&plan.vars).map_err(|source| EmitError::Manifest { manifest: m.path.clone(), source: Box::new(source) })?;
        let steps = m.steps.iter().zip(resolved).map(|(s, launch)| Step { entry: s.entry.clone(), launch, arg_specs: s.launch.args.clone() }).collect();
        let prebuilt = match (&m.build, role) {
            (crate::core::target::Build::Prebuilt(paths), ProgramRole::Kernel) => Some(prebuilt_module(m, paths, &req.entry)?),
            _ => None,
        };
        Ok(Program {
            role,
            entry: req.entry.clone(),
            prebuilt,
            source: inline_source(&m.source, &m.options)?,
            defines: req.defines,
            options: req.options,
            arg_specs: m.launch.args.clone(),
            case,
            plan,
            image,
            encoded,
            launch,
            steps,
        })
    }

    /// The repro's name of allocation `i` (`o`, `gold.o`).
    pub fn alloc_name(&self, i: usize) -> String {
        format!("{}{}", self.role.prefix(), self.plan.tensors[i].name)
    }

    /// Literal bytes of its images.
    fn literal_bytes(&self) -> u64 {
        self.encoded.iter().map(|e| e.literal.len() as u64).sum()
    }
}

/// What judges the kernel's outputs.
#[derive(Clone, Debug)]
pub enum Judge {
    /// No reference: CUDA status, memory oracles and determinism only.
    None,
    /// A built-in op's fp64 gold and rules, computed here and embedded.
    Host(RefOutputs),
    /// The user's reference kernel: the repro runs [`Prepared::programs`] 1 (gold) and 2
    /// (baseline) and bounds each output as [`crate::engine::reference::kernel_expected`] does.
    Kernel {
        /// How many times the baseline's error the kernel may have.
        factor: f64,
        /// The manifest's floor; `None`: `4 · u · max |gold|`.
        floor: Option<f64>,
        /// The judged outputs' roster positions (outputs and in-outs, in roster order).
        outputs: Vec<usize>,
    },
}

/// Everything an emitter prints, computed on the host with the library's own code.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Whether the case lies inside the manifest's contract.
    pub contract: ContractVerdict,
    /// The kernel label findings use (`name[P=V]`).
    pub kernel_label: String,
    /// The manifest's path, as given.
    pub manifest_path: String,
    /// The kernel under test first, then (for a user reference kernel) its gold and baseline
    /// runs. Allocations are numbered across programs in this order.
    pub programs: Vec<Program>,
    /// What judges the outputs.
    pub judge: Judge,
    /// The watchdog in milliseconds (the manifest's, else the harness default).
    pub timeout_ms: u64,
    /// The sanitizer tool the repro is meant for.
    pub tool: Option<Tool>,
    /// memcheck's `--padding`, sized as the harness sizes it.
    pub padding: u64,
    /// A Python target's call: the target and its arguments resolved for the case.
    pub call: Option<(crate::core::target::PythonTarget, crate::core::target::ResolvedCall)>,
}

impl Prepared {
    /// The kernel under test.
    pub fn kernel(&self) -> &Program {
        &self.programs[0]
    }

    /// The repro's index of program `p`'s first allocation.
    pub fn alloc_base(&self, p: usize) -> usize {
        self.programs[..p].iter().map(|g| g.plan.tensors.len()).sum()
    }

    /// Literal bytes the repro embeds: every image's literal runs plus the embedded gold.
    pub fn embedded_bytes(&self) -> u64 {
        self.programs.iter().map(Program::literal_bytes).sum::<u64>() + self.gold_bytes().len() as u64
    }

    /// The embedded fp64 gold of a built-in op, every judged output's in turn, as little-endian
    /// doubles (empty for the other judges).
    pub fn gold_bytes(&self) -> Vec<u8> {
        match &self.judge {
            Judge::Host(refs) => refs.expected.iter().flat_map(|e| e.gold.iter().flat_map(|x| x.to_le_bytes())).collect(),
            _ => Vec::new(),
        }
    }

    /// The compute-sanitizer command line for `tool`, without the program.
    pub fn sanitizer_command(&self, tool: Tool) -> String {
        match tool {
            Tool::Memcheck => format!("compute-sanitizer --tool memcheck --padding={}", self.padding),
            Tool::Racecheck => "compute-sanitizer --tool racecheck --racecheck-report=analysis".to_string(),
            t => format!("compute-sanitizer --tool {}", t.name()),
        }
    }
}

/// One allocation as both emitted programs declare it; allocations are numbered across
/// programs ([`Prepared::alloc_base`]).
#[derive(Clone, Debug)]
pub struct AllocRow<'a> {
    /// The program it belongs to (its index in [`Prepared::programs`]).
    pub program: usize,
    /// The repro's name of it (`o`, `gold.o`).
    pub name: String,
    /// The tensor it holds.
    pub tensor: &'a TensorPlan,
    /// Where the tensor sits in it.
    pub layout: &'a AllocLayout,
    /// Its initial bytes.
    pub bytes: &'a [u8],
    /// Those bytes, run-length coded.
    pub encoded: &'a Encoded,
    /// Whether its data span is left uninitialised on the device.
    pub uninit: bool,
    /// Whether it starts as the sentinel, so elements still holding it were never written.
    pub sentinel: bool,
    /// Its first run in the list of every allocation's runs.
    pub first_run: usize,
    /// Its first literal byte in the blob.
    pub literal_offset: usize,
}

/// One judged output as both emitted programs declare it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectRow {
    /// The kernel's allocation it is (its roster position).
    pub alloc: usize,
    /// 0: max |out − gold| ≤ bound; 1: each element within `rel · max(1, |gold|)`.
    pub rule: u32,
    /// The reference runs' allocations holding its gold and baseline; `None`: the gold is
    /// embedded at `gold_offset`.
    pub runs: Option<(usize, usize)>,
    /// The embedded gold's first byte in the blob (after every literal run).
    pub gold_offset: usize,
    /// Embedded gold, rule 0: factor, same-precision error, floor, bound; rule 1: rel.
    /// Reference runs: factor, floor (NaN: `4 · u · max |gold|`), u.
    pub numbers: [f64; 4],
    /// What the numbers say, for a comment.
    pub note: String,
}

impl Prepared {
    /// Every allocation of every program, in the repro's order.
    pub fn alloc_rows(&self) -> Vec<AllocRow<'_>> {
        let (mut first_run, mut literal_offset) = (0usize, 0usize);
        let mut rows = Vec::new();
        for (program, g) in self.programs.iter().enumerate() {
            for (i, tensor) in g.plan.tensors.iter().enumerate() {
                let encoded = &g.encoded[i];
                rows.push(AllocRow {
                    program,
                    name: g.alloc_name(i),
                    tensor,
                    layout: &g.image.layout.allocs[i],
                    bytes: &g.image.bytes[i],
                    encoded,
                    uninit: g.image.data_uninit[i],
                    sentinel: tensor.role.is_written() && tensor.init.marks_unwritten(),
                    first_run,
                    literal_offset,
                });
                first_run += encoded.runs.len();
                literal_offset += encoded.literal.len();
            }
        }
        rows
    }

    /// Every judged output with its rule (see [`Judge`]).
    pub fn expect_rows(&self) -> Vec<ExpectRow> {
        match &self.judge {
            Judge::None => Vec::new(),
            Judge::Host(refs) => {
                let mut gold_offset = self.programs.iter().map(Program::literal_bytes).sum::<u64>() as usize;
                let mut rows = Vec::new();
                for e in &refs.expected {
                    let (rule, numbers, note) = match e.rule {
                        Rule::Bound(t) => (
                            0,
                            [t.factor, t.err_lowp, t.floor, t.bound],
                            format!("max |out - gold| <= {} x {:e} + {:e} = {:e}", t.factor, t.err_lowp, t.floor, t.bound),
                        ),
                        Rule::Relative(rel) => (1, [rel, 0.0, 0.0, 0.0], format!("within {rel} x max(1, |gold|)")),
                    };
                    rows.push(ExpectRow { alloc: e.index, rule, runs: None, gold_offset, numbers, note: format!("{}: {note}", e.name) });
                    gold_offset += 8 * e.gold.len();
                }
                rows
            }
            Judge::Kernel { factor, floor, outputs } => {
                let (gold, baseline) = (self.alloc_base(1), self.alloc_base(2));
                let shown = floor.map_or("4 u max |gold|".to_string(), |f| format!("{f:e}"));
                outputs
                    .iter()
                    .map(|&i| {
                        let tp = &self.kernel().plan.tensors[i];
                        let u = crate::engine::reference::floor_roundoff(tp.dtype);
                        let note = format!("{}: factor {factor}, floor {shown}, u {u:e}", tp.name);
                        ExpectRow {
                            alloc: i,
                            rule: 0,
                            runs: Some((gold + i, baseline + i)),
                            gold_offset: 0,
                            numbers: [*factor, floor.unwrap_or(f64::NAN), u, 0.0],
                            note,
                        }
                    })
                    .collect()
            }
        }
    }
}

/// Builds everything a repro embeds for `case` against `manifest`, for the sanitizer `tool`.
pub fn prepare(case: &Case, manifest: &Manifest, tool: Option<Tool>) -> Result<Prepared, EmitError> {
    let mf = |source| EmitError::Manifest { manifest: manifest.path.clone(), source: Box::new(source) };
    let mut case = manifest.bind(case.clone());
    if tool == Some(Tool::Memcheck) {
        // As the harness runs memcheck (supervisor::batch::case_for_tool).
        case.placement = Placement::Exact;
    }
    manifest.check_params(&case.params).map_err(mf)?;
    let plan = Plan::new(&case, manifest).map_err(|source| EmitError::Case { kernel: manifest.name.clone(), source })?;
    let contract = check_contract(manifest, &case, &plan);
    let inputs = data::generate(&case, &plan, manifest);
    let judge = judge(manifest, &plan, &inputs)?;
    let largest = plan.tensors.iter().map(|t| t.span_bytes).max().unwrap_or(0);
    let kernel_label = crate::core::verdict::kernel_label(manifest, &case);
    let call = match manifest.target.python() {
        Some(t) => Some((t.clone(), manifest.resolve_call(&plan.vars).map_err(mf)?.expect("a Python target resolves a call"))),
        None => None,
    };
    let mut programs = vec![Program::new(ProgramRole::Kernel, manifest, case, plan, &inputs)?];
    if let ReferenceSpec::Kernel(k) = &manifest.reference {
        for role in [ProgramRole::Gold, ProgramRole::Baseline] {
            let program = reference_program(manifest, k, &programs[0].case, &inputs, role)?;
            programs.push(program);
        }
    }
    let prepared = Prepared {
        contract,
        kernel_label,
        manifest_path: relative_display(&manifest.path),
        programs,
        judge,
        timeout_ms: kernel_timeout(manifest, None).as_millis() as u64,
        tool,
        padding: padding_for(largest),
        call,
    };
    let bytes = prepared.embedded_bytes();
    if bytes > MAX_EMBED_BYTES {
        return Err(EmitError::TooLarge { bytes, limit: MAX_EMBED_BYTES });
    }
    Ok(prepared)
}

/// The judge of the manifest's reference for a planned case.
fn judge(m: &Manifest, plan: &Plan, inputs: &Inputs) -> Result<Judge, EmitError> {
    Ok(match &m.reference {
        ReferenceSpec::None => Judge::None,
        ReferenceSpec::Op { op, .. } => {
            let refs = cpu_op_reference(m, plan, inputs).expect("an op reference").map_err(|e| EmitError::Reference(format!("{}: {op}: {e}", m.name)))?;
            Judge::Host(refs)
        }
        ReferenceSpec::Kernel(k) => {
            Judge::Kernel { factor: k.factor, floor: k.floor, outputs: plan.tensors.iter().filter(|t| t.role.is_judged()).map(|t| t.index).collect() }
        }
        ReferenceSpec::Python(r) => return Err(EmitError::PythonReference { manifest: m.path.clone(), callable: r.call.callable.to_string() }),
    })
}

/// One run of the user's reference kernel, laid out as the worker lays it out: the manifest and
/// case of [`kernel_manifest`] and [`reference_case`], reading the case's drawn values.
fn reference_program(m: &Manifest, k: &ReferenceKernel, case: &Case, inputs: &Inputs, role: ProgramRole) -> Result<Program, EmitError> {
    let gold = role == ProgramRole::Gold;
    let rm = kernel_manifest(m, k, gold);
    let rc = reference_case(case, &rm, gold);
    let rplan = Plan::new(&rc, &rm).map_err(|source| EmitError::Case { kernel: format!("{} (the reference kernel's {} run)", m.name, role.name()), source })?;
    Program::new(role, &rm, rc, rplan, inputs)
}

/// A prebuilt module's file patterns as a repro names them, and the entry's symbol, read from
/// the first file found for any architecture (a mangled name does not depend on it).
fn prebuilt_module(m: &Manifest, paths: &[std::path::PathBuf], entry: &str) -> Result<(Vec<String>, String), EmitError> {
    let no_module = |problem: String| EmitError::NoModule { manifest: m.path.clone(), problem };
    let archs = (5..=12u32).rev().flat_map(|major| (0..=9u32).rev().map(move |minor| Arch::new(major, minor)));
    let found = archs.filter_map(|a| crate::engine::compile::module::prebuilt_path(paths, a).ok()).next();
    let file = found.ok_or_else(|| {
        no_module(format!(
            "no prebuilt module exists: none of {} for any architecture",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let bytes = crate::core::userfile::read_module(&file).map_err(|e| no_module(format!("{}: cannot read: {e}", file.display())))?;
    let symbol = crate::engine::compile::module::find_symbol(&bytes, entry).map_err(|p| no_module(format!("{}: {p}", file.display())))?;
    let shown = paths
        .iter()
        .map(|p| {
            let text = p.to_string_lossy();
            let (head, tail) = text.split_once("{arch}").map(|(h, t)| (h.to_string(), format!("{{arch}}{t}"))).unwrap_or((text.to_string(), String::new()));
            let mut shown = super::relative_display(std::path::Path::new(&head));
            if head.ends_with('/') && !shown.ends_with('/') {
                shown.push('/');
            }
            format!("{shown}{tail}")
        })
        .collect();
    Ok((shown, symbol))
}
