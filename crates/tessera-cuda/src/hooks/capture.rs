//! Streams and stream capture (CUDA graphs). Which streams capture now, so that
//! launches into them are recorded without the launch gate, and the gate never
//! synchronises while any capture is open — a synchronisation during a capture in
//! global or thread-local mode is "potentially unsafe" and invalidates it (CUDA
//! programming guide, stream capture). And the program's streams, each standing for
//! its stream on the current device (see `migrate`).
//!
//! A program built for the per-thread default stream (`--default-stream per-thread`,
//! `CUDA_API_PER_THREAD_DEFAULT_STREAM`) calls the `_ptsz` variants, whose NULL stream
//! is the calling thread's per-thread default stream, a stream of its own that can be
//! captured — not the legacy stream the plain entry points' NULL stream is. Every
//! variant of an entry point here is hooked, and the capture module knows that stream
//! by the handle the plain entry points give it, `CU_STREAM_PER_THREAD`, and the thread
//! (see [`per_thread`]).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::{guarded, variant};
use crate::migrate::migration;
use crate::state::state;
use std::collections::BTreeSet;
use std::ffi::{c_int, c_uint};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tessera_driver::sys::{
    CUgraph, CUgraphEdgeData, CUgraphNode, CUlaunchConfig, CUstream, CUstreamCaptureMode,
    CUstreamCaptureStatus, cuuint64_t,
};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [
        cuStreamBeginCapture_v2, cuStreamBeginCaptureToGraph, cuStreamEndCapture,
        cuStreamIsCapturing, cuStreamGetCaptureInfo_v2,
        cuStreamGetCaptureInfo_v3, cuStreamSynchronize, cuStreamQuery, cuStreamCreate,
        cuStreamCreateWithPriority, cuStreamDestroy_v2,
    ],
    variants: [
        cuStreamBeginCapture_v2_ptsz => cuStreamBeginCapture_v2,
        cuStreamBeginCaptureToGraph_ptsz => cuStreamBeginCaptureToGraph,
        cuStreamEndCapture_ptsz => cuStreamEndCapture,
        cuStreamIsCapturing_ptsz => cuStreamIsCapturing,
        cuStreamGetCaptureInfo_v2_ptsz => cuStreamGetCaptureInfo_v2,
        cuStreamGetCaptureInfo_v3_ptsz => cuStreamGetCaptureInfo_v3,
        cuStreamSynchronize_ptsz => cuStreamSynchronize,
        cuStreamQuery_ptsz => cuStreamQuery,
        cuStreamDestroy => cuStreamDestroy_v2,
    ],
    // CUDA 10.0's capture, without a mode, and CUDA 11.0's capture information (their
    // legacy ABI, outside the bindings)
    unchecked: [
        cuStreamBeginCapture, cuStreamBeginCapture_ptsz, cuStreamGetCaptureInfo,
        cuStreamGetCaptureInfo_ptsz,
    ],
}

/// `CU_STREAM_PER_THREAD`: the calling thread's per-thread default stream, to any
/// entry point.
const PER_THREAD: CUstream = 0x2 as CUstream;

/// The stream a `_ptsz` variant was given, as the plain entry points name it: its NULL
/// stream is the calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`);
/// any other handle is itself.
#[inline]
pub(super) fn per_thread(stream: CUstream) -> CUstream {
    if stream.is_null() { PER_THREAD } else { stream }
}

/// Captures open in this process (the fast path's one load).
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// The (real) streams capturing, by handle — and by thread for the per-thread default
/// stream, one handle for a stream of each thread (0 for any other).
static STREAMS: Mutex<BTreeSet<(usize, u64)>> = Mutex::new(BTreeSet::new());

/// The calling thread, as a number of this module's (never reused).
fn thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ME: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ME.with(|me| *me)
}

/// The stream `stream` (a real handle, the per-thread one as `CU_STREAM_PER_THREAD`)
/// names when the calling thread names it.
fn key(stream: CUstream) -> (usize, u64) {
    if stream == PER_THREAD { (stream as usize, thread()) } else { (stream as usize, 0) }
}

