//! A CUDA program's view of one GPU, through a [`DriverLibrary`]: its primary context
//! made current, memory, PTX modules and kernel launches — the least a program needs
//! to exercise the driver (and, under the interposer, tessera) as users' programs do.
//! For `tessera selftest`'s programs; every call checked, every failure a
//! [`ContextError`] naming the call and the driver's code.
#![allow(unsafe_code)]

use crate::api::{CuResult, status};
use crate::library::{DriverLibrary, LibraryError};
use crate::sys::{CUcontext, CUdevice, CUfunction, CUmodule};
use std::ffi::{CString, c_void};
use std::path::Path;

/// A driver call failed, or the driver could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The library could not be loaded or lacks an entry point.
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// A call answered an error code.
    #[error("{call} failed with CUDA error {code}{}", describe(*code))]
    Cuda {
        /// The entry point.
        call: &'static str,
        /// The driver's code (`CUresult`).
        code: CuResult,
    },
    /// A name or module image had a NUL inside.
    #[error("{0} has a NUL byte inside")]
    Nul(&'static str),
}

impl ContextError {
    /// The driver's code, for a failed call.
    pub fn code(&self) -> Option<CuResult> {
        match self {
            ContextError::Cuda { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn describe(code: CuResult) -> &'static str {
    match code {
        status::OUT_OF_MEMORY => " (out of memory)",
        status::NOT_READY => " (not ready)",
        _ => "",
    }
}

/// Call `$name` of `$gpu`'s driver, checked: absent is [`LibraryError::Missing`], an
/// error code is [`ContextError::Cuda`].
macro_rules! call {
    ($lib:expr, $name:ident ( $($arg:expr),* $(,)? )) => {{
        let f = $lib.api().$name.ok_or_else(|| {
            ContextError::Library(LibraryError::Missing {
                path: $lib.path().to_path_buf(),
                symbol: stringify!($name),
            })
        })?;
        // SAFETY: the driver's own entry point of that name (typed from cuda.h); the
        // arguments are valid for the call as each caller below sets them up.
        match unsafe { f($($arg),*) } {
            status::SUCCESS => Ok(()),
            code => Err(ContextError::Cuda { call: stringify!($name), code }),
        }
    }};
}

/// A loaded PTX module's kernel.
#[derive(Clone, Copy, Debug)]
pub struct Kernel(CUfunction);

/// One GPU's primary context, current on the thread that opened it (and released when
/// dropped).
#[derive(Debug)]
pub struct Gpu {
    lib: DriverLibrary,
    dev: CUdevice,
    ctx: CUcontext,
    /// The library's own `cuLaunchKernel`, past any interposer (absent if not found).
    own_launch: Option<LaunchFn>,
}

/// `cuLaunchKernel`'s C signature.
type LaunchFn = unsafe extern "C" fn(
    CUfunction,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    crate::sys::CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;

impl Gpu {
    /// Initialise the driver `library` (default `libcuda.so.1`) and make device
    /// `ordinal`'s primary context current.
    pub fn open(library: Option<&Path>, ordinal: i32) -> Result<Gpu, ContextError> {
        let lib = DriverLibrary::open(library)?;
        call!(lib, cuInit(0))?;
        let mut dev: CUdevice = 0;
        call!(lib, cuDeviceGet(&mut dev, ordinal))?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        call!(lib, cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
        let own = lib.own_symbol(c"cuLaunchKernel");
        // SAFETY: the driver's own cuLaunchKernel, whose C signature is `LaunchFn`.
        let own_launch =
            (!own.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, LaunchFn>(own) });
        let gpu = Gpu { lib, dev, ctx, own_launch };
        call!(gpu.lib, cuCtxSetCurrent(gpu.ctx))?;
        Ok(gpu)
    }

    /// How many devices the driver shows.
    pub fn device_count(&self) -> Result<usize, ContextError> {
        let mut n = 0;
        call!(self.lib, cuDeviceGetCount(&mut n))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// The device's name.
    pub fn name(&self) -> Result<String, ContextError> {
        let mut buf = [0 as std::ffi::c_char; 128];
        call!(self.lib, cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, self.dev))?;
        // SAFETY: the driver wrote a NUL-terminated name within the buffer.
        Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// `cuMemGetInfo`: (free, total) bytes.
    pub fn mem_info(&self) -> Result<(u64, u64), ContextError> {
        let (mut free, mut total) = (0usize, 0usize);
        call!(self.lib, cuMemGetInfo_v2(&mut free, &mut total))?;
        Ok((free as u64, total as u64))
    }

    /// `cuMemAlloc`: a device address.
    pub fn alloc(&self, bytes: u64) -> Result<u64, ContextError> {
        let mut p = 0;
        call!(self.lib, cuMemAlloc_v2(&mut p, bytes as usize))?;
        Ok(p)
    }

    /// `cuMemFree` of an address [`Self::alloc`] gave.
    pub fn free(&self, ptr: u64) -> Result<(), ContextError> {
        call!(self.lib, cuMemFree_v2(ptr))
    }

    /// Copy `data` to device address `ptr`.
    pub fn copy_in(&self, ptr: u64, data: &[u8]) -> Result<(), ContextError> {
        call!(self.lib, cuMemcpyHtoD_v2(ptr, data.as_ptr().cast::<c_void>(), data.len()))
    }

    /// Copy from device address `ptr` into `out`.
    pub fn copy_out(&self, ptr: u64, out: &mut [u8]) -> Result<(), ContextError> {
        call!(self.lib, cuMemcpyDtoH_v2(out.as_mut_ptr().cast::<c_void>(), ptr, out.len()))
    }

    /// Load a PTX module (the driver compiles it) and find its kernel `name`.
    pub fn kernel(&self, ptx: &str, name: &str) -> Result<Kernel, ContextError> {
        let image = CString::new(ptx).map_err(|_| ContextError::Nul("the PTX"))?;
        let cname = CString::new(name).map_err(|_| ContextError::Nul("the kernel's name"))?;
        let mut module: CUmodule = std::ptr::null_mut();
        // the module stays loaded as long as the context (the driver keeps the image's
        // compiled code; the PTX text may go)
        call!(self.lib, cuModuleLoadData(&mut module, image.as_ptr().cast::<c_void>()))?;
        let mut f: CUfunction = std::ptr::null_mut();
        call!(self.lib, cuModuleGetFunction(&mut f, module, cname.as_ptr()))?;
        Ok(Kernel(f))
    }

    /// Launch `kernel` on the legacy stream as one block of `threads`, its parameters
    /// each 64 bits (addresses and integers).
    pub fn launch(&self, kernel: Kernel, threads: u32, params: &[u64]) -> Result<(), ContextError> {
        let mut values: Vec<u64> = params.to_vec();
        let mut pointers: Vec<*mut c_void> =
            values.iter_mut().map(|v| std::ptr::from_mut(v).cast::<c_void>()).collect();
        call!(
            self.lib,
            cuLaunchKernel(
                kernel.0,
                1,
                1,
                1,
                threads,
                1,
                1,
                0,
                std::ptr::null_mut(),
                pointers.as_mut_ptr(),
                std::ptr::null_mut()
            )
        )
    }

    /// [`Self::launch`] through the driver's own `cuLaunchKernel`, past any interposer
    /// (see [`DriverLibrary::own_symbol`]); the same arguments, built the same way, so
    /// that the two differ only in the entry point called.
    pub fn launch_unhooked(
        &self,
        kernel: Kernel,
        threads: u32,
        params: &[u64],
    ) -> Result<(), ContextError> {
        let f = self.own_launch.ok_or_else(|| {
            ContextError::Library(LibraryError::Missing {
                path: self.lib.path().to_path_buf(),
                symbol: "cuLaunchKernel (the library's own)",
            })
        })?;
        let mut values: Vec<u64> = params.to_vec();
        let mut pointers: Vec<*mut c_void> =
            values.iter_mut().map(|v| std::ptr::from_mut(v).cast::<c_void>()).collect();
        // SAFETY: the driver library's own cuLaunchKernel (typed from cuda.h), with the
        // arguments `launch` passes.
        let code = unsafe {
            f(
                kernel.0,
                1,
                1,
                1,
                threads,
                1,
                1,
                0,
                std::ptr::null_mut(),
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        match code {
            status::SUCCESS => Ok(()),
            code => Err(ContextError::Cuda { call: "cuLaunchKernel", code }),
        }
    }

    /// Whether the program's `cuLaunchKernel` (what `dlsym` answered) is another
    /// function than the driver's own: true under an interposer that hooks it.
    pub fn launch_is_interposed(&self) -> bool {
        let program = self.lib.api().cuLaunchKernel.map(|f| f as usize);
        let own = self.own_launch.map(|f| f as usize);
        own.is_some() && program != own
    }

    /// Wait for everything launched.
    pub fn synchronize(&self) -> Result<(), ContextError> {
        call!(self.lib, cuCtxSynchronize())
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if let Some(release) = self.lib.api().cuDevicePrimaryCtxRelease_v2 {
            // SAFETY: the device whose primary context `open` retained.
            unsafe { release(self.dev) };
        }
    }
}
