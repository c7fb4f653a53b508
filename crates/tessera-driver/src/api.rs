//! The driver entry points tessera calls or governs, typed from the generated bindings.
#![allow(unsafe_code)]

use std::ffi::c_void;

/// A driver call's result code (`CUresult`), kept raw: see the crate docs.
pub type CuResult = u32;

/// The result codes tessera looks at, by their `cuda.h` names.
pub mod status {
    use super::CuResult;
    use cudarc::driver::sys::CUresult;
    /// `CUDA_SUCCESS`.
    pub const SUCCESS: CuResult = CUresult::CUDA_SUCCESS as CuResult;
    /// `CUDA_ERROR_INVALID_VALUE`.
    pub const INVALID_VALUE: CuResult = CUresult::CUDA_ERROR_INVALID_VALUE as CuResult;
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub const OUT_OF_MEMORY: CuResult = CUresult::CUDA_ERROR_OUT_OF_MEMORY as CuResult;
    /// `CUDA_ERROR_NOT_INITIALIZED`.
    pub const NOT_INITIALIZED: CuResult = CUresult::CUDA_ERROR_NOT_INITIALIZED as CuResult;
    /// `CUDA_ERROR_NO_DEVICE`.
    pub const NO_DEVICE: CuResult = CUresult::CUDA_ERROR_NO_DEVICE as CuResult;
    /// `CUDA_ERROR_INVALID_DEVICE`.
    pub const INVALID_DEVICE: CuResult = CUresult::CUDA_ERROR_INVALID_DEVICE as CuResult;
    pub const INVALID_CONTEXT: CuResult = CUresult::CUDA_ERROR_INVALID_CONTEXT as CuResult;
    /// `CUDA_ERROR_NOT_FOUND`.
    pub const NOT_FOUND: CuResult = CUresult::CUDA_ERROR_NOT_FOUND as CuResult;
    /// `CUDA_ERROR_NOT_READY`: work still pending.
    pub const NOT_READY: CuResult = CUresult::CUDA_ERROR_NOT_READY as CuResult;
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    pub const NOT_SUPPORTED: CuResult = CUresult::CUDA_ERROR_NOT_SUPPORTED as CuResult;
    /// `CUDA_ERROR_UNKNOWN`.
    pub const UNKNOWN: CuResult = CUresult::CUDA_ERROR_UNKNOWN as CuResult;
    /// Errors after which a context cannot be used until it is reset ("sticky"):
    /// illegal address, launch timeout, hardware stack error, illegal instruction,
    /// misaligned address, invalid address space, invalid PC, launch failure,
    /// uncorrectable ECC, unknown.
    pub const STICKY: [CuResult; 10] = [
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS as CuResult,
        CUresult::CUDA_ERROR_LAUNCH_TIMEOUT as CuResult,
        CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR as CuResult,
        CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION as CuResult,
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS as CuResult,
        CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE as CuResult,
        CUresult::CUDA_ERROR_INVALID_PC as CuResult,
        CUresult::CUDA_ERROR_LAUNCH_FAILED as CuResult,
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE as CuResult,
        CUresult::CUDA_ERROR_UNKNOWN as CuResult,
    ];
}

