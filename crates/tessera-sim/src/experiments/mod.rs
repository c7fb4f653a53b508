//! One module per paper: each reproduces its evaluation and writes JSON, SVG and a
//! Markdown report beside the paper's own numbers.

pub mod claims;
pub mod dcuda;
pub mod fairgv;
pub mod flexy;
pub mod gpulets;
pub mod node;
pub mod node_inference;
pub mod node_workload;
pub mod schedgpu;
pub mod schedgpu_node;

use std::path::{Path, PathBuf};

/// An experiment could not run or write its outputs.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A workload parameter was out of range.
    #[error(transparent)]
    Workload(#[from] crate::workloads::flexy::WorkloadError),
    /// A policy configuration was invalid.
    #[error(transparent)]
    Policy(#[from] tessera_core::PolicyError),
    /// A run broke an invariant.
    #[error("{trial}: {source}")]
    Sim {
        /// Which run.
        trial: String,
        /// What went wrong.
        source: crate::engine::SimError,
    },
    /// The configuration is unusable.
    #[error("invalid experiment configuration: {0}")]
    Config(String),
    /// Writing an output failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Drawing a figure failed.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
}

/// Progress callback: called with (trials done, trials in all) from worker threads.
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Create `dir` and write an experiment's `results.json` (pretty, one trailing newline)
/// and `report.md` into it.
pub(crate) fn write_results(
    dir: &Path,
    results: &impl serde::Serialize,
    report: &str,
) -> Result<(), ExperimentError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExperimentError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let json = serde_json::to_string_pretty(results)
        .map_err(|e| ExperimentError::Config(e.to_string()))?;
    let p = dir.join("results.json");
    std::fs::write(&p, json + "\n").map_err(io(&p))?;
    let p = dir.join("report.md");
    std::fs::write(&p, report).map_err(io(&p))?;
    Ok(())
}
