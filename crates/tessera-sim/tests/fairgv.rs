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
    }
    assert_eq!(r.claims.len(), 5);
    assert!(r.claims.iter().all(|c| c.ours.is_some()));
    assert_eq!(run_for(0.5).unwrap().rows, r.rows, "deterministic");
    assert!(report(&r).contains("## Claims"));
    assert!(run_for(0.0).is_err());
}
