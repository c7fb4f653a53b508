//! The event log: every decision that changes a tenant's fate (admission, refusal,
//! memory waits and their end, resets, migrations, repartitions, pool changes, long
//! queue waits, departures), one JSON object each.
//!
//! Each event goes three ways: as a line to the `events` file when one is configured
//! (`--events FILE`; the format is documented in docs/operators.md), as a
//! `tracing` event of target `tessera::event` (so `--log-format json` carries it in
//! the daemon's log), and into a short ring of recent events that `status` shows
//! (`tessera top`'s last panel). Recording never blocks on anything but the file's
//! lock and never fails the caller: a log that cannot be written is warned about once.

use serde::Serialize;
use std::collections::VecDeque;
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Recent events kept for `status`.
pub const RECENT: usize = 64;

/// A decision that changed a tenant's fate.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum NodeEvent {
    /// A tenant was registered.
    Admitted {
        /// The tenant.
        tenant: u64,
        /// Its process.
        pid: u32,
        /// `user_facing` or `batch`.
        class: &'static str,
        /// Its SLA, ms (user-facing tenants).
        #[serde(skip_serializing_if = "Option::is_none")]
        sla_ms: Option<u64>,
        /// Its fair-sharing weight.
        weight: u32,
        /// Its Slurm job.
        #[serde(skip_serializing_if = "Option::is_none")]
        job: Option<u64>,
        /// The GPUs it was placed on.
        gpus: Vec<u32>,
    },
    /// A control request was refused.
    Refused {
        /// The requesting process.
        pid: u32,
        /// What it asked (`register`, `set_weight`, `reserve`, ...).
        request: &'static str,
        /// The error code it was answered with.
        code: tessera_client::proto::ErrorCode,
        /// Why, as the client was told.
        reason: String,
    },
    /// A registration waits for room in its Slurm job's memory entitlement.
    RegistrationWaits {
        /// The job.
        job: u64,
        /// The requesting process.
        pid: u32,
    },
    /// A Slurm job was granted this node's GPUs (its Prolog ran).
    JobGranted {
        /// The job.
        job: u64,
        /// Its GPUs.
        gpus: Vec<u32>,
        /// Its shards (0: whole GPUs).
        shards: u32,
    },
    /// A Slurm job ended here (its Epilog ran).
    JobEnded {
        /// The job.
        job: u64,
    },
    /// A memory reservation did not fit and waits for memory.
    MemoryWait {
        /// The tenant.
        tenant: u64,
        /// On which GPU.
        gpu: u32,
        /// How much it asks.
        bytes: u64,
        /// Free on that GPU when it began to wait (after unused leases were taken back).
        free: u64,
        /// Requests already waiting on that GPU before it.
        waiting_before: usize,
    },
    /// A memory wait ended.
    MemoryWaitEnded {
        /// The tenant.
        tenant: u64,
        /// On which GPU.
        gpu: u32,
        /// How much it asked.
        bytes: u64,
        /// How long it waited, ms.
        waited_ms: f64,
        /// Whether it was granted.
        granted: bool,
        /// Why not, when it was not.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A task's memory could not be admitted on its GPU: the task failed.
    TaskMemoryRefused {
        /// The tenant.
        tenant: u64,
        /// The GPU.
        gpu: u32,
        /// Why.
        reason: String,
    },
    /// A task waited long in the queue before it started.
    TaskWaited {
        /// The tenant.
        tenant: u64,
        /// Where it started.
        gpu: u32,
        /// How long it waited, ms of the daemon's (emulated) time.
        waited_ms: f64,
        /// The GPU's pool when it started (`user_facing`, `batch`, `shared`).
        pool: &'static str,
        /// Tasks running on that GPU when it started (besides it).
        beside: usize,
    },
    /// A GPU is being reset (the policy reclaimed it, or a drain timed out).
    Reset {
        /// The GPU.
        gpu: u32,
        /// Tasks it killed (re-queued, or cancelled for departed tenants).
        killed: usize,
    },
    /// A GPU's reset is over.
    ResetDone {
        /// The GPU.
        gpu: u32,
    },
    /// The policy changed the user-facing pool.
    Pool {
        /// The GPUs now reserved for user-facing work.
        user_facing: Vec<u32>,
    },
    /// A tenant is moved to another GPU (DCUDA).
    Migration {
        /// The tenant.
        tenant: u64,
        /// From.
        from: u32,
        /// To.
        to: u32,
        /// How long it is paused, ms.
        pause_ms: f64,
    },
    /// A GPU was repartitioned (gpu-lets).
    Repartition {
        /// The GPU.
        gpu: u32,
        /// Its partitions, % of the GPU (empty: whole).
        partitions: Vec<u32>,
    },
    /// A tenant left (its program closed it, exited or died, or the daemon drains).
    Departed {
        /// The tenant.
        tenant: u64,
        /// Its tasks done.
        done: u64,
        /// Its tasks failed or cancelled.
        not_done: u64,
        /// Its tasks' time in the queue, in all, ms.
        waited_ms: f64,
        /// GPU time charged to it, ms.
        gpu_ms: f64,
    },
}

