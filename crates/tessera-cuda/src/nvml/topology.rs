//! Topology look-ups (GPUs near a CPU, nearest GPUs, a unit's GPUs) and entry points
//! relating two GPUs: the tenant's GPUs only.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::*;

/// A topology look-up's list (`count` zero: how many there are; else up to `count`
/// handles), with only the tenant's GPUs in it: NVML's whole list is read into a buffer
/// of this module's own (neither its length nor its handles reach the program), then
/// what is kept is handed out as NVML would.
pub(super) fn topology_list(
    v: &View,
    count: *mut c_uint,
    out: *mut nvmlDevice_t,
    mut fill: impl FnMut(&mut c_uint, *mut nvmlDevice_t) -> nvmlReturn_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return code::INVALID_ARGUMENT;
    }
    let mut n: c_uint = 0;
    let r = fill(&mut n, std::ptr::null_mut());
    if r != code::SUCCESS {
        return r;
    }
    let mut all: Vec<nvmlDevice_t> = vec![std::ptr::null_mut(); n as usize];
    if n > 0 {
        let r = fill(&mut n, all.as_mut_ptr());
        if r != code::SUCCESS {
            return r;
        }
        all.truncate(n as usize);
    }
    let kept: Vec<nvmlDevice_t> = all.into_iter().filter(|h| v.shows(*h)).collect();
    // SAFETY: checked non-null: the caller's count word.
    let room = unsafe { *count } as usize;
    if room == 0 {
        // SAFETY: as above.
        unsafe { *count = kept.len() as c_uint };
        return code::SUCCESS;
    }
    if out.is_null() {
        return code::INVALID_ARGUMENT;
    }
    let given = kept.len().min(room);
    // SAFETY: the caller's array holds `room` >= `given` handles; its count word.
    unsafe {
        std::ptr::copy_nonoverlapping(kept.as_ptr(), out, given);
        *count = given as c_uint;
    }
    code::SUCCESS
}

/// `nvmlSystemGetTopologyGpuSet`: the GPUs near a CPU, the tenant's only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlSystemGetTopologyGpuSet(
    cpu: c_uint,
    count: *mut c_uint,
    devices: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guarded("nvmlSystemGetTopologyGpuSet", || match view() {
        None => nvml!(nvmlSystemGetTopologyGpuSet(cpu, count, devices)),
        Some(v) => topology_list(&v, count, devices, |n, buf| {
            nvml!(nvmlSystemGetTopologyGpuSet(cpu, n, buf))
        }),
    })
}

/// `nvmlDeviceGetTopologyNearestGpus`: the GPUs nearest one of the tenant's, the
/// tenant's only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetTopologyNearestGpus(
    device: nvmlDevice_t,
    level: nvmlGpuTopologyLevel_t,
    count: *mut c_uint,
    devices: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetTopologyNearestGpus", || match seen(device) {
        Seen::Unmanaged => nvml!(nvmlDeviceGetTopologyNearestGpus(device, level, count, devices)),
        Seen::Hidden => HIDDEN,
        Seen::Mine(v, _) => topology_list(&v, count, devices, |n, buf| {
            nvml!(nvmlDeviceGetTopologyNearestGpus(device, level, n, buf))
        }),
    })
}

/// `nvmlUnitGetDevices` (S-class units): the unit's GPUs, the tenant's only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlUnitGetDevices(
    unit: nvmlUnit_t,
    count: *mut c_uint,
    devices: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guarded("nvmlUnitGetDevices", || match view() {
        None => nvml!(nvmlUnitGetDevices(unit, count, devices)),
        Some(v) => filtered_list(
            count,
            devices,
            |h: &nvmlDevice_t| v.shows(*h),
            |n, buf| nvml!(nvmlUnitGetDevices(unit, n, buf)),
        ),
    })
}

/// An entry point that relates two GPUs: both must be the tenant's.
macro_rules! device_pair {
    ($($name:ident ( $($arg:ident : $ty:ty),* );)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: of two of the tenant's GPUs only.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(device1: nvmlDevice_t, device2: nvmlDevice_t $(, $arg: $ty)*) -> nvmlReturn_t {
            guarded(stringify!($name), || match (seen(device1), seen(device2)) {
                (Seen::Hidden, _) | (_, Seen::Hidden) => HIDDEN,
                _ => nvml!($name(device1, device2 $(, $arg)*)),
            })
        }
    )*};
}
device_pair! {
    nvmlDeviceOnSameBoard(same: *mut c_int);
    nvmlDeviceGetTopologyCommonAncestor(level: *mut nvmlGpuTopologyLevel_t);
    nvmlDeviceGetP2PStatus(index: nvmlGpuP2PCapsIndex_t, status: *mut nvmlGpuP2PStatus_t);
}
