//! The lists NVML gives of a GPU's processes, their samples, sessions and accounting:
//! a tenant sees its own process only (NVML's whole list read into a buffer of this
//! module's own, so that neither its length nor other processes' entries reach it).
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::*;

/// A list NVML fills (`count` entries of `T` at most), with only the entries `keep`
/// accepts handed to the program: NVML's full list is read into a buffer of this
/// module's own (so that neither its length nor its entries reach the program), then
/// what is kept copied out as NVML would — `NVML_ERROR_INSUFFICIENT_SIZE` and the
/// length needed when the program's array is too small.
pub(super) fn filtered_list<T: Copy>(
    count: *mut c_uint,
    out: *mut T,
    keep: impl Fn(&T) -> bool,
    mut fill: impl FnMut(&mut c_uint, *mut T) -> nvmlReturn_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return code::INVALID_ARGUMENT;
    }
    let mut capacity: c_uint = 64;
    let kept: Vec<T> = loop {
        let mut buf: Vec<T> = Vec::with_capacity(capacity as usize);
        let mut n = capacity;
        let r = fill(&mut n, buf.as_mut_ptr());
        match r {
            code::SUCCESS => {
                // SAFETY: NVML wrote `n` entries, at most the capacity given.
                unsafe { buf.set_len((n as usize).min(capacity as usize)) };
                break buf.into_iter().filter(|e| keep(e)).collect();
            }
            code::INSUFFICIENT_SIZE if n > capacity && capacity < 1 << 16 => capacity = n,
            _ => return r,
        }
    };
    // SAFETY: checked non-null: the caller's count word.
    let room = unsafe { *count } as usize;
    // SAFETY: as above.
    unsafe { *count = kept.len() as c_uint };
    if kept.is_empty() {
        return code::SUCCESS;
    }
    if room < kept.len() || out.is_null() {
        return code::INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller's array holds `room` >= kept.len() entries of T.
    unsafe { std::ptr::copy_nonoverlapping(kept.as_ptr(), out, kept.len()) };
    code::SUCCESS
}

/// Lists of a GPU's processes, or of their sessions, filtered to the tenant's own
/// process (`$what` says which, for the docs).
macro_rules! own_only {
    ($what:literal; $($name:ident: $info:ty;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: ", $what, " only.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(device: nvmlDevice_t, count: *mut c_uint, infos: *mut $info) -> nvmlReturn_t {
            guarded(stringify!($name), || match seen(device) {
                Seen::Unmanaged => nvml!($name(device, count, infos)),
                Seen::Hidden => HIDDEN,
                Seen::Mine(v, _) => filtered_list(count, infos, |p: &$info| p.pid == v.pid, |n, buf| {
                    nvml!($name(device, n, buf))
                }),
            })
        }
    )*};
}
own_only! {
    "the tenant's own process";
    nvmlDeviceGetComputeRunningProcesses: nvmlProcessInfo_v1_t;
    nvmlDeviceGetComputeRunningProcesses_v2: nvmlProcessInfo_t;
    nvmlDeviceGetComputeRunningProcesses_v3: nvmlProcessInfo_t;
    nvmlDeviceGetGraphicsRunningProcesses: nvmlProcessInfo_v1_t;
    nvmlDeviceGetGraphicsRunningProcesses_v2: nvmlProcessInfo_t;
    nvmlDeviceGetGraphicsRunningProcesses_v3: nvmlProcessInfo_t;
    nvmlDeviceGetMPSComputeRunningProcesses: nvmlProcessInfo_v1_t;
    nvmlDeviceGetMPSComputeRunningProcesses_v2: nvmlProcessInfo_t;
    nvmlDeviceGetMPSComputeRunningProcesses_v3: nvmlProcessInfo_t;
}

