//! The DCUDA experiment end to end, small: every run completes every application, the
//! results are reproducible, and the claims are all judged. The tests share two runs —
//! the paper's setup with two arrival orders and the contention fitted, and one order
//! unfitted — rather than each running its own (the full experiment, 50 orders, is
//! `tessera sim dcuda`'s; its committed results are checked by
//! `scripts/results-unchanged.sh`).

use std::sync::OnceLock;
use tessera_sim::experiments::dcuda::{DcudaConfig, DcudaResults, POLICIES, report, run};

/// The paper's setup, two orders, the contention fitted.
fn fitted() -> &'static DcudaResults {
    static RUN: OnceLock<DcudaResults> = OnceLock::new();
    RUN.get_or_init(|| run(&DcudaConfig { orders: 2, ..DcudaConfig::paper(3) }).unwrap())
}

/// One order, the contention as used, not fitted.
fn plain_config() -> DcudaConfig {
    DcudaConfig { orders: 1, fit_contention: false, ..DcudaConfig::paper(3) }
}

fn plain() -> &'static DcudaResults {
    static RUN: OnceLock<DcudaResults> = OnceLock::new();
    RUN.get_or_init(|| run(&plain_config()).unwrap())
}

#[test]
fn a_small_dcuda_experiment_runs_every_application_and_judges_every_claim() {
    let r = fitted();
    assert_eq!(r.runs.len(), 3 * POLICIES.len() * 2);
    for run in &r.runs {
        assert_eq!(run.normalized.len(), 20);
        // nothing finishes faster than alone (a chunk's rounding aside)
        assert!(run.normalized.iter().all(|x| x.is_finite() && *x >= 0.99), "{run:?}");
        assert!(run.jain > 0.0 && run.jain <= 1.0 + 1e-9);
        let least_loaded = run.policy == "least-loaded";
        assert_eq!(least_loaded, run.migrations == 0, "only DCUDA migrates: {}", run.policy);
        assert_eq!(run.occupancy_evaluations, 20, "one evaluation per application's kernel");
    }
    assert_eq!(r.claims.len(), 17);
    assert!(r.claims.iter().all(|c| c.ours.is_some()), "every claim measured");
    assert_eq!(r.comparisons.len(), r.claims.len());
    // the power model's first step was calibrated: least-loaded at medium load matches
    // Table 2 by construction
    let ll = r.summary("least-loaded", "medium").unwrap();
    assert!((ll.energy_j - 74_935.0).abs() < 1.0, "{}", ll.energy_j);
    // reproducible (on the unfitted run, which takes a fraction of the time)
    let again = run(&plain_config()).unwrap();
    assert_eq!(again.runs, plain().runs, "reproducible");
    let md = report(r);
    assert!(md.contains("## Claims") && md.contains("calibrated"));
}

#[test]
fn constants_out_of_range_are_a_typed_error() {
    use tessera_sim::experiments::ExperimentError;
    use tessera_sim::experiments::dcuda::Constants;
    for constants in [
        Constants { iteration_scale: 0.0, ..Constants::USED },
        Constants { contention: f64::NAN, ..Constants::USED },
        Constants { further_app_step: -0.1, ..Constants::USED },
        Constants { group_slack: -0.5, ..Constants::USED },
    ] {
        let cfg = DcudaConfig { orders: 1, constants, ..DcudaConfig::paper(3) };
        assert!(matches!(run(&cfg), Err(ExperimentError::Config(_))), "{constants:?}");
    }
}

/// Table 2's savings are judged relative to the paper's value, so a saving of the wrong
/// sign can never hold (with 5 points either way, -2.4% passed the paper's 2.6%); they
/// and least-loaded's own energy rest on constants of ours fitted to Table 2, so none
/// counts as evidence (issue 57).
#[test]
fn energy_claims_cannot_hold_with_the_wrong_sign() {
    use tessera_sim::experiments::claims::Test;
    let r = fitted();
    for load in ["light", "medium", "heavy"] {
        let c = r.claims.iter().find(|c| c.id == format!("table2-{load}")).unwrap();
        match c.test {
            Test::Near { paper, tolerance } => assert!(paper > 0.0 && tolerance < paper, "{c:?}"),
            other => panic!("{other:?}"),
        }
        // issue 57 item 8: they rest on constants of ours fitted to Table 2, so they are
        // marked fitted (inputs) and not counted as evidence; least-loaded's own energy
        // too, the medium one being the fit's input
        assert!(!c.is_evidence(), "{c:?}");
        let e = r.claims.iter().find(|c| c.id == format!("table2-{load}-least-loaded-energy"));
        assert!(!e.unwrap().is_evidence(), "{load}");
    }
}

