//! Kernels linked by nvJitLink (issue 58): numba-cuda compiles a kernel to LTO-IR,
//! links it with NVIDIA's nvJitLink itself (through cuda-bindings, which `dlopen`s
//! `libnvJitLink.so` and `dlsym`s its entry points) and hands the driver a cubin, which
//! has no PTX to rewrite. With kernel slicing on, `dlsym` answers nvJitLink's entry
//! points with these hooks: they note each link's options and inputs, and when the
//! program takes the cubin, the same inputs are linked once more with `-ptx` (what
//! `nvJitLinkGetLinkedPtx` gives; supported with `-lto`) and the cubin's bytes are kept
//! with that PTX. When the program then loads that cubin (`cuModuleLoadData`,
//! `cuLibraryLoadData`, ...), the interposer loads the PTX with its kernels' twins
//! instead ([`ptx_of_cubin`], called by `launch.rs`): the driver compiles it, as it
//! compiles any PTX it is given.
//!
//! A link without `-lto` is taken as its PTX only when its one input is PTX (several
//! modules do not make one text); any other link, a second link that fails, or inputs
//! over [`MAX_INPUTS`], leave the cubin as it is, its kernels whole, said once with the
//! reason. Only look-ups through `dlsym` are answered (cuda-bindings' way); a program
//! linked against `libnvJitLink` directly calls it unseen.

#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// `nvJitLinkResult`.
type Res = c_int;
const SUCCESS: Res = 0;
/// `NVJITLINK_ERROR_INTERNAL`: answered if a hook has no real entry point to call.
const ERROR_INTERNAL: Res = 6;
/// `nvJitLinkInputType`'s PTX.
const INPUT_PTX: c_int = 2;

/// The most input bytes one link may note (copies kept until the cubin is taken).
pub const MAX_INPUTS: usize = 256 << 20;
/// The most cubins kept with their PTX (the oldest is dropped first).
const KEPT_CUBINS: usize = 64;
/// The most bytes of cubins and PTX kept.
const KEPT_BYTES: usize = 256 << 20;

type Handle = *mut c_void;
type CreateFn = unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> Res;
type DestroyFn = unsafe extern "C" fn(*mut Handle) -> Res;
type AddDataFn = unsafe extern "C" fn(Handle, c_int, *const c_void, usize, *const c_char) -> Res;
type AddFileFn = unsafe extern "C" fn(Handle, c_int, *const c_char) -> Res;
type CompleteFn = unsafe extern "C" fn(Handle) -> Res;
type SizeFn = unsafe extern "C" fn(Handle, *mut usize) -> Res;
type GetFn = unsafe extern "C" fn(Handle, *mut c_void) -> Res;

/// The entry points hooked, and where the real one found for each is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hooked {
    Create,
    Destroy,
    AddData,
    AddFile,
    GetLinkedCubin,
}

static REAL: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];
/// The `dlsym` handle nvJitLink's names were found through, and the version suffix the
/// program asked with (`_12_9`, or none), to find the entry points the second link
/// needs that the program never asked for.
static LIBRARY: Mutex<Option<(usize, String)>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The entry point `name` is (`nvJitLinkCreate` or a versioned `__nvJitLinkCreate_12_9`),
/// and its version suffix.
fn parse(name: &[u8]) -> Option<(Hooked, String)> {
    let name = std::str::from_utf8(name).ok()?;
    let (base, suffix) = match name.strip_prefix("__") {
        None => (name, ""),
        Some(rest) => {
            // `_MAJOR_MINOR` after the entry point's name
            let mut parts = rest.rsplitn(3, '_');
            let (minor, major, base) = (parts.next()?, parts.next()?, parts.next()?);
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(minor) || !digits(major) {
                return None;
            }
            (base, &rest[base.len()..])
        }
    };
    let hooked = match base {
        "nvJitLinkCreate" => Hooked::Create,
        "nvJitLinkDestroy" => Hooked::Destroy,
        "nvJitLinkAddData" => Hooked::AddData,
        "nvJitLinkAddFile" => Hooked::AddFile,
        "nvJitLinkGetLinkedCubin" => Hooked::GetLinkedCubin,
        _ => return None,
    };
    Some((hooked, suffix.to_owned()))
}

