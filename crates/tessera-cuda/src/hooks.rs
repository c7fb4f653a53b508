//! The exported entry points: the driver calls tessera governs, `cuGetProcAddress`
//! (which hands out these hooks for the governed names, whatever version or
//! per-thread-stream variant is asked for), and `dlsym` (which does the same for a
//! `dlsym` on the driver's handle). Everything else reaches the real driver untouched:
//! directly for programs linked with it, through the real `dlsym` and
//! `cuGetProcAddress` otherwise.
//!
//! Every hook catches panics (a panic must not unwind into C) and answers
//! `CUDA_ERROR_UNKNOWN` if one happens. The exports are left out of this crate's own
//! unit-test binary, whose look-ups they would otherwise interpose.
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks (see above), so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use crate::migrate::migration;
use crate::state::{Allocation, complain, state};
use std::ffi::c_ulonglong;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use tessera_driver::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_LAUNCH_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS,
    CUarray, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUdriverProcAddressQueryResult,
    CUfunction, CUfunction_attribute, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode,
    CUgraphNodeParams, CUgraphNodeType, CUkernel, CUlaunchConfig, CUlibrary, CUlimit,
    CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemLocationType, CUmemPoolProps,
    CUmemoryPool, CUmipmappedArray, CUmodule, CUmulticastObjectProp, CUstream, CUstreamCaptureMode,
    cuuint64_t,
};
use tessera_driver::{CuResult, DriverApi, status};

/// The hooks as a driver table: each must have exactly the signature of the entry point
/// it stands for, which the compiler checks against the bindings generated from
/// `cuda.h` (`tessera-driver`). Never called.
#[allow(dead_code)]
fn hooks_have_the_drivers_signatures() -> DriverApi {
    DriverApi {
        cuInit: Some(cuInit),
        cuDeviceGetCount: Some(cuDeviceGetCount),
        cuDeviceGet: Some(cuDeviceGet),
        cuMemAlloc_v2: Some(cuMemAlloc_v2),
        cuMemAllocManaged: Some(cuMemAllocManaged),
        cuMemAllocPitch_v2: Some(cuMemAllocPitch_v2),
        cuMemFree_v2: Some(cuMemFree_v2),
        cuMemAllocAsync: Some(cuMemAllocAsync),
        cuMemAllocFromPoolAsync: Some(cuMemAllocFromPoolAsync),
        cuMemPoolCreate: Some(cuMemPoolCreate),
        cuLibraryGetKernel: Some(cuLibraryGetKernel),
        cuCtxSetLimit: Some(cuCtxSetLimit),
        cuMemPoolDestroy: Some(cuMemPoolDestroy),
        cuDeviceGetDefaultMemPool: Some(cuDeviceGetDefaultMemPool),
        cuDeviceGetMemPool: Some(cuDeviceGetMemPool),
        cuMemFreeAsync: Some(cuMemFreeAsync),
        cuMemCreate: Some(cuMemCreate),
        cuMemRelease: Some(cuMemRelease),
        cuArrayCreate_v2: Some(cuArrayCreate_v2),
        cuArray3DCreate_v2: Some(cuArray3DCreate_v2),
        cuArrayDestroy: Some(cuArrayDestroy),
        cuMemGetInfo_v2: Some(cuMemGetInfo_v2),
        cuGetProcAddress_v2: Some(cuGetProcAddress_v2),
        cuLaunchKernel: Some(cuLaunchKernel),
        cuLaunchKernelEx: Some(cuLaunchKernelEx),
        cuLaunchCooperativeKernel: Some(cuLaunchCooperativeKernel),
        cuGraphLaunch: Some(cuGraphLaunch),
        cuDevicePrimaryCtxRetain: Some(cuDevicePrimaryCtxRetain),
        cuCtxSetCurrent: Some(cuCtxSetCurrent),
        cuModuleLoadData: Some(cuModuleLoadData),
        cuModuleGetFunction: Some(cuModuleGetFunction),
        cuFuncGetAttribute: Some(cuFuncGetAttribute),
        cuStreamCreate: Some(cuStreamCreate),
        cuStreamCreateWithPriority: Some(cuStreamCreateWithPriority),
        cuStreamDestroy_v2: Some(cuStreamDestroy_v2),
        cuStreamSynchronize: Some(cuStreamSynchronize),
        cuStreamQuery: Some(cuStreamQuery),
        cuStreamBeginCapture_v2: Some(cuStreamBeginCapture_v2),
        cuStreamBeginCaptureToGraph: Some(cuStreamBeginCaptureToGraph),
        cuStreamEndCapture: Some(cuStreamEndCapture),
        cuLaunch: Some(cuLaunch),
        cuLaunchGrid: Some(cuLaunchGrid),
        cuLaunchGridAsync: Some(cuLaunchGridAsync),
        cuLaunchCooperativeKernelMultiDevice: Some(cuLaunchCooperativeKernelMultiDevice),
        cuMipmappedArrayCreate: Some(cuMipmappedArrayCreate),
        cuMipmappedArrayDestroy: Some(cuMipmappedArrayDestroy),
        cuGraphAddMemAllocNode: Some(cuGraphAddMemAllocNode),
        cuGraphAddNode: Some(cuGraphAddNode),
        cuGraphAddNode_v2: Some(cuGraphAddNode_v2),
        cuDeviceGetByPCIBusId: Some(cuDeviceGetByPCIBusId),
        cuMulticastCreate: Some(cuMulticastCreate),
        cuDeviceTotalMem_v2: Some(cuDeviceTotalMem_v2),
        ..DriverApi::default()
    }
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

/// An allocation through the ledger: reserve, allocate for real, record (or undo).
fn governed_alloc(
    dptr: *mut CUdeviceptr,
    bytes: u64,
    alloc: impl FnOnce() -> CuResult,
) -> CuResult {
    governed_alloc_on(None, dptr, bytes, alloc)
}

/// [`governed_alloc`] on `gpu` (the current context's device when `None`).
fn governed_alloc_on(
    gpu: Option<u32>,
    dptr: *mut CUdeviceptr,
    bytes: u64,
    alloc: impl FnOnce() -> CuResult,
) -> CuResult {
    if dptr.is_null() {
        return if state().tenant().is_some() { status::INVALID_VALUE } else { alloc() };
    }
    governed(gpu, bytes, alloc, || {
        // SAFETY: checked non-null above; the driver wrote it on success.
        Allocation::Pointer(unsafe { *dptr })
    })
}

/// Reserve `bytes` on `gpu` (the current context's device when `None`), run the real
/// `alloc`, and record what `made` names on success (or undo the reservation).
fn governed(
    gpu: Option<u32>,
    bytes: u64,
    alloc: impl FnOnce() -> CuResult,
    made: impl FnOnce() -> Allocation,
) -> CuResult {
    let st = state();
    let Some(tenant) = st.tenant() else { return alloc() };
    let gpu = match gpu.map_or_else(current_gpu, Ok) {
        Ok(g) => g,
        Err(e) => return e,
    };
    if let Err(e) = tenant.reserve_context(gpu).and_then(|()| tenant.reserve(gpu, bytes)) {
        st.log(format_args!("alloc {bytes} on {gpu} -> refused {e}"));
        return e;
    }
    let r = alloc();
    if r == status::SUCCESS {
        tenant.record(made(), gpu, bytes);
    } else {
        tenant.unreserve(gpu, bytes);
    }
    st.log(format_args!("alloc {bytes} on {gpu} -> {r}"));
    r
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
fn check_devices(t: &crate::state::Tenant) -> CuResult {
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

/// `cuMemAlloc_v2`; managed memory instead when the program may migrate (its address
/// then stays valid on any GPU).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CuResult {
    guarded("cuMemAlloc", || {
        let m = migration();
        if !m.enabled || dptr.is_null() {
            return governed_alloc(dptr, bytes as u64, || real!(cuMemAlloc_v2(dptr, bytes)));
        }
        // CU_MEM_ATTACH_GLOBAL: reachable from any stream on any device
        let r = governed_alloc(dptr, bytes as u64, || real!(cuMemAllocManaged(dptr, bytes, 1)));
        if r == status::SUCCESS {
            // SAFETY: checked non-null; the driver wrote it.
            m.note_managed(unsafe { *dptr }, bytes);
        }
        r
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

/// `cuModuleLoadData`: a PTX module is kept, for loading on another GPU after a move.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult {
    guarded("cuModuleLoadData", || migration().load(module, image))
}

/// `cuModuleGetFunction`: a virtual function for a virtual module.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CuResult {
    guarded("cuModuleGetFunction", || migration().function(function, module, name))
}

/// `cuFuncGetAttribute`: of the current device's function for a virtual one.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuFuncGetAttribute(
    value: *mut c_int,
    attribute: CUfunction_attribute,
    f: CUfunction,
) -> CuResult {
    guarded("cuFuncGetAttribute", || match migration().real_function(f) {
        Ok(f) => real!(cuFuncGetAttribute(value, attribute, f)),
        Err(e) => e,
    })
}

/// `cuMemAllocManaged`: reserved on the current device (where it is first placed).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    guarded("cuMemAllocManaged", || {
        governed_alloc(dptr, bytes as u64, || real!(cuMemAllocManaged(dptr, bytes, flags)))
    })
}

