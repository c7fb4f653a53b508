//! FairGV's claims judged on an experiment's numbers: each two-sided where the paper
//! gives a value, each mechanism named, the structural ones marked and not counted.

use super::*;

/// The paper's claims judged on `r`'s numbers (public so that a test can judge
/// numbers it changed).
pub fn judge(r: &FairgvResults) -> Vec<Claim> {
    let worst = |setup: &str, sched: &str, f: fn(&Row) -> f64, pick_max: bool| {
        let v = r.rows.iter().filter(|x| x.setup == setup && x.scheduler == sched).map(f);
        if pick_max { v.reduce(f64::max) } else { v.reduce(f64::min) }
    };
    let busy = |ratio: f64, sched: &str| {
        r.work_conserving
            .iter()
            .find(|x| x.sleep_ratio == ratio && x.scheduler == sched)
            .map(|x| x.gpu_busy)
    };
    let wc_gain = SLEEP_RATIOS
        .iter()
        .map(|q| Some(busy(*q, "FairGV")? - busy(*q, "FairGV non-WC")?))
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| v.into_iter().reduce(f64::min));
    let non_wc_fall = (|| Some(busy(0.5, "FairGV non-WC")? - busy(0.8, "FairGV non-WC")?))();
    let norm = |sched: &str, kernel: f64, pick: fn(f64, f64) -> f64| {
        r.collaborative
            .iter()
            .filter(|x| x.scheduler == sched && x.background_kernel_us == kernel)
            .map(|x| x.normalized_run_time)
            .reduce(pick)
    };
    let (small, large) =
        (BACKGROUND_KERNELS_US[0], BACKGROUND_KERNELS_US[BACKGROUND_KERNELS_US.len() - 1]);
    let rule_ok = r
        .slicing
        .rows
        .iter()
        .filter(|x| x.blocks_per_sub_kernel >= 1_500)
        .map(|x| x.ours_pct)
        .reduce(f64::max);
    let bigger_cheaper = {
        let of = |grid: u64, n: u64| {
            r.slicing
                .rows
                .iter()
                .find(|x| x.grid_blocks == grid && x.sub_kernels == n)
                .map(|x| x.ours_pct)
        };
        let pairs: Vec<(f64, f64)> = r
            .slicing
            .rows
            .iter()
            .filter(|x| x.grid_blocks == slicing::FIT_GRID && x.sub_kernels > 1)
            .filter_map(|x| Some((x.ours_pct, of(810_000, x.sub_kernels)?)))
            .collect();
        (!pairs.is_empty()).then(|| {
            pairs.iter().filter(|(small, big)| big <= small).count() as f64 / pairs.len() as f64
        })
    };
    let hs_srd1 = row(r, "non-congested", "SRD1", "Credit-hs").map(|x| x.overhead);
    let fg_srd1 = row(r, "non-congested", "SRD1", "FairGV").map(|x| x.overhead);
    // over the given benchmarks and schedulers of one setup: the extreme of `f`
    let over = |setup: &str, benches: &[&str], scheds: &[&str], f: fn(&Row) -> f64, max: bool| {
        let v = benches
            .iter()
            .flat_map(|b| scheds.iter().map(move |s| (*b, *s)))
            .map(|(b, s)| row(r, setup, b, s).map(f));
        let v: Option<Vec<f64>> = v.collect();
        v.and_then(|v| v.into_iter().reduce(if max { f64::max } else { f64::min }))
    };
    let credits = ["Credit-poll", "Credit-hs"];
    let interactive_gain = ["BS", "SRD1"]
        .iter()
        .map(|b| {
            let of = |s: &str| row(r, "non-congested", b, s).map(|x| x.mmr);
            of("Strict").zip(of("Credit-poll")).map(|(a, c)| a / c.max(1e-9))
        })
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| v.into_iter().reduce(f64::min));
    let fairgv_least = {
        let benches = ["MM", "HS", "BS", "SRD1"];
        let least = |b: &str| {
            let fg = row(r, "non-congested", b, "FairGV")?.overhead;
            let others = ["Credit-poll", "Credit-hs", "Strict"]
                .iter()
                .map(|s| row(r, "non-congested", b, s).map(|x| x.overhead))
                .collect::<Option<Vec<f64>>>()?;
            Some(others.iter().all(|o| fg <= *o))
        };
        benches
            .iter()
            .map(|b| least(b))
            .collect::<Option<Vec<bool>>>()
            .map(|v| v.iter().filter(|x| **x).count() as f64)
    };
    let congested_srd1 = |s: &str| row(r, "congested", "SRD1", s).map(|x| x.overhead);
    // two-sided (issue 57): the value furthest from `centre` over `values`
    let furthest = |values: Vec<f64>, centre: f64| {
        values
            .into_iter()
            .reduce(|a, b| if (b - centre).abs() > (a - centre).abs() { b } else { a })
    };
    let fairgv_furthest = furthest(
        r.collaborative
            .iter()
            .filter(|x| x.scheduler == "FairGV")
            .map(|x| x.normalized_run_time)
            .collect(),
        2.0,
    );
    // FairGV's rows of one setup: the value of `f` furthest from `centre`
    let fairgv_rows_furthest = |setup: &str, f: fn(&Row) -> f64, centre: f64| {
        furthest(
            r.rows.iter().filter(|x| x.setup == setup && x.scheduler == "FairGV").map(f).collect(),
            centre,
        )
    };
    let congested_overhead = fairgv_rows_furthest("congested", |x| x.overhead, 1.01);
    // Figure 7 / §5.2: each program alone, FairGV's run time over native's
    let standalone = fairgv_rows_furthest("non-congested", |x| x.standalone, 1.0);
    let switches = |setup: &str| {
        let of = |s: &str| row(r, setup, "SRD1", s).map(|x| x.switches_per_s);
        of("Credit-hs").zip(of("FairGV")).map(|(a, b)| a / b.max(1e-9))
    };
    // Figure 11 whole: Credit-poll's foreground slows as the background's kernels grow,
    // for both programs: the drops between consecutive sizes (more than 1%)
    let credit_drops = {
        let mut drops = 0usize;
        let mut seen = false;
        for fg in ["MM", "HS"] {
            let curve: Vec<f64> = BACKGROUND_KERNELS_US
                .iter()
                .filter_map(|k| {
                    r.collaborative
                        .iter()
                        .find(|x| {
                            x.scheduler == "Credit-poll"
                                && x.foreground == fg
                                && x.background_kernel_us == *k
                        })
                        .map(|x| x.normalized_run_time)
                })
                .collect();
            seen |= curve.len() == BACKGROUND_KERNELS_US.len();
            drops += curve.windows(2).filter(|w| w[1] < w[0] * 0.99).count();
        }
        seen.then_some(drops as f64)
    };
    // §5.4.4: under Strict, of two VMs on one core the higher-weight one does better
    // (its x, throughput over its fair share, is the higher), BS and SRD1
    let strict_favours_heavy = {
        let pairs: Vec<bool> = ["BS", "SRD1"]
            .iter()
            .filter_map(|b| row(r, "congested", b, "Strict"))
            .flat_map(|x| {
                x.normalized
                    .chunks(2)
                    .zip(x.weights.chunks(2))
                    .filter(|(_, w)| w.len() == 2 && w[0] != w[1])
                    .map(|(n, w)| if w[1] > w[0] { n[1] > n[0] } else { n[0] > n[1] })
                    .collect::<Vec<_>>()
            })
            .collect();
        (!pairs.is_empty())
            .then(|| pairs.iter().filter(|x| **x).count() as f64 / pairs.len() as f64)
    };
    let mut added = vec![
        Claim::judge(
            "fig8-credit-non-interactive-fair",
            "3 VMs on one core, weights 1:2:3, MM and HS, Credit-poll and Credit-hs",
            "§5.4.3, Figure 8",
            "for the non-interactive MM and HS, Credit-poll and Credit-hs achieve high fairness (>= 0.9 MMR)",
            Test::AtLeast { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            over("non-congested", &["MM", "HS"], &credits, |x| x.mmr, false),
            "the lowest MMR of the four".into(),
        ),
        Claim::judge(
            "fig8-credit-non-interactive-overhead",
            "3 VMs on one core, weights 1:2:3, MM and HS, Credit-poll and Credit-hs",
            "§5.4.3, Figure 8",
            "for MM and HS, Credit-poll and Credit-hs run with low overhead (<= 1)",
            Test::AtMost { paper: 1.0, tolerance: 0.03 },
            Unit::Ratio,
            over("non-congested", &["MM", "HS"], &credits, |x| x.overhead, true),
            "the highest overhead of the four".into(),
        )
        .structural(
            "MM and HS make almost no synchronous calls, so their VMs never wait on the GPU in \
             the model: the overhead is 1 whatever the scheduler",
        ),
        Claim::judge(
            "fig8-strict-unfair-non-interactive",
            "3 VMs on one core, weights 1:2:3, MM and HS, Strict",
            "§5.4.3, Figure 8",
            "Strict coscheduling fails to achieve reasonable fairness on the non-interactive MM and HS \
             (judged: below the 0.9 MMR the paper calls high fairness, on both)",
            Test::AtMost { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            over("non-congested", &["MM", "HS"], &["Strict"], |x| x.mmr, true),
            "Strict's higher MMR of MM and HS".into(),
        ),
        Claim::judge(
            "fig8-strict-interactive",
            "3 VMs on one core, weights 1:2:3, BS and SRD1, Strict and Credit-poll",
            "§5.4.3, Figure 8",
            "on the interactive BS and SRD1, Strict coscheduling dramatically improves fairness over \
             Credit-poll (direction only; judged: Strict's MMR at least 1.5x Credit-poll's on both)",
            Test::AtLeast { paper: 1.5, tolerance: 0.0 },
            Unit::Ratio,
            interactive_gain,
            "the smaller of BS's and SRD1's Strict MMR over Credit-poll's".into(),
        ),
        Claim::judge(
            "fig8-fairgv-least-overhead",
            "3 VMs on one core, weights 1:2:3, MM, HS, BS, SRD1",
            "§5.4.3, Figure 8",
            "FairGV runs with the least overhead among all schedulers (judged: on each of the 4 benchmarks)",
            Test::Near { paper: 4.0, tolerance: 0.0 },
            Unit::Count,
            fairgv_least,
            "benchmarks on which FairGV's overhead is at most every other scheduler's".into(),
        ),
        Claim::judge(
            "fig9-credit-hs-bs",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS, Credit-hs",
            "§5.4.4, Figure 9",
            "Credit-hs exhibits high fairness in the case of BS (judged: >= 0.9 MMR)",
            Test::AtLeast { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            row(r, "congested", "BS", "Credit-hs").map(|x| x.mmr),
            String::new(),
        ),
        Claim::judge(
            "fig9-credit-hs-srd1",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, SRD1, Credit-hs and FairGV",
            "§5.4.4, Figure 9",
            "Credit-hs's performance is not high in SRD1, which spends its time in vCPU context \
             switching (direction only; judged: overhead above FairGV's by at least 5%)",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            congested_srd1("Credit-hs").zip(congested_srd1("FairGV")).map(|(a, b)| a / b),
            "Credit-hs's overhead over FairGV's".into(),
        ),
        // the mechanism the paper names for both Credit-hs claims (issue 57)
        Claim::judge(
            "fig8-credit-hs-srd1-switches",
            "3 VMs on one core, SRD1, Credit-hs and FairGV",
            "§5.4.3, Figure 8",
            "the mechanism of Credit-hs's overhead on SRD1: frequent synchronous calls cause excessive \
             vCPU context switching (judged: Credit-hs switches vCPUs at least 1.05x as often as FairGV)",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            switches("non-congested"),
            "Credit-hs's vCPU switches per second over FairGV's".into(),
        ),
        Claim::judge(
            "fig9-credit-hs-srd1-switches",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, SRD1, Credit-hs and FairGV",
            "§5.4.4, Figure 9",
            "the mechanism of Credit-hs's low performance on SRD1: its yields turn into vCPU \
             context switches (judged: Credit-hs switches vCPUs at least 1.05x as often as FairGV)",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            switches("congested"),
            "Credit-hs's vCPU switches per second over FairGV's".into(),
        ),
        Claim::judge(
            "fig9-strict-favours-heavy",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1, Strict",
            "§5.4.4, Figure 9",
            "under Strict, of two VMs on one core the one with the higher weight achieves better \
             performance (its coscheduling requests follow its vCPU weight)",
            Test::AtLeast { paper: 1.0, tolerance: 0.0 },
            Unit::Percent,
            strict_favours_heavy,
            "share of same-core pairs, BS and SRD1, where the heavier VM's x is the higher".into(),
        ),
        Claim::judge(
            "fig11-credit-rises",
            "MM or HS beside a background MM of 21-1,605 µs kernels, Credit-poll",
            "§5.5.1, Figure 11",
            "under Credit-poll the foreground's normalized run time grows with the background's \
             kernel size (judged over the whole figure: no drop of more than 1% from one size to \
             the next, for either program)",
            Test::AtMost { paper: 0.0, tolerance: 0.0 },
            Unit::Count,
            credit_drops,
            "drops from one background size to the next, MM and HS".into(),
        ),
    ];
    // Table 4's 900 × 900 rows one by one: the wave model's predictions (those rows are
    // not fitted); the one-sub-kernel row is no slicing at all
    for x in r.slicing.rows.iter().filter(|x| !x.fitted && x.sub_kernels > 1) {
        let paper = x.paper_pct / 100.0;
        added.push(Claim::judge(
            &format!("table4-{}-{}", x.grid_blocks, x.sub_kernels),
            &format!("MM of {} blocks in {} sub-kernels", x.grid_blocks, x.sub_kernels),
            "§5.5.2, Table 4",
            &format!(
                "slicing into {} sub-kernels of {} blocks slows MM by {:.1}% (the wave model \
                 fitted on the 600 × 600 rows predicts it; within 2 points or a quarter of \
                 the paper's value)",
                x.sub_kernels, x.blocks_per_sub_kernel, x.paper_pct
            ),
            Test::Near { paper, tolerance: (0.25 * paper).max(0.02) },
            Unit::Percent,
            Some(x.ours_pct / 100.0),
            String::new(),
        ));
    }
    let mut earlier = vec![
        Claim::judge(
            "fig8-mmr",
            "3 VMs on one core, weights 1:2:3, MM, HS, BS, SRD1",
            "§5.4.3, Figure 8",
            "FairGV achieves nearly ideal weighted fair sharing, MMR >= 0.99, on every benchmark",
            // the paper's bound as it states it (issue 57: 2 points of tolerance let
            // 97.8% pass)
            Test::AtLeast { paper: 0.99, tolerance: 0.0 },
            Unit::Percent,
            worst("non-congested", "FairGV", |x| x.mmr, false),
            "the lowest MMR over the four benchmarks".into(),
        ),
        Claim::judge(
            "fig9-mmr",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1",
            "§5.4.4, Figure 9",
            "FairGV keeps MMR >= 0.97 under congestion (judged at the paper's bound since \
             2026-12-04, as fig8-mmr; 2 points below it before)",
            Test::AtLeast { paper: 0.97, tolerance: 0.0 },
            Unit::Percent,
            worst("congested", "FairGV", |x| x.mmr, false),
            "the lower MMR of BS and SRD1".into(),
        ),
        Claim::judge(
            "fig9-overhead",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1",
            "§5.4.4, Figure 9",
            "FairGV's aggregated overhead stays <= 1.02 under congestion, and no lower than the \
             ideal 1.0 (judged two-sided at the paper's own bounds, 1.01 +- 0.01, since \
             2026-12-04, after a run at 1.048: the 1.01 +- 0.04 before let that pass the \
             paper's <= 1.02)",
            Test::Near { paper: 1.01, tolerance: 0.01 },
            Unit::Ratio,
            congested_overhead,
            "the overhead of BS and SRD1 furthest from 1.01".into(),
        ),
        Claim::judge(
            "fig7-fairgv-standalone",
            "each of MM, HS, BS and SRD1 alone in one VM on one core, FairGV against the native run",
            "§5.2, Figure 7",
            "FairGV's overhead for a program run alone is close to the ideal 1.0 (the figure's \
             values are not in the text; judged two-sided: 1.0 +- 0.05, the 1.05 at which \
             Figure 2 calls GVirtuS's overhead a degradation)",
            Test::Near { paper: 1.0, tolerance: 0.05 },
            Unit::Ratio,
            standalone,
            "FairGV alone's run time over the native run's, the benchmark furthest from 1.0".into(),
        ),
        Claim::judge(
            "fig9-strict-unfair",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1",
            "§5.4.4, Figure 9",
            "Strict coscheduling cannot achieve fairness under congestion (MMR well below FairGV's 0.97)",
            Test::AtMost { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            worst("congested", "Strict", |x| x.mmr, false),
            "Strict's lower MMR of BS and SRD1".into(),
        ),
        Claim::judge(
            "fig8-credit-hs-srd1",
            "3 VMs on one core, SRD1",
            "§5.4.3, Figure 8",
            "Credit-hs has high overhead on SRD1 (644 synchronous calls per 10 ms): more than FairGV's",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            match (hs_srd1, fg_srd1) {
                (Some(a), Some(b)) => Some(a / b),
                _ => None,
            },
            "Credit-hs's overhead over FairGV's".into(),
        ),
        Claim::judge(
            "fig10-wc-gain",
            "BS beside an MM sleeping 50-80% of its time, FairGV with and without work conservation",
            "§5.4.5, Figure 10",
            "work conservation raises the GPU's total utilization at every sleep ratio \
             (the figure's values are not in the text: judged as any gain)",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            wc_gain,
            "the smallest gain in utilization over the four sleep ratios".into(),
        )
        .structural("without work conservation the GPU idles while BS waits, by construction"),
        Claim::judge(
            "fig10-non-wc-falls",
            "BS beside an MM sleeping 50-80% of its time, FairGV without work conservation",
            "§5.4.5, Figure 10",
            "without work conservation utilization falls as the sleep ratio rises",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            non_wc_fall,
            "utilization at 50% sleep less at 80%".into(),
        )
        .structural("a program that sleeps more asks the GPU for less, by construction"),
        Claim::judge(
            "fig11-credit-small",
            "MM or HS beside a background MM of 21 µs kernels, Credit-poll",
            "§5.5.1, Figure 11",
            "with background kernels shorter than the foreground's, the foreground's normalized run time stays under 2.0",
            Test::AtMost { paper: 2.0, tolerance: 0.0 },
            Unit::Ratio,
            norm("Credit-poll", small, f64::max),
            "the larger of MM's and HS's normalized run time".into(),
        ),
        Claim::judge(
            "fig11-credit-large",
            "MM or HS beside a background MM of 1,605 µs kernels, Credit-poll",
            "§5.5.1, Figure 11",
            "with longer background kernels the foreground's run time grows well past 2.0 (judged: at least 2.5)",
            Test::AtLeast { paper: 2.5, tolerance: 0.0 },
            Unit::Ratio,
            norm("Credit-poll", large, f64::min),
            "the smaller of MM's and HS's normalized run time".into(),
        ),
        Claim::judge(
            "fig11-fairgv-robust",
            "MM or HS beside a background MM of 21-1,605 µs kernels, FairGV",
            "§5.5.1, Figure 11",
            "FairGV keeps fairness whatever the background's kernel size: about 2.0, an equal share \
             (judged two-sided: 2.0 +- 0.2; a foreground well under 2.0 takes more than its share)",
            Test::Near { paper: 2.0, tolerance: 0.2 },
            Unit::Ratio,
            fairgv_furthest,
            "the normalized run time furthest from 2.0 over every size and both programs".into(),
        ),
        Claim::judge(
            "table4-1500-blocks",
            "MM sliced into sub-kernels, grids 600 × 600 and 900 × 900",
            "§5.5.2, Table 4",
            "with at least about 1,500 thread blocks per sub-kernel the slowdown stays under 5%",
            Test::AtMost { paper: 0.05, tolerance: 0.0 },
            Unit::Percent,
            rule_ok.map(|pct| pct / 100.0),
            "the model's largest slowdown over rows of at least 1,500 blocks".into(),
        ),
        Claim::judge(
            "table4-larger-cheaper",
            "MM sliced into 64-4,096 sub-kernels, both grids",
            "§5.5.2, Table 4",
            "a larger kernel generally costs less to slice into the same number of sub-kernels",
            Test::AtLeast { paper: 1.0, tolerance: 0.0 },
            Unit::Percent,
            bigger_cheaper,
            "share of sub-kernel counts where the 900 × 900 slowdown is at most the 600 × 600 one"
                .into(),
        )
        .structural(
            "in the wave model a larger kernel leaves a smaller share of part-empty waves, by \
             construction",
        ),
    ];
    earlier.append(&mut added);
    earlier
}
