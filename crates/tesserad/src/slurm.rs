//! Slurm jobs on this node: what a job's Prolog reported ([`JobGrant`]) becomes a
//! [`Job`] whose tenants share its memory entitlement and get its GPUs, weight and
//! class. The Prolog and Epilog run as root; only root and the daemon's user may start
//! and end jobs, and only the job's own uid may register under it (checked by the
//! core against `SO_PEERCRED`).
//!
//! Shards map to resources by the `[slurm]` settings: each GPU is advertised as
//! `shards_per_gpu` shards, so a job of `s` shards on a GPU of `M` bytes is entitled to
//! `M * s / shards_per_gpu` bytes and fair-shares with weight `s`; a job of whole GPUs
//! (no shards) gets every shard of each.

use crate::config::SlurmSection;
use std::collections::BTreeSet;
use tessera_client::proto::{JobGrant, JobReport, TenantClass};
use tessera_core::TenantId;

/// A job the daemon cannot take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SlurmError {
    /// It names no GPU.
    #[error("job {0} has no GPUs on this node (SLURM_JOB_GPUS was empty)")]
    NoGpus(u64),
    /// It names a GPU this node does not have.
    #[error(
        "job {job}'s GPU {gpu} does not exist: this node has {count} (check gres.conf against `tessera slurm gres-conf`)"
    )]
    NoSuchGpu {
        /// The job.
        job: u64,
        /// The GPU it named.
        gpu: u32,
        /// GPUs here.
        count: usize,
    },
    /// More shards than its GPUs have.
    #[error("job {job} claims {shards} shards but its {gpus} GPU(s) have {max} (shards_per_gpu)")]
    TooManyShards {
        /// The job.
        job: u64,
        /// Its shards.
        shards: u32,
        /// Its GPUs.
        gpus: usize,
        /// Their shards.
        max: u32,
    },
    /// Started twice with different grants.
    #[error("job {0} is already running here with another grant")]
    Conflict(u64),
    /// Too many jobs.
    #[error("{0} jobs are running here already (the most this daemon tracks)")]
    TooMany(usize),
}

/// The most jobs tracked at once (a node runs far fewer; this only bounds memory).
pub const MAX_JOBS: usize = 4096;

/// One job on this node.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// What its Prolog reported.
    pub grant: JobGrant,
    /// Class its tenants get.
    pub class: TenantClass,
    /// Their SLA, ms (user-facing).
    pub sla_ms: u64,
    /// Their weight: the job's shards.
    pub weight: u32,
    /// Memory its shards entitle it to, all its tenants together.
    pub memory_entitled: u64,
    /// Its open tenants.
    pub tenants: BTreeSet<TenantId>,
}

impl Job {
    /// Check `grant` against this node (`gpu_memory`: each GPU's bytes) and the
    /// `[slurm]` settings, and make the job.
    pub fn new(grant: JobGrant, gpu_memory: &[u64], s: &SlurmSection) -> Result<Job, SlurmError> {
        let job = grant.job;
        if grant.gpus.is_empty() {
            return Err(SlurmError::NoGpus(job));
        }
        let mut memories = Vec::new();
        for g in &grant.gpus {
            match gpu_memory.get(*g as usize) {
                Some(m) => memories.push(*m),
                None => {
                    return Err(SlurmError::NoSuchGpu { job, gpu: *g, count: gpu_memory.len() });
                }
            }
        }
        let per_gpu = s.shards_per_gpu.max(1);
        let max = per_gpu.saturating_mul(grant.gpus.len() as u32);
        if grant.shards > max {
            return Err(SlurmError::TooManyShards {
                job,
                shards: grant.shards,
                gpus: grant.gpus.len(),
                max,
            });
        }
        let whole: u64 = memories.iter().sum();
        let (weight, memory_entitled) = if grant.shards == 0 {
            (max, whole)
        } else {
            // shards of one GPU (the usual case) or spread: the smallest GPU's bytes per
            // shard, so no GPU is promised more than it has
            let smallest = memories.iter().copied().min().unwrap_or(0);
            let bytes = (u128::from(smallest) * u128::from(grant.shards) / u128::from(per_gpu))
                .min(u128::from(whole)) as u64;
            (grant.shards, bytes)
        };
        let (class, sla_ms) = classify(&grant, s);
        Ok(Job { grant, class, sla_ms, weight, memory_entitled, tenants: BTreeSet::new() })
    }

    /// The job as a report; `declared` is what its open tenants declared, `waiting` its
    /// parked registrations.
    pub fn report(&self, declared: u64, waiting: u32) -> JobReport {
        JobReport {
            job: self.grant.job,
            uid: self.grant.uid,
            gpus: self.grant.gpus.clone(),
            shards: if self.grant.shards == 0 { self.weight } else { self.grant.shards },
            class: self.class,
            sla_ms: self.sla_ms,
            weight: self.weight,
            memory_entitled: self.memory_entitled,
            memory_declared: declared,
            tenants: self.tenants.iter().map(|t| t.0).collect(),
            waiting,
        }
    }
}

