//! Real GPUs through the CUDA driver API, loaded at run time so that tessera builds and
//! runs on machines without it.
//!
//! Each GPU thread retains the device's primary context (and releases it when it stops
//! or resets), loads a small PTX module of two kernels, and runs each task as: allocate
//! the memory the task declared (admitted by the ledger) and its data buffers, copy the
//! input in, `tessera_spin` (busy for the task's cost, measured by `%globaltimer`),
//! `tessera_echo` (the emulated kernel's output, computed on the device), poll the
//! stream until done, copy the output out, free (every free checked; a guard frees on
//! every way out but a reset). A reset arriving meanwhile preempts the kernels:
//! `cuDevicePrimaryCtxReset` destroys the context (and its memory), then the context
//! and module are set up again, and the task neither completes nor writes output. A
//! sticky error (a kernel fault: the context is unusable afterwards) fails the task
//! and resets the context, so that later tasks run on a sound one. Running named application kernels is future
//! work; these two stand in for them.
//!
//! The driver's entry points come from `tessera-driver`, typed as NVIDIA's headers
//! declare them (checked at compile time against bindings generated from `cuda.h`), not
//! from hand-written declarations.
//!
//! **Never run on a real GPU.** It is exercised only against a fake driver library
//! that a test builds from C (`tests/fake_libcuda.c`), which checks the plumbing —
//! symbols, argument passing, the order of calls — not the PTX.
#![allow(unsafe_code)]

use crate::core::{Mailbox, Msg};
use crate::executor::Command;
use std::ffi::{CString, c_void};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Instant;
use tessera_core::{GpuId, Nanos};
use tessera_driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule};
use tessera_driver::{CuResult, DriverLibrary, status};

/// Call a driver entry point of `d` that `Driver::load` checked is present; were it
/// absent after all, the call answers `CUDA_ERROR_NOT_FOUND` instead of panicking.
macro_rules! call {
    ($d:expr, $name:ident ( $($arg:expr),* $(,)? )) => {
        match $d.lib.api().$name {
            Some(f) => f($($arg),*),
            None => status::NOT_FOUND,
        }
    };
}

/// The kernels, in PTX (ISA 6.0, sm_50 and later; `%globaltimer` counts nanoseconds).
pub const BUILTIN_PTX: &str = r#"
.version 6.0
.target sm_50
.address_size 64

.visible .entry tessera_spin(.param .u64 ns)
{
    .reg .u64 %rd<5>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
SPIN:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra SPIN;
    ret;
}

.visible .entry tessera_echo(.param .u64 in, .param .u32 in_len, .param .u64 out, .param .u32 out_len)
{
    .reg .u32 %r<8>;
    .reg .u64 %rd<7>;
    .reg .pred %p<3>;
    ld.param.u64 %rd1, [in];
    ld.param.u32 %r1, [in_len];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r2, [out_len];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mad.lo.u32 %r3, %r4, %r5, %r3;
    setp.ge.u32 %p1, %r3, %r2;
    @%p1 bra DONE;
    mov.u32 %r7, 0;
    setp.eq.u32 %p2, %r1, 0;
    @%p2 bra STORE;
    rem.u32 %r6, %r3, %r1;
    cvt.u64.u32 %rd3, %r6;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u8 %r7, [%rd4];
STORE:
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd6, %rd2, %rd5;
    st.global.u8 [%rd6], %r7;
DONE:
    ret;
}
"#;

/// The driver, as the executor uses it: its entry points (typed from NVIDIA's headers,
/// see `tessera-driver`) and the devices it reported.
#[derive(Debug)]
pub struct Driver {
    lib: DriverLibrary,
    /// Each device: its handle, memory (bytes) and UUID (`GPU-…`, when the driver
    /// tells it).
    devices: Vec<(CUdevice, u64, Option<String>)>,
}

