//! Schedulability (gpu-lets §3.1 Figure 4, §5 Figure 15): every scenario of request
//! rates 0/200/400/600 req/s per model (all zero excepted) on 4 GPUs, judged
//! schedulable or not by squishy bin packing on whole GPUs, by squishy bin packing on
//! evenly split gpu-lets, and by elastic partitioning without and with interference.
//!
//! Profiles: the measured V100 set (four models: alexnet, resnet50, ssd, vgg19), so
//! 4^4 - 1 = 255 scenarios (the paper's five models give 1,023). The V100 file has no
//! full-GPU latency above batch 1; it is derived from 80% by batch 1's ratio of 100%
//! to 80% (and full-GPU L2/DRAM utilization taken as 80%'s). SLOs follow the paper's
//! rule (Table 4): twice the model's latency at batch 32 on the whole GPU.

use serde::{Deserialize, Serialize};
use tessera_core::policies::gpulets::{
    InterferenceModel, LatencyProfile, Model, NoInterference, Options, elastic_partitioning,
    squishy_bin_packing,
};
use tessera_gpu::partition::{Interference, ModelProfile, Profiles};

/// Partition sizes the schedulers may use (the paper's `Avail_Parts`).
pub const SIZES: [u32; 6] = [20, 40, 50, 60, 80, 100];
/// Batches profiled in the V100 file.
pub const BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Per-model rates of the scenarios, req/s.
pub const RATES: [f64; 4] = [0.0, 200.0, 400.0, 600.0];

/// A V100 model's L(batch, partition %), with the derived full-GPU points.
#[derive(Debug)]
pub struct V100Model<'a>(pub &'a ModelProfile);

impl V100Model<'_> {
    fn per_mille(percent: u32) -> u32 {
        percent * 10
    }

    /// L2 and DRAM utilization at (batch, percent), full GPU taken as 80%'s.
    pub fn utilization(&self, batch: u32, percent: u32) -> Option<(f64, f64)> {
        self.0
            .utilization(batch, Self::per_mille(percent))
            .or_else(|| (percent == 100).then(|| self.0.utilization(batch, 800)).flatten())
    }
}

impl LatencyProfile for V100Model<'_> {
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64> {
        self.0.latency_ms(batch, Self::per_mille(percent)).or_else(|| {
            (percent == 100).then(|| {
                let ratio = self.0.latency_ms(1, 1000)? / self.0.latency_ms(1, 800)?;
                Some(self.0.latency_ms(batch, 800)? * ratio)
            })?
        })
    }
}

/// gpu-lets §4.4's model over the V100 profiles.
#[derive(Debug)]
pub struct FittedInterference<'a> {
    /// The coefficients.
    pub model: Interference,
    /// The models' profiles, by index.
    pub profiles: Vec<V100Model<'a>>,
}

impl InterferenceModel for FittedInterference<'_> {
    fn factor(&self, own: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
        let u = |(m, b, p): (usize, u32, u32)| self.profiles.get(m)?.utilization(b, p);
        match (u(own), u(other)) {
            (Some(a), Some(b)) => self.model.factor(a, b),
            // unknown utilization: the largest factor seen in the data would be safer;
            // no interference is what the paper's `gpulet` variant assumes
            _ => 1.0,
        }
    }
}

/// How many of the scenarios each scheduler finds schedulable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedulability {
    /// Models, in order.
    pub models: Vec<String>,
    /// Their SLOs, ms.
    pub slo_ms: Vec<f64>,
    /// Scenarios.
    pub scenarios: usize,
    /// Squishy bin packing on whole GPUs.
    pub sbp: usize,
    /// Squishy bin packing on two evenly split gpu-lets per GPU (Figure 4's right).
    pub sbp_split: usize,
    /// Elastic partitioning without interference.
    pub gpulet: usize,
    /// Elastic partitioning with the fitted interference model.
    pub gpulet_int: usize,
}

/// Scenario `code` (1 ..= 4^n - 1) of `n` models: model i's rate is digit i of `code`
/// in base 4, mapped through [`RATES`].
pub fn scenario(code: usize, n: usize) -> Vec<f64> {
    let mut c = code;
    (0..n)
        .map(|_| {
            let r = RATES[c % RATES.len()];
            c /= RATES.len();
            r
        })
        .collect()
}

/// SLOs by the paper's rule: twice the latency at batch 32 on a whole GPU.
pub fn slos(models: &[V100Model<'_>]) -> Vec<f64> {
    models.iter().map(|m| 2.0 * m.latency_ms(32, 100).unwrap_or(f64::NAN)).collect()
}

/// Run every scenario on `gpus` GPUs.
pub fn run(profiles: &Profiles, interference: Interference, gpus: usize) -> Schedulability {
    let names: Vec<String> = profiles.models.keys().cloned().collect();
    let v100: Vec<V100Model<'_>> = profiles.models.values().map(V100Model).collect();
    let slo = slos(&v100);
    let fitted = FittedInterference {
        model: interference,
        profiles: profiles.models.values().map(V100Model).collect(),
    };
    let opts =
        Options { gpus, sizes: SIZES.to_vec(), batches: BATCHES.to_vec(), batch_budget: 1.0 };
    let n = names.len();
    let mut out = Schedulability {
        models: names,
        slo_ms: slo.clone(),
        scenarios: 0,
        sbp: 0,
        sbp_split: 0,
        gpulet: 0,
        gpulet_int: 0,
    };
    for code in 1..RATES.len().pow(n as u32) {
        let rates = scenario(code, n);
        let models: Vec<Model<'_>> =
            (0..n).map(|i| Model { rate: rates[i], slo_ms: slo[i], profile: &v100[i] }).collect();
        out.scenarios += 1;
        out.sbp += usize::from(squishy_bin_packing(&models, &BATCHES, 100, gpus).is_ok());
        out.sbp_split += usize::from(squishy_bin_packing(&models, &BATCHES, 50, 2 * gpus).is_ok());
        out.gpulet += usize::from(elastic_partitioning(&models, &opts, &NoInterference).is_ok());
        out.gpulet_int += usize::from(elastic_partitioning(&models, &opts, &fitted).is_ok());
    }
    out
}
