//! What a node's NVIDIA libraries say about it, for `tessera doctor`: the CUDA driver's
//! version and devices, NVML's versions and device count. Each probe loads its library
//! privately, asks, and lets it go; nothing here keeps a context or a handle.
#![allow(unsafe_code)]

use crate::api::status;
use crate::library::DriverLibrary;
use nvml_wrapper_sys::bindings::NvmlLib;
use std::ffi::{CStr, c_char, c_uint};
use std::path::{Path, PathBuf};

/// What the CUDA driver reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverReport {
    /// The library loaded.
    pub path: PathBuf,
    /// `cuDriverGetVersion`: 12040 for CUDA 12.4.
    pub cuda_version: i32,
    /// Each device's memory, bytes.
    pub device_memory: Vec<u64>,
}

impl DriverReport {
    /// `12.4` for 12040.
    pub fn cuda_version_text(&self) -> String {
        format!("{}.{}", self.cuda_version / 1000, (self.cuda_version % 1000) / 10)
    }
}

/// What NVML reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmlReport {
    /// The library loaded.
    pub path: PathBuf,
    /// `nvmlSystemGetDriverVersion`: the kernel driver's version, `550.54.15`.
    pub driver_version: String,
    /// `nvmlSystemGetNVMLVersion`.
    pub nvml_version: String,
    /// `nvmlDeviceGetCount_v2`.
    pub devices: u32,
}

/// Load the CUDA driver (`path`, default `libcuda.so.1`), initialise it, and read its
/// version and each device's memory. The error says which step failed.
pub fn probe_driver(path: Option<&Path>) -> Result<DriverReport, String> {
    let lib = DriverLibrary::open(path).map_err(|e| e.to_string())?;
    let api = lib.api();
    let (Some(init), Some(version), Some(count), Some(get), Some(total)) = (
        api.cuInit,
        api.cuDriverGetVersion,
        api.cuDeviceGetCount,
        api.cuDeviceGet,
        api.cuDeviceTotalMem_v2,
    ) else {
        return Err(format!(
            "the CUDA driver {} lacks cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet or cuDeviceTotalMem_v2",
            lib.path().display()
        ));
    };
    let fail = |what: &str, r| format!("{what} failed with CUDA error {r}");
    let mut report =
        DriverReport { path: lib.path().to_path_buf(), cuda_version: 0, device_memory: Vec::new() };
    // SAFETY: the driver's own entry points, resolved from the library `lib` keeps loaded
    // for this scope, each called with valid pointers to locals.
    unsafe {
        let r = init(0);
        if r != status::SUCCESS {
            return Err(fail("cuInit", r));
        }
        let r = version(&mut report.cuda_version);
        if r != status::SUCCESS {
            return Err(fail("cuDriverGetVersion", r));
        }
        let mut n = 0;
        let r = count(&mut n);
        if r != status::SUCCESS {
            return Err(fail("cuDeviceGetCount", r));
        }
        for i in 0..n {
            let mut dev = 0;
            let r = get(&mut dev, i);
            if r != status::SUCCESS {
                return Err(fail("cuDeviceGet", r));
            }
            let mut bytes = 0usize;
            let r = total(&mut bytes, dev);
            if r != status::SUCCESS {
                return Err(fail("cuDeviceTotalMem", r));
            }
            report.device_memory.push(bytes as u64);
        }
    }
    Ok(report)
}

/// NVML's success code.
const NVML_SUCCESS: u32 = 0;

fn nvml_failed(what: &str, r: u32) -> String {
    format!("{what} failed with NVML error {r}")
}

/// Load NVML (`path`, default `libnvidia-ml.so.1`), initialise it, run `body` on it
/// (with how to name an entry point it lacks), and shut it down.
fn with_nvml<T>(
    path: Option<&Path>,
    body: impl FnOnce(&NvmlLib, &dyn Fn(&str) -> String, &Path) -> Result<T, String>,
) -> Result<T, String> {
    let path = path.map_or_else(|| PathBuf::from("libnvidia-ml.so.1"), Path::to_path_buf);
    // SAFETY: loading NVML runs its initialisers, as in any program that uses it.
    let lib =
        unsafe { NvmlLib::new(&path) }.map_err(|e| format!("no NVML ({}): {e}", path.display()))?;
    let missing = |name: &str| format!("NVML {} lacks {name}", path.display());
    let init = lib.nvmlInit_v2.as_ref().map_err(|_| missing("nvmlInit_v2"))?;
    let shutdown = lib.nvmlShutdown.as_ref().map_err(|_| missing("nvmlShutdown"))?;
    // SAFETY: NVML's own entry points, without arguments, on the library loaded above.
    let r = unsafe { init() };
    if r != NVML_SUCCESS {
        return Err(nvml_failed("nvmlInit_v2", r));
    }
    let answer = body(&lib, &missing, &path);
    // SAFETY: as above; after every call of `body`.
    unsafe { shutdown() };
    answer
}

