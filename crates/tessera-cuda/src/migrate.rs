//! DCUDA's live migration (§3.4) for unmodified driver-API programs, when
//! `TESSERA_MIGRATION=1` (or a migration order is given):
//!
//! - device allocations (`cuMemAlloc`) become managed (`cuMemAllocManaged`), whose
//!   addresses stay valid on every GPU, so the program's pointers survive a move;
//! - the program's primary context, its PTX modules and their functions get virtual
//!   handles; the real ones are made per device, a module being loaded on a device when
//!   one of its functions is first launched there (the image is kept for that);
//! - on a migration order, before the next launch: the kernels already launched are
//!   drained on the source (`cuCtxSynchronize`), the target's primary context becomes
//!   current, the tenant's ledger reservations move to the target (refused: it stays),
//!   its managed allocations are prefetched to the target (`cuMemPrefetchAsync`; what
//!   is not prefetched moves on demand), and the launch goes on, on the target, and so
//!   do the ones after it, in order.
//!
//! Streams the program creates keep their handles: after a move a handle means a
//! stream made on the new device with the same flags and priority, on first use (by a
//! launch, `cuStreamSynchronize` or `cuStreamQuery`).
//!
//! The order comes from the daemon — a slice granted on another GPU than the one the
//! program runs on (DCUDA's balancer moved its tenant) — or by hand,
//! `TESSERA_MIGRATE_AT=K:D` (after K launches, to real device D), which then replaces
//! the daemon's. Not covered yet: other
//! entry points that take a stream (async copies and memsets, events) after a move,
//! binary modules (cubin, fatbin: the
//! image's size is unknown here, so such a program is not moved, with one line on
//! stderr), several contexts per program, programs through the CUDA runtime
//! (`libcudart` loads kernels through library entry points), and library handles
//! (cuBLAS, cuDNN). Only ever run against the fake driver.
#![allow(unsafe_code)]

use crate::state::{complain, state};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};
use tessera_driver::sys::{CUcontext, CUdevice, CUfunction, CUmodule, CUstream};
use tessera_driver::{CuResult, status};

/// A PTX module the program loaded: its image, and the real module per device.
struct Module {
    image: CString,
    real: HashMap<i32, usize>,
}

/// A stream the program created: how, where, and the real one per other device (the
/// program keeps the handle of the one made on its first device).
struct Stream {
    flags: c_uint,
    priority: Option<c_int>,
    origin: i32,
    real: HashMap<i32, usize>,
}

/// A function the program asked for: its module, its name, the real one per device.
struct Function {
    module: usize,
    name: CString,
    real: HashMap<i32, usize>,
}

#[derive(Default)]
struct Books {
    /// The real device the program runs on (set when it retains its context).
    device: Option<i32>,
    /// The virtual context handed to the program.
    context: Option<usize>,
    /// Real primary contexts retained, per device.
    contexts: HashMap<i32, usize>,
    modules: HashMap<usize, Module>,
    functions: HashMap<usize, Function>,
    /// Streams, by the handle the program holds.
    streams: HashMap<usize, Stream>,
    /// Managed allocations: address -> bytes.
    managed: BTreeMap<u64, usize>,
    /// Launches seen.
    launches: u64,
    /// A reason this program cannot be moved, once found.
    pinned: Option<&'static str>,
    /// Moves done.
    moves: u32,
    /// The last target a move to was refused (said once, not retried every launch).
    refused: Option<i32>,
}

/// The migration state of the process.
pub struct Migration {
    /// Migration support is on.
    pub enabled: bool,
    order: Option<(u64, i32)>,
    books: Mutex<Books>,
}

/// The process's migration state (off unless the settings turn it on).
#[inline]
pub fn migration() -> &'static Migration {
    static M: OnceLock<Migration> = OnceLock::new();
    M.get_or_init(|| {
        let (enabled, order) = match &state().config {
            Ok(c) => (c.migration, c.migrate_at),
            Err(_) => (false, None),
        };
        Migration { enabled, order, books: Mutex::new(Books::default()) }
    })
}

/// A fresh handle value no driver handle can equal (a leaked one-byte allocation).
fn new_handle() -> usize {
    Box::into_raw(Box::new(0u8)) as usize
}

