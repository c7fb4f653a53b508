//! The performance model of a GPU server, shared by the simulator and (in real time)
//! by the daemon's emulated executor.
//!
//! What this experiments need, calibrated from the Flexy paper:
//! - execution is non-preemptive and each GPU runs one task at a time, FIFO of
//!   launches (the Flexy testbed: four Quadro P1000, one CUDA context per task);
//! - a task's time is its measured work on the reference GPU, divided by the GPU's
//!   relative speed (1.0 for the reference);
//! - a reset makes the GPU unavailable for `reset_latency` (Flexy §II-C3: "resetting
//!   and reusing a GPU introduces approximately one second of idle time").

//!
//! For shared GPUs (see `tessera-gpu`): repartitioning takes `repartition_latency`
//! (gpu-lets §5: 10-15 s), a migration pauses the tenant's work for its
//! [`MigrationCost`], a power change takes `power_latency` to be acknowledged, and
//! energy follows the [`PowerModel`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tessera_core::{Nanos, Placement};
use tessera_gpu::migration::MigrationCost;
use tessera_gpu::partition::Interference;
use tessera_gpu::partition::REPARTITION_NS;
use tessera_gpu::power::PowerModel;

/// Flexy §II-C3: ~1 s measured for a reset and re-initialisation of a Quadro P1000.
pub const FLEXY_RESET_LATENCY: Nanos = Nanos::from_secs(1);

/// The performance model of one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerfModel {
    /// Time a GPU is unavailable after a reset.
    pub reset_latency: Nanos,
    /// Relative speed of every GPU against the reference GPU the work was measured on.
    pub speed: f64,
    /// Time from a repartition request to the new partitions being usable (the old
    /// ones keep serving meanwhile).
    pub repartition_latency: Nanos,
    /// What moving a tenant between GPUs costs.
    pub migration: MigrationCost,
    /// Time from a power-state request to its acknowledgement (an assumption: no paper
    /// measured it; zero means at once).
    pub power_latency: Nanos,
    /// Power draw by state, for energy.
    pub power: PowerModel,
    /// Measured latency profiles by kernel (gpu-lets' L(batch, partition)): a batch of
    /// a profiled kernel runs for the latency of the smallest profiled batch at least as
    /// large, at its partition's size, times the interference of what runs in the GPU's
    /// other partition when it starts (fixed for the batch); other kernels' batches cost
    /// the sum of their requests' work. Not part of any results file.
    #[serde(skip)]
    pub profiles: BTreeMap<u32, KernelProfile>,
    /// gpu-lets §4.4's interference coefficients for profiled kernels (none: no
    /// interference).
    #[serde(skip)]
    pub interference: Option<Interference>,
    /// A world for profiled kernels that is not the planner's: measured co-location
    /// slowdowns (the fit's factor where a pair was not measured) and each execution's
    /// measured spread (none: the profile's means and the fit alone).
    #[serde(skip)]
    pub world: Option<std::sync::Arc<crate::world::MeasuredWorld>>,
}

/// One kernel's measured profile, by (batch, partition %).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelProfile {
    /// Latency of one batch.
    pub latency: BTreeMap<(u32, u32), Nanos>,
    /// (L2, DRAM) utilization, fractions.
    pub utilization: BTreeMap<(u32, u32), (f64, f64)>,
}

impl KernelProfile {
    /// The smallest profiled batch of at least `batch` at `percent`, with its latency.
    pub fn batch_latency(&self, batch: u32, percent: u32) -> Option<(u32, Nanos)> {
        // keys are ordered by batch: the first at or after `batch` with this percent (a
        // walk from there, not of the whole table: the serving engine asks on every batch)
        self.latency
            .range((batch, 0)..)
            .find(|((_, p), _)| *p == percent)
            .map(|((b, _), l)| (*b, *l))
    }
}

impl Default for PerfModel {
    fn default() -> Self {
        PerfModel {
            reset_latency: FLEXY_RESET_LATENCY,
            speed: 1.0,
            repartition_latency: Nanos(REPARTITION_NS),
            migration: MigrationCost::PCIE3,
            power_latency: Nanos::ZERO,
            power: PowerModel::DCUDA_SHAPE,
            profiles: BTreeMap::new(),
            interference: None,
            world: None,
        }
    }
}

impl PerfModel {
    /// How long `work` (measured on the reference GPU) runs at `placement`. Never zero,
    /// so that a completion always follows its dispatch in time.
    pub fn exec_time(&self, work: Nanos, _placement: Placement) -> Nanos {
        let t = tessera_gpu::rounding::round_u64(work.0 as f64 / self.speed);
        Nanos(t.max(1))
    }
}
