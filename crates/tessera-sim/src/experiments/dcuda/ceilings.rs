//! Issue 57 item 6, the claims whose cause was "not identified": what any policy could
//! reach at all on our applications and arrival orders, against what each claim asks.
//! Each reading is a rule fixed before the run that first judged it (2026-12-04, third
//! session), and says nothing when its numbers do not bear it out:
//!
//! - `fig11-utilization`: the most utilization any placement could give at each of
//!   DCUDA's samples is the node's summed demand spread evenly, at most the GPUs'
//!   capacity ([`RunResult::utilization_ceiling`], an upper bound). When that ceiling
//!   over least-loaded's utilization is below the claim's threshold, no balancer could
//!   make the claim hold: the cause is the load.
//! - `fig13b-fairness`: Jain's index is at most 1, so no policy raises least-loaded's
//!   index by more than 1 / index - 1. Below the claim's threshold, least-loaded is
//!   already too fair here for the claim to hold.
//! - `fig12-stable`: each order's load as offered, independent of any policy (the share
//!   of its span during which the applications present, each for its solo time from its
//!   arrival, demand more than the node's GPUs). When DCUDA's run time per order follows
//!   it (correlation at least [`ORDER_LOAD_CORRELATION`]), the spread between orders is
//!   the orders' own.

use super::*;

/// The least correlation, over the orders, between an order's offered load and DCUDA's
/// mean run time at it for the spread to be called the orders' own.
pub const ORDER_LOAD_CORRELATION: f64 = 0.6;

/// The least value a claim's test accepts, where it is a bound from below.
fn least_accepted(r: &DcudaResults, id: &str) -> Option<f64> {
    match r.claims.iter().find(|c| c.id == id)?.test {
        Test::AtLeast { paper, tolerance } => Some(paper - tolerance),
        _ => None,
    }
}

/// `fig11-utilization`'s reading, when the ceiling rules the claim out.
pub(super) fn utilization_cause(r: &DcudaResults) -> Option<String> {
    let (ll, dc) = (r.summary("least-loaded", "medium")?, r.summary("dcuda", "medium")?);
    let threshold = least_accepted(r, "fig11-utilization")?;
    let bound = dc.utilization_ceiling / ll.utilization - 1.0;
    (bound < threshold).then(|| {
        format!(
            "At medium load the most utilization any placement could give at DCUDA's samples \
             (the node's summed demand spread evenly over its GPUs, at most their capacity; \
             an upper bound, applications being indivisible) is {}, against least-loaded's \
             {}: no placement of DCUDA's runs could raise utilization by more than {}, below \
             the {} the claim asks. DCUDA reaches {}. At least-loaded's own samples the \
             ceiling is {}: §4.3's utilization counts placed demand, which overlaps longer \
             the slower the applications run, and DCUDA runs them faster. The cause is that \
             measure with our load: DCUDA's faster runs leave less demand to place, so its \
             balancing cannot show the claim's gain in it.",
            pct(dc.utilization_ceiling),
            pct(ll.utilization),
            pct(bound),
            pct(threshold),
            pct(dc.utilization),
            pct(ll.utilization_ceiling)
        )
    })
}

/// `fig13b-fairness`'s reading, when the index's ceiling rules the claim out.
pub(super) fn fairness_cause(r: &DcudaResults) -> Option<String> {
    let ll = r.summary("least-loaded", "medium")?;
    let threshold = least_accepted(r, "fig13b-fairness")?;
    let bound = 1.0 / ll.jain - 1.0;
    (bound < threshold).then(|| {
        format!(
            "Least-loaded's Jain index is already {:.3} at medium load, so no policy can raise \
             it by more than {} (to 1), below the {} the claim asks (the paper's least-loaded \
             was near 1 / 1.121 = 0.892). The cause is least-loaded's fairness in our model, \
             not DCUDA's.",
            ll.jain,
            pct(bound),
            pct(threshold)
        )
    })
}

/// Share of order `k`'s span (from the first arrival to the last solo end) during which
/// the applications present, each for its solo time from its arrival, demand more than
/// the node's GPUs: the order's load as offered, before any policy runs it.
pub fn offered_over_node(apps: &[App], seed: u64, k: usize, interval_s: u64) -> f64 {
    let order = arrival_order(apps.len(), seed, k);
    let mut edges: Vec<(f64, f64)> = Vec::with_capacity(2 * order.len());
    for (i, &a) in order.iter().enumerate() {
        let start = (i as u64 * interval_s) as f64;
        let d = apps[a].mean_demand();
        edges.push((start, d));
        edges.push((start + apps[a].solo_s, -d));
    }
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let (mut demand, mut over, mut last) = (0.0, 0.0, 0.0);
    for (t, d) in &edges {
        if demand > GPUS as f64 + 1e-9 {
            over += t - last;
        }
        demand += d;
        last = *t;
    }
    let span = edges.last().map_or(0.0, |e| e.0);
    if span > 0.0 { over / span } else { 0.0 }
}

/// Pearson's correlation of two equally long series (`None` when either is constant).
fn correlation(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len()) as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// `fig12-stable`'s reading, when the orders' offered load carries DCUDA's spread.
pub(super) fn stability_cause(r: &DcudaResults) -> Option<String> {
    let interval = r.config.loads.iter().find(|l| l.name == "medium")?.interval_s;
    let runs: Vec<&RunResult> = r.runs_of("dcuda", "medium").collect();
    if runs.len() < 3 {
        return None;
    }
    let offered: Vec<f64> =
        runs.iter().map(|x| offered_over_node(&r.apps, r.config.seed, x.order, interval)).collect();
    let time: Vec<f64> = runs.iter().map(|x| x.mean_normalized).collect();
    let rho = correlation(&offered, &time)?;
    if rho < ORDER_LOAD_CORRELATION {
        return None;
    }
    let by_time = |a: &usize, b: &usize| time[*a].total_cmp(&time[*b]);
    let (slow, fast) = ((0..runs.len()).max_by(by_time)?, (0..runs.len()).min_by(by_time)?);
    let ll: Vec<f64> = r.runs_of("least-loaded", "medium").map(|x| x.mean_normalized).collect();
    Some(format!(
        "The orders differ in the load they offer: the share of an order's span during which \
         its applications, each for its solo time from its arrival, demand more than the \
         node's GPUs, computed before any policy runs, ranges from {} to {} over the {} \
         orders, and DCUDA's mean run time follows it (correlation {:.2}): the slowest order \
         ({:.2}x solo) offers the node more than its GPUs for {} of its span, the fastest \
         ({:.2}x) for {}. Least-loaded's times spread {} over the same orders. The cause is \
         the orders' load, not DCUDA's instability.",
        pct(offered.iter().copied().fold(f64::MAX, f64::min)),
        pct(offered.iter().copied().fold(f64::MIN, f64::max)),
        runs.len(),
        rho,
        time[slow],
        pct(offered[slow]),
        time[fast],
        pct(offered[fast]),
        pct(super::judge::spread(&ll))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_is_pearsons() {
        assert_eq!(correlation(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).map(|c| c.round()), Some(1.0));
        assert_eq!(correlation(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).map(|c| c.round()), Some(-1.0));
        assert_eq!(correlation(&[1.0, 1.0, 1.0], &[3.0, 2.0, 1.0]), None);
        let c = correlation(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((c - 0.8).abs() < 1e-12, "{c}");
    }
}
