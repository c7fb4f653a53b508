//! gpu-lets' claims judged on an experiment's numbers: each profile set's (served
//! violations, schedulability, decision time) and the throughput's (against the
//! baselines and the ideal, at the maximum rate).

use super::*;

/// The claims one set's results are judged by.
pub(super) fn set_claims(r: &SetResults) -> Vec<Claim> {
    let sched = &r.schedulability;
    // of the scenarios whole-GPU squishy bin packing cannot schedule, the share that
    // evenly split gpu-lets make schedulable ("most", Figure 4)
    let rescued = (sched.scenarios > sched.sbp).then(|| {
        sched.sbp_split.saturating_sub(sched.sbp) as f64 / (sched.scenarios - sched.sbp) as f64
    });
    let scope = format!("{} models, 4 GPUs", r.set);
    vec![
        Claim::judge(
            &format!("fig4-{}", r.set),
            &scope,
            "§3.1, Figure 4",
            "GPU partitioning (two even gpu-lets per GPU) makes the scenarios squishy bin packing \
             cannot schedule schedulable: \"most\" in general, and in the paper's constrained setup \
             \"we could completely eliminate unschedulable scenarios\" (judged: all, as in the \
             paper's setup; issue 57: \"most\" read as half could not fail)",
            Test::AtLeast { paper: 1.0, tolerance: 0.0 },
            Unit::Percent,
            rescued,
            format!(
                "SBP schedules {} of {}, SBP on split gpu-lets {}",
                sched.sbp, sched.scenarios, sched.sbp_split
            ),
        ),
        Claim::judge(
            &format!("fig13-{}", r.set),
            &format!(
                "{scope}, every scenario gpulet+int schedules, {} s each",
                short_seconds(r.every.seconds)
            ),
            "§5, Figure 13",
            "gpulet+int keeps SLO violations at or below 1% at every rate it calls schedulable \
             (judged on every scenario it schedules, issue 57; before, on the five heaviest)",
            Test::AtMost { paper: 0.01, tolerance: 0.0 },
            Unit::Percent,
            (r.every.served > 0).then_some(r.every.worst),
            format!(
                "the worst of {} served scenarios ({:?} req/s); {} over 1%, mean {}; those {} \
                 served again in the planner's own model (reference): {} over 1%, worst {}",
                r.every.served,
                r.every.worst_rates,
                r.every.over_1pct,
                pct(r.every.mean),
                r.every.over_1pct,
                r.every.reference_over_1pct,
                pct(r.every.reference_worst)
            ),
        ),
        Claim::judge(
            &format!("fig15-{}", r.set),
            &scope,
            "§5, Figure 15",
            "gpulet+int schedules only 18 of 1,023 scenarios (1.8%) fewer than the ideal scheduler \
             (two-sided, issue 57; ±1.5 points since 2026-12-04, when ±2 reached below zero)",
            Test::Near { paper: 0.018, tolerance: 0.015 },
            Unit::Percent,
            Some(sched.ideal.saturating_sub(sched.gpulet_int) as f64 / sched.scenarios as f64),
            format!(
                "ideal schedules {}, gpulet+int {} of {} ({} only by ideal, {} only by gpulet+int)",
                sched.ideal,
                sched.gpulet_int,
                sched.scenarios,
                sched.ideal_not_gpulet_int,
                sched.gpulet_int_not_ideal
            ),
        ),
    ]
}

fn short_seconds(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").unwrap_or(&s).to_string()
}

