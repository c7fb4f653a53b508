//! NVML (`libnvidia-ml.so.1`) as a tenant sees it. Monitoring tools and frameworks
//! read NVML, not the CUDA driver; under the interposer they see what the CUDA side
//! shows the program:
//!
//! - devices: only the GPUs the daemon placed the tenant on, numbered as the program's
//!   CUDA ordinals (NVML itself ignores `CUDA_VISIBLE_DEVICES`). Every entry point that
//!   hands out a device handle is governed: a look-up by index, UUID, PCI bus id or
//!   serial of any other GPU finds nothing, the topology look-ups and a unit's GPUs
//!   list the tenant's GPUs only, a MIG device's handle is refused (whole GPUs are
//!   placed), a GPU instance, compute instance or event of another GPU is not found;
//!   and every entry point that takes a handle refuses one of another GPU (which the
//!   program could only have forged), those not governed otherwise in `devices`;
//! - memory: the figures `cuMemGetInfo` gives (the tenant's limit and what it holds,
//!   or the GPU's capacity and what the ledger has not granted);
//! - processes: the tenant's own process only;
//! - utilization: the share of the daemon's last busy window the GPU spent on this
//!   tenant's work, as the daemon charged it (see `proto::TenantReport::gpu_busy`);
//! - everything else: NVML's own answer.
//!
//! `nvmlInit` makes the process a tenant, as `cuInit` does (whichever comes first
//! registers; the other finds it registered), so that a program that reads NVML
//! before it initialises CUDA sees its share too. Reached however a program loads
//! NVML: linked (the exports here), or `dlopen` + `dlsym` (the `dlsym` export answers
//! these hooks for NVML's names). The real library is opened privately by path
//! (`TESSERA_NVML`). Only ever run against the fake NVML (`fake_libnvml.c`, compiled
//! against NVIDIA's real `nvml.h`).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry NVML's own names
#![allow(non_snake_case)]

use crate::state::{complain, state};
use crate::tenant::Tenant;
use nvml_wrapper_sys::bindings::{
    NvmlLib, nvmlAccountingStats_t, nvmlComputeInstance_t, nvmlComputeInstanceInfo_t, nvmlDevice_t,
    nvmlEncoderSessionInfo_t, nvmlEventData_t, nvmlEventSet_t, nvmlFBCSessionInfo_t,
    nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t,
    nvmlGpuTopologyLevel_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlProcessDetail_v1_t,
    nvmlProcessDetailList_t, nvmlProcessInfo_t, nvmlProcessInfo_v1_t,
    nvmlProcessUtilizationInfo_v1_t, nvmlProcessUtilizationSample_t,
    nvmlProcessesUtilizationInfo_t, nvmlReturn_t, nvmlUnit_t, nvmlUtilization_t,
};
use std::cell::Cell;
use std::ffi::c_int;
use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// NVML's return codes the hooks give.
mod code {
    pub use b::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND as FUNCTION_NOT_FOUND;
    pub use b::nvmlReturn_enum_NVML_ERROR_GPU_NOT_FOUND as GPU_NOT_FOUND;
    pub use b::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE;
    pub use b::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT;
    pub use b::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND as LIBRARY_NOT_FOUND;
    pub use b::nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND;
    pub use b::nvmlReturn_enum_NVML_ERROR_NOT_READY as NOT_READY;
    pub use b::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED;
    pub use b::nvmlReturn_enum_NVML_ERROR_TIMEOUT as TIMEOUT;
    pub use b::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED as UNINITIALIZED;
    pub use b::nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN;
    pub use b::nvmlReturn_enum_NVML_SUCCESS as SUCCESS;
    use nvml_wrapper_sys::bindings as b;
}

/// `nvmlDeviceGetHandleByUUIDV` (NVML 12.8+, newer than the bindings): its argument
/// is passed on untouched, so its struct's layout does not matter here.
type ByUuidV = unsafe extern "C" fn(*const c_void, *mut nvmlDevice_t) -> nvmlReturn_t;

