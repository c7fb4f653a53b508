//! Kernel slicing's cost (§5.5.2, Table 4) on a wave model of the GPU: a kernel's
//! thread blocks run in waves of at most `concurrent` blocks, each wave as long as
//! one block (MM's blocks are alike), and a sub-kernel's last wave is not filled by
//! the next sub-kernel's blocks (launches on one stream run one after another). So a
//! kernel of `b` blocks takes ceil(b / concurrent) waves, and slicing costs the waves
//! its sub-kernels leave part-empty.
//!
//! The model has one unknown, `concurrent` (the blocks the paper's GPU held at once
//! for MM, which the paper does not give); it is fitted to the 600 × 600 rows of
//! Table 4 by least squares and then predicts the 900 × 900 rows, which are not used
//! for the fit.
//!
//! Why a model of its own and not the block model (`tessera_gpu::concurrent`): for one
//! kernel alone the block model's time is exactly this — its block time is the
//! kernel's time over its waves — so running the sub-kernels there would give the
//! same waves with the resident-block count taken from the occupancy of the paper's
//! GPU instead of fitted. That unfitted count is computed here too, by the block
//! model's occupancy arithmetic ([`occupancy_concurrent`]: the TITAN X's 24 SMs, two
//! of the CUDA sample's 1,024-thread matrixMul blocks each, 48), and the report prints
//! its predictions beside the fit's: part-empty waves on the real GPU's SMs explain
//! only part of Table 4, so the fitted count is a description of the table, not of the
//! GPU (issue 57 item 11).

use super::ExperimentError;
use serde::{Deserialize, Serialize};
use tessera_gpu::occupancy::{Launch, SmLimits, occupancy};
use tessera_ptx::{SliceConfig, plan};

/// Table 4, as the paper measured it.
pub const TABLE4: &str = include_str!("../../../../../data/fairgv/table4.csv");

/// The grid the fit uses (600 × 600 blocks).
pub const FIT_GRID: u64 = 360_000;

/// The paper's GPU (§5.1: an NVIDIA TITAN X, Maxwell, compute capability 5.2): 24 SMs,
/// each with 2,048 threads, 32 blocks, 64 K registers and 96 KiB of shared memory
/// (NVIDIA's occupancy calculator for 5.2).
pub const TITAN_X: SmLimits = SmLimits { sms: 24, ..SmLimits::V100 };

/// MM's launch: the CUDA sample's `matrixMul` at its default block size of 32 (32 × 32
/// threads, two 32 × 32 tiles of floats in shared memory; registers ours, a few dozen,
/// which do not bind: threads do). Its grid for 600 × 600 blocks is a 19,200 × 19,200
/// product, 1.4e13 flops in Table 4's 19.5 s: 0.7 Tflop/s, the sample's rate on a
/// Maxwell GPU, where 16 × 16 blocks would give 9,600² and 0.09 Tflop/s.
pub const MM_BLOCK: Launch = Launch {
    grid_blocks: FIT_GRID,
    threads_per_block: 1_024,
    registers_per_thread: 32,
    shared_per_block: 2 * 32 * 32 * 4,
};

/// The blocks the paper's GPU runs at once for MM, by the block model's occupancy
/// arithmetic (not fitted): 48.
pub fn occupancy_concurrent() -> u64 {
    u64::from(occupancy(&MM_BLOCK, &TITAN_X).blocks_per_sm) * u64::from(TITAN_X.sms)
}

/// One row of Table 4 beside the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlicingRow {
    /// Thread blocks of the whole kernel.
    pub grid_blocks: u64,
    /// The unsliced kernel's run time, ms (the paper's).
    pub kernel_ms: f64,
    /// Sub-kernels.
    pub sub_kernels: u64,
    /// Blocks per sub-kernel, as the paper printed it.
    pub blocks_per_sub_kernel: u64,
    /// The paper's slowdown, %.
    pub paper_pct: f64,
    /// The model's, %.
    pub ours_pct: f64,
    /// The same waves at the paper's GPU's occupancy ([`occupancy_concurrent`], not
    /// fitted), %.
    #[serde(default)]
    pub occupancy_pct: f64,
    /// Whether the row was used for the fit.
    pub fitted: bool,
}

/// tessera's slicing rule (`tessera_ptx::plan` at its defaults, what the interposer
/// issues: kernels over 600 × 600 blocks as sub-kernels of 1,500, the last of fewer)
/// applied to one grid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleOutcome {
    /// Thread blocks of the whole kernel.
    pub grid_blocks: u64,
    /// Sub-kernels the rule makes.
    pub sub_kernels: u64,
    /// The smallest sub-kernel, blocks.
    pub min_blocks: u64,
    /// The model's slowdown, %.
    pub ours_pct: f64,
    /// The longest sub-kernel, ms: how long another tenant waits at most.
    pub longest_ms: f64,
}

