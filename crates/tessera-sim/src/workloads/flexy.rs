//! The Flexy workload generator (Flexy §III, Tables I and II).
//!
//! What the paper states, implemented as stated:
//! - the 14 kernels of Table I with their average task execution times; kernels of
//!   200 ms or less form user-facing jobs, the others batch jobs;
//! - a job is a number of identical independent tasks of one kernel, picked uniformly
//!   among its class's kernels; its duration is drawn from a Pareto distribution and
//!   broken into tasks;
//! - job inter-arrival times are exponential; the base mean IAT fills one GPU and is
//!   multiplied by the load factor f (0.125 = heaviest .. 4 = lightest; f = 0.25
//!   fills four GPUs);
//! - the number of outstanding tasks per job is uniform up to twice the GPUs; by
//!   default a job keeps that many outstanding as a sliding window (each completion
//!   submits the next task); the alternative reading, bursts of that many tasks each
//!   waiting for the previous burst to end, is [`Submission::Burst`];
//! - 100 jobs per run, with the class counts and mean durations of Table II.
//!
//! What the paper leaves open, with the values assumed here (each is an option of the
//! `tessera sim flexy` command and is printed in the report):
//! - Pareto shape `alpha` = 2.5 (scale chosen so the mean is Table II's);
//! - task-time variation: each task's time is its kernel's mean times a log-normal
//!   factor with coefficient of variation 0.05;
//! - tasks per job = the job's duration over the kernel's time, rounded, at least 1;
//! - the split of the 100 jobs: Table II's totals divided by its averages give
//!   W1 80 user-facing + 20 batch, W2 40 + 60, W3 20 + 80 jobs, summing to 100 each,
//!   so that is the reading used. (Table II's "user-facing to batch ratio" row and the
//!   section titles of §IV disagree with each other and with these totals for W2 and
//!   W3; the report says so.)
//! - job types are a fixed multiset of those counts in a random order;
//! - the same seed gives the same jobs at every load: only the inter-arrival times
//!   are scaled by f, so loads and policies are compared on common random numbers;
//! - "there are always batch tasks present in the system" (§III), when asked for
//!   ([`FlexyWorkloadParams::background_batch`]): one more batch job, present from
//!   time 0, keeps one task of a batch kernel outstanding for as long as any other
//!   job has tasks left ([`crate::workload::Job::background`]);
//! - NVSMI's utilization (§III: it "reports the time the GPU is busy", i.e. with a
//!   kernel running): Table I's task times are read as whole tasks, input and output
//!   copies included, and the first `host_per_task` of each is not kernel time, so
//!   short tasks "provide low utilization (according to NVSMI)" (§IV-B).

use crate::workload::{Job, Kernel, Submission, Workload};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp1, LogNormal, Pareto};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use tessera_core::{Nanos, ServiceClass, TenantId, TenantSpec};

/// Flexy Table I: kernel name and average task execution time in milliseconds,
/// measured on a Quadro P1000.
pub const TABLE_I: [(&str, u64); 14] = [
    ("Darkgray", 226),
    ("Histogram", 82),
    ("Convolution", 130),
    ("Black&Scholes", 158),
    ("Monte Carlo", 178),
    ("BFS", 97),
    ("Gaussian", 2674),
    ("Lava MD", 1158),
    ("Euclid", 29),
    ("Particle", 48),
    ("Pathfinder", 87),
    ("NW", 69),
    ("Hot spot", 14),
    ("Hot spot3D", 512),
];

/// Kernels at or below this time are user-facing (Flexy §III).
pub const USER_FACING_MAX: Nanos = Nanos::from_millis(200);

/// The three mixes of Table II.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mix {
    /// W1: 80 s user-facing + 320 s batch; paper label "80-20".
    W1,
    /// W2: 200 s user-facing + 900 s batch; paper label "20-80".
    W2,
    /// W3: 160 s user-facing + 640 s batch; paper label "60-40".
    W3,
}

/// One mix's row of Table II.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MixSpec {
    /// The paper's batch-user-facing label (figure captions).
    pub label: &'static str,
    /// User-facing jobs (total / average).
    pub uf_jobs: usize,
    /// Batch jobs (total / average).
    pub batch_jobs: usize,
    /// Average user-facing job duration, seconds.
    pub uf_mean_s: f64,
    /// Average batch job duration, seconds.
    pub batch_mean_s: f64,
}

impl Mix {
    /// All three, in order.
    pub const ALL: [Mix; 3] = [Mix::W1, Mix::W2, Mix::W3];

