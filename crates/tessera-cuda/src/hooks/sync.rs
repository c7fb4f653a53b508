//! Synchronous calls — a program waiting for the GPU — that are not otherwise governed:
//! passed to the driver untouched, then noted in the tenant's window of latest
//! synchronous calls, which the daemon reads to classify it as CPU-GPU interactive
//! (FairGV §3.2.3, `tessera_core::interactive`). `cuStreamSynchronize` is noted by its
//! hook in [`super::capture`].
//!
//! `cuCtxSynchronize` (what `cudaDeviceSynchronize` and `torch.cuda.synchronize()` come
//! to) and CUDA 13's `cuCtxSynchronize_v2`, which takes a context, are hooked each under
//! its own signature: `cuGetProcAddress` hands out a hook by the variant the driver
//! itself answered (`lookup`'s `substitute`), so a program asking for CUDA 13's gets the
//! `_v2` hook. Left out: the 2-D and 3-D copies; the runtime's `cudaMemcpy` reaches the
//! driver through these or through an asynchronous copy and `cuStreamSynchronize`.

use super::{guarded, variant};
use crate::state::state;
use std::ffi::c_void;
use std::sync::OnceLock;
use tessera_driver::sys::{CUcontext, CUdeviceptr, CUevent};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [cuCtxSynchronize, cuEventSynchronize, cuMemcpyDtoH_v2, cuMemcpyHtoD_v2],
    variants: [
        cuMemcpyDtoH_v2_ptds => cuMemcpyDtoH_v2,
        cuMemcpyHtoD_v2_ptds => cuMemcpyHtoD_v2,
    ],
    // the legacy 32-bit ABI's names of the same copies (cuGetProcAddress may hand
    // out any name of a family)
    unchecked: [cuMemcpyDtoH, cuMemcpyHtoD, cuCtxSynchronize_v2],
}

/// A synchronous call returned: noted for a tenant (an unmanaged process has none).
#[inline]
pub(super) fn synchronous(r: CuResult) -> CuResult {
    if let Some(t) = state().tenant() {
        t.note_sync_call();
    }
    r
}

/// `cuCtxSynchronize`: the calling thread's context's work waited for.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    guarded("cuCtxSynchronize", || synchronous(real!(cuCtxSynchronize())))
}

/// `cuCtxSynchronize_v2` (CUDA 13): `ctx`'s work waited for (the current context's
/// when NULL).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CuResult {
    guarded("cuCtxSynchronize_v2", || {
        synchronous(driver!(symbol cuCtxSynchronize_v2(ctx: CUcontext)))
    })
}

/// `cuEventSynchronize`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuEventSynchronize(event: CUevent) -> CuResult {
    guarded("cuEventSynchronize", || synchronous(driver!(api cuEventSynchronize(event: CUevent))))
}

/// `cuMemcpyDtoH_v2`: a copy to the host, synchronous.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> CuResult {
    guarded("cuMemcpyDtoH_v2", || synchronous(real!(cuMemcpyDtoH_v2(dst, src, bytes))))
}

/// `cuMemcpyHtoD_v2`: a copy from the host, synchronous.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> CuResult {
    guarded("cuMemcpyHtoD_v2", || synchronous(real!(cuMemcpyHtoD_v2(dst, src, bytes))))
}

/// `cuMemcpyDtoH`, the legacy ABI's (a 32-bit device pointer and size).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemcpyDtoH(dst: *mut c_void, src: u32, bytes: u32) -> CuResult {
    guarded("cuMemcpyDtoH", || {
        synchronous(driver!(symbol cuMemcpyDtoH(dst: *mut c_void, src: u32, bytes: u32)))
    })
}

/// `cuMemcpyHtoD`, the legacy ABI's (a 32-bit device pointer and size).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemcpyHtoD(dst: u32, src: *const c_void, bytes: u32) -> CuResult {
    guarded("cuMemcpyHtoD", || {
        synchronous(driver!(symbol cuMemcpyHtoD(dst: u32, src: *const c_void, bytes: u32)))
    })
}

/// `cuMemcpyDtoH_v2_ptds`: [`cuMemcpyDtoH_v2`] on the per-thread default stream.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemcpyDtoH_v2_ptds(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CuResult {
    guarded("cuMemcpyDtoH_v2_ptds", || {
        synchronous(
            driver!(symbol cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, bytes: usize)),
        )
    })
}

/// `cuMemcpyHtoD_v2_ptds`: [`cuMemcpyHtoD_v2`] on the per-thread default stream.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemcpyHtoD_v2_ptds(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CuResult {
    guarded("cuMemcpyHtoD_v2_ptds", || {
        synchronous(
            driver!(symbol cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, bytes: usize)),
        )
    })
}
