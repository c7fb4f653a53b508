//! The launch gate's hooks: every kernel and graph launch (and its per-thread-stream
//! variant) waits for the slice the daemon's policy grants and is accounted after it,
//! unless it is recorded into a stream capture; with kernel slicing, a long launch
//! issued as sub-kernels of its twin. The modules, functions and kernels the launches
//! name are [`super::modules`]'.
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::{capture, guarded, variant};
use crate::migrate::migration;
use crate::slicing::slicing;
use crate::state::state;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;
use tessera_driver::sys::{
    CUDA_LAUNCH_PARAMS, CUfunction, CUgraphExec, CUlaunchAttribute, CUlaunchConfig, CUstream,
};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [
        cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch, cuLaunch,
        cuLaunchGrid, cuLaunchGridAsync, cuLaunchCooperativeKernelMultiDevice,
    ],
    variants: [
        cuLaunchKernel_ptsz => cuLaunchKernel,
        cuLaunchKernelEx_ptsz => cuLaunchKernelEx,
        cuLaunchCooperativeKernel_ptsz => cuLaunchCooperativeKernel,
        cuGraphLaunch_ptsz => cuGraphLaunch,
    ],
    unchecked: [],
}

/// A sub-kernel's `kernelParams`: the program's `count` parameter pointers, then
/// pointers to the twin's four added values (which must outlive the launch).
fn twin_args(params: *mut *mut c_void, count: usize, values: &mut [u32; 4]) -> Vec<*mut c_void> {
    let mut args: Vec<*mut c_void> = (0..count)
        // SAFETY: the program's kernelParams holds one pointer per parameter of the
        // kernel, `count` of them (the module's declaration); the caller checked it
        // non-null
        .map(|i| unsafe { *params.add(i) })
        .collect();
    args.extend(values.iter_mut().map(|v| std::ptr::from_mut(v).cast::<c_void>()));
    args
}

/// Launch attributes (cuda.h's `CUlaunchAttributeID`, as integers) a sliced launch
/// passes to each of its sub-kernels: they change how a launch runs, not what a block
/// computes nor whether the blocks must be resident together — none (0), an L2 access
/// policy window (1), the synchronisation policy (3), the priority (8), the memory
/// synchronisation domain map and domain (9, 10). Any other keeps the launch whole: a
/// cooperative launch, clusters, programmatic dependent launch, a completion event
/// (which would fire at the first sub-kernel's end), or one this build does not know.
const SLICEABLE_ATTRIBUTES: [u32; 6] = [0, 1, 3, 8, 9, 10];

/// Whether every one of a configuration's `n` attributes is in [`SLICEABLE_ATTRIBUTES`].
fn attributes_allow_slicing(attrs: *const CUlaunchAttribute, n: c_uint) -> bool {
    if n == 0 {
        return true;
    }
    if attrs.is_null() {
        return false;
    }
    (0..n as usize).all(|i| {
        // SAFETY: the program's array of `n` attributes (its configuration's); each
        // begins with its id, read as the integer it is (an id this build does not
        // know is no value of the bindings' enum)
        let id = unsafe { attrs.add(i).cast::<u32>().read_unaligned() };
        SLICEABLE_ATTRIBUTES.contains(&id)
    })
}

