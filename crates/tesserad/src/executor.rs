//! Executors: where dispatched tasks run. One thread per GPU; the core sends it work
//! and it reports back through the core's mailbox.
//!
//! - `emulated` (default, no GPU needed): the simulator's performance model in
//!   wall-clock time, optionally sped up; honours resets.
//! - `cuda`: real GPUs through the CUDA driver API loaded at run time (`libcuda.so.1`);
//!   see `cuda.rs`. Only ever exercised against a fake driver library built by a test.

use crate::core::{Clock, Mailbox, Msg};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};
use tessera_client::region::Region;
use tessera_core::{GpuId, Nanos, TaskId};
use tessera_sim::perf::PerfModel;

/// Work for a GPU thread.
#[derive(Debug)]
pub enum Command {
    /// Run a task.
    Run {
        /// The task.
        task: TaskId,
        /// Its work on the reference GPU (emulated time).
        work: Nanos,
        /// Device memory it declared (admitted by the ledger), bytes; the CUDA executor
        /// allocates it for the task's run.
        memory: u64,
        /// Where its data lives, and its data slot.
        data: Option<(Arc<Region>, u64, u32, u32)>,
    },
    /// Reset: abandon the running task; unavailable for the reset latency.
    Reset,
    /// Stop the thread.
    Stop,
}

/// The executor's per-GPU threads, whichever back-end runs in them.
#[derive(Debug)]
pub struct Executor {
    senders: Vec<Sender<Command>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Executor {
    /// Start `gpus` emulated GPU threads reporting to `mailbox`; emulated time runs
    /// as `clock` says (its speed-up over the wall clock).
    pub fn emulated(gpus: usize, perf: PerfModel, clock: Clock, mailbox: Mailbox) -> Executor {
        Executor::spawn(gpus, move |gpu, rx| {
            let mb = mailbox.clone();
            let perf = perf.clone();
            Box::new(move || gpu_thread(gpu, rx, perf, clock, mb))
        })
    }

    /// Start one thread per CUDA device of `driver`.
    pub fn cuda(driver: std::sync::Arc<crate::cuda::Driver>, mailbox: Mailbox) -> Executor {
        let gpus = driver.device_count();
        Executor::spawn(gpus, move |gpu, rx| {
            let mb = mailbox.clone();
            let driver = driver.clone();
            Box::new(move || crate::cuda::gpu_thread(driver, gpu, rx, mb))
        })
    }

    fn spawn(
        gpus: usize,
        body: impl Fn(GpuId, Receiver<Command>) -> Box<dyn FnOnce() + Send>,
    ) -> Executor {
        let mut senders = Vec::new();
        let mut threads = Vec::new();
        for g in 0..gpus {
            let (tx, rx) = mpsc::channel();
            let run = body(GpuId(g as u32), rx);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("gpu{g}"))
                    .spawn(run)
                    .expect("spawn GPU thread"),
            );
            senders.push(tx);
        }
        Executor { senders, threads }
    }

    /// Send a command to `gpu`'s thread.
    pub fn send(&self, gpu: GpuId, c: Command) {
        if let Some(s) = self.senders.get(gpu.0 as usize) {
            let _ = s.send(c);
        }
    }

    /// Stop every GPU thread (after the running tasks were drained).
    pub fn stop(self) {
        for s in &self.senders {
            let _ = s.send(Command::Stop);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Sleep until `deadline` unless a command arrives first. Sleeps coarsely, then spins
/// the last stretch: timer slack would otherwise add a millisecond or more, which at a
/// 10x speed-up is 10 ms of emulated time.
fn wait_until(rx: &Receiver<Command>, deadline: Instant) -> Option<Command> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        let left = deadline - now;
        if left > Duration::from_micros(1500) {
            match rx.recv_timeout(left - Duration::from_micros(1000)) {
                Ok(c) => return Some(c),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Some(Command::Stop),
            }
        }
        match rx.try_recv() {
            Ok(c) => return Some(c),
            Err(mpsc::TryRecvError::Disconnected) => return Some(Command::Stop),
            Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}

fn gpu_thread(gpu: GpuId, rx: Receiver<Command>, perf: PerfModel, clock: Clock, mb: Mailbox) {
    let mut next = rx.recv().ok();
    while let Some(cmd) = next.take() {
        match cmd {
            Command::Stop => return,
            Command::Reset => {
                std::thread::sleep(clock.wall(perf.reset_latency));
                mb.send(Msg::ResetDone { gpu });
            }
            Command::Run { task, work, data, memory: _ } => {
                let ran = perf.exec_time(work, tessera_core::Placement::whole(gpu));
                let started = Instant::now();
                match wait_until(&rx, started + clock.wall(ran)) {
                    Some(Command::Reset) => {
                        // the running task is abandoned; its completion never happens
                        next = Some(Command::Reset);
                        continue;
                    }
                    Some(Command::Stop) => return,
                    Some(other) => {
                        tracing::error!(?other, %gpu, "work sent to a busy GPU; dropped");
                    }
                    None => {}
                }
                let out_len = match data {
                    // The emulated kernel's output: its input, repeated to the output
                    // length (so that clients can check the data path end to end).
                    Some((region, seq, in_len, out_len)) if out_len > 0 => {
                        let input = region.read_data(seq, in_len as usize);
                        region.write_data(seq, &echo_output(&input, out_len as usize));
                        out_len
                    }
                    _ => 0,
                };
                mb.send(Msg::Finished { gpu, task, ran_for: ran, out_len });
            }
        }
        if next.is_none() {
            next = rx.recv().ok();
        }
    }
}

/// The emulated kernel's output: its input repeated to the output length (zeros for no
/// input), so that clients can check the data path end to end. The CUDA back-end's
/// kernel computes the same.
pub(crate) fn echo_output(input: &[u8], out_len: usize) -> Vec<u8> {
    if input.is_empty() {
        vec![0; out_len]
    } else {
        input.iter().copied().cycle().take(out_len).collect()
    }
}