/// `cuMemAllocPitch_v2`: reserved as width rounded up to a 512-byte pitch (the
/// driver's pitch is known only after the call, and never exceeds that for the
/// alignments CUDA uses) times height.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> CuResult {
    guarded("cuMemAllocPitch", || {
        let bytes = (width.div_ceil(512) * 512) as u64 * height as u64;
        governed_alloc(dptr, bytes, || {
            real!(cuMemAllocPitch_v2(dptr, pitch, width, height, element))
        })
    })
}

/// `cuMemFree_v2`: free for real, then return the reservation.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CuResult {
    guarded("cuMemFree", || {
        let r = real!(cuMemFree_v2(dptr));
        if r == status::SUCCESS {
            migration().note_freed(dptr);
            if let Some(t) = state().tenant() {
                t.release(Allocation::Pointer(dptr));
            }
        }
        r
    })
}

/// A stream-ordered allocation entry point and its per-thread-stream variant. The
/// reservation is made when the call is made (the memory may come from the stream's
/// pool later, but never more of it).
macro_rules! stream_alloc {
    ($plain:ident, $ptsz:ident, ( $($arg:ident : $ty:ty),* ), $dptr:ident, $bytes:ident, $gpu:expr) => {
        #[doc = concat!("`", stringify!($plain), "`, through the ledger.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $plain($($arg: $ty),*) -> CuResult {
            guarded(stringify!($plain), || {
                governed_alloc_on($gpu, $dptr, $bytes as u64, || real!($plain($($arg),*)))
            })
        }

        #[doc = concat!("`", stringify!($ptsz), "`, through the ledger.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $ptsz($($arg: $ty),*) -> CuResult {
            type Real = unsafe extern "C" fn($($ty),*) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($ptsz), || {
                let real = variant(&REAL, stringify!($ptsz));
                governed_alloc_on($gpu, $dptr, $bytes as u64, || match real {
                    // SAFETY: the driver's own variant, with the plain entry point's C
                    // signature; the caller's arguments.
                    Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)($($arg),*) },
                    None => status::NOT_FOUND,
                })
            })
        }
    };
}

/// A stream-ordered free and its per-thread-stream variant: the reservation returns
/// when the call is made (the pool may keep the memory; see docs/users.md).
macro_rules! stream_free {
    ($plain:ident, $ptsz:ident) => {
        #[doc = concat!("`", stringify!($plain), "`: returns the reservation.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $plain(dptr: CUdeviceptr, stream: CUstream) -> CuResult {
            guarded(stringify!($plain), || {
                let r = real!($plain(dptr, stream));
                if r == status::SUCCESS
                    && let Some(t) = state().tenant()
                {
                    t.release(Allocation::Pointer(dptr));
                }
                r
            })
        }

        #[doc = concat!("`", stringify!($ptsz), "`: returns the reservation.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $ptsz(dptr: CUdeviceptr, stream: CUstream) -> CuResult {
            type Real = unsafe extern "C" fn(CUdeviceptr, CUstream) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($ptsz), || {
                let r = match variant(&REAL, stringify!($ptsz)) {
                    // SAFETY: as for the allocation variants.
                    Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)(dptr, stream) },
                    None => status::NOT_FOUND,
                };
                if r == status::SUCCESS
                    && let Some(t) = state().tenant()
                {
                    t.release(Allocation::Pointer(dptr));
                }
                r
            })
        }
    };
}

/// The real driver's symbol `name` (a variant outside [`DriverApi`]), cached in `slot`.
fn variant(slot: &OnceLock<Option<usize>>, name: &str) -> Option<usize> {
    *slot.get_or_init(|| {
        let name = std::ffi::CString::new(name).ok()?;
        let p = state().real.as_ref().ok()?.symbol(&name);
        (!p.is_null()).then_some(p as usize)
    })
}

stream_alloc!(cuMemAllocAsync, cuMemAllocAsync_ptsz,
    (dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream), dptr, bytes, None);
stream_alloc!(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,
    (dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream), dptr, bytes,
    pool_device(pool));

/// Memory pools' devices (the driver's ordinals), as their creation or look-up named
/// them: an allocation from a pool is reserved on the pool's device, which need not be
/// the current context's.
fn pools() -> &'static std::sync::Mutex<std::collections::HashMap<usize, u32>> {
    static POOLS: OnceLock<std::sync::Mutex<std::collections::HashMap<usize, u32>>> =
        OnceLock::new();
    POOLS.get_or_init(Default::default)
}

/// The device of `pool`, when the interposer saw where it is.
fn pool_device(pool: CUmemoryPool) -> Option<u32> {
    pools().lock().ok()?.get(&(pool as usize)).copied()
}

fn note_pool(pool: *mut CUmemoryPool, dev: c_int) {
    if let (false, Ok(dev), Ok(mut pools)) = (pool.is_null(), u32::try_from(dev), pools().lock()) {
        // SAFETY: checked non-null; the driver just wrote the pool there.
        pools.insert(unsafe { *pool } as usize, dev);
    }
}

