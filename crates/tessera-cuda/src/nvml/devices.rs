//! Every other NVML entry point that takes a device handle (first), as NVML's answer
//! for one of the tenant's GPUs — and, for a tenant, `NVML_ERROR_INVALID_ARGUMENT` for
//! any other handle, as for a handle that is no device's. Every route to a handle is
//! governed (`nvml.rs`), so a program holds one of a GPU it is not placed on only by
//! forging it (NVML's handles are addresses in a table of its own); this closes that
//! too. The list is each entry point of `nvml-wrapper-sys`'s `NvmlLib` (generated from
//! `nvml.h`) whose first parameter is the one device handle it takes, less those
//! `nvml.rs` governs itself; `hooks_have_nvmls_signatures` (never called) makes the
//! compiler check each hook against the bindings. An entry point newer than the
//! bindings is not in it (it passes through).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry NVML's own names
#![allow(non_snake_case)]

use super::{HIDDEN, Seen, code, guarded, real, seen};
use nvml_wrapper_sys::bindings::*;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_ulonglong, c_void};

/// The hooks, one per entry point: NVML's own answer, but for a tenant's hidden
/// handle.
macro_rules! device_calls {
    ($($name:ident ( $($arg:ident : $ty:ty),* $(,)? );)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: of the tenant's GPUs only.")]
            #[cfg_attr(not(test), unsafe(no_mangle))]
            pub extern "C" fn $name(device: nvmlDevice_t $(, $arg: $ty)*) -> nvmlReturn_t {
                guarded(stringify!($name), || match seen(device) {
                    Seen::Hidden => HIDDEN,
                    Seen::Mine(..) | Seen::Unmanaged => nvml!($name(device $(, $arg)*)),
                })
            }
        )*

        /// The hook for NVML's symbol `name`, if it is one of these.
        pub(super) fn hook_for(name: &[u8]) -> Option<*mut c_void> {
            $(if name == stringify!($name).as_bytes() {
                return Some($name as *mut c_void);
            })*
            None
        }

        #[allow(dead_code)]
        fn hooks_have_nvmls_signatures(lib: &mut NvmlLib) {
            $(lib.$name = Ok($name);)*
        }
    };
}