    /// Table II for this mix.
    pub fn spec(self) -> MixSpec {
        match self {
            Mix::W1 => MixSpec {
                label: "80-20",
                uf_jobs: 80,
                batch_jobs: 20,
                uf_mean_s: 1.0,
                batch_mean_s: 16.0,
            },
            Mix::W2 => MixSpec {
                label: "20-80",
                uf_jobs: 40,
                batch_jobs: 60,
                uf_mean_s: 5.0,
                batch_mean_s: 15.0,
            },
            Mix::W3 => MixSpec {
                label: "60-40",
                uf_jobs: 20,
                batch_jobs: 80,
                uf_mean_s: 8.0,
                batch_mean_s: 8.0,
            },
        }
    }

    /// Base mean job inter-arrival time: the mean job duration, so that one GPU is
    /// fully used at f = 1 (Flexy §III).
    pub fn base_iat_s(self) -> f64 {
        let s = self.spec();
        (s.uf_jobs as f64 * s.uf_mean_s + s.batch_jobs as f64 * s.batch_mean_s)
            / (s.uf_jobs + s.batch_jobs) as f64
    }

    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mix::W1 => "w1",
            Mix::W2 => "w2",
            Mix::W3 => "w3",
        }
    }
}

/// How many tasks a user-facing job keeps outstanding (§III: "the number of
/// outstanding tasks per job is derived from a uniform distribution, with a maximum
/// value of 2 times the number of resources"). Batch jobs always follow §III.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UfOutstanding {
    /// §III read literally: uniform in 1..=2N, like batch jobs.
    #[default]
    UpTo2N,
    /// One at a time: a user-facing job (a client of an interactive service) submits
    /// its next request when the previous one is answered.
    One,
}

impl UfOutstanding {
    /// Short name, as in mode labels.
    pub fn name(self) -> &'static str {
        match self {
            UfOutstanding::UpTo2N => "uf2n",
            UfOutstanding::One => "uf1",
        }
    }
}

/// Generator parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlexyWorkloadParams {
    /// Which Table II mix.
    pub mix: Mix,
    /// Load factor f: the base IAT is multiplied by it.
    pub load: f64,
    /// GPUs in the node (bounds the outstanding tasks per job at twice this).
    pub gpus: usize,
    /// SLA of user-facing tenants.
    pub sla: Nanos,
    /// Pareto shape alpha of job durations (> 1).
    pub pareto_shape: f64,
    /// Coefficient of variation of one task's time around its kernel's mean.
    pub task_cv: f64,
    /// How jobs keep their tasks outstanding.
    pub submission: Submission,
    /// How many tasks user-facing jobs keep outstanding.
    #[serde(default)]
    pub uf_outstanding: UfOutstanding,
    /// Keep one batch task outstanding from time 0 for as long as other jobs have
    /// tasks left (§III: "there are always batch tasks present in the system").
    #[serde(default)]
    pub background_batch: bool,
    /// The part of each task's time that is not kernel time (copies, driver calls),
    /// which NVSMI's utilization does not count.
    #[serde(default)]
    pub host_per_task: Nanos,
    /// Seed of this workload instance.
    pub seed: u64,
}

/// A workload parameter is out of range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadError {
    /// The Pareto mean is infinite for alpha <= 1.
    #[error("Pareto shape must be greater than 1 (got {0})")]
    ParetoShape(f64),
    /// Loads must be positive and finite.
    #[error("load factor must be positive (got {0})")]
    Load(f64),
    /// Coefficient of variation must be non-negative and finite.
    #[error("task time coefficient of variation must be >= 0 (got {0})")]
    TaskCv(f64),
    /// At least one GPU.
    #[error("the node needs at least one GPU")]
    NoGpus,
}

/// The kernel table (Table I), each task's first `host_per_task` outside its kernel.
pub fn kernels(host_per_task: Nanos) -> Vec<Kernel> {
    TABLE_I
        .iter()
        .map(|(name, ms)| Kernel {
            name: (*name).to_string(),
            mean: Nanos::from_millis(*ms),
            launch: None,
            registers_per_thread: 0,
            cpu_per_launch: Nanos::ZERO,
            host_per_task,
        })
        .collect()
}

