//! What the engine replays: jobs, each a tenant that submits identical independent
//! tasks with a bounded number outstanding (a closed loop per job, as in Flexy §III).

use serde::{Deserialize, Serialize};
use tessera_core::{LaunchInfo, Nanos, TenantSpec};

/// A kernel of the workload's table (e.g. Flexy Table I).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// Its name, as the paper gives it.
    pub name: String,
    /// Its average execution time on the reference GPU.
    pub mean: Nanos,
    /// Its launch shape and the share of a GPU it occupies alone, when the workload
    /// gives one (DCUDA's applications): tasks then co-run at that demand, and the
    /// policy sees it as the interposer would show it. Without one a task asks for the
    /// whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<LaunchInfo>,
    /// Registers per thread of its kernel (the block model's occupancy; 0 when not
    /// given, counted as one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub registers_per_thread: u32,
    /// CPU time its program spends before each launch (a duty cycle: DCUDA's
    /// applications compute between kernels). Under window submission the next task
    /// is submitted this long after the previous one ended (and after the job
    /// arrives). Zero: at once.
    #[serde(default, skip_serializing_if = "is_no_time")]
    pub cpu_per_launch: Nanos,
    /// The part of each task's time on its GPU spent outside its kernel (input and
    /// output copies, driver calls; at the start of the task): the task holds the GPU,
    /// but NVSMI's utilization, which counts time with a kernel running, does not count
    /// it busy. Zero: the whole task is kernel time.
    #[serde(default, skip_serializing_if = "is_no_time")]
    pub host_per_task: Nanos,
}

fn is_no_time(x: &Nanos) -> bool {
    *x == Nanos::ZERO
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// One job: a tenant that arrives, submits its tasks, and leaves when all have ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// When it arrives.
    pub arrival: Nanos,
    /// The tenant it registers as.
    pub tenant: TenantSpec,
    /// Index into [`Workload::kernels`]; all of a job's tasks run this kernel.
    pub kernel: u32,
    /// Each task's true work on the reference GPU, in submission order.
    pub tasks: Vec<Nanos>,
    /// How many of its tasks may be outstanding (queued or running) at once.
    pub window: usize,
    /// How the job refills its window.
    pub submission: Submission,
    /// For [`Submission::Open`]: when each task is submitted (absolute, ascending; the
    /// first at `arrival`). Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrivals: Vec<Nanos>,
    /// Background work: it submits tasks only while other (foreground) jobs still have
    /// tasks to end, and the run does not wait for the rest of its tasks (Flexy §III:
    /// "there are always batch tasks present in the system").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
}

/// How a job keeps tasks outstanding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Submission {
    /// Sliding window: each completion submits the next task at once.
    #[default]
    Window,
    /// Bursts: submit `window` tasks together, wait until all have ended, repeat.
    Burst,
    /// Open loop: each task is submitted at its time in [`Job::arrivals`], whatever
    /// is outstanding (requests of an inference service).
    Open,
}

impl Submission {
    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Submission::Window => "window",
            Submission::Burst => "burst",
            Submission::Open => "open",
        }
    }
}

/// A whole workload instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// The kernel table.
    pub kernels: Vec<Kernel>,
    /// Jobs in arrival order.
    pub jobs: Vec<Job>,
}

impl Workload {
    /// Total number of tasks.
    pub fn task_count(&self) -> usize {
        self.jobs.iter().map(|j| j.tasks.len()).sum()
    }
}