/// `dlsym`'s answer for the nvJitLink entry point `name`, found as `found` through
/// `handle`: its hook when slicing is on and it is one of those hooked.
pub(super) fn hook_for(
    name: &[u8],
    found: *mut c_void,
    handle: *mut c_void,
) -> Option<*mut c_void> {
    let (hooked, suffix) = parse(name)?;
    if !crate::slicing::slicing().enabled() {
        return None;
    }
    // the first library's entry points are the ones hooked: a second nvJitLink in the
    // process (a CUDA 12 and a CUDA 13 wheel) is answered as it is, unhooked, so that
    // no handle of one library reaches the other's functions
    let slot = &REAL[hooked as usize];
    if let Err(first) =
        slot.compare_exchange(0, found as usize, Ordering::AcqRel, Ordering::Acquire)
        && first != found as usize
    {
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        crate::log::line_once(
            &SAID,
            format_args!(
                "kernel slicing: a second nvJitLink library in the process; its links are \
                 not hooked, their cubins run whole"
            ),
        );
        return None;
    }
    lock(&LIBRARY).get_or_insert((handle as usize, suffix));
    Some(match hooked {
        Hooked::Create => create as CreateFn as *mut c_void,
        Hooked::Destroy => destroy as DestroyFn as *mut c_void,
        Hooked::AddData => add_data as AddDataFn as *mut c_void,
        Hooked::AddFile => add_file as AddFileFn as *mut c_void,
        Hooked::GetLinkedCubin => get_linked_cubin as GetFn as *mut c_void,
    })
}

/// The real entry point kept for `hooked`.
fn real<F: Copy>(hooked: Hooked) -> Option<F> {
    let addr = REAL[hooked as usize].load(Ordering::Acquire);
    // SAFETY: a non-zero address is what `dlsym` found for this entry point, whose C
    // signature `F` is (each caller names the one of the entry point it asks for).
    (addr != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
}

/// An entry point of the library the program's were found in, by its plain name or
/// the program's version suffix.
fn resolve<F: Copy>(base: &str) -> Option<F> {
    let (handle, suffix) = lock(&LIBRARY).clone()?;
    let dlsym = crate::real::real_dlsym()?;
    for name in [base.to_owned(), format!("__{base}{suffix}")] {
        let name = CString::new(name).ok()?;
        // SAFETY: the loader's dlsym with the handle the program's look-up used and a
        // NUL-terminated name.
        let p = unsafe { dlsym(handle as *mut c_void, name.as_ptr()) };
        if !p.is_null() {
            // SAFETY: the entry point `base`, whose C signature `F` is (the caller's).
            return Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) });
        }
    }
    None
}

/// What one link was given.
#[derive(Debug, Default)]
struct Link {
    options: Vec<CString>,
    inputs: Vec<Input>,
    bytes: usize,
    /// Why its PTX will not be asked for, once known.
    unusable: Option<String>,
}

#[derive(Debug)]
struct Input {
    kind: c_int,
    source: Source,
    name: Option<CString>,
}

#[derive(Debug)]
enum Source {
    Bytes(Vec<u8>),
    File(CString),
}

/// The links open, by handle.
static LINKS: Mutex<Option<HashMap<usize, Link>>> = Mutex::new(None);

fn with_link(handle: Handle, f: impl FnOnce(&mut Link)) {
    if let Some(link) = lock(&LINKS).get_or_insert_with(HashMap::new).get_mut(&(handle as usize)) {
        f(link);
    }
}

