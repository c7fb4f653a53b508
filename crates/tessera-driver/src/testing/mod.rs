//! Test support, shared by the test suites that need NVIDIA's artefacts or the fake
//! driver: fetching the artefacts (`scripts/fetch-nvidia-artifacts.sh`) and building
//! the fake driver (`fake/fake_libcuda.c`) against the real `cuda.h` and the fake NVML
//! (`fake/fake_libnvml.c`) against the real `nvml.h`. Only meaningful
//! inside the source tree (paths are the crate's own).

use std::path::{Path, PathBuf};
use std::process::Command;

mod proc_table;
pub use proc_table::{ProcVariant, c_rows, proc_variants, resolve};

/// The directory holding `include/cuda.h`, `lib/libcudart.so.12` and `bin/ptxas`,
/// fetched from PyPI into the cache when missing. An error (no network, no Python)
/// says why, for a test to print as its reason to skip.
pub fn nvidia_artifacts() -> Result<PathBuf, String> {
    nvidia_artifacts_for("12.9")
}

/// [`nvidia_artifacts`] of CUDA `version` (`"12.9"`, or `"13.0"`: what NVIDIA's
/// 580-series driver runs; its runtime is `lib/libcudart.so.13`).
pub fn nvidia_artifacts_for(version: &str) -> Result<PathBuf, String> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-nvidia-artifacts.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("TESSERA_CUDA_VERSION", version)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if dir.join("include/cuda.h").is_file() {
        Ok(dir)
    } else {
        Err(format!("{} has no include/cuda.h", dir.display()))
    }
}

/// [`nvidia_artifacts`], or `None` after printing the test's reason to skip
/// (`SKIPPED: NVIDIA's <what> is not available: …`).
pub fn nvidia_artifacts_or_skip(what: &str) -> Option<PathBuf> {
    nvidia_artifacts_or_skip_for("12.9", what)
}

/// [`nvidia_artifacts_for`], or `None` after printing the test's reason to skip.
pub fn nvidia_artifacts_or_skip_for(version: &str, what: &str) -> Option<PathBuf> {
    match nvidia_artifacts_for(version) {
        Ok(dir) => Some(dir),
        Err(why) => {
            eprintln!("SKIPPED: NVIDIA's CUDA {version} {what} is not available: {why}");
            None
        }
    }
}

/// Compile the C test program `source` against the real headers of `artifacts` into
/// `out` (C11, warnings as errors, POSIX 2008, `-ldl`), as the CUDA programs the tests
/// run under the interposer are built.
pub fn build_c_program(artifacts: &Path, source: &Path, out: &Path) -> Result<PathBuf, String> {
    build_c_program_linked(artifacts, source, out, &[])
}

/// [`build_c_program`], linked with the shared `libraries` too (paths, which the
/// program then needs by their names: a program linked with NVML, say).
pub fn build_c_program_linked(
    artifacts: &Path,
    source: &Path,
    out: &Path,
    libraries: &[&Path],
) -> Result<PathBuf, String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-I"])
        .arg(artifacts.join("include"))
        .arg("-o")
        .arg(out)
        .arg(source)
        .args(libraries)
        .arg("-ldl")
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if built.status.success() {
        Ok(out.to_path_buf())
    } else {
        Err(format!("building {}:\n{}", source.display(), String::from_utf8_lossy(&built.stderr)))
    }
}

/// Build the fake driver into `out` (a `.so` path) against the real `cuda.h` of
/// `artifacts`; each path is a separate copy with its own books when loaded.
pub fn build_fake_driver(artifacts: &Path, out: &Path) -> Result<PathBuf, String> {
    build_fake_library(artifacts, "fake_libcuda.c", out)
}

/// Build the fake NVML (`fake/fake_libnvml.c`) into `out` (a `.so` path, usually
/// `libnvidia-ml.so.1`) against the real `nvml.h` of `artifacts`.
pub fn build_fake_nvml(artifacts: &Path, out: &Path) -> Result<PathBuf, String> {
    build_fake_library(artifacts, "fake_libnvml.c", out)
}

/// Compile `fake/<source>` into the shared library `out` against `artifacts`' headers.
fn build_fake_library(artifacts: &Path, source: &str, out: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake").join(source);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    // named as the library it stands for, so that a program linked with it needs it by
    // that name (found on the library path, as the real one is)
    let soname = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut table = Vec::new();
    if source == "fake_libcuda.c" {
        // cuGetProcAddress's versions, from the header the fake is compiled against
        let rows = out.with_extension("procs.h");
        std::fs::write(&rows, c_rows(&proc_variants(artifacts)?))
            .map_err(|e| format!("writing {}: {e}", rows.display()))?;
        table.push(format!("-DFAKE_PROC_TABLE=\"{}\"", rows.display()));
    }
    let built = Command::new(&cc)
        .args(&table)
        .arg(format!("-Wl,-soname,{soname}"))
        // -Bsymbolic: the library's references to its own functions bind inside it, as
        // NVIDIA's libraries do, so that a preloaded interposer does not capture them
        .args(["-shared", "-fPIC", "-Wl,-Bsymbolic", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(artifacts.join("include"))
        .arg("-o")
        .arg(out)
        .arg(&src)
        .arg("-lpthread")
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if built.status.success() {
        Ok(out.to_path_buf())
    } else {
        Err(format!("building {source}:\n{}", String::from_utf8_lossy(&built.stderr)))
    }
}