/// The real NVML.
struct RealNvml {
    lib: NvmlLib,
    by_uuid_v: Option<ByUuidV>,
}

thread_local! {
    /// Set while this thread resolves the real library's symbols: the `dlsym` export
    /// must then answer NVML's own functions, not these hooks.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the `dlsym` export should pass an NVML name through (the real library's
/// symbols are being resolved).
pub fn resolving_real() -> bool {
    RESOLVING.with(Cell::get)
}

/// The real NVML, opened on first use, or why it cannot be.
fn real() -> Result<&'static RealNvml, nvmlReturn_t> {
    static REAL: OnceLock<Result<RealNvml, String>> = OnceLock::new();
    let loaded = REAL.get_or_init(|| {
        let path = match &state().config {
            Ok(c) => c.nvml.clone(),
            Err(_) => "libnvidia-ml.so.1".into(),
        };
        RESOLVING.with(|r| r.set(true));
        // SAFETY: loads NVML (its initialisers run, as in any program that uses it)
        // privately; the library is kept for the process's life inside the table.
        let lib = unsafe { NvmlLib::new(&path) };
        let lib = lib.map_err(|e| format!("cannot load NVML {}: {e}", path.display()));
        let loaded = lib.map(|lib| {
            // SAFETY: the symbol, if present, has the header's signature (ByUuidV).
            let by_uuid_v =
                unsafe { lib.__library.get::<ByUuidV>(b"nvmlDeviceGetHandleByUUIDV\0") }
                    .ok()
                    .map(|s| *s);
            RealNvml { lib, by_uuid_v }
        });
        RESOLVING.with(|r| r.set(false));
        loaded
    });
    loaded.as_ref().map_err(|why| {
        complain(why);
        code::LIBRARY_NOT_FOUND
    })
}

/// Call the real NVML's `$name` with `$args`, or answer why it cannot be.
macro_rules! nvml {
    ($name:ident ( $($arg:expr),* )) => {
        match real() {
            Ok(r) => match &r.lib.$name {
                // SAFETY: NVML's own entry point, with the caller's arguments (the
                // program's, or ones this module made for it).
                Ok(f) => unsafe { f($($arg),*) },
                Err(_) => code::FUNCTION_NOT_FOUND,
            },
            Err(e) => e,
        }
    };
}

/// Run a hook body; a panic becomes `NVML_ERROR_UNKNOWN` and one line on stderr.
fn guarded(name: &str, body: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            complain(&format!("internal error in {name}; the call failed"));
            code::UNKNOWN
        }
    }
}

/// What the tenant sees of NVML: its GPUs in the program's order.
struct View {
    /// The tenant it was made for (a forked child's tenant is another).
    tenant: u64,
    /// Per program ordinal: NVML's handle of the GPU (as a number), the driver's
    /// ordinal and the node's GPU index.
    gpus: Vec<(usize, u32, u32)>,
    /// The tenant's process as NVML lists it.
    pid: u32,
}

/// The calling process's view, when it is a tenant (`None`: unmanaged, every call
/// passes through). Made on first use after NVML was initialised, from the tenant's
/// placement: each GPU found by the UUID the daemon gave, else by the node index
/// (which the daemon and NVML share when it has no UUIDs).
fn view() -> Option<Arc<View>> {
    static VIEW: Mutex<Option<Arc<View>>> = Mutex::new(None);
    let tenant = state().tenant()?;
    let mut slot = VIEW.lock().ok()?;
    if let Some(v) = slot.as_ref()
        && v.tenant == tenant.id()
    {
        return Some(Arc::clone(v));
    }
    let made = Arc::new(make_view(tenant)?);
    *slot = Some(Arc::clone(&made));
    Some(made)
}

