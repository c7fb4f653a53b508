//! The FairGV experiment end to end, short: every setup, benchmark and scheduler runs,
//! every claim is judged, and a second run gives the same numbers.

use tessera_sim::experiments::fairgv::{report, run_for};

#[test]
fn a_short_fairgv_experiment_runs_and_judges_every_claim() {
    let r = run_for(0.5).unwrap();
    assert_eq!(r.rows.len(), (4 + 2) * 4);
    for x in &r.rows {
        assert!(x.mmr > 0.0 && x.mmr <= 1.0 + 1e-9, "{x:?}");
        assert!(x.overhead > 0.0 && x.overhead.is_finite(), "{x:?}");
        assert!(x.normalized.iter().all(|v| v.is_finite() && *v > 0.0), "{x:?}");
        assert_eq!(x.completion_s.len(), x.weights.len());
        assert!(x.completion_s.iter().all(|v| v.is_finite() && *v > 0.0), "{x:?}");
    }
    assert_eq!(r.claims.len(), 12);
    assert_eq!(r.work_conserving.len(), 4 * 2);
    assert_eq!(r.collaborative.len(), 2 * 8 * 2);
    assert!(r.work_conserving.iter().all(|x| x.gpu_busy > 0.0 && x.gpu_busy <= 1.0));
    assert!(r.collaborative.iter().all(|x| x.normalized_run_time.is_finite()));
    assert!(r.claims.iter().all(|c| c.ours.is_some()));
    // every constant of ours varied, every claim of the setting judged at each value
    assert_eq!(r.sensitivity.len(), 8);
    for c in &r.sensitivity {
        assert_eq!(c.claims.len(), 10, "{}", c.constant);
        assert!(c.values[0] != c.values[1] && c.values[1] != c.values[2], "{c:?}");
    }
    assert_eq!(run_for(0.5).unwrap().rows, r.rows, "deterministic");
    assert!(report(&r).contains("## Claims"));
    let dir = std::env::temp_dir().join(format!("tessera-fairgv-test-{}", std::process::id()));
    tessera_sim::experiments::fairgv::run_and_write(&dir).unwrap();
    for f in [
        "results.json",
        "report.md",
        "fig8.svg",
        "fig9.svg",
        "fig10.svg",
        "fig11.svg",
        "table4.svg",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(run_for(0.0).is_err());
}