impl NodeEvent {
    /// The event's name, as in its JSON `event` field.
    pub fn kind(&self) -> &'static str {
        match self {
            NodeEvent::Admitted { .. } => "admitted",
            NodeEvent::Refused { .. } => "refused",
            NodeEvent::RegistrationWaits { .. } => "registration_waits",
            NodeEvent::JobGranted { .. } => "job_granted",
            NodeEvent::JobEnded { .. } => "job_ended",
            NodeEvent::MemoryWait { .. } => "memory_wait",
            NodeEvent::MemoryWaitEnded { .. } => "memory_wait_ended",
            NodeEvent::TaskMemoryRefused { .. } => "task_memory_refused",
            NodeEvent::TaskWaited { .. } => "task_waited",
            NodeEvent::Reset { .. } => "reset",
            NodeEvent::ResetDone { .. } => "reset_done",
            NodeEvent::Pool { .. } => "pool",
            NodeEvent::Migration { .. } => "migration",
            NodeEvent::Repartition { .. } => "repartition",
            NodeEvent::Departed { .. } => "departed",
        }
    }

    /// The tenant it is about, if one.
    pub fn tenant(&self) -> Option<u64> {
        match self {
            NodeEvent::Admitted { tenant, .. }
            | NodeEvent::MemoryWait { tenant, .. }
            | NodeEvent::MemoryWaitEnded { tenant, .. }
            | NodeEvent::TaskMemoryRefused { tenant, .. }
            | NodeEvent::TaskWaited { tenant, .. }
            | NodeEvent::Migration { tenant, .. }
            | NodeEvent::Departed { tenant, .. } => Some(*tenant),
            _ => None,
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

impl std::fmt::Display for NodeEvent {
    /// One line for a person (`tessera top`, the log's message).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeEvent::Admitted { tenant, pid, class, weight, job, gpus, .. } => {
                write!(f, "tenant {tenant} (pid {pid}) admitted: {class}, weight {weight}")?;
                if let Some(j) = job {
                    write!(f, ", job {j}")?;
                }
                write!(f, ", GPUs {gpus:?}")
            }
            NodeEvent::Refused { pid, request, code, reason } => {
                write!(f, "pid {pid}: {request} refused ({code:?}): {reason}")
            }
            NodeEvent::RegistrationWaits { job, pid } => {
                write!(f, "pid {pid}: registration waits for job {job}'s memory")
            }
            NodeEvent::JobGranted { job, gpus, shards } => {
                write!(f, "job {job} granted GPUs {gpus:?}, {shards} shards")
            }
            NodeEvent::JobEnded { job } => write!(f, "job {job} ended"),
            NodeEvent::MemoryWait { tenant, gpu, bytes, free, waiting_before } => write!(
                f,
                "tenant {tenant} waits for {:.0} MiB on GPU {gpu} ({:.0} MiB free, {waiting_before} waiting before it)",
                mib(*bytes),
                mib(*free)
            ),
            NodeEvent::MemoryWaitEnded { tenant, gpu, bytes, waited_ms, granted, reason } => {
                write!(
                    f,
                    "tenant {tenant} {} {:.0} MiB on GPU {gpu} after {:.1} s",
                    if *granted { "granted" } else { "refused" },
                    mib(*bytes),
                    waited_ms / 1e3
                )?;
                if let Some(r) = reason {
                    write!(f, ": {r}")?;
                }
                Ok(())
            }
            NodeEvent::TaskMemoryRefused { tenant, gpu, reason } => {
                write!(f, "tenant {tenant}: a task found no memory on GPU {gpu}: {reason}")
            }
            NodeEvent::TaskWaited { tenant, gpu, waited_ms, pool, beside } => write!(
                f,
                "tenant {tenant}: a task waited {:.1} s, then ran on GPU {gpu} ({pool} pool, {beside} beside it)",
                waited_ms / 1e3
            ),
            NodeEvent::Reset { gpu, killed } => {
                write!(f, "GPU {gpu} reset ({killed} tasks killed and re-queued)")
            }
            NodeEvent::ResetDone { gpu } => write!(f, "GPU {gpu} reset done"),
            NodeEvent::Pool { user_facing } => {
                write!(f, "user-facing pool is now GPUs {user_facing:?}")
            }
            NodeEvent::Migration { tenant, from, to, pause_ms } => {
                write!(f, "tenant {tenant} migrates GPU {from} -> {to} (paused {pause_ms:.0} ms)")
            }
            NodeEvent::Repartition { gpu, partitions } => {
                write!(f, "GPU {gpu} repartitioned to {partitions:?} %")
            }
            NodeEvent::Departed { tenant, done, not_done, waited_ms, gpu_ms } => write!(
                f,
                "tenant {tenant} left: {done} done, {not_done} not, queued {:.1} s, GPU {:.1} s",
                waited_ms / 1e3,
                gpu_ms / 1e3
            ),
        }
    }
}

