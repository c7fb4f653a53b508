//! Workload generators, one module per paper.

pub mod colocated;
pub mod dcuda;
pub mod flexy;
pub mod schedgpu;
