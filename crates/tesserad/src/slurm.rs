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
    /// Its entitlement on each of its GPUs: a GPU's whole memory for a job of whole
    /// GPUs, else its shards' part (never more than the GPU has); the job's tenants
    /// together hold at most this on each, and at most `memory_entitled` in all.
    pub memory_per_gpu: Vec<(u32, u64)>,
    /// Its open tenants.
    pub tenants: BTreeSet<TenantId>,
    /// For a Kubernetes container's allocation ([`crate::pods`]): the token its
    /// processes enter it by, instead of the grant's uid. `None` for a Slurm job.
    pub token: Option<tessera_client::pod::Token>,
    /// A pod allocation's processes' pid namespace (`/proc/PID/ns/pid`), taken from
    /// the first while none is open: a container's processes share one, so the token
    /// does not let another container's in beside them.
    pub pid_namespace: Option<String>,
}

impl Job {
    /// Check `grant` against this node (`gpu_memory`: each GPU's bytes) and the
    /// `[slurm]` settings, and make the job.
    pub fn new(
        mut grant: JobGrant,
        gpu_memory: &[u64],
        s: &SlurmSection,
    ) -> Result<Job, SlurmError> {
        let job = grant.job;
        // each GPU once, whatever the list said
        grant.gpus.sort_unstable();
        grant.gpus.dedup();
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
        let memory_per_gpu = grant
            .gpus
            .iter()
            .zip(&memories)
            .map(|(g, m)| (*g, if grant.shards == 0 { *m } else { memory_entitled.min(*m) }))
            .collect();
        let (class, sla_ms) = classify(&grant, s);
        Ok(Job {
            grant,
            class,
            sla_ms,
            weight,
            memory_entitled,
            memory_per_gpu,
            tenants: BTreeSet::new(),
            token: None,
            pid_namespace: None,
        })
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

/// What a Prolog reads from `scontrol -d show job <id>` (the Prolog's environment
/// lacks the shard count, the QOS and the comment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScontrolJob {
    /// Shards on `node` (the sum of `shard:N` in its `GRES=` detail).
    pub shards: u32,
    /// The GPU indices of that detail (`IDX:`), for when `SLURM_JOB_GPUS` is empty.
    pub gpus: Vec<u32>,
    /// `Partition=`.
    pub partition: String,
    /// `QOS=`.
    pub qos: String,
    /// `Comment=` (up to the end of its line: a comment may hold spaces).
    pub comment: String,
}

/// Read `scontrol -d show job` output for `node` (the detail line whose `Nodes=`
/// names it; the first detail line when `node` is empty or none names it).
pub fn parse_scontrol_job(text: &str, node: &str) -> ScontrolJob {
    // never from the first line: it holds the job's name, which its user chooses
    // (`-J "x QOS=interactive"`)
    let field = |key: &str| -> String {
        text.lines()
            .skip(1)
            .filter(|l| !l.trim_start().starts_with("Comment="))
            .flat_map(str::split_whitespace)
            .find_map(|w| w.strip_prefix(key).map(str::to_string))
            .unwrap_or_default()
    };
    let comment = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Comment="))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default();
    let details: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("Nodes=") && l.contains("GRES="))
        .collect();
    let mine = details
        .iter()
        .find(|l| {
            !node.is_empty()
                && l.split_whitespace()
                    .find_map(|w| w.strip_prefix("Nodes="))
                    .is_some_and(|n| expand_hostlist(n).iter().any(|x| x == node))
        })
        .or(details.first());
    let gres = mine.and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("GRES=")));
    let shards = gres.map(shards_in).unwrap_or(0);
    let gpus = gres.map(indices_in).unwrap_or_default();
    ScontrolJob {
        shards,
        gpus,
        partition: field("Partition="),
        qos: field("QOS="),
        comment: if comment == "(null)" { String::new() } else { comment },
    }
}

/// Slurm's hostlist notation expanded: `a,gpu[01-03,07]` is `a`, `gpu01`, `gpu02`,
/// `gpu03`, `gpu07` (zero padding kept; one bracket per name, as Slurm prints them).
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in split_top(list) {
        let Some((prefix, rest)) = item.split_once('[') else {
            out.push(item.to_string());
            continue;
        };
        let Some((ranges, suffix)) = rest.split_once(']') else {
            out.push(item.to_string());
            continue;
        };
        for r in ranges.split(',') {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let (Ok(x), Ok(y)) = (a.parse::<u64>(), b.parse::<u64>()) else { continue };
            // a range that is not one is skipped, not expanded without bound
            if y < x || y - x > 65_536 {
                continue;
            }
            for n in x..=y {
                out.push(format!("{prefix}{n:0width$}{suffix}", width = a.len()));
            }
        }
    }
    out
}

/// `s` split at commas outside brackets and parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut depth = 0i32;
    let mut items = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

/// The shards in a GRES detail such as `gpu:1(IDX:0),shard:4(IDX:1)` or
/// `shard:a100:2(IDX:0)`.
fn shards_in(gres: &str) -> u32 {
    // IDX lists hold commas
    split_top(gres)
        .iter()
        .filter(|it| it.starts_with("shard:"))
        .filter_map(|it| {
            let head = it.split('(').next()?;
            head.rsplit(':').next()?.parse::<u32>().ok()
        })
        .sum()
}

