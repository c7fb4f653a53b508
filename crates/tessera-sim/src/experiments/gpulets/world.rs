//! The world gpu-lets' schedules are served in, apart from the planner's model (issue 57
//! item 1): [`crate::world::MeasuredWorld`] built from the V100 file's co-location
//! measurements (`interference` line: `latency` rows and their `std` rows).
//!
//! - For the `v100` set, a batch beside another model's batch slows down as measured:
//!   the co-located latency over the same model's measured solo latency at that batch
//!   and partition (750 co-locations, both sides). A model beside itself was not
//!   measured and keeps the fit's factor.
//! - For the `paper` set (2080 Ti models, no co-location of them measured), a model
//!   beside another takes the measured slowdown of the V100 models giving their
//!   partition shapes (as it takes their spread), where those two differ; two paper
//!   models of one shape (googlenet and resnet50) keep the authors' fit, which the
//!   planner uses (issue 57 item 1: until 2026-12-04 every paper pair kept it, so that
//!   world differed from the planner's by the spread only).
//! - Spread: each model's coefficient of variation is the median, over its measured
//!   co-locations, of the measured standard deviation over the mean (a paper model
//!   takes that of the V100 model giving its partition shape). The file gives no spread
//!   for solo runs; this is the only measured one.

use super::profiles::{PAPER_MODELS, ProfileSet};
use crate::experiments::ExperimentError;
use crate::world::MeasuredWorld;
use std::collections::BTreeMap;
use tessera_gpu::partition::{Profiles, colocations_from_v100_jsonl};

/// One side of a measured co-location: model, batch, partition %, the other model and
/// its batch, the co-located latency and its standard deviation, ms.
struct Side<'a> {
    model: &'a str,
    batch: u32,
    percent: u32,
    other: &'a str,
    other_batch: u32,
    latency_ms: f64,
    std_ms: f64,
}

/// The `std` rows of the file's `interference` line, in the order of its `latency` rows.
fn stds(text: &str) -> Result<Vec<(f64, f64)>, ExperimentError> {
    type Row = (String, String, u32, u32, u32, f64, f64);
    let line = text
        .lines()
        .find(|l| l.contains("\"interference\"") && l.contains("\"std\""))
        .ok_or_else(|| ExperimentError::Config("no co-location spread in the V100 file".into()))?;
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| ExperimentError::Config(e.to_string()))?;
    let rows: Vec<Row> = serde_json::from_value(v["interference"]["std"].clone())
        .map_err(|e| ExperimentError::Config(format!("std rows: {e}")))?;
    Ok(rows.into_iter().map(|r| (r.5, r.6)).collect())
}

