//! The DCUDA experiment end to end, small: every run completes every application, the
//! results are reproducible, and the claims are all judged.

use tessera_sim::experiments::dcuda::{DcudaConfig, POLICIES, report, run};

#[test]
fn a_small_dcuda_experiment_runs_every_application_and_judges_every_claim() {
    let cfg = DcudaConfig { orders: 2, ..DcudaConfig::paper(3) };
    let r = run(&cfg).unwrap();
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
    assert_eq!(r.claims.len(), 16);
    assert!(r.claims.iter().all(|c| c.ours.is_some()), "every claim measured");
    assert_eq!(r.comparisons.len(), r.claims.len());
    // the power model's first step was calibrated: least-loaded at medium load matches
    // Table 2 by construction
    let ll = r.summary("least-loaded", "medium").unwrap();
    assert!((ll.energy_j - 74_935.0).abs() < 1.0, "{}", ll.energy_j);
    let again = run(&cfg).unwrap();
    assert_eq!(again.runs, r.runs, "reproducible");
    let md = report(&r);
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
/// say they rest on a constant of ours; least-loaded's energy at light and heavy load
/// checks the power fit out of sample, the medium one is the fit's input.
#[test]
fn energy_claims_cannot_hold_with_the_wrong_sign() {
    use tessera_sim::experiments::claims::Test;
    let cfg = DcudaConfig { orders: 1, ..DcudaConfig::paper(3) };
    let r = run(&cfg).unwrap();
    for load in ["light", "medium", "heavy"] {
        let c = r.claims.iter().find(|c| c.id == format!("table2-{load}")).unwrap();
        match c.test {
            Test::Near { paper, tolerance } => assert!(paper > 0.0 && tolerance < paper, "{c:?}"),
            other => panic!("{other:?}"),
        }
        assert!(c.depends_on.is_some(), "{c:?}");
        let e = r.claims.iter().find(|c| c.id == format!("table2-{load}-least-loaded-energy"));
        assert_eq!(e.unwrap().is_evidence(), load != "medium");
    }
}

/// The fairness groups' slack is a constant of ours that reaches the policy: DCUDA's
/// runs change with it, least-loaded's do not.
#[test]
fn the_group_slack_reaches_dcuda() {
    use tessera_sim::experiments::dcuda::Constants;
    let at = |group_slack| {
        let cfg = DcudaConfig {
            orders: 1,
            constants: Constants { group_slack, ..Constants::USED },
            ..DcudaConfig::paper(3)
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
