//! The C ABI: schedGPU's explicit calls for C and CUDA programs, under tessera's names
//! (`tessera_init`, `tessera_pre_alloc`, `tessera_post_free`, `tessera_shutdown`) and
//! under schedGPU's own (`schedGPUInit`, `preCudaMalloc`, `postCudaFree`,
//! `schedGPUShutdown`, returning CUDA runtime codes; header `include/schedGPU.h`). The header
//! `include/tessera_ledger.h` is generated from this file by cbindgen and checked by a
//! test. Every function returns a [`TesseraStatus`] code; none panics across the ABI.
//!
//! One ledger handle per process, opened by `tessera_init` and closed by
//! `tessera_shutdown`; the calls are thread-safe, and a thread blocked in
//! `tessera_pre_alloc` does not block other threads' `tessera_post_free`.
#![allow(unsafe_code)]

use crate::access::{Access, resolve_group};
use crate::layout::{DEFAULT_HOLDERS, DEFAULT_WAITERS};
use crate::ledger::{DEFAULT_PATH, GpuSource, Ledger, LedgerConfig, LedgerError, Wait};
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_core::Bytes;
use tessera_core::policies::memsafe::NotificationPolicy;

/// Result of every `tessera_*` call. Values are stable.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TesseraStatus {
    /// Success.
    TesseraOk = 0,
    /// Non-blocking pre-allocation: the memory is not free now (schedGPU's
    /// `cudaErrorNotReady`).
    TesseraNotAvailable = 1,
    /// The pre-allocation waited its whole timeout.
    TesseraTimedOut = 2,
    /// More than the GPU's total memory: can never be granted.
    TesseraExceedsCapacity = 3,
    /// No such GPU.
    TesseraNoSuchGpu = 4,
    /// Freeing more than this process holds on that GPU; nothing changed.
    TesseraOverFree = 5,
    /// `tessera_init` has not been called (or `tessera_shutdown` has).
    TesseraNotInitialised = 6,
    /// The ledger's holder or waiter table is full.
    TesseraTableFull = 7,
    /// Creating the ledger needs the GPUs' memory: set `TESSERA_GPU_MEMORY` (or install NVML).
    TesseraNoGpus = 8,
    /// The ledger file has another layout version.
    TesseraIncompatible = 9,
    /// An I/O error on the ledger's files.
    TesseraIo = 10,
    /// An argument or environment variable is malformed.
    TesseraBadArgument = 11,
    /// A bug in the library (it panicked); the call had no effect on the ledger's books.
    TesseraInternal = 12,
    /// `tessera_shutdown` while other threads are inside calls: nothing was released;
    /// call it again once they have returned.
    TesseraBusy = 13,
    /// This process was forked from the one that called `tessera_init`: the handle is
    /// the parent's. Call `tessera_init` again in the child to open its own (the
    /// parent's reservations stay the parent's).
    TesseraForked = 14,
    /// The ledger file or its records directory is a symlink, belongs to another user
    /// (or group) or is writable by others: refused, never trusted.
    TesseraInsecure = 15,
    /// The file at the ledger's path is not a ledger: refused, left untouched.
    TesseraNotALedger = 16,
    /// The ledger is damaged and no live client has a record to repair it from; set
    /// `TESSERA_GPU_MEMORY` to start it afresh.
    TesseraUnrepairable = 17,
    /// Waiting would deadlock: the memory is held by processes that wait for memory
    /// this one holds. The request was not queued; free something and retry, or fail.
    TesseraWouldDeadlock = 18,
}