/// `nvmlDeviceGetRunningProcessDetailList`: the tenant's own process only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetRunningProcessDetailList(
    device: nvmlDevice_t,
    list: *mut nvmlProcessDetailList_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetRunningProcessDetailList", || {
        let v = match seen(device) {
            Seen::Unmanaged => return nvml!(nvmlDeviceGetRunningProcessDetailList(device, list)),
            Seen::Hidden => return HIDDEN,
            Seen::Mine(v, _) => v,
        };
        if list.is_null() {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: checked non-null; the caller's list header.
        let caller = unsafe { &mut *list };
        let out = caller.procArray;
        let mut count = caller.numProcArrayEntries;
        let r = filtered_list(
            &mut count,
            out,
            |p: &nvmlProcessDetail_v1_t| p.pid == v.pid,
            |n, buf| {
                let mut mine = *caller;
                (mine.numProcArrayEntries, mine.procArray) = (*n, buf);
                let r = nvml!(nvmlDeviceGetRunningProcessDetailList(device, &mut mine));
                *n = mine.numProcArrayEntries;
                r
            },
        );
        caller.numProcArrayEntries = count;
        r
    })
}

/// `nvmlDeviceGetProcessUtilization`: samples of the tenant's own process only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetProcessUtilization", || match seen(device) {
        Seen::Unmanaged => {
            nvml!(nvmlDeviceGetProcessUtilization(device, samples, count, last_seen))
        }
        Seen::Hidden => HIDDEN,
        Seen::Mine(v, _) => filtered_list(
            count,
            samples,
            |s: &nvmlProcessUtilizationSample_t| s.pid == v.pid,
            |n, buf| nvml!(nvmlDeviceGetProcessUtilization(device, buf, n, last_seen)),
        ),
    })
}

/// `nvmlDeviceGetProcessesUtilizationInfo`: samples of the tenant's own process only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetProcessesUtilizationInfo(
    device: nvmlDevice_t,
    info: *mut nvmlProcessesUtilizationInfo_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetProcessesUtilizationInfo", || {
        let v = match seen(device) {
            Seen::Unmanaged => return nvml!(nvmlDeviceGetProcessesUtilizationInfo(device, info)),
            Seen::Hidden => return HIDDEN,
            Seen::Mine(v, _) => v,
        };
        if info.is_null() {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: checked non-null; the caller's header.
        let caller = unsafe { &mut *info };
        let out = caller.procUtilArray;
        let mut count = caller.processSamplesCount;
        let r = filtered_list(
            &mut count,
            out,
            |s: &nvmlProcessUtilizationInfo_v1_t| s.pid == v.pid,
            |n, buf| {
                let mut mine = *caller;
                (mine.processSamplesCount, mine.procUtilArray) = (*n, buf);
                let r = nvml!(nvmlDeviceGetProcessesUtilizationInfo(device, &mut mine));
                *n = mine.processSamplesCount;
                r
            },
        );
        caller.processSamplesCount = count;
        r
    })
}

/// `nvmlDeviceGetAccountingPids`: the tenant's own process only.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetAccountingPids(
    device: nvmlDevice_t,
    count: *mut c_uint,
    pids: *mut c_uint,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetAccountingPids", || match seen(device) {
        Seen::Unmanaged => nvml!(nvmlDeviceGetAccountingPids(device, count, pids)),
        Seen::Hidden => HIDDEN,
        Seen::Mine(v, _) => filtered_list(
            count,
            pids,
            |p: &c_uint| *p == v.pid,
            |n, buf| nvml!(nvmlDeviceGetAccountingPids(device, n, buf)),
        ),
    })
}

// Encoder and frame-buffer-capture sessions: the tenant's own process's only.
own_only! {
    "the tenant's own process's sessions";
    nvmlDeviceGetEncoderSessions: nvmlEncoderSessionInfo_t;
    nvmlDeviceGetFBCSessions: nvmlFBCSessionInfo_t;
}

/// `nvmlDeviceGetAccountingStats`: of the tenant's own process only (another pid is
/// `NVML_ERROR_NOT_FOUND`, as a process NVML has no record of).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetAccountingStats(
    device: nvmlDevice_t,
    pid: c_uint,
    stats: *mut nvmlAccountingStats_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetAccountingStats", || match seen(device) {
        Seen::Hidden => HIDDEN,
        Seen::Mine(v, _) if pid != v.pid => code::NOT_FOUND,
        _ => nvml!(nvmlDeviceGetAccountingStats(device, pid, stats)),
    })
}
