//! schedGPU's GPU memory ledger (`../shared/seeds/schedgpu.txt`): co-located
//! applications reserve GPU memory before allocating it and return it after freeing it,
//! so that none of them crashes out of memory — a request that does not fit waits (or
//! fails at once, or after a timeout) instead.
//!
//! The ledger is a file in shared memory (`/dev/shm` by default) that every client
//! reads and writes under an advisory `flock` — never a process-shared mutex, whose
//! holder could die with it locked: the kernel drops a dead process's file lock. It
//! works with no daemon running (schedGPU's shared-memory approach); the daemon, when
//! there is one, is just another client.
//!
//! Module map: [`layout`] (the versioned, checksummed layout), `file` (the ledger file:
//! safe creation, `pread`/`pwrite`, the futex word; `unsafe`), [`access`] (who may use
//! it, and the ownership checks), `records` (each client's own locked record: liveness
//! and recovery), `deadlock` (wait-for cycles, refused at once), [`ledger`] (the life
//! cycle), `nvml` (GPU discovery at run time), [`ffi`] (the C ABI; `unsafe`).
#![deny(unsafe_code)]

pub mod access;
mod deadlock;
mod error;
pub mod ffi;
mod file;
pub mod layout;
pub mod ledger;
mod nvml;
mod records;

pub use access::Access;
pub use ledger::{
    GpuSource, GpuStatus, Holding, Ledger, LedgerConfig, LedgerError, LedgerStatus, Wait,
    remove_if_unused,
};
pub use tessera_core::Bytes;
pub use tessera_core::policies::memsafe::NotificationPolicy;
