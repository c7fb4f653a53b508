//! The CUDA driver API, loaded at run time so that tessera builds and runs on machines
//! without it. Only device discovery is implemented (cuInit, cuDeviceGetCount,
//! cuDeviceGet, cuDeviceTotalMem); it has only ever run on machines without a driver,
//! where it reports that the library is missing.
#![allow(unsafe_code)]

use libloading::{Library, Symbol};

type CuResult = i32;

/// Total memory of each CUDA device, or why the driver could not tell.
pub fn device_memory() -> Result<Vec<u64>, String> {
    // SAFETY: loading the system's CUDA driver library runs its initialisers, which is
    // what every CUDA program does; we keep the library alive while calling into it.
    let lib = unsafe { Library::new("libcuda.so.1") }
        .map_err(|e| format!("no CUDA driver (libcuda.so.1): {e}"))?;
    // SAFETY: the symbols have these C signatures in every CUDA driver since 3.2
    // (cuDeviceTotalMem_v2); we call them only while `lib` is alive.
    unsafe {
        let init: Symbol<unsafe extern "C" fn(u32) -> CuResult> =
            lib.get(b"cuInit\0").map_err(|e| e.to_string())?;
        let count: Symbol<unsafe extern "C" fn(*mut i32) -> CuResult> =
            lib.get(b"cuDeviceGetCount\0").map_err(|e| e.to_string())?;
        let get: Symbol<unsafe extern "C" fn(*mut i32, i32) -> CuResult> =
            lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let total: Symbol<unsafe extern "C" fn(*mut usize, i32) -> CuResult> =
            lib.get(b"cuDeviceTotalMem_v2\0").map_err(|e| e.to_string())?;
        let r = init(0);
        if r != 0 {
            return Err(format!("cuInit failed with CUDA error {r}"));
        }
        let mut n = 0;
        let r = count(&mut n);
        if r != 0 {
            return Err(format!("cuDeviceGetCount failed with CUDA error {r}"));
        }
        let mut out = Vec::new();
        for i in 0..n {
            let mut dev = 0;
            let r = get(&mut dev, i);
            if r != 0 {
                return Err(format!("cuDeviceGet({i}) failed with CUDA error {r}"));
            }
            let mut bytes = 0usize;
            let r = total(&mut bytes, dev);
            if r != 0 {
                return Err(format!("cuDeviceTotalMem({i}) failed with CUDA error {r}"));
            }
            out.push(bytes as u64);
        }
        Ok(out)
    }
}
