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

/// The H200's first run (2026-11-28): torch_check.py's training part set `steps` (its
/// step count) into the report, replacing the steps' findings, and died before its
/// first step with and without tessera. The report now refuses its own field names,
/// and no check program passes one to `Report.set` (read from their syntax trees, so
/// a program this machine cannot run, for want of torch, is checked too).
#[test]
fn no_check_program_overwrites_the_reports_own_fields() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let here = root.join("scripts/gpu-check");
    let probe = r#"
import ast, pathlib, sys
sys.path.insert(0, sys.argv[1])
from common import Report
r = Report("probe", "part")
r.set(batch=1, steps_per_round=50)
try:
    r.set(steps=50)
    print("Report.set(steps=...) was accepted")
    sys.exit(1)
except KeyError:
    pass
bad = []
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.py")):
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "set" \
                and getattr(node.func.value, "id", None) == "report":
            bad += [f"{f.name}:{node.lineno} {k.arg}" for k in node.keywords if k.arg in Report.RESERVED]
print("\n".join(bad))
sys.exit(1 if bad else 0)
"#;
    let run = match Command::new("python3").arg("-c").arg(probe).arg(&here).output() {
        Ok(run) => run,
        Err(e) => {
            eprintln!("SKIPPED: python3 could not run: {e}");
            return;
        }
    };
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The H200's third run (2026-11-28): the self-test's table run failed two checks its
/// JSON run had passed, and the summary said PASS ("text table: exit status 1"). A check
/// the table run fails now fails the self-test, named in the reason.
#[test]
fn the_judge_fails_the_selftest_on_a_check_its_table_run_fails() {
    let Some(scratch) = common::scratch("gpu-judge") else { return };
    let (logs, out) = (scratch.dir.join("logs"), scratch.dir.join("out"));
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let json = out.join("selftest.json");
    let text = out.join("selftest.txt");
    std::fs::write(
        &json,
        r#"{"device": "NVIDIA H200", "cuda": "13.0", "checks": [
            {"name": "launch", "result": "PASS", "measured": "+11 ns", "expected": "at most 100 ns"}]}"#,
    )
    .unwrap();
    std::fs::write(
        &text,
        "CHECK         RESULT   MEASURED (EXPECTED)\nlaunch        FAIL     +407 ns (at most 100 ns)\n",
    )
    .unwrap();
    let runs = [("tessera.json", 0, json.as_path()), ("tessera.text", 1, text.as_path())];
    let Some(selftest) = judge_selftest(&logs, &out, &runs) else {
        eprintln!("SKIPPED: python3 could not run");
        return;
    };
    assert_eq!(selftest["status"], "FAIL", "{selftest}");
    assert!(selftest.to_string().contains("+407 ns"), "{selftest}");
}

/// Repeats of the self-test's launch and fair-weights checks
/// (`TESSERA_GPU_CHECK_REPEAT`) are more samples of the same claims: a check one of
/// them fails fails the self-test, and every run's numbers are reported side by side.
#[test]
fn the_judge_fails_the_selftest_on_a_check_a_repeat_fails_and_lists_every_runs_numbers() {
    let Some(scratch) = common::scratch("gpu-judge-repeat") else { return };
    let (logs, out) = (scratch.dir.join("logs"), scratch.dir.join("out"));
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let report = |hook: f64, share: f64, launch: &str| {
        format!(
            r#"{{"device": "NVIDIA H200", "cuda": "13.0", "checks": [
            {{"name": "launch", "result": "{launch}", "measured": "the hook {hook:+} ns", "expected": "at most 100 ns",
              "numbers": {{"hook_ns": {hook}, "control_ns": 3.0}}}},
            {{"name": "fair-weights", "result": "PASS", "measured": "{share}", "expected": "0.25 ± 0.05",
              "numbers": {{"share": {share}}}}}]}}"#
        )
    };
    let judge = |repeat_launch: &str| {
        let files = [
            ("tessera.json", out.join("selftest.json"), report(64.0, 0.232, "PASS"), 0),
            ("repeat.1", logs.join("selftest.repeat.1.out"), report(58.0, 0.241, "PASS"), 0),
            (
                "repeat.2",
                logs.join("selftest.repeat.2.out"),
                report(130.0, 0.236, repeat_launch),
                i32::from(repeat_launch == "FAIL"),
            ),
        ];
        for (_, file, text, _) in &files {
            std::fs::write(file, text).unwrap();
        }
        let runs: Vec<_> = files.iter().map(|(m, f, _, rc)| (*m, *rc, f.as_path())).collect();
        judge_selftest(&logs, &out, &runs)
    };
    let Some(failed) = judge("FAIL") else {
        eprintln!("SKIPPED: python3 could not run");
        return;
    };
    assert_eq!(failed["status"], "FAIL", "{failed}");
    assert!(failed.to_string().contains("repeat.2: launch"), "{failed}");
    let passed = judge("PASS").unwrap();
    assert_eq!(passed["status"], "PASS", "{passed}");
    let across = &passed["measured"]["across_runs"];
    assert_eq!(across["launch.hook_ns"], serde_json::json!([64, 58, 130]), "{passed}");
    assert_eq!(across["fair-weights.share"], serde_json::json!([0.232, 0.241, 0.236]), "{passed}");
}