// SAFETY: the table holds plain C entry points of the driver, which is thread-safe
// (each thread sets its own current context before calling).
unsafe impl Send for Driver {}
// SAFETY: as above; the struct holds no interior state.
unsafe impl Sync for Driver {}

fn check(what: &str, r: CuResult) -> Result<(), String> {
    if r == status::SUCCESS { Ok(()) } else { Err(format!("{what} failed with CUDA error {r}")) }
}

impl Driver {
    /// Load the driver from `library` (default `libcuda.so.1`), check it has every
    /// entry point the executor calls, initialise it and list the devices with their
    /// memory.
    pub fn load(library: Option<&Path>) -> Result<Driver, String> {
        let lib = DriverLibrary::open(library).map_err(|e| e.to_string())?;
        let api = lib.api();
        for (present, name) in [
            (api.cuInit.is_some(), "cuInit"),
            (api.cuDeviceGetCount.is_some(), "cuDeviceGetCount"),
            (api.cuDeviceGet.is_some(), "cuDeviceGet"),
            (api.cuDeviceTotalMem_v2.is_some(), "cuDeviceTotalMem_v2"),
            (api.cuDevicePrimaryCtxRetain.is_some(), "cuDevicePrimaryCtxRetain"),
            (api.cuDevicePrimaryCtxReset_v2.is_some(), "cuDevicePrimaryCtxReset_v2"),
            (api.cuDevicePrimaryCtxRelease_v2.is_some(), "cuDevicePrimaryCtxRelease_v2"),
            (api.cuCtxSetCurrent.is_some(), "cuCtxSetCurrent"),
            (api.cuModuleLoadData.is_some(), "cuModuleLoadData"),
            (api.cuModuleGetFunction.is_some(), "cuModuleGetFunction"),
            (api.cuMemAlloc_v2.is_some(), "cuMemAlloc_v2"),
            (api.cuMemFree_v2.is_some(), "cuMemFree_v2"),
            (api.cuMemcpyHtoD_v2.is_some(), "cuMemcpyHtoD_v2"),
            (api.cuMemcpyDtoH_v2.is_some(), "cuMemcpyDtoH_v2"),
            (api.cuLaunchKernel.is_some(), "cuLaunchKernel"),
            (api.cuStreamQuery.is_some(), "cuStreamQuery"),
        ] {
            lib.require(present, name).map_err(|e| e.to_string())?;
        }
        let d = Driver { lib, devices: Vec::new() };
        let mut devices = Vec::new();
        // SAFETY: plain calls with valid out-pointers to locals.
        unsafe {
            check("cuInit", call!(d, cuInit(0)))?;
            let mut n = 0;
            check("cuDeviceGetCount", call!(d, cuDeviceGetCount(&mut n)))?;
            for i in 0..n {
                let mut dev = 0;
                check("cuDeviceGet", call!(d, cuDeviceGet(&mut dev, i)))?;
                let mut bytes = 0usize;
                check("cuDeviceTotalMem", call!(d, cuDeviceTotalMem_v2(&mut bytes, dev)))?;
                let uuid = d.lib.api().cuDeviceGetUuid_v2.and_then(|get| {
                    let mut u = tessera_driver::sys::CUuuid { bytes: [0; 16] };
                    (get(&mut u, dev) == status::SUCCESS).then(|| tessera_driver::uuid_text(&u))
                });
                devices.push((dev, bytes as u64, uuid));
            }
        }
        if devices.is_empty() {
            return Err("the CUDA driver reports no devices".into());
        }
        Ok(Driver { devices, ..d })
    }

    /// Devices found.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Each device's memory, bytes.
    pub fn device_memory(&self) -> Vec<u64> {
        self.devices.iter().map(|d| d.1).collect()
    }

    /// Each device's UUID, when the driver tells it: how a program under
    /// `CUDA_VISIBLE_DEVICES` finds the GPU it was placed on whatever its numbering.
    pub fn device_uuids(&self) -> Vec<Option<String>> {
        self.devices.iter().map(|d| d.2.clone()).collect()
    }

