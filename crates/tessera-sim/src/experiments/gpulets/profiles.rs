//! The two profile sets gpu-lets is reproduced on, as the core's scheduler and the
//! engine take them.
//!
//! - `v100` — the measured V100 + TensorRT MPS profiles (`data/profiles/v100-igniter`)
//!   as they are: alexnet, resnet50, ssd, vgg19. Measured: latency and L2/DRAM
//!   utilization at 20-80% for batches 1-32 (10% and 100% at batch 1). Derived: the
//!   whole-GPU latency above batch 1, from 80% by batch 1's ratio of 100% to 80%, and
//!   whole-GPU utilization taken as 80%'s (measured per partition, so no scaling).
//!   Interference: our fit on the V100
//!   co-locations.
//! - `paper` — the paper's five models (Table 4) on its own GPU, the RTX 2080 Ti.
//!   Measured (the authors' artifact, `gpulets-2080ti/UTIL.CSV`): how the average kernel
//!   duration grows with the batch at the whole GPU, and L2/DRAM utilization. Derived:
//!   the whole-GPU latency, that growth scaled so that batch 32 takes half the model's
//!   Table 4 SLO (the paper set its SLOs at twice that latency); partitions, by the
//!   shape of the most similar V100 model's curve (lenet by alexnet, googlenet and
//!   resnet50 by resnet50, ssd-mobilenet by ssd, vgg16 by vgg19); batches the table
//!   skips interpolated; utilization the whole GPU's scaled by the partition's share
//!   (the authors' rule). Interference: the authors' 2080 Ti coefficients.
//!   Input batching: the artifact's measured cost of assembling a batch of each input
//!   shape (`1_28_28.txt` and the like, read as ms) is added to every batch's latency,
//!   and the kernel part scaled so that the two together take half the SLO at batch
//!   32. It is charged as part of the batch's run on its gpu-let (serialised with the
//!   gpu-let's batches): the paper does not say whether its frontend overlaps it.

use super::schedulability::SIZES;
use tessera_core::policies::gpulets::{InterferenceModel, LatencyProfile, MAX_BATCH};
use tessera_gpu::partition::{Interference, ModelProfile, Profiles};

/// A profile the scheduler and the engine can use: latency and utilization.
pub trait Profiled: LatencyProfile + std::fmt::Debug + Sync {
    /// (L2, DRAM) utilization, fractions, at (batch, percent).
    fn utilization(&self, batch: u32, percent: u32) -> Option<(f64, f64)>;
}

/// A profile's values at every batch up to [`MAX_BATCH`] and every whole percent,
/// computed once: the schedulers and the serving engine ask the same few hundred points
/// millions of times, and interpolating each time over the profile's table was a third
/// of `sim gpulets` (issue 55). The same function computes each point, so the values are
/// the same to the bit.
#[derive(Debug)]
struct Tabled<T>(Vec<Option<T>>);

impl<T: Copy> Tabled<T> {
    const ROW: usize = 101;

    fn of(f: impl Fn(u32, u32) -> Option<T>) -> Self {
        Tabled(
            (0..=MAX_BATCH)
                .flat_map(|b| (0..=100).map(move |p| (b, p)))
                .map(|(b, p)| f(b, p))
                .collect(),
        )
    }

    /// The point, or `None` outside the table (the caller computes it then).
    fn get(&self, batch: u32, percent: u32) -> Option<Option<T>> {
        if percent > 100 {
            return None;
        }
        self.0.get(batch as usize * Self::ROW + percent as usize).copied()
    }
}

/// A V100 model's L(batch, partition %), with the derived full-GPU points.
#[derive(Debug)]
pub struct V100Model<'a> {
    /// The measured profile.
    pub profile: &'a ModelProfile,
    latency: Tabled<f64>,
    utilization: Tabled<(f64, f64)>,
}

impl<'a> V100Model<'a> {
    /// The model of `profile`.
    pub fn new(profile: &'a ModelProfile) -> Self {
        V100Model {
            profile,
            latency: Tabled::of(|b, p| profile.latency_or_derived_ms(b, p * 10)),
            utilization: Tabled::of(|b, p| profile.utilization_or_derived(b, p * 10)),
        }
    }
}

