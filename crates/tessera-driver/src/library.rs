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