/// Declares the driver entry points: a table of optional function pointers (absent
/// when the library lacks the symbol), their names, and a compile-time check of each
/// signature against `cudarc::driver::sys`, generated from `cuda.h`.
#[macro_export]
macro_rules! driver_api {
    ($( $(#[$doc:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ); )*) => {
        /// Entry points of a CUDA driver, as NVIDIA's headers declare them (results raw).
        #[allow(non_snake_case)]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct DriverApi {
            $( $(#[$doc])* pub $name: Option<unsafe extern "C" fn($($ty),*) -> $crate::CuResult>, )*
        }

        // Each declaration above must have exactly the parameters of the binding that
        // was generated from cuda.h, or this does not compile.
        $( const _: unsafe fn($($ty),*) -> $crate::sys::CUresult = $crate::sys::$name; )*

        impl DriverApi {
            /// The names of the entry points, as exported by the driver.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Resolve every entry point with `lookup` (a `dlsym` on the driver's
            /// handle); a null answer leaves it absent.
            ///
            /// # Safety
            /// `lookup` must return, for each name, null or the address of the driver's
            /// function of that name (which then has the declared C signature), valid
            /// for as long as the table is used.
            pub unsafe fn resolve(mut lookup: impl FnMut(&std::ffi::CStr) -> *mut std::ffi::c_void) -> DriverApi {
                DriverApi {
                    $( $name: {
                        let name = std::ffi::CString::new(stringify!($name)).expect("no NUL in a name");
                        let p = lookup(&name);
                        if p.is_null() {
                            None
                        } else {
                            // SAFETY: by the caller's contract, `p` is this entry point,
                            // whose C signature is the declared one (checked above
                            // against the generated binding).
                            Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn($($ty),*) -> $crate::CuResult>(p) })
                        }
                    }, )*
                }
            }
        }
    };
}

use cudarc::driver::sys::*;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

driver_api! {
    /// `cuInit`.
    fn cuInit(flags: c_uint);
    /// `cuDriverGetVersion`.
    fn cuDriverGetVersion(version: *mut c_int);
    /// `cuDeviceGetCount`.
    fn cuDeviceGetCount(count: *mut c_int);
    /// `cuDeviceGet`.
    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int);
    /// `cuDeviceGetName`.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice);
    /// `cuDeviceGetUuid_v2`.
    fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice);
    /// `cuDeviceGetPCIBusId`.
    fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice);
    /// `cuDeviceTotalMem_v2`.
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice);
    /// `cuDevicePrimaryCtxRetain`.
    fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice);
    /// `cuDevicePrimaryCtxRelease_v2`.
    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice);
    /// `cuDevicePrimaryCtxReset_v2`.
    fn cuDevicePrimaryCtxReset_v2(dev: CUdevice);
    /// `cuCtxSetCurrent`.
    fn cuCtxSetCurrent(ctx: CUcontext);
    /// `cuCtxGetDevice`.
    fn cuCtxGetDevice(device: *mut CUdevice);
    /// `cuCtxGetCurrent`.
    fn cuCtxGetCurrent(ctx: *mut CUcontext);
    /// `cuModuleLoadData`.
    fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void);
    /// `cuModuleLoad` (a module from a file).
    fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char);
    /// `cuModuleLoadFatBinary`.
    fn cuModuleLoadFatBinary(module: *mut CUmodule, fatCubin: *const c_void);
    /// `cuModuleGetFunction`.
    fn cuModuleGetFunction(function: *mut CUfunction, module: CUmodule, name: *const c_char);
    /// `cuFuncGetAttribute`.
    fn cuFuncGetAttribute(value: *mut c_int, attribute: CUfunction_attribute, f: CUfunction);
    /// `cuLibraryGetKernel`.
    fn cuLibraryGetKernel(kernel: *mut CUkernel, library: CUlibrary, name: *const c_char);
    /// `cuLibraryLoadData`.
    fn cuLibraryLoadData(
        library: *mut CUlibrary,
        code: *const c_void,
        jit_options: *mut CUjit_option,
        jit_option_values: *mut *mut c_void,
        num_jit_options: c_uint,
        library_options: *mut CUlibraryOption,
        library_option_values: *mut *mut c_void,
        num_library_options: c_uint
    );
    /// `cuLibraryLoadFromFile`.
    fn cuLibraryLoadFromFile(
        library: *mut CUlibrary,
        file_name: *const c_char,
        jit_options: *mut CUjit_option,
        jit_option_values: *mut *mut c_void,
        num_jit_options: c_uint,
        library_options: *mut CUlibraryOption,
        library_option_values: *mut *mut c_void,
        num_library_options: c_uint
    );
    /// `cuKernelGetAttribute`.
    fn cuKernelGetAttribute(value: *mut c_int, attribute: CUfunction_attribute, kernel: CUkernel, dev: CUdevice);
    /// `cuMemAlloc_v2`.
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize);
    /// `cuMemAllocPitch_v2`.
    fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element: c_uint);
    /// `cuMemAllocManaged`.
    fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytes: usize, flags: c_uint);
    /// `cuMemPrefetchAsync`.
    fn cuMemPrefetchAsync(dptr: CUdeviceptr, count: usize, device: CUdevice, stream: CUstream);
    /// `cuMemAllocAsync`.
    fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream);
    /// `cuMemAllocFromPoolAsync`.
    fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream);
    /// `cuMemPoolCreate`.
    fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps);
    /// `cuMemPoolDestroy`.
    fn cuMemPoolDestroy(pool: CUmemoryPool);
    /// `cuDeviceGetDefaultMemPool`.
    fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice);
    /// `cuDeviceGetMemPool`.
    fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice);
    /// `cuCtxGetLimit`.
    fn cuCtxGetLimit(value: *mut usize, limit: CUlimit);
    /// `cuCtxSetLimit`.
    fn cuCtxSetLimit(limit: CUlimit, value: usize);
    /// `cuDeviceGetAttribute`.
    fn cuDeviceGetAttribute(value: *mut c_int, attribute: CUdevice_attribute, dev: CUdevice);
    /// `cuMemFree_v2`.
    fn cuMemFree_v2(dptr: CUdeviceptr);
    /// `cuMemFreeAsync`.
    fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream);
    /// `cuMemCreate`.
    fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: c_ulonglong);
    /// `cuMemRelease`.
    fn cuMemRelease(handle: CUmemGenericAllocationHandle);
    /// `cuArrayCreate_v2`.
    fn cuArrayCreate_v2(array: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR);
    /// `cuArray3DCreate_v2`.
    fn cuArray3DCreate_v2(array: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR);
    /// `cuArrayDestroy`.
    fn cuArrayDestroy(array: CUarray);
    /// `cuMemGetInfo_v2`.
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize);
    /// `cuMemcpyHtoD_v2`.
    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize);
    /// `cuMemcpyDtoH_v2`.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize);
    /// `cuLaunchKernel`.
    fn cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    /// `cuLaunchKernelEx`.
    fn cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
    /// `cuLaunchCooperativeKernel`.
    fn cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void);
    /// `cuGraphLaunch`.
    fn cuGraphLaunch(graph: CUgraphExec, stream: CUstream);
    /// `cuStreamQuery`.
    fn cuStreamQuery(stream: CUstream);
    /// `cuLaunch` (legacy: block shape from `cuFuncSetBlockShape`).
    fn cuLaunch(f: CUfunction);
    /// `cuLaunchGrid` (legacy).
    fn cuLaunchGrid(f: CUfunction, width: c_int, height: c_int);
    /// `cuLaunchGridAsync` (legacy).
    fn cuLaunchGridAsync(f: CUfunction, width: c_int, height: c_int, stream: CUstream);
    /// `cuLaunchCooperativeKernelMultiDevice` (deprecated).
    fn cuLaunchCooperativeKernelMultiDevice(params: *mut CUDA_LAUNCH_PARAMS, devices: c_uint, flags: c_uint);
    /// `cuMipmappedArrayCreate`.
    fn cuMipmappedArrayCreate(array: *mut CUmipmappedArray, desc: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint);
    /// `cuMipmappedArrayDestroy`.
    fn cuMipmappedArrayDestroy(array: CUmipmappedArray);
    /// `cuGraphAddMemAllocNode`.
    fn cuGraphAddMemAllocNode(node: *mut CUgraphNode, graph: CUgraph, dependencies: *const CUgraphNode, count: usize, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS);
    /// `cuGraphAddNode`.
    fn cuGraphAddNode(node: *mut CUgraphNode, graph: CUgraph, dependencies: *const CUgraphNode, count: usize, params: *mut CUgraphNodeParams);
    /// `cuGraphAddNode_v2`.
    fn cuGraphAddNode_v2(node: *mut CUgraphNode, graph: CUgraph, dependencies: *const CUgraphNode, edges: *const CUgraphEdgeData, count: usize, params: *mut CUgraphNodeParams);
    /// `cuMulticastCreate`.
    fn cuMulticastCreate(handle: *mut CUmemGenericAllocationHandle, prop: *const CUmulticastObjectProp);
    /// `cuDeviceGetByPCIBusId`.
    fn cuDeviceGetByPCIBusId(device: *mut CUdevice, bus_id: *const c_char);
    /// `cuStreamBeginCapture_v2`.
    fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode);
    /// `cuStreamBeginCaptureToGraph`.
    fn cuStreamBeginCaptureToGraph(stream: CUstream, graph: CUgraph, dependencies: *const CUgraphNode, edges: *const CUgraphEdgeData, count: usize, mode: CUstreamCaptureMode);
    /// `cuStreamEndCapture`.
    fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph);
    /// `cuStreamIsCapturing`.
    fn cuStreamIsCapturing(stream: CUstream, status: *mut CUstreamCaptureStatus);
    /// `cuStreamGetCaptureInfo_v2`.
    fn cuStreamGetCaptureInfo_v2(stream: CUstream, status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t, graph: *mut CUgraph, dependencies: *mut *const CUgraphNode, count: *mut usize);
    /// `cuStreamGetCaptureInfo_v3`.
    fn cuStreamGetCaptureInfo_v3(stream: CUstream, status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t, graph: *mut CUgraph, dependencies: *mut *const CUgraphNode, edges: *mut *const CUgraphEdgeData, count: *mut usize);
    /// `cuCtxSynchronize`.
    fn cuCtxSynchronize();
    /// `cuStreamCreate`.
    fn cuStreamCreate(stream: *mut CUstream, flags: c_uint);
    /// `cuStreamCreateWithPriority`.
    fn cuStreamCreateWithPriority(stream: *mut CUstream, flags: c_uint, priority: c_int);
    /// `cuStreamDestroy_v2`.
    fn cuStreamDestroy_v2(stream: CUstream);
    /// `cuStreamSynchronize`.
    fn cuStreamSynchronize(stream: CUstream);
    /// `cuEventCreate`.
    fn cuEventCreate(event: *mut CUevent, flags: c_uint);
    /// `cuEventRecord`.
    fn cuEventRecord(event: CUevent, stream: CUstream);
    /// `cuEventSynchronize`.
    fn cuEventSynchronize(event: CUevent);
    /// `cuEventDestroy_v2`.
    fn cuEventDestroy_v2(event: CUevent);
    /// `cuGetProcAddress_v2`.
    fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: cuuint64_t, status: *mut CUdriverProcAddressQueryResult);
    /// `cuGetExportTable`.
    fn cuGetExportTable(table: *mut *const c_void, id: *const CUuuid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_codes_are_the_header_values() {
        // values from cuda.h, written out here as a second, independent source
        assert_eq!((status::SUCCESS, status::OUT_OF_MEMORY, status::NOT_READY), (0, 2, 600));
        assert_eq!(status::STICKY[7], 719, "CUDA_ERROR_LAUNCH_FAILED");
    }

    #[test]
    fn an_absent_symbol_leaves_the_entry_point_absent() {
        // SAFETY: the lookup answers null for every name, which the contract allows.
        let api = unsafe { DriverApi::resolve(|_| std::ptr::null_mut()) };
        assert!(api.cuInit.is_none() && api.cuLaunchKernel.is_none());
        assert!(DriverApi::NAMES.contains(&"cuGetProcAddress_v2"));
    }
}
