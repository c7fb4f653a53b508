//! Flexy's claims, each with the paper's magnitude and a tolerance fixed here, before
//! any number of ours is looked at: 3 percentage points for a share of tasks meeting
//! the SLA the paper states as a bound, 5 for one it states as an approximate level,
//! 10 for a utilization (the paper reads them off NVSMI), and a factor of 2 for counts
//! of resets. Where the paper gives a value the test is two-sided; one-sided only where
//! it states a bound ("more than", "fewer than"); where it states a trend, the trend is
//! tested. Claims that any policy would meet on this node (capacity alone) are marked
//! structural and left out of the tally; claims whose number depends on a deviation of
//! ours say so. Every claim is checked on every reading of the workload
//! ([`super::Mode`]).

use super::{FlexyResults, Point, curve, sla_met_at_utilization, utilization_at_sla_met};
use crate::experiments::claims::{Claim, ClaimKind, Test, Unit};

const SLA_BOUND: f64 = 0.03;
const SLA_LEVEL: f64 = 0.05;
const UTIL: f64 = 0.10;
const RESET_FACTOR: f64 = 2.0;

/// Whether any claim reads the runs of `policy` on `mix` at an SLA of `sla_ms`: at the
/// main SLA every policy's but F-PID's and Algorithm 1's sort as printed
/// (`-completion`), which are the figures' and the report's, and K = 2 and 3 (Figure
/// 6) on W1 only; at the longer SLA (Figure 7) only F-Reset's. The sensitivity re-runs
/// simulate only these, since they judge only the claims; the test
/// `the_claims_read_only_the_runs_the_sensitivity_simulates` (tests/golden.rs) judges
/// the claims without the others' runs and finds every verdict and number the same.
pub fn read_by_claims(policy: &str, mix: &str, sla_ms: u64, cfg: &super::FlexyConfig) -> bool {
    if sla_ms != cfg.sla_ms {
        return policy == "F-Reset";
    }
    match policy {
        "F-PID" | "F-Reset-completion" => false,
        "F-MinRes2" | "F-MinRes3" => mix == "w1",
        _ => true,
    }
}

