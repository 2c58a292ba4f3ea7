//! The code under test launched for a case ([`Launcher`]), waited for or left queued, and how
//! a run stops the case ([`Stop`]): a fault, a refused launch, a Python target's exception.

use super::error::EngineError;
use crate::core::finding::{Finding, FindingKind, Oracle};
use crate::core::manifest::{Manifest, ResolvedLaunch};
use crate::core::plan::Plan;
use crate::core::target::ResolvedCall;
use crate::engine::arena::device::DeviceArena;
use crate::engine::arena::staging::Staging;
use crate::engine::arena::HostImage;
use crate::engine::gpu::CudaStatus;
use crate::engine::launch::{self, LaunchRejection, Module};
use crate::engine::oracle::Judged;

/// How the code under test is launched for a case (`crate::core::target`).
pub(super) enum Launcher<'a> {
    /// A loaded NVRTC kernel and its resolved launch, then a sequence's later launches.
    Kernel(&'a Module, &'a ResolvedLaunch, &'a [ResolvedLaunch]),
    /// A Python target's call, through the process's installed caller.
    Python {
        /// The manifest.
        manifest: &'a Manifest,
        /// The call resolved for the case.
        call: &'a ResolvedCall,
        /// The device the views are on.
        ordinal: i32,
    },
}

/// Why a run of the code under test stopped the case.
pub(super) enum Stop {
    /// A finding, and whether it poisoned the context.
    Finding(Box<Finding>, bool),
    /// The harness could not call the target.
    Error(EngineError),
    /// The target refused the case (a Python target's own exception): its type and message.
    Rejected(String, String),
}

impl From<(Finding, bool)> for Stop {
    fn from((f, sticky): (Finding, bool)) -> Stop {
        Stop::Finding(Box::new(f), sticky)
    }
}

/// Launches once, synchronises and downloads everything; a CUDA error becomes a finding, with
/// whether it poisoned the context.
pub(super) fn run_once(launcher: &Launcher<'_>, arena: &DeviceArena, image: &HostImage, j: &Judged<'_>, staging: &mut Staging) -> Result<Vec<Vec<u8>>, Stop> {
    launch_and_wait(launcher, arena, image, j)?;
    Ok(arena.download(image, staging).map_err(|s| failed_after_launch(j, &s))?)
}

/// After the determinism run: downloads only the judged outputs, the allocations it compares
/// (the others were judged after the first run, and for a case whose stride gaps span gigabytes
/// a second whole download would double its cost). The others come back empty.
pub(super) fn judged_outputs(arena: &DeviceArena, image: &HostImage, j: &Judged<'_>, staging: &mut Staging) -> Result<Vec<Vec<u8>>, Stop> {
    let judged = judged_indices(j.plan);
    let got = arena.download_staged(image, &judged, staging).map_err(|s| failed_after_launch(j, &s))?;
    Ok(spread(j.plan.tensors.len(), &judged, got.into_iter().map(std::borrow::Cow::into_owned)))
}

/// The allocations of a plan's judged outputs, in roster order.
pub(super) fn judged_indices(plan: &Plan) -> Vec<usize> {
    plan.tensors.iter().filter(|t| t.role.is_judged()).map(|t| t.index).collect()
}

/// Per allocation of `n`: the bytes of those in `which` (in order), empty for the others (the
/// form [`judged_outputs`] gives).
pub(super) fn spread(n: usize, which: &[usize], bytes: impl Iterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new(); n];
    for (&i, b) in which.iter().zip(bytes) {
        out[i] = b;
    }
    out
}

pub(super) fn launch_and_wait(launcher: &Launcher<'_>, arena: &DeviceArena, image: &HostImage, j: &Judged<'_>) -> Result<(), Stop> {
    launch_queued(launcher, arena, image, j)?;
    match launcher {
        Launcher::Kernel(..) => Ok(crate::engine::gpu::synchronize().map_err(|s| failed_after_launch(j, &s))?),
        // Called and waited for.
        Launcher::Python { .. } => Ok(()),
    }
}