/// The class a job's tenants get: its comment (`tessera:user-facing[:SLA_MS]` or
/// `tessera:batch`, when `comment_class` allows), else its partition or QOS being
/// listed as user-facing, else batch.
pub fn classify(grant: &JobGrant, s: &SlurmSection) -> (TenantClass, u64) {
    if s.comment_class {
        for word in grant.comment.split(|c: char| c.is_whitespace() || c == ',') {
            let mut parts = word.split(':');
            if parts.next() != Some("tessera") {
                continue;
            }
            match (parts.next(), parts.next()) {
                (Some("batch"), _) => return (TenantClass::Batch, 0),
                (Some("user-facing"), sla) => {
                    let sla = sla
                        .and_then(|v| v.parse::<u64>().ok())
                        .filter(|ms| (1..=86_400_000).contains(ms))
                        .unwrap_or(s.sla_ms);
                    return (TenantClass::UserFacing, sla);
                }
                _ => {}
            }
        }
    }
    if s.user_facing_partitions.contains(&grant.partition)
        || (!grant.qos.is_empty() && s.user_facing_qos.contains(&grant.qos))
    {
        return (TenantClass::UserFacing, s.sla_ms);
    }
    (TenantClass::Batch, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(gpus: Vec<u32>, shards: u32) -> JobGrant {
        JobGrant {
            job: 7,
            uid: 1000,
            gpus,
            shards,
            partition: "debug".into(),
            qos: String::new(),
            comment: String::new(),
        }
    }

    const GIB: u64 = 1 << 30;

    /// 4 shards of a GPU of 8 shards and 16 GiB: half its memory, weight 4; whole GPUs:
    /// all their memory and every shard as weight.
    #[test]
    fn shards_map_to_memory_and_weight() {
        let s = SlurmSection::default();
        assert_eq!(s.shards_per_gpu, 8);
        let j = Job::new(grant(vec![1], 4), &[16 * GIB, 16 * GIB], &s).unwrap();
        assert_eq!((j.weight, j.memory_entitled), (4, 8 * GIB));
        let j = Job::new(grant(vec![0, 1], 0), &[16 * GIB, 16 * GIB], &s).unwrap();
        assert_eq!((j.weight, j.memory_entitled), (16, 32 * GIB));
    }

    #[test]
    fn bad_grants_are_refused_with_the_reason() {
        let s = SlurmSection::default();
        let mem = [GIB; 2];
        assert_eq!(Job::new(grant(vec![], 4), &mem, &s).unwrap_err(), SlurmError::NoGpus(7));
        assert!(matches!(
            Job::new(grant(vec![2], 4), &mem, &s),
            Err(SlurmError::NoSuchGpu { gpu: 2, count: 2, .. })
        ));
        assert!(matches!(
            Job::new(grant(vec![0], 9), &mem, &s),
            Err(SlurmError::TooManyShards { shards: 9, max: 8, .. })
        ));
    }

    /// Table: comment, partition, QOS to class and SLA.
    #[test]
    fn jobs_are_classified_by_comment_partition_or_qos() {
        let s = SlurmSection {
            user_facing_partitions: vec!["serve".into()],
            user_facing_qos: vec!["interactive".into()],
            sla_ms: 150,
            ..SlurmSection::default()
        };
        let with = |partition: &str, qos: &str, comment: &str| JobGrant {
            partition: partition.into(),
            qos: qos.into(),
            comment: comment.into(),
            ..grant(vec![0], 1)
        };
        let uf = TenantClass::UserFacing;
        for (g, want) in [
            (with("debug", "", ""), (TenantClass::Batch, 0)),
            (with("serve", "", ""), (uf, 150)),
            (with("debug", "interactive", ""), (uf, 150)),
            (with("debug", "", "tessera:user-facing"), (uf, 150)),
            (with("debug", "", "nightly tessera:user-facing:80"), (uf, 80)),
            (with("debug", "", "tessera:user-facing:0"), (uf, 150)),
            (with("serve", "", "tessera:batch"), (TenantClass::Batch, 0)),
            (with("debug", "", "tesseract:user-facing"), (TenantClass::Batch, 0)),
        ] {
            assert_eq!(classify(&g, &s), want, "{g:?}");
        }
        let no_comments = SlurmSection { comment_class: false, ..s };
        assert_eq!(
            classify(&with("debug", "", "tessera:user-facing"), &no_comments).0,
            TenantClass::Batch
        );
    }
}