/// Whether any capture is open.
#[inline]
pub fn open() -> bool {
    OPEN.load(Ordering::Relaxed) > 0
}

/// Whether a launch on the program's `stream` is recorded into a capture (a `_ptsz`
/// variant's stream as [`per_thread`] names it).
#[inline]
pub fn recording(stream: CUstream) -> bool {
    open() && is_capturing(migration().real_stream(stream).unwrap_or(stream))
}

/// Whether a `cuLaunchKernelEx` launch is recorded into a capture (`ptsz`: the launch
/// is `cuLaunchKernelEx_ptsz`'s).
#[inline]
pub fn config_recording(config: *const CUlaunchConfig, ptsz: bool) -> bool {
    if !open() || config.is_null() {
        return false;
    }
    // SAFETY: non-null, the caller's launch configuration; a plain field read.
    let stream = unsafe { (*config).hStream };
    recording(if ptsz { per_thread(stream) } else { stream })
}

fn is_capturing(stream: CUstream) -> bool {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    real!(cuStreamIsCapturing(stream, &mut status)) == status::SUCCESS
        && status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

fn update(change: impl FnOnce(&mut BTreeSet<(usize, u64)>)) {
    let mut streams = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
    change(&mut streams);
    OPEN.store(streams.len(), Ordering::Relaxed);
}

/// How the log names a stream.
fn named(stream: CUstream) -> String {
    match key(stream) {
        (s, 0) => format!("{s:#x}"),
        (s, thread) => format!("{s:#x} (thread {thread}'s per-thread default stream)"),
    }
}

/// A capture began on the real `stream`.
fn began(stream: CUstream) {
    state().log(format_args!("capture began on {}", named(stream)));
    update(|s| {
        s.insert(key(stream));
    });
}

/// A capture on the real `stream` may have ended (`cuStreamEndCapture` was called,
/// whatever it answered): ask the driver.
fn maybe_ended(stream: CUstream) {
    if !is_capturing(stream) {
        state().log(format_args!("capture ended on {}", named(stream)));
        update(|s| {
            s.remove(&key(stream));
        });
    }
}

/// The program's `stream` made the real one (its stream on the current device; the
/// same before any move), or why it cannot be.
fn real_stream(stream: CUstream) -> Result<CUstream, CuResult> {
    migration().real_stream(stream)
}

/// An entry point that begins a capture on its first argument, a stream (`ptsz`: a
/// `_ptsz` variant's): the capture is noted if the driver began it.
macro_rules! begin_hook {
    ($name:ident, ptsz $ptsz:literal, $by:ident, ( $($arg:ident : $ty:ty),* )) => {
        #[doc = concat!("`", stringify!($name), "`: the capture is noted, so that launches ")]
        #[doc = "into the stream are recorded without the gate."]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(stream: CUstream $(, $arg: $ty)*) -> CuResult {
            guarded(stringify!($name), || {
                let s = match real_stream(stream) {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                let r = driver!($by $name(s: CUstream $(, $arg: $ty)*));
                if r == status::SUCCESS {
                    began(if $ptsz { per_thread(s) } else { s });
                }
                r
            })
        }
    };
}

begin_hook!(cuStreamBeginCapture_v2, ptsz false, api, (mode: CUstreamCaptureMode));
begin_hook!(cuStreamBeginCapture_v2_ptsz, ptsz true, symbol, (mode: CUstreamCaptureMode));
begin_hook!(cuStreamBeginCapture, ptsz false, symbol, ());
begin_hook!(cuStreamBeginCapture_ptsz, ptsz true, symbol, ());
begin_hook!(cuStreamBeginCaptureToGraph, ptsz false, api, (
    graph: CUgraph, dependencies: *const CUgraphNode, edges: *const CUgraphEdgeData, count: usize,
    mode: CUstreamCaptureMode
));
begin_hook!(cuStreamBeginCaptureToGraph_ptsz, ptsz true, symbol, (
    graph: CUgraph, dependencies: *const CUgraphNode, edges: *const CUgraphEdgeData, count: usize,
    mode: CUstreamCaptureMode
));

/// `cuStreamEndCapture` and its variant: the capture is over unless the driver says
/// otherwise.
macro_rules! end_hook {
    ($name:ident, ptsz $ptsz:literal, $by:ident) => {
        #[doc = concat!("`", stringify!($name), "`: the capture is over unless the driver ")]
        #[doc = "says otherwise."]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(stream: CUstream, graph: *mut CUgraph) -> CuResult {
            guarded(stringify!($name), || {
                let s = match real_stream(stream) {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                let r = driver!($by $name(s: CUstream, graph: *mut CUgraph));
                maybe_ended(if $ptsz { per_thread(s) } else { s });
                r
            })
        }
    };
}

end_hook!(cuStreamEndCapture, ptsz false, api);
end_hook!(cuStreamEndCapture_ptsz, ptsz true, symbol);

/// A stream entry point whose first argument is the program's stream, standing for
/// its stream on the current device (the same one before any move).
macro_rules! stream_hook {
    ($name:ident, $by:ident, ( $($arg:ident : $ty:ty),* )) => {
        #[doc = concat!("`", stringify!($name), "`, on the current device's stream.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(stream: CUstream $(, $arg: $ty)*) -> CuResult {
            guarded(stringify!($name), || match real_stream(stream) {
                Ok(s) => driver!($by $name(s: CUstream $(, $arg: $ty)*)),
                Err(e) => e,
            })
        }
    };
}

