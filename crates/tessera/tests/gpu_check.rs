//! `scripts/gpu-check.sh --fake` end to end (issue 52, item 3's dry run): with the
//! binaries this build made, on the fake driver and an emulated daemon, the script
//! writes its seven result files; the self-test and the plain driver-API program run
//! and pass; every framework this machine lacks is SKIPPED with the reason, none
//! FAILS for want of it; the summary says it is a fake run. SKIPPED where NVIDIA's
//! headers cannot be fetched.

use crate::common;

use std::process::Command;

#[test]
fn the_gpu_check_dry_runs_on_the_fake_driver() {
    let Some(scratch) = common::scratch("gpu-check") else { return };
    if tessera_driver::testing::nvidia_artifacts_or_skip_for("13.0", "cuda.h").is_none() {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = scratch.dir.join("out");
    // the script's BIN_DIR: tessera and the interposer side by side, as gpu-bin.sh makes
    // them
    let bin = &scratch.bin;
    let run = Command::new("bash")
        .arg(root.join("scripts/gpu-check.sh"))
        .arg("--fake")
        .arg(bin)
        .env("OUT", &out)
        .env("TESSERA_GPU_CHECK_SELFTEST_SECONDS", "3")
        .env("TMPDIR", &scratch.dir)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    for file in [
        "summary.txt",
        "results.json",
        "versions.txt",
        "nvidia-smi.txt",
        "selftest.json",
        "selftest.txt",
        "logs.tar.gz",
    ] {
        assert!(out.join(file).is_file(), "{file} missing: {text}");
    }
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(summary.contains("FAKE MODE"), "{summary}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["meta"]["mode"], "fake", "{summary}");
    let checks = results["checks"].as_array().expect("a list of checks");
    let verdict = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].as_str().unwrap_or("?").to_owned())
            .unwrap_or_else(|| "absent".into())
    };
    assert_eq!(verdict("c.axpy"), "PASS", "{summary}");
    assert_eq!(verdict("daemon"), "PASS", "{summary}");
    // the self-test ran; its own verdicts are its test's (tests/selftest.rs)
    let selftest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("selftest.json")).unwrap())
            .unwrap_or(serde_json::Value::Null);
    assert_eq!(selftest["stand_in"], true, "{summary}");
    // what this machine lacks is SKIPPED with the reason, never FAILED
    for lacking in ["torch.limits", "cupy", "numba"] {
        let v = verdict(lacking);
        assert!(v == "SKIPPED" || v == "PASS", "{lacking}: {v}: {summary}");
    }
}
