//! The real driver, reached without going through this library's own hooks: the
//! loader's `dlsym` (found with `dlvsym(RTLD_NEXT, ...)`, since this library exports a
//! `dlsym` of its own), and the driver opened privately by path.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_void};
use std::path::Path;
use std::sync::OnceLock;
use tessera_driver::DriverApi;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const libc::c_char) -> *mut c_void;

/// The loader's own `dlsym`.
pub fn real_dlsym() -> Option<DlsymFn> {
    static REAL: OnceLock<Option<usize>> = OnceLock::new();
    let addr = *REAL.get_or_init(|| {
        // glibc 2.34 and later export dlsym from libc at GLIBC_2.34; older ones from
        // libdl at GLIBC_2.2.5 (x86_64), still present as a compatibility version
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated strings; it only looks up.
            let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                return Some(p as usize);
            }
        }
        None
    });
    // SAFETY: the address is the loader's dlsym, whose C signature is DlsymFn.
    addr.map(|a| unsafe { std::mem::transmute::<usize, DlsymFn>(a) })
}

/// Tell the driver, before its first `cuInit`, to show this process only the GPUs in
/// `list` (`CUDA_VISIBLE_DEVICES`, which the driver reads when it initialises), so
/// that its ordinals are the ones the program uses.
pub fn show_driver_only(list: &str) {
    // SAFETY: setenv races with any other thread reading the environment at the same
    // moment. It runs inside the program's first cuInit, which the interposer
    // serialises, before the driver has started any thread of its own; a program
    // thread calling getenv at this instant is the remaining (unavoidable) risk, the
    // same as a program setting the variable itself before initialising CUDA.
    unsafe { std::env::set_var("CUDA_VISIBLE_DEVICES", list) };
}

/// The real driver: its handle, its entry points, and any symbol by name.
#[derive(Debug)]
pub struct RealDriver {
    handle: usize,
    /// The entry points tessera governs or calls, typed from `cuda.h`.
    pub api: DriverApi,
}

impl RealDriver {
    /// Open the driver at `path` privately (`RTLD_LOCAL`), so that its symbols are
    /// looked up in it and not in this library.
    pub fn open(path: &Path) -> Result<RealDriver, String> {
        let dlsym = real_dlsym().ok_or("the loader's dlsym cannot be found")?;
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{} has a NUL byte", path.display()))?;
        // SAFETY: dlopen of the CUDA driver runs its initialisers, as any CUDA program
        // does; the handle is never closed (the process uses the driver to its end).
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns null or a NUL-terminated message.
            let why = unsafe {
                let e = libc::dlerror();
                if e.is_null() {
                    "unknown".into()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                }
            };
            return Err(format!("cannot load the CUDA driver {}: {why}", path.display()));
        }
        // SAFETY: each answer is null or the driver's own symbol of that name; the
        // handle is never closed.
        let api = unsafe { DriverApi::resolve(|name| dlsym(handle, name.as_ptr())) };
        Ok(RealDriver { handle: handle as usize, api })
    }

    /// The driver's own symbol `name`, or null.
    pub fn symbol(&self, name: &CStr) -> *mut c_void {
        match real_dlsym() {
            // SAFETY: the handle is open for the process's life; look-up only.
            Some(dlsym) => unsafe { dlsym(self.handle as *mut c_void, name.as_ptr()) },
            None => std::ptr::null_mut(),
        }
    }
}

/// A kernel's registers per thread and static shared memory per block, asked of the
/// real driver ((0, 0) if it cannot say). `kernel_on`: the launched handle is a CUDA 12
/// `CUkernel` (from `cuLibraryGetKernel`, standing for its function in the current
/// context), whose attributes are asked per device — `cuFuncGetAttribute` takes only
/// functions.
pub fn function_resources(function: u64, kernel_on: Option<i32>) -> (u32, u32) {
    use tessera_driver::sys::CUfunction_attribute as A;
    let Ok(real) = &crate::state::state().real else { return (0, 0) };
    let (by_function, by_kernel) = (real.api.cuFuncGetAttribute, real.api.cuKernelGetAttribute);
    let ask = |attribute: A| {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: the driver's entry points with a valid attribute, an out-pointer to a
        // local, the handle the program launched and (for a kernel) the current device.
        let r = unsafe {
            match (kernel_on, by_function, by_kernel) {
                (Some(dev), _, Some(get)) => get(&mut v, attribute, function as _, dev),
                (None, Some(get), _) => get(&mut v, attribute, function as _),
                _ => return 0,
            }
        };
        if r == tessera_driver::status::SUCCESS { u32::try_from(v).unwrap_or(0) } else { 0 }
    };
    (ask(A::CU_FUNC_ATTRIBUTE_NUM_REGS), ask(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES))
}

