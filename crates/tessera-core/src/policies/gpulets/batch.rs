//! The batch rule and the sizing steps, as pure functions of a model's latency
//! profile L(batch, partition): the largest batch meeting an SLO, the rate a gpu-let
//! of a size serves, MINREQUIREDPARTITION and MAXEFFICIENTPARTITION (the knee).

/// A model's profiled latency: L(batch, partition %) in ms, `None` where not profiled.
pub trait LatencyProfile {
    /// Latency of one batch of `batch` requests in a gpu-let of `percent` of a GPU.
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64>;
}

/// The largest batch gpu-lets' scheduler uses (its authors search every batch 1-32).
pub const MAX_BATCH: u32 = 32;

/// The batch rule of gpu-lets' scheduler as its authors built it. §2.2: a request's
/// latency is the time its batch takes to form plus the time the batch runs; Table 4
/// sets each SLO at twice the batch-32 run. A model given `rate` req/s at batch `batch`
/// whose scheduled latency (profiled, times the margin and the interference) is
/// `latency_ms` keeps up when a batch runs within the time the next one takes to fill,
/// and meets its SLO when fill time plus run time does. A gpu-let given its full rate
/// fills a batch in exactly its run time: the run, doubled, within the SLO. A batch of
/// one does not wait to form: it waits at most for the batch ahead of it.
pub fn batch_meets_slo(batch: u32, latency_ms: f64, rate: f64, slo_ms: f64) -> bool {
    const EPS: f64 = 1e-9;
    if rate <= 0.0 {
        return 2.0 * latency_ms <= slo_ms * (1.0 + EPS);
    }
    let fill = f64::from(batch) * 1000.0 / rate;
    let keeps_up = latency_ms <= fill * (1.0 + EPS);
    let wait = if batch == 1 { latency_ms } else { fill.max(latency_ms) };
    keeps_up && latency_ms + wait <= slo_ms * (1.0 + EPS)
}

/// A model's batch in a gpu-let, its scheduled latency there, and the rate it is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchFit {
    /// Requests per batch.
    pub batch: u32,
    /// The batch's scheduled latency, ms: profiled, times the margin and interference.
    pub latency_ms: f64,
    /// The rate given, req/s.
    pub rate: f64,
}

/// The scheduled latency of `batch` in a gpu-let of `percent`: the profile's, times
/// [`Options::latency_margin`] and the interference factor `factor` gives at that batch.
pub(super) fn scheduled_ms(
    profile: &dyn LatencyProfile,
    opts: &Options,
    batch: u32,
    percent: u32,
    factor: &dyn Fn(u32) -> f64,
) -> Option<f64> {
    Some(profile.latency_ms(batch, percent)? * opts.latency_margin * factor(batch))
}

/// A gpu-let of `percent` given its full throughput: the largest batch whose scheduled
/// latency, doubled, fits `slo_ms`, and the rate it serves (one batch per run).
pub fn saturated(
    profile: &dyn LatencyProfile,
    opts: &Options,
    percent: u32,
    slo_ms: f64,
    factor: &dyn Fn(u32) -> f64,
) -> Option<BatchFit> {
    largest_batch(profile, opts, percent, factor, |b, l| {
        (2.0 * l <= slo_ms).then(|| f64::from(b) * 1000.0 / l)
    })
}

/// The batch and rate for `wanted` req/s in a gpu-let of `percent`: the saturated fit
/// when its whole throughput is no more than `wanted`; otherwise the gpu-let is partly
/// loaded, given all of `wanted`, at the largest batch that [`batch_meets_slo`] at that
/// rate. `None` when no batch does.
pub fn fit_batch(
    profile: &dyn LatencyProfile,
    opts: &Options,
    percent: u32,
    slo_ms: f64,
    wanted: f64,
    factor: &dyn Fn(u32) -> f64,
) -> Option<BatchFit> {
    let sat = saturated(profile, opts, percent, slo_ms, factor)?;
    if sat.rate <= wanted {
        return Some(sat);
    }
    largest_batch(profile, opts, percent, factor, |b, l| {
        batch_meets_slo(b, l, wanted, slo_ms).then_some(wanted)
    })
}

/// The largest batch of `opts.batches` for which `rate_if_fits(batch, scheduled
/// latency)` gives a rate, as a [`BatchFit`].
fn largest_batch(
    profile: &dyn LatencyProfile,
    opts: &Options,
    percent: u32,
    factor: &dyn Fn(u32) -> f64,
    rate_if_fits: impl Fn(u32, f64) -> Option<f64>,
) -> Option<BatchFit> {
    opts.batches
        .iter()
        .filter_map(|&b| {
            let l = scheduled_ms(profile, opts, b, percent, factor)?;
            rate_if_fits(b, l).map(|rate| BatchFit { batch: b, latency_ms: l, rate })
        })
        .max_by_key(|f| f.batch)
}

