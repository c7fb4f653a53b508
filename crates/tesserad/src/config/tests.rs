//! The daemon configuration's unit tests.

use super::*;

/// Issue 57: `--policy fair` waits what `tessera sim fairgv` judges (it waited 2 ms
/// while the experiment judged 50 µs).
#[test]
fn the_fair_policy_waits_the_judged_turn_wait() {
    let c = DaemonConfig { policy: PolicyName::Fair, ..DaemonConfig::default() };
    assert_eq!(
        c.policy_config(2),
        Some(PolicyConfig::Fair { spin: tessera_core::policies::fair::TURN_WAIT })
    );
}

/// Issue 57 item 6: `tessera sim dcuda` runs DCUDA with the daemon's constants beside
/// the paper's (`DcudaParams::DAEMON`); they are the `[dcuda]` section's defaults.
#[test]
fn the_daemons_dcuda_is_the_one_the_experiment_runs() {
    use tessera_core::policies::dcuda::DcudaParams;
    let c = DaemonConfig {
        policy: PolicyName::LeastLoaded,
        balance: BalanceName::Dcuda,
        ..DaemonConfig::default()
    };
    assert_eq!(c.dcuda_params(), Some(DcudaParams::DAEMON));
}

/// A one-GPU node runs with the default settings: before, the default reservation
/// of one GPU was refused ("must be smaller than the number of GPUs") and the
/// daemon did not start.
#[test]
fn a_one_gpu_node_runs_with_the_default_policy() {
    let gpus = tessera_core::GpuSpec::uniform(1, tessera_core::Bytes::mib(1024));
    let node = DaemonConfig::default();
    assert_eq!(node.policy, PolicyName::Node, "the composed policy is the default");
    assert!(node.policy_config(1).unwrap().build(&gpus).is_ok());
    assert!(matches!(
        node.policy_config(2).unwrap(),
        PolicyConfig::Node { params } if params.flexy.reserve == 1
    ));
    // balance = "dcuda" alone now meets the default policy, which balances already
    let dcuda: DaemonConfig = toml::from_str("balance = \"dcuda\"\n").unwrap();
    let err = dcuda.validate().unwrap_err().to_string();
    assert!(err.contains("the default") && err.contains("least-loaded"), "{err}");
    for policy in [PolicyName::Flexy, PolicyName::Priority] {
        let c = DaemonConfig { policy, ..DaemonConfig::default() };
        assert!(c.policy_config(1).unwrap().build(&gpus).is_ok(), "{policy:?}");
        assert!(matches!(
            c.policy_config(2).unwrap(),
            PolicyConfig::Flexy { reserve: 1, .. } | PolicyConfig::Priority { reserve: 1, .. }
        ));
    }
}

/// The node policy on real GPUs: before, the configuration was refused (it
/// migrates, and real programs cannot be moved yet); now it is accepted and the
/// policy places without moving. On emulated GPUs it migrates.
#[test]
fn the_node_policy_runs_on_real_gpus_without_migrating() {
    let cuda: DaemonConfig =
        toml::from_str("policy = \"node\"\n[executor]\nkind = \"cuda\"\n").unwrap();
    cuda.validate().unwrap();
    let migrates = |c: &DaemonConfig| match c.policy_config(4) {
        Some(PolicyConfig::Node { params }) => params.migrate,
        other => panic!("{other:?}"),
    };
    assert!(!migrates(&cuda));
    let emulated = DaemonConfig { policy: PolicyName::Node, ..DaemonConfig::default() };
    assert!(migrates(&emulated));
    // gpu-lets' settings are checked under node too (registered models use them)
    let bad = DaemonConfig {
        gpulets: GpuletsConfig { period_s: 0, ..GpuletsConfig::default() },
        ..emulated
    };
    assert!(bad.validate().is_err());
}

#[test]
fn toml_is_parsed_and_unknown_keys_are_rejected() {
    let c: DaemonConfig = toml::from_str(
        "gpus = 2\npolicy = \"priority\"\n[executor]\nkind = \"emulated\"\nspeedup = 4.0\n",
    )
    .unwrap();
    assert_eq!(c.gpus, 2);
    assert_eq!(c.policy, PolicyName::Priority);
    assert_eq!(c.executor, ExecutorKind::Emulated { speedup: 4.0 });
    assert!(toml::from_str::<DaemonConfig>("gpu = 2\n").is_err());
    assert!(DaemonConfig { gpus: 0, ..Default::default() }.validate().is_err());
    assert!(DaemonConfig { ring_slots: 3, ..Default::default() }.validate().is_err());
}
