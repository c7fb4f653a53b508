//! Profiled kernels' latencies in a world that is not the planner's (issue 57 item 1).
//!
//! gpu-lets plans with a fitted interference model and a profile's mean latencies; a run
//! whose engine used the same fit and the same means would judge the plan by itself, so
//! that its only misses come from queueing. [`MeasuredWorld`] gives the engine its own:
//! - **interference from the measured co-locations**: a batch beside another model's
//!   batch takes its solo latency times the measured co-located latency over the solo
//!   one at the nearest measured point (batches, partition), not the fit's factor;
//! - **latency spread**: every execution's time is multiplied by a log-normal factor of
//!   mean 1 whose coefficient of variation is the model's measured one (the spread of
//!   its co-located latencies, the only spread the data gives).
//!
//! Pairs the measurements do not cover (a model beside itself) keep the fit's factor;
//! the report says which.

use std::collections::BTreeMap;

/// One measured co-location point: own batch, neighbour's batch, own partition %, and
/// the co-located latency over the solo latency.
pub type Point = (u32, u32, u32, f64);

/// See the module documentation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeasuredWorld {
    /// Per (kernel, neighbour's kernel): the measured points.
    pub colocated: BTreeMap<(u32, u32), Vec<Point>>,
    /// Per kernel, the coefficient of variation of one execution's time.
    pub cv: BTreeMap<u32, f64>,
    /// Seed of the spread's draws (each execution's draw is a hash of it and the
    /// execution's first task, so a run is the same whatever the order of events).
    pub seed: u64,
}

impl MeasuredWorld {
    /// The measured slowdown of `kernel`'s batch of `batch` on `percent`% beside
    /// `other`'s batch of `other_batch`, at the nearest measured point (batches compared
    /// on a log scale, partitions in tens of percent); `None` where the pair was not
    /// measured.
    pub fn factor(
        &self,
        kernel: u32,
        batch: u32,
        percent: u32,
        other: u32,
        other_batch: u32,
    ) -> Option<f64> {
        let points = self.colocated.get(&(kernel, other))?;
        // the logarithms of the batches asked once, the points' from a table: four
        // `log2` calls per point were a twentieth of `sim gpulets --quick` (issue 55);
        // the same function fills the table, so every distance is the same number
        let (own, beside) = (log_batch(batch), log_batch(other_batch));
        points
            .iter()
            .map(|(b, ob, p, f)| {
                let d = (log_batch(*b) - own).abs()
                    + (log_batch(*ob) - beside).abs()
                    + (f64::from(*p) - f64::from(percent)).abs() / 10.0;
                (d, *f)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, f)| f)
    }

    /// The spread's factor for the execution `draw` of `kernel`: log-normal, mean 1, the
    /// kernel's coefficient of variation (1 for a kernel without one).
    pub fn spread(&self, kernel: u32, draw: u64) -> f64 {
        let Some(cv) = self.cv.get(&kernel).copied().filter(|c| *c > 0.0) else { return 1.0 };
        let sigma2 = (1.0 + cv * cv).ln();
        let (u1, u2) = (unit(splitmix(self.seed ^ draw)), unit(splitmix(!self.seed ^ draw)));
        // Box-Muller: one standard normal from two uniforms in (0, 1]
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (sigma2.sqrt() * z - sigma2 / 2.0).exp()
    }
}

/// log2 of a batch (1 for none), from a table for the batches a profile has.
fn log_batch(b: u32) -> f64 {
    const TABLED: usize = 256;
    static TABLE: std::sync::OnceLock<[f64; TABLED]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| std::array::from_fn(|b| log_batch_computed(b as u32)));
    table.get(b as usize).copied().unwrap_or_else(|| log_batch_computed(b))
}

fn log_batch_computed(b: u32) -> f64 {
    f64::from(b.max(1)).log2()
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A uniform in (0, 1] from 53 bits.
fn unit(x: u64) -> f64 {
    ((x >> 11) + 1) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of batches' logarithms is the function, within it and past it.
    #[test]
    fn batch_logarithms_are_tabled_exactly() {
        for b in (0..300).chain([1 << 20, u32::MAX]) {
            assert_eq!(log_batch(b).to_bits(), log_batch_computed(b).to_bits(), "batch {b}");
        }
        assert_eq!(log_batch(0), 0.0);
        assert_eq!(log_batch(32), 5.0);
    }

    /// The spread has mean 1 and the stated coefficient of variation; a kernel without
    /// one is not spread; the same draw gives the same factor.
    #[test]
    fn the_spread_has_mean_one_and_the_measured_variation() {
        let w =
            MeasuredWorld { cv: [(0, 0.05)].into_iter().collect(), seed: 7, ..Default::default() };
        let xs: Vec<f64> = (0..200_000).map(|i| w.spread(0, i)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!((mean - 1.0).abs() < 0.001, "mean {mean}");
        assert!((var.sqrt() / mean - 0.05).abs() < 0.002, "cv {}", var.sqrt() / mean);
        assert_eq!(w.spread(1, 3), 1.0);
        assert_eq!(w.spread(0, 3), w.spread(0, 3));
    }

    /// The nearest measured point answers; an unmeasured pair has no factor.
    #[test]
    fn the_nearest_measured_point_gives_the_factor() {
        let w = MeasuredWorld {
            colocated: [((0, 1), vec![(2, 2, 20, 1.5), (32, 32, 80, 1.1)])].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(w.factor(0, 1, 20, 1, 4), Some(1.5));
        assert_eq!(w.factor(0, 24, 80, 1, 16), Some(1.1));
        assert_eq!(w.factor(1, 2, 20, 0, 2), None);
    }
}