fn make_view(t: &Tenant) -> Option<View> {
    let mut gpus = Vec::new();
    for &ordinal in &t.placed {
        let ordinal = u32::try_from(ordinal).ok()?;
        let node = t.node(ordinal);
        let mut handle: nvmlDevice_t = std::ptr::null_mut();
        let uuid = if t.nodes.is_empty() { None } else { t.uuids.get(ordinal as usize) };
        let r = match uuid.and_then(|u| std::ffi::CString::new(u.as_str()).ok()) {
            Some(u) => nvml!(nvmlDeviceGetHandleByUUID(u.as_ptr(), &mut handle)),
            None => nvml!(nvmlDeviceGetHandleByIndex_v2(node, &mut handle)),
        };
        match r {
            code::SUCCESS => gpus.push((handle as usize, ordinal, node)),
            // not initialised yet: made again on the next call
            code::UNINITIALIZED => return None,
            e => complain(&format!(
                "NVML does not know GPU {node} ({}) that tesserad placed this program on \
                 (NVML error {e}); it is left out of NVML's device list",
                uuid.map_or("no UUID", String::as_str)
            )),
        }
    }
    state().log(format_args!("nvml: tenant {} sees {:?}", t.id(), gpus));
    Some(View { tenant: t.id(), gpus, pid: t.node_pid })
}

impl View {
    /// The program's ordinal of NVML's `handle`, if it is one of the tenant's GPUs.
    fn ordinal(&self, handle: nvmlDevice_t) -> Option<usize> {
        self.gpus.iter().position(|g| g.0 == handle as usize)
    }

    /// Whether `handle` is one of the tenant's GPUs.
    fn shows(&self, handle: nvmlDevice_t) -> bool {
        self.ordinal(handle).is_some()
    }
}

/// A device handle a program gave a hook, as the tenant's view sees it.
enum Seen {
    /// Not a tenant (or its view is not made yet): NVML's own answer.
    Unmanaged,
    /// One of the tenant's GPUs: the view and the program's ordinal of it.
    Mine(Arc<View>, usize),
    /// Any other: a GPU the tenant is not placed on, or no GPU at all. Every route to a
    /// handle is governed, so the program can hold one only by forging it; it is
    /// refused as NVML refuses a handle that is not a device's.
    Hidden,
}

fn seen(handle: nvmlDevice_t) -> Seen {
    let Some(v) = view() else { return Seen::Unmanaged };
    match v.ordinal(handle) {
        Some(i) => Seen::Mine(v, i),
        None => Seen::Hidden,
    }
}

/// What a hook answers for a [`Seen::Hidden`] handle: `NVML_ERROR_INVALID_ARGUMENT`, as
/// for a handle that is no device's (which GPU it names, if any, is not told).
const HIDDEN: nvmlReturn_t = code::INVALID_ARGUMENT;

/// Refuse `name` for a tenant, with one line (once per entry point and process).
fn refused(name: &str, said: &AtomicBool, why: &str) -> nvmlReturn_t {
    if !said.swap(true, Ordering::Relaxed) {
        complain(&format!("{name} is refused: {why}"));
    }
    code::NOT_SUPPORTED
}

/// `nvmlInit` and its variants: NVML's own, then the process becomes a tenant (if
/// `cuInit` has not made it one already). A process that cannot become one (no daemon,
/// refused) gets an error, as from `cuInit`, unless passthrough is allowed.
fn init(name: &str, real_init: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    guarded(name, || {
        let r = real_init();
        if r != code::SUCCESS {
            return r;
        }
        let st = state();
        let became = match st.init_lock.lock() {
            Ok(_once) => st.become_tenant(),
            Err(_) => Err(tessera_driver::status::UNKNOWN),
        };
        match became {
            Ok(()) => {
                let _ = view();
                code::SUCCESS
            }
            Err(e) => {
                // the real library's reference is given back: the program sees a failed
                // initialisation, as from cuInit
                let _ = nvml!(nvmlShutdown());
                match e {
                    tessera_driver::status::NO_DEVICE => code::GPU_NOT_FOUND,
                    crate::state::SYSTEM_NOT_READY => code::NOT_READY,
                    _ => code::UNKNOWN,
                }
            }
        }
    })
}

/// `nvmlInit_v2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init("nvmlInit_v2", || nvml!(nvmlInit_v2()))
}