/// [`sliced`] for `cuLaunchKernelEx`: its configuration copied with a one-dimensional
/// grid per sub-kernel, its attributes kept when each is one a sub-kernel may carry
/// ([`SLICEABLE_ATTRIBUTES`]), its parameters as pointers or in a buffer as
/// [`sliced`]'s; else whole.
///
/// Inlined, its work out of line, as [`sliced`].
#[inline]
fn sliced_ex(
    ptsz: bool,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<CuResult> {
    if !slicing().enabled() {
        return None;
    }
    sliced_ex_on(ptsz, config, f, params, extra)
}

/// [`sliced_ex`] with slicing on.
#[inline(never)]
fn sliced_ex_on(
    ptsz: bool,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<CuResult> {
    if config.is_null() || in_sub_kernels() {
        return None;
    }
    // SAFETY: non-null, the caller's launch configuration; plain fields, copied.
    let c = unsafe { *config };
    let grid = [c.gridDimX, c.gridDimY, c.gridDimZ];
    let refused = (!attributes_allow_slicing(c.attrs, c.numAttrs)).then_some(
        "a launch attribute a sub-kernel may not carry (cooperative, a cluster, programmatic \
         dependent launch, a completion event, or one this build does not know)",
    );
    let plan = SubKernels::plan(f, grid, params, extra, refused)?;
    Some(plan.issue(params, grid, |s, twin, args, extra| {
        let copy = CUlaunchConfig { gridDimX: s.blocks, gridDimY: 1, gridDimZ: 1, ..c };
        if ptsz {
            cuLaunchKernelEx_ptsz(&copy, twin, args, extra)
        } else {
            cuLaunchKernelEx(&copy, twin, args, extra)
        }
    }))
}

thread_local! {
    /// Whether this thread is issuing one launch's sub-kernels.
    static SUB_KERNELS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is issuing a launch's sub-kernels: they go through the launch
/// hooks (for the gate) and must not be sliced again — a twin never is, and a driver
/// that handed a twin its kernel's own handle would recurse without end.
fn in_sub_kernels() -> bool {
    SUB_KERNELS.with(std::cell::Cell::get)
}

/// Marks this thread as issuing sub-kernels until dropped.
struct SubKernels;

impl SubKernels {
    fn begin() -> Self {
        SUB_KERNELS.with(|s| s.set(true));
        SubKernels
    }

    /// The sub-kernels a launch of `f` on `grid` is issued as, for both launch forms;
    /// `None`: whole — said once per kernel with the reason where slicing would have cut
    /// it (`refused`: the launch form's own reason, its attributes).
    fn plan(
        f: CUfunction,
        grid: [c_uint; 3],
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
        refused: Option<&str>,
    ) -> Option<SubKernelPlan> {
        let Some(buffer) = parameters(params, extra) else {
            slicing().runs_whole(f as usize, grid, PARAMETERS_UNKNOWN);
            return None;
        };
        if let Some(why) = refused {
            slicing().runs_whole(f as usize, grid, why);
            return None;
        }
        let (twin, at, slices) =
            slicing().slices(f as usize, grid, || super::current_gpu().ok(), super::gpu_sms)?;
        // a buffer shorter than the kernel's parameters: whole, for the driver to judge
        // (a copy padded with zeros would run the twin on parameters the program never
        // gave)
        if buffer.is_some_and(|(_, size)| size < at.end as usize) {
            slicing().runs_whole(f as usize, grid, BUFFER_SHORT);
            return None;
        }
        Some(SubKernelPlan { twin: twin as CUfunction, at, slices, buffer })
    }
}

/// A launch's sub-kernels, planned ([`SubKernels::plan`]).
struct SubKernelPlan {
    twin: CUfunction,
    at: crate::slicing::TwinParams,
    slices: Vec<tessera_ptx::Slice>,
    buffer: Option<(*const u8, usize)>,
}

impl SubKernelPlan {
    /// Issue the sub-kernels in order, each by `launch` (sub-kernel, twin, its
    /// parameters as pointers or buffer) with the twin's four values added; the first
    /// failure ends it.
    fn issue(
        self,
        params: *mut *mut c_void,
        [gx, gy, gz]: [c_uint; 3],
        launch: impl Fn(tessera_ptx::Slice, CUfunction, *mut *mut c_void, *mut *mut c_void) -> CuResult,
    ) -> CuResult {
        let _within = SubKernels::begin();
        for s in self.slices {
            let one =
                |args: *mut *mut c_void, extra: *mut *mut c_void| launch(s, self.twin, args, extra);
            let r = launch_slice(one, params, self.buffer, self.at, [s.first, gx, gy, gz]);
            if r != status::SUCCESS {
                return r;
            }
        }
        status::SUCCESS
    }
}

impl Drop for SubKernels {
    fn drop(&mut self) {
        SUB_KERNELS.with(|s| s.set(false));
    }
}

/// Where a launch's parameters are: `Some(None)` as pointers (`kernelParams`),
/// `Some(Some(buffer))` in a parameter buffer (`extra`); `None` (the launch runs
/// whole) for both forms or neither, or an `extra` key this build does not know.
fn parameters(
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<Option<(*const u8, usize)>> {
    match (params.is_null(), extra.is_null()) {
        (false, true) => Some(None),
        (true, false) => Some(Some(param_buffer(extra)?)),
        _ => None,
    }
}

/// One sub-kernel through `launch` (given its `kernelParams` and `extra`): the
/// program's parameters with the twin's four `values` added — as pointers, or in a
/// copy of the program's buffer.
fn launch_slice(
    launch: impl Fn(*mut *mut c_void, *mut *mut c_void) -> CuResult,
    params: *mut *mut c_void,
    buffer: Option<(*const u8, usize)>,
    at: crate::slicing::TwinParams,
    mut values: [u32; 4],
) -> CuResult {
    match buffer {
        None => {
            let mut args = twin_args(params, at.count, &mut values);
            launch(args.as_mut_ptr(), std::ptr::null_mut())
        }
        Some((buffer, size)) => {
            let mut blob = twin_buffer(buffer, size, at.added_at, values);
            let mut len = at.added_at as usize + 16;
            let mut keys: [*mut c_void; 5] = [
                PARAM_BUFFER_POINTER as *mut c_void,
                blob.as_mut_ptr().cast(),
                PARAM_BUFFER_SIZE as *mut c_void,
                std::ptr::from_mut(&mut len).cast(),
                PARAM_END as *mut c_void,
            ];
            launch(std::ptr::null_mut(), keys.as_mut_ptr())
        }
    }
}

/// cuda.h's `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER` and
/// `CU_LAUNCH_PARAM_BUFFER_SIZE`: the keys of a launch's `extra` array.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// The parameter buffer an `extra` array gives (its pointer and size); `None` when it
/// gives none, or a key this build does not know (the launch then runs whole).
fn param_buffer(extra: *mut *mut c_void) -> Option<(*const u8, usize)> {
    let (mut buffer, mut size) = (None, None);
    // a few pairs at most: a longer array is not one the driver documents
    for i in (0..16).step_by(2) {
        // SAFETY: the program's `extra` array, pairs of a key and a value ended by
        // `CU_LAUNCH_PARAM_END` (the driver reads it so); read up to that end
        let key = unsafe { *extra.add(i) } as usize;
        match key {
            PARAM_END => break,
            PARAM_BUFFER_POINTER => {
                // SAFETY: as above; a key's value follows it
                let value = unsafe { *extra.add(i + 1) };
                buffer = Some(value.cast::<u8>());
            }
            PARAM_BUFFER_SIZE => {
                // SAFETY: as above; the value is a pointer to the buffer's size
                let p = unsafe { *extra.add(i + 1) }.cast::<usize>();
                if p.is_null() {
                    return None;
                }
                // SAFETY: non-null, the program's size_t (CU_LAUNCH_PARAM_BUFFER_SIZE's)
                size = Some(unsafe { p.read_unaligned() });
            }
            _ => return None,
        }
    }
    let buffer = buffer.filter(|b| !b.is_null())?;
    Some((buffer, size?))
}

/// A sub-kernel's parameter buffer: the program's (`size` bytes at `buffer`) up to the
/// twin's added parameters, then the four of them at `added_at` (the ABI's layout, see
/// `tessera_ptx`'s `ParamLayout`), in 8-byte aligned memory.
fn twin_buffer(buffer: *const u8, size: usize, added_at: u32, values: [u32; 4]) -> Vec<u64> {
    let at = added_at as usize;
    let len = at + 16;
    let mut words = vec![0u64; len.div_ceil(8)];
    // SAFETY: `words` is `len` bytes or more, viewed as bytes (any byte is a valid u8)
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) };
    // SAFETY: the program's buffer of `size` bytes (its `CU_LAUNCH_PARAM_BUFFER_SIZE`)
    let program = unsafe { std::slice::from_raw_parts(buffer, size.min(at)) };
    bytes[..program.len()].copy_from_slice(program);
    for (i, v) in values.iter().enumerate() {
        bytes[at + 4 * i..at + 4 * i + 4].copy_from_slice(&v.to_ne_bytes());
    }
    words
}

/// A launch of a kernel with a twin, above the threshold, as its sub-kernels: each a
/// launch of the twin (through this hook again: the launch gate, the migration's
/// translation and the accounting, one sub-kernel at a time) on a one-dimensional grid,
/// with the original's parameters and the range's first block and the grid — as
/// pointers (`kernelParams`), or in a parameter buffer (`extra`) copied with the four
/// added at their offset. `None`: launch it whole (no twin, under the threshold, both
/// forms or neither, an `extra` key this build does not know).
///
/// Inlined, with slicing's work out of line: every launch of every tenant asks, and
/// with slicing off (the default) the question must cost a load and a branch (the
/// H200's launch check, 2026-12-04: 315 instructions a launch against 249 before
/// slicing, 50 of them here).
#[allow(clippy::too_many_arguments)]
#[inline]
fn sliced(
    ptsz: bool,
    f: CUfunction,
    grid: (c_uint, c_uint, c_uint),
    block: (c_uint, c_uint, c_uint),
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<CuResult> {
    if !slicing().enabled() {
        return None;
    }
    sliced_on(ptsz, f, grid, block, shared, stream, params, extra)
}

/// Why a launch runs whole: its parameters given in a form the sub-kernels cannot be
/// given (both forms, neither, or an `extra` key this build does not know).
const PARAMETERS_UNKNOWN: &str =
    "its parameters in both forms, in neither, or with an `extra` key this build does not know";
/// Why a launch runs whole: a parameter buffer shorter than the kernel's parameters
/// (the driver judges it, as it judges the program's own launch).
const BUFFER_SHORT: &str = "a parameter buffer shorter than the kernel's parameters";

/// A cooperative launch runs whole (its blocks may synchronise with one another, which
/// sub-kernels run one after another cannot): said once for a kernel slicing would
/// have cut. Never launches anything itself.
#[inline]
fn cooperative_whole(f: CUfunction, (gx, gy, gz): (c_uint, c_uint, c_uint)) -> Option<CuResult> {
    // with slicing off `runs_whole` returns at once
    slicing().runs_whole(
        f as usize,
        [gx, gy, gz],
        "a cooperative launch (its blocks may wait for one another)",
    );
    None
}

/// [`sliced`] with slicing on.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn sliced_on(
    ptsz: bool,
    f: CUfunction,
    (gx, gy, gz): (c_uint, c_uint, c_uint),
    (bx, by, bz): (c_uint, c_uint, c_uint),
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<CuResult> {
    if in_sub_kernels() {
        return None;
    }
    let grid = [gx, gy, gz];
    let plan = SubKernels::plan(f, grid, params, extra, None)?;
    Some(plan.issue(params, grid, |s, twin, args, extra| {
        if ptsz {
            cuLaunchKernel_ptsz(twin, s.blocks, 1, 1, bx, by, bz, shared, stream, args, extra)
        } else {
            cuLaunchKernel(twin, s.blocks, 1, 1, bx, by, bz, shared, stream, args, extra)
        }
    }))
}

/// A launch's shape: (function, grid blocks, threads per block, dynamic shared bytes).
type Shape = (u64, u64, u32, u32);

/// Note the launch's shape and hold the launch gate (a tenant's launches wait for the
/// slice the policy grants).
#[inline]
fn gate(shape: Option<Shape>) -> Result<(), CuResult> {
    match state().tenant() {
        Some(t) => {
            if let Some((f, grid, threads, shared)) = shape {
                t.note_launch(f, grid, threads, shared);
            }
            t.acquire()
        }
        None => Ok(()),
    }
}

/// Account a launch that went through (see `Tenant::after_launch`); pass its result on.
#[inline]
fn accounted(r: CuResult) -> CuResult {
    if r == status::SUCCESS
        && let Some(t) = state().tenant()
    {
        t.after_launch();
    }
    r
}

/// The shape of a launch given by its dimensions.
#[allow(clippy::too_many_arguments)]
#[inline]
fn dims(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
) -> Option<Shape> {
    let grid = u64::from(gx) * u64::from(gy) * u64::from(gz);
    Some((f as u64, grid, bx.saturating_mul(by).saturating_mul(bz), shared))
}

/// The shape of a `cuLaunchKernelEx` launch (its configuration read as integers).
#[inline]
fn config_shape(f: CUfunction, config: *const CUlaunchConfig) -> Option<Shape> {
    if config.is_null() {
        return None;
    }
    // SAFETY: non-null, the caller's launch configuration; plain integer fields.
    let c = unsafe { &*config };
    dims(
        f,
        c.gridDimX,
        c.gridDimY,
        c.gridDimZ,
        c.blockDimX,
        c.blockDimY,
        c.blockDimZ,
        c.sharedMemBytes,
    )
}

/// A copy of a launch configuration whose stream stands for the current device's (see
/// `migrate`), or `None` for a null configuration.
fn config_on_current_device(
    config: *const CUlaunchConfig,
) -> Result<Option<CUlaunchConfig>, CuResult> {
    if config.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, the caller's launch configuration, copied (plain fields and a
    // pointer to its attributes, left as they are)
    let mut copy = unsafe { *config };
    copy.hStream = migration().real_stream(copy.hStream)?;
    Ok(Some(copy))
}

/// What every gated launch does before calling the driver: a due migration (between
/// launches) and the program's function made the current device's; the gate held; a
/// slice granted on another GPU followed; the stream or configuration translated.
/// Rebinds the named arguments; returns the error from the hook's closure. `$ptsz`:
/// the hook is a `_ptsz` variant's (its NULL stream the per-thread default stream).
macro_rules! launch_prelude {
    ($recorded:ident, $ptsz:literal; $shape:expr, $($f:ident)?, $($s:ident)?, $($c:ident)?) => {
        // a launch into a capturing stream is recorded into a graph, not run: no slice
        // is needed for it, and it must not be measured (see `capture`)
        let $recorded = false
            $( || capture::recording(if $ptsz { capture::per_thread($s) } else { $s }) )?
            $( || capture::config_recording($c, $ptsz) )?;
        $( let program_f = $f;
        let $f = match migration().before_launch($f) {
            Ok(real) => real,
            Err(e) => return e,
        }; )?
        if !$recorded && let Err(e) = gate($shape) {
            return e;
        }
        $( let $f = if $recorded {
            $f
        } else {
            match migration().follow_grant(program_f, $f) {
                Ok(real) => real,
                Err(e) => return e,
            }
        }; )?
        // the stream the gate paces a program alone on its GPU by (see `Tenant::pace`):
        // the legacy stream unless the launch names one
        // (a hook without a stream keeps the legacy one; one with overwrites it)
        #[allow(unused_mut, unused_assignments)]
        let mut pace_stream: CUstream = std::ptr::null_mut();
        $( let $s = match migration().real_stream($s) {
            Ok(real) => real,
            Err(e) => return e,
        };
        pace_stream = $s; )?
        $( let translated = match config_on_current_device($c) {
            Ok(copy) => copy,
            Err(e) => return e,
        };
        if let Some(copy) = &translated {
            pace_stream = copy.hStream;
        }
        let $c = translated.as_ref().map_or($c, |copy| copy as *const CUlaunchConfig); )?
        super::note_stream(pace_stream, $ptsz);
    };
}

/// A gated launch entry point and its per-thread-default-stream variant (`_ptsz`),
/// each passing through to the real driver's symbol of the same name once the gate
/// is held.
macro_rules! gated_launch_plain {
    ($plain:ident, ( $($arg:ident : $ty:ty),* ), $shape:expr $(, migrating $f:ident)? $(, on $s:ident)? $(, configured $c:ident)? $(, first $pre:expr)?) => {
        #[doc = concat!("`", stringify!($plain), "`, behind the launch gate.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $plain($($arg: $ty),*) -> CuResult {
            guarded(stringify!($plain), || {
                $( if let Some(r) = $pre { return r; } )?
                launch_prelude!(recorded, false; $shape, $($f)?, $($s)?, $($c)?);
                let r = real!($plain($($arg),*));
                if recorded { r } else { accounted(r) }
            })
        }
    };
}

macro_rules! gated_launch {
    ($plain:ident, $ptsz:ident, ( $($arg:ident : $ty:ty),* ), $shape:expr $(, migrating $f:ident)? $(, on $s:ident)? $(, configured $c:ident)? $(, first $pre:expr, $pre_ptsz:expr)?) => {
        gated_launch_plain!($plain, ( $($arg : $ty),* ), $shape $(, migrating $f)? $(, on $s)? $(, configured $c)? $(, first $pre)?);

        #[doc = concat!("`", stringify!($ptsz), "`, behind the launch gate.")]
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $ptsz($($arg: $ty),*) -> CuResult {
            type Real = unsafe extern "C" fn($($ty),*) -> CuResult;
            static REAL: OnceLock<Option<usize>> = OnceLock::new();
            guarded(stringify!($ptsz), || {
                $( if let Some(r) = $pre_ptsz { return r; } )?
                launch_prelude!(recorded, true; $shape, $($f)?, $($s)?, $($c)?);
                let r = match variant(&REAL, stringify!($ptsz)) {
                    // SAFETY: the driver's own `_ptsz` variant, which has the plain entry
                    // point's C signature; the caller's arguments.
                    Some(f) => unsafe { std::mem::transmute::<usize, Real>(f)($($arg),*) },
                    None => status::NOT_FOUND,
                };
                if recorded { r } else { accounted(r) }
            })
        }
    };
}

gated_launch!(cuLaunchKernel, cuLaunchKernel_ptsz, (
    f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
    shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void
), dims(f, gx, gy, gz, bx, by, bz, shared), migrating f, on stream,
    first sliced(false, f, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra),
    sliced(true, f, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra));
gated_launch!(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, (
    config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void
), config_shape(f, config), migrating f, configured config,
    first sliced_ex(false, config, f, params, extra), sliced_ex(true, config, f, params, extra));
gated_launch!(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, (
    f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
    shared: c_uint, stream: CUstream, params: *mut *mut c_void
), dims(f, gx, gy, gz, bx, by, bz, shared), migrating f, on stream,
    first cooperative_whole(f, (gx, gy, gz)), cooperative_whole(f, (gx, gy, gz)));
// a graph's kernels are not visible here: no shape
gated_launch!(cuGraphLaunch, cuGraphLaunch_ptsz, (graph: CUgraphExec, stream: CUstream), None, on stream);
// the legacy launches (block shape set by cuFuncSetBlockShape, not seen here) and the
// deprecated multi-device launch, gated like the others
gated_launch_plain!(cuLaunch, (f: CUfunction), None, migrating f);
gated_launch_plain!(cuLaunchGrid, (f: CUfunction, width: c_int, height: c_int), None, migrating f);
gated_launch_plain!(cuLaunchGridAsync, (f: CUfunction, width: c_int, height: c_int, stream: CUstream),
    None, migrating f, on stream);
gated_launch_plain!(cuLaunchCooperativeKernelMultiDevice,
    (params: *mut CUDA_LAUNCH_PARAMS, devices: c_uint, flags: c_uint), None);