/// Write the GPU check's runs log of self-test runs (mode, exit status, its output
/// file), run `judge.py --final` on it, and return the self-test's verdict from
/// results.json; `None` when python3 cannot run.
fn judge_selftest(
    logs: &std::path::Path,
    out: &std::path::Path,
    runs: &[(&str, i32, &std::path::Path)],
) -> Option<serde_json::Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lines: String = runs
        .iter()
        .map(|(mode, rc, file)| {
            serde_json::json!({"check": "selftest", "mode": mode, "rc": rc, "wall_s": 20.0,
                "limit_s": 150, "timed_out": false, "out": file})
            .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(logs.join("runs.jsonl"), lines).unwrap();
    let run = Command::new("python3")
        .arg(root.join("scripts/gpu-check/judge.py"))
        .args(["--logs", logs.to_str().unwrap(), "--out", out.to_str().unwrap(), "--final"])
        .output()
        .ok()?;
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap_or_else(
            |_| panic!("no results.json: {}", String::from_utf8_lossy(&run.stderr)),
        ))
        .unwrap();
    Some(
        results["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "selftest"))
            .cloned()
            .unwrap_or_default(),
    )
}

/// `scripts/gpu-slicing-check.sh --fake` (issue 58, item 3's dry run): on the fake
/// driver, whose kernels compute nothing, the slicing check's every step runs and
/// passes — the rewrite gives each of its four kernels a twin, the twins' sub-kernels
/// are launched through cuda.bindings with the appended parameters, both Table 4 grids
/// are timed against the paper's rows, the fairness case's two programs run under a
/// daemon of this build with slicing on and off and are found in its status by pid —
/// so that the one call on a GPU machine spends
/// its time on the GPU, not on the script's mistakes. SKIPPED without numba-cuda's
/// Python (cuda.bindings and numpy) or NVIDIA's headers.
#[test]
fn the_slicing_check_dry_runs_on_the_fake_driver() {
    let Some(scratch) = common::scratch("slicing-check") else { return };
    let python = match common::python_client("numba-cuda") {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: no Python with cuda.bindings: {why}");
            return;
        }
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = scratch.dir.join("out");
    let run = Command::new("bash")
        .arg(root.join("scripts/gpu-slicing-check.sh"))
        .arg("--fake")
        .arg(&scratch.bin)
        .env("OUT", &out)
        .env("TESSERA_GPU_CHECK_PYTHON", &python)
        .output()
        .unwrap();
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap_or_default();
    let log = std::fs::read_to_string(out.join("log.txt")).unwrap_or_default();
    assert!(run.status.success(), "{summary}\n{log}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(summary.contains("FAKE MODE"), "{summary}");
    for step in [
        "rewrite",
        "init",
        "identity.matmul",
        "identity.stencil3d",
        "identity.grid_stride",
        "identity.block_sums",
        "table4.600x600",
        "table4.900x900",
    ] {
        assert!(summary.contains(&format!("PASS  {step}")), "{step}: {summary}");
    }
    // four identity steps, the paper's 16 Table 4 rows, and each grid at 62.5 and 125
    // blocks a multiprocessor
    assert_eq!(summary.matches("sub-kernels of").count(), 4 + 16 + 4, "{summary}");
    // the fairness case ran both ways under a daemon of this build, each tenant found
    assert!(summary.contains("PASS  fairness.dry"), "{summary}\n{log}");
    let fair: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fair.json")).unwrap()).unwrap();
    for run in ["with_slicing", "without_slicing", "with_slicing_fatbin"] {
        assert!(fair[run]["long_share"].is_f64(), "{run}: {fair}");
        // and each program's own clock gave the short tenant's share window by window
        assert!(fair[run]["windows"]["short_shares"].is_array(), "{run}: {fair}");
        assert!(fair[run]["windows"]["short_longest_wait_s"].is_f64(), "{run}: {fair}");
    }
    // the fat binary's run loaded the rewritten PTX, its kernels sliced
    assert!(summary.contains("PASS  fairness.fatbin"), "{summary}\n{log}");
    // numba's kernel took nvJitLink's PTX and one launch was sliced; whole without
    assert!(summary.contains("PASS  numba.dry"), "{summary}\n{log}");
    // and so did the PTX corpus's four numba kernels, each as sub-kernels
    assert!(summary.contains("sliced launches: 5 of 5 kernels"), "{summary}\n{log}");
    // the CUDA-runtime program was built from the wheels and ran to the runtime's refusal
    assert!(summary.contains("SKIPPED runtime"), "{summary}\n{log}");
}
