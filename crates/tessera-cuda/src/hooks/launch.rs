//! The launch gate's hooks: every kernel and graph launch (and its per-thread-stream
//! variant) waits for the slice the daemon's policy grants and is accounted after it,
//! unless it is recorded into a stream capture; and the functions and kernels the
//! launches name (noted for the gate's facts, virtual ones when the program may
//! migrate).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::{capture, current_gpu, guarded, variant};
use crate::migrate::migration;
use crate::slicing::slicing;
use crate::state::state;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use tessera_driver::sys::{
    CUDA_LAUNCH_PARAMS, CUfunction, CUfunction_attribute, CUgraphExec, CUjit_option, CUkernel,
    CUlaunchAttribute, CUlaunchConfig, CUlibrary, CUlibraryOption, CUmodule, CUstream,
};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [
        cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch, cuLaunch,
        cuLaunchGrid, cuLaunchGridAsync, cuLaunchCooperativeKernelMultiDevice, cuModuleLoadData,
        cuModuleGetFunction, cuFuncGetAttribute, cuLibraryGetKernel, cuLibraryLoadData,
        cuModuleLoad, cuLibraryLoadFromFile, cuModuleLoadFatBinary,
    ],
    variants: [
        cuLaunchKernel_ptsz => cuLaunchKernel,
        cuLaunchKernelEx_ptsz => cuLaunchKernelEx,
        cuLaunchCooperativeKernel_ptsz => cuLaunchCooperativeKernel,
        cuGraphLaunch_ptsz => cuGraphLaunch,
    ],
    unchecked: [],
}

/// Said once that a binary module runs whole: a program that loads many (the CUDA
/// runtime) would fill the log.
pub(super) fn say_binary_once() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::log::line_once(
        &SAID,
        format_args!(
            "kernel slicing: a binary module (a cubin) is loaded as given, its kernels \
             whole (only PTX is rewritten); said once"
        ),
    );
}

/// The program's PTX `image` with its kernels' twins, when kernel slicing is on and the
/// image is PTX text some kernel of which the rewrite handles.
fn with_twins(image: *const c_void) -> Option<crate::slicing::Rewritten> {
    if !slicing().enabled() || image.is_null() {
        return None;
    }
    // SAFETY: non-null; a module image begins with at least 4 bytes (ELF and fatbin
    // magics, or PTX text).
    let head = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), 4) };
    if head == tessera_ptx::elf::MAGIC {
        // a cubin has no PTX, unless nvJitLink linked it here and was asked for it
        let text = super::nvjitlink::ptx_of_cubin(image)?;
        return slicing().rewrite(&text);
    }
    if tessera_ptx::is_binary_module(head) {
        // a fat binary's PTX for this GPU, if it carries one
        let text = super::fatbin::ptx_of(image, [head[0], head[1], head[2], head[3]])?;
        return slicing().rewrite(&text);
    }
    // SAFETY: a PTX image is a NUL-terminated string (cuModuleLoadData's contract).
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_str().ok()?;
    slicing().rewrite(text)
}

/// `image` loaded by `load` (the driver's module or library load, which writes the
/// handle to `handle`) with its kernels' twins: `Some` of the load's result when it took
/// them; `None` — for the caller to load what the program gave — when the image has no
/// twins or the driver refused them (said in the log).
fn load_with_twins<T>(
    image: *const c_void,
    handle: *mut *mut T,
    what: &str,
    load: impl Fn(*const c_void) -> CuResult,
) -> Option<CuResult> {
    let rewritten = with_twins(image)?;
    let r = load(rewritten.image.as_ptr().cast());
    if r == status::SUCCESS && !handle.is_null() {
        // SAFETY: checked non-null; the load just wrote it.
        slicing().loaded(unsafe { *handle } as usize, rewritten);
        return Some(r);
    }
    crate::log::line(format_args!(
        "kernel slicing: the driver refused the {what} with twins ({r}); loaded as given"
    ));
    None
}

/// `cuModuleLoadData`: a PTX module is kept, for loading on another GPU after a move;
/// with kernel slicing, loaded with its kernels' twins (as given, if the driver refuses
/// them).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult {
    guarded("cuModuleLoadData", || {
        let load = |image| migration().load(module, image);
        load_with_twins(image, module, "module", load).unwrap_or_else(|| load(image))
    })
}