/// The CUDA 12 kernels (`CUkernel`) the program got from `cuLibraryGetKernel`: a
/// kernel handle may be launched where a function goes, and stands for the kernel's
/// function in the current context.
fn kernels() -> &'static std::sync::Mutex<std::collections::HashSet<u64>> {
    static KERNELS: OnceLock<std::sync::Mutex<std::collections::HashSet<u64>>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

/// If `handle` is a `CUkernel`, the device it runs on when launched now (the current
/// context's).
pub(crate) fn kernel_device(handle: u64) -> Option<i32> {
    if !kernels().lock().ok()?.contains(&handle) {
        return None;
    }
    current_gpu().ok().and_then(|g| i32::try_from(g).ok())
}

/// `cuLibraryGetKernel`: notes the kernel handle (for the launch gate's facts).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuLibraryGetKernel(
    kernel: *mut CUkernel,
    library: CUlibrary,
    name: *const c_char,
) -> CuResult {
    guarded("cuLibraryGetKernel", || {
        let r = real!(cuLibraryGetKernel(kernel, library, name));
        if r == status::SUCCESS
            && !kernel.is_null()
            && let Ok(mut known) = kernels().lock()
        {
            // SAFETY: checked non-null; the driver just wrote it.
            known.insert(unsafe { *kernel } as u64);
        }
        r
    })
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
stream_free!(cuMemFreeAsync, cuMemFreeAsync_ptsz);

/// `cuMemCreate`: a physical allocation, reserved on the device its properties name
/// (the current context's device otherwise).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CuResult {
    guarded("cuMemCreate", || {
        if handle.is_null() {
            return real!(cuMemCreate(handle, size, prop, flags));
        }
        // read as plain integers: the program's bytes need not be valid enum values
        let gpu = (!prop.is_null())
            .then(|| {
                // SAFETY: non-null, pointing to the caller's CUmemAllocationProp.
                unsafe {
                    let location = std::ptr::addr_of!((*prop).location);
                    let kind = std::ptr::addr_of!((*location).type_).cast::<u32>().read_unaligned();
                    let id = std::ptr::addr_of!((*location).id).read_unaligned();
                    (kind == CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32)
                        .then(|| u32::try_from(id).ok())
                        .flatten()
                }
            })
            .flatten();
        governed(
            gpu,
            size as u64,
            || real!(cuMemCreate(handle, size, prop, flags)),
            || {
                // SAFETY: checked non-null; the driver wrote it on success.
                Allocation::Handle(unsafe { *handle })
            },
        )
    })
}

/// `cuMemRelease`: returns the reservation.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CuResult {
    guarded("cuMemRelease", || {
        let r = real!(cuMemRelease(handle));
        if r == status::SUCCESS
            && let Some(t) = state().tenant()
        {
            t.release(Allocation::Handle(handle));
        }
        r
    })
}

/// Bytes per element of an array format (`CUarray_format`, read raw); unknown and
/// block-compressed formats count as 16, the largest element a format has.
fn element_bytes(format: u32) -> u64 {
    match format {
        0x01 | 0x08 => 1,        // (un)signed int8
        0x02 | 0x09 | 0x10 => 2, // (un)signed int16, half
        0x03 | 0x0a | 0x20 => 4, // (un)signed int32, float
        _ => 16,
    }
}

/// `cuArrayCreate_v2`: width x height x element x channels, reserved on the current
/// context's device.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuArrayCreate_v2(
    array: *mut CUarray,
    desc: *const CUDA_ARRAY_DESCRIPTOR,
) -> CuResult {
    guarded("cuArrayCreate", || {
        if array.is_null() || desc.is_null() {
            return real!(cuArrayCreate_v2(array, desc));
        }
        // SAFETY: non-null, pointing to the caller's descriptor; fields read as integers.
        let bytes = unsafe {
            let w = std::ptr::addr_of!((*desc).Width).read_unaligned() as u64;
            let h = std::ptr::addr_of!((*desc).Height).read_unaligned().max(1) as u64;
            let f = std::ptr::addr_of!((*desc).Format).cast::<u32>().read_unaligned();
            let c = u64::from(std::ptr::addr_of!((*desc).NumChannels).read_unaligned());
            w.saturating_mul(h).saturating_mul(element_bytes(f)).saturating_mul(c)
        };
        governed(
            None,
            bytes,
            || real!(cuArrayCreate_v2(array, desc)),
            || {
                // SAFETY: checked non-null; the driver wrote it on success.
                Allocation::Array(unsafe { *array } as u64)
            },
        )
    })
}

/// `cuArray3DCreate_v2`: likewise, times depth.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuArray3DCreate_v2(
    array: *mut CUarray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
) -> CuResult {
    guarded("cuArray3DCreate", || {
        if array.is_null() || desc.is_null() {
            return real!(cuArray3DCreate_v2(array, desc));
        }
        // SAFETY: as for cuArrayCreate_v2.
        let bytes = unsafe {
            let w = std::ptr::addr_of!((*desc).Width).read_unaligned() as u64;
            let h = std::ptr::addr_of!((*desc).Height).read_unaligned().max(1) as u64;
            let d = std::ptr::addr_of!((*desc).Depth).read_unaligned().max(1) as u64;
            let f = std::ptr::addr_of!((*desc).Format).cast::<u32>().read_unaligned();
            let c = u64::from(std::ptr::addr_of!((*desc).NumChannels).read_unaligned());
            w.saturating_mul(h).saturating_mul(d).saturating_mul(element_bytes(f)).saturating_mul(c)
        };
        governed(
            None,
            bytes,
            || real!(cuArray3DCreate_v2(array, desc)),
            || {
                // SAFETY: checked non-null; the driver wrote it on success.
                Allocation::Array(unsafe { *array } as u64)
            },
        )
    })
}

/// `cuArrayDestroy`: returns the reservation.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuArrayDestroy(array: CUarray) -> CuResult {
    guarded("cuArrayDestroy", || {
        let r = real!(cuArrayDestroy(array));
        if r == status::SUCCESS
            && let Some(t) = state().tenant()
        {
            t.release(Allocation::Array(array as u64));
        }
        r
    })
}

/// `cuMemGetInfo_v2`: the tenant's own share — its limit and use, or the GPU's
/// capacity and what the ledger has not granted — never more than the real free.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    guarded("cuMemGetInfo", || {
        let r = real!(cuMemGetInfo_v2(free, total));
        if r != status::SUCCESS || free.is_null() || total.is_null() {
            return r;
        }
        let Some(t) = state().tenant() else { return r };
        let Ok(gpu) = current_gpu() else { return r };
        if let Some((f, tot)) = t.memory_info(gpu) {
            // SAFETY: both checked non-null; the real call just wrote them.
            unsafe {
                *free = (*free).min(f as usize);
                *total = (*total).min(tot as usize);
            }
        }
        r
    })
}