/// An event as logged: when, whose, what.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoggedEvent {
    /// Wall-clock time, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Seconds since the daemon started (wall clock).
    pub uptime_s: f64,
    /// The uid it concerns (who may see it in `status`); `None`: the node's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// What happened.
    #[serde(flatten)]
    pub event: NodeEvent,
}

/// Where events go. Shared by the core and the memory desk's threads.
#[derive(Debug)]
pub struct EventLog {
    started: Instant,
    recent: Mutex<VecDeque<LoggedEvent>>,
    file: Option<Mutex<std::fs::File>>,
    warned: AtomicBool,
}

/// The events file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("opening the events file {path}: {source}")]
pub struct EventsFileError {
    /// The file.
    pub path: std::path::PathBuf,
    /// Why.
    pub source: std::io::Error,
}

impl EventLog {
    /// A log keeping recent events, and appending each to `file` when given (created
    /// with mode 0640 if missing: it names the node's users and their programs).
    pub fn new(file: Option<&Path>) -> Result<EventLog, EventsFileError> {
        let file = file
            .map(|path| {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o640)
                    .open(path)
                    .map_err(|source| EventsFileError { path: path.into(), source })
            })
            .transpose()?;
        Ok(EventLog {
            started: Instant::now(),
            recent: Mutex::new(VecDeque::with_capacity(RECENT)),
            file: file.map(Mutex::new),
            warned: AtomicBool::new(false),
        })
    }

    /// Record `event`, concerning `uid`'s tenant (`None`: the node's).
    pub fn record(&self, uid: Option<u32>, event: NodeEvent) {
        let logged = LoggedEvent {
            unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            uptime_s: self.started.elapsed().as_secs_f64(),
            uid,
            event,
        };
        let line = serde_json::to_string(&logged).unwrap_or_default();
        tracing::info!(target: "tessera::event", event = logged.event.kind(), detail = %line, "{}", logged.event);
        if let Some(file) = &self.file {
            let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
            // one write per line, so that lines of concurrent writers never interleave
            if let Err(e) = f.write_all(format!("{line}\n").as_bytes())
                && !self.warned.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(error = %e, "cannot write the events file; events are still logged");
            }
        }
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(logged);
    }

    /// The latest `n` events `visible` admits, oldest first.
    pub fn recent(&self, n: usize, visible: impl Fn(&LoggedEvent) -> bool) -> Vec<LoggedEvent> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<LoggedEvent> =
            recent.iter().rev().filter(|e| visible(e)).take(n).cloned().collect();
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_is_one_json_line_with_its_kind_and_fields() {
        let dir = std::env::temp_dir().join(format!("tessera-events-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let log = EventLog::new(Some(&dir)).unwrap();
        log.record(
            Some(1000),
            NodeEvent::MemoryWaitEnded {
                tenant: 3,
                gpu: 0,
                bytes: 2 << 30,
                waited_ms: 40_213.0,
                granted: true,
                reason: None,
            },
        );
        log.record(None, NodeEvent::Reset { gpu: 1, killed: 2 });
        let text = std::fs::read_to_string(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "memory_wait_ended");
        assert_eq!(lines[0]["tenant"], 3);
        assert_eq!(lines[0]["uid"], 1000);
        assert_eq!(lines[0]["waited_ms"], 40_213.0);
        assert!(lines[0].get("reason").is_none());
        assert_eq!(lines[1]["event"], "reset");
        assert!(lines[1].get("uid").is_none());
        // status sees the latest, oldest first, filtered
        let mine = log.recent(8, |e| e.uid == Some(1000));
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].event.to_string(), "tenant 3 granted 2048 MiB on GPU 0 after 40.2 s");
    }

    #[test]
    fn the_ring_keeps_the_latest_events() {
        let log = EventLog::new(None).unwrap();
        for gpu in 0..(RECENT as u32 + 10) {
            log.record(None, NodeEvent::ResetDone { gpu });
        }
        let all = log.recent(usize::MAX, |_| true);
        assert_eq!(all.len(), RECENT);
        assert_eq!(all.last().unwrap().event, NodeEvent::ResetDone { gpu: RECENT as u32 + 9 });
        assert_eq!(all[0].event, NodeEvent::ResetDone { gpu: 10 });
    }
}
