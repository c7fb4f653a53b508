//! The PTX of a fat binary a program hands the driver (issue 58): the CUDA runtime and
//! `nvcc`'s programs load fatbins, not PTX text, through `cuModuleLoadData`,
//! `cuModuleLoadFatBinary` and `cuLibraryLoadData`, given the fat binary itself or the
//! runtime's wrapper of it, or from a file (`cuModuleLoad`, `cuLibraryLoadFromFile`).
//! With kernel slicing on, the PTX the driver would compile for the GPU
//! (`tessera_ptx::fatbin::ptx_for`: the highest virtual architecture at or below the
//! GPU's, decompressed) is rewritten with twins and loaded as text, so that its kernels
//! can be sliced; the driver then compiles that PTX instead of running a
//! cubin the fat binary may carry (the price of slicing, said in
//! docs/kernel-slicing.md). A fat binary without such PTX, or one this build cannot
//! read, is loaded as given, its kernels whole, said once with the reason.

#![allow(unsafe_code)]

use super::current_gpu;
use std::ffi::{c_int, c_void};
use tessera_driver::status;
use tessera_driver::sys::{CUdevice, CUdevice_attribute};
use tessera_ptx::fatbin;

/// The most of a fat binary read in (its header says how long it is: a corrupt one
/// must not make the interposer read gigabytes).
const MAX_FATBIN: u64 = 1 << 30;

/// Said once that a fat binary's kernels run whole, with the first reason.
fn say_whole_once(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::log::line_once(
        &SAID,
        format_args!(
            "kernel slicing: a fat binary is loaded as given, its kernels whole ({why}); \
             said once"
        ),
    );
}

/// The GPU's architecture (major × 10 + minor) the current context's kernels run on,
/// or the first GPU's when no context is current (CUDA 12's libraries load without
/// one).
fn architecture() -> Option<u32> {
    let dev = current_gpu().ok().and_then(|d| CUdevice::try_from(d).ok()).unwrap_or(0);
    let ask = |a: CUdevice_attribute| {
        let mut v: c_int = 0;
        (real!(cuDeviceGetAttribute(&mut v, a, dev)) == status::SUCCESS)
            .then(|| u32::try_from(v).ok())
            .flatten()
    };
    let major = ask(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ask(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Some(major * 10 + minor)
}

/// The PTX text to load with twins instead of the fat binary `image` (or the runtime's
/// wrapper of one) whose first four bytes are `head`; `None` when `image` is another
/// binary (a cubin) or its fat binary has no PTX this GPU can run (said once).
pub(super) fn ptx_of(image: *const c_void, head: [u8; 4]) -> Option<String> {
    let magic = u32::from_le_bytes(head);
    let fatbin: *const u8 = match magic {
        fatbin::MAGIC => image.cast(),
        fatbin::WRAPPER_MAGIC => {
            // SAFETY: the CUDA runtime's `__fatBinC_Wrapper_t` (magic and version, two
            // 32-bit words, then the fat binary's address), as registered by a program
            // built with nvcc; read unaligned, as a program may place it anywhere.
            unsafe { image.cast::<u8>().add(8).cast::<*const u8>().read_unaligned() }
        }
        _ => {
            super::modules::say_binary_once();
            return None;
        }
    };
    if fatbin.is_null() {
        return None;
    }
    // SAFETY: a fat binary begins with its 16-byte header (the driver reads it too).
    let header = unsafe { std::slice::from_raw_parts(fatbin, 16) };
    let len = match fatbin::len(header) {
        Ok(n) if n <= MAX_FATBIN => n,
        Ok(n) => {
            say_whole_once(&format!("its header says {n} bytes"));
            return None;
        }
        Err(e) => {
            say_whole_once(&e.to_string());
            return None;
        }
    };
    // SAFETY: the fat binary is as long as its header says: the driver reads that much.
    let bytes = unsafe { std::slice::from_raw_parts(fatbin, len as usize) };
    ptx_of_bytes(bytes)
}

/// [`ptx_of`] for a fat binary in memory of its own (a file's contents): every read
/// inside `bytes`.
pub(super) fn ptx_of_bytes(bytes: &[u8]) -> Option<String> {
    let Some(arch) = architecture() else {
        say_whole_once("the GPU's architecture is unknown");
        return None;
    };
    match fatbin::ptx_for(bytes, arch) {
        Ok(text) => Some(text),
        Err(e) => {
            say_whole_once(&e.to_string());
            None
        }
    }
}