/// `cuMipmappedArrayCreate`: every level (width, height and — unless layered — depth
/// halved per level, at least 1) times element size and channels, reserved on the
/// current context's device.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMipmappedArrayCreate(
    array: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> CuResult {
    guarded("cuMipmappedArrayCreate", || {
        if array.is_null() || desc.is_null() {
            return real!(cuMipmappedArrayCreate(array, desc, levels));
        }
        // SAFETY: non-null, the caller's descriptor; fields read as integers.
        let (w, h, d, f, c, flags) = unsafe {
            (
                std::ptr::addr_of!((*desc).Width).read_unaligned() as u64,
                std::ptr::addr_of!((*desc).Height).read_unaligned() as u64,
                std::ptr::addr_of!((*desc).Depth).read_unaligned() as u64,
                std::ptr::addr_of!((*desc).Format).cast::<u32>().read_unaligned(),
                u64::from(std::ptr::addr_of!((*desc).NumChannels).read_unaligned()),
                std::ptr::addr_of!((*desc).Flags).read_unaligned(),
            )
        };
        let layered = flags & 0x01 != 0; // CUDA_ARRAY3D_LAYERED: depth counts layers
        let bytes = (0..levels.clamp(1, 64)).fold(0u64, |sum, l| {
            let level = (w >> l)
                .max(1)
                .saturating_mul((h >> l).max(1))
                .saturating_mul(if layered { d.max(1) } else { (d >> l).max(1) });
            sum.saturating_add(level.saturating_mul(element_bytes(f)).saturating_mul(c))
        });
        governed(
            None,
            bytes,
            || real!(cuMipmappedArrayCreate(array, desc, levels)),
            || {
                // SAFETY: checked non-null; the driver wrote it on success.
                Allocation::Mipmapped(unsafe { *array } as u64)
            },
        )
    })
}

/// `cuMipmappedArrayDestroy`: returns the reservation.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMipmappedArrayDestroy(array: CUmipmappedArray) -> CuResult {
    guarded("cuMipmappedArrayDestroy", || {
        let r = real!(cuMipmappedArrayDestroy(array));
        if r == status::SUCCESS
            && let Some(t) = state().tenant()
        {
            t.release(Allocation::Mipmapped(array as u64));
        }
        r
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

/// `cuGraphAddMemAllocNode`: refused for tenants — a graph's memory node allocates when
/// the graph runs, from a pool the ledger cannot see.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuGraphAddMemAllocNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    count: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CuResult {
    guarded("cuGraphAddMemAllocNode", || match state().tenant() {
        Some(_) => refuse_ungoverned(
            "cuGraphAddMemAllocNode",
            "graph memory nodes allocate outside tessera's memory ledger (allocate before capture instead)",
        ),
        None => real!(cuGraphAddMemAllocNode(node, graph, dependencies, count, params)),
    })
}

/// The refusal of a memory allocation node for a tenant (`params` read as an integer
/// type: the program's bytes need not be a valid enum value); `None` for anything else.
fn refused_node(params: *const CUgraphNodeParams) -> Option<CuResult> {
    // SAFETY: non-null checked; the node type is the struct's first field.
    let mem_alloc = !params.is_null()
        && unsafe { std::ptr::addr_of!((*params).type_).cast::<u32>().read_unaligned() }
            == CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC as u32;
    (mem_alloc && state().tenant().is_some()).then(|| {
        refuse_ungoverned(
            "cuGraphAddNode (memory allocation node)",
            "graph memory nodes allocate outside tessera's memory ledger",
        )
    })
}

/// `cuGraphAddNode`: memory allocation nodes refused for tenants, as
/// `cuGraphAddMemAllocNode`; every other node passes.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuGraphAddNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    count: usize,
    params: *mut CUgraphNodeParams,
) -> CuResult {
    guarded("cuGraphAddNode", || {
        if let Some(refused) = refused_node(params) {
            return refused;
        }
        real!(cuGraphAddNode(node, graph, dependencies, count, params))
    })
}

/// `cuGraphAddNode_v2`: as `cuGraphAddNode`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuGraphAddNode_v2(
    node: *mut CUgraphNode,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    count: usize,
    params: *mut CUgraphNodeParams,
) -> CuResult {
    guarded("cuGraphAddNode_v2", || {
        if let Some(refused) = refused_node(params) {
            return refused;
        }
        real!(cuGraphAddNode_v2(node, graph, dependencies, edges, count, params))
    })
}

/// `cuMulticastCreate`: refused for tenants — a multicast object's memory is not
/// counted by the ledger.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMulticastCreate(
    handle: *mut CUmemGenericAllocationHandle,
    prop: *const CUmulticastObjectProp,
) -> CuResult {
    guarded("cuMulticastCreate", || match state().tenant() {
        Some(_) => refuse_ungoverned(
            "cuMulticastCreate",
            "multicast objects take memory outside tessera's memory ledger",
        ),
        None => real!(cuMulticastCreate(handle, prop)),
    })
}

/// Legacy `cuMemGetInfo` (32-bit sizes): the tenant's share, as `cuMemGetInfo_v2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CuResult {
    guarded("cuMemGetInfo (legacy)", || {
        let (mut f, mut t) = (0usize, 0usize);
        let r = cuMemGetInfo_v2(&mut f, &mut t);
        if r == status::SUCCESS {
            if free.is_null() || total.is_null() {
                return status::INVALID_VALUE;
            }
            // SAFETY: both checked non-null; the caller's output words.
            unsafe {
                *free = u32::try_from(f).unwrap_or(u32::MAX);
                *total = u32::try_from(t).unwrap_or(u32::MAX);
            }
        }
        r
    })
}

/// The legacy (CUDA 3.1, 32-bit) ABI's device pointer, `CUdeviceptr_v1`.
type DevicePtrV1 = c_uint;

/// Legacy `cuMemAlloc` (32-bit pointer and size; reached by `dlsym("cuMemAlloc")` or
/// `cuGetProcAddress` with a version below 3020): through the ledger like
/// `cuMemAlloc_v2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemAlloc(dptr: *mut DevicePtrV1, bytes: c_uint) -> CuResult {
    type Real = unsafe extern "C" fn(*mut DevicePtrV1, c_uint) -> CuResult;
    static REAL: OnceLock<Option<usize>> = OnceLock::new();
    guarded("cuMemAlloc (legacy)", || {
        let real = variant(&REAL, "cuMemAlloc");
        let call = || match real {
            // SAFETY: the driver's own legacy entry point, whose C signature is Real.
            Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)(dptr, bytes) },
            None => status::NOT_FOUND,
        };
        if dptr.is_null() {
            return if state().tenant().is_some() { status::INVALID_VALUE } else { call() };
        }
        governed(None, u64::from(bytes), call, || {
            // SAFETY: checked non-null; the driver wrote it on success.
            Allocation::Pointer(u64::from(unsafe { *dptr }))
        })
    })
}