impl From<&LedgerError> for TesseraStatus {
    fn from(e: &LedgerError) -> Self {
        match e {
            LedgerError::NotAvailableNow { .. } => TesseraStatus::TesseraNotAvailable,
            LedgerError::TimedOut { .. } | LedgerError::Cancelled { .. } => {
                TesseraStatus::TesseraTimedOut
            }
            LedgerError::WouldDeadlock { .. } => TesseraStatus::TesseraWouldDeadlock,
            LedgerError::ExceedsCapacity { .. } | LedgerError::NeverFits { .. } => {
                TesseraStatus::TesseraExceedsCapacity
            }
            LedgerError::NoSuchGpu { .. } => TesseraStatus::TesseraNoSuchGpu,
            LedgerError::OverFree { .. } => TesseraStatus::TesseraOverFree,
            LedgerError::TableFull { .. } => TesseraStatus::TesseraTableFull,
            LedgerError::NoGpus(_) => TesseraStatus::TesseraNoGpus,
            LedgerError::Incompatible { .. } => TesseraStatus::TesseraIncompatible,
            LedgerError::Io { .. } => TesseraStatus::TesseraIo,
            LedgerError::UsedAfterFork => TesseraStatus::TesseraForked,
            LedgerError::BadConfig(_) | LedgerError::NotAdoptable { .. } => {
                TesseraStatus::TesseraBadArgument
            }
            LedgerError::Insecure { .. } => TesseraStatus::TesseraInsecure,
            LedgerError::NotALedger { .. } => TesseraStatus::TesseraNotALedger,
            LedgerError::Unrepairable { .. } => TesseraStatus::TesseraUnrepairable,
        }
    }
}

static LEDGER: Mutex<Option<Arc<Ledger>>> = Mutex::new(None);

fn guarded(f: impl FnOnce() -> TesseraStatus) -> TesseraStatus {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(TesseraStatus::TesseraInternal)
}

fn current() -> Option<Arc<Ledger>> {
    LEDGER.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn status_of(r: Result<(), LedgerError>) -> TesseraStatus {
    match r {
        Ok(()) => TesseraStatus::TesseraOk,
        Err(e) => {
            tracing::debug!(error = %e, "tessera ledger call failed");
            (&e).into()
        }
    }
}

/// Parse a byte size, in tessera's one size syntax (`4799M`, `8GiB`, `1073741824`;
/// see `tessera_core::Bytes`).
pub fn parse_bytes(s: &str) -> Option<u64> {
    s.parse::<Bytes>().ok().map(|b| b.0)
}

fn parse_policy(s: &str) -> Option<NotificationPolicy> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "fifo" => NotificationPolicy::Fifo,
        "mmu" => NotificationPolicy::Mmu,
        "priority-fifo" | "pfifo" => NotificationPolicy::PriorityFifo,
        "priority-mmu" | "pmmu" => NotificationPolicy::PriorityMmu,
        _ => return None,
    })
}

fn config_from_env() -> Result<LedgerConfig, TesseraStatus> {
    let path = std::env::var_os("TESSERA_LEDGER")
        .map_or_else(|| PathBuf::from(DEFAULT_PATH), PathBuf::from);
    let gpus = match std::env::var("TESSERA_GPU_MEMORY") {
        Ok(list) => GpuSource::Explicit(
            list.split(',')
                .map(|x| parse_bytes(x).map(Bytes))
                .collect::<Option<Vec<_>>>()
                .ok_or(TesseraStatus::TesseraBadArgument)?,
        ),
        Err(_) => GpuSource::Nvml,
    };
    let policy = match std::env::var("TESSERA_POLICY") {
        Ok(p) => parse_policy(&p).ok_or(TesseraStatus::TesseraBadArgument)?,
        Err(_) => NotificationPolicy::Fifo,
    };
    let priority = match std::env::var("TESSERA_PRIORITY") {
        Ok(p) => p.trim().parse().map_err(|_| TesseraStatus::TesseraBadArgument)?,
        Err(_) => 0,
    };
    let access = match std::env::var("TESSERA_LEDGER_GROUP") {
        Ok(g) => Access::Group(resolve_group(&g).ok_or(TesseraStatus::TesseraBadArgument)?),
        Err(_) => Access::Owner,
    };
    let table = |var: &str, default: u32| match std::env::var(var) {
        Ok(n) => n.trim().parse::<u32>().map_err(|_| TesseraStatus::TesseraBadArgument),
        Err(_) => Ok(default),
    };
    Ok(LedgerConfig {
        priority,
        policy,
        access,
        max_holders: table("TESSERA_LEDGER_HOLDERS", DEFAULT_HOLDERS)?,
        max_waiters: table("TESSERA_LEDGER_WAITERS", DEFAULT_WAITERS)?,
        ..LedgerConfig::new(path, gpus)
    })
}

