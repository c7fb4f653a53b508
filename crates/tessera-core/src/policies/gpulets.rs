//! gpu-lets' elastic partitioning (Choi et al., "Serving Heterogeneous Machine Learning
//! Models on Multi-GPU Servers with Spatio-Temporal Sharing", §4.3, Algorithm 1): the
//! sizing steps, as pure functions of a model's latency profile L(batch, partition).
//!
//! Built so far: the largest batch meeting an SLO (line 27), the rate a gpu-let of a
//! size can serve, MINREQUIREDPARTITION (line 10) and MAXEFFICIENTPARTITION (line 9:
//! the knee of rate against partition size, by maximum curvature). FINDBESTFIT with
//! split, merge and revert, the baselines and the policy around them come next.

/// A model's profiled latency: L(batch, partition %) in ms, `None` where not profiled.
pub trait LatencyProfile {
    /// Latency of one batch of `batch` requests in a gpu-let of `percent` of a GPU.
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64>;
}

/// Line 27: the largest profiled batch (of `batches`, ascending) whose latency in a
/// gpu-let of `percent` fits `budget_ms`, with its latency.
pub fn max_batch(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    percent: u32,
    budget_ms: f64,
) -> Option<(u32, f64)> {
    batches
        .iter()
        .filter_map(|&b| profile.latency_ms(b, percent).map(|l| (b, l)))
        .filter(|(_, l)| *l <= budget_ms)
        .max_by_key(|(b, _)| *b)
}

/// The request rate (per second) a gpu-let of `percent` serves within `budget_ms`:
/// its largest fitting batch, once per batch latency.
pub fn max_rate(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    percent: u32,
    budget_ms: f64,
) -> f64 {
    max_batch(profile, batches, percent, budget_ms).map_or(0.0, |(b, l)| f64::from(b) * 1000.0 / l)
}

/// Line 10, MINREQUIREDPARTITION: the smallest size (of `sizes`, ascending) whose
/// gpu-let serves `rate` within `budget_ms`; `None` if none does (the model then needs
/// several gpu-lets).
pub fn min_required_partition(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    sizes: &[u32],
    rate: f64,
    budget_ms: f64,
) -> Option<u32> {
    sizes.iter().copied().find(|&p| max_rate(profile, batches, p, budget_ms) >= rate)
}

/// Line 9, MAXEFFICIENTPARTITION: the knee of the rate a gpu-let serves against its
/// size — the profiled size where the curve's curvature is largest (Figure 8), with
/// both axes scaled to 0..1 so that the knee does not depend on units. Sizes that serve
/// nothing within the budget are left out; with fewer than three points there is no
/// interior to bend, and the largest size is the answer.
pub fn max_efficient_partition(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    sizes: &[u32],
    budget_ms: f64,
) -> Option<u32> {
    let curve: Vec<(f64, f64)> = sizes
        .iter()
        .map(|&p| (f64::from(p), max_rate(profile, batches, p, budget_ms)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    knee(&curve).map(|x| x.round() as u32)
}

/// The x of the point of maximum curvature of a curve given by points (x ascending),
/// from finite differences on non-uniform spacing, both axes scaled to 0..1.
pub fn knee(points: &[(f64, f64)]) -> Option<f64> {
    let last = points.last()?;
    if points.len() < 3 {
        return Some(last.0);
    }
    let (x0, x1) = (points[0].0, last.0);
    let (ylo, yhi) = points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let sx = (x1 - x0).max(f64::MIN_POSITIVE);
    let sy = (yhi - ylo).max(f64::MIN_POSITIVE);
    let s: Vec<(f64, f64)> = points.iter().map(|(x, y)| ((x - x0) / sx, (y - ylo) / sy)).collect();
    s.windows(3)
        .enumerate()
        .map(|(i, w)| {
            let ((xa, ya), (xb, yb), (xc, yc)) = (w[0], w[1], w[2]);
            let (h1, h2) = (xb - xa, xc - xb);
            // first and second derivatives at the middle point, non-uniform spacing
            let d1 = (ya * -h2 / (h1 * (h1 + h2)))
                + (yb * (h2 - h1) / (h1 * h2))
                + (yc * h1 / (h2 * (h1 + h2)));
            let d2 = 2.0 * (ya / (h1 * (h1 + h2)) - yb / (h1 * h2) + yc / (h2 * (h1 + h2)));
            (i + 1, d2.abs() / (1.0 + d1 * d1).powf(1.5))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| points[i].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile from a closure.
    struct Table<F: Fn(u32, u32) -> Option<f64>>(F);
    impl<F: Fn(u32, u32) -> Option<f64>> LatencyProfile for Table<F> {
        fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
            (self.0)(b, p)
        }
    }

    const BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];
    const SIZES: [u32; 6] = [20, 40, 50, 60, 80, 100];

    /// latency = (1 + b) * 100 / p ms: twice the share, half the time.
    fn linear() -> Table<impl Fn(u32, u32) -> Option<f64>> {
        Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p)))
    }

    #[test]
    fn the_largest_batch_within_the_budget_and_its_rate() {
        let t = linear();
        // at 100%: b=8 takes 9 ms, b=16 takes 17 ms
        for (budget, want) in
            [(9.0, Some((8, 9.0))), (16.9, Some((8, 9.0))), (17.0, Some((16, 17.0))), (1.9, None)]
        {
            assert_eq!(max_batch(&t, &BATCHES, 100, budget), want, "budget {budget}");
        }
        // at 50% the same batch takes twice as long: 8 requests per 18 ms
        assert!((max_rate(&t, &BATCHES, 50, 18.0) - 8.0 * 1000.0 / 18.0).abs() < 1e-9);
        assert_eq!(max_rate(&t, &BATCHES, 20, 1.0), 0.0);
    }

    #[test]
    fn the_min_required_partition_is_the_smallest_that_serves_the_rate() {
        let t = linear();
        // budget 30 ms: at 60% b=16 takes 28.3 ms -> 565 req/s; at 50% b=8 takes 18 ms ->
        // 444 req/s (b=16 takes 34 ms, over); at 40% b=8 22.5 ms -> 356 req/s
        let cases = [(300.0, Some(40)), (400.0, Some(50)), (500.0, Some(60)), (5000.0, None)];
        for (rate, want) in cases {
            assert_eq!(min_required_partition(&t, &BATCHES, &SIZES, rate, 30.0), want, "{rate}");
        }
    }

    #[test]
    fn the_knee_is_where_the_curve_bends_most() {
        // rises steeply to x=40 then flattens: the knee is 40
        let pts = [
            (20.0, 100.0),
            (40.0, 190.0),
            (50.0, 195.0),
            (60.0, 198.0),
            (80.0, 200.0),
            (100.0, 201.0),
        ];
        assert_eq!(knee(&pts), Some(40.0));
        // a straight line has no bend: every point ties at zero curvature, and the
        // first interior point is taken
        let line = [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)];
        assert_eq!(knee(&line), Some(1.0));
        assert_eq!(knee(&[(20.0, 1.0), (40.0, 2.0)]), Some(40.0), "too few points");
        assert_eq!(knee(&[]), None);
    }

    #[test]
    fn the_max_efficient_partition_of_a_saturating_model() {
        // a model that stops speeding up past 50% of the GPU (memory bound): the knee
        let t = Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p.min(50))));
        assert_eq!(max_efficient_partition(&t, &BATCHES, &SIZES, 40.0), Some(50));
    }
}
