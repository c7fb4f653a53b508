//! A Slurm job's memory as the desk counts it: what the job's tenants hold together,
//! per GPU, against the job's entitlement on each GPU and in all.

use std::collections::HashMap;
use std::sync::Mutex;

/// A Slurm job's memory, shared by its tenants: what they reserved through the desk
/// together, never beyond the job's entitlement — whatever each program declared
/// (`TESSERA_MEMORY` is the program's own choice, not the job's limit).
#[derive(Debug)]
pub struct JobMemory {
    pub(super) job: u64,
    pub(super) entitled: u64,
    /// Its entitlement on each of its GPUs (never more than the GPU has, nor than
    /// `entitled`).
    pub(super) per_gpu: HashMap<u32, u64>,
    /// What its tenants hold, per GPU.
    pub(super) held: Mutex<HashMap<u32, u64>>,
}

/// A Slurm job's memory entitlement, as the core hands it to the desk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entitlement {
    /// The job.
    pub job: u64,
    /// Bytes its shards entitle it to, on all its GPUs together.
    pub total: u64,
    /// Bytes on each of its GPUs.
    pub per_gpu: Vec<(u32, u64)>,
}

impl JobMemory {
    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u32, u64>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn held_total(&self) -> u64 {
        self.held().values().sum()
    }

    /// Take `bytes` of the job's entitlement on `gpu`, if that much is left there and
    /// in all.
    pub(super) fn take(&self, gpu: u32, bytes: u64) -> Result<(), String> {
        let mut held = self.held();
        let total: u64 = held.values().sum();
        let here = held.get(&gpu).copied().unwrap_or(0);
        let Some(cap) = self.per_gpu.get(&gpu).copied() else {
            return Err(format!("Slurm job {} has no entitlement on GPU {gpu}", self.job));
        };
        if here.saturating_add(bytes) > cap {
            return Err(format!(
                "{bytes} bytes more would exceed Slurm job {}'s entitlement of {cap} bytes on GPU {gpu} (its tenants hold {here} there)",
                self.job
            ));
        }
        if total.saturating_add(bytes) > self.entitled {
            return Err(format!(
                "{bytes} bytes more would exceed Slurm job {}'s entitlement of {} bytes (its tenants hold {total})",
                self.job, self.entitled
            ));
        }
        held.insert(gpu, here + bytes);
        Ok(())
    }

    pub(super) fn give_back(&self, gpu: u32, bytes: u64) {
        if let Some(h) = self.held().get_mut(&gpu) {
            *h = h.saturating_sub(bytes);
        }
    }

    /// Count `bytes` its tenant holds already (adopted after a restart), whatever is
    /// left: they are held, so they count.
    pub(super) fn count(&self, gpu: u32, bytes: u64) {
        *self.held().entry(gpu).or_default() += bytes;
    }
}