    /// The library loaded.
    pub fn path(&self) -> &Path {
        self.lib.path()
    }
}

/// One device, set up for running tasks: its primary context retained (released on
/// drop, so that resets and stops keep the driver's retain count balanced).
struct Device<'a> {
    d: &'a Driver,
    dev: CUdevice,
    spin: CUfunction,
    echo: CUfunction,
}

impl Drop for Device<'_> {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `setup` for a device index the driver listed.
        let r = unsafe { call!(self.d, cuDevicePrimaryCtxRelease_v2(self.dev)) };
        if let Err(e) = check("cuDevicePrimaryCtxRelease", r) {
            tracing::warn!(error = %e, "releasing the primary context failed");
        }
    }
}

fn setup(d: &Driver, dev: CUdevice) -> Result<Device<'_>, String> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    let mut module: CUmodule = std::ptr::null_mut();
    let ptx = CString::new(BUILTIN_PTX).expect("no NUL in PTX");
    let (spin_name, echo_name) =
        (CString::new("tessera_spin").expect("name"), CString::new("tessera_echo").expect("name"));
    // SAFETY: out-pointers to locals; the PTX and names are NUL-terminated and outlive
    // the calls; the context is made current on this thread before module calls.
    unsafe {
        check("cuDevicePrimaryCtxRetain", call!(d, cuDevicePrimaryCtxRetain(&mut ctx, dev)))?;
        // retained: from here `device` releases it on any early return
        let mut device = Device { d, dev, spin: std::ptr::null_mut(), echo: std::ptr::null_mut() };
        check("cuCtxSetCurrent", call!(d, cuCtxSetCurrent(ctx)))?;
        check("cuModuleLoadData", call!(d, cuModuleLoadData(&mut module, ptx.as_ptr().cast())))?;
        check(
            "cuModuleGetFunction",
            call!(d, cuModuleGetFunction(&mut device.spin, module, spin_name.as_ptr())),
        )?;
        check(
            "cuModuleGetFunction",
            call!(d, cuModuleGetFunction(&mut device.echo, module, echo_name.as_ptr())),
        )?;
        Ok(device)
    }
}

/// Why a run failed.
struct Failure {
    reason: String,
    /// The context is broken and must be reset.
    sticky: bool,
}

fn failure(what: &str, r: CuResult) -> Result<(), Failure> {
    check(what, r).map_err(|reason| Failure { reason, sticky: status::STICKY.contains(&r) })
}

/// Device buffers of one run, freed on drop (every result checked) unless a reset is
/// about to free the whole context.
struct Buffers<'a> {
    d: &'a Driver,
    ptrs: Vec<CUdeviceptr>,
    armed: bool,
}

impl Buffers<'_> {
    fn alloc(&mut self, bytes: usize) -> Result<CUdeviceptr, Failure> {
        let mut p: CUdeviceptr = 0;
        // SAFETY: an out-pointer to a local; the context is current on this thread.
        failure("cuMemAlloc", unsafe { call!(self.d, cuMemAlloc_v2(&mut p, bytes.max(1))) })?;
        self.ptrs.push(p);
        Ok(p)
    }
}

impl Drop for Buffers<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for p in self.ptrs.drain(..) {
            // SAFETY: each pointer came from cuMemAlloc in this context and is freed once.
            let r = unsafe { call!(self.d, cuMemFree_v2(p)) };
            if let Err(e) = check("cuMemFree", r) {
                tracing::warn!(error = %e, "freeing device memory failed");
            }
        }
    }
}

/// How a run ended.
enum Ran {
    /// Completed, with its output.
    Done(Vec<u8>),
    /// A command arrived while the kernels ran (a reset, to preempt them; or stop).
    Interrupted(Command),
}