/// The claims of Figures 12, 13 (at the maximum rate) and 16.
pub(super) fn throughput_claims(
    found: &[throughput::MixThroughput],
    at_max: &[AtMaxRate],
) -> Vec<Claim> {
    use throughput::Scheduler::{Gpulet, GpuletInt, GuidedSelfTuning, Ideal, Sbp};
    let scope = "paper models, 4 GPUs, game, traffic and Table 5's mixes";
    let gain = |over: throughput::Scheduler| {
        move |t: &throughput::MixThroughput| t.served_of(GpuletInt) / t.served_of(over) - 1.0
    };
    let game = found.iter().find(|t| t.mix.name == "game");
    let (lo_mix, lo) = found
        .iter()
        .map(|t| (t.mix.name.as_str(), t.of(GpuletInt) / t.of(Ideal)))
        .filter(|(_, x)| x.is_finite())
        .fold(("none", f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
    vec![
        Claim::judge(
            "fig12-sbp",
            scope,
            "§6.2, Figure 12",
            "gpulet+int's maximum throughput is 102.6% higher than SBP's on average (two-sided, \
             issue 57)",
            Test::Near { paper: 1.026, tolerance: 0.3 },
            Unit::Percent,
            mean_over(found, gain(Sbp)),
            "mean over the workloads where SBP serves any rate within 1%".into(),
        ),
        Claim::judge(
            "fig12-game",
            "game, paper models, 4 GPUs",
            "§6.2",
            "gpulet+int serves game at 1,502 req/s against SBP's 720 (2.09x; two-sided, issue 57)",
            Test::RatioNear { paper: 1502.0 / 720.0, factor: 1.25 },
            Unit::Ratio,
            game.map(|t| t.served_of(GpuletInt) / t.served_of(Sbp)).filter(|x| x.is_finite()),
            game.map_or("game not run".into(), |t| {
                format!(
                    "served within 1%: gpulet+int {:.0} req/s, SBP {:.0}",
                    t.served_of(GpuletInt),
                    t.served_of(Sbp)
                )
            }),
        ),
        Claim::judge(
            "fig12-gslice",
            scope,
            "§6.2, Figure 12",
            "gpulet+int's maximum throughput is 74.8% higher than guided self-tuning's on average \
             (two-sided, issue 57)",
            Test::Near { paper: 0.748, tolerance: 0.3 },
            Unit::Percent,
            mean_over(found, gain(GuidedSelfTuning)),
            "mean over the workloads where guided self-tuning serves any rate within 1%".into(),
        ),
        Claim::judge(
            "fig12-int-cost",
            scope,
            "§6.2, Figure 12",
            "gpulet, ignoring interference, reaches only 3.4% more throughput than gpulet+int on average",
            // two-sided (issue 57): one-sided, a gain of the other sign (-11.1%) passed
            Test::Near { paper: 0.034, tolerance: 0.05 },
            Unit::Percent,
            mean_over(found, |t| t.served_of(Gpulet) / t.served_of(GpuletInt) - 1.0),
            "mean over the workloads, rates served within 1%".into(),
        ),
        Claim::judge(
            "fig16",
            scope,
            "§6.3, Figure 16",
            "gpulet+int reaches 92.3% of the ideal scheduler's maximum rate on average (traffic \
             lowest, 87.7%; two-sided, issue 57)",
            Test::Near { paper: 0.923, tolerance: 0.05 },
            Unit::Percent,
            mean_over(found, |t| t.of(GpuletInt) / t.of(Ideal)),
            format!("schedulable rates; lowest: {lo_mix}, {}", pct(lo)),
        ),
        Claim::judge(
            "fig13-max-rate",
            "paper models, 4 GPUs, each workload at gpulet+int's maximum rate, 30 s",
            "§6.2, Figure 13",
            "gpulet+int keeps SLO violations at or below 1% at its maximum schedulable rate",
            Test::AtMost { paper: 0.01, tolerance: 0.0 },
            Unit::Percent,
            at_max.iter().filter_map(|a| a.gpulet_int.1).reduce(f64::max),
            format!("the worst of {} workloads", at_max.len()),
        ),
        Claim::judge(
            "fig13-every-rate",
            "paper models, 4 GPUs, each workload at 20, 40, 60, 80 and 100% of gpulet+int's \
             maximum rate, 30 s each",
            "§6.2, Figure 13",
            "gpulet+int keeps SLO violations at or below 1% at every rate it calls schedulable \
             (rates raised step by step until it does not)",
            Test::AtMost { paper: 0.01, tolerance: 0.0 },
            Unit::Percent,
            at_max
                .iter()
                .flat_map(|a| a.ramp.iter().filter_map(|(_, v)| *v).chain(a.gpulet_int.1))
                .reduce(f64::max),
            format!(
                "the worst of {} served rates over {} workloads",
                at_max.iter().map(|a| a.ramp.len() + 1).sum::<usize>(),
                at_max.len()
            ),
        ),
    ]
}
