//! What the command's tests that run programs under the interposer share: NVIDIA's
//! header, the interposer built beside the `tessera` binary, a scratch directory with
//! the fake driver in it — or a SKIPPED line saying which is missing.
#![allow(dead_code)] // each test binary uses its own part of it
use std::path::{Path, PathBuf};

pub struct Scratch {
    /// NVIDIA's artefacts (`include/cuda.h`, ...).
    pub artifacts: PathBuf,
    /// The directory of the `tessera` binary and `libtessera_cuda.so`.
    pub bin: PathBuf,
    /// A fresh directory of the test's own, removed when it ends.
    pub dir: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// NVIDIA's header, the interposer and a fresh scratch directory `tag`, or `None`
/// after a SKIPPED line.
pub fn scratch(tag: &str) -> Option<Scratch> {
    let artifacts = tessera_driver::testing::nvidia_artifacts_or_skip("cuda.h")?;
    let bin = Path::new(env!("CARGO_BIN_EXE_tessera")).parent().unwrap().to_path_buf();
    if !bin.join("libtessera_cuda.so").is_file() && !bin.join("deps/libtessera_cuda.so").is_file() {
        eprintln!(
            "SKIPPED: {} has no libtessera_cuda.so (run the workspace's tests)",
            bin.display()
        );
        return None;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Some(Scratch { artifacts, bin, dir })
}

impl Scratch {
    /// The fake driver built into the directory as `libcuda.so.1` (and `libcuda.so`).
    pub fn fake_driver(&self) {
        tessera_driver::testing::build_fake_driver(&self.artifacts, &self.dir.join("libcuda.so.1"))
            .unwrap();
        std::os::unix::fs::symlink("libcuda.so.1", self.dir.join("libcuda.so")).unwrap();
    }
}