fn install(cfg: &LedgerConfig) -> TesseraStatus {
    let mut slot = LEDGER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = slot.as_ref() {
        if l.opened_by_this_process() {
            return TesseraStatus::TesseraOk; // already initialised: init is idempotent
        }
        // a forked child: the handle is the parent's; dropping it here touches nothing
        // (the parent's reservations stay the parent's), then open the child's own
        *slot = None;
    }
    match Ledger::open(cfg) {
        Ok(l) => {
            *slot = Some(Arc::new(l));
            TesseraStatus::TesseraOk
        }
        Err(e) => (&e).into(),
    }
}

/// Open (or create) the ledger, configured from the environment:
/// `TESSERA_LEDGER` (path, default `/dev/shm/tessera-ledger`), `TESSERA_GPU_MEMORY`
/// (comma-separated capacities such as `4799M,16G`, used when the ledger is created;
/// without it NVML is asked), `TESSERA_POLICY` (`fifo`, `mmu`, `priority-fifo`,
/// `priority-mmu`; used when created), `TESSERA_PRIORITY` (0-255, this process's).
/// Calling it again while initialised does nothing.
#[unsafe(no_mangle)]
pub extern "C" fn tessera_init() -> TesseraStatus {
    guarded(|| match config_from_env() {
        Ok(cfg) => install(&cfg),
        Err(status) => status,
    })
}

/// Open (or create) the ledger at `path` (NULL for the default) with `gpu_count`
/// capacities from `gpu_bytes` (used when the ledger is created), notification `policy`
/// (0 FIFO, 1 MMU, 2 priority FIFO, 3 priority MMU) and this process's `priority`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `gpu_bytes` points to `gpu_count`
/// readable `uint64_t` (or is NULL with `gpu_count` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tessera_init_with(
    path: *const c_char,
    gpu_bytes: *const u64,
    gpu_count: usize,
    policy: u32,
    priority: u8,
) -> TesseraStatus {
    guarded(|| {
        let path = if path.is_null() {
            PathBuf::from(DEFAULT_PATH)
        } else {
            // SAFETY: the caller promises a NUL-terminated string.
            let c = unsafe { CStr::from_ptr(path) };
            match c.to_str() {
                Ok(s) => PathBuf::from(s),
                Err(_) => return TesseraStatus::TesseraBadArgument,
            }
        };
        if gpu_bytes.is_null() && gpu_count > 0 {
            return TesseraStatus::TesseraBadArgument;
        }
        let gpus = if gpu_count == 0 {
            GpuSource::Nvml
        } else {
            // SAFETY: the caller promises gpu_count readable u64 at gpu_bytes (checked non-null).
            let slice = unsafe { std::slice::from_raw_parts(gpu_bytes, gpu_count) };
            GpuSource::Explicit(slice.iter().map(|b| Bytes(*b)).collect())
        };
        let Some(policy) = NotificationPolicy::ALL.get(policy as usize).copied() else {
            return TesseraStatus::TesseraBadArgument;
        };
        install(&LedgerConfig { policy, priority, ..LedgerConfig::new(path, gpus) })
    })
}

/// Reserve `bytes` on `gpu` before allocating them. `timeout_ms` < 0 waits forever,
/// 0 fails at once with `TesseraNotAvailable`, > 0 waits up to that many milliseconds.
#[unsafe(no_mangle)]
pub extern "C" fn tessera_pre_alloc(gpu: u32, bytes: u64, timeout_ms: i64) -> TesseraStatus {
    guarded(|| {
        let Some(l) = current() else { return TesseraStatus::TesseraNotInitialised };
        let wait = match timeout_ms {
            t if t < 0 => Wait::Forever,
            0 => Wait::NoWait,
            t => Wait::Timeout(Duration::from_millis(t as u64)),
        };
        status_of(l.pre_alloc(gpu, bytes, wait))
    })
}

/// Return `bytes` on `gpu` after freeing them; waiting processes are notified.
#[unsafe(no_mangle)]
pub extern "C" fn tessera_post_free(gpu: u32, bytes: u64) -> TesseraStatus {
    guarded(|| {
        let Some(l) = current() else { return TesseraStatus::TesseraNotInitialised };
        status_of(l.post_free(gpu, bytes))
    })
}