/// What the slicing experiment found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlicingResults {
    /// Blocks resident at once, fitted.
    pub concurrent: u64,
    /// Blocks resident at once by the paper's GPU's occupancy ([`occupancy_concurrent`]).
    #[serde(default)]
    pub occupancy_concurrent: u64,
    /// Root mean square error of every row at that occupancy, percentage points.
    #[serde(default)]
    pub occupancy_rmse_pct: f64,
    /// Root mean square error of the fitted rows, percentage points.
    pub fit_rmse_pct: f64,
    /// Root mean square error of the predicted (900 × 900) rows, percentage points.
    pub predict_rmse_pct: f64,
    /// Every row.
    pub rows: Vec<SlicingRow>,
    /// tessera's rule on each grid.
    pub rule: Vec<RuleOutcome>,
}

/// Slowdown in % of running `grid` blocks as `parts` sub-kernels (sizes as the core's
/// even split makes them) with `concurrent` blocks per wave.
pub fn slowdown_pct(grid: u64, parts: &[u64], concurrent: u64) -> f64 {
    let waves = |b: u64| b.div_ceil(concurrent.max(1));
    let whole = waves(grid) as f64;
    let sliced: u64 = parts.iter().map(|b| waves(*b)).sum();
    100.0 * (sliced as f64 / whole - 1.0)
}

/// Slowdown in % of running `grid` blocks as `n` even sub-kernels ([`even`]'s sizes)
/// with `concurrent` blocks per wave: [`slowdown_pct`] in closed form (an even split
/// has `grid % n` parts of one block more than the rest), for the fit's 2,560
/// candidate counts over every row of Table 4.
fn even_slowdown_pct(grid: u64, n: u64, concurrent: u64) -> f64 {
    let c = concurrent.max(1);
    let n = n.clamp(1, grid.max(1));
    let (q, r) = (grid / n, grid % n);
    let sliced = r * (q + 1).div_ceil(c) + (n - r) * q.div_ceil(c);
    100.0 * (sliced as f64 / grid.div_ceil(c) as f64 - 1.0)
}

/// `grid` split evenly into `n` sub-kernels.
#[cfg(test)]
fn even(grid: u64, n: u64) -> Vec<u64> {
    let n = n.clamp(1, grid.max(1));
    (0..n).map(|i| grid / n + u64::from(i < grid % n)).collect()
}

/// One line of Table 4: grid blocks, kernel ms, sub-kernels, blocks each, slowdown %.
type TableLine = (u64, f64, u64, u64, f64);

fn table() -> Result<Vec<TableLine>, ExperimentError> {
    let mut out = Vec::new();
    for line in TABLE4.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || ExperimentError::Config(format!("table4.csv: bad line {line:?}"));
        if f.len() != 5 {
            return Err(bad());
        }
        out.push((
            f[0].parse().map_err(|_| bad())?,
            f[1].parse().map_err(|_| bad())?,
            f[2].parse().map_err(|_| bad())?,
            f[3].parse().map_err(|_| bad())?,
            f[4].parse().map_err(|_| bad())?,
        ));
    }
    Ok(out)
}

fn rmse(rows: &[SlicingRow]) -> f64 {
    let n = rows.len().max(1) as f64;
    (rows.iter().map(|r| (r.ours_pct - r.paper_pct).powi(2)).sum::<f64>() / n).sqrt()
}

