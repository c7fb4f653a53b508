//! What the program engine refuses before a run: a node it cannot build, tenants it
//! cannot place, and programs with a phase no device of the node runs (kept apart from
//! the engine so that each rule and its reason read together).

use super::*;
use tessera_gpu::occupancy::occupancy;

/// Every rule, in order; the first broken one is the error (as a policy violation at
/// time 0 under `policy`'s label, how the engine reports what it cannot run).
pub(super) fn check(
    tenants: &[ProgramTenant],
    model: &NodeModel,
    policy: &str,
) -> Result<(), SimError> {
    let bad = |what: String| SimError::PolicyViolation { policy: policy.into(), at_ns: 0, what };
    let no_queue = matches!(model.device, Device::Queue(q) if q.ring == 0 || q.depth == 0);
    if model.cpu.cores == 0 || no_queue {
        return Err(bad("the node needs a core, and a queue device a ring and a queue".into()));
    }
    if let Some(t) = tenants.iter().find(|t| t.core >= model.cpu.cores) {
        return Err(bad(format!("a tenant pinned to core {} of {}", t.core, model.cpu.cores)));
    }
    let gpus = model.device.gpus();
    if let Some(t) = tenants.iter().find(|t| t.gpu >= gpus) {
        return Err(bad(format!("a tenant on GPU {} of {gpus}", t.gpu)));
    }
    // the memory books are one GPU's
    if gpus > 1
        && tenants.iter().any(|t| t.program.phases.iter().any(|p| matches!(p, Phase::Alloc(_))))
    {
        return Err(bad(format!("allocations on a device of {gpus} GPUs (memory is one GPU's)")));
    }
    // a round must take time, or the engine would loop at one instant
    let takes_time = |p: &Phase| match p {
        Phase::Cpu(work) => *work > Nanos::ZERO,
        Phase::Launch(_) | Phase::LaunchGrid { .. } => true,
        Phase::Kernel { alone, .. } | Phase::Shaped { alone, .. } => *alone > Nanos::ZERO,
        Phase::Sync | Phase::Drain | Phase::SleepShare(_) | Phase::Alloc(_) | Phase::Free(_) => {
            false
        }
    };
    if tenants.iter().any(|t| !t.program.phases.iter().any(takes_time)) {
        return Err(bad("a program whose round takes no time (no CPU work, no kernel)".into()));
    }
    // each kernel on a device that runs it: an intensity needs the fluid model, a
    // launch shape the block model, and the block model places only shapes
    let runs = |p: &Phase| match (p, model.device) {
        (Phase::Kernel { .. }, d) => d == Device::Shared,
        (Phase::Shaped { .. }, d) => matches!(d, Device::Blocks(_)),
        (Phase::Launch(_) | Phase::LaunchGrid { .. }, d) => !matches!(d, Device::Blocks(_)),
        _ => true,
    };
    if let Some(p) = tenants.iter().flat_map(|t| &t.program.phases).find(|p| !runs(p)) {
        return Err(bad(format!(
            "{p:?} on {:?}: a kernel with an intensity needs the shared device, one with \
             a launch shape the block device, which runs only those",
            model.device
        )));
    }
    if let Some(p) = tenants.iter().flat_map(|t| &t.program.phases).find(|p| match p {
        Phase::Kernel { intensity, .. } => !(*intensity > 0.0 && *intensity <= 1.0),
        Phase::Shaped { launch, .. } => launch.grid_blocks == 0,
        Phase::Alloc(b) => *b > model.gpu_memory,
        _ => false,
    }) {
        return Err(bad(format!("{p:?}: an intensity in (0, 1], an allocation the GPU holds")));
    }
    if model.admission == Admission::OnePerCore
        && tenants.iter().any(|t| t.program.rounds.is_none())
    {
        return Err(bad("one tenant per core admits programs that end (rounds)".into()));
    }
    if let Device::Blocks(b) = model.device {
        if b.gpus == 0 || b.limits.sms == 0 {
            return Err(bad(format!("a block device of {} GPUs of {} SMs", b.gpus, b.limits.sms)));
        }
        // a kernel none of whose blocks fits on an SM would never run
        if let Some(p) = tenants.iter().flat_map(|t| &t.program.phases).find(|p| {
            matches!(p, Phase::Shaped { launch, .. } if occupancy(launch, &b.limits).blocks_per_sm == 0)
        }) {
            return Err(bad(format!("{p:?}: no block of it fits on an SM of {:?}", b.limits)));
        }
    }
    // arrivals are pinned admission's; one per core starts tenants as cores free
    if model.admission == Admission::OnePerCore && tenants.iter().any(|t| t.arrive > Nanos::ZERO) {
        return Err(
            bad("an arrival time with one tenant per core (admitted as cores free)".into()),
        );
    }
    Ok(())
}