/// Release everything this process still holds and close the ledger. Also happens
/// when the process exits (the next client's sanity check releases a dead process's
/// memory).
#[unsafe(no_mangle)]
pub extern "C" fn tessera_shutdown() -> TesseraStatus {
    guarded(|| {
        let mut slot = LEDGER.lock().unwrap_or_else(|p| p.into_inner());
        let Some(arc) = slot.take() else { return TesseraStatus::TesseraNotInitialised };
        match Arc::try_unwrap(arc) {
            Ok(l) => {
                drop(slot);
                status_of(l.shutdown())
            }
            // another thread is inside a call (perhaps waiting for memory): releasing now
            // would free what it is about to be granted, so refuse and keep the handle
            Err(arc) => {
                *slot = Some(arc);
                TesseraStatus::TesseraBusy
            }
        }
    })
}

/// A static, human-readable description of `status`.
#[unsafe(no_mangle)]
pub extern "C" fn tessera_strerror(status: i32) -> *const c_char {
    let s: &'static CStr = match status {
        0 => c"success",
        1 => c"memory not available now",
        2 => c"timed out waiting for memory",
        3 => c"request exceeds the GPU's total memory",
        4 => c"no such GPU",
        5 => c"freeing more than this process holds",
        6 => c"tessera_init has not been called",
        7 => c"ledger table full",
        8 => c"no GPU description: set TESSERA_GPU_MEMORY",
        9 => c"incompatible ledger version",
        10 => c"I/O error on the ledger files",
        11 => c"bad argument",
        12 => c"internal error",
        13 => c"other threads are inside tessera calls; shut down after they return",
        14 => c"handle opened before fork(): call tessera_init in the child",
        15 => c"ledger file or directory is a symlink, foreign-owned or writable by others",
        16 => c"the file at the ledger path is not a ledger",
        17 => c"ledger damaged and nothing to repair it from: set TESSERA_GPU_MEMORY",
        _ => c"unknown status",
    };
    s.as_ptr()
}

// schedGPU's own names (the paper's §4, "the life cycle"), for programs written against
// schedGPU: they link against this library unchanged (header `include/schedGPU.h`).
// The paper gives the calls and their behaviour, not their C signatures; these take the
// size first, then the device, and return CUDA runtime codes (`cudaError_t` values,
// checked against NVIDIA's `driver_types.h` by a test), as schedGPU reports
// `cudaErrorNotReady` for a non-blocking pre-allocation that cannot be served.

const CUDA_SUCCESS: i32 = 0;
const CUDA_ERROR_INVALID_VALUE: i32 = 1;
const CUDA_ERROR_MEMORY_ALLOCATION: i32 = 2;
const CUDA_ERROR_INITIALIZATION_ERROR: i32 = 3;
const CUDA_ERROR_INVALID_DEVICE: i32 = 101;
const CUDA_ERROR_NOT_READY: i32 = 600;
const CUDA_ERROR_UNKNOWN: i32 = 999;

/// The CUDA runtime code a schedGPU program expects for `status`.
fn cuda_code(status: TesseraStatus) -> i32 {
    use TesseraStatus::*;
    match status {
        TesseraOk => CUDA_SUCCESS,
        // not free now, or not within the application's timeout (§4, footnote 7)
        TesseraNotAvailable | TesseraTimedOut => CUDA_ERROR_NOT_READY,
        // can never be granted, or not without a deadlock, or no room to queue
        TesseraExceedsCapacity | TesseraWouldDeadlock | TesseraTableFull => {
            CUDA_ERROR_MEMORY_ALLOCATION
        }
        TesseraNoSuchGpu => CUDA_ERROR_INVALID_DEVICE,
        TesseraOverFree | TesseraBadArgument => CUDA_ERROR_INVALID_VALUE,
        TesseraNotInitialised
        | TesseraNoGpus
        | TesseraIncompatible
        | TesseraIo
        | TesseraForked
        | TesseraInsecure
        | TesseraNotALedger
        | TesseraUnrepairable => CUDA_ERROR_INITIALIZATION_ERROR,
        TesseraInternal | TesseraBusy => CUDA_ERROR_UNKNOWN,
    }
}

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

extern "C" fn shutdown_at_exit() {
    let _ = tessera_shutdown();
}

static AT_EXIT: std::sync::Once = std::sync::Once::new();

