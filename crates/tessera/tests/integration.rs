//! The integration tests of this crate, one module per file, in one test binary:
//! the modules' tests run side by side on the test threads (most of them wait on
//! processes they started), and the suite links one binary instead of one per file.

mod common;

mod cli;
mod cuda_bindings;
mod daemon_processes;
mod daemon_restart;
mod doctor;
mod gpu_check;
mod interposer_cost;
mod k8s;
mod k8s_manifests;
mod node_processes;
mod numba_cuda;
mod prometheus;
mod ptx_cli;
mod pynvml;
mod run;
mod selftest;
mod slurm;
mod top;
mod try_without_gpu;
