//! Workload generators, one module per paper.

pub mod flexy;
pub mod schedgpu;