impl Profiled for V100Model<'_> {
    fn utilization(&self, batch: u32, percent: u32) -> Option<(f64, f64)> {
        self.utilization
            .get(batch, percent)
            .unwrap_or_else(|| self.profile.utilization_or_derived(batch, percent * 10))
    }
}

impl LatencyProfile for V100Model<'_> {
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64> {
        self.latency
            .get(batch, percent)
            .unwrap_or_else(|| self.profile.latency_or_derived_ms(batch, percent * 10))
    }
}

/// One of the paper's models: whole-GPU latency by batch, partitions by a V100 shape.
#[derive(Debug)]
pub struct PaperModel<'a> {
    /// Whole-GPU latency by batch, ms.
    pub full_ms: std::collections::BTreeMap<u32, f64>,
    /// L2 utilization by batch, whole GPU, fraction.
    pub l2: std::collections::BTreeMap<u32, f64>,
    /// DRAM utilization by batch, whole GPU, fraction.
    pub dram: std::collections::BTreeMap<u32, f64>,
    /// The V100 model whose curve gives the partitions' shape.
    pub shape: V100Model<'a>,
    /// Input-batching cost by batch, ms.
    pub batching_ms: std::collections::BTreeMap<u32, f64>,
    /// The share of it charged to the batch ([`BatchingCosts::charged`]).
    pub batching_charged: f64,
    /// [`PaperModel::computed_ms`] at every point (see [`Tabled`]), filled by
    /// [`PaperModel::tabled`].
    latency: Tabled<f64>,
    /// [`PaperModel::computed_utilization`] likewise: the interference factor asks it
    /// millions of times per run, two B-tree lookups each (13% of `sim gpulets
    /// --quick`, issue 55).
    utilization: Tabled<(f64, f64)>,
}

/// The value at `batch`, linear between the nearest profiled batches (the authors'
/// interpolation of batches their table skips: UTIL.CSV has 1, 2, 4, 8, 12, ... 32).
fn by_batch(table: &std::collections::BTreeMap<u32, f64>, batch: u32) -> Option<f64> {
    if let Some(v) = table.get(&batch) {
        return Some(*v);
    }
    let (lo, vlo) = table.range(..batch).next_back()?;
    let (hi, vhi) = table.range(batch..).next()?;
    Some(vlo + (vhi - vlo) * f64::from(batch - lo) / f64::from(hi - lo))
}

impl PaperModel<'_> {
    /// The same model with its latencies computed once.
    fn tabled(mut self) -> Self {
        self.latency = Tabled::of(|b, p| self.computed_ms(b, p));
        self.utilization = Tabled::of(|b, p| self.computed_utilization(b, p));
        self
    }

    /// The authors' rule: UTIL.CSV's whole-GPU L2 and DRAM utilization scaled by the
    /// partition's share of the GPU (a 20% gpu-let loads the memory system a fifth as
    /// much), interpolated between profiled batches.
    fn computed_utilization(&self, batch: u32, percent: u32) -> Option<(f64, f64)> {
        let share = f64::from(percent) / 100.0;
        Some((by_batch(&self.l2, batch)? * share, by_batch(&self.dram, batch)? * share))
    }

    fn computed_ms(&self, batch: u32, percent: u32) -> Option<f64> {
        let full = by_batch(&self.full_ms, batch)?;
        let kernels =
            full * self.shape.latency_ms(batch, percent)? / self.shape.latency_ms(batch, 100)?;
        Some(kernels + self.batching_charged * self.batching_ms.get(&batch)?)
        // (with the authors' overhead, `batching_ms` holds their charge and the share is 1)
    }
}

impl LatencyProfile for PaperModel<'_> {
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64> {
        self.latency.get(batch, percent).unwrap_or_else(|| self.computed_ms(batch, percent))
    }
}

impl Profiled for PaperModel<'_> {
    /// [`PaperModel::computed_utilization`], from its table.
    fn utilization(&self, batch: u32, percent: u32) -> Option<(f64, f64)> {
        self.utilization
            .get(batch, percent)
            .unwrap_or_else(|| self.computed_utilization(batch, percent))
    }
}