/// Run `f`, never letting a panic unwind into the program's C.
fn quietly(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

unsafe extern "C" fn create(handle: *mut Handle, n: u32, options: *const *const c_char) -> Res {
    let Some(real) = real::<CreateFn>(Hooked::Create) else { return ERROR_INTERNAL };
    // SAFETY: forwarded with the program's arguments.
    let r = unsafe { real(handle, n, options) };
    if r == SUCCESS && !handle.is_null() {
        quietly(|| {
            let count = if options.is_null() { 0 } else { n as usize };
            let options = (0..count)
                .filter_map(|i| {
                    // SAFETY: `n` option strings, NUL-terminated (nvJitLinkCreate's
                    // contract, which the real call just relied on).
                    let p = unsafe { *options.add(i) };
                    // SAFETY: as above, a non-null option string.
                    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
                })
                .collect();
            // SAFETY: written by the successful call.
            let h = unsafe { *handle } as usize;
            lock(&LINKS)
                .get_or_insert_with(HashMap::new)
                .insert(h, Link { options, ..Link::default() });
        });
    }
    r
}

unsafe extern "C" fn destroy(handle: *mut Handle) -> Res {
    let Some(real) = real::<DestroyFn>(Hooked::Destroy) else { return ERROR_INTERNAL };
    if !handle.is_null() {
        quietly(|| {
            // SAFETY: the program's handle, which it is destroying.
            let h = unsafe { *handle } as usize;
            lock(&LINKS).get_or_insert_with(HashMap::new).remove(&h);
        });
    }
    // SAFETY: forwarded with the program's argument.
    unsafe { real(handle) }
}

fn note(
    handle: Handle,
    kind: c_int,
    source: impl FnOnce() -> Option<Source>,
    len: usize,
    name: *const c_char,
) {
    with_link(handle, |link| {
        if link.unusable.is_some() {
            return;
        }
        link.bytes = link.bytes.saturating_add(len);
        if link.bytes > MAX_INPUTS {
            link.unusable = Some(format!("its inputs exceed {} MiB", MAX_INPUTS >> 20));
            link.inputs.clear();
            return;
        }
        let Some(source) = source() else {
            link.unusable = Some("an input could not be read".into());
            return;
        };
        // SAFETY: a NUL-terminated name or null (nvJitLink's contract).
        let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_owned());
        link.inputs.push(Input { kind, source, name });
    });
}

unsafe extern "C" fn add_data(
    handle: Handle,
    kind: c_int,
    data: *const c_void,
    size: usize,
    name: *const c_char,
) -> Res {
    let Some(real) = real::<AddDataFn>(Hooked::AddData) else { return ERROR_INTERNAL };
    // SAFETY: forwarded with the program's arguments.
    let r = unsafe { real(handle, kind, data, size, name) };
    if r == SUCCESS {
        quietly(|| {
            let copy = || {
                (!data.is_null()).then(|| {
                    // SAFETY: `size` bytes at `data`, which the real call just read;
                    // copied only within MAX_INPUTS (`note` checks the length first).
                    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
                    Source::Bytes(bytes.to_vec())
                })
            };
            note(handle, kind, copy, size, name);
        });
    }
    r
}

unsafe extern "C" fn add_file(handle: Handle, kind: c_int, file: *const c_char) -> Res {
    let Some(real) = real::<AddFileFn>(Hooked::AddFile) else { return ERROR_INTERNAL };
    // SAFETY: forwarded with the program's arguments.
    let r = unsafe { real(handle, kind, file) };
    if r == SUCCESS && !file.is_null() {
        quietly(|| {
            // SAFETY: NUL-terminated (the contract the real call relied on).
            let path = unsafe { CStr::from_ptr(file) }.to_owned();
            note(handle, kind, || Some(Source::File(path.clone())), 0, std::ptr::null());
        });
    }
    r
}

unsafe extern "C" fn get_linked_cubin(handle: Handle, cubin: *mut c_void) -> Res {
    let Some(real) = real::<GetFn>(Hooked::GetLinkedCubin) else { return ERROR_INTERNAL };
    // SAFETY: forwarded with the program's arguments.
    let r = unsafe { real(handle, cubin) };
    if r == SUCCESS && !cubin.is_null() {
        quietly(|| keep_ptx(handle, cubin));
    }
    r
}

/// Said once that an nvJitLink link's cubin runs whole, with the first reason.
fn say_whole_once(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::log::line_once(
        &SAID,
        format_args!(
            "kernel slicing: a cubin nvJitLink linked is loaded as given, its kernels whole \
             ({why}); said once"
        ),
    );
}