/// A stream hook for a synchronous call: noted once it returns (see [`super::sync`]).
macro_rules! sync_stream_hook {
    ($name:ident, $by:ident) => {
        #[doc = concat!("`", stringify!($name), "`, on the current device's stream; a synchronous call.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(stream: CUstream) -> CuResult {
            guarded(stringify!($name), || match real_stream(stream) {
                Ok(s) => super::sync::synchronous(driver!($by $name(s: CUstream))),
                Err(e) => e,
            })
        }
    };
}

sync_stream_hook!(cuStreamSynchronize, api);
sync_stream_hook!(cuStreamSynchronize_ptsz, symbol);
stream_hook!(cuStreamQuery, api, ());
stream_hook!(cuStreamQuery_ptsz, symbol, ());
stream_hook!(cuStreamIsCapturing, api, (status: *mut CUstreamCaptureStatus));
stream_hook!(cuStreamIsCapturing_ptsz, symbol, (status: *mut CUstreamCaptureStatus));
stream_hook!(cuStreamGetCaptureInfo, symbol, (
    status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t
));
stream_hook!(cuStreamGetCaptureInfo_ptsz, symbol, (
    status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t
));
stream_hook!(cuStreamGetCaptureInfo_v2, api, (
    status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t, graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode, count: *mut usize
));
stream_hook!(cuStreamGetCaptureInfo_v2_ptsz, symbol, (
    status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t, graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode, count: *mut usize
));
stream_hook!(cuStreamGetCaptureInfo_v3, api, (
    status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t, graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode, edges: *mut *const CUgraphEdgeData, count: *mut usize
));
stream_hook!(cuStreamGetCaptureInfo_v3_ptsz, symbol, (
    status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t, graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode, edges: *mut *const CUgraphEdgeData, count: *mut usize
));

/// `cuStreamCreate`, remembered for a move.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CuResult {
    guarded("cuStreamCreate", || migration().create_stream(stream, flags, None))
}

/// `cuStreamCreateWithPriority`, remembered for a move.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamCreateWithPriority(
    stream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CuResult {
    guarded("cuStreamCreateWithPriority", || {
        migration().create_stream(stream, flags, Some(priority))
    })
}

/// `cuStreamDestroy_v2`: with its copies on other devices.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CuResult {
    guarded("cuStreamDestroy", || migration().destroy_stream(stream))
}

/// Legacy `cuStreamDestroy` (the same C signature): as `cuStreamDestroy_v2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamDestroy(stream: CUstream) -> CuResult {
    guarded("cuStreamDestroy (legacy)", || migration().destroy_stream(stream))
}
