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
    assert_eq!(r.claims.len(), 13);
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
    ] {
        let cfg = DcudaConfig { orders: 1, constants, ..DcudaConfig::paper(3) };
        assert!(matches!(run(&cfg), Err(ExperimentError::Config(_))), "{constants:?}");
    }
}