/// The device indices of a GRES detail: every `(IDX:...)` list, merged.
fn indices_in(gres: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in gres.split("(IDX:").skip(1) {
        if let Some(list) = part.split(')').next().and_then(parse_gpu_list) {
            out.extend(list);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A job's GPUs from `SLURM_JOB_GPUS` (or `SLURM_STEP_GPUS`): comma-separated indices,
/// ranges allowed (`0,2-3`).
pub fn parse_gpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                if b < a || b - a > 1024 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// `gres.conf` lines and the node's `Gres=` fragment for `gpus` GPUs of
/// `shards_per_gpu` shards each, devices named by `device` with `{}` for the index.
pub fn gres_conf(gpus: usize, shards_per_gpu: u32, device: &str) -> (String, String) {
    let dev = |i: usize| device.replace("{}", &i.to_string());
    let mut conf = String::from("AutoDetect=off\n");
    for i in 0..gpus {
        conf.push_str(&format!("Name=gpu File={}\n", dev(i)));
    }
    for i in 0..gpus {
        conf.push_str(&format!("Name=shard Count={shards_per_gpu} File={}\n", dev(i)));
    }
    let node = format!("Gres=gpu:{gpus},shard:{}", gpus as u64 * u64::from(shards_per_gpu));
    (conf, node)
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    /// As Slurm 22.05 prints it (trimmed).
    const SHOW_JOB: &str = "JobId=12 JobName=wrap\n   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n   Priority=1 Nice=0 Account=(null) QOS=normal\n   JobState=RUNNING Reason=None Dependency=(null)\n   Partition=debug AllocNode:Sid=localhost:12\n   NodeList=localhost\n   TRES=cpu=1,mem=1M,node=1,billing=1,gres/shard=4\n     Nodes=localhost CPU_IDs=0 Mem=0 GRES=shard:4(IDX:1)\n   Comment=tessera:user-facing:80 nightly run\n   TresPerNode=gres:shard:4\n";

    #[test]
    fn scontrol_output_gives_shards_partition_qos_and_comment() {
        let j = parse_scontrol_job(SHOW_JOB, "localhost");
        assert_eq!(j.shards, 4);
        assert_eq!(j.gpus, vec![1]);
        assert_eq!(indices_in("gpu:2(IDX:0,2),shard:1(IDX:3)"), vec![0, 2, 3]);
        assert_eq!((j.partition.as_str(), j.qos.as_str()), ("debug", "normal"));
        assert_eq!(j.comment, "tessera:user-facing:80 nightly run");
        assert_eq!(parse_scontrol_job(SHOW_JOB, "").shards, 4, "first detail line");
        assert_eq!(parse_scontrol_job("JobId=1 Partition=p", "n").shards, 0);
        // a name or comment cannot pose as the QOS or partition
        let spoof = SHOW_JOB
            .replace("JobName=wrap", "JobName=x QOS=interactive Partition=serve")
            .replace("Comment=tessera", "Comment=QOS=interactive tessera");
        let j = parse_scontrol_job(&spoof, "localhost");
        assert_eq!((j.qos.as_str(), j.partition.as_str()), ("normal", "debug"));
    }

    /// A multi-node job: each node takes its own detail line, named by a hostlist.
    #[test]
    fn a_node_finds_its_line_in_a_hostlist() {
        assert_eq!(expand_hostlist("a,gpu[01-03,07]"), ["a", "gpu01", "gpu02", "gpu03", "gpu07"]);
        assert_eq!(expand_hostlist("n[9-11]x"), ["n9x", "n10x", "n11x"]);
        assert!(expand_hostlist("n[5-1]").is_empty());
        let two = "JobId=3\n   QOS=normal\n     Nodes=gpu[01-02] CPU_IDs=0 Mem=0 GRES=shard:2(IDX:0)\n     Nodes=gpu03 CPU_IDs=0 Mem=0 GRES=shard:6(IDX:1)\n";
        assert_eq!(parse_scontrol_job(two, "gpu02").shards, 2);
        assert_eq!(parse_scontrol_job(two, "gpu03").gpus, vec![1]);
    }

    #[test]
    fn gres_details_and_gpu_lists_parse() {
        assert_eq!(shards_in("gpu:1(IDX:0),shard:4(IDX:1)"), 4);
        assert_eq!(shards_in("shard:a100:2(IDX:0-1,3),shard:1(IDX:2)"), 3);
        assert_eq!(shards_in("gpu:2(IDX:0,1)"), 0);
        assert_eq!(parse_gpu_list("0,2-3,2"), Some(vec![0, 2, 3]));
        assert_eq!(parse_gpu_list(""), Some(vec![]));
        assert_eq!(parse_gpu_list("x"), None);
        assert_eq!(parse_gpu_list("3-1"), None);
    }

    #[test]
    fn gres_conf_lists_every_gpu_and_its_shards() {
        let (conf, node) = gres_conf(2, 8, "/dev/nvidia{}");
        assert_eq!(
            conf,
            "AutoDetect=off\nName=gpu File=/dev/nvidia0\nName=gpu File=/dev/nvidia1\n\
             Name=shard Count=8 File=/dev/nvidia0\nName=shard Count=8 File=/dev/nvidia1\n"
        );
        assert_eq!(node, "Gres=gpu:2,shard:16");
    }
}