/// Fit, predict, and apply tessera's rule.
pub fn run() -> Result<SlicingResults, ExperimentError> {
    let t = table()?;
    let rows_for = |concurrent: u64| -> Vec<SlicingRow> {
        t.iter()
            .map(|(grid, ms, n, b, paper)| SlicingRow {
                grid_blocks: *grid,
                kernel_ms: *ms,
                sub_kernels: *n,
                blocks_per_sub_kernel: *b,
                paper_pct: *paper,
                ours_pct: even_slowdown_pct(*grid, *n, concurrent),
                occupancy_pct: even_slowdown_pct(*grid, *n, occupancy_concurrent()),
                fitted: *grid == FIT_GRID,
            })
            .collect()
    };
    let fit_error = |c: u64| {
        let fitted: Vec<SlicingRow> = rows_for(c).into_iter().filter(|r| r.fitted).collect();
        rmse(&fitted)
    };
    // every plausible count of resident blocks (a GPU of up to 80 SMs × 32 blocks),
    // each judged once
    let concurrent = (1..=2_560u64)
        .map(|c| (c, fit_error(c)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map_or(1, |(c, _)| c);
    let rows = rows_for(concurrent);
    let (fitted, predicted): (Vec<SlicingRow>, Vec<SlicingRow>) =
        rows.iter().cloned().partition(|r| r.fitted);
    let mut rule = Vec::new();
    let mut grids: Vec<(u64, f64)> = t.iter().map(|r| (r.0, r.1)).collect();
    grids.dedup();
    for (grid, ms) in grids {
        let parts = sub_kernels(grid);
        rule.push(RuleOutcome {
            grid_blocks: grid,
            sub_kernels: parts.len() as u64,
            min_blocks: parts.iter().copied().min().unwrap_or(0),
            ours_pct: slowdown_pct(grid, &parts, concurrent),
            longest_ms: ms * parts.iter().copied().max().unwrap_or(0) as f64 / grid as f64,
        });
    }
    let at_occupancy: Vec<SlicingRow> =
        rows.iter().map(|r| SlicingRow { ours_pct: r.occupancy_pct, ..r.clone() }).collect();
    Ok(SlicingResults {
        concurrent,
        occupancy_concurrent: occupancy_concurrent(),
        occupancy_rmse_pct: rmse(&at_occupancy),
        fit_rmse_pct: rmse(&fitted),
        predict_rmse_pct: rmse(&predicted),
        rows,
        rule,
    })
}

/// The block counts of the sub-kernels the interposer issues a kernel of `grid` blocks
/// as (one of all of them when it runs whole), by its own plan.
fn sub_kernels(grid: u64) -> Vec<u64> {
    let whole = || vec![grid];
    let Ok(x) = u32::try_from(grid) else { return whole() };
    plan([x, 1, 1], SliceConfig::default())
        .map_or_else(whole, |s| s.iter().map(|s| u64::from(s.blocks)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed: 10 blocks, 4 at a time, whole = 3 waves; as 2 sub-kernels of 5,
    /// 2 waves each = 4 waves, 33% slower; one sub-kernel costs nothing.
    #[test]
    fn part_empty_waves_cost_what_they_leave() {
        assert!((slowdown_pct(10, &[5, 5], 4) - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(slowdown_pct(10, &[10], 4), 0.0);
        assert_eq!(even(10, 3), vec![4, 3, 3]);
    }

    /// The closed form is the sum over the split, for every grid and count of Table 4
    /// and a range of block counts.
    #[test]
    fn an_even_splits_waves_in_closed_form_are_its_sum() {
        for grid in [360_000, 810_000, 10, 1] {
            for n in [1, 3, 64, 4_096, 20] {
                for c in [1, 7, 48, 87, 2_560] {
                    let sum = slowdown_pct(grid, &even(grid, n), c);
                    assert_eq!(even_slowdown_pct(grid, n, c).to_bits(), sum.to_bits());
                }
            }
        }
    }

    /// Hand-computed: 1,024-thread blocks on a 2,048-thread SM, two each (registers and
    /// shared memory allow more); 24 SMs: 48 at once. And at 48, 600 × 600 blocks as
    /// 1,024 sub-kernels of 351-352 blocks: 8 waves each (7.33), 8,192 waves against the
    /// whole kernel's 7,500: 9.2% slower.
    #[test]
    fn the_paper_gpus_occupancy_runs_48_mm_blocks_at_once() {
        assert_eq!(occupancy_concurrent(), 48);
        assert!((slowdown_pct(FIT_GRID, &even(FIT_GRID, 1_024), 48) - 9.226_666).abs() < 1e-3);
    }

    /// Issue 57 item 11: the wave model is the block model (`tessera_gpu::concurrent`)
    /// with its resident-block count fitted. MM whole and as sub-kernels issued one
    /// after another on one stream of the block model with the TITAN X's SMs (each
    /// block as long as the whole kernel's blocks, a sub-kernel's time alone what its
    /// blocks take there): the block model ends them where the wave model at the
    /// occupancy's 48 says, for Table 4's counts on both grids.
    #[test]
    fn the_block_model_at_the_real_occupancy_gives_the_wave_models_slowdown() {
        use tessera_gpu::concurrent::{ConcurrentGpu, Contention, Contexts, KernelLaunch};
        let c = occupancy_concurrent();
        let block_ns: u64 = 2_600_000; // 19.5 s over 7,500 waves
        // one stream: each sub-kernel starts as the one before ends
        let run = |parts: &[u64]| -> u64 {
            let mut g = ConcurrentGpu::new(TITAN_X, Contexts::Shared, Contention::default());
            let mut now = 0;
            for (id, b) in parts.iter().enumerate() {
                let k = KernelLaunch {
                    context: 0,
                    launch: Launch { grid_blocks: *b, ..MM_BLOCK },
                    alone_ns: block_ns * b.div_ceil(c),
                    priority: 0,
                };
                g.start(now, id as u64, k).unwrap();
                loop {
                    let t = g.next_event().expect("the sub-kernel runs");
                    g.advance(t).unwrap();
                    if let Some((done, at)) = g.pop_finished() {
                        assert_eq!(done, id as u64);
                        now = at;
                        break;
                    }
                }
                assert!(g.is_empty(), "one stream: nothing else runs");
            }
            now
        };
        for grid in [FIT_GRID, 810_000] {
            let whole = run(&[grid]);
            assert_eq!(whole, block_ns * grid.div_ceil(c));
            for n in [64, 512, 1_024, 4_096] {
                let parts = even(grid, n);
                let blocks = 100.0 * (run(&parts) as f64 / whole as f64 - 1.0);
                let waves = slowdown_pct(grid, &parts, c);
                assert!((blocks - waves).abs() < 1e-9, "{grid} in {n}: {blocks} against {waves}");
            }
        }
    }
}