/// Legacy `cuMemFree`: returns the reservation.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuMemFree(dptr: DevicePtrV1) -> CuResult {
    type Real = unsafe extern "C" fn(DevicePtrV1) -> CuResult;
    static REAL: OnceLock<Option<usize>> = OnceLock::new();
    guarded("cuMemFree (legacy)", || {
        let r = match variant(&REAL, "cuMemFree") {
            // SAFETY: the driver's own legacy entry point, whose C signature is Real.
            Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)(dptr) },
            None => status::NOT_FOUND,
        };
        if r == status::SUCCESS
            && let Some(t) = state().tenant()
        {
            t.release(Allocation::Pointer(u64::from(dptr)));
        }
        r
    })
}

/// A legacy allocation entry point the interposer does not govern: refused for tenants
/// (the 32-bit ABI of CUDA 3.1; no program built since uses it), passed through
/// otherwise.
macro_rules! refused_legacy_alloc {
    ($name:ident, ( $($arg:ident : $ty:ty),* )) => {
        #[doc = concat!("Legacy `", stringify!($name), "`: refused for tenants.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name($($arg: $ty),*) -> CuResult {
            type Real = unsafe extern "C" fn($($ty),*) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($name), || {
                if state().tenant().is_some() {
                    return refuse_ungoverned(
                        concat!(stringify!($name), " (the 32-bit legacy ABI)"),
                        "use the current entry point (a program built against cuda.h since CUDA 3.2 does)",
                    );
                }
                match variant(&REAL, stringify!($name)) {
                    // SAFETY: the driver's own legacy entry point, with its C signature.
                    Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)($($arg),*) },
                    None => status::NOT_FOUND,
                }
            })
        }
    };
}

refused_legacy_alloc!(cuMemAllocPitch, (dptr: *mut DevicePtrV1, pitch: *mut c_uint, width: c_uint, height: c_uint, element: c_uint));
refused_legacy_alloc!(cuArrayCreate, (array: *mut CUarray, desc: *const c_void));
refused_legacy_alloc!(cuArray3DCreate, (array: *mut CUarray, desc: *const c_void));

/// Device memory a context limit of `value` takes on `gpu`: the printf FIFO and the
/// malloc heap their size; the stack its size for every thread the GPU can hold
/// resident (as the driver allocates it). `None` for limits that take no memory.
fn limit_bytes(limit: CUlimit, value: usize, gpu: u32) -> Option<u64> {
    match limit {
        CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE | CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE => {
            Some(value as u64)
        }
        CUlimit::CU_LIMIT_STACK_SIZE => {
            let attribute = |a: CUdevice_attribute| {
                let mut v: c_int = 0;
                (real!(cuDeviceGetAttribute(&mut v, a, gpu as CUdevice)) == status::SUCCESS)
                    .then_some(u64::try_from(v).unwrap_or(0))
            };
            // without the driver's answer, the largest GPU's (132 SMs of 2,048 threads)
            let sms = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .unwrap_or(132);
            let threads =
                attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
                    .unwrap_or(2048);
            Some((value as u64).saturating_mul(sms).saturating_mul(threads))
        }
        _ => None,
    }
}

/// Per (GPU, limit): the memory it took when the interposer first saw it (inside the
/// context's `context_mib`), and what it reserved beyond that since.
type LimitTable = std::sync::Mutex<std::collections::HashMap<(u32, u32), (u64, u64)>>;

fn limits_reserved() -> &'static LimitTable {
    static LIMITS: OnceLock<LimitTable> = OnceLock::new();
    LIMITS.get_or_init(Default::default)
}

/// `cuCtxSetLimit`: the stack, printf-FIFO and malloc-heap limits are device memory
/// the driver allocates for the context, so growing one beyond its default is
/// reserved through the daemon like an allocation (refused with
/// CUDA_ERROR_OUT_OF_MEMORY), and shrinking it returns what was reserved. Raising the
/// device runtime's limits (sync depth, pending launches) is refused: the driver sizes
/// their memory in ways it does not tell.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CuResult {
    guarded("cuCtxSetLimit", || {
        let Some(t) = state().tenant() else { return real!(cuCtxSetLimit(limit, value)) };
        let gpu = match current_gpu() {
            Ok(g) => g,
            Err(e) => return e,
        };
        let mut old: usize = 0;
        let got = real!(cuCtxGetLimit(&mut old, limit));
        if matches!(
            limit,
            CUlimit::CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH
                | CUlimit::CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT
        ) && (got != status::SUCCESS || value > old)
        {
            complain(&format!(
                "cuCtxSetLimit({limit:?}, {value}) is refused: the device runtime's memory for it \
                 cannot be counted in the node's ledger (it stays at {old})"
            ));
            return status::NOT_SUPPORTED;
        }
        let Some(new_bytes) = limit_bytes(limit, value, gpu) else {
            return real!(cuCtxSetLimit(limit, value));
        };
        if got != status::SUCCESS {
            return got;
        }
        let Ok(mut table) = limits_reserved().lock() else { return status::UNKNOWN };
        let key = (gpu, limit as u32);
        let baseline = limit_bytes(limit, old, gpu).unwrap_or(0);
        let (baseline, reserved) = *table.entry(key).or_insert((baseline, 0));
        let want = new_bytes.saturating_sub(baseline);
        if want > reserved {
            if let Err(e) = t.reserve_context(gpu).and_then(|()| t.reserve(gpu, want - reserved)) {
                state().log(format_args!("limit {limit:?} {value} on {gpu} -> refused {e}"));
                return e;
            }
            let r = real!(cuCtxSetLimit(limit, value));
            if r == status::SUCCESS {
                table.insert(key, (baseline, want));
            } else {
                t.unreserve(gpu, want - reserved);
            }
            return r;
        }
        let r = real!(cuCtxSetLimit(limit, value));
        if r == status::SUCCESS && want < reserved {
            t.unreserve(gpu, reserved - want);
            table.insert(key, (baseline, want));
        }
        r
    })
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

/// `cuDeviceTotalMem_v2`: the tenant's limit, when it has one below the GPU's memory
/// (the same total `cuMemGetInfo` reports).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CuResult {
    guarded("cuDeviceTotalMem", || {
        let r = real!(cuDeviceTotalMem_v2(bytes, device));
        if r == status::SUCCESS
            && !bytes.is_null()
            && let Some(limit) = state().tenant().and_then(|t| t.limit)
        {
            // SAFETY: checked non-null; the real call just wrote it.
            unsafe { *bytes = (*bytes).min(usize::try_from(limit).unwrap_or(usize::MAX)) };
        }
        r
    })
}

/// Legacy `cuDeviceTotalMem` (a 32-bit size): what `cuDeviceTotalMem_v2` reports,
/// narrowed.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, device: CUdevice) -> CuResult {
    guarded("cuDeviceTotalMem (legacy)", || {
        if bytes.is_null() {
            return status::INVALID_VALUE;
        }
        let mut total = 0usize;
        let r = cuDeviceTotalMem_v2(&mut total, device);
        if r == status::SUCCESS {
            // SAFETY: checked non-null; the caller's output word.
            unsafe { *bytes = u32::try_from(total).unwrap_or(u32::MAX) };
        }
        r
    })
}

/// A launch's shape: (function, grid blocks, threads per block, dynamic shared bytes).
type Shape = (u64, u64, u32, u32);

