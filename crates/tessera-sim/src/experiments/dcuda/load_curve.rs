//! Issue 57 item 6, Figure 14's shape: DCUDA's cut in run time against least-loaded's
//! at the paper's three loads and at two heavier ones. The paper's cut is largest at
//! its medium load: at a light load there is little overload to remove, at a heavy one
//! little room to move into. Whether our model has that shape at all, and where its
//! loads lie on it, is what this curve measures, beside how often the node's summed
//! demand is over its GPUs (where no placement has room).

use super::*;

/// Seconds between arrivals: the paper's light, medium and heavy loads, then two
/// heavier.
pub const INTERVALS_S: [u64; 5] = [7, 5, 3, 2, 1];

/// One load's means over the orders.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadPoint {
    /// Seconds between arrivals.
    pub interval_s: u64,
    /// Least-loaded's and DCUDA's mean normalized run time (over solo).
    pub mean_normalized: [f64; 2],
    /// DCUDA's cut in it: 1 - DCUDA's / least-loaded's.
    pub cut: f64,
    /// Share of DCUDA's samples at which the applications' summed demand was over the
    /// node's GPUs.
    pub node_over: f64,
}

/// The loads run again with the contention off: the paper's medium and the heaviest.
pub const NO_CONTENTION_INTERVALS_S: [u64; 2] = [5, 1];

/// `intervals` over `orders` arrival orders with constants `k`.
pub fn load_curve(
    apps: &[App],
    cfg: &DcudaConfig,
    intervals: &[u64],
    k: &Constants,
    orders: usize,
    cache: &RunCache,
) -> Result<Vec<LoadPoint>, ExperimentError> {
    intervals
        .iter()
        .map(|&interval_s| {
            // the experiment's own load of this interval where it has one, so that its
            // runs come from the cache (a load's name only labels its runs; issue 55)
            let load = cfg
                .loads
                .iter()
                .find(|l| l.interval_s == interval_s)
                .cloned()
                .unwrap_or_else(|| Load { name: format!("{interval_s} s"), interval_s });
            let runs = |policy: &str| -> Result<Vec<RunResult>, ExperimentError> {
                (0..orders)
                    .into_par_iter()
                    .map(|o| cache.run_one(apps, policy, &load, o, cfg.seed, k))
                    .collect()
            };
            let (ll, dc) = (runs("least-loaded")?, runs("dcuda")?);
            let mean_normalized = [
                mean(ll.iter().map(|r| r.mean_normalized)),
                mean(dc.iter().map(|r| r.mean_normalized)),
            ];
            Ok(LoadPoint {
                interval_s,
                mean_normalized,
                cut: 1.0 - mean_normalized[1] / mean_normalized[0],
                node_over: mean(dc.iter().map(|r| r.overload.node_over)),
            })
        })
        .collect()
}

/// What the curve says of Figure 14's claim, when it says something: the interval of
/// the largest cut and the share of samples with the node over its GPUs there, when
/// that peak is heavier than the paper's heavy load (3 s) and the cut falls beyond it
/// (the paper's shape, at heavier loads than ours). `None`: the curve does not turn
/// within the loads run, or turns within the paper's.
pub fn peak_beyond_the_papers(curve: &[LoadPoint]) -> Option<&LoadPoint> {
    let peak = curve.iter().max_by(|a, b| a.cut.total_cmp(&b.cut))?;
    let heaviest = curve.iter().min_by_key(|p| p.interval_s)?;
    (peak.interval_s < 3 && heaviest.cut < peak.cut).then_some(peak)
}

/// Whether the contention term carries the cut's rise with load: with it off (the
/// block model's SM sharing alone), the cut at the heaviest load run is below the cut
/// at the paper's medium load. `None`: not run, or the cut still rises without it.
pub fn contention_carries_the_rise(
    no_contention: &[LoadPoint],
) -> Option<(&LoadPoint, &LoadPoint)> {
    let medium = no_contention.iter().find(|p| p.interval_s == 5)?;
    let heaviest = no_contention.iter().min_by_key(|p| p.interval_s)?;
    (heaviest.interval_s < 5 && heaviest.cut < medium.cut).then_some((medium, heaviest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(interval_s: u64, cut: f64) -> LoadPoint {
        LoadPoint { interval_s, mean_normalized: [1.0, 1.0 - cut], cut, node_over: 0.5 }
    }

    /// The peak counts only beyond the paper's heavy load and where the cut then falls.
    #[test]
    fn a_peak_counts_beyond_the_papers_loads_and_where_the_cut_falls() {
        let turns = [point(7, -0.03), point(5, 0.05), point(3, 0.1), point(2, 0.2), point(1, 0.1)];
        assert_eq!(peak_beyond_the_papers(&turns).map(|p| p.interval_s), Some(2));
        let rises = [point(7, -0.03), point(5, 0.05), point(3, 0.1), point(2, 0.2), point(1, 0.3)];
        assert!(peak_beyond_the_papers(&rises).is_none(), "no turn");
        let papers = [point(7, -0.03), point(5, 0.2), point(3, 0.1), point(2, 0.05), point(1, 0.0)];
        assert!(peak_beyond_the_papers(&papers).is_none(), "the paper's shape already");
    }

    /// The contention carries the rise only if, without it, the heaviest load's cut is
    /// below medium's.
    #[test]
    fn the_contention_carries_the_rise_only_if_the_cut_falls_without_it() {
        let falls = [point(5, 0.08), point(1, 0.02)];
        assert_eq!(
            contention_carries_the_rise(&falls).map(|(m, h)| (m.cut, h.cut)),
            Some((0.08, 0.02))
        );
        assert!(contention_carries_the_rise(&[point(5, 0.08), point(1, 0.1)]).is_none());
        assert!(contention_carries_the_rise(&[]).is_none());
    }
}