/// A set of models to schedule: names, profiles, SLOs and the interference model.
#[derive(Debug)]
pub struct ProfileSet<'a> {
    /// `v100` or `paper`.
    pub name: &'static str,
    /// Model names.
    pub models: Vec<String>,
    /// Their profiles.
    pub profiles: Vec<Box<dyn Profiled + 'a>>,
    /// Their SLOs, ms.
    pub slo_ms: Vec<f64>,
    /// §4.4's coefficients for this GPU.
    pub interference: Interference,
    /// The world its schedules are served in when it is not the planner's
    /// ([`super::world`]); `None`: the planner's own model.
    pub world: Option<std::sync::Arc<crate::world::MeasuredWorld>>,
}

impl ProfileSet<'_> {
    /// Serve this set's schedules in `world`.
    pub fn with_world(mut self, world: crate::world::MeasuredWorld) -> Self {
        self.world = Some(std::sync::Arc::new(world));
        self
    }
}

impl InterferenceModel for ProfileSet<'_> {
    fn factor(&self, own: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
        let u = |(m, b, p): (usize, u32, u32)| self.profiles.get(m)?.utilization(b, p);
        match (u(own), u(other)) {
            (Some(a), Some(b)) => self.interference.factor(a, b),
            // a point the profiles lack: no interference, as the `gpulet` variant assumes
            _ => 1.0,
        }
    }
}

/// A set's interference for a list of models served, each given by its profile in the
/// set (several models may share a profile, as `game`'s six LeNets do).
#[derive(Clone, Copy, Debug)]
pub struct ModelsOf<'s, 'a> {
    set: &'s ProfileSet<'a>,
    kinds: &'s [usize],
}

impl ProfileSet<'_> {
    /// The interference of models whose profiles are `kinds` (model `i` is profile
    /// `kinds[i]`).
    pub fn of_models<'s>(&'s self, kinds: &'s [usize]) -> ModelsOf<'s, 's> {
        ModelsOf { set: self, kinds }
    }
}

impl InterferenceModel for ModelsOf<'_, '_> {
    fn factor(&self, own: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
        let kind = |m: usize| self.kinds.get(m).copied().unwrap_or(usize::MAX);
        self.set.factor((kind(own.0), own.1, own.2), (kind(other.0), other.1, other.2))
    }
}

/// The `v100` set, SLOs by the paper's rule (twice the whole-GPU latency at batch 32).
pub fn v100<'a>(profiles: &'a Profiles, fitted: Interference) -> ProfileSet<'a> {
    let models: Vec<String> = profiles.models.keys().cloned().collect();
    let boxed: Vec<Box<dyn Profiled + 'a>> = profiles
        .models
        .values()
        .map(|m| Box::new(V100Model::new(m)) as Box<dyn Profiled + 'a>)
        .collect();
    let slo_ms = boxed.iter().map(|p| 2.0 * p.latency_ms(32, 100).unwrap_or(f64::NAN)).collect();
    ProfileSet { name: "v100", models, profiles: boxed, slo_ms, interference: fitted, world: None }
}

/// The paper's models with their Table 4 SLOs, ms, the V100 model giving each its
/// partition shape, and its input shape (the artifact's batching-cost file).
pub const PAPER_MODELS: [(&str, f64, &str, InputShape); 5] = [
    ("googlenet", 44.0, "resnet50", InputShape::Imagenet),
    ("lenet", 5.0, "alexnet", InputShape::Mnist),
    ("resnet50", 95.0, "resnet50", InputShape::Imagenet),
    ("ssd-mobilenetv1", 136.0, "ssd", InputShape::Camera),
    ("vgg16", 130.0, "vgg19", InputShape::Imagenet),
];

/// An input shape of the paper's models (Table 4), whose batching cost was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputShape {
    /// 1x28x28 (MNIST).
    Mnist,
    /// 3x224x224 (ImageNet).
    Imagenet,
    /// 3x300x300 (camera frames for SSD).
    Camera,
}