/// The fairness groups' slack is a constant of ours that reaches the policy: DCUDA's
/// runs change with it, least-loaded's do not.
#[test]
fn the_group_slack_reaches_dcuda() {
    use tessera_sim::experiments::dcuda::Constants;
    let at = |group_slack| {
        let cfg = DcudaConfig {
            constants: Constants { group_slack, ..Constants::USED },
            ..plain_config()
        };
        run(&cfg).unwrap()
    };
    let (a, b) = (at(0.0), at(0.5));
    let of = |r: &tessera_sim::experiments::dcuda::DcudaResults, p: &str| {
        r.runs.iter().filter(|x| x.policy == p).map(|x| x.mean_normalized).collect::<Vec<_>>()
    };
    assert_eq!(of(&a, "least-loaded"), of(&b, "least-loaded"));
    assert_ne!(of(&a, "dcuda"), of(&b, "dcuda"));
}

/// The contention constant is fitted on least-loaded alone (Figure 13(a)'s QoS):
/// every candidate tried, the one nearest the target chosen and used by every run,
/// and the claim it is fitted on not counted.
#[test]
fn the_contention_is_fitted_on_least_loaded_alone() {
    use tessera_sim::experiments::dcuda::{FIT_CANDIDATES, FIT_TARGET_QOS};
    let r = fitted();
    let fit = r.contention_fit.as_ref().expect("the paper's setup fits the contention");
    let tried: Vec<f64> = fit.candidates.iter().map(|c| c.0).collect();
    assert_eq!(tried, FIT_CANDIDATES);
    let gap = |q: f64| (q - FIT_TARGET_QOS).abs();
    let best = fit.candidates.iter().map(|c| gap(c.1)).fold(f64::INFINITY, f64::min);
    let chosen = fit.candidates.iter().find(|c| c.0 == fit.chosen).unwrap();
    assert_eq!(gap(chosen.1), best, "{fit:?}");
    assert_eq!(r.config.constants.contention, fit.chosen);
    // more contention, fewer applications near their solo time
    assert!(fit.candidates[0].1 >= fit.candidates.last().unwrap().1, "{fit:?}");
    let c = r.claims.iter().find(|c| c.id == "fig13a-least-loaded").unwrap();
    assert!(!c.is_evidence(), "the fit's input is not counted");
    // unfitted, the same claim is evidence
    let plain = plain();
    assert!(plain.contention_fit.is_none());
    let c = plain.claims.iter().find(|c| c.id == "fig13a-least-loaded").unwrap();
    assert!(c.is_evidence());
}

/// Utilization as §4.3 defines it (placed demand over capacity, at most 100%) agrees
/// with the bands it is sampled with: at least 100% of the overloaded samples and 50% of
/// the middle band, at most everything above the lowest band plus half of it.
#[test]
fn utilization_is_the_placed_demand_over_the_capacity() {
    let r = plain();
    for x in &r.runs {
        let n = x.bands.len() as f64;
        let band = |i: usize| x.bands.iter().map(|b| b[i]).sum::<f64>() / n;
        let (low, mid, over) = (band(0), band(1), band(2));
        assert!(x.utilization >= over + 0.5 * mid - 1e-6, "{} {}: {x:?}", x.policy, x.load);
        assert!(x.utilization <= over + mid + 0.5 * low + 1e-6, "{} {}: {x:?}", x.policy, x.load);
        assert!((0.0..=1.0).contains(&x.cores_used));
    }
}