/// schedGPU's initialisation: open (or create) the ledger as `tessera_init` does (the
/// same environment variables), and arrange the shutdown stage for when the program
/// exits, as schedGPU does implicitly. Returns `cudaSuccess` (0) or a CUDA error code.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn schedGPUInit() -> i32 {
    let status = tessera_init();
    if status == TesseraStatus::TesseraOk {
        AT_EXIT.call_once(|| {
            // SAFETY: atexit is the C library's; the callback is a plain extern "C"
            // function that stays valid for the life of the process.
            let _ = unsafe { atexit(shutdown_at_exit) };
        });
    }
    cuda_code(status)
}

/// schedGPU's pre-allocation: reserve `size` bytes on `device` before `cudaMalloc`.
/// `timeout_ms` 0 is the non-blocking call (`cudaErrorNotReady`, 600, when the memory
/// is not free now); > 0 waits up to that long for other programs to free it (then
/// `cudaErrorNotReady`); < 0 waits as long as it takes (not in the paper, which asks
/// for a timeout; tessera refuses a wait that would deadlock with
/// `cudaErrorMemoryAllocation`, 2). More than the device has is
/// `cudaErrorMemoryAllocation`, a device that does not exist `cudaErrorInvalidDevice`.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn preCudaMalloc(size: usize, device: i32, timeout_ms: i64) -> i32 {
    let Ok(gpu) = u32::try_from(device) else { return CUDA_ERROR_INVALID_DEVICE };
    cuda_code(tessera_pre_alloc(gpu, size as u64, timeout_ms))
}

/// schedGPU's post-free: return `size` bytes on `device` after `cudaFree`; programs
/// waiting for memory are notified by the ledger's policy. Freeing more than this
/// program pre-allocated there is `cudaErrorInvalidValue` (1) and changes nothing.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn postCudaFree(size: usize, device: i32) -> i32 {
    let Ok(gpu) = u32::try_from(device) else { return CUDA_ERROR_INVALID_DEVICE };
    cuda_code(tessera_post_free(gpu, size as u64))
}

/// schedGPU's shutdown stage, which runs by itself at exit after `schedGPUInit`:
/// release what this program still holds and close the ledger.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn schedGPUShutdown() -> i32 {
    cuda_code(tessera_shutdown())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test in this binary that touches the process-wide handle.
    #[test]
    fn shutdown_refuses_while_another_thread_waits_for_memory() {
        let path = std::env::temp_dir().join(format!("tessera-ffi-busy-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let gpus = [1000u64];
        // SAFETY: a valid C string and one readable u64, both alive for the call.
        let init = unsafe { tessera_init_with(cpath.as_ptr(), gpus.as_ptr(), 1, 0, 0) };
        assert_eq!(init, TesseraStatus::TesseraOk);
        assert_eq!(tessera_pre_alloc(0, 300, 0), TesseraStatus::TesseraOk);
        // another client holds the rest, so that this process's wait can end (a wait
        // only its own memory stands in the way of is refused at once)
        let other = crate::Ledger::open(&crate::LedgerConfig::new(
            &path,
            crate::GpuSource::Explicit(vec![tessera_core::Bytes(1000)]),
        ))
        .unwrap();
        other.pre_alloc(0, 600, crate::Wait::NoWait).unwrap();
        let waiter = std::thread::spawn(|| tessera_pre_alloc(0, 500, 10_000));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(tessera_shutdown(), TesseraStatus::TesseraBusy, "a thread is waiting");
        other.post_free(0, 600).unwrap();
        assert_eq!(waiter.join().unwrap(), TesseraStatus::TesseraOk);
        drop(other);
        assert_eq!(
            tessera_post_free(0, 500),
            TesseraStatus::TesseraOk,
            "the grant survived the refused shutdown"
        );
        assert_eq!(tessera_post_free(0, 300), TesseraStatus::TesseraOk);
        assert_eq!(tessera_shutdown(), TesseraStatus::TesseraOk);
        assert_eq!(tessera_pre_alloc(0, 1, 0), TesseraStatus::TesseraNotInitialised);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(crate::records::dir_for(&path));
    }

    #[test]
    fn byte_sizes_parse() {
        assert_eq!(parse_bytes("4799M"), Some(4799 << 20));
        assert_eq!(parse_bytes(" 8G"), Some(8 << 30));
        assert_eq!(parse_bytes("1024"), Some(1024));
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(parse_bytes("99999999999999G"), None);
        assert_eq!(parse_policy("Priority-MMU"), Some(NotificationPolicy::PriorityMmu));
    }
}
