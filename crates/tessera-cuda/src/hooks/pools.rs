//! Memory pools: which device each is on, as its creation or look-up named it, so that
//! an allocation from it (`cuMemAllocFromPoolAsync`, in [`super::memory`]) is reserved
//! on the pool's device, which need not be the current context's. CUDA 12 looks pools
//! up by device (`cuDeviceGetDefaultMemPool`, `cuDeviceGetMemPool`); CUDA 13 adds look-ups
//! by location (`cuMemGetDefaultMemPool`, `cuMemGetMemPool`), which the 12.9 bindings
//! lack, so they are called by symbol. `cuMemSetMemPool` passes through: it allocates
//! nothing, and the pool it sets was noted when it was created or looked up.
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::{guarded, variant};
use std::ffi::c_int;
use std::sync::OnceLock;
use tessera_driver::sys::{
    CUdevice, CUmemAllocationType, CUmemLocation, CUmemLocationType, CUmemPoolProps, CUmemoryPool,
};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [cuMemPoolCreate, cuMemPoolDestroy, cuDeviceGetDefaultMemPool, cuDeviceGetMemPool],
    variants: [],
    unchecked: [cuMemGetDefaultMemPool, cuMemGetMemPool],
}

/// Memory pools' devices (the driver's ordinals), as their creation or look-up named
/// them: an allocation from a pool is reserved on the pool's device, which need not be
/// the current context's.
fn pools() -> &'static std::sync::Mutex<std::collections::HashMap<usize, u32>> {
    static POOLS: OnceLock<std::sync::Mutex<std::collections::HashMap<usize, u32>>> =
        OnceLock::new();
    POOLS.get_or_init(Default::default)
}

/// The device of `pool`, when the interposer saw where it is.
pub(super) fn pool_device(pool: CUmemoryPool) -> Option<u32> {
    pools().lock().ok()?.get(&(pool as usize)).copied()
}

fn note_pool(pool: *mut CUmemoryPool, dev: c_int) {
    if let (false, Ok(dev), Ok(mut pools)) = (pool.is_null(), u32::try_from(dev), pools().lock()) {
        // SAFETY: checked non-null; the driver just wrote the pool there.
        pools.insert(unsafe { *pool } as usize, dev);
    }
}

/// `cuMemPoolCreate`: notes the pool's device (its location).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> CuResult {
    guarded("cuMemPoolCreate", || {
        let r = real!(cuMemPoolCreate(pool, props));
        if r == status::SUCCESS && !props.is_null() {
            // SAFETY: non-null, the caller's CUmemPoolProps; read as plain integers.
            let (kind, id) = unsafe {
                let location = std::ptr::addr_of!((*props).location);
                (
                    std::ptr::addr_of!((*location).type_).cast::<u32>().read_unaligned(),
                    std::ptr::addr_of!((*location).id).read_unaligned(),
                )
            };
            if kind == CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32 {
                note_pool(pool, id);
            }
        }
        r
    })
}

/// `cuMemPoolDestroy`: forgets the pool.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CuResult {
    guarded("cuMemPoolDestroy", || {
        let r = real!(cuMemPoolDestroy(pool));
        if r == status::SUCCESS
            && let Ok(mut pools) = pools().lock()
        {
            pools.remove(&(pool as usize));
        }
        r
    })
}

/// A device's pool look-up (its default pool, or its current one): notes the pool's
/// device.
macro_rules! device_pool_lookup {
    ($name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: notes the pool's device.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(pool: *mut CUmemoryPool, dev: CUdevice) -> CuResult {
            guarded(stringify!($name), || {
                let r = real!($name(pool, dev));
                if r == status::SUCCESS {
                    note_pool(pool, dev);
                }
                r
            })
        }
    };
}
device_pool_lookup!(cuDeviceGetDefaultMemPool);
device_pool_lookup!(cuDeviceGetMemPool);

/// A location's pool look-up (CUDA 13: its default pool, or its current one): notes
/// the pool's device when the location is a device.
macro_rules! location_pool_lookup {
    ($name:ident) => {
        #[doc = concat!("`", stringify!($name), "` (CUDA 13): notes the pool's device.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(
            pool: *mut CUmemoryPool,
            location: *mut CUmemLocation,
            kind: CUmemAllocationType,
        ) -> CuResult {
            type Real = unsafe extern "C" fn(
                *mut CUmemoryPool,
                *mut CUmemLocation,
                CUmemAllocationType,
            ) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($name), || {
                let r = match variant(&REAL, stringify!($name)) {
                    // SAFETY: the driver's own entry point of that name, whose C signature
                    // is `Real` (CUDA 13's cuda.h); the caller's arguments.
                    Some(f) => unsafe {
                        std::mem::transmute::<usize, Real>(f)(pool, location, kind)
                    },
                    None => status::NOT_FOUND,
                };
                if r == status::SUCCESS && !location.is_null() {
                    // SAFETY: non-null, the caller's CUmemLocation; read as plain integers.
                    let (kind, id) = unsafe {
                        (
                            std::ptr::addr_of!((*location).type_).cast::<u32>().read_unaligned(),
                            std::ptr::addr_of!((*location).id).read_unaligned(),
                        )
                    };
                    if kind == CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32 {
                        note_pool(pool, id);
                    }
                }
                r
            })
        }
    };
}
location_pool_lookup!(cuMemGetDefaultMemPool);
location_pool_lookup!(cuMemGetMemPool);