/// §2.2: two lightweight applications together barely slow each other; the claim is
/// measured on every pair of the lightest applications.
#[test]
fn light_pairs_are_measured_on_one_gpu() {
    use tessera_sim::experiments::dcuda::LIGHT_APPS;
    let r = plain();
    assert_eq!(r.pairs.len(), LIGHT_APPS * (LIGHT_APPS - 1) / 2);
    for p in &r.pairs {
        assert!(p.slowdown.iter().all(|s| s.is_finite() && *s > -1e-3), "{p:?}");
    }
    let c = r.claims.iter().find(|c| c.id == "s2.2-light-pairs").unwrap();
    assert!(c.ours.is_some());
    // measured and shown, not counted: pairs that seldom meet cannot fail by much
    assert!(!c.is_evidence(), "{c:?}");
}

/// Issue 57 item 8: §2.2's light pairs started at the same instant slowed 26.3% with no
/// contention (an independent fluid model: 2.0-3.4%), read then as their kernels'
/// blocks going out in whole waves together. It was the engine: a kernel found finished
/// by the other's start at that instant was collected a wave late, every iteration of a
/// pair in step (fixed 2026-11-29, `blocks::a_kernel_ending_as_another_starts_ends_on_time`).
/// Now started together or half an iteration apart the worst pair slows alike (measured
/// 4.7% and 4.6%), and well under the old reading.
#[test]
fn light_pairs_slow_alike_started_together_or_apart() {
    use tessera_sim::experiments::dcuda::{Constants, light_pairs_started};
    use tessera_sim::workloads::dcuda::{APPS_CSV, parse_apps};
    let apps = parse_apps(APPS_CSV).unwrap();
    let k = Constants { contention: 0.0, ..Constants::USED };
    let worst = |apart| {
        let pairs = light_pairs_started(&apps, &k, apart).unwrap();
        pairs.iter().flat_map(|p| p.slowdown).fold(f64::NEG_INFINITY, f64::max)
    };
    let (together, apart) = (worst(false), worst(true));
    eprintln!("worst light-pair slowdown, no contention: together {together:.4}, apart {apart:.4}");
    assert!((together - apart).abs() < 0.01, "together {together} against apart {apart}");
    assert!(together < 0.1, "together {together}");
}

/// Issue 57 item 11: §2.2's light pairs run as programs on the program engine, as the
/// main runs do; the task engine, which ran them before, is kept as the check: every
/// pair's slowdowns equal (two applications on 16 cores never wait for a core).
#[test]
fn light_pairs_run_as_programs_and_equal_the_task_engines() {
    use tessera_sim::experiments::dcuda::{Constants, Engine, TESTBED_CORES, light_pairs_on};
    use tessera_sim::workloads::dcuda::{APPS_CSV, parse_apps};
    let apps = parse_apps(APPS_CSV).unwrap();
    let testbed = Engine::Programs { cores: TESTBED_CORES, pinned: false };
    for k in [Constants::USED, Constants { contention: 0.0, ..Constants::USED }] {
        let programs = light_pairs_on(&apps, &k, true, testbed).unwrap();
        let tasks = light_pairs_on(&apps, &k, true, Engine::Tasks).unwrap();
        assert_eq!(programs.len(), 6, "four light applications, six pairs");
        for (p, t) in programs.iter().zip(&tasks) {
            assert_eq!(p.apps, t.apps);
            for (a, b) in p.slowdown.iter().zip(t.slowdown) {
                assert!((a - b).abs() < 1e-6, "{p:?} against {t:?}");
            }
        }
    }
}

/// Issue 57 item 6: the report states why the slicing step loses from the experiment
/// that isolates it, and its conclusion follows the numbers: slicing's cost with the
/// CPU phases against without them.
#[test]
fn the_slicing_section_concludes_from_its_numbers() {
    use tessera_sim::experiments::dcuda::SlicingCause;
    let mut r = plain().clone();
    let cause = |without| SlicingCause {
        orders: 1,
        with_cpu: [1.42, 1.17],
        without_cpu: without,
        utilization_with_cpu: [0.75, 0.68],
    };
    r.slicing_cause = Some(cause([1.201, 1.199]));
    let text = report(&r);
    assert!(text.contains("## What the slicing step costs"), "{text}");
    assert!(text.contains("| with CPU phases | 1.420x solo | 1.170x solo | 1.214x |"), "{text}");
    assert!(text.contains("Slicing's cost goes with the CPU phases"), "{text}");
    // the failing claims it explains say so instead of "not identified"
    if text.contains("- **fig12-exec**") {
        let line = text.lines().find(|l| l.starts_with("- **fig12-exec**")).unwrap();
        assert!(!line.contains("not identified"), "{line}");
    }
    r.slicing_cause = Some(cause([1.42, 1.17]));
    assert!(report(&r).contains("does not identify the CPU phases as its cause"));
    // a cost of half a percent explains no loss (the run after issue 57's item 7: the
    // old rule read 1.005x as the cause of a loss DCUDA no longer had)
    r.slicing_cause = Some(SlicingCause { with_cpu: [1.190, 1.184], ..cause([1.192, 1.636]) });
    let text = report(&r);
    assert!(text.contains("slicing costs under 2% in run time"), "{text}");
    assert!(!text.contains("That is why DCUDA"), "{text}");
}