/// After the program took the cubin of `handle`'s link (written at `cubin`): link its
/// inputs again to PTX and keep the cubin's bytes with it.
fn keep_ptx(handle: Handle, cubin: *mut c_void) {
    let Some(link) = lock(&LINKS).get_or_insert_with(HashMap::new).remove(&(handle as usize))
    else {
        return;
    };
    let Some(size_of) = resolve::<SizeFn>("nvJitLinkGetLinkedCubinSize") else {
        return say_whole_once("nvJitLinkGetLinkedCubinSize not found");
    };
    let mut n = 0usize;
    // SAFETY: the program's handle, whose link completed (its cubin was just given).
    if unsafe { size_of(handle, &mut n) } != SUCCESS
        || n == 0
        || n as u64 > tessera_ptx::elf::MAX_CUBIN
    {
        return say_whole_once("the cubin's size could not be had");
    }
    // SAFETY: the real call just wrote the link's `n`-byte cubin at `cubin`.
    let bytes = unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), n) }.to_vec();
    match linked_ptx(&link) {
        Ok(ptx) => {
            crate::log::line(format_args!(
                "kernel slicing: nvJitLink's link of {} input(s) taken as PTX too ({} bytes), \
                 to load in place of its {n}-byte cubin",
                link.inputs.len(),
                ptx.len()
            ));
            keep(bytes, ptx);
        }
        Err(why) => say_whole_once(&why),
    }
}

/// The PTX of `link`: its one PTX input when it was not link-time optimised, else its
/// inputs linked again with `-ptx`.
fn linked_ptx(link: &Link) -> Result<String, String> {
    if let Some(why) = &link.unusable {
        return Err(why.clone());
    }
    // the PTX is compiled by the driver, not by this link: an option for that compile
    // (-maxrregcount, -O, -Xptxas, ...) would be lost, so such a link keeps its cubin
    if let Some(o) = link.options.iter().find(|o| !option_kept_in_ptx(o.as_bytes())) {
        return Err(format!(
            "option {} applies to the cubin's compile, which the driver's compile of the \
             PTX would not apply",
            o.to_string_lossy()
        ));
    }
    if !link.options.iter().any(|o| o.as_bytes() == b"-lto") {
        return match link.inputs.as_slice() {
            [Input { kind: INPUT_PTX, source, .. }] => {
                let bytes = match source {
                    Source::Bytes(b) => b.clone(),
                    Source::File(p) => std::fs::read(
                        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p.to_bytes()),
                    )
                    .map_err(|e| format!("its PTX file: {e}"))?,
                };
                let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                String::from_utf8(bytes[..end].to_vec()).map_err(|_| "its PTX is not UTF-8".into())
            }
            inputs => Err(format!(
                "a link without -lto of {} inputs: no one PTX text holds it",
                inputs.len()
            )),
        };
    }
    link_again(link)
}

/// Whether the link option `o` is carried by the PTX the link makes (or concerns the
/// link alone): the target, link-time optimisation, and line or debug information.
fn option_kept_in_ptx(o: &[u8]) -> bool {
    o.starts_with(b"-arch=") || matches!(o, b"-lto" | b"-lineinfo" | b"-g")
}

