//! Alibaba's 2023 GPU-sharing cluster trace (the FGD paper's `openb`, copied into
//! `data/traces/alibaba-openb/` from `../shared/data/traces/alibaba-openb/`): 8,152
//! pods of a production cluster whose GPUs are shared, each with its GPU request
//! (`num_gpu`, and `gpu_milli` thousandths of one GPU when fractional), its QoS class
//! and its creation and deletion times in seconds.

use serde::{Deserialize, Serialize};

/// The pod list as published, compiled in so that runs do not depend on a path.
pub const POD_LIST: &str =
    include_str!("../../../../data/traces/alibaba-openb/openb_pod_list_default.csv");

/// A pod's QoS class as the trace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Qos {
    /// Latency-sensitive.
    #[serde(rename = "LS")]
    LatencySensitive,
    /// Best-effort.
    #[serde(rename = "BE")]
    BestEffort,
    /// Kubernetes' Burstable.
    Burstable,
    /// Kubernetes' Guaranteed.
    Guaranteed,
}

/// One pod of the trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    /// Its name, `openb-pod-NNNN`.
    pub name: String,
    /// GPUs requested: 1 for a fractional request (`gpu_milli` below 1000), 0 for a
    /// pod that uses no GPU.
    pub num_gpu: u32,
    /// Thousandths of a GPU requested per GPU (1000 for a whole one).
    pub gpu_milli: u32,
    /// Its QoS class.
    pub qos: Qos,
    /// Created, seconds from the trace's start.
    pub creation_s: u64,
    /// Deleted, seconds from the trace's start.
    pub deletion_s: u64,
}

impl Pod {
    /// Created to deleted, seconds.
    pub fn lifetime_s(&self) -> u64 {
        self.deletion_s.saturating_sub(self.creation_s)
    }
}

/// The trace could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    /// The header is not the pod list's.
    #[error("not an openb pod list: header {0:?}")]
    Header(String),
    /// A row is malformed.
    #[error("line {line}: {what}")]
    Row {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        what: String,
    },
}

const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";

/// Parse the pod list (`openb_pod_list_default.csv`): one pod per row, in file order.
pub fn parse(text: &str) -> Result<Vec<Pod>, TraceError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_end() == HEADER => {}
        Some((_, h)) => return Err(TraceError::Header(h.chars().take(200).collect())),
        None => return Err(TraceError::Header(String::new())),
    }
    let mut pods = Vec::new();
    for (i, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let row = |what: String| TraceError::Row { line: i + 1, what };
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != 11 {
            return Err(row(format!("{} fields, expected 11", fields.len())));
        }
        let number = |idx: usize, name: &str| -> Result<u64, TraceError> {
            fields[idx]
                .parse()
                .map_err(|_| row(format!("{name} {:?} is not a number", fields[idx])))
        };
        let qos = match fields[6] {
            "LS" => Qos::LatencySensitive,
            "BE" => Qos::BestEffort,
            "Burstable" => Qos::Burstable,
            "Guaranteed" => Qos::Guaranteed,
            other => return Err(row(format!("unknown qos {other:?}"))),
        };
        let small = |idx: usize, name: &str| -> Result<u32, TraceError> {
            u32::try_from(number(idx, name)?).map_err(|_| row(format!("{name} out of range")))
        };
        let pod = Pod {
            name: fields[0].to_string(),
            num_gpu: small(3, "num_gpu")?,
            gpu_milli: small(4, "gpu_milli")?,
            qos,
            creation_s: number(8, "creation_time")?,
            deletion_s: number(9, "deletion_time")?,
        };
        if pod.gpu_milli > 1000 {
            return Err(row(format!("gpu_milli {} above a whole GPU", pod.gpu_milli)));
        }
        if pod.deletion_s < pod.creation_s {
            return Err(row("deleted before it was created".into()));
        }
        pods.push(pod);
    }
    Ok(pods)
}

/// The published trace, parsed.
pub fn pods() -> Result<Vec<Pod>, TraceError> {
    parse(POD_LIST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_trace_parses_with_the_readmes_counts() {
        let pods = pods().unwrap();
        assert_eq!(pods.len(), 8152);
        let count = |q| pods.iter().filter(|p| p.qos == q).count();
        assert_eq!(count(Qos::LatencySensitive), 4647);
        assert_eq!(count(Qos::BestEffort), 3398);
        assert_eq!(pods.iter().filter(|p| p.gpu_milli > 0 && p.gpu_milli < 1000).count(), 3078);
    }

    #[test]
    fn malformed_rows_are_typed_errors_with_their_line() {
        assert!(matches!(parse("a,b\n"), Err(TraceError::Header(_))));
        let bad = format!("{HEADER}\nopenb-pod-0,1,1,1,x,,LS,Running,0,1,0\n");
        assert_eq!(
            parse(&bad),
            Err(TraceError::Row { line: 2, what: "gpu_milli \"x\" is not a number".into() })
        );
        let bad = format!("{HEADER}\nopenb-pod-0,1,1,1,500,,XX,Running,0,1,0\n");
        assert!(matches!(parse(&bad), Err(TraceError::Row { line: 2, .. })));
        let bad = format!("{HEADER}\nopenb-pod-0,1,1,1,500,,LS,Running,5,1,0\n");
        assert!(matches!(parse(&bad), Err(TraceError::Row { line: 2, .. })));
    }
}