/// The request rate (per second) a gpu-let of `percent` serves alone within `slo_ms`:
/// its [`saturated`] fit's.
pub fn max_rate(profile: &dyn LatencyProfile, opts: &Options, percent: u32, slo_ms: f64) -> f64 {
    saturated(profile, opts, percent, slo_ms, &|_| 1.0).map_or(0.0, |f| f.rate)
}

/// Line 10, MINREQUIREDPARTITION: the smallest size (of `opts.sizes`, ascending) whose
/// gpu-let serves `rate` within `slo_ms`; `None` if none does (the model then needs
/// several gpu-lets).
pub fn min_required_partition(
    profile: &dyn LatencyProfile,
    opts: &Options,
    rate: f64,
    slo_ms: f64,
) -> Option<u32> {
    opts.sizes.iter().copied().find(|&p| max_rate(profile, opts, p, slo_ms) >= rate)
}

/// Line 9, MAXEFFICIENTPARTITION: the knee of the rate a gpu-let serves against its
/// size — the profiled size where the curve's curvature is largest (Figure 8), with
/// both axes scaled to 0..1 so that the knee does not depend on units. Sizes that serve
/// nothing within the SLO are left out; with fewer than three points there is no
/// interior to bend, and the largest size is the answer.
pub fn max_efficient_partition(
    profile: &dyn LatencyProfile,
    opts: &Options,
    slo_ms: f64,
) -> Option<u32> {
    let curve: Vec<(f64, f64)> = opts
        .sizes
        .iter()
        .map(|&p| (f64::from(p), max_rate(profile, opts, p, slo_ms)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    knee(&curve).map(|x| x.round() as u32)
}

/// [`AuthorsCode::size_per_percent`]: the size whose gpu-let serves the most requests
/// per percent of GPU, or a larger one whose rate per percent is within `threshold` of
/// that (the largest such).
pub fn size_per_percent(
    profile: &dyn LatencyProfile,
    opts: &Options,
    slo_ms: f64,
    threshold: f64,
) -> Option<u32> {
    let per: Vec<(u32, f64)> = opts
        .sizes
        .iter()
        .map(|&p| (p, max_rate(profile, opts, p, slo_ms) / f64::from(p)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    let best = per.iter().map(|(_, r)| *r).fold(0.0, f64::max);
    per.iter().filter(|(_, r)| r * threshold >= best).map(|(p, _)| *p).max()
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

/// The sizes and batches the scheduler may use, and the authors' margins.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// GPUs of the server.
    pub gpus: usize,
    /// Partition sizes, percent, ascending (the paper: 20, 40, 50, 60, 80, 100).
    pub sizes: Vec<u32>,
    /// Batch sizes the scheduler may choose, ascending (the authors: every one of 1-32).
    pub batches: Vec<u32>,
    /// Factor on every profiled latency when scheduling (the authors' "latency ratio",
    /// 1.1 in every configuration they publish): room for what the profile misses.
    pub latency_margin: f64,
    /// Models one gpu-let may serve in turn (the authors' "max model", 3).
    pub max_models: usize,
    /// Where the authors' code departs from the paper's Algorithm 1; none of it in
    /// [`Options::paper`] (issue 57 runs each as a named variant).
    pub authors: AuthorsCode,
}

/// The authors' code's departures from Algorithm 1 as the paper writes it, as a
/// review of their scheduler described them (issue 57 item 3). Off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AuthorsCode {
    /// Models in ascending order of rate × SLO, where the paper takes them by rate,
    /// descending.
    pub order_rate_slo: bool,
    /// The efficient size by rate per percent of GPU instead of the knee (Figure 8): the
    /// size whose gpu-let serves the most per percent, a larger one preferred while its
    /// rate per percent is within this factor of the best (`Some(1.05)`). Our reading of
    /// "the largest throughput gain per percent, 1.05 threshold".
    pub size_per_percent: Option<f64>,
    /// A model's rate still to place at most this many req/s is left unplaced (15).
    pub residue_slack: f64,
    /// The share of a model's rate a neighbour's interference may take from it without
    /// the lost rate being placed again (0.15: the schedule is accepted at 85%).
    pub interference_loss: f64,
}

impl AuthorsCode {
    /// Every departure at the values the review gives.
    pub const ALL: AuthorsCode = AuthorsCode {
        order_rate_slo: true,
        size_per_percent: Some(1.05),
        residue_slack: 15.0,
        interference_loss: 0.15,
    };
}

impl Options {
    /// gpu-lets as its authors run it on `gpus` GPUs: partitions of 20, 40, 50, 60, 80
    /// and 100%, every batch 1-32, latencies scheduled at 1.1 times the profile's, at
    /// most three models per gpu-let.
    pub fn paper(gpus: usize) -> Options {
        Options {
            gpus,
            sizes: vec![20, 40, 50, 60, 80, 100],
            batches: (1..=MAX_BATCH).collect(),
            latency_margin: 1.1,
            max_models: 3,
            authors: AuthorsCode::default(),
        }
    }
}