impl Migration {
    /// `cuDevicePrimaryCtxRetain`: retain for real; hand out the virtual context.
    pub fn retain(&self, ctx: *mut CUcontext, dev: CUdevice) -> CuResult {
        let r = real!(cuDevicePrimaryCtxRetain(ctx, dev));
        if !self.enabled || r != status::SUCCESS || ctx.is_null() {
            return r;
        }
        let Ok(mut b) = self.books.lock() else { return status::UNKNOWN };
        // SAFETY: checked non-null; the driver wrote it.
        let real_ctx = unsafe { *ctx } as usize;
        b.contexts.insert(dev, real_ctx);
        if b.device.is_none() {
            b.device = Some(dev);
        }
        if b.device == Some(dev) {
            let v = *b.context.get_or_insert_with(new_handle);
            // SAFETY: checked non-null.
            unsafe { *ctx = v as CUcontext };
        } else {
            // a second device's context: the program works on two GPUs, which one
            // migration cannot move together
            b.pinned = Some("it uses contexts on more than one GPU");
        }
        r
    }

    /// `cuCtxSetCurrent`: the virtual context is the current device's real one.
    pub fn set_current(&self, ctx: CUcontext) -> CuResult {
        let real_ctx = self.books.lock().ok().and_then(|b| {
            (self.enabled && b.context == Some(ctx as usize))
                .then(|| b.device.and_then(|d| b.contexts.get(&d).copied()))
                .flatten()
        });
        match real_ctx {
            Some(c) => real!(cuCtxSetCurrent(c as CUcontext)),
            None => real!(cuCtxSetCurrent(ctx)),
        }
    }