/// Wait for the calling thread's context to finish its work (`cuCtxSynchronize`),
/// for the launch gate's measurements; errors are left for the program's own next
/// call to see.
pub fn synchronize() {
    // a synchronisation would invalidate an open stream capture
    if crate::hooks::capture::open() {
        return;
    }
    if let Ok(real) = &crate::state::state().real
        && let Some(sync) = real.api.cuCtxSynchronize
    {
        // SAFETY: the driver's entry point, no arguments.
        let _ = unsafe { sync() };
    }
}

/// The calling thread's current context (`cuCtxGetCurrent`), as a number; 0 if none.
pub fn current_context() -> u64 {
    let mut ctx: tessera_driver::sys::CUcontext = std::ptr::null_mut();
    if let Ok(real) = &crate::state::state().real
        && let Some(get) = real.api.cuCtxGetCurrent
    {
        // SAFETY: the driver's entry point, given a valid output word.
        let _ = unsafe { get(&mut ctx) };
    }
    ctx as u64
}

/// Wait for the GPU to reach `event` (from [`mark`]) and destroy it.
pub fn wait_mark(event: usize) {
    if let Ok(real) = &crate::state::state().real {
        let event = event as tessera_driver::sys::CUevent;
        // SAFETY: driver entry points; `event` was made by `mark` and is destroyed
        // once, here (an error leaves nothing to undo).
        unsafe {
            if let Some(sync) = real.api.cuEventSynchronize {
                let _ = sync(event);
            }
            if let Some(destroy) = real.api.cuEventDestroy_v2 {
                let _ = destroy(event);
            }
        }
    }
}

/// An event recorded now on `stream`, in the current context (`None` when the driver
/// cannot make one): the end of what was queued there so far.
pub fn mark(stream: tessera_driver::sys::CUstream) -> Option<usize> {
    let real = crate::state::state().real.as_ref().ok()?;
    let (create, record) = (real.api.cuEventCreate?, real.api.cuEventRecord?);
    let mut event: tessera_driver::sys::CUevent = std::ptr::null_mut();
    // CU_EVENT_DISABLE_TIMING: a marker only, the cheapest kind
    const DISABLE_TIMING: std::ffi::c_uint = 2;
    // SAFETY: driver entry points, given a valid output word and the stream of the
    // program's own latest launch.
    unsafe {
        if create(&mut event, DISABLE_TIMING) != 0 || event.is_null() {
            return None;
        }
        if record(event, stream) != 0 {
            if let Some(destroy) = real.api.cuEventDestroy_v2 {
                let _ = destroy(event);
            }
            return None;
        }
    }
    Some(event as usize)
}

/// Wait, from a thread of the interposer's own, for the work of context `ctx` (from
/// [`current_context`]) to finish; nothing if it is 0 or a stream capture is open.
pub fn synchronize_context(ctx: u64) {
    if ctx == 0 || crate::hooks::capture::open() {
        return;
    }
    if let Ok(real) = &crate::state::state().real
        && let (Some(set), Some(sync)) = (real.api.cuCtxSetCurrent, real.api.cuCtxSynchronize)
    {
        // SAFETY: driver entry points; `ctx` is a context the program made current on
        // one of its threads (a destroyed one makes the calls fail, which is ignored).
        unsafe {
            if set(ctx as tessera_driver::sys::CUcontext) == 0 {
                let _ = sync();
            }
        }
    }
}

