//! Workload generators, one module per paper.

pub mod alibaba;
pub mod colocated;
pub mod dcuda;
pub mod flexy;
pub mod schedgpu;
