//! The process's life as a tenant: `cuInit` (registration, then the check that the
//! driver shows the placed GPUs), the device count and handles (the daemon's
//! placement), and contexts (the primary context's memory reserved; a virtual one when
//! the program may migrate).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::guarded;
use crate::migrate::migration;
use crate::state::{complain, state};
use std::ffi::{c_char, c_int, c_uint};
use tessera_driver::sys::{CUcontext, CUdevice};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [
        cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetByPCIBusId, cuDevicePrimaryCtxRetain,
        cuCtxSetCurrent,
    ],
    variants: [],
    unchecked: [],
}

/// `cuInit`: initialise the real driver, then become a tenant (once).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuInit(flags: c_uint) -> CuResult {
    guarded("cuInit", || {
        /// Whether the driver's devices were checked against the placement (once, on
        /// its first successful initialisation).
        static CHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let st = state();
        let Ok(_once) = st.init_lock.lock() else { return status::UNKNOWN };
        // registered before the driver initialises, which it is then told the GPUs
        // the daemon chose (nothing to do if nvmlInit registered it already)
        if let Err(e) = st.become_tenant() {
            return e;
        }
        let r = real!(cuInit(flags));
        if r != status::SUCCESS || CHECKED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return r;
        }
        match st.tenant() {
            Some(t) => check_devices(t),
            None => status::SUCCESS,
        }
    })
}

/// After the real `cuInit`: the driver must show the program the GPUs it was placed on
/// (it shows others when it was initialised before the interposer could tell it, or a
/// device cgroup hides the placed ones). A mismatch is refused: the program would use
/// GPUs the ledger charges to others.
fn check_devices(t: &crate::tenant::Tenant) -> CuResult {
    let mut n: c_int = 0;
    if real!(cuDeviceGetCount(&mut n)) != status::SUCCESS {
        n = 0;
    }
    let count = usize::try_from(n).unwrap_or(0);
    let fits = if t.nodes.is_empty() {
        t.placed.iter().all(|g| (*g as usize) < count)
    } else {
        count == t.nodes.len()
            && t.uuids.iter().enumerate().all(|(i, want)| {
                let mut u = tessera_driver::sys::CUuuid { bytes: [0; 16] };
                real!(cuDeviceGetUuid_v2(&mut u, i as CUdevice)) == status::SUCCESS
                    && tessera_driver::uuid_text(&u) == *want
            })
    };
    if fits {
        return status::SUCCESS;
    }
    complain(&format!(
        "tesserad placed this program on GPU(s) {:?} but the driver shows it {count} other(s) \
         (CUDA_VISIBLE_DEVICES={:?}): was the driver initialised before the interposer, or \
         does a device cgroup hide them?",
        t.node_list(),
        std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default()
    ));
    status::NO_DEVICE
}

/// `cuDeviceGetCount`: the GPUs the daemon placed the tenant on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    guarded("cuDeviceGetCount", || {
        let r = real!(cuDeviceGetCount(count));
        if r == status::SUCCESS
            && !count.is_null()
            && let Some(t) = state().tenant()
        {
            // SAFETY: checked non-null; the real call just wrote it.
            unsafe { *count = t.placed.len() as c_int };
        }
        r
    })
}

/// `cuDeviceGet`: the program's ordinal i is the i-th GPU it was placed on (the handle
/// is the real device's, so names, UUIDs and PCI ids stay consistent).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CuResult {
    guarded("cuDeviceGet", || match state().tenant() {
        Some(t) => match usize::try_from(ordinal).ok().and_then(|i| t.placed.get(i)) {
            Some(real) => real!(cuDeviceGet(device, *real)),
            None => status::INVALID_DEVICE,
        },
        None => real!(cuDeviceGet(device, ordinal)),
    })
}

/// `cuDevicePrimaryCtxRetain`: a virtual context when the program may migrate.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CuResult {
    guarded("cuDevicePrimaryCtxRetain", || {
        let r = migration().retain(ctx, dev);
        if r == status::SUCCESS
            && let Some(t) = state().tenant()
            && let Ok(gpu) = u32::try_from(dev)
            && let Err(e) = t.reserve_context(gpu)
        {
            return e;
        }
        r
    })
}

/// `cuCtxSetCurrent`: a virtual context stands for its current device's.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CuResult {
    guarded("cuCtxSetCurrent", || migration().set_current(ctx))
}

/// `cuDeviceGetByPCIBusId`: only a GPU the tenant was placed on (the others are hidden
/// from it, as from `cuDeviceGet`).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuDeviceGetByPCIBusId(device: *mut CUdevice, bus_id: *const c_char) -> CuResult {
    guarded("cuDeviceGetByPCIBusId", || {
        let r = real!(cuDeviceGetByPCIBusId(device, bus_id));
        if r == status::SUCCESS
            && !device.is_null()
            && let Some(t) = state().tenant()
        {
            // SAFETY: checked non-null; the real call just wrote it.
            if !t.placed.contains(&unsafe { *device }) {
                return status::INVALID_DEVICE;
            }
        }
        r
    })
}
