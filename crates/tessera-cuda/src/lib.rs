//! `libtessera_cuda.so`: loaded with `LD_PRELOAD`, it makes an unmodified CUDA program a
//! tesserad tenant. On `cuInit` the process registers a tenant (its settings from the
//! environment: see [`config`]); from then on its device memory is admitted by the
//! shared ledger — an allocation reserves first (waiting, failing at once or after a
//! timeout, as the tenant's settings say) and returns `CUDA_ERROR_OUT_OF_MEMORY` only
//! when the ledger or the tenant's limit refuses — and `cuMemGetInfo` reports the
//! tenant's own share.
//!
//! It catches the driver entry points however a program reaches them: direct calls
//! (its exports), `dlsym` on a `dlopen`ed driver (it exports `dlsym`) and
//! `cuGetProcAddress` (all versions and per-thread-stream variants). Calls it does not
//! govern reach the real driver untouched.
//!
//! NVML (`libnvidia-ml.so.1`) is governed too (the `nvml` module): monitoring tools
//! and frameworks that read it see the tenant's share, as the CUDA side shows it.
//!
//! Governed: `cuInit` (the tenant), device count and handles (the daemon's placement),
//! every allocation entry point and its free (the ledger), `cuMemGetInfo` (the
//! tenant's share), and kernel launches (the launch gate: slices the daemon's policy
//! grants). Only ever run against a fake driver and NVIDIA's real runtime on it.
//!
//! Module map: [`config`] (the environment), `real` (`unsafe`: the real driver and
//! the loader's `dlsym`), `state` (becoming a tenant), `tenant` (the tenant, its session
//! with the daemon and allocation book), `gate` (the launch gate), `memory`
//! (reservations and leases), `readopt` (re-registering with a restarted daemon), `log`,
//! `hooks/` (`unsafe`: the exports), `migrate` (`unsafe`: DCUDA's live migration of
//! driver-API programs, `TESSERA_MIGRATION`), `nvml` (`unsafe`: NVML's exports, which
//! show a tenant its own GPUs, memory, process and utilization).

/// Call the real driver's `$name` with `$args`, or answer why it cannot be (with one
/// line on stderr). For the modules that call the driver (`hooks`, `migrate`).
macro_rules! real {
    ($name:ident ( $($arg:expr),* )) => {
        match &$crate::state::state().real {
            Ok(d) => match d.api.$name {
                // SAFETY: the driver's own entry point, with the caller's arguments (the
                // program's, or ones the calling module checked).
                Some(f) => unsafe { f($($arg),*) },
                None => tessera_driver::status::NOT_FOUND,
            },
            Err(why) => {
                $crate::state::complain(why);
                tessera_driver::status::NOT_INITIALIZED
            }
        }
    };
}

pub mod config;
mod gate;
mod hooks;
mod log;
mod memory;
mod migrate;
mod nvml;
mod readopt;
mod real;
mod slicing;
mod state;
mod tenant;
