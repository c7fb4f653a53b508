//! FairGV's kernel slicing (§3.3.2, adopted from GPES) for programs that were not
//! written for it: a kernel loaded as PTX gets a rewritten twin that runs any
//! contiguous range of the original grid's blocks, so that one long launch can be
//! issued as several sub-kernels, with the GPU's scheduler free to give the next slice
//! to another tenant between them (issue 58).
//!
//! The twin ([`rewrite`]) takes four parameters after the original's: the first block
//! of its range (a linear block index, x fastest, then y, then z) and the original
//! grid's three dimensions. It is launched on a one-dimensional grid of the range's
//! length; every read of `%ctaid.{x,y,z}` becomes the original block's coordinates,
//! every read of `%nctaid.{x,y,z}` the original grid's size, so that each block computes
//! exactly what the same block of the original launch computes. [`plan`] cuts a
//! launch's grid into such ranges.
//!
//! What the rewrite does not handle is left unsliced with the reason
//! ([`Unsliced`]): clusters, the grid id, vector reads of the special registers, device
//! functions that read the block index, grid-wide synchronisation, and name clashes it
//! cannot avoid. Cooperative launches and SASS-only modules are decided where the
//! launch or the module is seen (the interposer), not here.
//!
//! A fat binary's PTX (what the CUDA runtime and `nvcc` hand the driver) is found,
//! decompressed and read by [`fatbin`], so that its kernels can be rewritten too; a
//! cubin's length is read from its headers by [`elf`] (the interposer recognises
//! nvJitLink's cubins, whose PTX it asked the linker for, by their bytes).
//!
//! Pure text processing: no GPU, no driver. `tessera ptx slice FILE.ptx` prints what it
//! makes of a file.

pub mod elf;
pub mod fatbin;
mod launch;
mod params;
mod rewrite;
mod scan;

pub use launch::{BLOCKS_PER_SM, Slice, SliceConfig, blocks_per_sm, plan};
pub use params::{Param, ParamLayout};
pub use rewrite::{Kernel, Outcome, Rewrite, SLICE_SUFFIX, Unsliced, rewrite};

/// Whether a module image beginning with `head` is binary (a cubin's ELF magic, a
/// fatbin's or its runtime wrapper's, or a NUL where text would begin), not PTX text:
/// a cubin's kernels run whole; a fat binary's PTX is read by [`fatbin`].
pub fn is_binary_module(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
        || head.starts_with(&[0x50, 0xed, 0x55, 0xba])
        // the CUDA runtime's wrapper of a fat binary
        || head.starts_with(&[0xb1, 0x43, 0x62, 0x46])
        || head.first() == Some(&0)
}

/// Why a PTX text could not be read at all (a kernel the rewrite cannot handle is not an
/// error: it is [`Unsliced`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PtxError {
    /// A brace, parenthesis or comment opened and never closed.
    #[error("unbalanced {what} opened at line {line}")]
    Unbalanced { what: &'static str, line: usize },
    /// A kernel's parameter list could not be read.
    #[error(
        "kernel {kernel}: parameter {index} ({text:?}) is not `.param .TYPE [.align N] NAME[[N]]`"
    )]
    Param { kernel: String, index: usize, text: String },
    /// A `.entry` without a name.
    #[error("a .entry without a name at line {line}")]
    Unnamed { line: usize },
}
