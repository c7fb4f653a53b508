//! Kernel slicing in the interposer (FairGV §3.3.2, issue 58): with
//! `TESSERA_KERNEL_SLICING=1`, a PTX module is loaded with its kernels' twins
//! (`tessera_ptx::rewrite`), and a launch of a kernel that has one, above the
//! threshold, is issued as sub-kernels of the twin in order on the program's stream,
//! each through the launch gate, so that the daemon can end the program's slice between
//! two of them. The books here map the handles the program holds (modules, functions)
//! to their twins; the hooks do the launching.
//!
//! Whatever the rewrite cannot handle runs as it was: a module whose rewrite the driver
//! refuses is loaded as the program gave it (once said in the log), a kernel the
//! rewrite leaves whole has no twin, and cooperative launches, `cuLaunchKernelEx`
//! launches with an attribute a sub-kernel may not carry, and `extra` arrays with a key
//! this build does not know are never sliced (`hooks/launch.rs`).

use crate::config::{KernelSlicing, SliceSize};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};
use tessera_ptx::{Outcome, Slice, plan, rewrite};

/// The sliced launches the log names, one line each.
const LAUNCHES_SAID: u32 = 100;

/// A kernel's twin as the program's module names it, and its original's parameter count.
#[derive(Clone, Debug)]
struct Twin {
    name: CString,
    params: TwinParams,
}

/// Where a twin's parameters lie beside its original's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwinParams {
    /// The original's parameter count (the twin's four added ones come after).
    pub count: usize,
    /// The end of the original's last parameter in a parameter buffer: a buffer shorter
    /// than this is not the kernel's (the launch runs whole, for the driver to refuse).
    pub end: u32,
    /// The byte offset of the first added parameter in a parameter buffer (after the
    /// original's last, at 4-byte alignment).
    pub added_at: u32,
}

#[derive(Debug, Default)]
struct Books {
    /// Per module handle (as the program holds it): kernel name -> twin.
    modules: HashMap<usize, HashMap<CString, Twin>>,
    /// Per function handle (as the program holds it): the twin's handle and where its
    /// parameters lie.
    functions: HashMap<usize, (usize, TwinParams)>,
    /// The rewritten images, kept for the driver (and for reloading on another GPU).
    images: Vec<CString>,
    /// Per GPU (the driver's device ordinal): blocks per sub-kernel there, from its
    /// multiprocessors, said once each.
    blocks_on: HashMap<u32, u32>,
    /// Kernels whose launch ran whole although they have a twin, said once each.
    said_whole: std::collections::HashSet<usize>,
    /// What the rewrite left whole, said once each (a module loaded again, or in each
    /// context, says nothing new).
    said_unsliced: std::collections::HashSet<String>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Slicing {
    config: Option<KernelSlicing>,
    books: Mutex<Books>,
}

/// The process's slicing, as its configuration says.
// inlined: every launch asks whether slicing is on
#[inline]
pub fn slicing() -> &'static Slicing {
    static S: OnceLock<Slicing> = OnceLock::new();
    S.get_or_init(|| {
        let config = match &crate::state::state().config {
            Ok(c) => c.kernel_slicing,
            Err(_) => None,
        };
        Slicing { config, books: Mutex::new(Books::default()) }
    })
}

/// A module image rewritten with its twins, to load instead of the program's.
#[derive(Debug)]
pub struct Rewritten {
    /// NUL-terminated; lives as long as the process (see [`Slicing::loaded`]).
    pub image: CString,
    twins: HashMap<CString, Twin>,
}