/// Note the launch's shape and hold the launch gate (a tenant's launches wait for the
/// slice the policy grants).
#[inline]
fn gate(shape: Option<Shape>) -> Result<(), CuResult> {
    match state().tenant() {
        Some(t) => {
            if let Some((f, grid, threads, shared)) = shape {
                t.note_launch(f, grid, threads, shared);
            }
            t.acquire()
        }
        None => Ok(()),
    }
}

/// Account a launch that went through (see `Tenant::after_launch`); pass its result on.
#[inline]
fn accounted(r: CuResult) -> CuResult {
    if r == status::SUCCESS
        && let Some(t) = state().tenant()
    {
        t.after_launch();
    }
    r
}

/// The shape of a launch given by its dimensions.
#[allow(clippy::too_many_arguments)]
#[inline]
fn dims(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
) -> Option<Shape> {
    let grid = u64::from(gx) * u64::from(gy) * u64::from(gz);
    Some((f as u64, grid, bx.saturating_mul(by).saturating_mul(bz), shared))
}

/// The shape of a `cuLaunchKernelEx` launch (its configuration read as integers).
#[inline]
fn config_shape(f: CUfunction, config: *const CUlaunchConfig) -> Option<Shape> {
    if config.is_null() {
        return None;
    }
    // SAFETY: non-null, the caller's launch configuration; plain integer fields.
    let c = unsafe { &*config };
    dims(
        f,
        c.gridDimX,
        c.gridDimY,
        c.gridDimZ,
        c.blockDimX,
        c.blockDimY,
        c.blockDimZ,
        c.sharedMemBytes,
    )
}

/// A copy of a launch configuration whose stream stands for the current device's (see
/// `migrate`), or `None` for a null configuration.
fn config_on_current_device(
    config: *const CUlaunchConfig,
) -> Result<Option<CUlaunchConfig>, CuResult> {
    if config.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, the caller's launch configuration, copied (plain fields and a
    // pointer to its attributes, left as they are)
    let mut copy = unsafe { *config };
    copy.hStream = migration().real_stream(copy.hStream)?;
    Ok(Some(copy))
}

/// What every gated launch does before calling the driver: a due migration (between
/// launches) and the program's function made the current device's; the gate held; a
/// slice granted on another GPU followed; the stream or configuration translated.
/// Rebinds the named arguments; returns the error from the hook's closure.
macro_rules! launch_prelude {
    ($recorded:ident; $shape:expr, $($f:ident)?, $($s:ident)?, $($c:ident)?) => {
        // a launch into a capturing stream is recorded into a graph, not run: no slice
        // is needed for it, and it must not be measured (see `capture`)
        let $recorded = false $( || capture::recording($s) )? $( || capture::config_recording($c) )?;
        $( let program_f = $f;
        let $f = match migration().before_launch($f) {
            Ok(real) => real,
            Err(e) => return e,
        }; )?
        if !$recorded && let Err(e) = gate($shape) {
            return e;
        }
        $( let $f = if $recorded {
            $f
        } else {
            match migration().follow_grant(program_f, $f) {
                Ok(real) => real,
                Err(e) => return e,
            }
        }; )?
        $( let $s = match migration().real_stream($s) {
            Ok(real) => real,
            Err(e) => return e,
        }; )?
        $( let translated = match config_on_current_device($c) {
            Ok(copy) => copy,
            Err(e) => return e,
        };
        let $c = translated.as_ref().map_or($c, |copy| copy as *const CUlaunchConfig); )?
    };
}

/// A gated launch entry point and its per-thread-default-stream variant (`_ptsz`),
/// each passing through to the real driver's symbol of the same name once the gate
/// is held.
macro_rules! gated_launch_plain {
    ($plain:ident, ( $($arg:ident : $ty:ty),* ), $shape:expr $(, migrating $f:ident)? $(, on $s:ident)? $(, configured $c:ident)?) => {
        #[doc = concat!("`", stringify!($plain), "`, behind the launch gate.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $plain($($arg: $ty),*) -> CuResult {
            guarded(stringify!($plain), || {
                launch_prelude!(recorded; $shape, $($f)?, $($s)?, $($c)?);
                let r = real!($plain($($arg),*));
                if recorded { r } else { accounted(r) }
            })
        }
    };
}

macro_rules! gated_launch {
    ($plain:ident, $ptsz:ident, ( $($arg:ident : $ty:ty),* ), $shape:expr $(, migrating $f:ident)? $(, on $s:ident)? $(, configured $c:ident)?) => {
        gated_launch_plain!($plain, ( $($arg : $ty),* ), $shape $(, migrating $f)? $(, on $s)? $(, configured $c)?);

        #[doc = concat!("`", stringify!($ptsz), "`, behind the launch gate.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $ptsz($($arg: $ty),*) -> CuResult {
            type Real = unsafe extern "C" fn($($ty),*) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($ptsz), || {
                launch_prelude!(recorded; $shape, $($f)?, $($s)?, $($c)?);
                let r = match variant(&REAL, stringify!($ptsz)) {
                    // SAFETY: the driver's own `_ptsz` variant, which has the plain entry
                    // point's C signature; the caller's arguments.
                    Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)($($arg),*) },
                    None => status::NOT_FOUND,
                };
                if recorded { r } else { accounted(r) }
            })
        }
    };
}

gated_launch!(cuLaunchKernel, cuLaunchKernel_ptsz, (
    f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
    shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void
), dims(f, gx, gy, gz, bx, by, bz, shared), migrating f, on stream);
gated_launch!(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, (
    config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void
), config_shape(f, config), migrating f, configured config);
gated_launch!(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, (
    f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
    shared: c_uint, stream: CUstream, params: *mut *mut c_void
), dims(f, gx, gy, gz, bx, by, bz, shared), migrating f, on stream);
// a graph's kernels are not visible here: no shape
gated_launch!(cuGraphLaunch, cuGraphLaunch_ptsz, (graph: CUgraphExec, stream: CUstream), None, on stream);
// the legacy launches (block shape set by cuFuncSetBlockShape, not seen here) and the
// deprecated multi-device launch, gated like the others
gated_launch_plain!(cuLaunch, (f: CUfunction), None, migrating f);
gated_launch_plain!(cuLaunchGrid, (f: CUfunction, width: c_int, height: c_int), None, migrating f);
gated_launch_plain!(cuLaunchGridAsync, (f: CUfunction, width: c_int, height: c_int, stream: CUstream),
    None, migrating f, on stream);
gated_launch_plain!(cuLaunchCooperativeKernelMultiDevice,
    (params: *mut CUDA_LAUNCH_PARAMS, devices: c_uint, flags: c_uint), None);

/// Stream capture (CUDA graphs): which streams capture now, so that launches into them
/// are recorded without the launch gate, and the gate never synchronises while any
/// capture is open — a synchronisation during a capture in global or thread-local mode
/// is "potentially unsafe" and invalidates it (CUDA programming guide, stream capture).
pub(crate) mod capture {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tessera_driver::sys::CUstreamCaptureStatus;