/// Load NVML (`path`, default `libnvidia-ml.so.1`), initialise it, read the versions
/// and the device count, and shut it down.
pub fn probe_nvml(path: Option<&Path>) -> Result<NvmlReport, String> {
    with_nvml(path, |lib, missing, path| {
        let driver = lib
            .nvmlSystemGetDriverVersion
            .as_ref()
            .map_err(|_| missing("nvmlSystemGetDriverVersion"))?;
        let nvml = lib
            .nvmlSystemGetNVMLVersion
            .as_ref()
            .map_err(|_| missing("nvmlSystemGetNVMLVersion"))?;
        let count =
            lib.nvmlDeviceGetCount_v2.as_ref().map_err(|_| missing("nvmlDeviceGetCount_v2"))?;
        let text = |f: &unsafe extern "C" fn(*mut c_char, c_uint) -> u32, what: &str| {
            let mut buf = [0 as c_char; 96];
            // SAFETY: NVML's own entry point, with a buffer of the size passed; the
            // string it writes is NUL-terminated within it.
            unsafe {
                let r = f(buf.as_mut_ptr(), buf.len() as c_uint);
                if r != NVML_SUCCESS {
                    return Err(nvml_failed(what, r));
                }
                Ok(CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
            }
        };
        let driver_version = text(driver, "nvmlSystemGetDriverVersion")?;
        let nvml_version = text(nvml, "nvmlSystemGetNVMLVersion")?;
        let mut devices: c_uint = 0;
        // SAFETY: NVML's own entry point, its out-pointer a local.
        let r = unsafe { count(&mut devices) };
        if r != NVML_SUCCESS {
            return Err(nvml_failed("nvmlDeviceGetCount_v2", r));
        }
        Ok(NvmlReport { path: path.to_path_buf(), driver_version, nvml_version, devices })
    })
}

/// What NVML says of each device's memory: (total, used) bytes, in NVML's order. Under
/// the interposer a tenant sees its own share here.
pub fn nvml_memory(path: Option<&Path>) -> Result<Vec<(u64, u64)>, String> {
    with_nvml(path, |lib, missing, _| {
        let count =
            lib.nvmlDeviceGetCount_v2.as_ref().map_err(|_| missing("nvmlDeviceGetCount_v2"))?;
        let handle = lib
            .nvmlDeviceGetHandleByIndex_v2
            .as_ref()
            .map_err(|_| missing("nvmlDeviceGetHandleByIndex_v2"))?;
        let memory =
            lib.nvmlDeviceGetMemoryInfo.as_ref().map_err(|_| missing("nvmlDeviceGetMemoryInfo"))?;
        let mut n: c_uint = 0;
        // SAFETY: NVML's own entry points, their out-pointers locals of the declared
        // types, the handles NVML gave.
        unsafe {
            let r = count(&mut n);
            if r != NVML_SUCCESS {
                return Err(nvml_failed("nvmlDeviceGetCount_v2", r));
            }
            let mut out = Vec::new();
            for i in 0..n {
                let mut device = std::ptr::null_mut();
                let r = handle(i, &mut device);
                if r != NVML_SUCCESS {
                    return Err(nvml_failed("nvmlDeviceGetHandleByIndex_v2", r));
                }
                let mut m = std::mem::zeroed::<nvml_wrapper_sys::bindings::nvmlMemory_t>();
                let r = memory(device, &mut m);
                if r != NVML_SUCCESS {
                    return Err(nvml_failed("nvmlDeviceGetMemoryInfo", r));
                }
                out.push((m.total, m.used));
            }
            Ok(out)
        }
    })
}
