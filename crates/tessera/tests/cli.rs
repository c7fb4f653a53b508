//! The command line as a user meets it.

use std::process::Command;

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

#[test]
fn sim_flexy_writes_its_outputs() {
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-flexy");
    let _ = std::fs::remove_dir_all(&out);
    let status = tessera()
        .args(["sim", "flexy", "--workload", "w1", "--runs", "1", "--loads", "1,0.25", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(stdout.contains("claims under the main reading (uf2n-window)"), "{stdout}");
    assert!(stdout.contains("w1-headline-98-at-70: ours"), "{stdout}");
    for f in [
        "results.json",
        "report.md",
        "fig5.svg",
        "fig6.svg",
        "fig7.svg",
        "fig5-uf2n-window-head.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("Where we differ"));
}

/// Issue 55: every experiment has a `--quick` form a reader can run in seconds (those
/// that run whole in seconds accept it and say so).
#[test]
fn every_experiment_takes_quick() {
    for e in ["flexy", "schedgpu", "gpulets", "dcuda", "fairgv", "node"] {
        let out = tessera().args(["sim", e, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--quick"), "sim {e} has no --quick:\n{help}");
    }
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-schedgpu-quick");
    let run = tessera().args(["sim", "schedgpu", "--quick", "--out"]).arg(&out).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stderr).contains("the whole evaluation runs"));
}

#[test]
fn bad_arguments_fail_with_a_message() {
    for args in [
        &["sim", "flexy", "--runs", "0"][..],
        &["sim", "flexy", "--pareto-shape", "1"],
        &["sim", "flexy", "--loads", "0"],
        &["sim", "flexy", "--workload", "w9"],
        &["sim", "flexy", "--modes", "uf3-window"],
        &["sim", "flexy", "--modes", "uf2n-window-tail"],
    ] {
        let out = tessera().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!out.stderr.is_empty(), "{args:?} should say why");
    }
}

#[test]
fn bench_sim_prints_ratios() {
    let out = tessera()
        .args(["bench", "sim", "--runs", "1", "--scales", "1,2", "--floor-ms", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (measured, growth): (Vec<_>, Vec<_>) =
        lines.iter().partition(|l| l["measurement"] == "simulator");
    // four Flexy policies at 1x, then ten policies (the node policy's since stop 48) at
    // two scales each
    assert_eq!(measured.len(), 4 + 10 * 2);
    assert!(measured.iter().all(|l| l["floor_over_task"].as_f64().is_some_and(|r| r > 0.0)));
    // issue 55: cost per task completed, beside the per-event figure and the floor's
    for l in &measured {
        let (tasks, per_task) = (l["tasks"].as_u64().unwrap(), l["ns_per_task"].as_f64().unwrap());
        assert!(tasks > 0 && per_task > 0.0 && l["ns_per_event"].as_f64().unwrap() > 0.0, "{l}");
        assert!(l["floor_ns_per_event"].as_f64().unwrap() > 0.0, "{l}");
    }
    assert_eq!(growth.len(), 10);
    assert!(growth.iter().all(|l| l["ratio"].as_f64().is_some_and(|r| r > 0.0)));
    assert!(growth.iter().all(|l| l["floor_ratio"].as_f64().is_some_and(|r| r > 0.0)));
    let shared = measured.iter().filter(|l| l["path"] == "shared").count();
    assert_eq!(shared, 2, "LeastLoaded8 at both scales");
}

#[test]
fn sim_schedgpu_writes_its_outputs() {
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-schedgpu");
    let _ = std::fs::remove_dir_all(&out);
    let run = tessera().args(["sim", "schedgpu", "--out"]).arg(&out).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stdout).contains("Priority MMU"));
    for f in ["results.json", "report.md", "timeline.svg"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
}

#[test]
fn ledger_status_reports_a_ledger_and_refuses_a_missing_one() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let missing = dir.join("no-such-ledger");
    let out = tessera().args(["ledger", "status", "--path"]).arg(&missing).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no ledger at"));
    assert!(!missing.exists(), "status must not create a ledger");

    let path = dir.join(format!("cli-ledger-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let ledger = tessera_ledger::Ledger::open(&tessera_ledger::LedgerConfig::new(
        &path,
        tessera_ledger::GpuSource::Explicit(vec![tessera_core::Bytes::mib(4799)]),
    ))
    .unwrap();
    ledger.pre_alloc(0, 1 << 30, tessera_ledger::Wait::NoWait).unwrap();
    let out = tessera().args(["ledger", "status", "--path"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("1024.000 MiB (1073741824 B)") && text.contains("4799.000 MiB"),
        "{text}"
    );
}

/// `bench interposer --json`: one object per measured call, with its percentiles (on
/// the fake driver; skipped where NVIDIA's cuda.h or the interposer is not available).
#[test]
fn bench_interposer_prints_percentiles() {
    if let Err(why) = tessera_driver::testing::nvidia_artifacts() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let preload = std::env::current_exe().unwrap().parent().unwrap().join("libtessera_cuda.so");
    if !preload.is_file() {
        eprintln!("SKIPPED: {} is not built (run the workspace's tests)", preload.display());
        return;
    }
    let out = tessera()
        .args(["bench", "interposer", "--batches", "50", "--switches", "5", "--json", "--preload"])
        .arg(&preload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8);
    for l in &lines[..7] {
        let (p50, p99) = (l["p50_ns"].as_f64().unwrap(), l["p99_ns"].as_f64().unwrap());
        assert!(p50 > 0.0 && p99 >= p50, "{l}");
    }
    // a program's start with and without the interposer, and the interposer's size
    // (issue 53, item 4)
    assert!(lines[6]["interposer_bytes"].as_f64().unwrap() > 100_000.0, "{}", lines[6]);
    // the allocation pair's ratio to the direct one, from the same run (its target is
    // the bench's to report, not this test's: shared machines are noisy)
    let ratio = &lines[7];
    assert!(ratio["ratio"].as_f64().unwrap() > 0.0 && ratio["target"] == 3.0, "{ratio}");
}

/// An error says each cause once (issue 53, item 6): `tessera status` with no daemon
/// said "No such file or directory (os error 2)" twice, once from the error and once
/// from its source.
#[test]
fn an_error_says_each_cause_once() {
    let socket = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("no-daemon-{}.sock", std::process::id()));
    let out = tessera().args(["status", "--socket"]).arg(&socket).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(err.starts_with("tessera: "), "{err}");
    // and the fix `tessera doctor` would give, on a line of its own
    assert!(err.lines().any(|l| l.starts_with("  fix: start the daemon")), "{err}");
}

/// A ledger this user may not open: the cause once, and how to get access (run as
/// `nobody`, so root only; SKIPPED otherwise). Before: "Permission denied (os error 13):
/// Permission denied (os error 13)" and nothing more.
#[test]
fn a_ledger_this_user_may_not_open_says_how_to_get_access() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: running as another user needs root");
        return;
    }
    // a ledger file it may not open, and one in a directory it may not enter (a clone
    // of the repository under `mktemp -d`, 0700, put the first in the second: the
    // command said "no ledger at ...")
    for (tag, dir_mode) in [("file", 0o755), ("dir", 0o700)] {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("ledger-denied-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
        let ledger = dir.join("ledger");
        std::fs::write(&ledger, vec![0u8; 4096]).unwrap();
        std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_tessera"))
            .args(["ledger", "status", "--path"])
            .arg(&ledger)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{tag}: {err}");
        assert_eq!(err.matches("Permission denied").count(), 1, "{tag}: {err}");
        assert!(
            err.lines().any(|l| l.starts_with("  fix: this user may not open the node's ledger")),
            "{tag}: {err}"
        );
    }
}

/// `tessera run --weight` takes what the daemon accepts, 1 to 1000; 0 was accepted.
#[test]
fn a_weight_outside_one_to_a_thousand_is_refused() {
    for weight in ["0", "1001"] {
        let out = tessera().args(["run", "--weight", weight, "--", "true"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--weight {weight}: {err}");
        assert!(err.contains("1..=1000") || err.contains("1000"), "{err}");
    }
}

/// The README's sample of the demo's table is a real run's, not pasted: every line of it
/// is in `docs/results/demo/output.txt`, which `tessera demo` wrote (with its verdict and
/// the host's lag during that run).
#[test]
fn the_readmes_demo_table_is_a_recorded_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let recorded = std::fs::read_to_string(root.join("docs/results/demo/output.txt")).unwrap();
    let table: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("policy        SLA met"))
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(table.len() >= 4, "no demo table in the README");
    for line in table {
        assert!(
            recorded.lines().any(|r| r == line),
            "README line not in the recorded run: {line:?}"
        );
    }
    assert!(recorded.contains("host lag:"), "the recorded run says how far behind the host ran");
}