impl Slicing {
    /// Whether slicing is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.config.is_some()
    }

    /// The program's PTX `text` with its kernels' twins, when slicing is on and some
    /// kernel has one (`None`: load the image as it is). Kernels left whole are logged.
    pub fn rewrite(&self, text: &str) -> Option<Rewritten> {
        self.config?;
        let r = match rewrite(text) {
            Ok(r) => r,
            Err(e) => {
                crate::log::line(format_args!("kernel slicing: module left as it is: {e}"));
                return None;
            }
        };
        let mut twins = HashMap::new();
        for k in &r.kernels {
            match &k.outcome {
                Outcome::Sliced { twin, .. } => {
                    if let (Ok(name), Ok(twin)) =
                        (CString::new(k.name.clone()), CString::new(twin.clone()))
                    {
                        let params = TwinParams {
                            count: k.params.params.len(),
                            end: k.params.end(),
                            added_at: k.params.end().next_multiple_of(4),
                        };
                        twins.insert(name, Twin { name: twin, params });
                    }
                }
                Outcome::Unsliced(why) => {
                    let said = format!("kernel slicing: {} runs whole: {why}", k.name);
                    let new =
                        self.books.lock().is_ok_and(|mut b| b.said_unsliced.insert(said.clone()));
                    if new {
                        crate::log::line(format_args!("{said}"));
                    }
                }
            }
        }
        if twins.is_empty() {
            return None;
        }
        let image = CString::new(r.ptx).ok()?;
        Some(Rewritten { image, twins })
    }

    /// The rewritten image was loaded as `module` (the handle the program holds).
    pub fn loaded(&self, module: usize, rewritten: Rewritten) {
        if let Ok(mut b) = self.books.lock() {
            b.modules.insert(module, rewritten.twins);
            b.images.push(rewritten.image);
        }
    }

    /// The twin's name of kernel `name` of `module`, if it has one.
    pub fn twin_of(&self, module: usize, name: &std::ffi::CStr) -> Option<(CString, TwinParams)> {
        let b = self.books.lock().ok()?;
        let t = b.modules.get(&module)?.get(name)?;
        Some((t.name.clone(), t.params))
    }

    /// `function` (the program's handle) has `twin`, its parameters as given; `None`: it
    /// has none (a handle the driver hands out again, after a module was unloaded, must
    /// not keep the twin of the function it named before). A twin whose handle is the
    /// function's own is none: a sub-kernel launches the twin through the launch hook,
    /// which would slice it again without end.
    pub fn function_twin(&self, function: usize, twin: Option<(usize, TwinParams)>) {
        let twin = twin.filter(|(t, _)| {
            let distinct = *t != function;
            if !distinct {
                crate::log::line(format_args!(
                    "kernel slicing: the driver gave a twin its kernel's own handle; that \
                     kernel runs whole"
                ));
            }
            distinct
        });
        if let Ok(mut b) = self.books.lock() {
            match twin {
                Some(t) => b.functions.insert(function, t),
                None => b.functions.remove(&function),
            };
        }
    }

    /// A launch of `function` on `grid`, which slicing would cut (it has a twin and is
    /// above the threshold), runs whole for `why` (the launch's form, not the kernel's
    /// code): said once per kernel. Whether it was said now.
    pub fn runs_whole(&self, function: usize, grid: [u32; 3], why: &str) -> bool {
        let Some(config) = self.config else { return false };
        let total = grid.iter().map(|d| u64::from(*d)).product::<u64>();
        if total <= config.min_grid_blocks {
            return false;
        }
        let new = self.books.lock().is_ok_and(|mut b| {
            b.functions.contains_key(&function) && b.said_whole.insert(function)
        });
        if new {
            crate::log::line(format_args!(
                "kernel slicing: a launch of {total} blocks runs whole: {why} (said once for this kernel)"
            ));
        }
        new
    }

    /// How a launch of `function` on `grid` is issued: its twin, where the twin's
    /// parameters lie and the sub-kernels; `None`: whole.
    /// `gpu` says the launch's GPU and its multiprocessors, when the size is per
    /// multiprocessor (asked of the driver only then).
    pub fn slices(
        &self,
        function: usize,
        grid: [u32; 3],
        gpu: impl FnOnce() -> Option<u32>,
        sms: impl FnOnce(u32) -> Option<u32>,
    ) -> Option<(usize, TwinParams, Vec<Slice>)> {
        let slicing = self.config?;
        let (twin, params) = *self.books.lock().ok()?.functions.get(&function)?;
        if grid.iter().map(|d| u64::from(*d)).product::<u64>() > u64::from(u32::MAX) {
            self.runs_whole(
                function,
                grid,
                "more blocks than a sub-kernel's 32-bit first block can name",
            );
            return None;
        }
        let blocks = self.blocks(slicing.size, gpu, sms);
        let config = tessera_ptx::SliceConfig {
            min_grid_blocks: slicing.min_grid_blocks,
            blocks_per_slice: blocks,
        };
        let slices = plan(grid, config)?;
        // the first launches sliced are said (what an operator checks); the log of a
        // long job does not grow with every one
        static SAID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        match SAID.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
            n if n < LAUNCHES_SAID => crate::log::line(format_args!(
                "kernel slicing: a launch of {} blocks as {} sub-kernels",
                grid.iter().map(|d| u64::from(*d)).product::<u64>(),
                slices.len()
            )),
            LAUNCHES_SAID => crate::log::line(format_args!(
                "kernel slicing: further sliced launches are not logged"
            )),
            _ => {}
        }
        Some((twin, params, slices))
    }
}

