//! Spatial partitions of a GPU (MPS active-thread percentages, gpu-lets §4): each
//! partition has a compute share in per-mille; a batch of inference requests of a
//! model in a partition takes the latency its **profile** L(batch, share) gives, times
//! an **interference** factor from the L2 and DRAM utilization of the partition
//! co-running beside it (gpu-lets §4.4's linear model). Profiles and coefficients are
//! data, loaded from the measured files (`data/profiles/`), never constants in code.
//!
//! Loaders:
//! - [`Profiles::from_v100_jsonl`]: `v100-igniter/gpulet.config.jsonl` — one JSON
//!   object per line, `{model: {metric: {batch: {partition%: value}}}}` with metrics
//!   `latency` (ms), `throughput`, `l2cache` and `dram` (utilization, %);
//! - [`Interference::from_csv`]: `INT_MODEL_CONSTANT.CSV` — a header and one row
//!   `c1,c2,c3,c4,c5` (a trailing comma allowed).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Repartitioning a GPU takes this long; gpu-lets measured 10-15 s (§5), overlapped by
/// keeping the old partitions serving until the new ones are ready.
pub const REPARTITION_NS: u64 = 12_000_000_000;

/// Why a file or a partitioning is unusable.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PartitionError {
    /// A line or field could not be read.
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Shares over the whole GPU.
    #[error("partition shares sum to {0} per mille, above 1000")]
    OverSubscribed(u32),
    /// A zero share.
    #[error("a partition needs a share above 0")]
    EmptyShare,
}

/// One model's measurements, by (batch, partition %).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelProfile {
    /// Latency of one batch, ms.
    pub latency_ms: BTreeMap<(u32, u32), f64>,
    /// L2 utilization, fraction 0..1.
    pub l2: BTreeMap<(u32, u32), f64>,
    /// DRAM utilization, fraction 0..1.
    pub dram: BTreeMap<(u32, u32), f64>,
}

impl ModelProfile {
    /// Linear interpolation over the measured partition percentages of `batch`;
    /// `None` outside the measured range (no extrapolation).
    fn interpolate(table: &BTreeMap<(u32, u32), f64>, batch: u32, percent: f64) -> Option<f64> {
        // the first measured pair around `percent`, linearly; else an exact match (a
        // row of one). No list is made: the gpu-lets experiments ask this millions of
        // times (issue 55).
        let row =
            || table.range((batch, 0)..=(batch, u32::MAX)).map(|(&(_, p), &v)| (f64::from(p), v));
        let mut prev: Option<(f64, f64)> = None;
        for (p1, v1) in row() {
            if let Some((p0, v0)) = prev
                && p0 <= percent
                && percent <= p1
            {
                return Some(v0 + (v1 - v0) * (percent - p0) / (p1 - p0));
            }
            prev = Some((p1, v1));
        }
        row().find(|(p, _)| *p == percent).map(|(_, v)| v)
    }

    /// L(batch, share): latency in ms of one batch in a partition of `share_permille`.
    pub fn latency_ms(&self, batch: u32, share_permille: u32) -> Option<f64> {
        Self::interpolate(&self.latency_ms, batch, f64::from(share_permille) / 10.0)
    }

    /// (L2, DRAM) utilization, fractions, at this batch and share.
    pub fn utilization(&self, batch: u32, share_permille: u32) -> Option<(f64, f64)> {
        let p = f64::from(share_permille) / 10.0;
        Some((Self::interpolate(&self.l2, batch, p)?, Self::interpolate(&self.dram, batch, p)?))
    }

    /// L(batch, share) where measured; at the whole GPU where only batch 1 was measured
    /// there (the V100 file), derived from 80% by batch 1's ratio of 100% to 80%.
    pub fn latency_or_derived_ms(&self, batch: u32, share_permille: u32) -> Option<f64> {
        self.latency_ms(batch, share_permille).or_else(|| {
            (share_permille == 1000).then(|| {
                let ratio = self.latency_ms(1, 1000)? / self.latency_ms(1, 800)?;
                Some(self.latency_ms(batch, 800)? * ratio)
            })?
        })
    }

