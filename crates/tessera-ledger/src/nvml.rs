//! GPU discovery through NVML, loaded at run time (`libnvidia-ml.so.1`) so that the
//! crate builds and runs everywhere. Only exercised on machines without NVML, where it
//! reports that it is absent; never yet run against a real driver.

/// Total memory of each GPU, in device order, or why NVML could not tell.
pub(crate) fn gpu_memory() -> Result<Vec<u64>, String> {
    let nvml = nvml_wrapper::Nvml::init()
        .map_err(|e| format!("NVML is not available ({e}); give the GPUs' memory explicitly"))?;
    let count = nvml.device_count().map_err(|e| format!("NVML device count: {e}"))?;
    (0..count)
        .map(|i| {
            let dev = nvml.device_by_index(i).map_err(|e| format!("NVML device {i}: {e}"))?;
            dev.memory_info()
                .map(|m| m.total)
                .map_err(|e| format!("NVML memory of device {i}: {e}"))
        })
        .collect()
}