    /// Captures open in this process (the fast path's one load).
    static OPEN: AtomicUsize = AtomicUsize::new(0);
    /// The (real) streams capturing.
    static STREAMS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

    /// Whether any capture is open.
    #[inline]
    pub fn open() -> bool {
        OPEN.load(Ordering::Relaxed) > 0
    }

    /// Whether a launch on the program's `stream` is recorded into a capture.
    #[inline]
    pub fn recording(stream: CUstream) -> bool {
        open() && is_capturing(migration().real_stream(stream).unwrap_or(stream))
    }

    /// Whether a `cuLaunchKernelEx` launch is recorded into a capture.
    #[inline]
    pub fn config_recording(config: *const CUlaunchConfig) -> bool {
        // SAFETY: non-null, the caller's launch configuration; a plain field read.
        open() && !config.is_null() && recording(unsafe { (*config).hStream })
    }

    fn is_capturing(stream: CUstream) -> bool {
        let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        real!(cuStreamIsCapturing(stream, &mut status)) == status::SUCCESS
            && status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    }

    fn update(change: impl FnOnce(&mut BTreeSet<usize>)) {
        let mut streams = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut streams);
        OPEN.store(streams.len(), Ordering::Relaxed);
    }

    /// A capture began on the real `stream`.
    pub fn began(stream: CUstream) {
        state().log(format_args!("capture began on {:#x}", stream as usize));
        update(|s| {
            s.insert(stream as usize);
        });
    }

    /// A capture on the real `stream` may have ended (`cuStreamEndCapture` was called,
    /// whatever it answered): ask the driver.
    pub fn maybe_ended(stream: CUstream) {
        if !is_capturing(stream) {
            state().log(format_args!("capture ended on {:#x}", stream as usize));
            update(|s| {
                s.remove(&(stream as usize));
            });
        }
    }
}

/// Begin a capture on the program's `stream` with `begin` (on the real stream), and
/// note it if the driver did.
fn begin_capture(stream: CUstream, begin: impl FnOnce(CUstream) -> CuResult) -> CuResult {
    let s = match migration().real_stream(stream) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let r = begin(s);
    if r == status::SUCCESS {
        capture::began(s);
    }
    r
}

/// `cuStreamBeginCapture_v2`: noted, so that launches into the stream are recorded
/// without the gate.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode) -> CuResult {
    guarded("cuStreamBeginCapture", || {
        begin_capture(stream, |s| real!(cuStreamBeginCapture_v2(s, mode)))
    })
}

/// `cuStreamBeginCaptureToGraph`: as `cuStreamBeginCapture_v2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamBeginCaptureToGraph(
    stream: CUstream,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    count: usize,
    mode: CUstreamCaptureMode,
) -> CuResult {
    guarded("cuStreamBeginCaptureToGraph", || {
        begin_capture(stream, |s| {
            real!(cuStreamBeginCaptureToGraph(s, graph, dependencies, edges, count, mode))
        })
    })
}

/// `cuStreamEndCapture`: the capture is over unless the driver says otherwise.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CuResult {
    guarded("cuStreamEndCapture", || {
        let s = match migration().real_stream(stream) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let r = real!(cuStreamEndCapture(s, graph));
        capture::maybe_ended(s);
        r
    })
}

/// A stream entry point and its `_ptsz` variant, with the program's stream handle
/// standing for its stream on the current device (the same one before any move).
macro_rules! stream_hook {
    ($plain:ident, $ptsz:ident) => {
        #[doc = concat!("`", stringify!($plain), "`, on the current device's stream.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $plain(stream: CUstream) -> CuResult {
            guarded(stringify!($plain), || match migration().real_stream(stream) {
                Ok(s) => real!($plain(s)),
                Err(e) => e,
            })
        }

        #[doc = concat!("`", stringify!($ptsz), "`, likewise.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $ptsz(stream: CUstream) -> CuResult {
            type Real = unsafe extern "C" fn(CUstream) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($ptsz), || match migration().real_stream(stream) {
                Ok(s) => match variant(&REAL, stringify!($ptsz)) {
                    // SAFETY: the driver's own `_ptsz` variant, with the plain entry
                    // point's C signature.
                    Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)(s) },
                    None => status::NOT_FOUND,
                },
                Err(e) => e,
            })
        }
    };
}

stream_hook!(cuStreamSynchronize, cuStreamSynchronize_ptsz);
stream_hook!(cuStreamQuery, cuStreamQuery_ptsz);

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