/// `nvmlInit` (NVML's first version).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    init("nvmlInit", || nvml!(nvmlInit()))
}

/// `nvmlInitWithFlags`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlInitWithFlags(flags: c_uint) -> nvmlReturn_t {
    init("nvmlInitWithFlags", || nvml!(nvmlInitWithFlags(flags)))
}

/// `nvmlDeviceGetCount_v2`: how many GPUs the tenant was placed on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    guarded("nvmlDeviceGetCount", || {
        let r = nvml!(nvmlDeviceGetCount_v2(count));
        if r == code::SUCCESS
            && !count.is_null()
            && let Some(v) = view()
        {
            // SAFETY: checked non-null; the real call just wrote it.
            unsafe { *count = v.gpus.len() as c_uint };
        }
        r
    })
}

/// `nvmlDeviceGetCount` (the first version): as `nvmlDeviceGetCount_v2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> nvmlReturn_t {
    nvmlDeviceGetCount_v2(count)
}

/// `nvmlDeviceGetHandleByIndex_v2`: the program's index i is the i-th GPU it was
/// placed on (NVML's own handle, so names, UUIDs and PCI ids stay consistent).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetHandleByIndex", || {
        let Some(v) = view() else { return nvml!(nvmlDeviceGetHandleByIndex_v2(index, device)) };
        if device.is_null() {
            return code::INVALID_ARGUMENT;
        }
        match v.gpus.get(index as usize) {
            Some((handle, _, _)) => {
                // SAFETY: checked non-null; the caller's output word.
                unsafe { *device = *handle as nvmlDevice_t };
                code::SUCCESS
            }
            None => code::INVALID_ARGUMENT,
        }
    })
}

/// `nvmlDeviceGetHandleByIndex` (the first version): as the second.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    nvmlDeviceGetHandleByIndex_v2(index, device)
}

/// A look-up by name (UUID, PCI bus id, serial): NVML's answer, if it is one of the
/// tenant's GPUs; `NVML_ERROR_NOT_FOUND` for the others.
fn look_up(
    name: &str,
    device: *mut nvmlDevice_t,
    real: impl FnOnce() -> nvmlReturn_t,
) -> nvmlReturn_t {
    guarded(name, || {
        let r = real();
        if r != code::SUCCESS || device.is_null() {
            return r;
        }
        let Some(v) = view() else { return r };
        // SAFETY: checked non-null; the real call just wrote it.
        let found = unsafe { *device };
        if v.ordinal(found).is_some() {
            return r;
        }
        // SAFETY: as above; the hidden GPU's handle is not handed out
        unsafe { *device = std::ptr::null_mut() };
        code::NOT_FOUND
    })
}

/// `nvmlDeviceGetHandleByUUID`: only a GPU the tenant was placed on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    look_up("nvmlDeviceGetHandleByUUID", device, || nvml!(nvmlDeviceGetHandleByUUID(uuid, device)))
}

/// `nvmlDeviceGetHandleByUUIDV` (a UUID as a versioned struct): as by UUID.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleByUUIDV(
    uuid: *const c_void,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    look_up("nvmlDeviceGetHandleByUUIDV", device, || match real() {
        Ok(RealNvml { by_uuid_v: Some(f), .. }) => {
            // SAFETY: NVML's own entry point with the caller's arguments.
            unsafe { f(uuid, device) }
        }
        Ok(_) => code::FUNCTION_NOT_FOUND,
        Err(e) => e,
    })
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: only a GPU the tenant was placed on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    look_up("nvmlDeviceGetHandleByPciBusId", device, || {
        nvml!(nvmlDeviceGetHandleByPciBusId_v2(bus_id, device))
    })
}

/// `nvmlDeviceGetHandleByPciBusId` (the first version): only a GPU the tenant was
/// placed on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    look_up("nvmlDeviceGetHandleByPciBusId", device, || {
        nvml!(nvmlDeviceGetHandleByPciBusId(bus_id, device))
    })
}