impl Slicing {
    /// Blocks per sub-kernel for a launch on the GPU `gpu` names: per multiprocessor,
    /// the first launch on each GPU asks the driver and says the size once; a GPU whose
    /// multiprocessors the driver does not say gets FairGV's 1,500 (said).
    fn blocks(
        &self,
        size: SliceSize,
        gpu: impl FnOnce() -> Option<u32>,
        sms: impl FnOnce(u32) -> Option<u32>,
    ) -> u32 {
        let SliceSize::PerSm(per) = size else { return size.blocks(0) };
        let device = gpu().unwrap_or(u32::MAX);
        let Ok(mut books) = self.books.lock() else { return FALLBACK_BLOCKS };
        // the driver asked for a GPU's multiprocessors only at its first sliced launch
        *books.blocks_on.entry(device).or_insert_with(|| {
            let sms = (device != u32::MAX).then(|| sms(device)).flatten();
            let blocks = sms.map_or(FALLBACK_BLOCKS, |n| size.blocks(n));
            match sms {
                Some(n) => crate::log::line(format_args!(
                    "kernel slicing: sub-kernels of {blocks} blocks on GPU {device} ({per} per multiprocessor, {n} multiprocessors)"
                )),
                None => crate::log::line(format_args!(
                    "kernel slicing: the driver did not say GPU {device}'s multiprocessors: sub-kernels of {blocks} blocks (FairGV's)"
                )),
            }
            blocks
        })
    }
}

/// Blocks per sub-kernel where the launch's GPU cannot be asked (FairGV's Table 4, the
/// plan's own default).
const FALLBACK_BLOCKS: u32 = tessera_ptx::SliceConfig::DEFAULT_BLOCKS;

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(blocks: u32) -> Option<KernelSlicing> {
        Some(KernelSlicing { min_grid_blocks: 4, size: SliceSize::Blocks(blocks) })
    }

    /// A launch that slicing would cut but that runs whole for its form (cooperative,
    /// an attribute, its parameters) is said once per kernel, with the reason (issue 58
    /// item 1: "run unsliced, logged once with the reason"); a kernel without a twin or
    /// a launch under the threshold says nothing.
    #[test]
    fn a_launch_run_whole_is_said_once_per_kernel() {
        let s = Slicing { config: fixed(5), books: Mutex::default() };
        let p = TwinParams { count: 1, end: 8, added_at: 8 };
        s.function_twin(7, Some((8, p)));
        assert!(!s.runs_whole(7, [4, 1, 1], "small"), "under the threshold");
        assert!(!s.runs_whole(9, [16, 1, 1], "no twin"), "a kernel without a twin");
        assert!(s.runs_whole(7, [16, 1, 1], "cooperative"));
        assert!(!s.runs_whole(7, [16, 1, 1], "cooperative"), "said twice");
        // more blocks than a first block of 32 bits names: whole, said
        s.function_twin(11, Some((12, p)));
        assert!(s.slices(11, [65_536, 65_536, 2], || None, |_| None).is_none());
        assert!(!s.runs_whole(11, [65_536, 65_536, 2], "again"), "the size was said");
    }

    /// The fake driver once handed every kernel it did not know, twins included, one
    /// handle: the sub-kernel launch re-entered the launch hook with the "twin" and sliced
    /// it again until the stack ran out (numba's kernel, issue 58).
    #[test]
    fn a_twin_with_its_kernels_own_handle_is_no_twin() {
        let s = Slicing { config: fixed(5), books: Mutex::default() };
        let p = TwinParams { count: 1, end: 8, added_at: 8 };
        s.function_twin(7, Some((7, p)));
        assert!(s.slices(7, [12, 1, 1], || None, |_| None).is_none(), "whole");
        s.function_twin(7, Some((8, p)));
        let (twin, _, slices) = s.slices(7, [12, 1, 1], || None, |_| None).unwrap();
        assert_eq!((twin, slices.len()), (8, 3));
    }

    /// Per multiprocessor (the default), a sub-kernel's size follows the launch's GPU:
    /// 62.5 a multiprocessor is FairGV's 1,500 on its 24-SM TitanX and 8,250 on a
    /// 132-SM H200; the driver is asked once per GPU; a GPU it says nothing of gets
    /// 1,500.
    #[test]
    fn a_sub_kernels_size_follows_the_gpus_multiprocessors() {
        let s = Slicing {
            config: Some(KernelSlicing {
                min_grid_blocks: 4,
                size: SliceSize::PerSm(crate::config::SLICE_BLOCKS_PER_SM),
            }),
            books: Mutex::default(),
        };
        let p = TwinParams { count: 1, end: 8, added_at: 8 };
        s.function_twin(7, Some((8, p)));
        let sizes = |gpu: Option<(u32, u32)>| {
            let device = || gpu.map(|(d, _)| d);
            let sms = |_| gpu.map(|(_, n)| n).filter(|n| *n > 0);
            let (_, _, slices) = s.slices(7, [20_000, 1, 1], device, sms).unwrap();
            slices[0].blocks
        };
        assert_eq!(sizes(Some((0, 24))), 1_500);
        assert_eq!(sizes(Some((1, 132))), 8_250);
        // asked once per GPU: a second answer for GPU 1 is not read
        assert_eq!(sizes(Some((1, 16))), 8_250);
        assert_eq!(sizes(Some((2, 0))), 1_500);
        assert_eq!(sizes(None), 1_500);
        assert_eq!(SliceSize::PerSm(62.5).blocks(16), 1_000);
        assert_eq!(SliceSize::PerSm(0.1).blocks(1), 1, "at least a block");
    }
}