/// The hook for the exact driver symbol `name` (a governed entry point), if any.
fn hook_for(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"cuInit" => cuInit as *mut c_void,
        b"cuDeviceGetCount" => cuDeviceGetCount as *mut c_void,
        b"cuDeviceGet" => cuDeviceGet as *mut c_void,
        b"cuMemAlloc_v2" => cuMemAlloc_v2 as *mut c_void,
        b"cuMemAllocManaged" => cuMemAllocManaged as *mut c_void,
        b"cuMemAllocPitch_v2" => cuMemAllocPitch_v2 as *mut c_void,
        b"cuMemFree_v2" => cuMemFree_v2 as *mut c_void,
        b"cuMemAllocAsync" => cuMemAllocAsync as *mut c_void,
        b"cuMemAllocAsync_ptsz" => cuMemAllocAsync_ptsz as *mut c_void,
        b"cuMemAllocFromPoolAsync" => cuMemAllocFromPoolAsync as *mut c_void,
        b"cuMemAllocFromPoolAsync_ptsz" => cuMemAllocFromPoolAsync_ptsz as *mut c_void,
        b"cuMemFreeAsync" => cuMemFreeAsync as *mut c_void,
        b"cuMemFreeAsync_ptsz" => cuMemFreeAsync_ptsz as *mut c_void,
        b"cuMemCreate" => cuMemCreate as *mut c_void,
        b"cuMemRelease" => cuMemRelease as *mut c_void,
        b"cuArrayCreate_v2" => cuArrayCreate_v2 as *mut c_void,
        b"cuArray3DCreate_v2" => cuArray3DCreate_v2 as *mut c_void,
        b"cuArrayDestroy" => cuArrayDestroy as *mut c_void,
        b"cuMemGetInfo_v2" => cuMemGetInfo_v2 as *mut c_void,
        b"cuGetProcAddress" => cuGetProcAddress as *mut c_void,
        b"cuLaunchKernel" => cuLaunchKernel as *mut c_void,
        b"cuLaunchKernel_ptsz" => cuLaunchKernel_ptsz as *mut c_void,
        b"cuLaunchKernelEx" => cuLaunchKernelEx as *mut c_void,
        b"cuLaunchKernelEx_ptsz" => cuLaunchKernelEx_ptsz as *mut c_void,
        b"cuLaunchCooperativeKernel" => cuLaunchCooperativeKernel as *mut c_void,
        b"cuLaunchCooperativeKernel_ptsz" => cuLaunchCooperativeKernel_ptsz as *mut c_void,
        b"cuGraphLaunch" => cuGraphLaunch as *mut c_void,
        b"cuGraphLaunch_ptsz" => cuGraphLaunch_ptsz as *mut c_void,
        b"cuGetProcAddress_v2" => cuGetProcAddress_v2 as *mut c_void,
        b"cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain as *mut c_void,
        b"cuCtxSetCurrent" => cuCtxSetCurrent as *mut c_void,
        b"cuModuleLoadData" => cuModuleLoadData as *mut c_void,
        b"cuModuleGetFunction" => cuModuleGetFunction as *mut c_void,
        b"cuFuncGetAttribute" => cuFuncGetAttribute as *mut c_void,
        b"cuStreamCreate" => cuStreamCreate as *mut c_void,
        b"cuStreamCreateWithPriority" => cuStreamCreateWithPriority as *mut c_void,
        b"cuStreamDestroy_v2" => cuStreamDestroy_v2 as *mut c_void,
        b"cuStreamSynchronize" => cuStreamSynchronize as *mut c_void,
        b"cuStreamSynchronize_ptsz" => cuStreamSynchronize_ptsz as *mut c_void,
        b"cuStreamQuery" => cuStreamQuery as *mut c_void,
        b"cuStreamQuery_ptsz" => cuStreamQuery_ptsz as *mut c_void,
        b"cuStreamBeginCapture_v2" => cuStreamBeginCapture_v2 as *mut c_void,
        b"cuStreamBeginCaptureToGraph" => cuStreamBeginCaptureToGraph as *mut c_void,
        b"cuStreamEndCapture" => cuStreamEndCapture as *mut c_void,
        b"cuLaunch" => cuLaunch as *mut c_void,
        b"cuLaunchGrid" => cuLaunchGrid as *mut c_void,
        b"cuLaunchGridAsync" => cuLaunchGridAsync as *mut c_void,
        b"cuLaunchCooperativeKernelMultiDevice" => {
            cuLaunchCooperativeKernelMultiDevice as *mut c_void
        }
        b"cuMipmappedArrayCreate" => cuMipmappedArrayCreate as *mut c_void,
        b"cuMipmappedArrayDestroy" => cuMipmappedArrayDestroy as *mut c_void,
        b"cuGraphAddMemAllocNode" => cuGraphAddMemAllocNode as *mut c_void,
        b"cuGraphAddNode" => cuGraphAddNode as *mut c_void,
        b"cuGraphAddNode_v2" => cuGraphAddNode_v2 as *mut c_void,
        b"cuMemAlloc" => cuMemAlloc as *mut c_void,
        b"cuMemFree" => cuMemFree as *mut c_void,
        b"cuMemAllocPitch" => cuMemAllocPitch as *mut c_void,
        b"cuArrayCreate" => cuArrayCreate as *mut c_void,
        b"cuArray3DCreate" => cuArray3DCreate as *mut c_void,
        b"cuDeviceGetByPCIBusId" => cuDeviceGetByPCIBusId as *mut c_void,
        b"cuMemPoolCreate" => cuMemPoolCreate as *mut c_void,
        b"cuLibraryGetKernel" => cuLibraryGetKernel as *mut c_void,
        b"cuCtxSetLimit" => cuCtxSetLimit as *mut c_void,
        b"cuMemPoolDestroy" => cuMemPoolDestroy as *mut c_void,
        b"cuDeviceGetDefaultMemPool" => cuDeviceGetDefaultMemPool as *mut c_void,
        b"cuDeviceGetMemPool" => cuDeviceGetMemPool as *mut c_void,
        b"cuDeviceTotalMem_v2" => cuDeviceTotalMem_v2 as *mut c_void,
        b"cuDeviceTotalMem" => cuDeviceTotalMem as *mut c_void,
        b"cuMulticastCreate" => cuMulticastCreate as *mut c_void,
        b"cuMemGetInfo" => cuMemGetInfo as *mut c_void,
        _ => return None,
    })
}

/// The driver symbols a `cuGetProcAddress` answer for `symbol` may be: the name itself
/// and its versioned and per-thread-stream variants.
const VARIANTS: [&str; 6] = ["", "_v2", "_v3", "_ptsz", "_v2_ptsz", "_ptds"];

/// Replace the real driver's answer `found` for `symbol` by the hook of the variant it
/// is, when that variant is governed.
fn substitute(symbol: &CStr, found: *mut c_void, version: c_int, flags: cuuint64_t) -> *mut c_void {
    let st = state();
    let Ok(real) = &st.real else { return found };
    let base = symbol.to_bytes();
    for suffix in VARIANTS {
        let mut name = base.to_vec();
        name.extend_from_slice(suffix.as_bytes());
        let Ok(cname) = std::ffi::CString::new(name.clone()) else { continue };
        if real.symbol(&cname) == found {
            let answer = hook_for(&name);
            st.log(format_args!(
                "getproc {} {version} {flags} -> {}",
                symbol.to_string_lossy(),
                match answer {
                    Some(_) => format!("hook {}", String::from_utf8_lossy(&name)),
                    None => "real".into(),
                }
            ));
            return answer.unwrap_or(found);
        }
    }
    st.log(format_args!(
        "getproc {} {version} {flags} -> real (unknown variant)",
        symbol.to_string_lossy()
    ));
    found
}

/// `cuGetProcAddress_v2` (CUDA 12): the real answer, with governed entry points
/// replaced by their hooks.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CuResult {
    guarded("cuGetProcAddress", || {
        let r = real!(cuGetProcAddress_v2(symbol, pfn, version, flags, symbol_status));
        if r == status::SUCCESS && !symbol.is_null() && !pfn.is_null() {
            // SAFETY: NUL-terminated by the caller's contract; pfn written by the driver.
            unsafe {
                let name = CStr::from_ptr(symbol);
                *pfn = substitute(name, *pfn, version, flags);
            }
        }
        r
    })
}

/// `cuGetProcAddress` (CUDA 11.3-11.8's signature, still exported).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
) -> CuResult {
    cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut())
}

/// `dlsym`: the loader's answer, except that a governed driver or NVML entry point is
/// answered with its hook (what the CUDA runtime, frameworks and pynvml do:
/// `dlopen("libcuda.so.1")` or `dlopen("libnvidia-ml.so.1")`, then `dlsym` on the
/// handle).
///
/// # Safety
/// As the loader's `dlsym`: `name` must be NUL-terminated.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(real_dlsym) = crate::real::real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: forwarded with the caller's arguments.
    let found = unsafe { real_dlsym(handle, name) };
    if found.is_null() || name.is_null() {
        return found;
    }
    // SAFETY: NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    // NVML's names (unless the real NVML's own are being resolved) and the driver's;
    // everything else (the Rust runtime's own look-ups among them) goes straight
    // through without touching the state
    let hook = if bytes.starts_with(b"nvml") {
        if crate::nvml::resolving_real() {
            return found;
        }
        crate::nvml::hook_for(bytes)
    } else if bytes.starts_with(b"cu") {
        hook_for(bytes)
    } else {
        return found;
    };
    match hook {
        Some(hook) => {
            state().log(format_args!("dlsym {} -> hook", String::from_utf8_lossy(bytes)));
            hook
        }
        None => found,
    }
}
