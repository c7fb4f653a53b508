//! Programs built for the per-thread default stream (issue 51 item 7): `nvcc
//! --default-stream per-thread`, or `CUDA_API_PER_THREAD_DEFAULT_STREAM`, makes `cuda.h`
//! rename the stream entry points a program calls to their `_ptsz`/`_ptds` variants,
//! whose NULL stream is the calling thread's per-thread default stream — which can be
//! captured, where the legacy stream cannot. Run on the fake driver compiled against
//! NVIDIA's `cuda.h` (skipped, with the reason, where it cannot be fetched), which
//! implements those variants as the real driver does.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The harness (one emulated GPU) and `ptsz_app.c` built against the real `cuda.h`,
/// linked with the fake driver as `libcuda.so.1`, so that it calls the per-thread
/// names directly.
fn ptsz_setup(tag: &str) -> Option<(Setup, PathBuf)> {
    let s = setup(tag, 1)?;
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h")?;
    let app = tessera_driver::testing::build_c_program_linked(
        &artifacts,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptsz_app.c"),
        &s.dir.join("ptsz_app"),
        &[&s.dir.join("libcuda.so.1")],
    )
    .unwrap();
    Some((s, app))
}

/// `app` run on the fake driver alone (no interposer), with `env`.
fn bare(s: &Setup, app: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = Command::new(app);
    c.args(args).env("LD_LIBRARY_PATH", &s.dir);
    for (k, v) in env {
        c.env(k, v);
    }
    String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
}

/// The fake driver's call log so far.
fn calls(s: &Setup) -> String {
    std::fs::read_to_string(s.dir.join("libcuda.so.1.log")).unwrap_or_default()
}

/// A capture begun on the per-thread default stream (`cuStreamBeginCapture_v2_ptsz` on
/// the NULL stream) under the launch gate, in each capture mode, records the program's
/// three `cuLaunchKernel_ptsz` launches into the graph — not another thread's launch on
/// its own per-thread stream meanwhile, which runs — ends, and its graph replays them
/// (`cuGraphLaunch_ptsz`), each replay gated. Before, those names were not hooked: the
/// capture module never saw the capture, the launches went through the gate, whose
/// first measured launch synchronised the context and so invalidated a global or
/// thread-local capture (the second launch failed with
/// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901) — and the fake driver, answering the
/// per-thread names with the plain ones, captured nothing there at all.
#[test]
fn a_capture_on_the_per_thread_default_stream_replays_under_the_gate() {
    let Some((s, app)) = ptsz_setup("ptsz") else { return };
    // the rules the test relies on, as the fake driver models them (no interposer): the
    // NULL stream captures, and the legacy stream, which synchronises with it, is
    // unusable meanwhile; a context synchronisation invalidates a global or
    // thread-local capture, and so does a launch on the legacy stream
    let out = bare(&s, &app, &["3", "1"], &[("FAKE_CUDA_LOG", "1")]);
    for want in ["capturing 1", "info 1", "legacy_status 906", "captured", "replayed"] {
        assert!(out.lines().any(|l| l == want), "{want:?} in {out}");
    }
    let log = calls(&s);
    assert!(log.contains("cuStreamEndCapture: 3 launches (per-thread stream)"), "{log}");
    assert!(log.contains("cuGraphLaunch: 3 launches (per-thread stream)"), "{log}");
    for mode in ["0", "1"] {
        let out = bare(&s, &app, &["3", "1", mode], &[("SYNC_IN_CAPTURE", "1")]);
        assert!(out.contains("ctxsync 900") && out.contains("error launch 901"), "{mode}: {out}");
    }
    let out = bare(&s, &app, &["3", "1"], &[("LEGACY_IN_CAPTURE", "1")]);
    assert!(out.contains("legacy 906") && out.contains("error launch 901"), "{out}");
    let _ = std::fs::remove_file(s.dir.join("libcuda.so.1.log"));

    for mode in ["0", "1", "2"] {
        let env = [("OTHER_THREAD", "1"), ("FAKE_CUDA_LOG", "1")];
        let (code, out, err) = run(s.app_at(&app, &["3", "1", mode], &env));
        assert_eq!(code, 0, "mode {mode}: {out}{err}");
        for want in ["capturing 1", "info 1", "other 0 0", "captured", "replayed"] {
            assert!(out.lines().any(|l| l == want), "mode {mode}: {want:?} in {out}{err}");
        }
    }
    let log = calls(&s);
    let ends: Vec<&str> = log.lines().filter(|l| l.starts_with("cuStreamEndCapture")).collect();
    assert_eq!(ends, ["cuStreamEndCapture: 3 launches (per-thread stream)"; 3], "{log}");
    let replays = log.lines().filter(|l| l == &"cuGraphLaunch: 3 launches (per-thread stream)");
    assert_eq!(replays.count(), 6, "{log}");
    let tenant_log = s.log();
    for want in ["capture began on 0x2 (thread", "capture ended on 0x2 (thread"] {
        assert_eq!(tenant_log.matches(want).count(), 3, "{want:?} in {tenant_log}");
    }
    // the graphs' replays and the other threads' launches took slices of the gate (one
    // per program at least, ended as done at its exit)
    slices_done(&s, 3);
}

/// The fake driver implements the per-thread default stream variants as NVIDIA's
/// `cuda.h` declares them: every entry point it exports whose `_ptsz`/`_ptds` variant
/// the header declares has that variant too (its signature is the header's, or the
/// fake does not compile), so that a program built for the per-thread default stream
/// reaches the per-thread semantics, never the plain entry point in their place.
#[test]
fn the_fake_driver_has_every_per_thread_variant_of_its_entry_points() {
    let Some(artifacts) = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fake-variants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake =
        tessera_driver::testing::build_fake_driver(&artifacts, &dir.join("libcuda.so.1")).unwrap();
    let nm = Command::new("nm").args(["-D", "--defined-only"]).arg(&fake).output().unwrap();
    let exported: std::collections::BTreeSet<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(String::from))
        .collect();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let header = Command::new(cc)
        .args(["-E", "-P", "-x", "c", "-D__CUDA_API_VERSION_INTERNAL"])
        .arg(artifacts.join("include/cuda.h"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&header.stdout);
    let declared: std::collections::BTreeSet<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("cu") && (w.ends_with("_ptsz") || w.ends_with("_ptds")))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(declared.len() > 50, "{declared:?}");
    let missing: Vec<&&str> = declared
        .iter()
        .filter(|v| exported.contains(&v[..v.len() - 5]) && !exported.contains(**v))
        .collect();
    assert!(missing.is_empty(), "the fake driver lacks {missing:?}");
    // the ones the interposer governs among them
    for v in ["cuStreamBeginCapture_v2_ptsz", "cuStreamEndCapture_ptsz", "cuLaunchKernel_ptsz"] {
        assert!(exported.contains(v), "{v}");
    }
}
