//! Opening a driver library by path and resolving [`DriverApi`] from it.
#![allow(unsafe_code)]

use crate::api::DriverApi;
use std::path::{Path, PathBuf};

/// The driver library could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// It could not be loaded.
    #[error("no CUDA driver ({path}): {message}")]
    Load {
        /// The library asked for.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// An entry point tessera needs is missing.
    #[error("the CUDA driver {path} lacks {symbol}")]
    Missing {
        /// The library.
        path: PathBuf,
        /// The entry point.
        symbol: &'static str,
    },
}

/// A loaded driver library and its entry points; the library stays loaded as long as
/// this lives, so the pointers stay valid.
#[derive(Debug)]
pub struct DriverLibrary {
    path: PathBuf,
    api: DriverApi,
    _lib: libloading::Library,
}

impl DriverLibrary {
    /// Load `path` (default `libcuda.so.1`, found as the loader finds libraries).
    pub fn open(path: Option<&Path>) -> Result<DriverLibrary, LibraryError> {
        let path = path.map_or_else(|| PathBuf::from("libcuda.so.1"), Path::to_path_buf);
        // SAFETY: loading the CUDA driver runs its initialisers, as every CUDA program
        // does; nothing else is assumed of it yet.
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|e| LibraryError::Load { path: path.clone(), message: e.to_string() })?;
        // SAFETY: each answer is null or the library's own symbol of that name; the
        // library is kept with the table, so the addresses stay valid.
        let api = unsafe {
            DriverApi::resolve(|name| match lib.get::<*mut std::ffi::c_void>(name.to_bytes()) {
                Ok(sym) => sym.try_as_raw_ptr().unwrap_or(std::ptr::null_mut()),
                Err(_) => std::ptr::null_mut(),
            })
        };
        Ok(DriverLibrary { path, api, _lib: lib })
    }

    /// The entry points found.
    pub fn api(&self) -> &DriverApi {
        &self.api
    }

    /// The library's path, as asked for.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The library's own symbol `name`, as the loader finds it in this library, even
    /// where an interposer (tessera's own, under `tessera run`) answers `dlsym` with a
    /// hook: the self-test's launch check times the driver's `cuLaunchKernel` beside
    /// the hooked one in the same process, so that the hook's cost is measured without
    /// the hundreds of nanoseconds two processes differ by. Null when absent or when
    /// the loader's own `dlsym` cannot be found.
    pub fn own_symbol(&self, name: &std::ffi::CStr) -> *mut std::ffi::c_void {
        type Dlsym = unsafe extern "C" fn(
            *mut std::ffi::c_void,
            *const std::ffi::c_char,
        ) -> *mut std::ffi::c_void;
        let Ok(path) = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()) else {
            return std::ptr::null_mut();
        };
        // glibc 2.34 and later define dlsym in libc at GLIBC_2.34, older ones in libdl at
        // GLIBC_2.2.5; an interposer's unversioned dlsym matches neither
        let dlsym = [c"GLIBC_2.34", c"GLIBC_2.2.5"].iter().find_map(|version| {
            // SAFETY: dlvsym only looks up; both strings are NUL-terminated.
            let p =
                unsafe { libc::dlvsym(libc::RTLD_DEFAULT, c"dlsym".as_ptr(), version.as_ptr()) };
            (!p.is_null()).then_some(p)
        });
        let Some(dlsym) = dlsym else { return std::ptr::null_mut() };
        // SAFETY: the loader's dlsym, whose C signature is `Dlsym`.
        let dlsym = unsafe { std::mem::transmute::<*mut std::ffi::c_void, Dlsym>(dlsym) };
        // SAFETY: RTLD_NOLOAD only finds the library `self` keeps loaded (no initialiser
        // runs); the extra reference is dropped below, leaving it loaded by `self`.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: a handle from dlopen and a NUL-terminated name.
        let found = unsafe { dlsym(handle, name.as_ptr()) };
        // SAFETY: the reference taken above; `self` still holds the library.
        unsafe { libc::dlclose(handle) };
        found
    }

    /// Fail with [`LibraryError::Missing`] unless `present` (an entry point of
    /// [`Self::api`] checked with `is_some()`).
    pub fn require(&self, present: bool, symbol: &'static str) -> Result<(), LibraryError> {
        if present {
            Ok(())
        } else {
            Err(LibraryError::Missing { path: self.path.clone(), symbol })
        }
    }
}