/// `nvmlDeviceGetHandleBySerial`: only a GPU the tenant was placed on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetHandleBySerial(
    serial: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    look_up("nvmlDeviceGetHandleBySerial", device, || {
        nvml!(nvmlDeviceGetHandleBySerial(serial, device))
    })
}

/// `nvmlDeviceGetIndex`: the program's index of one of its GPUs.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    guarded("nvmlDeviceGetIndex", || {
        let Some(v) = view() else { return nvml!(nvmlDeviceGetIndex(device, index)) };
        match (v.ordinal(device), index.is_null()) {
            (Some(i), false) => {
                // SAFETY: checked non-null; the caller's output word.
                unsafe { *index = i as c_uint };
                code::SUCCESS
            }
            _ => code::INVALID_ARGUMENT,
        }
    })
}

/// The tenant's (free, total) on its GPU `ordinal` (the driver's), as `cuMemGetInfo`
/// reports it, capped by NVML's own figures.
fn tenant_memory(ordinal: u32, real_free: u64, real_total: u64) -> Option<(u64, u64)> {
    let (free, total) = state().tenant()?.memory_info(ordinal)?;
    Some((free.min(real_free), total.min(real_total)))
}

/// `nvmlDeviceGetMemoryInfo`: the tenant's share — the figures `cuMemGetInfo` gives
/// (free, total), and used = total - free.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetMemoryInfo", || {
        let mine = match seen(device) {
            Seen::Hidden => return HIDDEN,
            Seen::Mine(v, i) => Some(v.gpus[i].1),
            Seen::Unmanaged => None,
        };
        let r = nvml!(nvmlDeviceGetMemoryInfo(device, memory));
        if r != code::SUCCESS || memory.is_null() {
            return r;
        }
        let Some(ordinal) = mine else { return r };
        // SAFETY: checked non-null; the real call just filled it.
        let m = unsafe { &mut *memory };
        if let Some((free, total)) = tenant_memory(ordinal, m.free, m.total) {
            (m.free, m.total, m.used) = (free, total, total - free);
        }
        r
    })
}

/// `nvmlDeviceGetMemoryInfo_v2`: as the first version, with nothing reserved (the
/// tenant's share has no system reservation in it).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetMemoryInfo_v2", || {
        let mine = match seen(device) {
            Seen::Hidden => return HIDDEN,
            Seen::Mine(v, i) => Some(v.gpus[i].1),
            Seen::Unmanaged => None,
        };
        let r = nvml!(nvmlDeviceGetMemoryInfo_v2(device, memory));
        if r != code::SUCCESS || memory.is_null() {
            return r;
        }
        let Some(ordinal) = mine else { return r };
        // SAFETY: checked non-null; the real call just filled it.
        let m = unsafe { &mut *memory };
        if let Some((free, total)) = tenant_memory(ordinal, m.free, m.total) {
            (m.free, m.total, m.used, m.reserved) = (free, total, total - free, 0);
        }
        r
    })
}

/// `nvmlDeviceGetUtilizationRates`: `gpu` is the percentage of the daemon's last busy
/// window the GPU ran this tenant's work; `memory` NVML's memory figure scaled by the
/// tenant's part of the GPU's busy time (its traffic, if traffic follows time).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    guarded("nvmlDeviceGetUtilizationRates", || {
        let node = match seen(device) {
            Seen::Hidden => return HIDDEN,
            Seen::Mine(v, i) => Some(v.gpus[i].2),
            Seen::Unmanaged => None,
        };
        let r = nvml!(nvmlDeviceGetUtilizationRates(device, utilization));
        if r != code::SUCCESS || utilization.is_null() {
            return r;
        }
        let Some(node) = node else { return r };
        let Some(t) = state().tenant() else { return r };
        let busy = match recent_busy(t) {
            Ok(b) => b.get(&node).copied().unwrap_or(0.0),
            Err(_) => return code::UNKNOWN,
        };
        // SAFETY: checked non-null; the real call just filled it.
        let u = unsafe { &mut *utilization };
        let mine = (busy * 100.0).round().clamp(0.0, 100.0) as c_uint;
        u.memory = if u.gpu == 0 {
            0
        } else {
            (f64::from(u.memory) * (f64::from(mine) / f64::from(u.gpu)).min(1.0)).round() as c_uint
        };
        u.gpu = mine;
        r
    })
}