/// The measured world for `set`, its spread drawn from `seed`.
pub fn measured(
    set: &ProfileSet<'_>,
    profiles: &Profiles,
    v100_text: &str,
    seed: u64,
) -> Result<MeasuredWorld, ExperimentError> {
    let rows = colocations_from_v100_jsonl(v100_text)
        .map_err(|e| ExperimentError::Config(e.to_string()))?;
    let stds = stds(v100_text)?;
    if stds.len() != rows.len() {
        return Err(ExperimentError::Config(format!(
            "{} co-location rows but {} spreads",
            rows.len(),
            stds.len()
        )));
    }
    let sides: Vec<Side<'_>> = rows
        .iter()
        .zip(&stds)
        .flat_map(|(r, (s1, s2))| {
            let p2 = 100u32.saturating_sub(r.part1);
            [
                Side {
                    model: &r.m1,
                    batch: r.b1,
                    percent: r.part1,
                    other: &r.m2,
                    other_batch: r.b2,
                    latency_ms: r.lat1_ms,
                    std_ms: *s1,
                },
                Side {
                    model: &r.m2,
                    batch: r.b2,
                    percent: p2,
                    other: &r.m1,
                    other_batch: r.b1,
                    latency_ms: r.lat2_ms,
                    std_ms: *s2,
                },
            ]
        })
        .filter(|s| s.latency_ms > 0.0)
        .collect();
    // each V100 model's median spread
    let mut ratios: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for s in &sides {
        ratios.entry(s.model).or_default().push(s.std_ms / s.latency_ms);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let cv_of: BTreeMap<&str, f64> = ratios.into_iter().map(|(m, v)| (m, median(v))).collect();
    let shape = |m: &str| -> String {
        if set.name == "v100" {
            return m.to_string();
        }
        PAPER_MODELS.iter().find(|p| p.0 == m).map_or_else(|| m.to_string(), |p| p.2.to_string())
    };
    let mut world = MeasuredWorld { seed, ..MeasuredWorld::default() };
    for (k, m) in set.models.iter().enumerate() {
        if let Some(cv) = cv_of.get(shape(m).as_str()) {
            world.cv.insert(k as u32, *cv);
        }
    }
    // the set's models of each V100 shape (one each on the `v100` set)
    let mut of_shape: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (k, m) in set.models.iter().enumerate() {
        of_shape.entry(shape(m)).or_default().push(k as u32);
    }
    for s in &sides {
        let (Some(mine), Some(theirs)) = (of_shape.get(s.model), of_shape.get(s.other)) else {
            continue;
        };
        let Some(solo) =
            profiles.models.get(s.model).and_then(|p| p.latency_ms(s.batch, s.percent * 10))
        else {
            continue;
        };
        for &i in mine {
            for &j in theirs.iter().filter(|j| **j != i) {
                world.colocated.entry((i, j)).or_default().push((
                    s.batch,
                    s.other_batch,
                    s.percent,
                    s.latency_ms / solo,
                ));
            }
        }
    }
    Ok(world)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::gpulets::{V100, profiles};
    use tessera_gpu::partition::Interference;

    /// The file's first co-location (alexnet at batch 2 on 20% beside resnet50 at batch
    /// 2: 2.761 ms, alone 2.532 ms) is the world's slowdown there, for alexnet; resnet50
    /// beside itself was not measured; every model has its measured spread.
    #[test]
    fn the_world_takes_the_measured_slowdown_and_spread() {
        let p = Profiles::from_v100_jsonl(V100).unwrap();
        let set = profiles::v100(&p, Interference { c: [0.0, 0.0, 0.0, 0.0, 1.0] });
        let w = measured(&set, &p, V100, 1).unwrap();
        let at = |m: &str| set.models.iter().position(|x| x == m).unwrap() as u32;
        let (alexnet, resnet50) = (at("alexnet"), at("resnet50"));
        let f = w.factor(alexnet, 2, 20, resnet50, 2).unwrap();
        assert!((f - 2.7610640856844304 / 2.532432363344048).abs() < 1e-9, "{f}");
        assert_eq!(w.factor(resnet50, 2, 20, resnet50, 2), None);
        assert_eq!(w.colocated.values().map(Vec::len).sum::<usize>(), 1500);
        assert_eq!(w.cv.len(), 4);
        assert!(w.cv.values().all(|c| *c > 0.001 && *c < 0.1), "{:?}", w.cv);
    }

    /// Issue 57 item 1: a `paper` model beside another takes the measured slowdown of the
    /// V100 models giving their partition shapes (lenet: alexnet's; googlenet and
    /// resnet50: resnet50's), not the planner's fit; two of one shape keep the fit.
    #[test]
    fn paper_models_take_their_shapes_measured_slowdown() {
        let p = Profiles::from_v100_jsonl(V100).unwrap();
        use crate::experiments::gpulets::{AUTHORS_2080TI, BATCHING_2080TI, UTIL_2080TI};
        let authors = Interference::from_csv(AUTHORS_2080TI).unwrap();
        let set = profiles::paper(UTIL_2080TI, BATCHING_2080TI, &p, authors).unwrap();
        let v100 = profiles::v100(&p, Interference { c: [0.0, 0.0, 0.0, 0.0, 1.0] });
        let (paper_world, v100_world) =
            (measured(&set, &p, V100, 1).unwrap(), measured(&v100, &p, V100, 1).unwrap());
        let at = |s: &ProfileSet<'_>, m: &str| s.models.iter().position(|x| x == m).unwrap() as u32;
        let (lenet, googlenet, resnet50) =
            (at(&set, "lenet"), at(&set, "googlenet"), at(&set, "resnet50"));
        let measured_there =
            v100_world.factor(at(&v100, "alexnet"), 2, 20, at(&v100, "resnet50"), 2).unwrap();
        assert_eq!(paper_world.factor(lenet, 2, 20, googlenet, 2), Some(measured_there));
        assert_eq!(paper_world.factor(lenet, 2, 20, resnet50, 2), Some(measured_there));
        assert_eq!(paper_world.factor(googlenet, 2, 20, resnet50, 2), None);
    }
}
