//! Device memory: every allocation entry point through the ledger (reserved before the
//! driver allocates, returned on free), pools noted with their device, context limits
//! that take memory, the tenant's share in `cuMemGetInfo` and `cuDeviceTotalMem`, and
//! the refusal of what the ledger cannot count (graph memory nodes, multicast objects,
//! the legacy 32-bit pitch and array allocations).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::pools::pool_device;
use super::{current_gpu, guarded, refuse_ungoverned, variant};
use crate::migrate::migration;
use crate::state::{Allocation, complain, state};
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;
use tessera_driver::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_MEM_ALLOC_NODE_PARAMS, CUarray, CUdevice,
    CUdevice_attribute, CUdeviceptr, CUgraph, CUgraphEdgeData, CUgraphNode, CUgraphNodeParams,
    CUgraphNodeType, CUlimit, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemLocationType,
    CUmemoryPool, CUmipmappedArray, CUmulticastObjectProp, CUstream,
};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [
        cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocPitch_v2, cuMemFree_v2, cuMemAllocAsync,
        cuMemAllocFromPoolAsync, cuMemFreeAsync, cuMemCreate, cuMemRelease,
        cuArrayCreate_v2, cuArray3DCreate_v2, cuArrayDestroy, cuMemGetInfo_v2,
        cuMipmappedArrayCreate, cuMipmappedArrayDestroy, cuGraphAddMemAllocNode, cuGraphAddNode,
        cuGraphAddNode_v2, cuMulticastCreate, cuCtxSetLimit, cuDeviceTotalMem_v2,
    ],
    variants: [
        cuMemAllocAsync_ptsz => cuMemAllocAsync,
        cuMemAllocFromPoolAsync_ptsz => cuMemAllocFromPoolAsync,
        cuMemFreeAsync_ptsz => cuMemFreeAsync,
    ],
    unchecked: [
        cuMemAlloc, cuMemFree, cuMemAllocPitch, cuArrayCreate, cuArray3DCreate, cuMemGetInfo,
        cuDeviceTotalMem,
    ],
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

stream_alloc!(cuMemAllocAsync, cuMemAllocAsync_ptsz,
    (dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream), dptr, bytes, None);
stream_alloc!(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,
    (dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream), dptr, bytes,
    pool_device(pool));

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
