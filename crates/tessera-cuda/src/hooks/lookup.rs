//! How a program finds the driver's entry points other than by linking:
//! `cuGetProcAddress` (the real answer, replaced by the hook of whichever variant the
//! driver returned when it is governed) and `dlsym` (driver and NVML names, and with
//! kernel slicing nvJitLink's),
//! answering the hooks of the other files by name.
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::guarded;
use crate::state::state;
use std::ffi::{CStr, c_char, c_int, c_void};
use tessera_driver::sys::{CUdriverProcAddressQueryResult, cuuint64_t};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [cuGetProcAddress_v2],
    variants: [],
    unchecked: [cuGetProcAddress],
}

/// The hook for the exact driver symbol `name` (a governed entry point), if any.
fn driver_hook(name: &[u8]) -> Option<*mut c_void> {
    super::device::hook_for(name)
        .or_else(|| super::memory::hook_for(name))
        .or_else(|| super::pools::hook_for(name))
        .or_else(|| super::launch::hook_for(name))
        .or_else(|| super::modules::hook_for(name))
        .or_else(|| super::capture::hook_for(name))
        .or_else(|| super::sync::hook_for(name))
        .or_else(|| hook_for(name))
}

/// The driver symbols a `cuGetProcAddress` answer for `symbol` may be: the name itself
/// and its versioned and per-thread-stream variants (every suffix `cuda.h` gives).
const VARIANTS: [&str; 12] = [
    "", "_v2", "_v3", "_v4", "_ptsz", "_v2_ptsz", "_v3_ptsz", "_v4_ptsz", "_ptds", "_v2_ptds",
    "_v3_ptds", "_v4_ptds",
];

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
            let answer = driver_hook(&name);
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
        driver_hook(bytes)
    } else if bytes.starts_with(b"nvJitLink") || bytes.starts_with(b"__nvJitLink") {
        // numba's linker, whose cubins carry no PTX to slice (`nvjitlink.rs`)
        super::nvjitlink::hook_for(bytes, found, handle)
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