/// `cuModuleLoadFatBinary` (an older CUDA runtime's load of a fat binary): with kernel
/// slicing, its PTX for the GPU loaded with twins as [`cuModuleLoadData`] loads it (kept
/// for a move to another GPU as that text); else the driver's own, as given.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuModuleLoadFatBinary(
    module: *mut CUmodule,
    fat_cubin: *const c_void,
) -> CuResult {
    guarded("cuModuleLoadFatBinary", || {
        let load = |image| migration().load(module, image);
        load_with_twins(fat_cubin, module, "module", load)
            .unwrap_or_else(|| real!(cuModuleLoadFatBinary(module, fat_cubin)))
    })
}

/// With kernel slicing, the text of the module file `path` names when it is PTX, up to
/// its first NUL (the driver reads PTX as a C string) and NUL-terminated, or a fat
/// binary's PTX for the GPU; `None` for a cubin or a fat binary without such PTX (said
/// once, as for one given in memory) or a file that cannot be read (the driver says why
/// when given it).
fn ptx_file(path: *const c_char) -> Option<Vec<u8>> {
    use std::io::Read as _;
    if !slicing().enabled() || path.is_null() {
        return None;
    }
    // SAFETY: non-null, the program's NUL-terminated file name (the driver's contract).
    let path = unsafe { CStr::from_ptr(path) };
    let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes());
    let mut file = std::fs::File::open(path).ok()?;
    // the magic first: a cubin is not read into memory here
    let mut head = [0u8; 4];
    file.read_exact(&mut head).ok()?;
    if tessera_ptx::fatbin::is_fatbin(&head) {
        // a fat binary: its PTX for the GPU, if it carries one (as from memory)
        let mut bytes = head.to_vec();
        // (no more than the most a fat binary may be: a corrupt file's length is not
        // read into the program's memory)
        file.take(1 << 30).read_to_end(&mut bytes).ok()?;
        let mut text = super::fatbin::ptx_of_bytes(&bytes)?.into_bytes();
        text.push(0);
        return Some(text);
    }
    if tessera_ptx::is_binary_module(&head) {
        say_binary_once();
        return None;
    }
    let mut text = head.to_vec();
    file.read_to_end(&mut text).ok()?;
    if let Some(end) = text.iter().position(|b| *b == 0) {
        text.truncate(end);
    }
    text.push(0);
    Some(text)
}

/// `cuModuleLoad` (a module from a file): with kernel slicing, a PTX file is read and
/// loaded as [`cuModuleLoadData`] loads its text with twins; anything else — slicing
/// off, a binary or unreadable file, a module without twins or one the driver refuses
/// with them — goes to the driver by its file name, as the program gave it. (Only a
/// module loaded from its text is kept for a move to another GPU: with slicing off, a
/// module from a file is not.)
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) -> CuResult {
    guarded("cuModuleLoad", || {
        ptx_file(fname)
            .and_then(|text| {
                let load = |image| migration().load(module, image);
                load_with_twins(text.as_ptr().cast(), module, "module", load)
            })
            .unwrap_or_else(|| real!(cuModuleLoad(module, fname)))
    })
}

/// `cuModuleGetFunction`: a virtual function for a virtual module; with kernel slicing,
/// the kernel's twin noted beside it.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CuResult {
    guarded("cuModuleGetFunction", || {
        let r = migration().function(function, module, name);
        if r == status::SUCCESS && slicing().enabled() && !name.is_null() && !function.is_null() {
            // SAFETY: non-null, the program's NUL-terminated name.
            let name = unsafe { CStr::from_ptr(name) };
            let twin = slicing().twin_of(module as usize, name).and_then(|(twin, params)| {
                let mut t: CUfunction = std::ptr::null_mut();
                (migration().function(&mut t, module, twin.as_ptr()) == status::SUCCESS)
                    .then_some((t as usize, params))
            });
            // SAFETY: checked non-null; the driver just wrote it.
            slicing().function_twin(unsafe { *function } as usize, twin);
        }
        r
    })
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

/// `cuFuncGetAttribute`: of the current device's function for a virtual one.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuFuncGetAttribute(
    value: *mut c_int,
    attribute: CUfunction_attribute,
    f: CUfunction,
) -> CuResult {
    guarded("cuFuncGetAttribute", || match migration().real_function(f) {
        Ok(f) => real!(cuFuncGetAttribute(value, attribute, f)),
        Err(e) => e,
    })
}

/// The CUDA 12 kernels (`CUkernel`) the program got from `cuLibraryGetKernel`: a
/// kernel handle may be launched where a function goes, and stands for the kernel's
/// function in the current context.
fn kernels() -> &'static std::sync::Mutex<std::collections::HashSet<u64>> {
    static KERNELS: OnceLock<std::sync::Mutex<std::collections::HashSet<u64>>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