/// Issue 57 item 6: DCUDA's steps added one at a time isolate where its gain and its
/// loss come from; the daemon's constants stand beside them; the report's conclusion
/// follows the rows.
#[test]
fn dcudas_steps_are_added_one_at_a_time_and_the_report_names_the_one_that_carries_it() {
    use tessera_sim::experiments::dcuda::{RunCache, STEPS, StepRow, steps};
    let cfg = plain_config();
    let rows = steps(&plain().apps, &cfg, 1, &RunCache::default()).unwrap();
    let labels: Vec<&str> = rows.iter().map(|x| x.policy.as_str()).collect();
    assert_eq!(labels, STEPS.map(|s| s.0), "each variant its own policy, none a fallback");
    assert_eq!(rows[0].migrations, 0.0, "least-loaded does not migrate");
    assert!(rows[1].migrations > 0.0, "step 1 migrates: {:?}", rows[1]);
    // the variants differ: a name the experiment did not know would run least-loaded
    for w in rows.windows(2).take(2) {
        assert_ne!(w[0], StepRow { policy: w[0].policy.clone(), ..w[1].clone() });
    }
    let mut r = plain().clone();
    let row = |policy: &str, over: f64, migrations: f64| StepRow {
        policy: policy.into(),
        mean_normalized: 1.2,
        utilization: 0.6,
        overloaded: over,
        qos: 0.7,
        jain: 0.98,
        migrations,
    };
    r.steps = vec![
        row("least-loaded", 0.30, 0.0),
        row("dcuda-balance", 0.25, 10.0),
        row("dcuda-balance-energy", 0.10, 20.0),
        row("dcuda-no-priority", 0.10, 20.0),
        row("dcuda-paper", 0.10, 20.0),
        row("dcuda", 0.12, 5.0),
    ];
    let text = report(&r);
    assert!(text.contains("## What each of DCUDA's steps gives"), "{text}");
    assert!(text.contains("15.0% of 20.0% points come with step 2: compaction"), "{text}");
    assert!(
        text.contains("in the applications within 20% of solo, compaction costs 0.0 points"),
        "{text}"
    );
    assert!(text.contains("With the daemon's constants"), "{text}");
}

