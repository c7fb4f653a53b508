//! Kubernetes containers' allocations on this node (issue 54): what the device plugin
//! asks for in the kubelet's `Allocate` ([`PodGrant`]) becomes a [`Job`], as a Slurm
//! job's grant does, so that every process of the container shares one memory
//! entitlement on one GPU with one weight — entered by the allocation's token instead
//! of a uid (the containers of a node often share one).
//!
//! Its id in the daemon's table of jobs is the daemon's, from [`POD_IDS`] up: Slurm's
//! job ids are 32-bit, so the two never meet, and the id says nothing of the token.

use crate::slurm::Job;
use std::collections::BTreeSet;
use tessera_client::pod::PodGrant;
use tessera_client::proto::{JobGrant, TenantClass};

/// The first id a pod allocation gets (Slurm's job ids are below 2^32).
pub const POD_IDS: u64 = 1 << 63;

/// The uid a pod allocation's report shows: none (it is entered by its token).
pub const NO_UID: u32 = u32::MAX;

/// A pod allocation the daemon cannot take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PodError {
    /// Its GPU does not exist.
    #[error("GPU {gpu} does not exist: this node has {count}")]
    NoSuchGpu {
        /// The GPU it named.
        gpu: u32,
        /// GPUs here.
        count: usize,
    },
    /// No memory, or more than its GPU has.
    #[error(
        "{memory} bytes of GPU memory asked on GPU {gpu}, which has {has}: the allocation must be 1 byte to the GPU's whole memory"
    )]
    BadMemory {
        /// The GPU.
        gpu: u32,
        /// What was asked.
        memory: u64,
        /// What the GPU has.
        has: u64,
    },
    /// A weight out of 1-1000.
    #[error("weight {0} is out of 1-1000")]
    BadWeight(u32),
    /// The token is already another allocation's.
    #[error("this token is already another allocation's (a different GPU or memory)")]
    Conflict,
    /// The GPU's pod allocations would hold more than its memory.
    #[error(
        "GPU {gpu} has {has} bytes and its pod allocations hold {held}: {memory} more do not fit (each unit the device plugin advertises is given once)"
    )]
    Full {
        /// The GPU.
        gpu: u32,
        /// What was asked.
        memory: u64,
        /// What its pod allocations hold already.
        held: u64,
        /// What the GPU has.
        has: u64,
    },
}

impl Job {
    /// A pod allocation as a job with id `id`, checked against this node's GPUs
    /// (`gpu_memory`: each GPU's bytes).
    pub fn pod(grant: &PodGrant, id: u64, gpu_memory: &[u64]) -> Result<Job, PodError> {
        let has = *gpu_memory
            .get(grant.gpu as usize)
            .ok_or(PodError::NoSuchGpu { gpu: grant.gpu, count: gpu_memory.len() })?;
        if grant.memory == 0 || grant.memory > has {
            return Err(PodError::BadMemory { gpu: grant.gpu, memory: grant.memory, has });
        }
        if !(1..=1000).contains(&grant.weight) {
            return Err(PodError::BadWeight(grant.weight));
        }
        Ok(Job {
            grant: JobGrant {
                job: id,
                uid: NO_UID,
                gpus: vec![grant.gpu],
                shards: 0,
                partition: "kubernetes".into(),
                qos: String::new(),
                comment: grant.name.clone(),
            },
            class: TenantClass::Batch,
            sla_ms: 0,
            weight: grant.weight,
            memory_entitled: grant.memory,
            memory_per_gpu: vec![(grant.gpu, grant.memory)],
            tenants: BTreeSet::new(),
            token: Some(grant.token),
            pid_namespace: None,
        })
    }

    /// Whether this job is the allocation `grant` describes: its token, GPU and memory
    /// (a plugin's retried `Allocate`, its restart rebuilding what the kubelet already
    /// gave, or the weight it learned from the pod's namespace after `Allocate`).
    pub fn is_pod(&self, grant: &PodGrant) -> bool {
        self.token.is_some_and(|t| t.matches(&grant.token))
            && self.grant.gpus == [grant.gpu]
            && self.memory_entitled == grant.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_client::pod::Token;

    const GIB: u64 = 1 << 30;

    fn grant(gpu: u32, memory: u64, weight: u32) -> PodGrant {
        PodGrant { token: Token([7; 16]), gpu, memory, weight, name: "ns/a/main".into() }
    }

    #[test]
    fn a_pod_is_a_job_of_one_gpu_with_its_memory_and_weight() {
        let j = Job::pod(&grant(1, 2 * GIB, 3), POD_IDS, &[4 * GIB, 4 * GIB]).unwrap();
        assert_eq!((j.grant.gpus.as_slice(), j.memory_entitled, j.weight), (&[1][..], 2 * GIB, 3));
        assert_eq!(j.memory_per_gpu, vec![(1, 2 * GIB)]);
        assert!(j.is_pod(&grant(1, 2 * GIB, 3)));
        assert!(!j.is_pod(&grant(1, GIB, 3)) && !j.is_pod(&grant(0, 2 * GIB, 3)));
        // the weight the plugin learns later is a change of the same allocation
        assert!(j.is_pod(&grant(1, 2 * GIB, 5)));
        assert!(!j.is_pod(&PodGrant { token: Token([8; 16]), ..grant(1, 2 * GIB, 3) }));
        let r = j.report(0, 0);
        assert_eq!((r.job, r.uid), (POD_IDS, NO_UID));
    }

    #[test]
    fn bad_pod_grants_say_what_is_wrong() {
        let node = [4 * GIB];
        let e = |g| Job::pod(&g, POD_IDS, &node).unwrap_err();
        assert_eq!(e(grant(1, GIB, 1)), PodError::NoSuchGpu { gpu: 1, count: 1 });
        assert!(matches!(e(grant(0, 0, 1)), PodError::BadMemory { .. }));
        assert!(matches!(e(grant(0, 5 * GIB, 1)), PodError::BadMemory { .. }));
        assert_eq!(e(grant(0, GIB, 0)), PodError::BadWeight(0));
        assert_eq!(e(grant(0, GIB, 1001)), PodError::BadWeight(1001));
        assert!(e(grant(0, 5 * GIB, 1)).to_string().contains("which has 4294967296"));
    }
}
