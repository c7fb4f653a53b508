//! DCUDA's claims judged on an experiment's numbers: each against the paper's value
//! where it gives one, the fitted ones (the contention, the power model) marked as
//! inputs and not counted.

use super::*;

/// Relative change `ours / base - 1`.
/// Largest over smallest, less one: how far a set of run times spreads (`fig12-stable`).
pub(super) fn spread(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max) / v.iter().copied().fold(f64::INFINITY, f64::min) - 1.0
}

fn change(ours: f64, base: f64) -> f64 {
    ours / base - 1.0
}

/// Per order at `load`: (least-loaded, DCUDA) of `f`.
pub(super) fn paired(
    r: &DcudaResults,
    load: &str,
    f: impl Fn(&RunResult) -> f64,
) -> Vec<(f64, f64)> {
    let ll: Vec<&RunResult> = r.runs_of("least-loaded", load).collect();
    let dc: Vec<&RunResult> = r.runs_of("dcuda", load).collect();
    ll.iter().filter_map(|a| dc.iter().find(|b| b.order == a.order).map(|b| (f(a), f(b)))).collect()
}

/// The paper's claims, judged on the results. Tolerances were fixed before reading our
/// numbers.
pub(super) fn judge(r: &DcudaResults) -> Vec<Claim> {
    let medium = "medium";
    let (ll, dc) = match (r.summary("least-loaded", medium), r.summary("dcuda", medium)) {
        (Some(a), Some(b)) => (a.clone(), b.clone()),
        _ => return Vec::new(),
    };
    let scope = format!("{} orders, medium load (5 s), 4 GPUs", r.config.orders);
    let exec = paired(r, medium, |x| x.mean_normalized);
    let best_cut = exec.iter().map(|(a, b)| 1.0 - b / a).fold(f64::NEG_INFINITY, f64::max);
    let dc_exec: Vec<f64> = exec.iter().map(|x| x.1).collect();
    let spread = spread(&dc_exec);
    let order0 = r.runs_of("dcuda", medium).find(|x| x.order == 0);
    let ll0 = r.runs_of("least-loaded", medium).find(|x| x.order == 0);
    let worst_gpu =
        |x: Option<&RunResult>| x.map(|x| x.bands.iter().map(|b| b[2]).fold(0.0, f64::max));
    let cut_at = |load: &str| {
        let p = paired(r, load, |x| x.mean_normalized);
        mean(p.iter().map(|(a, b)| 1.0 - b / a))
    };
    let energy_saving =
        |load: &str| match (r.summary("least-loaded", load), r.summary("dcuda", load)) {
            (Some(a), Some(b)) => Some(1.0 - b.energy_j / a.energy_j),
            _ => None,
        };
    let (light, heavy) = (cut_at("light"), cut_at("heavy"));
    let mut c = vec![
        Claim::judge(
            "fig2-imbalance",
            &format!("least-loaded, {scope}"),
            "§2.3, Figure 2",
            "with least-loaded placement, one GPU is overloaded while another is under 50% for 41.7% of the time",
            Test::Near { paper: 0.417, tolerance: 0.15 },
            Unit::Percent,
            Some(ll.imbalanced),
            "share of the monitor's 100 ms samples, mean over orders".into(),
        ),
        Claim::judge(
            "fig10-dcuda-overload",
            "order 0, medium load, 4 GPUs",
            "§4.3, Figure 10(b)",
            "under DCUDA every GPU's overloaded time stays within 6% (least-loaded: 14.3% to 51.4%)",
            Test::AtMost { paper: 0.06, tolerance: 0.02 },
            Unit::Percent,
            worst_gpu(order0),
            format!(
                "the most overloaded GPU; least-loaded's most overloaded GPU {}",
                worst_gpu(ll0).map_or("not run".into(), |x| Unit::Percent.show(x))
            ),
        ),
        Claim::judge(
            "fig11-utilization",
            &scope,
            "§4.3, Figure 11(a)",
            "DCUDA improves GPU utilization by 14.6% over least-loaded on average",
            Test::AtLeast { paper: 0.146, tolerance: 0.07 },
            Unit::Percent,
            Some(change(dc.utilization, ll.utilization)),
            format!(
                "mean utilization by demand {} against {}; cores in use {} against {}, \
                 busy time {} against {}",
                Unit::Percent.show(dc.utilization),
                Unit::Percent.show(ll.utilization),
                Unit::Percent.show(dc.cores_used),
                Unit::Percent.show(ll.cores_used),
                Unit::Percent.show(dc.busy),
                Unit::Percent.show(ll.busy)
            ),
        ),
        Claim::judge(
            "fig11-overload",
            &scope,
            "§4.3, Figure 11(b)",
            "DCUDA reduces the overloaded time of GPUs by 78.3% on average",
            Test::AtLeast { paper: 0.783, tolerance: 0.1 },
            Unit::Percent,
            Some(1.0 - dc.overloaded / ll.overloaded),
            format!(
                "overloaded {} of the time against {}",
                Unit::Percent.show(dc.overloaded),
                Unit::Percent.show(ll.overloaded)
            ),
        ),
        Claim::judge(
            "fig12-exec",
            &scope,
            "§4.4, Figure 12",
            "DCUDA reduces the average execution time of applications by up to 42.1%",
            Test::AtLeast { paper: 0.421, tolerance: 0.15 },
            Unit::Percent,
            Some(best_cut),
            format!(
                "the largest cut over the orders; mean normalized time {:.2} against {:.2}",
                dc.mean_normalized, ll.mean_normalized
            ),
        ),
        Claim::judge(
            "fig12-stable",
            &scope,
            "§4.4",
            "under DCUDA the average execution time differs by at most 20% between orders",
            Test::AtMost { paper: 0.2, tolerance: 0.05 },
            Unit::Percent,
            Some(spread),
            "largest over smallest mean normalized time, less one".into(),
        ),
        Claim::judge(
            "fig13a-dcuda",
            &scope,
            "§4.5, Figure 13(a)",
            "more than 80% of applications stay within 20% of their solo time under DCUDA",
            Test::AtLeast { paper: 0.8, tolerance: 0.05 },
            Unit::Percent,
            Some(dc.qos),
            format!("least-loaded {}", Unit::Percent.show(ll.qos)),
        ),
        {
            let c = Claim::judge(
                "fig13a-least-loaded",
                &scope,
                "§4.5, Figure 13(a)",
                "fewer than 60% of applications stay within 20% of their solo time under least-loaded",
                Test::AtMost { paper: 0.6, tolerance: 0.05 },
                Unit::Percent,
                Some(ll.qos),
                "mean over orders".into(),
            );
            if r.contention_fit.is_some() {
                c.input("the contention constant is fitted on it")
            } else {
                c
            }
        },
        Claim::judge(
            "fig13b-fairness",
            &scope,
            "§4.5, Figure 13(b)",
            "DCUDA improves Jain's fairness index by 12.1% on average, to nearly 1",
            Test::AtLeast { paper: 0.121, tolerance: 0.06 },
            Unit::Percent,
            Some(change(dc.jain, ll.jain)),
            format!("index {:.3} against {:.3}", dc.jain, ll.jain),
        ),
        Claim::judge(
            "fig14-medium-best",
            &format!("{} orders per load", r.config.orders),
            "§4.6, Figure 14",
            "the cut in execution time is largest at medium load",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            Some(cut_at(medium) - light.max(heavy)),
            format!(
                "mean cut light {}, medium {}, heavy {} (ours: medium less the larger other)",
                Unit::Percent.show(light),
                Unit::Percent.show(cut_at(medium)),
                Unit::Percent.show(heavy)
            ),
        ),
    ];
    // §2.2: the setting's check; direction only ("< 2%"), judged with half a point
    let worst = r.pairs.iter().flat_map(|p| p.slowdown).fold(f64::NEG_INFINITY, f64::max);
    c.push(
        Claim::judge(
            "s2.2-light-pairs",
            &format!(
                "every pair of the {LIGHT_APPS} applications of least mean demand on one GPU, the \
             second started half an iteration after the first"
            ),
            "§2.2",
            "lightweight applications running concurrently on one GPU slow by less than 2% \
         (direction only: a bound)",
            Test::AtMost { paper: 0.02, tolerance: 0.005 },
            Unit::Percent,
            (!r.pairs.is_empty()).then_some(worst),
            format!("the largest slowdown over {} pairs of {}", r.pairs.len(), light_names(r)),
        )
        // not counted (issue 57 item 8's audit): the four of least mean demand spend a few
        // percent of their time in kernels, so two of them seldom meet on the GPU at all
        .structural(
            "the applications of least mean demand are in kernels a few percent of their time \
         (0.4-7% for three of them), so two of them seldom meet on the GPU and the bound \
         cannot fail by much",
        ),
    );
    for (load, paper_ll, _) in TABLE_2 {
        // least-loaded's own energy: the medium load is what the first power step is
        // fitted on (an input); light and heavy check that fit out of sample
        let ll_energy = r.summary("least-loaded", load).map(|a| a.energy_j);
        let claim = Claim::judge(
            &format!("table2-{load}-least-loaded-energy"),
            &format!("{} orders, {load} load, least-loaded", r.config.orders),
            "§4.6, Table 2",
            &format!(
                "least-loaded uses {paper_ll:.0} J at {load} load (judged within 10% of it: the \
                 power model's first step is fitted at medium load, the other loads check the fit)"
            ),
            Test::Near { paper: paper_ll, tolerance: 0.1 * paper_ll },
            Unit::Count,
            ll_energy,
            String::new(),
        );
        c.push(if load == "medium" {
            claim.input("the power model's first step is calibrated on this number")
        } else {
            // issue 57: fitted, not evidence
            claim.input(
                "it rests on constants of ours fitted to Table 2: the power model's first \
                 step (calibrated at medium load) and the 10% tolerance, chosen after a \
                 -6.9% deviation was known",
            )
        });
    }
    for (load, paper_ll, paper_dc) in TABLE_2 {
        let paper = 1.0 - paper_dc / paper_ll;
        c.push(Claim::judge(
            &format!("table2-{load}"),
            &format!("{} orders, {load} load", r.config.orders),
            "§4.6, Table 2",
            &format!(
                "DCUDA saves {:.1}% of least-loaded's energy at {load} load ({paper_ll:.0} J to {paper_dc:.0} J)",
                100.0 * paper
            ),
            // relative to the paper's value: a saving of the wrong sign never holds
            Test::Near { paper, tolerance: 0.5 * paper },
            Unit::Percent,
            energy_saving(load),
            match (r.summary("least-loaded", load), r.summary("dcuda", load)) {
                (Some(a), Some(b)) => format!("{:.0} J to {:.0} J", a.energy_j, b.energy_j),
                _ => "not run".into(),
            },
        )
        .input(
            "it rests on constants of ours, fitted, not evidence (issue 57): the power step of \
             each further co-located application (Figure 1's values are not in the text) and \
             the band of half the paper's saving",
        ));
    }
    c
}

/// The names of the applications in §2.2's pairs.
pub(super) fn light_names(r: &DcudaResults) -> String {
    let mut ids: Vec<usize> = r.pairs.iter().flat_map(|p| p.apps).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.iter()
        .filter_map(|i| r.apps.get(*i))
        .map(|a| a.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