/// Link `link`'s inputs again with `-ptx` and take the PTX.
fn link_again(link: &Link) -> Result<String, String> {
    let missing = |f: &str| format!("{f} not found");
    let create = real::<CreateFn>(Hooked::Create).ok_or_else(|| missing("nvJitLinkCreate"))?;
    let destroy = real::<DestroyFn>(Hooked::Destroy)
        .or_else(|| resolve("nvJitLinkDestroy"))
        .ok_or_else(|| missing("nvJitLinkDestroy"))?;
    let add_data = real::<AddDataFn>(Hooked::AddData)
        .or_else(|| resolve("nvJitLinkAddData"))
        .ok_or_else(|| missing("nvJitLinkAddData"))?;
    let add_file = real::<AddFileFn>(Hooked::AddFile).or_else(|| resolve("nvJitLinkAddFile"));
    let complete =
        resolve::<CompleteFn>("nvJitLinkComplete").ok_or_else(|| missing("nvJitLinkComplete"))?;
    let ptx_size = resolve::<SizeFn>("nvJitLinkGetLinkedPtxSize")
        .ok_or_else(|| missing("nvJitLinkGetLinkedPtxSize"))?;
    let get_ptx = resolve::<GetFn>("nvJitLinkGetLinkedPtx")
        .ok_or_else(|| missing("nvJitLinkGetLinkedPtx"))?;
    let mut options: Vec<*const c_char> = link.options.iter().map(|o| o.as_ptr()).collect();
    options.push(c"-ptx".as_ptr());
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: nvJitLinkCreate with a handle to write and NUL-terminated options that
    // outlive the call.
    let r = unsafe { create(&mut h, options.len() as u32, options.as_ptr()) };
    if r != SUCCESS {
        return Err(format!("nvJitLinkCreate with -ptx: error {r}"));
    }
    let result = (|| {
        for input in &link.inputs {
            let name = input.name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr());
            let r = match &input.source {
                // SAFETY: the handle just created, bytes and name that outlive the call.
                Source::Bytes(b) => unsafe {
                    add_data(h, input.kind, b.as_ptr().cast(), b.len(), name)
                },
                Source::File(p) => match add_file {
                    // SAFETY: as above, a NUL-terminated path.
                    Some(add_file) => unsafe { add_file(h, input.kind, p.as_ptr()) },
                    None => return Err(missing("nvJitLinkAddFile")),
                },
            };
            if r != SUCCESS {
                return Err(format!("adding an input again: error {r}"));
            }
        }
        // SAFETY: the handle created above.
        let r = unsafe { complete(h) };
        if r != SUCCESS {
            return Err(format!("the link with -ptx: error {r}"));
        }
        let mut n = 0usize;
        // SAFETY: as above.
        if unsafe { ptx_size(h, &mut n) } != SUCCESS || n == 0 {
            return Err("no PTX from the link".into());
        }
        let mut text = vec![0u8; n];
        // SAFETY: a buffer of the size nvJitLink asked for.
        if unsafe { get_ptx(h, text.as_mut_ptr().cast()) } != SUCCESS {
            return Err("the PTX could not be had".into());
        }
        let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        text.truncate(end);
        String::from_utf8(text).map_err(|_| "the PTX is not UTF-8".into())
    })();
    // SAFETY: the handle created above, destroyed once.
    unsafe { destroy(&mut h) };
    result
}

/// A cubin nvJitLink linked, with the PTX of the same link.
struct Kept {
    cubin: Vec<u8>,
    ptx: String,
}

static KEPT: Mutex<VecDeque<Kept>> = Mutex::new(VecDeque::new());

fn keep(cubin: Vec<u8>, ptx: String) {
    let mut kept = lock(&KEPT);
    if kept.iter().any(|k| k.cubin == cubin) {
        return;
    }
    kept.push_back(Kept { cubin, ptx });
    while kept.len() > KEPT_CUBINS
        || kept.iter().map(|k| k.cubin.len() + k.ptx.len()).sum::<usize>() > KEPT_BYTES
    {
        kept.pop_front();
    }
}