/// How long an answer of the daemon's about the tenant's GPU time stands: a program
/// polling NVML in a loop asks the daemon at most this often (NVML's own utilization
/// is sampled every 1/6 s to 1 s).
const BUSY_ASKED_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// [`Tenant::recent_busy`], asked of the daemon at most every [`BUSY_ASKED_EVERY`].
fn recent_busy(
    t: &Tenant,
) -> Result<std::collections::HashMap<u32, f64>, tessera_driver::CuResult> {
    type Answer = (u64, std::time::Instant, std::collections::HashMap<u32, f64>);
    static LAST: Mutex<Option<Answer>> = Mutex::new(None);
    if let Ok(last) = LAST.lock()
        && let Some((tenant, at, busy)) = last.as_ref()
        && *tenant == t.id()
        && at.elapsed() < BUSY_ASKED_EVERY
    {
        return Ok(busy.clone());
    }
    let busy = t.recent_busy()?;
    if let Ok(mut last) = LAST.lock() {
        *last = Some((t.id(), std::time::Instant::now(), busy.clone()));
    }
    Ok(busy)
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`: refused for a tenant — tesserad places a
/// program on whole GPUs, and a MIG device's handle would be one outside its view.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    static SAID: AtomicBool = AtomicBool::new(false);
    guarded("nvmlDeviceGetMigDeviceHandleByIndex", || match seen(device) {
        Seen::Unmanaged => nvml!(nvmlDeviceGetMigDeviceHandleByIndex(device, index, mig)),
        Seen::Hidden => HIDDEN,
        Seen::Mine(..) => refused(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            &SAID,
            "tesserad places a program on whole GPUs; it sees no MIG device",
        ),
    })
}

/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: only a GPU the tenant was placed
/// on.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    look_up("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", device, || {
        nvml!(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, device))
    })
}

/// An entry point that fills a struct naming a GPU (`$field`, its parent device) from
/// a handle of a GPU's part: answered only when it names one of the tenant's GPUs (the
/// part is reached from a device handle, which every hook checks; this is the second
/// lock), else the struct is cleared and `NVML_ERROR_NOT_FOUND` answered.
macro_rules! part_of_device {
    ($($name:ident ( $part:ident : $pty:ty, $info:ident : *mut $ity:ty ) . $field:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: of a part of one of the tenant's GPUs only.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name($part: $pty, $info: *mut $ity) -> nvmlReturn_t {
            guarded(stringify!($name), || {
                let r = nvml!($name($part, $info));
                if r != code::SUCCESS || $info.is_null() {
                    return r;
                }
                let Some(v) = view() else { return r };
                // SAFETY: checked non-null; the real call just filled it.
                if v.shows(unsafe { (*$info).$field }) {
                    return r;
                }
                // SAFETY: as above; a plain C struct, all zeroes valid
                unsafe { std::ptr::write_bytes($info, 0, 1) };
                code::NOT_FOUND
            })
        }
    )*};
}
part_of_device! {
    nvmlGpuInstanceGetInfo(instance: nvmlGpuInstance_t, info: *mut nvmlGpuInstanceInfo_t).device;
    nvmlComputeInstanceGetInfo(instance: nvmlComputeInstance_t, info: *mut nvmlComputeInstanceInfo_t).device;
    nvmlComputeInstanceGetInfo_v2(instance: nvmlComputeInstance_t, info: *mut nvmlComputeInstanceInfo_t).device;
}

/// An event wait: an event of a GPU outside the tenant's view (registering one needs
/// its handle, which every hook refuses; this is the second lock) is not handed out —
/// the wait answers `NVML_ERROR_TIMEOUT`, the event data cleared.
macro_rules! event_wait {
    ($($name:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: events of the tenant's GPUs only.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name(set: nvmlEventSet_t, data: *mut nvmlEventData_t, timeout_ms: c_uint) -> nvmlReturn_t {
            guarded(stringify!($name), || {
                let r = nvml!($name(set, data, timeout_ms));
                if r != code::SUCCESS || data.is_null() {
                    return r;
                }
                let Some(v) = view() else { return r };
                // SAFETY: checked non-null; the real call just filled it.
                if v.shows(unsafe { (*data).device }) {
                    return r;
                }
                // SAFETY: as above; a plain C struct, all zeroes valid
                unsafe { std::ptr::write_bytes(data, 0, 1) };
                code::TIMEOUT
            })
        }
    )*};
}
event_wait! {
    nvmlEventSetWait;
    nvmlEventSetWait_v2;
}

/// The governed entry points, named once: [`hook_for`] answers their hooks by name,
/// and `hooks_have_nvmls_signatures` (never called) makes the compiler check each
/// hook's signature against the bindings generated from `nvml.h` (`nvml-wrapper-sys`).
/// `nvmlDeviceGetHandleByUUIDV`, newer than the bindings, is added by hand.
macro_rules! governed_entry_points {
    ($($name:ident),* $(,)?) => {
        /// The hook for NVML's symbol `name`, if it is governed.
        pub fn hook_for(name: &[u8]) -> Option<*mut c_void> {
            $(if name == stringify!($name).as_bytes() {
                return Some($name as *mut c_void);
            })*
            if name == b"nvmlDeviceGetHandleByUUIDV" {
                return Some(nvmlDeviceGetHandleByUUIDV as *mut c_void);
            }
            devices::hook_for(name)
        }

        #[allow(dead_code)]
        fn hooks_have_nvmls_signatures(lib: &mut NvmlLib) {
            $(lib.$name = Ok($name);)*
        }
    };
}
governed_entry_points!(
    nvmlInit,
    nvmlInit_v2,
    nvmlInitWithFlags,
    nvmlDeviceGetCount,
    nvmlDeviceGetCount_v2,
    nvmlDeviceGetHandleByIndex,
    nvmlDeviceGetHandleByIndex_v2,
    nvmlDeviceGetHandleByUUID,
    nvmlDeviceGetHandleByPciBusId,
    nvmlDeviceGetHandleByPciBusId_v2,
    nvmlDeviceGetHandleBySerial,
    nvmlDeviceGetIndex,
    nvmlDeviceGetMemoryInfo,
    nvmlDeviceGetMemoryInfo_v2,
    nvmlDeviceGetUtilizationRates,
    nvmlDeviceGetComputeRunningProcesses,
    nvmlDeviceGetComputeRunningProcesses_v2,
    nvmlDeviceGetComputeRunningProcesses_v3,
    nvmlDeviceGetGraphicsRunningProcesses,
    nvmlDeviceGetGraphicsRunningProcesses_v2,
    nvmlDeviceGetGraphicsRunningProcesses_v3,
    nvmlDeviceGetMPSComputeRunningProcesses,
    nvmlDeviceGetMPSComputeRunningProcesses_v2,
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    nvmlDeviceGetRunningProcessDetailList,
    nvmlDeviceGetProcessUtilization,
    nvmlDeviceGetProcessesUtilizationInfo,
    nvmlDeviceGetAccountingPids,
    nvmlDeviceGetAccountingStats,
    nvmlDeviceGetEncoderSessions,
    nvmlDeviceGetFBCSessions,
    nvmlSystemGetTopologyGpuSet,
    nvmlDeviceGetTopologyNearestGpus,
    nvmlUnitGetDevices,
    nvmlDeviceOnSameBoard,
    nvmlDeviceGetTopologyCommonAncestor,
    nvmlDeviceGetP2PStatus,
    nvmlDeviceGetMigDeviceHandleByIndex,
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    nvmlGpuInstanceGetInfo,
    nvmlComputeInstanceGetInfo,
    nvmlComputeInstanceGetInfo_v2,
    nvmlEventSetWait,
    nvmlEventSetWait_v2,
);

mod devices;
mod processes;
mod topology;

use processes::*;
use topology::*;