/// Issue 55: `tessera sim dcuda` asked for about a quarter of its runs twice (the
/// sensitivity's used values are the main run's first orders; constants that only the
/// power model reads, or that least-loaded never consults, leave a run as it was). A
/// [`RunCache`] simulates each run once: the same result whichever way it is asked
/// for, and a constant the run does read simulates again.
#[test]
fn a_run_cache_simulates_each_run_once() {
    use tessera_sim::experiments::dcuda::{Constants, Load, RunCache, run_one};
    use tessera_sim::workloads::dcuda::{APPS_CSV, parse_apps};
    // three applications of 2 s: a run of each policy takes a moment unoptimised
    let apps: Vec<_> = parse_apps(APPS_CSV)
        .unwrap()
        .into_iter()
        .take(3)
        .map(|a| tessera_sim::workloads::dcuda::App { solo_s: 2.0, ..a })
        .collect();
    let load = Load { name: "heavy".into(), interval_s: 1 };
    let k = Constants { contention: 0.25, ..Constants::USED };
    let cache = RunCache::default();
    for policy in ["least-loaded", "dcuda"] {
        let fresh = run_one(&apps, policy, &load, 0, 3, &k).unwrap();
        assert_eq!(cache.run_one(&apps, policy, &load, 0, 3, &k).unwrap(), fresh);
        assert_eq!(cache.run_one(&apps, policy, &load, 0, 3, &k).unwrap(), fresh);
    }
    assert_eq!(cache.counts(), (4, 2));
    // least-loaded reads neither the pause nor the slack; nothing reads the power step
    let ll = |k: Constants| cache.run_one(&apps, "least-loaded", &load, 0, 3, &k).unwrap();
    let dc = |k: Constants| cache.run_one(&apps, "dcuda", &load, 0, 3, &k).unwrap();
    ll(Constants { migration_pause_ms: 200, group_slack: 0.5, further_app_step: 0.3, ..k });
    dc(Constants { further_app_step: 0.3, ..k });
    assert_eq!(cache.counts(), (6, 2));
    // what a run reads: simulated again, and as a fresh run gives it
    let paused = Constants { migration_pause_ms: 10, ..k };
    assert_eq!(dc(paused), run_one(&apps, "dcuda", &load, 0, 3, &paused).unwrap());
    ll(Constants { contention: 0.0, ..k });
    dc(Constants { group_slack: 0.5, ..k });
    ll(k);
    let other_order = cache.run_one(&apps, "least-loaded", &load, 1, 3, &k).unwrap();
    assert_eq!(other_order.order, 1);
    assert_eq!(cache.counts(), (11, 6));
}

/// Issue 57 item 11: the applications run on the program engine's model of the
/// testbed's 16 cores; the report counts how many were in a CPU phase at once, so
/// that whether any waited for a core is a number, not a claim. Every application's
/// loop has a CPU phase, so at least one ran; never more than the 20 applications.
#[test]
fn the_report_counts_the_cpu_phases_at_once_against_the_testbeds_cores() {
    let r = plain();
    let most = r.runs.iter().map(|x| x.max_cpu_phases).max().unwrap();
    assert_eq!(r.cpu_phases_at_most, most);
    assert!((1..=20).contains(&most), "{most}");
    let md = report(r);
    assert!(
        md.contains(&format!("At most {most} applications were in a CPU phase at once")),
        "{md}"
    );
    assert!(md.contains("testbed's 16 cores"), "{md}");
}

/// A contention fit that ran out of range (its last value chosen, least-loaded still
/// more than a point from the target) says so: the constant is then the range's end,
/// not a fit (the run after issue 57's item 7: 62.5% at 0.6 against 60%).
#[test]
fn a_fit_at_the_end_of_its_range_is_named() {
    use tessera_sim::experiments::dcuda::ContentionFit;
    let mut r = plain().clone();
    let fit = |candidates: Vec<(f64, f64)>, chosen| ContentionFit {
        target_qos: 0.6,
        orders: 1,
        candidates,
        chosen,
    };
    r.contention_fit = Some(fit(vec![(0.0, 0.87), (0.3, 0.7), (0.6, 0.625)], 0.6));
    assert!(report(&r).contains("The fit reached the largest value it tries (0.6)"));
    r.contention_fit = Some(fit(vec![(0.0, 0.87), (0.3, 0.6), (0.6, 0.5)], 0.3));
    assert!(!report(&r).contains("The fit reached"));
    r.contention_fit = Some(fit(vec![(0.0, 0.87), (0.6, 0.605)], 0.6));
    assert!(!report(&r).contains("The fit reached"), "within a point of the target");
}