/// Generate one workload instance.
pub fn generate(p: &FlexyWorkloadParams) -> Result<Workload, WorkloadError> {
    if !(p.pareto_shape > 1.0 && p.pareto_shape.is_finite()) {
        return Err(WorkloadError::ParetoShape(p.pareto_shape));
    }
    if !(p.load > 0.0 && p.load.is_finite()) {
        return Err(WorkloadError::Load(p.load));
    }
    if !(p.task_cv >= 0.0 && p.task_cv.is_finite()) {
        return Err(WorkloadError::TaskCv(p.task_cv));
    }
    if p.gpus == 0 {
        return Err(WorkloadError::NoGpus);
    }
    let kernels = kernels(p.host_per_task);
    let (uf_kernels, batch_kernels): (Vec<u32>, Vec<u32>) =
        (0..kernels.len() as u32).partition(|&k| kernels[k as usize].mean <= USER_FACING_MAX);
    let spec = p.mix.spec();
    let mut rng = Pcg64::seed_from_u64(p.seed);

    let mut types: Vec<bool> = std::iter::repeat_n(true, spec.uf_jobs)
        .chain(std::iter::repeat_n(false, spec.batch_jobs))
        .collect();
    types.shuffle(&mut rng);

    // log-normal with mean 1 and the given coefficient of variation
    let sigma2 = (1.0 + p.task_cv * p.task_cv).ln();
    let jitter = LogNormal::new(-sigma2 / 2.0, sigma2.sqrt())
        .map_err(|_| WorkloadError::TaskCv(p.task_cv))?;
    let mean_iat = p.mix.base_iat_s() * p.load;
    let mut clock = 0.0;
    let mut jobs = Vec::with_capacity(types.len());
    for (i, user_facing) in types.into_iter().enumerate() {
        let inter: f64 = Exp1.sample(&mut rng);
        clock += inter * mean_iat;
        let (mean_s, pool) = if user_facing {
            (spec.uf_mean_s, &uf_kernels)
        } else {
            (spec.batch_mean_s, &batch_kernels)
        };
        let scale = mean_s * (p.pareto_shape - 1.0) / p.pareto_shape;
        let pareto = Pareto::new(scale, p.pareto_shape)
            .map_err(|_| WorkloadError::ParetoShape(p.pareto_shape))?;
        let duration_s: f64 = pareto.sample(&mut rng);
        let kernel = pool[rng.random_range(0..pool.len())];
        let kernel_mean = kernels[kernel as usize].mean;
        let count = ((duration_s / kernel_mean.as_secs_f64()).round() as usize).max(1);
        let tasks = (0..count)
            .map(|_| {
                Nanos(((kernel_mean.0 as f64) * jitter.sample(&mut rng)).round().max(1.0) as u64)
            })
            .collect();
        // drawn for every job either way, so that both readings get the same jobs
        let drawn = rng.random_range(1..=2 * p.gpus);
        let window = if user_facing && p.uf_outstanding == UfOutstanding::One { 1 } else { drawn };
        let class =
            if user_facing { ServiceClass::UserFacing { sla: p.sla } } else { ServiceClass::Batch };
        jobs.push(Job {
            arrival: Nanos::from_secs_f64(clock),
            tenant: TenantSpec::new(TenantId(i as u64), class),
            kernel,
            tasks,
            window,
            submission: p.submission,
            arrivals: Vec::new(),
            background: false,
        });
    }
    if p.background_batch {
        // its own random stream, so that every other job is the same with or without it
        let mut rng = Pcg64::seed_from_u64(p.seed ^ 0x6261_7463_6867_726e);
        let kernel = batch_kernels[rng.random_range(0..batch_kernels.len())];
        let mean = kernels[kernel as usize].mean;
        // enough tasks to run alone from time 0 past the end of every other job (the
        // engine stops submitting them when the other jobs are done)
        let last_arrival = jobs.last().map_or(Nanos::ZERO, |j: &Job| j.arrival);
        let work: u64 = jobs.iter().flat_map(|j| &j.tasks).map(|t| t.0).sum();
        let count = ((last_arrival.0 + work).div_ceil(mean.0.max(1)) as usize).max(1);
        let tasks = (0..count)
            .map(|_| Nanos(((mean.0 as f64) * jitter.sample(&mut rng)).round().max(1.0) as u64))
            .collect();
        jobs.push(Job {
            arrival: Nanos::ZERO,
            tenant: TenantSpec::new(TenantId(jobs.len() as u64), ServiceClass::Batch),
            kernel,
            tasks,
            window: 1,
            submission: Submission::Window,
            arrivals: Vec::new(),
            background: true,
        });
    }
    Ok(Workload { kernels, jobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mix: Mix, load: f64, seed: u64) -> FlexyWorkloadParams {
        FlexyWorkloadParams {
            mix,
            load,
            gpus: 4,
            sla: Nanos::from_millis(200),
            pareto_shape: 2.5,
            task_cv: 0.05,
            submission: Submission::Window,
            uf_outstanding: Default::default(),
            background_batch: false,
            host_per_task: Nanos::ZERO,
            seed,
        }
    }

    #[test]
    fn table_ii_class_counts_and_base_iat() {
        for mix in Mix::ALL {
            let w = generate(&params(mix, 1.0, 7)).unwrap();
            let uf = w.jobs.iter().filter(|j| j.tenant.class.is_user_facing()).count();
            assert_eq!(uf, mix.spec().uf_jobs);
            assert_eq!(w.jobs.len(), 100);
            for j in &w.jobs {
                let mean = w.kernels[j.kernel as usize].mean;
                assert_eq!(j.tenant.class.is_user_facing(), mean <= USER_FACING_MAX);
                assert!((1..=8).contains(&j.window));
            }
        }
        assert_eq!(Mix::W1.base_iat_s(), 4.0);
        assert_eq!(Mix::W2.base_iat_s(), 11.0);
        assert_eq!(Mix::W3.base_iat_s(), 8.0);
    }

    /// §III's "always batch tasks present": one more batch job from time 0 with one
    /// task outstanding and enough work to outlast the others; the other jobs are the
    /// same as without it.
    #[test]
    fn background_batch_job_is_present_until_the_last_arrival() {
        for (mix, load) in [(Mix::W1, 4.0), (Mix::W2, 0.125)] {
            let plain = generate(&params(mix, load, 5)).unwrap();
            let with =
                generate(&FlexyWorkloadParams { background_batch: true, ..params(mix, load, 5) })
                    .unwrap();
            assert_eq!(with.jobs.len(), plain.jobs.len() + 1);
            assert_eq!(&with.jobs[..plain.jobs.len()], &plain.jobs[..]);
            let bg = with.jobs.last().unwrap();
            assert!(!bg.tenant.class.is_user_facing() && bg.window == 1);
            assert_eq!(bg.arrival, Nanos::ZERO);
            assert!(bg.background);
            let work: u64 = bg.tasks.iter().map(|t| t.0).sum();
            let last = plain.jobs.last().unwrap().arrival.0;
            let others: u64 = plain.jobs.iter().flat_map(|j| &j.tasks).map(|t| t.0).sum();
            // jitter is 5%: enough to outlast every other job run one after another
            let mean = with.kernels[bg.kernel as usize].mean.0;
            assert!(work as f64 >= 0.9 * (last + others) as f64 - mean as f64);
        }
    }

    #[test]
    fn load_scales_arrivals_only() {
        let a = generate(&params(Mix::W1, 1.0, 3)).unwrap();
        let b = generate(&params(Mix::W1, 0.5, 3)).unwrap();
        for (x, y) in a.jobs.iter().zip(&b.jobs) {
            assert_eq!(x.tasks, y.tasks);
            assert!(y.arrival.0.abs_diff(x.arrival.0 / 2) <= 1);
        }
    }

    #[test]
    fn mean_job_duration_matches_table_ii_over_many_seeds() {
        // The Pareto scale is set so the mean is Table II's; check the sample mean of
        // user-facing W1 jobs (1 s) over 200 instances lands within 10%.
        let mut total = 0.0;
        let mut n = 0;
        for seed in 0..200 {
            let w = generate(&params(Mix::W1, 1.0, seed)).unwrap();
            for j in w.jobs.iter().filter(|j| j.tenant.class.is_user_facing()) {
                total += j.tasks.iter().map(|t| t.as_secs_f64()).sum::<f64>();
                n += 1;
            }
        }
        let mean = total / n as f64;
        assert!((mean - 1.0).abs() < 0.1, "mean user-facing job duration {mean}");
    }

    #[test]
    fn bad_parameters_are_typed_errors() {
        let mut p = params(Mix::W1, 1.0, 0);
        p.pareto_shape = 1.0;
        assert_eq!(generate(&p), Err(WorkloadError::ParetoShape(1.0)));
        let mut p = params(Mix::W1, 0.0, 0);
        assert_eq!(generate(&p), Err(WorkloadError::Load(0.0)));
        p.load = 1.0;
        p.gpus = 0;
        assert_eq!(generate(&p), Err(WorkloadError::NoGpus));
    }
}
