//! The modules, functions and kernels the launches name: module and library loads
//! (with kernel slicing, each PTX kernel's twin compiled beside it), functions and
//! kernels looked up (noted for the launch gate's facts, virtual ones when the program
//! may migrate).
#![allow(unsafe_code)]
// the unit-test binary does not export the hooks, so nothing calls them there
#![cfg_attr(test, allow(dead_code))]
// the hooks carry the driver's own names
#![allow(non_snake_case)]

use super::{current_gpu, guarded};
use crate::migrate::migration;
use crate::slicing::slicing;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use tessera_driver::sys::{
    CUfunction, CUfunction_attribute, CUjit_option, CUkernel, CUlibrary, CUlibraryOption, CUmodule,
};
use tessera_driver::{CuResult, status};

hooks! {
    checked: [
        cuModuleLoadData, cuModuleGetFunction, cuFuncGetAttribute, cuLibraryGetKernel,
        cuLibraryLoadData, cuModuleLoad, cuLibraryLoadFromFile, cuModuleLoadFatBinary,
    ],
    variants: [],
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