/// Issue 57 item 6, the overload claims: the report takes the overloaded samples apart
/// by whether the node's demand fitted its GPUs, and names the load as the cause of
/// `fig11-overload` only when DCUDA's cut where the node had room reaches the paper's
/// 78.3% and the node was over its GPUs at a material share of the samples; otherwise
/// the claim's line does not say its cause is stated.
#[test]
fn the_overload_section_concludes_from_its_numbers() {
    use tessera_sim::experiments::claims::Verdict;
    let mut r = plain().clone();
    assert!(report(&r).contains("## Where the overload comes from"));
    for c in r.claims.iter_mut().filter(|c| c.id == "fig11-overload") {
        c.verdict = Verdict::DoesNotHold;
    }
    let set = |r: &mut DcudaResults, policy: &str, over: f64, node_over: f64, room: f64| {
        let s = r.summaries.iter_mut().find(|s| s.policy == policy && s.load == "medium");
        let o = &mut s.expect("a medium summary").overload;
        (o.overloaded, o.node_over, o.with_room) = (over, node_over, room);
    };
    let line = |text: &str| {
        text.lines().find(|l| l.starts_with("- **fig11-overload**")).unwrap_or_default().to_owned()
    };
    set(&mut r, "least-loaded", 0.25, 0.26, 0.14);
    set(&mut r, "dcuda", 0.09, 0.17, 0.017);
    let text = report(&r);
    assert!(text.contains("DCUDA cuts overloaded GPU-samples by 87.9%"), "{text}");
    assert!(line(&text).contains("its cause is the one stated"), "{}", line(&text));
    // no better where the node had room: the split does not explain it
    set(&mut r, "dcuda", 0.09, 0.17, 0.10);
    let text = report(&r);
    assert!(!text.contains("DCUDA cuts overloaded GPU-samples by"), "{text}");
    assert!(!line(&text).contains("its cause is the one stated"), "{}", line(&text));
    // the node rarely over its GPUs: neither
    set(&mut r, "dcuda", 0.09, 0.01, 0.017);
    assert!(!line(&report(&r)).contains("its cause is the one stated"));
}

/// Heavy load, arrival order 28 (seed 1, the fitted contention 0.6): DCUDA with the
/// daemon's constants was called stalled ("1 tasks never ended") when the experiment
/// first judged them (issue 57): its last application waited for the slice of a group
/// whose application had left to end, with only the policy's ticks left to happen, and
/// the program engine stopped at once where the task engine keeps ticking while work
/// remains (`programs::tests::work_held_until_a_tick_runs_at_the_tick`).
#[test]
fn dcuda_with_the_daemons_constants_ends_every_task() {
    use tessera_sim::experiments::dcuda::{Constants, Load, run_one};
    use tessera_sim::workloads::dcuda::{APPS_CSV, parse_apps};
    let apps = parse_apps(APPS_CSV).unwrap();
    let heavy = Load { name: "heavy".into(), interval_s: 3 };
    let k = Constants { contention: 0.6, ..Constants::USED };
    let r = run_one(&apps, "dcuda", &heavy, 28, 1, &k);
    assert!(r.is_ok(), "{:?}", r.err());
}

/// The sensitivity re-runs simulate only the policies `READ_BY_CLAIMS` names (issue
/// 55): the claims judged without every other policy's runs and summaries are the same
/// claims, verdicts and numbers; and some runs are left out.
#[test]
fn the_claims_read_only_the_runs_the_sensitivity_simulates() {
    use tessera_sim::experiments::dcuda::{READ_BY_CLAIMS, rejudge};
    let r = plain();
    let mut only = r.clone();
    only.runs.retain(|x| READ_BY_CLAIMS.contains(&x.policy.as_str()));
    only.summaries.retain(|x| READ_BY_CLAIMS.contains(&x.policy.as_str()));
    assert!(only.runs.len() < r.runs.len(), "nothing left out");
    rejudge(&mut only);
    assert!(!r.claims.is_empty());
    assert_eq!(only.claims, r.claims);
}

/// Issue 55: the load curve's runs at the experiment's own loads (7, 5 and 3 s between
/// arrivals) are the main run's, taken from the cache, not simulated again under
/// another name.
#[test]
fn the_load_curve_takes_the_main_runs_from_the_cache() {
    use tessera_sim::experiments::dcuda::{RunCache, load_curve, run_cached};
    use tessera_sim::workloads::dcuda::{APPS_CSV, parse_apps};
    let cfg = plain_config();
    let cache = RunCache::default();
    let r = run_cached(&cfg, &cache).unwrap();
    let (_, simulated) = cache.counts();
    let apps = parse_apps(APPS_CSV).unwrap();
    let curve = load_curve(&apps, &cfg, &[5], &cfg.constants, 1, &cache).unwrap();
    assert_eq!(cache.counts().1, simulated, "the 5 s runs simulated again");
    let medium = |p: &str| r.summaries.iter().find(|s| s.policy == p && s.load == "medium");
    assert_eq!(curve[0].mean_normalized[0], medium("least-loaded").unwrap().mean_normalized);
    // a load the experiment does not run is simulated
    load_curve(&apps, &cfg, &[2], &cfg.constants, 1, &cache).unwrap();
    assert_eq!(cache.counts().1, simulated + 2);
}