/// Every claim, for every mode (the main mode first).
pub(crate) fn claims(r: &FlexyResults) -> Vec<Claim> {
    r.config.modes.iter().flat_map(|m| claims_for(r, &m.label())).collect()
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

fn all<T: Copy>(xs: &[Option<T>]) -> Option<Vec<T>> {
    xs.iter().copied().collect()
}

fn claims_for(r: &FlexyResults, mode: &str) -> Vec<Claim> {
    let sla = r.config.sla_ms;
    let long = r.config.long_sla_ms;
    let has = |w: &str| r.config.mixes.iter().any(|m| m.name() == w);
    let c = |w: &str, p: &str, s: u64| curve(r, mode, w, p, s);
    let at_util = |w: &str, p: &str, u: f64| sla_met_at_utilization(&c(w, p, sla), u);
    let util_for = |w: &str, p: &str, s: f64| utilization_at_sla_met(&c(w, p, sla), s);
    let heaviest = r.config.loads.iter().copied().fold(f64::INFINITY, f64::min);
    let lightest = r.config.loads.iter().copied().fold(0.0, f64::max);
    let at = |w: &str, p: &str, s: u64, load: f64| -> Option<&Point> {
        r.points.iter().find(|x| {
            x.mode == mode && x.workload == w && x.policy == p && x.sla_ms == s && x.load == load
        })
    };
    let pct = |x: f64| Unit::Percent.show(x);
    let opt = |x: Option<f64>| x.map_or("not reached".into(), pct);
    let mut out = Vec::new();
    let mut claim = |id: &str,
                     source: &str,
                     paper: &str,
                     test: Test,
                     unit: Unit,
                     ours: Option<f64>,
                     detail: String| {
        out.push(Claim::judge(id, mode, source, paper, test, unit, ours, detail));
    };

    if has("w1") && sla == 200 {
        let f1 = at_util("w1", "F-MinRes1", 0.70);
        claim(
            "w1-headline-98-at-70",
            "abstract, §VI",
            "W1: F-MinRes1 meets the SLA for 98% of user-facing tasks at 70% GPU utilization",
            Test::Near { paper: 0.98, tolerance: SLA_BOUND },
            Unit::Percent,
            f1,
            format!("interpolated at 70% utilization: {}", opt(f1)),
        );
        let (p1, p0, f0) = (
            at_util("w1", "P-MinRes1", 0.70),
            at_util("w1", "P-MinRes0", 0.70),
            at_util("w1", "F-MinRes0", 0.70),
        );
        claim(
            "w1-minres1-95-at-70",
            "§IV-A",
            "W1: P-MinRes1 and F-MinRes1 meet the SLA for more than 95% at 70% utilization",
            Test::AtLeast { paper: 0.95, tolerance: SLA_BOUND },
            Unit::Percent,
            all(&[p1, f1]).map(|v| v.iter().copied().fold(1.0, f64::min)),
            format!("P-MinRes1 {}, F-MinRes1 {} (the lower is judged)", opt(p1), opt(f1)),
        );
        claim(
            "w1-others-20-at-70",
            "§IV-A",
            "W1: \"versus 20% for the remaining policies\" at 70% utilization — read as 20% of tasks missing the SLA (the paper's own 85% at 80% for MinRes0 rules out 20% meeting it)",
            Test::Near { paper: 0.20, tolerance: SLA_LEVEL },
            Unit::Percent,
            all(&[p0, f0]).and_then(|v| mean(&v)).map(|m| 1.0 - m),
            format!(
                "SLA missed by P-MinRes0 and F-MinRes0 (mean) at 70%; they meet {} and {}",
                opt(p0),
                opt(f0)
            ),
        );
        let (p0_80, f0_80) = (at_util("w1", "P-MinRes0", 0.80), at_util("w1", "F-MinRes0", 0.80));
        claim(
            "w1-minres0-85-at-80",
            "§IV-A",
            "W1: P-MinRes0 and F-MinRes0 meet about 85% of SLAs at 80% utilization",
            Test::Near { paper: 0.85, tolerance: SLA_LEVEL },
            Unit::Percent,
            all(&[p0_80, f0_80]).and_then(|v| mean(&v)),
            format!("P-MinRes0 {}, F-MinRes0 {} (mean judged)", opt(p0_80), opt(f0_80)),
        );
        let rr_high: Vec<f64> = c("w1", "RoundRobin", sla)
            .iter()
            .filter(|p| p.utilization > 0.80)
            .map(|p| p.sla_met)
            .collect();
        claim(
            "w1-roundrobin-below-30-above-80",
            "§IV-A",
            "W1: above 80% utilization fewer than 30% of user-facing tasks meet the SLA under RoundRobin",
            Test::AtMost { paper: 0.30, tolerance: SLA_BOUND },
            Unit::Percent,
            rr_high.iter().copied().reduce(f64::max),
            format!(
                "RoundRobin points above 80% utilization: {}",
                rr_high.iter().map(|x| pct(*x)).collect::<Vec<_>>().join(", ")
            ),
        );
        let gains: Option<Vec<f64>> =
            all(&[p1, p0, f1, f0]).map(|v| vec![v[0] - v[1], v[2] - v[3]]);
        claim(
            "w1-reservation-10-points-at-70",
            "§I",
            "W1: reserving one GPU gives 10% fewer SLA violations than no reservation, at about 70% utilization",
            Test::Near { paper: 0.10, tolerance: SLA_BOUND },
            Unit::Percent,
            gains.as_ref().map(|g| g.iter().copied().fold(1.0, f64::min)),
            gains.map_or("not reached".into(), |g| {
                format!(
                    "K=1 minus K=0: priority {}, Flexy {} (the lower is judged)",
                    pct(g[0]),
                    pct(g[1])
                )
            }),
        );
        // Figure 6a
        let k = |n: usize| at("w1", &format!("F-MinRes{n}"), sla, heaviest);
        if let (Some(k0), Some(k3)) = (k(0), k(3)) {
            let detail = |p: &Point| {
                format!("f={heaviest}: SLA {}, utilization {}", pct(p.sla_met), pct(p.utilization))
            };
            claim(
                "w1-fig6a-k0-sla",
                "§IV-D, Fig. 6a",
                "W1, heaviest load: K=0 meets the SLA for 84%",
                Test::Near { paper: 0.84, tolerance: SLA_LEVEL },
                Unit::Percent,
                Some(k0.sla_met),
                detail(k0),
            );
            claim(
                "w1-fig6a-k3-sla",
                "§IV-D, Fig. 6a",
                "W1, heaviest load: K=3 meets the SLA for 99.2%",
                Test::Near { paper: 0.992, tolerance: SLA_BOUND },
                Unit::Percent,
                Some(k3.sla_met),
                detail(k3),
            );
            claim(
                "w1-fig6a-k0-util",
                "§IV-D, Fig. 6a",
                "W1, heaviest load: K=0 keeps utilization at 95%",
                Test::Near { paper: 0.95, tolerance: UTIL },
                Unit::Percent,
                Some(k0.utilization),
                detail(k0),
            );
            claim(
                "w1-fig6a-k3-util",
                "§IV-D, Fig. 6a",
                "W1, heaviest load: K=3 lowers utilization to 25%",
                Test::Near { paper: 0.25, tolerance: UTIL },
                Unit::Percent,
                Some(k3.utilization),
                detail(k3),
            );
        }
        for (n, paper) in [(0usize, 0.70), (1, 0.70), (2, 0.45), (3, 0.25)] {
            let policy = format!("F-MinRes{n}");
            let points = c("w1", &policy, sla);
            // a curve that meets 90% at every load meets it up to its highest utilization
            let always = !points.is_empty() && points.iter().all(|p| p.sla_met >= 0.90);
            let u = if always {
                points.iter().map(|p| p.utilization).reduce(f64::max)
            } else {
                util_for("w1", &policy, 0.90)
            };
            claim(
                &format!("w1-fig6a-util-for-90-k{n}"),
                "§IV-D, Fig. 6a",
                &format!(
                    "W1: to meet the SLA for 90% with K={n}, utilization has to be {:.0}%",
                    100.0 * paper
                ),
                Test::Near { paper, tolerance: UTIL },
                Unit::Percent,
                u,
                if always {
                    format!("F-MinRes{n} meets 90% at every load, up to utilization {}", opt(u))
                } else {
                    format!("F-MinRes{n} crosses 90% at utilization {}", opt(u))
                },
            );
        }
        // reset policies
        let under45 = |p: &str| at_util("w1", p, 0.45);
        for (p, paper) in [("F-Reset", 0.65), ("P-Reset", 0.52)] {
            let v = under45(p);
            claim(
                &format!("w1-{}-at-45", p.to_lowercase()),
                "§IV-A",
                &format!("W1, under 45% utilization: {p} meets the SLA for {:.0}%", 100.0 * paper),
                Test::Near { paper, tolerance: SLA_LEVEL },
                Unit::Percent,
                v,
                format!("at 45% utilization: {}", opt(v)),
            );
        }
        // the paper's direction, F over P (issue 56): the two levels above judged as one
        // difference, two-sided (65 - 52 = 13 points, within half of it), and Flexy's
        // higher utilization at the same load (§IV-A: "increases both GPU utilization
        // and the number of tasks that meet their SLA"; no value given: the direction,
        // as the mean over W1's loads of F-Reset's minus P-Reset's)
        let f_over_p = under45("F-Reset").zip(under45("P-Reset")).map(|(f, p)| f - p);
        claim(
            "w1-f-reset-over-p-reset-sla-at-45",
            "§IV-A",
            "W1, under 45% utilization: packing (F-Reset) meets the SLA for 13 points more user-facing tasks than priority (P-Reset): 65% against 52%",
            Test::Near { paper: 0.13, tolerance: 0.065 },
            Unit::Percent,
            f_over_p,
            format!(
                "F-Reset {} minus P-Reset {}",
                opt(under45("F-Reset")),
                opt(under45("P-Reset"))
            ),
        );
        let util_gap: Vec<f64> = r
            .config
            .loads
            .iter()
            .filter_map(|&f| {
                let u = |p: &str| at("w1", p, sla, f).map(|x| x.utilization);
                u("F-Reset").zip(u("P-Reset")).map(|(a, b)| a - b)
            })
            .collect();
        claim(
            "w1-f-reset-raises-utilization",
            "§IV-A",
            "W1: by consolidating user-facing tasks, Flexy (F-Reset) raises GPU utilization over priority (P-Reset) at the same load (direction only: no value given)",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            mean(&util_gap),
            format!(
                "F-Reset minus P-Reset utilization, mean over {} loads: {}",
                util_gap.len(),
                util_gap
                    .iter()
                    .map(|x| format!("{:+.1}", 100.0 * x))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        let low_util: Vec<f64> = ["P-Reset", "F-Reset"]
            .iter()
            .flat_map(|p| c("w1", p, sla))
            .filter(|x| (0.20..=0.40).contains(&x.utilization))
            .map(|x| x.sla_met)
            .collect();
        claim(
            "w1-reset-69-at-20-40-util",
            "§I",
            "Reset policies meet the 200 ms SLA for 69% of user-facing tasks, with utilization between 20% and 40%",
            Test::Near { paper: 0.69, tolerance: SLA_LEVEL },
            Unit::Percent,
            mean(&low_util),
            format!("{} reset-policy points between 20% and 40% utilization", low_util.len()),
        );
        let reset_util: Vec<f64> = ["P-Reset", "F-Reset"]
            .iter()
            .flat_map(|p| c("w1", p, sla))
            .map(|x| x.utilization)
            .collect();
        claim(
            "w1-reset-util-at-most-40",
            "§I, Fig. 5a",
            "Reset policies run the GPUs at 20-40% utilization (the reset's idle second keeps it low)",
            Test::AtMost { paper: 0.40, tolerance: UTIL },
            Unit::Percent,
            reset_util.iter().copied().reduce(f64::max),
            "highest utilization of P-Reset and F-Reset over loads".into(),
        );
        let light = |p: &str| at("w1", p, sla, lightest).map(|x| x.sla_met);
        let gap =
            all(&[light("P-MinRes1"), light("F-MinRes1"), light("P-Reset"), light("F-Reset")])
                .map(|v| (v[0] + v[1]) / 2.0 - (v[2] + v[3]) / 2.0);
        claim(
            "w1-reset-worse-than-minres-at-low-util",
            "§IV-A",
            "Reset's SLA violations \"are not comparable with minimum reservation ones, even at low utilization\" (read: at least 10 points fewer SLAs met at the lightest load)",
            Test::AtLeast { paper: 0.10, tolerance: 0.0 },
            Unit::Percent,
            gap,
            format!("MinRes1 minus Reset at f={lightest} (means of P and F)"),
        );
    }
    // W2 and W3: both families of one reservation at one utilization (§IV-B, §IV-C)
    let levels = [
        ("w2", "§IV-B", 0.60, "MinRes1", 0.77, SLA_LEVEL),
        ("w2", "§IV-B", 0.60, "MinRes0", 0.65, SLA_LEVEL),
        ("w3", "§IV-C", 0.57, "MinRes1", 0.97, SLA_BOUND),
        ("w3", "§IV-C", 0.57, "MinRes0", 0.95, SLA_BOUND),
    ];
    for (w, source, util, p, paper, tolerance) in levels {
        if !has(w) || sla != 200 {
            continue;
        }
        let v = all(&[at_util(w, &format!("P-{p}"), util), at_util(w, &format!("F-{p}"), util)]);
        claim(
            &format!("{w}-{}-at-{:.0}", p.to_lowercase(), 100.0 * util),
            source,
            &format!(
                "{}, {:.0}% utilization: P- and F-{p} meet the SLA for {:.0}%",
                w.to_uppercase(),
                100.0 * util,
                100.0 * paper
            ),
            Test::Near { paper, tolerance },
            Unit::Percent,
            v.as_ref().and_then(|v| mean(v)),
            v.map_or("not reached".into(), |v| {
                format!("P {}, F {} (mean judged)", pct(v[0]), pct(v[1]))
            }),
        );
    }
    // resets: Flexy packs user-facing tasks and resets far less than priority
    let ratio = |w: &str, load: Option<f64>| -> (Option<f64>, String) {
        let resets = |p: &str| -> Vec<f64> {
            c(w, p, sla)
                .iter()
                .filter(|x| load.is_none_or(|l| x.load == l))
                .map(|x| x.resets)
                .collect()
        };
        let (pr, fr) = (mean(&resets("P-Reset")), mean(&resets("F-Reset")));
        match (pr, fr) {
            (Some(p), Some(f)) if f > 0.0 => {
                (Some(p / f), format!("P-Reset {p:.1} vs F-Reset {f:.1} resets per run"))
            }
            (Some(p), Some(_)) => (
                if p > 0.0 { Some(f64::INFINITY) } else { None },
                format!("P-Reset {p:.1} vs F-Reset 0 resets per run"),
            ),
            _ => (None, "not run".into()),
        }
    };
    let mut reset_claims = Vec::new();
    if has("w1") {
        reset_claims.push((
            "w1-resets-10x",
            "§IV-A",
            "W1: F-Reset resets about 10 times per run against P-Reset's 100",
            10.0,
            ratio("w1", None),
        ));
    }
    if has("w2") {
        reset_claims.push((
            "w2-resets-25x-low-util",
            "§IV-B",
            "W2, low utilization: Flexy resets 25 times less than priority",
            25.0,
            ratio("w2", Some(lightest)),
        ));
        reset_claims.push((
            "w2-resets-6x-high-util",
            "§IV-B",
            "W2, high utilization: Flexy resets 6 times less than priority",
            6.0,
            ratio("w2", Some(heaviest)),
        ));
    }
    if has("w3") {
        reset_claims.push((
            "w3-resets-12x-low-util",
            "§IV-C",
            "W3, low utilization: priority resets almost 12 times as often as Flexy",
            12.0,
            ratio("w3", Some(lightest)),
        ));
        reset_claims.push((
            "w3-resets-4x-high-util",
            "§IV-C",
            "W3, high utilization: the difference falls to 4x",
            4.0,
            ratio("w3", Some(heaviest)),
        ));
    }
    for (id, source, paper, value, (ours, detail)) in reset_claims {
        // infinite ratios (no F-Reset resets at all) pass a lower bound; show them as such
        let ours = ours.map(|x| if x.is_infinite() { 1e9 } else { x });
        claim(
            id,
            source,
            paper,
            Test::RatioNear { paper: value, factor: RESET_FACTOR },
            Unit::Ratio,
            ours,
            detail,
        );
    }
    // trends (§IV-B, §IV-C): as load rises the ratio shrinks and resets fall
    let trends: [(&str, &str, Option<f64>); 2] =
        [("w2", "§IV-B", Some(6.0 / 25.0)), ("w3", "§IV-C", Some(4.0 / 12.0))];
    for (w, source, paper) in trends {
        if !has(w) || heaviest == lightest {
            continue;
        }
        let (light, _) = ratio(w, Some(lightest));
        let (heavy, _) = ratio(w, Some(heaviest));
        claim(
            &format!("{w}-reset-ratio-falls-with-load"),
            source,
            &format!(
                "{}: the ratio of priority's resets to Flexy's falls as load rises ({})",
                w.to_uppercase(),
                if w == "w2" { "25x at low to 6x at high utilization" } else { "12x to 4x" }
            ),
            Test::Falls { paper },
            Unit::Ratio,
            heavy.zip(light).filter(|(_, l)| l.is_finite() && *l > 0.0).map(|(h, l)| h / l),
            format!(
                "P-Reset/F-Reset resets at f={heaviest}: {}; at f={lightest}: {}",
                heavy.map_or("—".into(), |x| format!("{x:.1}x")),
                light.map_or("—".into(), |x| format!("{x:.1}x"))
            ),
        );
        let total = |load: f64| -> Option<f64> {
            let per = |p: &str| at(w, p, sla, load).map(|x| x.resets);
            Some(per("P-Reset")? + per("F-Reset")?)
        };
        let (h, l) = (total(heaviest), total(lightest));
        claim(
            &format!("{w}-resets-fall-with-load"),
            source,
            &format!(
                "{}: {}",
                w.to_uppercase(),
                if w == "w2" {
                    "\"as the utilization increases, the number of resets decreases sharply\""
                } else {
                    "\"the number of resets diminishes as utilization increases\""
                }
            ),
            Test::Falls { paper: None },
            Unit::Ratio,
            h.zip(l).filter(|(_, l)| *l > 0.0).map(|(h, l)| h / l),
            format!(
                "P-Reset + F-Reset resets per run: {} at f={heaviest}, {} at f={lightest}",
                h.map_or("—".into(), |x| format!("{x:.1}")),
                l.map_or("—".into(), |x| format!("{x:.1}"))
            ),
        );
    }
    // the longer SLA
    if long != sla {
        let pooled: Vec<f64> = r
            .config
            .mixes
            .iter()
            .flat_map(|m| c(m.name(), "F-Reset", long))
            .map(|x| x.sla_met)
            .collect();
        claim(
            "reset-92-at-1s",
            "§IV-E, Fig. 7",
            "With a 1 s SLA, F-Reset meets it for more than 92% of user-facing tasks",
            Test::AtLeast { paper: 0.92, tolerance: SLA_BOUND },
            Unit::Percent,
            mean(&pooled),
            format!("mean over mixes and loads of {} points", pooled.len()),
        );
    }
    // starvation, as a bound that can fail: no batch task waits much longer under
    // Flexy than under round-robin, which serves every tenant in turn (every run ends,
    // so counting completed batch tasks could not fail)
    let mut ratios: Vec<(f64, String)> = Vec::new();
    for m in &r.config.mixes {
        for &load in &r.config.loads {
            let w = m.name();
            let Some(rr) = at(w, "RoundRobin", sla, load).map(|x| x.batch_max_wait_s) else {
                continue;
            };
            for p in ["F-MinRes0", "F-MinRes1", "F-Reset"] {
                if let Some(f) = at(w, p, sla, load).map(|x| x.batch_max_wait_s)
                    && rr > 0.0
                {
                    ratios.push((f / rr, format!("{w} {p} f={load}: {f:.0} s vs {rr:.0} s")));
                }
            }
        }
    }
    let most = ratios.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    claim(
        "batch-does-not-starve",
        "§I, §II-C2",
        "Under Flexy batch applications do not starve (read: no batch task waits more than twice as long as under round-robin, at the same load)",
        Test::AtMost { paper: 1.0, tolerance: 1.0 },
        Unit::Ratio,
        most.map(|x| x.0),
        most.map_or("not run".into(), |x| {
            format!(
                "longest batch wait, worst case over mixes, loads and F-MinRes0/1, F-Reset: {}",
                x.1
            )
        }),
    );
    for c in &mut out {
        let structural = match c.id.as_str() {
            "w1-fig6a-k0-util" => Some(
                "at the heaviest load the node is offered twice its capacity, so any policy that \
                 never idles a GPU with work waiting is near full utilization",
            ),
            "w1-fig6a-k3-util" => Some(
                "with 3 of 4 GPUs held for user-facing work, batch work has one GPU: about 25% \
                 follows from the reservation itself",
            ),
            // issue 56: F-MinRes3's utilization is 25-29% at every load, so wherever it
            // crosses 90% of SLAs met, it crosses near the paper's 30%
            "w1-fig6a-util-for-90-k3" => Some(
                "with 3 of 4 GPUs held for user-facing work the utilization stays at 25-30% at \
                 every load, so any crossing of 90% SLA met lies near the paper's value",
            ),
            _ => None,
        };
        if let Some(why) = structural {
            c.kind = ClaimKind::Structural { why: why.into() };
        }
        // Flexy's reset rule is our correction of §II-C3 (see the report's deviations)
        if c.id.contains("reset") && c.id != "w1-p-reset-at-45" {
            c.depends_on = Some("Flexy's reset rule as we correct §II-C3".into());
        }
    }
    out
}
