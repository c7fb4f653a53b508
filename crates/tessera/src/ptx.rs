//! `tessera ptx slice FILE.ptx`: what kernel slicing (FairGV §3.3.2, issue 58) makes of
//! a PTX file, so that an operator can see what will run: the module with each
//! sliceable kernel's twin (on standard output, or `--out`), and per kernel a line on
//! standard error saying which twin it got, or why it stays whole. A fat binary (what
//! `nvcc` and the CUDA runtime load) is read as the interposer reads it: its PTX for
//! the GPU (`--arch`), decompressed, is what is rewritten.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::io::Write as _;
use std::path::PathBuf;
use tessera_ptx::{Outcome, SliceConfig, plan, rewrite};

#[derive(Debug, Subcommand)]
pub enum PtxCommand {
    /// Print FILE with each kernel's sliced twin after it (or why a kernel has none).
    Slice(SliceArgs),
}

#[derive(Debug, Args)]
pub struct SliceArgs {
    /// The PTX file (as numba, NVRTC or `nvcc -ptx` write it), or a fat binary (`nvcc
    /// -fatbin`, `fatbinary`).
    file: PathBuf,
    /// For a fat binary: the GPU's architecture, major × 10 + minor (90 for an H100 or
    /// H200); its PTX for the highest architecture at or below it is rewritten, as the
    /// interposer does. Without it, the highest it carries.
    #[arg(long)]
    arch: Option<u32>,
    /// Write the rewritten module here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also say how a launch of this grid (X,Y,Z blocks) would be cut, with the two
    /// sizes below.
    #[arg(long, value_parser = parse_grid)]
    grid: Option<[u32; 3]>,
    /// The decisions as JSON on standard error instead of lines.
    #[arg(long)]
    json: bool,
    /// Launches of more blocks than this are sliced (as the interposer's setting).
    #[arg(long, env = "TESSERA_KERNEL_SLICE_MIN_BLOCKS", default_value_t = SliceConfig::default().min_grid_blocks)]
    min_blocks: u64,
    /// Blocks per sub-kernel (as the interposer's setting), instead of a number per
    /// multiprocessor.
    #[arg(long, env = "TESSERA_KERNEL_SLICE_BLOCKS", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with = "blocks_per_sm")]
    blocks: Option<u32>,
    /// Blocks per sub-kernel per multiprocessor of the GPU, rounded up (as the
    /// interposer's setting; its default is FairGV's 1,500 on its 24-SM GPU).
    #[arg(long, env = "TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", default_value_t = tessera_ptx::BLOCKS_PER_SM,
          value_parser = positive_blocks)]
    blocks_per_sm: f64,
    /// The GPU's multiprocessors, for the size per multiprocessor (24: FairGV's TitanX;
    /// 132 for an H200).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
    sms: u32,
}

fn positive_blocks(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|b| b.is_finite() && *b > 0.0 && *b <= 1e6)
        .ok_or_else(|| format!("{s:?} is not a positive number of blocks (up to a million)"))
}

fn parse_grid(s: &str) -> Result<[u32; 3], String> {
    let v: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>().map_err(|e| format!("{x:?}: {e}")))
        .collect::<Result<_, _>>()?;
    match v.as_slice() {
        [x] => Ok([*x, 1, 1]),
        [x, y] => Ok([*x, *y, 1]),
        [x, y, z] => Ok([*x, *y, *z]),
        _ => Err(format!("a grid is X[,Y[,Z]] blocks, not {s:?}")),
    }
}

pub fn run(cmd: PtxCommand) -> Result<()> {
    match cmd {
        PtxCommand::Slice(a) => slice(a),
    }
}

fn slice(a: SliceArgs) -> Result<()> {
    let bytes =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let text = if tessera_ptx::fatbin::is_fatbin(&bytes) {
        // the PTX the interposer would take out of it
        let arch = a.arch.unwrap_or(u32::MAX);
        tessera_ptx::fatbin::ptx_for(&bytes, arch).with_context(|| {
            format!("{}: a fat binary whose kernels would run unsliced", a.file.display())
        })?
    } else if tessera_ptx::is_binary_module(&bytes) {
        // a cubin (SASS) has no PTX to rewrite: its kernels run whole
        anyhow::bail!(
            "{} is a binary module (a cubin), not PTX: its kernels would run unsliced",
            a.file.display()
        );
    } else {
        String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("{} is not PTX: not text", a.file.display()))?
    };
    let r = rewrite(&text)
        .with_context(|| format!("{} is not PTX the rewrite can read", a.file.display()))?;
    let mut err = std::io::stderr().lock();
    if a.json {
        writeln!(err, "{}", serde_json::to_string(&r.kernels)?)?;
    } else {
        for k in &r.kernels {
            match &k.outcome {
                Outcome::Sliced { twin, params } => writeln!(
                    err,
                    "{}: sliced as {twin} (its first block and the grid's X, Y, Z at bytes {} of the parameters)",
                    k.name,
                    params.params[params.params.len() - 4..]
                        .iter()
                        .map(|p| p.offset.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )?,
                Outcome::Unsliced(why) => writeln!(err, "{}: left unsliced: {why}", k.name)?,
            }
        }
        if let Some(grid) = a.grid {
            let blocks =
                a.blocks.unwrap_or_else(|| tessera_ptx::blocks_per_sm(a.blocks_per_sm, a.sms));
            let config = SliceConfig { min_grid_blocks: a.min_blocks, blocks_per_slice: blocks };
            match plan(grid, config) {
                Some(s) => writeln!(
                    err,
                    "a launch of {}x{}x{} blocks: {} sub-kernels of up to {} blocks",
                    grid[0],
                    grid[1],
                    grid[2],
                    s.len(),
                    config.blocks_per_slice
                )?,
                None => writeln!(
                    err,
                    "a launch of {}x{}x{} blocks runs whole (sliced above {} blocks, up to 2^32)",
                    grid[0], grid[1], grid[2], config.min_grid_blocks
                )?,
            }
        }
    }
    match a.out {
        Some(path) => std::fs::write(&path, &r.ptx)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout().lock().write_all(r.ptx.as_bytes())?,
    }
    Ok(())
}