/// The PTX of the link that made the cubin at `image`, if it is one nvJitLink linked
/// under these hooks; else `None`, said once (a cubin's kernels run whole).
pub(super) fn ptx_of_cubin(image: *const c_void) -> Option<String> {
    let found = (|| {
        let kept = lock(&KEPT);
        if kept.is_empty() {
            return None;
        }
        let base = image.cast::<u8>();
        // SAFETY: a cubin begins with its 64-byte ELF header, which the driver reads too.
        let header = unsafe { std::slice::from_raw_parts(base, tessera_ptx::elf::HEADER_LEN) };
        // only a cubin whose header is a kept one's is read further, and no further than
        // that kept cubin's length: a corrupt or foreign header never makes this read far
        kept.iter().filter(|k| k.cubin.get(..header.len()) == Some(header)).find_map(|k| {
            let bound = k.cubin.len() as u64;
            let len = tessera_ptx::elf::extent_within(bound, &mut |at, len| {
                // SAFETY: within the first `bound` bytes of an image whose ELF header is
                // that of a cubin this long, at offsets its headers name (checked
                // against `bound` before the read): bytes the driver reads of the image
                // it is given.
                Some(unsafe { std::slice::from_raw_parts(base.add(at as usize), len) }.to_vec())
            })
            .ok()?;
            if len != bound {
                return None;
            }
            // SAFETY: the image is `bound` bytes long, by its headers.
            let bytes = unsafe { std::slice::from_raw_parts(base, k.cubin.len()) };
            (k.cubin == bytes).then(|| k.ptx.clone())
        })
    })();
    match found {
        Some(ptx) => {
            crate::log::line(format_args!(
                "kernel slicing: a cubin nvJitLink linked: its link's PTX, with twins, is given \
                 to the driver in its place"
            ));
            Some(ptx)
        }
        None => {
            super::modules::say_binary_once();
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_versioned_names_are_read() {
        assert_eq!(parse(b"nvJitLinkCreate"), Some((Hooked::Create, String::new())));
        assert_eq!(parse(b"__nvJitLinkAddData_12_9"), Some((Hooked::AddData, "_12_9".into())));
        assert_eq!(
            parse(b"__nvJitLinkGetLinkedCubin_13_0"),
            Some((Hooked::GetLinkedCubin, "_13_0".into()))
        );
        // not hooked: the rest of the API, and names that only look like it
        assert_eq!(parse(b"nvJitLinkComplete"), None);
        assert_eq!(parse(b"__nvJitLinkGetLinkedCubinSize_12_9"), None);
        assert_eq!(parse(b"__nvJitLinkCreate"), None);
        assert_eq!(parse(b"__nvJitLinkCreate_12_x"), None);
        assert_eq!(parse(b"nvJitLinkCreateX"), None);
    }

    fn link(options: &[&str], inputs: Vec<Input>) -> Link {
        Link {
            options: options.iter().map(|o| CString::new(*o).unwrap()).collect(),
            inputs,
            ..Link::default()
        }
    }

    #[test]
    fn a_link_without_lto_is_its_one_ptx_input_or_nothing() {
        let ptx =
            |t: &[u8]| Input { kind: INPUT_PTX, source: Source::Bytes(t.to_vec()), name: None };
        let one = link(&["-arch=sm_90"], vec![ptx(b".entry k()\n{ ret; }\0junk")]);
        assert_eq!(linked_ptx(&one).unwrap(), ".entry k()\n{ ret; }");
        let two = link(&["-arch=sm_90"], vec![ptx(b"a"), ptx(b"b")]);
        assert!(linked_ptx(&two).unwrap_err().contains("2 inputs"));
        let cubin = Input { kind: 1, source: Source::Bytes(vec![0x7f]), name: None };
        assert!(linked_ptx(&link(&["-arch=sm_90"], vec![cubin])).is_err());
        // an option of the cubin's compile (numba's max_registers) keeps the cubin
        let capped = link(&["-arch=sm_90", "-maxrregcount=32"], vec![ptx(b".entry k()")]);
        assert!(linked_ptx(&capped).unwrap_err().contains("-maxrregcount=32"));
        let lined = link(&["-arch=sm_90", "-lineinfo"], vec![ptx(b".entry k()")]);
        assert_eq!(linked_ptx(&lined).unwrap(), ".entry k()");
        let mut big = link(&["-lto"], vec![]);
        big.unusable = Some("its inputs exceed 256 MiB".into());
        assert_eq!(linked_ptx(&big).unwrap_err(), "its inputs exceed 256 MiB");
    }

    #[test]
    fn the_kept_cubins_are_bounded() {
        for i in 0..(KEPT_CUBINS + 5) {
            keep(vec![0x7f, i as u8, (i >> 8) as u8], String::new());
        }
        let kept = lock(&KEPT);
        assert_eq!(kept.len(), KEPT_CUBINS);
        assert_eq!(kept.front().unwrap().cubin[1], 5, "the oldest dropped first");
    }
}
