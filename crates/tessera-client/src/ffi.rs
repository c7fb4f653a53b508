//! The C ABI of the client library, for C programs (and, later, an LD_PRELOAD
//! interposer). The header `include/tessera_client.h` is generated from this file by
//! cbindgen and checked by a test. Every function returns a [`TesseraClientStatus`];
//! none panics across the ABI. A `TesseraClient` is used by one thread at a time.
#![allow(unsafe_code)]

use crate::proto::TenantClass;
use crate::{Client, ClientError, Outcome, TaskRequest, TenantOptions};
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Duration;

/// Result of every `tessera_client_*` call. Values are stable.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TesseraClientStatus {
    /// Success.
    TesseraClientOk = 0,
    /// No daemon at that socket, or the connection broke.
    TesseraClientConnect = 1,
    /// The daemon refused (bad request, unknown tenant, no capacity, shutting down).
    TesseraClientRefused = 2,
    /// The daemon said something this library does not understand.
    TesseraClientProtocol = 3,
    /// As many tasks in flight as ring slots: wait for some first.
    TesseraClientTooManyInFlight = 4,
    /// Input or output larger than a data slot.
    TesseraClientTooLarge = 5,
    /// No completion within the timeout.
    TesseraClientTimedOut = 6,
    /// A NULL pointer or malformed argument.
    TesseraClientBadArgument = 7,
    /// A bug in the library (it panicked).
    TesseraClientInternal = 8,
    /// The daemon shut down or died; tasks in flight will not complete.
    TesseraClientDaemonGone = 9,
}

/// How a task ended (`TesseraCompletion::outcome`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TesseraOutcome {
    /// Completed.
    TesseraDone = 0,
    /// Failed; `reason` says why.
    TesseraFailed = 1,
    /// Cancelled; `reason` says why.
    TesseraCancelled = 2,
}

/// A finished task.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TesseraCompletion {
    /// The handle `tessera_client_submit` returned.
    pub handle: u64,
    /// A `TesseraOutcome`.
    pub outcome: u32,
    /// For failed or cancelled tasks: 1 bad request, 2 unknown tenant, 3 no GPU memory,
    /// 4 executor error, 5 cancelled by the client, 6 tenant closed, 7 shutdown,
    /// 8 unschedulable, 9 over the uid's quota.
    pub reason: u32,
    /// Nanoseconds queued (daemon's emulated clock).
    pub queued_ns: u64,
    /// Nanoseconds running.
    pub ran_ns: u64,
    /// GPU it ran on, or -1.
    pub gpu: i32,
    /// Output bytes copied into the caller's buffer.
    pub output_len: u32,
}

/// An open connection (opaque).
#[derive(Debug)]
pub struct TesseraClient {
    inner: Client,
}

fn status_of(e: &ClientError) -> TesseraClientStatus {
    match e {
        ClientError::Connect(_) => TesseraClientStatus::TesseraClientConnect,
        ClientError::Refused { .. } => TesseraClientStatus::TesseraClientRefused,
        ClientError::Protocol(_) | ClientError::Region(_) => {
            TesseraClientStatus::TesseraClientProtocol
        }
        ClientError::TooManyInFlight(_) => TesseraClientStatus::TesseraClientTooManyInFlight,
        ClientError::TooLarge { .. } => TesseraClientStatus::TesseraClientTooLarge,
        ClientError::TimedOut => TesseraClientStatus::TesseraClientTimedOut,
        ClientError::DaemonGone => TesseraClientStatus::TesseraClientDaemonGone,
    }
}

fn guarded(f: impl FnOnce() -> TesseraClientStatus) -> TesseraClientStatus {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(TesseraClientStatus::TesseraClientInternal)
}

/// Connect to the daemon at `socket` and store the connection in `*out`.
///
/// # Safety
/// `socket` is a NUL-terminated string; `out` points to writable storage for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tessera_client_connect(
    socket: *const c_char,
    out: *mut *mut TesseraClient,
) -> TesseraClientStatus {
    guarded(|| {
        if socket.is_null() || out.is_null() {
            return TesseraClientStatus::TesseraClientBadArgument;
        }
        // SAFETY: the caller promises a NUL-terminated string.
        let Ok(path) = unsafe { CStr::from_ptr(socket) }.to_str() else {
            return TesseraClientStatus::TesseraClientBadArgument;
        };
        match Client::connect(Path::new(path)) {
            Ok(inner) => {
                // SAFETY: `out` is non-null and writable by contract.
                unsafe { *out = Box::into_raw(Box::new(TesseraClient { inner })) };
                TesseraClientStatus::TesseraClientOk
            }
            Err(e) => status_of(&e),
        }
    })
}

/// Close the connection and free it; its queued tasks are cancelled by the daemon.
///
/// # Safety
/// `client` is NULL or a pointer from `tessera_client_connect`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tessera_client_disconnect(client: *mut TesseraClient) {
    if !client.is_null() {
        // SAFETY: by contract the pointer came from Box::into_raw and is not reused.
        drop(unsafe { Box::from_raw(client) });
    }
}