    /// Utilization where measured; at the whole GPU where not, 80%'s.
    pub fn utilization_or_derived(&self, batch: u32, share_permille: u32) -> Option<(f64, f64)> {
        self.utilization(batch, share_permille)
            .or_else(|| (share_permille == 1000).then(|| self.utilization(batch, 800)).flatten())
    }
}

/// Profiles of several models.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profiles {
    /// By model name.
    pub models: BTreeMap<String, ModelProfile>,
}

impl Profiles {
    /// Read the V100 file (see the module docs). The `interference` line is skipped.
    pub fn from_v100_jsonl(text: &str) -> Result<Profiles, PartitionError> {
        type Table = BTreeMap<String, BTreeMap<String, f64>>;
        let mut out = Profiles::default();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let err = |message: String| PartitionError::Parse { line: i + 1, message };
            let obj: BTreeMap<String, serde_json::Value> =
                serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
            for (model, metrics) in obj {
                if model == "interference" {
                    continue;
                }
                let metrics: BTreeMap<String, Table> =
                    serde_json::from_value(metrics).map_err(|e| err(format!("{model}: {e}")))?;
                let entry = out.models.entry(model.clone()).or_default();
                for (metric, by_batch) in metrics {
                    let (table, scale) = match metric.as_str() {
                        "latency" => (&mut entry.latency_ms, 1.0),
                        "l2cache" => (&mut entry.l2, 0.01),
                        "dram" => (&mut entry.dram, 0.01),
                        _ => continue, // throughput: derived from latency where needed
                    };
                    for (batch, by_part) in by_batch {
                        let b: u32 = batch.parse().map_err(|_| err(format!("batch {batch:?}")))?;
                        for (part, v) in by_part {
                            let p: u32 =
                                part.parse().map_err(|_| err(format!("partition {part:?}")))?;
                            table.insert((b, p), v * scale);
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// One measurement of two models co-running in two partitions of a V100 (the
/// `interference` line of `v100-igniter/gpulet.config.jsonl`): the first model at
/// `part1` percent, the second at `100 - part1`, each with its batch and measured
/// latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Colocation {
    /// First model.
    pub m1: String,
    /// Second model.
    pub m2: String,
    /// First model's batch.
    pub b1: u32,
    /// Second model's batch.
    pub b2: u32,
    /// First model's partition, percent (the second has the rest).
    pub part1: u32,
    /// First model's latency co-running, ms.
    pub lat1_ms: f64,
    /// Second model's latency co-running, ms.
    pub lat2_ms: f64,
}

/// Read the co-location measurements of the V100 file (its `interference` line's
/// `latency` rows `[m1, m2, b1, b2, part1, lat1_ms, lat2_ms]`).
pub fn colocations_from_v100_jsonl(text: &str) -> Result<Vec<Colocation>, PartitionError> {
    for (i, line) in text.lines().enumerate().filter(|(_, l)| l.contains("\"interference\"")) {
        let err = |message: String| PartitionError::Parse { line: i + 1, message };
        let obj: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
        let Some(rows) = obj.get("interference").and_then(|v| v.get("latency")) else { continue };
        type Row = (String, String, u32, u32, u32, f64, f64);
        let rows: Vec<Row> =
            serde_json::from_value(rows.clone()).map_err(|e| err(format!("rows: {e}")))?;
        return Ok(rows
            .into_iter()
            .map(|(m1, m2, b1, b2, part1, lat1_ms, lat2_ms)| Colocation {
                m1,
                m2,
                b1,
                b2,
                part1,
                lat1_ms,
                lat2_ms,
            })
            .collect());
    }
    Err(PartitionError::Parse { line: 0, message: "no interference measurements".into() })
}

/// gpu-lets §4.4's interference model: the latency of a model co-running with another
/// is its solo latency times `c1*l2_1 + c2*l2_2 + c3*dram_1 + c4*dram_2 + c5`, with
/// the two partitions' L2 and DRAM utilizations (fractions). The factor is taken as at
/// least 1: co-location never speeds a model up (the fitted constant alone is below 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interference {
    /// c1..c5.
    pub c: [f64; 5],
}

impl Interference {
    /// Read `INT_MODEL_CONSTANT.CSV` (see the module docs).
    pub fn from_csv(text: &str) -> Result<Interference, PartitionError> {
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).skip(1);
        let (i, row) =
            lines.next().ok_or(PartitionError::Parse { line: 2, message: "no row".into() })?;
        let vals: Vec<f64> = row
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(|x| x.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| PartitionError::Parse { line: i + 1, message: e.to_string() })?;
        let c: [f64; 5] = vals.try_into().map_err(|v: Vec<f64>| PartitionError::Parse {
            line: i + 1,
            message: format!("{} values, want 5", v.len()),
        })?;
        Ok(Interference { c })
    }

    /// The factor for a model with (l2, dram) beside a co-runner with (l2, dram).
    pub fn factor(&self, own: (f64, f64), other: (f64, f64)) -> f64 {
        let [c1, c2, c3, c4, c5] = self.c;
        (c1 * own.0 + c2 * other.0 + c3 * own.1 + c4 * other.1 + c5).max(1.0)
    }
}

/// A GPU split into partitions, shares in per-mille.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitioning {
    /// One share per partition.
    pub shares_permille: Vec<u32>,
}

impl Partitioning {
    /// A partitioning, checked: every share above 0, summing to at most 1000.
    pub fn new(shares_permille: Vec<u32>) -> Result<Partitioning, PartitionError> {
        if shares_permille.contains(&0) {
            return Err(PartitionError::EmptyShare);
        }
        let sum: u32 = shares_permille.iter().sum();
        if sum > 1000 {
            return Err(PartitionError::OverSubscribed(sum));
        }
        Ok(Partitioning { shares_permille })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(rel: &str) -> String {
        let p =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_measured_v100_profiles_load_and_interpolate() {
        let p = Profiles::from_v100_jsonl(&data("v100-igniter/gpulet.config.jsonl")).unwrap();
        assert_eq!(p.models.keys().collect::<Vec<_>>(), ["alexnet", "resnet50", "ssd", "vgg19"]);
        let alex = &p.models["alexnet"];
        // measured points come back exactly; halfway between 20% and 40% is the mean
        let l20 = alex.latency_ms(1, 200).unwrap();
        let l40 = alex.latency_ms(1, 400).unwrap();
        assert!((l20 - 2.0732911841155173).abs() < 1e-12);
        assert!((alex.latency_ms(1, 300).unwrap() - (l20 + l40) / 2.0).abs() < 1e-12);
        assert!(l20 > l40, "a smaller partition is slower");
        assert_eq!(alex.latency_ms(1, 50), None, "no extrapolation below 10%");
        let (l2, dram) = alex.utilization(1, 200).unwrap();
        assert!((l2 - 0.05008361128746062).abs() < 1e-12 && dram > 0.0 && dram < 1.0);
    }

    #[test]
    fn the_authors_interference_coefficients_load() {
        let i = Interference::from_csv(&data("gpulets-2080ti/INT_MODEL_CONSTANT.CSV")).unwrap();
        assert!((i.c[4] - 0.8953693917277343).abs() < 1e-12);
        assert_eq!(i.factor((0.0, 0.0), (0.0, 0.0)), 1.0, "never below 1");
        assert!(i.factor((0.5, 0.5), (0.9, 0.2)) > 1.0);
        assert!(Interference::from_csv("h\n1,2,3\n").is_err());
    }

    #[test]
    fn the_co_location_measurements_load() {
        let rows = colocations_from_v100_jsonl(&data("v100-igniter/gpulet.config.jsonl")).unwrap();
        assert_eq!(rows.len(), 750);
        assert_eq!(
            (rows[0].m1.as_str(), rows[0].m2.as_str(), rows[0].part1),
            ("alexnet", "resnet50", 20)
        );
        assert!((rows[0].lat1_ms - 2.7610640856844304).abs() < 1e-12);
        assert!(colocations_from_v100_jsonl("{}").is_err());
    }

    #[test]
    fn partitions_cannot_oversubscribe() {
        assert!(Partitioning::new(vec![500, 500]).is_ok());
        assert_eq!(Partitioning::new(vec![600, 500]), Err(PartitionError::OverSubscribed(1100)));
        assert_eq!(Partitioning::new(vec![0, 500]), Err(PartitionError::EmptyShare));
    }
}