/// The artifact's input-batching costs, as files' text.
#[derive(Clone, Copy, Debug)]
pub struct BatchingCosts<'t> {
    /// `1_28_28.txt`.
    pub mnist: &'t str,
    /// `3_224_224.txt`.
    pub imagenet: &'t str,
    /// `3_300_300.txt`.
    pub camera: &'t str,
    /// The share of the cost charged to the batch's run on its gpu-let (1: serialised
    /// with the gpu-let's batches; 0: the frontend hides it entirely). The paper does not
    /// say; a constant of ours.
    pub charged: f64,
    /// Charge what the authors' scheduler charges instead (issue 57 item 3): 1.9 times
    /// the measured cost for ImageNet inputs, 2.5 times for SSD's camera frames, a
    /// flat 0.4 ms for LeNet's MNIST digits; `charged` is then unused.
    pub authors_overhead: bool,
}

impl BatchingCosts<'_> {
    /// Cost by batch, ms, for `shape`.
    fn of(&self, shape: InputShape) -> Result<std::collections::BTreeMap<u32, f64>, UtilError> {
        let text = match shape {
            InputShape::Mnist => self.mnist,
            InputShape::Imagenet => self.imagenet,
            InputShape::Camera => self.camera,
        };
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                let bad = |message: String| UtilError { line: i + 1, message };
                let mut f = line.split(',').map(str::trim);
                let batch = f
                    .next()
                    .unwrap_or("")
                    .parse::<u32>()
                    .map_err(|e| bad(format!("batch: {e}")))?;
                let cost =
                    f.next().unwrap_or("").parse::<f64>().map_err(|e| bad(format!("cost: {e}")))?;
                if !(cost.is_finite() && cost >= 0.0) {
                    return Err(bad(format!("cost {cost}")));
                }
                Ok((batch, cost))
            })
            .collect()
    }
}