/// Register a tenant: `user_facing` non-zero with an SLA of `sla_ms`, else batch.
///
/// # Safety
/// `client` is from `tessera_client_connect`; `tenant_out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tessera_client_register(
    client: *mut TesseraClient,
    user_facing: i32,
    sla_ms: u32,
    priority: u8,
    memory: u64,
    tenant_out: *mut u64,
) -> TesseraClientStatus {
    guarded(|| {
        // SAFETY: by contract `client` is a live connection used by this thread only.
        let (Some(c), false) = (unsafe { client.as_mut() }, tenant_out.is_null()) else {
            return TesseraClientStatus::TesseraClientBadArgument;
        };
        let class = if user_facing != 0 { TenantClass::UserFacing } else { TenantClass::Batch };
        let options = TenantOptions {
            class,
            sla: Duration::from_millis(u64::from(sla_ms)),
            weight: 1,
            priority,
            memory,
            job: None,
            token: None,
        };
        match c.inner.register(options) {
            Ok(t) => {
                // SAFETY: non-null, writable by contract.
                unsafe { *tenant_out = t };
                TesseraClientStatus::TesseraClientOk
            }
            Err(e) => status_of(&e),
        }
    })
}

/// Submit a task of `tenant`: `kernel`, emulated cost `cost_ns`, device `memory`,
/// `in_len` input bytes from `input` (may be NULL when 0), `out_len` output bytes
/// wanted. Stores its handle in `*handle_out`.
///
/// # Safety
/// `client` is from `tessera_client_connect`; `input` points to `in_len` readable
/// bytes (or `in_len` is 0); `handle_out` is writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tessera_client_submit(
    client: *mut TesseraClient,
    tenant: u64,
    kernel: u32,
    cost_ns: u64,
    memory: u64,
    input: *const u8,
    in_len: u32,
    out_len: u32,
    handle_out: *mut u64,
) -> TesseraClientStatus {
    guarded(|| {
        // SAFETY: as in `tessera_client_register`.
        let (Some(c), false) = (unsafe { client.as_mut() }, handle_out.is_null()) else {
            return TesseraClientStatus::TesseraClientBadArgument;
        };
        if input.is_null() && in_len > 0 {
            return TesseraClientStatus::TesseraClientBadArgument;
        }
        let input = if in_len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller promises in_len readable bytes at `input` (non-null).
            unsafe { std::slice::from_raw_parts(input, in_len as usize) }.to_vec()
        };
        let t = TaskRequest {
            kernel,
            cost: Duration::from_nanos(cost_ns),
            memory,
            input,
            output_len: out_len,
        };
        match c.inner.submit(tenant, &t) {
            Ok(h) => {
                // SAFETY: non-null, writable by contract.
                unsafe { *handle_out = h };
                TesseraClientStatus::TesseraClientOk
            }
            Err(e) => status_of(&e),
        }
    })
}

/// Wait up to `timeout_ms` (negative: forever) for task `handle`; fill `*out` and copy
/// up to `output_cap` output bytes into `output` (may be NULL when 0).
///
/// # Safety
/// `client` is from `tessera_client_connect`; `out` is writable; `output` points to
/// `output_cap` writable bytes (or `output_cap` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tessera_client_wait(
    client: *mut TesseraClient,
    handle: u64,
    timeout_ms: i64,
    out: *mut TesseraCompletion,
    output: *mut u8,
    output_cap: u32,
) -> TesseraClientStatus {
    guarded(|| {
        // SAFETY: as in `tessera_client_register`.
        let (Some(c), false) = (unsafe { client.as_mut() }, out.is_null()) else {
            return TesseraClientStatus::TesseraClientBadArgument;
        };
        if output.is_null() && output_cap > 0 {
            return TesseraClientStatus::TesseraClientBadArgument;
        }
        let timeout = if timeout_ms < 0 {
            Duration::from_secs(u64::MAX / 4)
        } else {
            Duration::from_millis(timeout_ms as u64)
        };
        match c.inner.wait(handle, timeout) {
            Ok(done) => {
                let n = done.output.len().min(output_cap as usize);
                if n > 0 {
                    // SAFETY: output has output_cap >= n writable bytes by contract.
                    unsafe { std::ptr::copy_nonoverlapping(done.output.as_ptr(), output, n) };
                }
                let (outcome, reason) = match done.outcome {
                    Outcome::Done | Outcome::Echo => (TesseraOutcome::TesseraDone, 0),
                    Outcome::Failed(r) => (TesseraOutcome::TesseraFailed, r),
                    Outcome::Cancelled(r) => (TesseraOutcome::TesseraCancelled, r),
                };
                let c = TesseraCompletion {
                    handle: done.handle,
                    outcome: outcome as u32,
                    reason,
                    queued_ns: done.queued.as_nanos() as u64,
                    ran_ns: done.ran.as_nanos() as u64,
                    gpu: done.gpu.map_or(-1, |g| g as i32),
                    output_len: n as u32,
                };
                // SAFETY: non-null, writable by contract.
                unsafe { *out = c };
                TesseraClientStatus::TesseraClientOk
            }
            Err(e) => status_of(&e),
        }
    })
}
