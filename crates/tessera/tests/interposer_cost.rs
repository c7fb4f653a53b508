//! What the interposer's launch hook costs each kernel launch, in instructions
//! (`scripts/interposer-instructions.sh`: callgrind on the fake driver, beside an
//! emulated fair daemon), so that a change to the launch path that costs every launch
//! of every tenant is seen here, where no GPU is. On the H200 (2026-12-04) the hook at
//! 315 instructions a launch measured 94-168 ns over the driver's own entry point,
//! against 36-96 ns at 249 (docs/results/gpu/2026-12-04-h200): kernel slicing, off by
//! default, had added 50 instructions to every launch to find out that it was off.

use std::process::Command;

/// The bound: 249 before slicing was built, 247 with its check inlined, 315 with it
/// out of line (fcb58a2); a few tens of instructions of room for the compiler.
const MAX_INSTRUCTIONS_PER_LAUNCH: f64 = 280.0;

/// The release interposer's hook costs at most [`MAX_INSTRUCTIONS_PER_LAUNCH`] a launch
/// with slicing off (the default). The script builds the release interposer when it is
/// missing (about a minute) and installs valgrind from Debian when it can; SKIPPED
/// without valgrind or NVIDIA's headers.
#[test]
fn the_launch_hook_costs_at_most_280_instructions_a_launch() {
    if tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h").is_none() {
        return;
    }
    let has_valgrind = Command::new("valgrind").arg("--version").output().is_ok();
    let root = rustix::process::geteuid().is_root();
    if !has_valgrind && !root {
        eprintln!(
            "SKIPPED: valgrind is not installed and this is not root (apt-get install valgrind)"
        );
        return;
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(repo.join("scripts/interposer-instructions.sh"))
        .arg(repo.join("target/release/libtessera_cuda.so"))
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let per_launch: f64 = stdout
        .split("instructions per launch ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {stdout:?}"));
    eprintln!("{}", stdout.trim());
    assert!(
        per_launch <= MAX_INSTRUCTIONS_PER_LAUNCH,
        "the launch hook costs {per_launch} instructions a launch, over {MAX_INSTRUCTIONS_PER_LAUNCH}: {stdout}"
    );
}