/// Why the artifact's table is unusable.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("UTIL.CSV line {line}: {message}")]
pub struct UtilError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The `paper` set from `UTIL.CSV` (see the module docs).
pub fn paper<'a>(
    util_csv: &str,
    batching: BatchingCosts<'_>,
    v100: &'a Profiles,
    authors: Interference,
) -> Result<ProfileSet<'a>, UtilError> {
    type Rows = std::collections::BTreeMap<u32, (f64, f64, f64)>; // batch -> (duration, l2, dram)
    let mut table: std::collections::BTreeMap<String, Rows> = Default::default();
    for (i, line) in util_csv.lines().enumerate().skip(1).filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |message: String| UtilError { line: i + 1, message };
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 6 {
            return Err(bad(format!("{} fields", f.len())));
        }
        let num = |k: usize| f[k].parse::<f64>().map_err(|e| bad(format!("field {k}: {e}")));
        let batch = f[1].parse::<u32>().map_err(|e| bad(format!("batch: {e}")))?;
        table
            .entry(f[0].to_string())
            .or_default()
            .insert(batch, (num(2)?, num(4)? / 100.0, num(5)? / 100.0));
    }
    let mut set = ProfileSet {
        name: "paper",
        models: Vec::new(),
        profiles: Vec::new(),
        slo_ms: Vec::new(),
        interference: authors,
        world: None,
    };
    for (name, slo, shape, input) in PAPER_MODELS {
        let batching_ms = batching.of(input)?;
        let at32_batching = *batching_ms
            .get(&32)
            .ok_or(UtilError { line: 0, message: format!("{input:?}: no batch 32 cost") })?;
        if at32_batching >= slo / 2.0 {
            return Err(UtilError {
                line: 0,
                message: format!(
                    "{name}: batching 32 inputs takes {at32_batching} ms, half the SLO or more"
                ),
            });
        }
        let rows = table.get(name).ok_or(UtilError { line: 0, message: format!("no {name}") })?;
        let at32 =
            rows.get(&32).ok_or(UtilError { line: 0, message: format!("{name}: no batch 32") })?.0;
        let shape = V100Model::new(
            v100.models
                .get(shape)
                .ok_or(UtilError { line: 0, message: format!("no V100 {shape}") })?,
        );
        let full_ms =
            rows.iter().map(|(b, r)| (*b, r.0 / at32 * (slo / 2.0 - at32_batching))).collect();
        // the kernels are sized by the measured cost above: the authors' overhead is
        // what their scheduler charges on top, not a different GPU
        let (batching_ms, charged) = if batching.authors_overhead {
            let charge = |ms: f64| match input {
                InputShape::Imagenet => 1.9 * ms,
                InputShape::Camera => 2.5 * ms,
                InputShape::Mnist => 0.4,
            };
            (batching_ms.iter().map(|(b, ms)| (*b, charge(*ms))).collect(), 1.0)
        } else {
            (batching_ms, batching.charged)
        };
        let l2 = rows.iter().map(|(b, r)| (*b, r.1)).collect();
        let dram = rows.iter().map(|(b, r)| (*b, r.2)).collect();
        set.models.push(name.to_string());
        set.profiles.push(Box::new(
            PaperModel {
                full_ms,
                l2,
                dram,
                shape,
                batching_ms,
                batching_charged: charged,
                latency: Tabled(Vec::new()),
                utilization: Tabled(Vec::new()),
            }
            .tabled(),
        ));
        set.slo_ms.push(slo);
    }
    debug_assert!(SIZES.contains(&100));
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_gpu::partition::Interference;

    /// The paper models' tables hold exactly what their functions compute, at every
    /// batch and percent (the tables are a speed-up, issue 55, not a model).
    #[test]
    fn the_paper_models_tables_are_their_functions() {
        let v100 = Profiles::from_v100_jsonl(super::super::V100).unwrap();
        let shape = V100Model::new(&v100.models["resnet50"]);
        let at = |points: &[(u32, f64)]| points.iter().copied().collect();
        let model = PaperModel {
            full_ms: at(&[(1, 2.0), (4, 3.5), (8, 5.0), (32, 12.0)]),
            l2: at(&[(1, 0.1), (8, 0.25), (32, 0.4)]),
            dram: at(&[(1, 0.05), (4, 0.2), (32, 0.3)]),
            shape,
            batching_ms: at(&[(1, 0.1), (2, 0.15), (4, 0.2), (8, 0.3), (16, 0.5), (32, 0.9)]),
            batching_charged: 1.0,
            latency: Tabled(Vec::new()),
            utilization: Tabled(Vec::new()),
        }
        .tabled();
        let bits = |x: Option<f64>| x.map(f64::to_bits);
        let pair = |x: Option<(f64, f64)>| x.map(|(a, b)| (a.to_bits(), b.to_bits()));
        let mut some = 0;
        for b in 0..=MAX_BATCH + 1 {
            for p in 0..=101 {
                assert_eq!(bits(model.latency_ms(b, p)), bits(model.computed_ms(b, p)));
                let u = model.utilization(b, p);
                assert_eq!(pair(u), pair(model.computed_utilization(b, p)), "batch {b} at {p}%");
                some += usize::from(u.is_some());
            }
        }
        assert!(some > 1000, "the table has {some} points");
    }

    /// The batching constant reaches every latency: charged in full, a batch takes its
    /// kernels plus the artifact's batching cost; not charged, its kernels alone.
    #[test]
    fn the_batching_share_charged_moves_each_latency_by_the_batching_cost() {
        let v100 = Profiles::from_v100_jsonl(super::super::V100).unwrap();
        let set = |charged| {
            let costs = BatchingCosts { charged, ..super::super::BATCHING_2080TI };
            paper(super::super::UTIL_2080TI, costs, &v100, Interference { c: [0.0; 5] }).unwrap()
        };
        let (full, none) = (set(1.0), set(0.0));
        let batching = BatchingCosts { charged: 1.0, ..super::super::BATCHING_2080TI };
        for (i, (_, _, _, shape)) in PAPER_MODELS.iter().enumerate() {
            let cost = batching.of(*shape).unwrap();
            for (batch, percent) in [(1, 100), (8, 50), (32, 20)] {
                let (a, b) = (
                    full.profiles[i].latency_ms(batch, percent).unwrap(),
                    none.profiles[i].latency_ms(batch, percent).unwrap(),
                );
                assert!((a - b - cost[&batch]).abs() < 1e-9, "{i} {batch} {percent}: {a} {b}");
            }
        }
    }
}