/// Run one task on the current device. While the kernels run, keep listening for a
/// reset, which preempts them (the paper's reset-as-preemption).
fn run(
    d: &Driver,
    dev: &Device<'_>,
    rx: &Receiver<Command>,
    work: Nanos,
    memory: u64,
    input: &[u8],
    out_len: usize,
) -> Result<Ran, Failure> {
    let bytes = input.len().max(out_len).max(1);
    let mut output = vec![0u8; out_len];
    let mut buffers = Buffers { d, ptrs: Vec::new(), armed: true };
    let too_big =
        |_| Failure { reason: format!("{memory} bytes do not fit this host"), sticky: false };
    // the memory the task declared, held for its run as the application would
    if memory > 0 {
        buffers.alloc(usize::try_from(memory).map_err(too_big)?)?;
    }
    let din = buffers.alloc(bytes)?;
    let dout = buffers.alloc(bytes)?;
    // SAFETY: device buffers were allocated above and are freed by `buffers`; host
    // pointers are valid for the lengths given; kernel parameters are pointers to
    // locals that outlive the launch (the driver copies them at launch).
    let result: Result<Option<Command>, Failure> = unsafe {
        (|| {
            if !input.is_empty() {
                failure(
                    "cuMemcpyHtoD",
                    call!(d, cuMemcpyHtoD_v2(din, input.as_ptr().cast(), input.len())),
                )?;
            }
            let mut ns = work.0;
            let mut spin_args = [(&mut ns as *mut u64).cast::<c_void>()];
            failure(
                "cuLaunchKernel(spin)",
                call!(
                    d,
                    cuLaunchKernel(
                        dev.spin,
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        0,
                        std::ptr::null_mut(),
                        spin_args.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                ),
            )?;
            if out_len > 0 {
                let (mut a, mut b, mut c, mut e) = (din, input.len() as u32, dout, out_len as u32);
                let mut echo_args = [
                    (&mut a as *mut u64).cast::<c_void>(),
                    (&mut b as *mut u32).cast::<c_void>(),
                    (&mut c as *mut u64).cast::<c_void>(),
                    (&mut e as *mut u32).cast::<c_void>(),
                ];
                let blocks = (out_len as u32).div_ceil(256);
                failure(
                    "cuLaunchKernel(echo)",
                    call!(
                        d,
                        cuLaunchKernel(
                            dev.echo,
                            blocks,
                            1,
                            1,
                            256,
                            1,
                            1,
                            0,
                            std::ptr::null_mut(),
                            echo_args.as_mut_ptr(),
                            std::ptr::null_mut(),
                        )
                    ),
                )?;
            }
            // wait for the default stream without blocking in the driver, so that a
            // reset can preempt the kernels
            loop {
                match call!(d, cuStreamQuery(std::ptr::null_mut())) {
                    status::SUCCESS => break,
                    status::NOT_READY => {}
                    r => failure("cuStreamQuery", r)?,
                }
                match rx.recv_timeout(std::time::Duration::from_micros(50)) {
                    Ok(cmd) => return Ok(Some(cmd)),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Ok(Some(Command::Stop));
                    }
                }
            }
            if out_len > 0 {
                failure(
                    "cuMemcpyDtoH",
                    call!(d, cuMemcpyDtoH_v2(output.as_mut_ptr().cast(), dout, out_len)),
                )?;
            }
            Ok(None)
        })()
    };
    match result {
        // the reset frees the whole context (and the kernels may still use the buffers)
        Ok(Some(Command::Reset)) => {
            buffers.armed = false;
            Ok(Ran::Interrupted(Command::Reset))
        }
        Ok(Some(cmd)) => Ok(Ran::Interrupted(cmd)),
        Ok(None) => Ok(Ran::Done(output)),
        Err(f) => {
            // a broken context frees nothing; the reset that follows frees it all
            buffers.armed = !f.sticky;
            Err(f)
        }
    }
}