device_calls! {
    nvmlDeviceGetAttributes_v2(attributes: *mut nvmlDeviceAttributes_t);
    nvmlDeviceGetName(name: *mut c_char, length: c_uint);
    nvmlDeviceGetBrand(type_: *mut nvmlBrandType_t);
    nvmlDeviceGetSerial(serial: *mut c_char, length: c_uint);
    nvmlDeviceGetModuleId(module_id: *mut c_uint);
    nvmlDeviceGetC2cModeInfoV(c2c_mode_info: *mut nvmlC2cModeInfo_v1_t);
    nvmlDeviceGetMemoryAffinity(
        node_set_size: c_uint,
        node_set: *mut c_ulong,
        scope: nvmlAffinityScope_t
    );
    nvmlDeviceGetCpuAffinityWithinScope(
        cpu_set_size: c_uint,
        cpu_set: *mut c_ulong,
        scope: nvmlAffinityScope_t
    );
    nvmlDeviceGetCpuAffinity(cpu_set_size: c_uint, cpu_set: *mut c_ulong);
    nvmlDeviceGetNumaNodeId(node: *mut c_uint);
    nvmlDeviceGetUUID(uuid: *mut c_char, length: c_uint);
    nvmlDeviceGetMinorNumber(minor_number: *mut c_uint);
    nvmlDeviceGetBoardPartNumber(part_number: *mut c_char, length: c_uint);
    nvmlDeviceGetInforomVersion(object: nvmlInforomObject_t, version: *mut c_char, length: c_uint);
    nvmlDeviceGetInforomImageVersion(version: *mut c_char, length: c_uint);
    nvmlDeviceGetInforomConfigurationChecksum(checksum: *mut c_uint);
    nvmlDeviceGetLastBBXFlushTime(timestamp: *mut c_ulonglong, duration_us: *mut c_ulong);
    nvmlDeviceGetDisplayMode(display: *mut nvmlEnableState_t);
    nvmlDeviceGetDisplayActive(is_active: *mut nvmlEnableState_t);
    nvmlDeviceGetPersistenceMode(mode: *mut nvmlEnableState_t);
    nvmlDeviceGetPciInfoExt(pci: *mut nvmlPciInfoExt_t);
    nvmlDeviceGetPciInfo_v3(pci: *mut nvmlPciInfo_t);
    nvmlDeviceGetMaxPcieLinkGeneration(max_link_gen: *mut c_uint);
    nvmlDeviceGetGpuMaxPcieLinkGeneration(max_link_gen_device: *mut c_uint);
    nvmlDeviceGetMaxPcieLinkWidth(max_link_width: *mut c_uint);
    nvmlDeviceGetCurrPcieLinkGeneration(curr_link_gen: *mut c_uint);
    nvmlDeviceGetCurrPcieLinkWidth(curr_link_width: *mut c_uint);
    nvmlDeviceGetPcieThroughput(counter: nvmlPcieUtilCounter_t, value: *mut c_uint);
    nvmlDeviceGetPcieReplayCounter(value: *mut c_uint);
    nvmlDeviceGetClockInfo(type_: nvmlClockType_t, clock: *mut c_uint);
    nvmlDeviceGetMaxClockInfo(type_: nvmlClockType_t, clock: *mut c_uint);
    nvmlDeviceGetGpcClkVfOffset(offset: *mut c_int);
    nvmlDeviceGetApplicationsClock(clock_type: nvmlClockType_t, clock_m_hz: *mut c_uint);
    nvmlDeviceGetDefaultApplicationsClock(clock_type: nvmlClockType_t, clock_m_hz: *mut c_uint);
    nvmlDeviceGetClock(
        clock_type: nvmlClockType_t,
        clock_id: nvmlClockId_t,
        clock_m_hz: *mut c_uint
    );
    nvmlDeviceGetMaxCustomerBoostClock(clock_type: nvmlClockType_t, clock_m_hz: *mut c_uint);
    nvmlDeviceGetSupportedMemoryClocks(count: *mut c_uint, clocks_m_hz: *mut c_uint);
    nvmlDeviceGetSupportedGraphicsClocks(
        memory_clock_m_hz: c_uint,
        count: *mut c_uint,
        clocks_m_hz: *mut c_uint
    );
    nvmlDeviceGetAutoBoostedClocksEnabled(
        is_enabled: *mut nvmlEnableState_t,
        default_is_enabled: *mut nvmlEnableState_t
    );
    nvmlDeviceGetFanSpeed(speed: *mut c_uint);
    nvmlDeviceGetFanSpeed_v2(fan: c_uint, speed: *mut c_uint);
    nvmlDeviceGetFanSpeedRPM(fan_speed: *mut nvmlFanSpeedInfo_t);
    nvmlDeviceGetTargetFanSpeed(fan: c_uint, target_speed: *mut c_uint);
    nvmlDeviceGetMinMaxFanSpeed(min_speed: *mut c_uint, max_speed: *mut c_uint);
    nvmlDeviceGetFanControlPolicy_v2(fan: c_uint, policy: *mut nvmlFanControlPolicy_t);
    nvmlDeviceGetNumFans(num_fans: *mut c_uint);
    nvmlDeviceGetTemperature(sensor_type: nvmlTemperatureSensors_t, temp: *mut c_uint);
    nvmlDeviceGetCoolerInfo(cooler_info: *mut nvmlCoolerInfo_t);
    nvmlDeviceGetTemperatureV(temperature: *mut nvmlTemperature_t);
    nvmlDeviceGetTemperatureThreshold(
        threshold_type: nvmlTemperatureThresholds_t,
        temp: *mut c_uint
    );
    nvmlDeviceGetMarginTemperature(margin_temp_info: *mut nvmlMarginTemperature_t);
    nvmlDeviceGetThermalSettings(
        sensor_index: c_uint,
        p_thermal_settings: *mut nvmlGpuThermalSettings_t
    );
    nvmlDeviceGetPerformanceState(p_state: *mut nvmlPstates_t);
    nvmlDeviceGetCurrentClocksEventReasons(clocks_event_reasons: *mut c_ulonglong);
    nvmlDeviceGetCurrentClocksThrottleReasons(clocks_throttle_reasons: *mut c_ulonglong);
    nvmlDeviceGetSupportedClocksEventReasons(supported_clocks_event_reasons: *mut c_ulonglong);
    nvmlDeviceGetSupportedClocksThrottleReasons(
        supported_clocks_throttle_reasons: *mut c_ulonglong
    );
    nvmlDeviceGetPowerState(p_state: *mut nvmlPstates_t);
    nvmlDeviceGetDynamicPstatesInfo(p_dynamic_pstates_info: *mut nvmlGpuDynamicPstatesInfo_t);
    nvmlDeviceGetMemClkVfOffset(offset: *mut c_int);
    nvmlDeviceGetMinMaxClockOfPState(
        type_: nvmlClockType_t,
        pstate: nvmlPstates_t,
        min_clock_m_hz: *mut c_uint,
        max_clock_m_hz: *mut c_uint
    );
    nvmlDeviceGetSupportedPerformanceStates(pstates: *mut nvmlPstates_t, size: c_uint);
    nvmlDeviceGetGpcClkMinMaxVfOffset(min_offset: *mut c_int, max_offset: *mut c_int);
    nvmlDeviceGetMemClkMinMaxVfOffset(min_offset: *mut c_int, max_offset: *mut c_int);
    nvmlDeviceGetClockOffsets(info: *mut nvmlClockOffset_t);
    nvmlDeviceSetClockOffsets(info: *mut nvmlClockOffset_t);
    nvmlDeviceGetPerformanceModes(perf_modes: *mut nvmlDevicePerfModes_t);
    nvmlDeviceGetCurrentClockFreqs(current_clock_freqs: *mut nvmlDeviceCurrentClockFreqs_t);
    nvmlDeviceGetPowerManagementMode(mode: *mut nvmlEnableState_t);
    nvmlDeviceGetPowerManagementLimit(limit: *mut c_uint);
    nvmlDeviceGetPowerManagementLimitConstraints(min_limit: *mut c_uint, max_limit: *mut c_uint);
    nvmlDeviceGetPowerManagementDefaultLimit(default_limit: *mut c_uint);
    nvmlDeviceGetPowerUsage(power: *mut c_uint);
    nvmlDeviceGetTotalEnergyConsumption(energy: *mut c_ulonglong);
    nvmlDeviceGetEnforcedPowerLimit(limit: *mut c_uint);
    nvmlDeviceGetGpuOperationMode(
        current: *mut nvmlGpuOperationMode_t,
        pending: *mut nvmlGpuOperationMode_t
    );
    nvmlDeviceGetComputeMode(mode: *mut nvmlComputeMode_t);
    nvmlDeviceGetCudaComputeCapability(major: *mut c_int, minor: *mut c_int);
    nvmlDeviceGetDramEncryptionMode(
        current: *mut nvmlDramEncryptionInfo_t,
        pending: *mut nvmlDramEncryptionInfo_t
    );
    nvmlDeviceSetDramEncryptionMode(dram_encryption: *const nvmlDramEncryptionInfo_t);
    nvmlDeviceGetEccMode(current: *mut nvmlEnableState_t, pending: *mut nvmlEnableState_t);
    nvmlDeviceGetDefaultEccMode(default_mode: *mut nvmlEnableState_t);
    nvmlDeviceGetBoardId(board_id: *mut c_uint);
    nvmlDeviceGetMultiGpuBoard(multi_gpu_bool: *mut c_uint);
    nvmlDeviceGetTotalEccErrors(
        error_type: nvmlMemoryErrorType_t,
        counter_type: nvmlEccCounterType_t,
        ecc_counts: *mut c_ulonglong
    );
    nvmlDeviceGetDetailedEccErrors(
        error_type: nvmlMemoryErrorType_t,
        counter_type: nvmlEccCounterType_t,
        ecc_counts: *mut nvmlEccErrorCounts_t
    );
    nvmlDeviceGetMemoryErrorCounter(
        error_type: nvmlMemoryErrorType_t,
        counter_type: nvmlEccCounterType_t,
        location_type: nvmlMemoryLocation_t,
        count: *mut c_ulonglong
    );
    nvmlDeviceGetEncoderUtilization(utilization: *mut c_uint, sampling_period_us: *mut c_uint);
    nvmlDeviceGetEncoderCapacity(
        encoder_query_type: nvmlEncoderType_t,
        encoder_capacity: *mut c_uint
    );
    nvmlDeviceGetEncoderStats(
        session_count: *mut c_uint,
        average_fps: *mut c_uint,
        average_latency: *mut c_uint
    );
    nvmlDeviceGetDecoderUtilization(utilization: *mut c_uint, sampling_period_us: *mut c_uint);
    nvmlDeviceGetJpgUtilization(utilization: *mut c_uint, sampling_period_us: *mut c_uint);
    nvmlDeviceGetOfaUtilization(utilization: *mut c_uint, sampling_period_us: *mut c_uint);
    nvmlDeviceGetFBCStats(fbc_stats: *mut nvmlFBCStats_t);
    nvmlDeviceGetDriverModel_v2(current: *mut nvmlDriverModel_t, pending: *mut nvmlDriverModel_t);
    nvmlDeviceGetVbiosVersion(version: *mut c_char, length: c_uint);
    nvmlDeviceGetBridgeChipInfo(bridge_hierarchy: *mut nvmlBridgeChipHierarchy_t);
    nvmlDeviceGetAPIRestriction(
        api_type: nvmlRestrictedAPI_t,
        is_restricted: *mut nvmlEnableState_t
    );
    nvmlDeviceGetSamples(
        type_: nvmlSamplingType_t,
        last_seen_time_stamp: c_ulonglong,
        sample_val_type: *mut nvmlValueType_t,
        sample_count: *mut c_uint,
        samples: *mut nvmlSample_t
    );
    nvmlDeviceGetBAR1MemoryInfo(bar1_memory: *mut nvmlBAR1Memory_t);
    nvmlDeviceGetViolationStatus(
        perf_policy_type: nvmlPerfPolicyType_t,
        viol_time: *mut nvmlViolationTime_t
    );
    nvmlDeviceGetIrqNum(irq_num: *mut c_uint);
    nvmlDeviceGetNumGpuCores(num_cores: *mut c_uint);
    nvmlDeviceGetPowerSource(power_source: *mut nvmlPowerSource_t);
    nvmlDeviceGetMemoryBusWidth(bus_width: *mut c_uint);
    nvmlDeviceGetPcieLinkMaxSpeed(max_speed: *mut c_uint);
    nvmlDeviceGetPcieSpeed(pcie_speed: *mut c_uint);
    nvmlDeviceGetAdaptiveClockInfoStatus(adaptive_clock_status: *mut c_uint);
    nvmlDeviceGetBusType(type_: *mut nvmlBusType_t);
    nvmlDeviceGetGpuFabricInfo(gpu_fabric_info: *mut nvmlGpuFabricInfo_t);
    nvmlDeviceGetGpuFabricInfoV(gpu_fabric_info: *mut nvmlGpuFabricInfoV_t);
    nvmlDeviceGetConfComputeMemSizeInfo(mem_info: *mut nvmlConfComputeMemSizeInfo_t);
    nvmlDeviceGetConfComputeProtectedMemoryUsage(memory: *mut nvmlMemory_t);
    nvmlDeviceGetConfComputeGpuCertificate(gpu_cert: *mut nvmlConfComputeGpuCertificate_t);
    nvmlDeviceGetConfComputeGpuAttestationReport(
        gpu_atst_report: *mut nvmlConfComputeGpuAttestationReport_t
    );
    nvmlDeviceSetConfComputeUnprotectedMemSize(size_ki_b: c_ulonglong);
    nvmlDeviceGetGspFirmwareVersion(version: *mut c_char);
    nvmlDeviceGetGspFirmwareMode(is_enabled: *mut c_uint, default_mode: *mut c_uint);
    nvmlDeviceGetSramEccErrorStatus(status: *mut nvmlEccSramErrorStatus_t);
    nvmlDeviceGetAccountingMode(mode: *mut nvmlEnableState_t);
    nvmlDeviceGetAccountingBufferSize(buffer_size: *mut c_uint);
    nvmlDeviceGetRetiredPages(
        cause: nvmlPageRetirementCause_t,
        page_count: *mut c_uint,
        addresses: *mut c_ulonglong
    );
    nvmlDeviceGetRetiredPages_v2(
        cause: nvmlPageRetirementCause_t,
        page_count: *mut c_uint,
        addresses: *mut c_ulonglong,
        timestamps: *mut c_ulonglong
    );
    nvmlDeviceGetRetiredPagesPendingStatus(is_pending: *mut nvmlEnableState_t);
    nvmlDeviceGetRemappedRows(
        corr_rows: *mut c_uint,
        unc_rows: *mut c_uint,
        is_pending: *mut c_uint,
        failure_occurred: *mut c_uint
    );
    nvmlDeviceGetRowRemapperHistogram(values: *mut nvmlRowRemapperHistogramValues_t);
    nvmlDeviceGetArchitecture(arch: *mut nvmlDeviceArchitecture_t);
    nvmlDeviceGetClkMonStatus(status: *mut nvmlClkMonStatus_t);
    nvmlDeviceGetPlatformInfo(platform_info: *mut nvmlPlatformInfo_t);
    nvmlDeviceSetPersistenceMode(mode: nvmlEnableState_t);
    nvmlDeviceSetComputeMode(mode: nvmlComputeMode_t);
    nvmlDeviceSetEccMode(ecc: nvmlEnableState_t);
    nvmlDeviceClearEccErrorCounts(counter_type: nvmlEccCounterType_t);
    nvmlDeviceSetDriverModel(driver_model: nvmlDriverModel_t, flags: c_uint);
    nvmlDeviceSetGpuLockedClocks(min_gpu_clock_m_hz: c_uint, max_gpu_clock_m_hz: c_uint);
    nvmlDeviceSetMemoryLockedClocks(min_mem_clock_m_hz: c_uint, max_mem_clock_m_hz: c_uint);
    nvmlDeviceSetApplicationsClocks(mem_clock_m_hz: c_uint, graphics_clock_m_hz: c_uint);
    nvmlDeviceSetAutoBoostedClocksEnabled(enabled: nvmlEnableState_t);
    nvmlDeviceSetDefaultAutoBoostedClocksEnabled(enabled: nvmlEnableState_t, flags: c_uint);
    nvmlDeviceSetDefaultFanSpeed_v2(fan: c_uint);
    nvmlDeviceSetFanControlPolicy(fan: c_uint, policy: nvmlFanControlPolicy_t);
    nvmlDeviceSetTemperatureThreshold(
        threshold_type: nvmlTemperatureThresholds_t,
        temp: *mut c_int
    );
    nvmlDeviceSetPowerManagementLimit(limit: c_uint);
    nvmlDeviceSetGpuOperationMode(mode: nvmlGpuOperationMode_t);
    nvmlDeviceSetAPIRestriction(api_type: nvmlRestrictedAPI_t, is_restricted: nvmlEnableState_t);
    nvmlDeviceSetFanSpeed_v2(fan: c_uint, speed: c_uint);
    nvmlDeviceSetGpcClkVfOffset(offset: c_int);
    nvmlDeviceSetMemClkVfOffset(offset: c_int);
    nvmlDeviceSetAccountingMode(mode: nvmlEnableState_t);
    nvmlDeviceSetPowerManagementLimit_v2(power_value: *mut nvmlPowerValue_v2_t);
    nvmlDeviceGetNvLinkState(link: c_uint, is_active: *mut nvmlEnableState_t);
    nvmlDeviceGetNvLinkVersion(link: c_uint, version: *mut c_uint);
    nvmlDeviceGetNvLinkCapability(
        link: c_uint,
        capability: nvmlNvLinkCapability_t,
        cap_result: *mut c_uint
    );
    nvmlDeviceGetNvLinkRemotePciInfo_v2(link: c_uint, pci: *mut nvmlPciInfo_t);
    nvmlDeviceGetNvLinkErrorCounter(
        link: c_uint,
        counter: nvmlNvLinkErrorCounter_t,
        counter_value: *mut c_ulonglong
    );
    nvmlDeviceResetNvLinkErrorCounters(link: c_uint);
    nvmlDeviceSetNvLinkUtilizationControl(
        link: c_uint,
        counter: c_uint,
        control: *mut nvmlNvLinkUtilizationControl_t,
        reset: c_uint
    );
    nvmlDeviceGetNvLinkUtilizationControl(
        link: c_uint,
        counter: c_uint,
        control: *mut nvmlNvLinkUtilizationControl_t
    );
    nvmlDeviceGetNvLinkUtilizationCounter(
        link: c_uint,
        counter: c_uint,
        rxcounter: *mut c_ulonglong,
        txcounter: *mut c_ulonglong
    );
    nvmlDeviceFreezeNvLinkUtilizationCounter(
        link: c_uint,
        counter: c_uint,
        freeze: nvmlEnableState_t
    );
    nvmlDeviceResetNvLinkUtilizationCounter(link: c_uint, counter: c_uint);
    nvmlDeviceGetNvLinkRemoteDeviceType(
        link: c_uint,
        p_nv_link_device_type: *mut nvmlIntNvLinkDeviceType_t
    );
    nvmlDeviceSetNvLinkDeviceLowPowerThreshold(info: *mut nvmlNvLinkPowerThres_t);
    nvmlDeviceGetNvlinkSupportedBwModes(supported_bw_mode: *mut nvmlNvlinkSupportedBwModes_t);
    nvmlDeviceGetNvlinkBwMode(get_bw_mode: *mut nvmlNvlinkGetBwMode_t);
    nvmlDeviceSetNvlinkBwMode(set_bw_mode: *mut nvmlNvlinkSetBwMode_t);
    nvmlDeviceRegisterEvents(event_types: c_ulonglong, set: nvmlEventSet_t);
    nvmlDeviceGetSupportedEventTypes(event_types: *mut c_ulonglong);
    nvmlDeviceGetFieldValues(values_count: c_int, values: *mut nvmlFieldValue_t);
    nvmlDeviceClearFieldValues(values_count: c_int, values: *mut nvmlFieldValue_t);
    nvmlDeviceGetVirtualizationMode(p_virtual_mode: *mut nvmlGpuVirtualizationMode_t);
    nvmlDeviceGetHostVgpuMode(p_host_vgpu_mode: *mut nvmlHostVgpuMode_t);
    nvmlDeviceSetVirtualizationMode(virtual_mode: nvmlGpuVirtualizationMode_t);
    nvmlDeviceGetVgpuHeterogeneousMode(p_heterogeneous_mode: *mut nvmlVgpuHeterogeneousMode_t);
    nvmlDeviceSetVgpuHeterogeneousMode(p_heterogeneous_mode: *const nvmlVgpuHeterogeneousMode_t);
    nvmlDeviceGetVgpuTypeSupportedPlacements(
        vgpu_type_id: nvmlVgpuTypeId_t,
        p_placement_list: *mut nvmlVgpuPlacementList_t
    );
    nvmlDeviceGetVgpuTypeCreatablePlacements(
        vgpu_type_id: nvmlVgpuTypeId_t,
        p_placement_list: *mut nvmlVgpuPlacementList_t
    );
    nvmlDeviceSetVgpuCapabilities(capability: nvmlDeviceVgpuCapability_t, state: nvmlEnableState_t);
    nvmlDeviceGetGridLicensableFeatures_v4(
        p_grid_licensable_features: *mut nvmlGridLicensableFeatures_t
    );
    nvmlDeviceGetVgpuCapabilities(capability: nvmlDeviceVgpuCapability_t, cap_result: *mut c_uint);
    nvmlDeviceGetSupportedVgpus(vgpu_count: *mut c_uint, vgpu_type_ids: *mut nvmlVgpuTypeId_t);
    nvmlDeviceGetCreatableVgpus(vgpu_count: *mut c_uint, vgpu_type_ids: *mut nvmlVgpuTypeId_t);
    nvmlVgpuTypeGetMaxInstances(vgpu_type_id: nvmlVgpuTypeId_t, vgpu_instance_count: *mut c_uint);
    nvmlDeviceGetActiveVgpus(vgpu_count: *mut c_uint, vgpu_instances: *mut nvmlVgpuInstance_t);
    nvmlDeviceGetVgpuMetadata(pgpu_metadata: *mut nvmlVgpuPgpuMetadata_t, buffer_size: *mut c_uint);
    nvmlDeviceGetPgpuMetadataString(pgpu_metadata: *mut c_char, buffer_size: *mut c_uint);
    nvmlDeviceGetVgpuSchedulerLog(p_scheduler_log: *mut nvmlVgpuSchedulerLog_t);
    nvmlDeviceGetVgpuSchedulerState(p_scheduler_state: *mut nvmlVgpuSchedulerGetState_t);
    nvmlDeviceGetVgpuSchedulerCapabilities(p_capabilities: *mut nvmlVgpuSchedulerCapabilities_t);
    nvmlDeviceSetVgpuSchedulerState(p_scheduler_state: *mut nvmlVgpuSchedulerSetState_t);
    nvmlDeviceGetVgpuUtilization(
        last_seen_time_stamp: c_ulonglong,
        sample_val_type: *mut nvmlValueType_t,
        vgpu_instance_samples_count: *mut c_uint,
        utilization_samples: *mut nvmlVgpuInstanceUtilizationSample_t
    );
    nvmlDeviceGetVgpuInstancesUtilizationInfo(
        vgpu_util_info: *mut nvmlVgpuInstancesUtilizationInfo_t
    );
    nvmlDeviceGetVgpuProcessUtilization(
        last_seen_time_stamp: c_ulonglong,
        vgpu_process_samples_count: *mut c_uint,
        utilization_samples: *mut nvmlVgpuProcessUtilizationSample_t
    );
    nvmlDeviceGetVgpuProcessesUtilizationInfo(
        vgpu_proc_util_info: *mut nvmlVgpuProcessesUtilizationInfo_t
    );
    nvmlDeviceSetMigMode(mode: c_uint, activation_status: *mut nvmlReturn_t);
    nvmlDeviceGetMigMode(current_mode: *mut c_uint, pending_mode: *mut c_uint);
    nvmlDeviceGetGpuInstanceProfileInfo(profile: c_uint, info: *mut nvmlGpuInstanceProfileInfo_t);
    nvmlDeviceGetGpuInstanceProfileInfoV(
        profile: c_uint,
        info: *mut nvmlGpuInstanceProfileInfo_v2_t
    );
    nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        profile_id: c_uint,
        placements: *mut nvmlGpuInstancePlacement_t,
        count: *mut c_uint
    );
    nvmlDeviceGetGpuInstanceRemainingCapacity(profile_id: c_uint, count: *mut c_uint);
    nvmlDeviceCreateGpuInstance(profile_id: c_uint, gpu_instance: *mut nvmlGpuInstance_t);
    nvmlDeviceCreateGpuInstanceWithPlacement(
        profile_id: c_uint,
        placement: *const nvmlGpuInstancePlacement_t,
        gpu_instance: *mut nvmlGpuInstance_t
    );
    nvmlDeviceGetGpuInstances(
        profile_id: c_uint,
        gpu_instances: *mut nvmlGpuInstance_t,
        count: *mut c_uint
    );
    nvmlDeviceGetGpuInstanceById(id: c_uint, gpu_instance: *mut nvmlGpuInstance_t);
    nvmlDeviceIsMigDeviceHandle(is_mig_device: *mut c_uint);
    nvmlDeviceGetGpuInstanceId(id: *mut c_uint);
    nvmlDeviceGetComputeInstanceId(id: *mut c_uint);
    nvmlDeviceGetMaxMigDeviceCount(count: *mut c_uint);
    nvmlGpmSampleGet(gpm_sample: nvmlGpmSample_t);
    nvmlGpmMigSampleGet(gpu_instance_id: c_uint, gpm_sample: nvmlGpmSample_t);
    nvmlGpmQueryDeviceSupport(gpm_support: *mut nvmlGpmSupport_t);
    nvmlGpmQueryIfStreamingEnabled(state: *mut c_uint);
    nvmlGpmSetStreamingEnabled(state: c_uint);
    nvmlDeviceGetCapabilities(caps: *mut nvmlDeviceCapabilities_t);
    nvmlDeviceWorkloadPowerProfileGetProfilesInfo(
        profiles_info: *mut nvmlWorkloadPowerProfileProfilesInfo_t
    );
    nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(
        current_profiles: *mut nvmlWorkloadPowerProfileCurrentProfiles_t
    );
    nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(
        requested_profiles: *mut nvmlWorkloadPowerProfileRequestedProfiles_t
    );
    nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(
        requested_profiles: *mut nvmlWorkloadPowerProfileRequestedProfiles_t
    );
    nvmlDevicePowerSmoothingActivatePresetProfile(profile: *mut nvmlPowerSmoothingProfile_t);
    nvmlDevicePowerSmoothingUpdatePresetProfileParam(profile: *mut nvmlPowerSmoothingProfile_t);
    nvmlDevicePowerSmoothingSetState(state: *mut nvmlPowerSmoothingState_t);
    nvmlDeviceGetPciInfo(pci: *mut nvmlPciInfo_t);
    nvmlDeviceGetPciInfo_v2(pci: *mut nvmlPciInfo_t);
    nvmlDeviceGetNvLinkRemotePciInfo(link: c_uint, pci: *mut nvmlPciInfo_t);
    nvmlDeviceGetGridLicensableFeatures(
        p_grid_licensable_features: *mut nvmlGridLicensableFeatures_t
    );
    nvmlDeviceGetGridLicensableFeatures_v2(
        p_grid_licensable_features: *mut nvmlGridLicensableFeatures_t
    );
    nvmlDeviceGetGridLicensableFeatures_v3(
        p_grid_licensable_features: *mut nvmlGridLicensableFeatures_t
    );
    nvmlDeviceGetAttributes(attributes: *mut nvmlDeviceAttributes_t);
    nvmlDeviceGetGpuInstancePossiblePlacements(
        profile_id: c_uint,
        placements: *mut nvmlGpuInstancePlacement_t,
        count: *mut c_uint
    );
    nvmlDeviceGetDriverModel(current: *mut nvmlDriverModel_t, pending: *mut nvmlDriverModel_t);
}