/// Issue 57 item 6: the readings of `fig11-utilization`, `fig13b-fairness` and
/// `fig12-stable` conclude from their numbers, both ways: a ceiling below the claim's
/// threshold names the load (or least-loaded's fairness) as the cause, one above it
/// names nothing; DCUDA's times following the orders' offered load name the orders,
/// times against it nothing.
#[test]
fn the_ceiling_readings_conclude_from_their_numbers() {
    use tessera_sim::experiments::dcuda::offered_over_node;
    let base = plain().clone();
    let medium = |r: &mut DcudaResults, p: &str| -> usize {
        r.summaries.iter().position(|s| s.policy == p && s.load == "medium").unwrap()
    };
    let with = |f: &dyn Fn(&mut DcudaResults)| {
        let mut r = base.clone();
        f(&mut r);
        // every claim fails, so that each gets its reading
        for c in &mut r.claims {
            c.verdict = tessera_sim::experiments::claims::Verdict::DoesNotHold;
        }
        report(&r)
    };
    // utilization: ceiling 64% over least-loaded's 60%: at most +6.7% < 7.6%
    let text = with(&|r| {
        let (l, d) = (medium(r, "least-loaded"), medium(r, "dcuda"));
        r.summaries[l].utilization = 0.60;
        r.summaries[d].utilization_ceiling = 0.64;
    });
    assert!(text.contains("could raise utilization by more than 6.7%"), "{text}");
    let text = with(&|r| {
        let (l, d) = (medium(r, "least-loaded"), medium(r, "dcuda"));
        r.summaries[l].utilization = 0.60;
        r.summaries[d].utilization_ceiling = 0.70;
    });
    assert!(!text.contains("could raise utilization by more than"), "{text}");
    // fairness: 0.97 leaves 3.1% to 1; 0.85 leaves 17.6%
    let text = with(&|r| {
        let l = medium(r, "least-loaded");
        r.summaries[l].jain = 0.97;
    });
    assert!(text.contains("Least-loaded's Jain index is already 0.970"), "{text}");
    let text = with(&|r| {
        let l = medium(r, "least-loaded");
        r.summaries[l].jain = 0.85;
    });
    assert!(!text.contains("Least-loaded's Jain index is already"), "{text}");
    // stability: six orders whose DCUDA times follow (or oppose) their offered load
    let apps = &base.apps;
    let interval = base.config.loads.iter().find(|l| l.name == "medium").unwrap().interval_s;
    let offered: Vec<f64> =
        (0..6).map(|k| offered_over_node(apps, base.config.seed, k, interval)).collect();
    assert!(offered.iter().any(|o| *o != offered[0]), "the orders offer the same load");
    let orders = |sign: f64| {
        let offered = offered.clone();
        move |r: &mut DcudaResults| {
            let one = r.runs_of("dcuda", "medium").next().unwrap().clone();
            r.runs.retain(|x| !(x.policy == "dcuda" && x.load == "medium"));
            for (k, o) in offered.iter().enumerate() {
                let mut run = one.clone();
                run.order = k;
                run.mean_normalized = 1.5 + sign * o;
                r.runs.push(run);
            }
        }
    };
    let text = with(&orders(1.0));
    assert!(text.contains("The cause is the orders' load"), "{text}");
    let text = with(&orders(-1.0));
    assert!(!text.contains("The cause is the orders' load"), "{text}");
}

/// An order's offered load is a share of its span, and arrivals closer together offer
/// more (the same applications in the same order, overlapping longer).
#[test]
fn an_orders_offered_load_grows_as_arrivals_come_closer() {
    use tessera_sim::experiments::dcuda::offered_over_node;
    let apps = &plain().apps;
    for k in 0..3 {
        let (seven, one) = (offered_over_node(apps, 1, k, 7), offered_over_node(apps, 1, k, 1));
        assert!((0.0..=1.0).contains(&seven) && (0.0..=1.0).contains(&one));
        assert!(one > seven, "order {k}: {one} at 1 s, {seven} at 7 s");
    }
}