    /// `cuModuleLoadData`: a PTX image is kept and loaded on the current device; a
    /// binary one is passed through and pins the program.
    pub fn load(&self, module: *mut CUmodule, image: *const c_void) -> CuResult {
        if !self.enabled || module.is_null() || image.is_null() {
            return real!(cuModuleLoadData(module, image));
        }
        // SAFETY: non-null; a module image begins with at least 4 bytes (ELF and fatbin
        // magics, or PTX text).
        let head = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), 4) };
        let binary = tessera_ptx::is_binary_module(head);
        let r = real!(cuModuleLoadData(module, image));
        if r != status::SUCCESS {
            return r;
        }
        let Ok(mut b) = self.books.lock() else { return status::UNKNOWN };
        if binary {
            b.pinned =
                Some("it loads binary modules (cubin or fatbin), whose size is unknown here");
            return r;
        }
        // SAFETY: a PTX image is a NUL-terminated string (cuModuleLoadData's contract).
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_owned();
        let Some(dev) = b.device else {
            b.pinned = Some("it loaded a module before retaining a context");
            return r;
        };
        // SAFETY: checked non-null; the driver wrote it.
        let real_module = unsafe { *module } as usize;
        let v = new_handle();
        b.modules.insert(v, Module { image: text, real: HashMap::from([(dev, real_module)]) });
        // SAFETY: checked non-null.
        unsafe { *module = v as CUmodule };
        r
    }

    /// `cuModuleGetFunction` on a virtual module: the real function on the current
    /// device, behind a virtual handle.
    pub fn function(
        &self,
        out: *mut CUfunction,
        module: CUmodule,
        name: *const c_char,
    ) -> CuResult {
        let known = self.enabled
            && self.books.lock().is_ok_and(|b| b.modules.contains_key(&(module as usize)));
        if !known || out.is_null() || name.is_null() {
            return real!(cuModuleGetFunction(out, module, name));
        }
        // SAFETY: non-null, the program's NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_owned();
        let Ok(mut b) = self.books.lock() else { return status::UNKNOWN };
        let Some(dev) = b.device else { return status::INVALID_CONTEXT };
        let real_f = match resolve(&mut b, module as usize, &name, dev) {
            Ok(f) => f,
            Err(e) => return e,
        };
        let v = new_handle();
        b.functions.insert(
            v,
            Function { module: module as usize, name, real: HashMap::from([(dev, real_f)]) },
        );
        // SAFETY: checked non-null.
        unsafe { *out = v as CUfunction };
        status::SUCCESS
    }

    /// The real function for `f` on the current device (a virtual handle's, loaded
    /// there on demand; any other handle as it is).
    pub fn real_function(&self, f: CUfunction) -> Result<CUfunction, CuResult> {
        if !self.enabled {
            return Ok(f);
        }
        let Ok(mut b) = self.books.lock() else { return Err(status::UNKNOWN) };
        let Some(func) = b.functions.get(&(f as usize)) else { return Ok(f) };
        let Some(dev) = b.device else { return Err(status::INVALID_CONTEXT) };
        if let Some(r) = func.real.get(&dev) {
            return Ok(*r as CUfunction);
        }
        let (module, name) = (func.module, func.name.clone());
        let real_f = resolve(&mut b, module, &name, dev)?;
        if let Some(func) = b.functions.get_mut(&(f as usize)) {
            func.real.insert(dev, real_f);
        }
        Ok(real_f as CUfunction)
    }

    /// Before a launch: count it, carry out a migration order that is due, and give
    /// the real function to launch.
    #[inline]
    pub fn before_launch(&self, f: CUfunction) -> Result<CUfunction, CuResult> {
        // the launch path's common case, inlined at every hook: not migratable
        if !self.enabled { Ok(f) } else { self.before_launch_movable(f) }
    }

    fn before_launch_movable(&self, f: CUfunction) -> Result<CUfunction, CuResult> {
        let due = {
            let Ok(mut b) = self.books.lock() else { return Err(status::UNKNOWN) };
            b.launches += 1;
            match self.order {
                Some((after, to)) if b.launches == after + 1 && b.device != Some(to) => Some(to),
                _ => None,
            }
        };
        if let Some(to) = due {
            self.migrate(to);
        }
        self.real_function(f)
    }

    /// After the launch gate: when the daemon granted the slice on another GPU than
    /// the program runs on (its balancer moved the tenant), move there; `program_f` is
    /// the program's handle, `current` the real function resolved before the gate.
    #[inline]
    pub fn follow_grant(
        &self,
        program_f: CUfunction,
        current: CUfunction,
    ) -> Result<CUfunction, CuResult> {
        // an order given by hand replaces the daemon's (which does not know of it)
        if !self.enabled || self.order.is_some() {
            Ok(current)
        } else {
            self.follow_grant_movable(program_f, current)
        }
    }

    fn follow_grant_movable(
        &self,
        program_f: CUfunction,
        current: CUfunction,
    ) -> Result<CUfunction, CuResult> {
        let Some(gpu) = state().tenant().and_then(|t| t.granted()) else { return Ok(current) };
        let Ok(to) = i32::try_from(gpu) else { return Ok(current) };
        let here = self.books.lock().ok().and_then(|b| b.device);
        if here.is_none() || here == Some(to) {
            return Ok(current);
        }
        self.migrate(to);
        self.real_function(program_f)
    }

    /// Move the program to real device `to`, between two launches. Whatever stops it
    /// (pinned, a refusal) leaves it running where it is, with one line on stderr.
    fn migrate(&self, to: i32) {
        let st = state();
        let Ok(mut b) = self.books.lock() else { return };
        let Some(from) = b.device else { return };
        if b.refused == Some(to) {
            return;
        }
        // whatever stops the move below is said once for this target
        b.refused = Some(to);
        if let Some(why) = b.pinned {
            complain(&format!("not migrating to GPU {to}: {why}"));
            return;
        }
        // drain what was launched on the source
        let r = real!(cuCtxSynchronize());
        if r != status::SUCCESS {
            complain(&format!("not migrating to GPU {to}: draining GPU {from} failed ({r})"));
            return;
        }
        let ctx = match b.contexts.get(&to) {
            Some(c) => *c,
            None => {
                let mut dev: CUdevice = 0;
                let mut c: CUcontext = std::ptr::null_mut();
                let r = match real!(cuDeviceGet(&mut dev, to)) {
                    status::SUCCESS => real!(cuDevicePrimaryCtxRetain(&mut c, dev)),
                    e => e,
                };
                if r != status::SUCCESS {
                    complain(&format!("not migrating to GPU {to}: no context there ({r})"));
                    return;
                }
                b.contexts.insert(to, c as usize);
                c as usize
            }
        };
        // the ledger first: on a refusal nothing has changed
        let moved_bytes = match st.tenant() {
            Some(t) => match t.move_reservations(from as u32, to as u32) {
                Ok(bytes) => bytes,
                Err(e) => {
                    complain(&format!(
                        "not migrating to GPU {to}: its memory is refused there ({e})"
                    ));
                    return;
                }
            },
            None => 0,
        };
        let r = real!(cuCtxSetCurrent(ctx as CUcontext));
        if r != status::SUCCESS {
            if let Some(t) = st.tenant() {
                let _ = t.move_reservations(to as u32, from as u32);
            }
            complain(&format!("not migrating to GPU {to}: cannot make its context current ({r})"));
            return;
        }
        b.device = Some(to);
        b.moves += 1;
        b.refused = None;
        // data follows in the background; what is not prefetched moves on demand
        let mut prefetched = 0usize;
        for (ptr, bytes) in &b.managed {
            if real!(cuMemPrefetchAsync(*ptr, *bytes, to, std::ptr::null_mut())) == status::SUCCESS
            {
                prefetched += 1;
            }
        }
        st.log(format_args!(
            "migrated from GPU {from} to GPU {to} after {} launches: {moved_bytes} bytes of reservations moved, {prefetched} of {} allocations prefetched",
            b.launches - 1,
            b.managed.len()
        ));
    }

    /// `cuStreamCreate` / `cuStreamCreateWithPriority`: a real stream, remembered so
    /// that after a move the same handle means a stream on the new device.
    pub fn create_stream(
        &self,
        out: *mut CUstream,
        flags: c_uint,
        priority: Option<c_int>,
    ) -> CuResult {
        let r = match priority {
            Some(p) => real!(cuStreamCreateWithPriority(out, flags, p)),
            None => real!(cuStreamCreate(out, flags)),
        };
        if !self.enabled || r != status::SUCCESS || out.is_null() {
            return r;
        }
        if let Ok(mut b) = self.books.lock()
            && let Some(origin) = b.device
        {
            // SAFETY: checked non-null; the driver wrote it.
            let h = unsafe { *out } as usize;
            b.streams.insert(h, Stream { flags, priority, origin, real: HashMap::new() });
        }
        r
    }

    /// `cuStreamDestroy`: every device's stream behind the handle.
    pub fn destroy_stream(&self, h: CUstream) -> CuResult {
        let others: Vec<usize> = match self.books.lock() {
            Ok(mut b) => b
                .streams
                .remove(&(h as usize))
                .map_or(Vec::new(), |s| s.real.into_values().collect()),
            Err(_) => Vec::new(),
        };
        // ours on other devices are made current-context-free to destroy
        for o in others {
            let _ = real!(cuStreamDestroy_v2(o as CUstream));
        }
        real!(cuStreamDestroy_v2(h))
    }

    /// The stream `h` stands for on the current device: itself before any move (and
    /// the default streams always); after a move, one made there with the same flags
    /// and priority, on first use.
    #[inline]
    pub fn real_stream(&self, h: CUstream) -> Result<CUstream, CuResult> {
        if !self.enabled || h.is_null() { Ok(h) } else { self.real_stream_movable(h) }
    }

    fn real_stream_movable(&self, h: CUstream) -> Result<CUstream, CuResult> {
        let Ok(mut b) = self.books.lock() else { return Err(status::UNKNOWN) };
        let Some(dev) = b.device else { return Ok(h) };
        let Some(s) = b.streams.get(&(h as usize)) else { return Ok(h) };
        if s.origin == dev {
            return Ok(h);
        }
        if let Some(r) = s.real.get(&dev) {
            return Ok(*r as CUstream);
        }
        let (flags, priority) = (s.flags, s.priority);
        let mut made: CUstream = std::ptr::null_mut();
        let r = match priority {
            Some(p) => real!(cuStreamCreateWithPriority(&mut made, flags, p)),
            None => real!(cuStreamCreate(&mut made, flags)),
        };
        if r != status::SUCCESS {
            return Err(r);
        }
        if let Some(s) = b.streams.get_mut(&(h as usize)) {
            s.real.insert(dev, made as usize);
        }
        Ok(made)
    }

    /// A managed allocation the interposer made for a device allocation.
    pub fn note_managed(&self, ptr: u64, bytes: usize) {
        if let Ok(mut b) = self.books.lock() {
            b.managed.insert(ptr, bytes);
        }
    }

    /// It was freed.
    pub fn note_freed(&self, ptr: u64) {
        if let Ok(mut b) = self.books.lock() {
            b.managed.remove(&ptr);
        }
    }
}

/// The real function `name` of virtual module `module` on `dev`, loading the module
/// there first if needed.
fn resolve(b: &mut Books, module: usize, name: &CStr, dev: i32) -> Result<usize, CuResult> {
    let m = b.modules.get_mut(&module).ok_or(status::INVALID_VALUE)?;
    let real_module = match m.real.get(&dev) {
        Some(r) => *r,
        None => {
            let mut r: CUmodule = std::ptr::null_mut();
            let code = real!(cuModuleLoadData(&mut r, m.image.as_ptr().cast::<c_void>()));
            if code != status::SUCCESS {
                return Err(code);
            }
            m.real.insert(dev, r as usize);
            r as usize
        }
    };
    let mut f: CUfunction = std::ptr::null_mut();
    match real!(cuModuleGetFunction(&mut f, real_module as CUmodule, name.as_ptr())) {
        status::SUCCESS => Ok(f as usize),
        e => Err(e),
    }
}