/// Reset the device's primary context and set it up again.
fn reset<'a>(d: &'a Driver, gpu: GpuId, dev_id: CUdevice, device: &mut Option<Device<'a>>) {
    // release our retain before the reset so that set-up retains exactly once again
    drop(device.take());
    // SAFETY: a plain call on a device index the driver listed.
    let r = unsafe { call!(d, cuDevicePrimaryCtxReset_v2(dev_id)) };
    if let Err(e) = check("cuDevicePrimaryCtxReset", r) {
        tracing::error!(%gpu, error = %e, "reset failed");
    }
    *device = setup(d, dev_id)
        .map_err(|e| tracing::error!(%gpu, error = %e, "set-up after reset failed"))
        .ok();
}

/// The thread of one CUDA device: run tasks, reset on request, report to the core.
pub(crate) fn gpu_thread(d: Arc<Driver>, gpu: GpuId, rx: Receiver<Command>, mb: Mailbox) {
    let dev_id = d.devices[gpu.0 as usize].0;
    let mut device = match setup(&d, dev_id) {
        Ok(x) => Some(x),
        Err(e) => {
            tracing::error!(%gpu, error = %e, "cannot set up the CUDA device; its tasks will fail");
            None
        }
    };
    let mut next = rx.recv().ok();
    while let Some(cmd) = next.take() {
        match cmd {
            Command::Stop => return,
            // this executor runs one task at a time (the daemon refuses co-locating
            // policies with it), so a cancelled task is the one it was running, which
            // the interruption already abandoned
            Command::Cancel { .. } => {}
            Command::Reset => {
                reset(&d, gpu, dev_id, &mut device);
                mb.send(Msg::ResetDone { gpu });
            }
            Command::Run { task, work, hold: true, .. } => {
                // a launch-gate slice: the client's own kernels use the GPU; wait out the
                // slice, still answering commands (a reset ends it at once)
                let started = Instant::now();
                let until = started + std::time::Duration::from_nanos(work.0);
                loop {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        mb.send(Msg::Finished {
                            gpu,
                            task,
                            ran_for: Nanos::from(started.elapsed()),
                            out_len: 0,
                        });
                        break;
                    }
                    match rx.recv_timeout(left) {
                        Ok(cmd) => {
                            next = Some(cmd);
                            break;
                        }
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            }
            // a CUDA GPU runs one task at a time: `demand` is not used
            Command::Run { task, work, data, memory, hold: false, .. } => {
                let started = Instant::now();
                let (input, out_len) = match &data {
                    Some((region, seq, in_len, out_len)) => {
                        (region.read_data(*seq, *in_len as usize), *out_len as usize)
                    }
                    None => (Vec::new(), 0),
                };
                let result = match &device {
                    Some(dev) => run(&d, dev, &rx, work, memory, &input, out_len),
                    None => Err(Failure { reason: "device not set up".into(), sticky: false }),
                };
                let ran = Nanos::from(started.elapsed());
                match result {
                    Ok(Ran::Done(output)) => {
                        if let Some((region, seq, _, _)) = &data {
                            region.write_data(*seq, &output);
                        }
                        mb.send(Msg::Finished {
                            gpu,
                            task,
                            ran_for: ran,
                            out_len: output.len() as u32,
                        });
                    }
                    // preempted: no output, no completion; the reset runs next
                    Ok(Ran::Interrupted(cmd)) => next = Some(cmd),
                    Err(Failure { reason, sticky }) => {
                        tracing::warn!(%gpu, %task, %reason, sticky, "task failed on the GPU");
                        if sticky {
                            // the context is unusable: later tasks would all fail
                            tracing::error!(%gpu, "sticky CUDA error: resetting the context");
                            reset(&d, gpu, dev_id, &mut device);
                        }
                        mb.send(Msg::Failed { gpu, task, ran_for: ran, reason });
                    }
                }
            }
        }
        if next.is_none() {
            next = rx.recv().ok();
        }
    }
}
