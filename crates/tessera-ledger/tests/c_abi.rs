//! The C ABI: the committed header matches the code, and a C program using it runs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn generated_header() -> String {
    let config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir().join("src/ffi.rs"))
        .generate()
        .expect("cbindgen parses src/ffi.rs");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).unwrap()
}

/// Set TESSERA_BLESS=1 to rewrite the header after changing the ABI.
#[test]
fn committed_header_is_current() {
    let path = crate_dir().join("include/tessera_ledger.h");
    let fresh = generated_header();
    if std::env::var_os("TESSERA_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == fresh, "{} is stale: rerun with TESSERA_BLESS=1", path.display());
}

/// The directory holding libtessera_ledger.so: beside this test binary.
fn library_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().to_path_buf()
}

/// Compile `source` against the header and the library into the test's temp dir.
fn build_c(source: &Path, name: &str) -> PathBuf {
    build_c_with(source, name, &[])
}

/// [`build_c`] with extra compiler flags.
fn build_c_with(source: &Path, name: &str, flags: &[String]) -> PathBuf {
    let lib = library_dir();
    assert!(lib.join("libtessera_ledger.so").is_file(), "cdylib not found in {}", lib.display());
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir().join("include"))
        .args(flags)
        .arg(source)
        .arg("-L")
        .arg(&lib)
        .arg("-ltessera_ledger")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e}"));
    assert!(built.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&built.stderr));
    exe
}

/// After fork the child gets TESSERA_FORKED (not a generic bad-argument status) and a
/// documented way to re-open: tessera_init again.
#[test]
fn a_forked_child_is_told_and_can_reopen() {
    let exe = build_c(&crate_dir().join("tests/fork.c"), "ledger_fork");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let ledger = tmp.join(format!("c-fork-ledger-{}", std::process::id()));
    let _ = std::fs::remove_file(&ledger);
    let run = Command::new(&exe)
        // cargo's LD_LIBRARY_PATH would win over the rpath and may hold an older build
        // of the library (target/debug/ is not refreshed by every test build)
        .env_remove("LD_LIBRARY_PATH")
        .env("TESSERA_LEDGER", &ledger)
        .env("TESSERA_GPU_MEMORY", "1000")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "fork test failed ({:?}):\n{stdout}", run.status);
    assert!(stdout.contains("fork: ok"), "{stdout}");
}

/// Run the C program `exe` on a fresh ledger `name` in the test's temp dir with GPUs of
/// `gpu_memory`; it must succeed. Returns the ledger's path and the program's stdout.
fn run_c(exe: &Path, name: &str, gpu_memory: &str) -> (PathBuf, String) {
    let ledger =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&ledger);
    let run = Command::new(exe)
        // cargo's LD_LIBRARY_PATH would win over the rpath and may hold an older build
        // of the library (target/debug/ is not refreshed by every test build)
        .env_remove("LD_LIBRARY_PATH")
        .env("TESSERA_LEDGER", &ledger)
        .env("TESSERA_GPU_MEMORY", gpu_memory)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{} failed ({:?}):\n{stdout}\n{}",
        exe.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    (ledger, stdout)
}

#[test]
fn the_c_example_runs_against_the_library() {
    let exe = build_c(&crate_dir().join("../../examples/ledger_demo.c"), "ledger_demo");
    let (ledger, stdout) = run_c(&exe, "c-demo-ledger", "4799M");
    assert!(
        stdout.lines().any(|l| l.starts_with("tessera_pre_alloc 1 PiB")
            && l.ends_with("request exceeds the GPU's total memory")),
        "{stdout}"
    );

    // the ledger it made is sound and empty
    let l = tessera_ledger::Ledger::open(&tessera_ledger::LedgerConfig::new(
        ledger,
        tessera_ledger::GpuSource::Explicit(vec![]),
    ))
    .unwrap();
    let s = l.status().unwrap();
    assert_eq!(s.gpus.len(), 1);
    assert_eq!((s.gpus[0].total, s.gpus[0].used), (4799 << 20, 0));
}

/// Issue 24 item 6: a program written against schedGPU's API (`schedGPU.h` only) links
/// against this library and runs the paper's life cycle: initialisation, pre-allocation
/// (non-blocking, with a timeout, beyond the GPU, on a bad device), post-free, another
/// program waiting for memory and getting it, the shutdown stage at exit. Compiled
/// against NVIDIA's real `driver_types.h` (from PyPI) when it can be fetched, so the
/// CUDA codes it returns are checked against the real ones.
#[test]
fn a_schedgpu_program_runs_unchanged() {
    let script = crate_dir().join("../../scripts/fetch-nvidia-artifacts.sh");
    let nvidia = Command::new("bash")
        .arg(&script)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("include/driver_types.h").is_file());
    let mut flags = Vec::new();
    match &nvidia {
        Some(dir) => {
            flags.push("-DCHECK_CUDA_CODES".to_string());
            flags.push(format!("-I{}", dir.join("include").display()));
        }
        None => eprintln!(
            "SKIPPED (the CUDA codes check only): NVIDIA's driver_types.h could not be fetched by {}",
            script.display()
        ),
    }
    let exe = build_c_with(&crate_dir().join("tests/schedgpu_api.c"), "schedgpu_api", &flags);
    let (_, stdout) = run_c(&exe, "c-schedgpu-ledger", "1000");
    assert!(stdout.contains("schedgpu api: ok"), "{stdout}");
    assert!(stdout.contains("child preCudaMalloc 500, waiting up to 10 s -> 0"), "{stdout}");
}
