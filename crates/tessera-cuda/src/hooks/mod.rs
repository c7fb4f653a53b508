//! The exported entry points: the driver calls tessera governs, `cuGetProcAddress`
//! (which hands out these hooks for the governed names, whatever version or
//! per-thread-stream variant is asked for), and `dlsym` (which does the same for a
//! `dlsym` on the driver's handle). Everything else reaches the real driver untouched:
//! directly for programs linked with it, through the real `dlsym` and
//! `cuGetProcAddress` otherwise.
//!
//! One file per concern: [`device`] (the process's life: `cuInit`, device count and
//! handles, contexts), [`memory`] (every allocation entry point and its free, memory
//! reports, the refusals of what the ledger cannot count), [`launch`] (the launch
//! gate's hooks, with kernel slicing's sub-kernels), [`modules`] (the modules,
//! functions and kernels they launch; with kernel slicing, twins of the PTX
//! [`fatbin`] finds in a fat binary or [`nvjitlink`] has nvJitLink link for a cubin
//! it linked), [`capture`] (streams and
//! stream capture), [`sync`] (synchronous calls, noted for the daemon's
//! classification of interactive tenants) and [`lookup`] (`cuGetProcAddress` and
//! `dlsym`, which answer the others' hooks by name, nvJitLink's among them). What they share is here; each file
//! lists its own hooks (`hooks!`), and only `lookup` uses the others (and `capture`'s
//! stream synchronisation, `sync`'s note of a synchronous call).
//!
//! Every hook catches panics (a panic must not unwind into C) and answers
//! `CUDA_ERROR_UNKNOWN` if one happens. The exports are left out of this crate's own
//! unit-test binary, whose look-ups they would otherwise interpose.
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use crate::state::{complain, state};
use std::sync::OnceLock;
use tessera_driver::sys::CUdevice;
use tessera_driver::{CuResult, status};

/// The hooks of one file, named once: `hook_for` answers each by its driver symbol,
/// and `hooks_have_the_drivers_signatures` (never called) makes the compiler check
/// each hook's signature against `DriverApi`'s (the bindings generated from `cuda.h`,
/// `tessera-driver`): a `checked` hook against the entry point of its own name, a
/// `variant` (a per-thread-stream or legacy name outside `DriverApi`) against the
/// entry point whose C signature it shares; `unchecked` ones (legacy signatures the
/// bindings lack: the 32-bit ABI, CUDA 10's and 11's) against nothing.
macro_rules! hooks {
    (
        checked: [$($c:ident),* $(,)?],
        variants: [$($v:ident => $f:ident),* $(,)?],
        unchecked: [$($u:ident),* $(,)?] $(,)?
    ) => {
        /// This file's hook for the exact driver symbol `name`, if it has one.
        pub(super) fn hook_for(name: &[u8]) -> Option<*mut std::ffi::c_void> {
            $(if name == stringify!($c).as_bytes() {
                return Some($c as *mut std::ffi::c_void);
            })*
            $(if name == stringify!($v).as_bytes() {
                return Some($v as *mut std::ffi::c_void);
            })*
            $(if name == stringify!($u).as_bytes() {
                return Some($u as *mut std::ffi::c_void);
            })*
            None
        }

        #[allow(dead_code)]
        fn hooks_have_the_drivers_signatures(api: &mut tessera_driver::DriverApi) {
            $(api.$c = Some($c);)*
            $(api.$f = Some($v);)*
        }
    };
}

/// Call the driver's entry point `$name` with `$arg`s: `api`, through `DriverApi`;
/// `symbol`, by its symbol (a variant outside `DriverApi`, whose C signature is the
/// `$ty`s). Names used at the call site: `real!`, `CuResult`, `OnceLock`, `variant`
/// and `status`.
macro_rules! driver {
    (api $name:ident ( $($arg:ident : $ty:ty),* )) => {
        real!($name($($arg),*))
    };
    (symbol $name:ident ( $($arg:ident : $ty:ty),* )) => {{
        type Real = unsafe extern "C" fn($($ty),*) -> CuResult;
        static REAL: OnceLock<Option<usize>> = OnceLock::new();
        match variant(&REAL, stringify!($name)) {
            // SAFETY: the driver's own entry point of that name, whose C signature is
            // `Real` (cuda.h's); the caller's arguments.
            Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)($($arg),*) },
            None => status::NOT_FOUND,
        }
    }};
}

pub(crate) mod capture;
mod device;
mod fatbin;
mod launch;
mod lookup;
mod memory;
mod modules;
mod nvjitlink;
mod pools;
mod sync;

pub(crate) use modules::kernel_device;

thread_local! {
    /// The stream of this thread's latest gated launch (a real handle; the per-thread
    /// default stream as `CU_STREAM_PER_THREAD`).
    static LAUNCH_STREAM: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Note the stream a launch goes to (`ptsz`: its NULL is the per-thread stream).
#[inline]
fn note_stream(stream: tessera_driver::sys::CUstream, ptsz: bool) {
    let s = if ptsz { capture::per_thread(stream) } else { stream };
    LAUNCH_STREAM.with(|c| c.set(s as usize));
}

/// The stream of the calling thread's latest gated launch.
pub(crate) fn launch_stream() -> tessera_driver::sys::CUstream {
    LAUNCH_STREAM.with(|c| c.get()) as tessera_driver::sys::CUstream
}

/// Run a hook body; a panic becomes `CUDA_ERROR_UNKNOWN` and one line on stderr.
fn guarded(name: &str, body: impl FnOnce() -> CuResult) -> CuResult {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            complain(&format!("internal error in {name}; the call failed"));
            status::UNKNOWN
        }
    }
}

/// The device of the calling thread's current context, as the real driver says.
fn current_gpu() -> Result<u32, CuResult> {
    let mut dev: CUdevice = 0;
    match real!(cuCtxGetDevice(&mut dev)) {
        status::SUCCESS => u32::try_from(dev).map_err(|_| status::INVALID_DEVICE),
        e => Err(e),
    }
}

/// `gpu`'s multiprocessors, as the real driver says (kernel slicing's size per
/// multiprocessor; asked once per GPU).
pub(crate) fn gpu_sms(gpu: u32) -> Option<u32> {
    let mut sms: std::ffi::c_int = 0;
    let asked = real!(cuDeviceGetAttribute(
        &mut sms,
        tessera_driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        gpu as tessera_driver::sys::CUdevice
    ));
    (asked == status::SUCCESS).then(|| u32::try_from(sms).unwrap_or(0)).filter(|n| *n > 0)
}

/// The real driver's symbol `name` (a variant outside [`DriverApi`]), cached in `slot`.
fn variant(slot: &OnceLock<Option<usize>>, name: &str) -> Option<usize> {
    *slot.get_or_init(|| {
        let name = std::ffi::CString::new(name).ok()?;
        let p = state().real.as_ref().ok()?.symbol(&name);
        (!p.is_null()).then_some(p as usize)
    })
}

/// `CUDA_ERROR_NOT_SUPPORTED`: what an entry point the interposer cannot govern answers.
const NOT_SUPPORTED: CuResult = tessera_driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED as CuResult;

/// Refuse an entry point that would take device memory past the ledger (a tenant
/// only; unmanaged processes pass through), with one line saying why.
fn refuse_ungoverned(name: &str, why: &str) -> CuResult {
    complain(&format!("{name} is refused: {why}"));
    NOT_SUPPORTED
}