/// If `handle` is a `CUkernel`, the device it runs on when launched now (the current
/// context's).
pub(crate) fn kernel_device(handle: u64) -> Option<i32> {
    if !kernels().lock().ok()?.contains(&handle) {
        return None;
    }
    current_gpu().ok().and_then(|g| i32::try_from(g).ok())
}

/// A library load's options, as the program gave them (passed through unchanged).
struct LibraryOptions {
    jit_options: *mut CUjit_option,
    jit_option_values: *mut *mut c_void,
    num_jit_options: c_uint,
    library_options: *mut CUlibraryOption,
    library_option_values: *mut *mut c_void,
    num_library_options: c_uint,
}

impl LibraryOptions {
    /// The driver's `cuLibraryLoadData` of `code` with these options.
    fn load_data(&self, library: *mut CUlibrary, code: *const c_void) -> CuResult {
        real!(cuLibraryLoadData(
            library,
            code,
            self.jit_options,
            self.jit_option_values,
            self.num_jit_options,
            self.library_options,
            self.library_option_values,
            self.num_library_options
        ))
    }
}

/// `cuLibraryLoadData` (CUDA 12's context-independent modules, as cuda-core loads
/// them): with kernel slicing, a PTX library is loaded with its kernels' twins (as
/// given, if the driver refuses them); anything else passes.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuLibraryLoadData(
    library: *mut CUlibrary,
    code: *const c_void,
    jit_options: *mut CUjit_option,
    jit_option_values: *mut *mut c_void,
    num_jit_options: c_uint,
    library_options: *mut CUlibraryOption,
    library_option_values: *mut *mut c_void,
    num_library_options: c_uint,
) -> CuResult {
    let options = LibraryOptions {
        jit_options,
        jit_option_values,
        num_jit_options,
        library_options,
        library_option_values,
        num_library_options,
    };
    guarded("cuLibraryLoadData", || {
        let load = |code| options.load_data(library, code);
        load_with_twins(code, library, "library", load).unwrap_or_else(|| load(code))
    })
}

/// `cuLibraryLoadFromFile`: with kernel slicing, a PTX file is read and loaded as
/// [`cuLibraryLoadData`] loads its text with twins; anything else goes to the driver by
/// its file name, as the program gave it.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuLibraryLoadFromFile(
    library: *mut CUlibrary,
    file_name: *const c_char,
    jit_options: *mut CUjit_option,
    jit_option_values: *mut *mut c_void,
    num_jit_options: c_uint,
    library_options: *mut CUlibraryOption,
    library_option_values: *mut *mut c_void,
    num_library_options: c_uint,
) -> CuResult {
    let options = LibraryOptions {
        jit_options,
        jit_option_values,
        num_jit_options,
        library_options,
        library_option_values,
        num_library_options,
    };
    guarded("cuLibraryLoadFromFile", || {
        ptx_file(file_name)
            .and_then(|text| {
                let load = |code| options.load_data(library, code);
                load_with_twins(text.as_ptr().cast(), library, "library", load)
            })
            .unwrap_or_else(|| {
                let o = &options;
                real!(cuLibraryLoadFromFile(
                    library,
                    file_name,
                    o.jit_options,
                    o.jit_option_values,
                    o.num_jit_options,
                    o.library_options,
                    o.library_option_values,
                    o.num_library_options
                ))
            })
    })
}

/// `cuLibraryGetKernel`: notes the kernel handle (for the launch gate's facts); with
/// kernel slicing, the kernel's twin beside it (a kernel handle is launched where a
/// function goes).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn cuLibraryGetKernel(
    kernel: *mut CUkernel,
    library: CUlibrary,
    name: *const c_char,
) -> CuResult {
    guarded("cuLibraryGetKernel", || {
        let r = real!(cuLibraryGetKernel(kernel, library, name));
        if r != status::SUCCESS || kernel.is_null() {
            return r;
        }
        // SAFETY: checked non-null; the driver just wrote it.
        let handle = unsafe { *kernel };
        if let Ok(mut known) = kernels().lock() {
            known.insert(handle as u64);
        }
        if slicing().enabled() && !name.is_null() {
            // SAFETY: non-null, the program's NUL-terminated name.
            let name = unsafe { CStr::from_ptr(name) };
            let twin = slicing().twin_of(library as usize, name).and_then(|(twin, params)| {
                let mut t: CUkernel = std::ptr::null_mut();
                (real!(cuLibraryGetKernel(&mut t, library, twin.as_ptr())) == status::SUCCESS)
                    .then_some((t, params))
            });
            if let Some((t, _)) = twin
                && let Ok(mut known) = kernels().lock()
            {
                known.insert(t as u64);
            }
            slicing().function_twin(handle as usize, twin.map(|(t, p)| (t as usize, p)));
        }
        r
    })
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
