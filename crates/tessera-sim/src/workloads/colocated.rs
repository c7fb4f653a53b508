//! A saturating co-location workload: `gpus x per_gpu` batch jobs arrive together and
//! each keeps one task outstanding until its tasks are done, so that a policy placing
//! `per_gpu` tasks per GPU keeps that many running on every GPU all along. Task works
//! are exponential around a mean (seeded PCG). Not from a paper: it is the engine's
//! stress case for shared GPUs (`tessera bench sim`'s shared path).

use crate::workload::{Job, Kernel, Submission, Workload};
use rand::SeedableRng;
use rand_distr::{Distribution, Exp1};
use rand_pcg::Pcg64;
use tessera_core::{Nanos, ServiceClass, TenantId, TenantSpec};

/// Parameters of [`generate`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColocatedParams {
    /// GPUs of the node.
    pub gpus: usize,
    /// Jobs per GPU (the co-location the workload can sustain).
    pub per_gpu: usize,
    /// Tasks per job.
    pub tasks_per_job: usize,
    /// Mean task work.
    pub mean: Nanos,
    /// Seed.
    pub seed: u64,
}

/// The workload.
pub fn generate(p: &ColocatedParams) -> Workload {
    let mut rng = Pcg64::seed_from_u64(p.seed);
    let jobs = (0..p.gpus * p.per_gpu)
        .map(|i| Job {
            arrival: Nanos::ZERO,
            tenant: TenantSpec::new(TenantId(i as u64), ServiceClass::Batch),
            kernel: 0,
            tasks: (0..p.tasks_per_job)
                .map(|_| {
                    let x: f64 = Exp1.sample(&mut rng);
                    Nanos(((x * p.mean.0 as f64) as u64).max(1))
                })
                .collect(),
            window: 1,
            submission: Submission::Window,
            arrivals: Vec::new(),
            background: false,
        })
        .collect();
    Workload {
        kernels: vec![Kernel {
            name: "colocated".into(),
            mean: p.mean,
            launch: None,
            registers_per_thread: 0,
            cpu_per_launch: Nanos::ZERO,
            host_per_task: Nanos::ZERO,
        }],
        jobs,
    }
}
