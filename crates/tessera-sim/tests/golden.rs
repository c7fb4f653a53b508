//! A small seeded Flexy experiment: its output is pinned (golden) and byte-identical
//! across runs.

use tessera_sim::experiments::flexy::{self, FlexyConfig};
use tessera_sim::workload::Submission;
use tessera_sim::workloads::flexy::Mix;

fn small() -> FlexyConfig {
    FlexyConfig {
        mixes: vec![Mix::W1],
        loads: vec![0.5, 0.25],
        runs: 1,
        submissions: vec![Submission::Window],
        ..FlexyConfig::default()
    }
}

#[test]
fn small_flexy_experiment_matches_its_golden_output() {
    let results = flexy::run(&small(), &|_, _| {}).unwrap();
    let json = serde_json::to_string_pretty(&results).unwrap();
    insta::assert_snapshot!("flexy_w1_small", json);
}

#[test]
fn same_seed_gives_byte_identical_files() {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("flexy-determinism");
    let (a, b) = (base.join("a"), base.join("b"));
    let mut cfg = small();
    cfg.submissions = vec![Submission::Window, Submission::Burst];
    for dir in [&a, &b] {
        let _ = std::fs::remove_dir_all(dir);
        let results = flexy::run(&cfg, &|_, _| {}).unwrap();
        flexy::write_outputs(&results, dir).unwrap();
    }
    let mut names: Vec<_> =
        std::fs::read_dir(&a).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert!(names.len() >= 8, "results.json, report.md and 6 figures: {names:?}");
    for name in names {
        let (x, y) = (std::fs::read(a.join(&name)).unwrap(), std::fs::read(b.join(&name)).unwrap());
        assert!(x == y, "{name:?} differs between two runs with the same seed");
    }
}

#[test]
fn a_different_seed_gives_different_results() {
    let r1 = flexy::run(&small(), &|_, _| {}).unwrap();
    let r2 = flexy::run(&FlexyConfig { seed: 2, ..small() }, &|_, _| {}).unwrap();
    assert_ne!(r1.records, r2.records);
}

#[test]
fn bad_configurations_are_rejected_with_a_reason() {
    for cfg in [
        FlexyConfig { runs: 0, ..small() },
        FlexyConfig { loads: vec![], ..small() },
        FlexyConfig { loads: vec![-1.0], ..small() },
        FlexyConfig { gpus: 1, ..small() },
        FlexyConfig { submissions: vec![], ..small() },
        FlexyConfig { pareto_shape: 0.5, ..small() },
    ] {
        let err = flexy::run(&cfg, &|_, _| {}).unwrap_err();
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn schedgpu_experiment_matches_its_golden_output() {
    let (results, series) = tessera_sim::experiments::schedgpu::run().unwrap();
    assert_eq!(series.len(), 4, "one time series per notification policy");
    let json = serde_json::to_string_pretty(&results).unwrap();
    insta::assert_snapshot!("schedgpu", json);
}

#[test]
fn schedgpu_policies_keep_table_3s_order() {
    let (results, _) = tessera_sim::experiments::schedgpu::run().unwrap();
    let makespan = |c: &str| {
        results
            .scenarios
            .iter()
            .find(|s| s.scenario == "mixed" && s.configuration == c)
            .unwrap()
            .makespan_s
    };
    let seq = results
        .scenarios
        .iter()
        .find(|s| s.configuration == "sequential" && s.scenario == "mixed-sequential")
        .unwrap();
    // sequential is the sum of Table 2's single-instance times (4 of each)
    assert!((seq.makespan_s - 4.0 * (226.847 + 322.799 + 69.144)).abs() < 1e-3);
    assert!(makespan("FIFO") > makespan("MMU"));
    assert!(makespan("MMU") > makespan("Priority FIFO"));
    assert!(makespan("Priority MMU") <= makespan("Priority FIFO"));
    assert!(seq.makespan_s > 4.0 * makespan("FIFO"));
}