/// Launches the code under test on the null stream without waiting for it: a launch refused is
/// the finding; a fault shows at the next synchronisation ([`run_failed`]). A Python target is
/// called and waited for (its callable may use streams of its own).
pub(super) fn launch_queued(launcher: &Launcher<'_>, arena: &DeviceArena, image: &HostImage, j: &Judged<'_>) -> Result<(), Stop> {
    match launcher {
        Launcher::Kernel(module, resolved, steps) => {
            launch::launch(module, resolved, arena, image).map_err(|r| Stop::Finding(Box::new(rejection_finding(j, &r)), false))?;
            // A sequence's later kernels follow on the same stream; a launch one of them is
            // refused is that launch's finding, whatever the earlier ones did.
            for (i, s) in steps.iter().enumerate() {
                launch::launch_at(module, i + 1, s, arena, image).map_err(|r| Stop::Finding(Box::new(rejection_finding(j, &r)), false))?;
            }
            Ok(())
        }
        Launcher::Python { manifest, call, ordinal } => call_python(manifest, call, *ordinal, arena, image, j),
    }
}

/// A synchronisation after the code under test was launched failed with `s`: the run's finding.
pub(super) fn run_failed(j: &Judged<'_>, s: &CudaStatus) -> Stop {
    failed_after_launch(j, s).into()
}

/// Calls a Python target, then synchronises the whole context (the callable may have used
/// streams of its own). The context's state speaks first: a sticky error is the finding even
/// when the framework raised it too; then a CUDA error the framework raised; then any other
/// exception, which is the target refusing the case.
pub(super) fn call_python(manifest: &Manifest, call: &ResolvedCall, ordinal: i32, arena: &DeviceArena, image: &HostImage, j: &Judged<'_>) -> Result<(), Stop> {
    let views = launch::views::device_views(j.plan, image, |i| arena.data_ptr(image, i), launch::call::ViewDevice::Cuda(ordinal));
    let frame = launch::call::Call { manifest, views, call, lease: arena.lease() };
    let outcome = launch::call::with_caller(|c| c.call(&frame)).map_err(|log| Stop::Error(EngineError::Setup { manifest: manifest.path.clone(), log }))?;
    drop(frame);
    crate::engine::gpu::synchronize().map_err(|s| failed_after_launch(j, &s))?;
    let _ = launch::call::with_caller(|c| c.release());
    if let Some((kind, words, status)) = outcome.finding() {
        let mut f = j.finding(kind, Oracle::CudaStatus, words);
        f.cuda_error = status.map(|s| s.to_string());
        return Err(Stop::Finding(Box::new(f), false));
    }
    match outcome {
        launch::call::CallOutcome::Rejected { exception, message } => Err(Stop::Rejected(exception, message)),
        _ => Ok(()),
    }
}

/// A CUDA error after the launch as the run functions return it: the finding, and whether the
/// error poisoned the context.
pub(super) fn failed_after_launch(j: &Judged<'_>, s: &CudaStatus) -> (Finding, bool) {
    (status_finding(j, s, false), launch::is_sticky(s))
}

pub(super) fn status_finding(j: &Judged<'_>, s: &CudaStatus, at_launch: bool) -> Finding {
    let kind = launch::classify(s, at_launch);
    let mut f = j.finding(kind, Oracle::CudaStatus, format!("the kernel failed with {s}"));
    f.cuda_error = Some(s.to_string());
    f
}

pub(super) fn rejection_finding(j: &Judged<'_>, r: &LaunchRejection) -> Finding {
    match r {
        LaunchRejection::Cuda(s) => status_finding(j, s, true),
        LaunchRejection::SharedMemory { .. } => j.finding(FindingKind::LaunchRejected, Oracle::CudaStatus, r.to_string()),
    }
}