/// How many `fork()`s separate this process from the one that loaded the library (0 in
/// that process); bumped in each child by the `pthread_atfork` handler.
static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The socket of the tenant of this process, which a forked child must not keep open
/// (the daemon ends a tenant when its connection closes).
static TENANT_SOCKET: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The ledger record the tenant of this process keeps open (its reservations live as
/// long as any process holds it), which a forked child must not keep: the parent's
/// memory must be released when the parent ends, not when its child does.
static LEDGER_RECORD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The process's nice when its tenant registered (`i32::MIN` before): what its threads
/// go back to when a coscheduling boost must not go on ([`put_back_raised`]).
static BASE_NICE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MIN);

/// Runs in a forked child, before `fork()` returns there: only async-signal-safe work.
extern "C" fn in_forked_child() {
    use std::sync::atomic::Ordering;
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
    // a child forked while its parent's slice was coscheduled (a DataLoader worker)
    // would keep the raised nice for its whole life: the boost is the parent's slice's
    let base = BASE_NICE.load(Ordering::SeqCst);
    if base != i32::MIN {
        // SAFETY: getpriority and setpriority on the calling thread (who 0), the child's
        // only one: single system calls, taking no lock
        unsafe {
            if libc::getpriority(libc::PRIO_PROCESS, 0) < base {
                libc::setpriority(libc::PRIO_PROCESS, 0, base);
            }
        }
    }
    for fd in [TENANT_SOCKET.swap(-1, Ordering::SeqCst), LEDGER_RECORD.swap(-1, Ordering::SeqCst)] {
        if fd >= 0 {
            // SAFETY: close(2) is async-signal-safe; the descriptor is the child's copy
            // of the parent's tenant socket or ledger record, which nothing in the
            // child uses again (its own tenant gets its own of each).
            unsafe { libc::close(fd) };
        }
    }
}

/// `record` is the ledger record the current tenant keeps: a forked child closes its
/// copy at once. The fork handler is installed by [`watch_fork`], which registration
/// calls first.
pub fn watch_record(record: std::os::fd::RawFd) {
    LEDGER_RECORD.store(record, std::sync::atomic::Ordering::SeqCst);
}

/// [`FORK_GENERATION`]: 0 in the process that loaded the library.
#[inline]
pub fn fork_generation() -> u64 {
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// `socket` is the current tenant's connection: a forked child closes its copy at once,
/// so that the parent's tenant ends when the parent does. The fork handler is installed
/// on the first call.
pub fn watch_fork(socket: std::os::fd::RawFd) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    TENANT_SOCKET.store(socket, std::sync::atomic::Ordering::SeqCst);
    INSTALLED.call_once(|| {
        // SAFETY: registers a handler that only does async-signal-safe work.
        let r = unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
        if r != 0 {
            crate::state::complain(
                "cannot watch for fork(): a forked child may disturb its parent's tenant",
            );
        }
    });
}

/// Keep the calling thread's nice (this process's, as its tenant registers) as what a
/// coscheduling boost is put back to ([`put_back_raised`], the fork handler).
pub fn note_base_nice() {
    // SAFETY: getpriority on the calling thread (who 0) only reads
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let _ = BASE_NICE.compare_exchange(
        i32::MIN,
        nice,
        std::sync::atomic::Ordering::SeqCst,
        std::sync::atomic::Ordering::SeqCst,
    );
}

/// Put every thread of this process whose nice is below the one its tenant registered
/// with back to that: a daemon that raised them for a coscheduled slice (tesserad's
/// `cosched.rs`) and then died cannot put them back itself. Lowering a thread's
/// priority needs no privilege.
pub fn put_back_raised() {
    let base = BASE_NICE.load(std::sync::atomic::Ordering::SeqCst);
    if base == i32::MIN {
        return;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
    for tid in tasks.flatten().filter_map(|e| e.file_name().to_str()?.parse::<libc::id_t>().ok()) {
        // SAFETY: getpriority and setpriority on one of this process's threads, by id;
        // they only read and set its nice value (a thread that ended meanwhile fails)
        unsafe {
            if libc::getpriority(libc::PRIO_PROCESS, tid) < base {
                libc::setpriority(libc::PRIO_PROCESS, tid, base);
            }
        }
    }
}
