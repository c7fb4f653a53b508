//! Executors: where dispatched tasks run. One thread per GPU; the core sends it work
//! and it reports back through the core's mailbox.
//!
//! - `emulated` (default, no GPU needed): the shared-GPU model of `tessera-gpu` (the
//!   one the simulator runs) in wall-clock time, optionally sped up; tasks sent to a
//!   GPU already running one co-run with it by processor sharing; honours resets.
//! - `cuda`: real GPUs through the CUDA driver API loaded at run time (`libcuda.so.1`);
//!   see `cuda.rs`. Only ever exercised against a fake driver library built by a test.

use crate::core::{Clock, Mailbox, Msg};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::region::Region;
use tessera_core::{GpuId, Nanos, TaskId};
use tessera_gpu::sharing::{SharedGpu, Sharing};

/// What an emulated GPU is like.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmulatedGpu {
    /// Time it is unavailable after a reset (emulated time).
    pub reset_latency: Nanos,
    /// Speed relative to the reference GPU task costs were measured on.
    pub speed: f64,
}

impl EmulatedGpu {
    /// How long `work` (on the reference GPU) runs here alone; never zero.
    fn exec_time(&self, work: Nanos) -> u64 {
        ((work.0 as f64 / self.speed).round() as u64).max(1)
    }
}

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
        /// A launch-gate slice: hold the GPU for `work` and run nothing (the client's
        /// own kernels run meanwhile). The emulated GPU models it as work, so that
        /// sharing is accounted; the CUDA executor only waits.
        hold: bool,
        /// The share of the GPU it occupies (1: all of it; a batch in a partition takes
        /// its part of the partition's share). The emulated GPU's processor sharing
        /// slows everything only when the shares running sum above 1.
        demand: f64,
    },
    /// Reset: abandon the running tasks; unavailable for the reset latency.
    Reset,
    /// Drop one running task (its client left) without touching the others; no
    /// report follows.
    Cancel {
        /// The task.
        task: TaskId,
    },
    /// Stop the thread.
    Stop,
}

/// The executor's per-GPU threads, whichever back-end runs in them.
#[derive(Debug)]
pub struct Executor {
    senders: Vec<Sender<Command>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The GPU threads' kernel thread ids (for the core's CPU pinning on a busy host,
    /// `core::follow`).
    tids: Vec<rustix::thread::Pid>,
    /// Per GPU, the running tasks and the share of the GPU each holds, as the emulated
    /// GPUs' model says (`None` for executors that do not model shares).
    shares: Option<SharesBoard>,
}

/// Where an emulated GPU publishes its tasks' shares for status reports.
type SharesBoard = Arc<Vec<Mutex<Vec<(TaskId, f64)>>>>;

impl Executor {
    /// Start `gpus` emulated GPU threads reporting to `mailbox`; emulated time runs
    /// as `clock` says (its speed-up over the wall clock).
    pub fn emulated(gpus: usize, perf: EmulatedGpu, clock: Clock, mailbox: Mailbox) -> Executor {
        let shares: SharesBoard = Arc::new((0..gpus).map(|_| Mutex::new(Vec::new())).collect());
        let board = shares.clone();
        let mut exec = Executor::spawn(gpus, move |gpu, rx| {
            let mb = mailbox.clone();
            let board = board.clone();
            Box::new(move || gpu_thread(gpu, rx, perf, clock, mb, board))
        });
        exec.shares = Some(shares);
        exec
    }

    /// The running tasks of `gpu` and the share each holds now, if this executor
    /// models shares.
    pub fn shares(&self, gpu: GpuId) -> Option<Vec<(TaskId, f64)>> {
        let board = self.shares.as_ref()?;
        let slot = board.get(gpu.0 as usize)?;
        Some(slot.lock().map(|s| s.clone()).unwrap_or_default())
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
        let (tid_tx, tid_rx) = mpsc::channel();
        for g in 0..gpus {
            let (tx, rx) = mpsc::channel();
            let run = body(GpuId(g as u32), rx);
            let tid_tx = tid_tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("gpu{g}"))
                    .spawn(move || {
                        let _ = tid_tx.send(rustix::thread::gettid());
                        drop(tid_tx);
                        run();
                    })
                    .expect("spawn GPU thread"),
            );
            senders.push(tx);
        }
        drop(tid_tx);
        // each thread says its id first thing; one that died before leaves the list short
        let tids = tid_rx.iter().take(gpus).collect();
        Executor { senders, threads, tids, shares: None }
    }

    /// The GPU threads' kernel thread ids.
    pub fn thread_ids(&self) -> &[rustix::thread::Pid] {
        &self.tids
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

/// A task running on an emulated GPU.
struct Emulated {
    data: Option<(Arc<Region>, u64, u32, u32)>,
    started: u64,
}

/// One emulated GPU: a `SharedGpu` whose time is the emulated clock. It sleeps until the
/// model's next finish or a command, whichever comes first.
fn gpu_thread(
    gpu: GpuId,
    rx: Receiver<Command>,
    perf: EmulatedGpu,
    clock: Clock,
    mb: Mailbox,
    shares: SharesBoard,
) {
    let mut model = SharedGpu::new(Sharing::Processor);
    let mut tasks: std::collections::HashMap<u64, Emulated> = std::collections::HashMap::new();
    let publish = |model: &SharedGpu| {
        if let Some(slot) = shares.get(gpu.0 as usize)
            && let Ok(mut s) = slot.lock()
        {
            s.clear();
            s.extend(model.shares().map(|(id, share)| (TaskId(id), share)));
        }
    };
    loop {
        publish(&model);
        let due = model.next_finish().map(|(at, _)| at);
        let cmd = match due {
            None => match rx.recv() {
                Ok(c) => Some(c),
                Err(_) => return,
            },
            Some(at) => {
                let left = Nanos(at.saturating_sub(clock.now().0));
                wait_until(&rx, Instant::now() + clock.wall(left))
            }
        };
        // the model's time follows the emulated clock, which never goes back
        let now = clock.now().0.max(model.now());
        match cmd {
            Some(Command::Stop) => return,
            Some(Command::Cancel { task }) => {
                if tasks.remove(&task.0).is_some() {
                    let _ = model.remove(now, task.0);
                }
            }
            Some(Command::Reset) => {
                // every running task is abandoned; their completions never happen
                for id in tasks.drain().map(|(id, _)| id) {
                    let _ = model.remove(now, id);
                }
                publish(&model);
                std::thread::sleep(clock.wall(perf.reset_latency));
                mb.send(Msg::ResetDone { gpu });
            }
            Some(Command::Run { task, work, data, memory: _, hold: _, demand }) => {
                if let Err(e) = model.start(now, task.0, perf.exec_time(work), demand) {
                    tracing::error!(%gpu, %task, error = %e, "cannot start a task on the emulated GPU");
                    mb.send(Msg::Failed { gpu, task, ran_for: Nanos::ZERO, reason: e.to_string() });
                    continue;
                }
                tasks.insert(task.0, Emulated { data, started: now });
            }
            None => {
                let Ok(done) = model.take_finished(now) else { continue };
                for id in done {
                    let Some(t) = tasks.remove(&id) else { continue };
                    let out_len = match t.data {
                        // The emulated kernel's output: its input, repeated to the output
                        // length (so that clients can check the data path end to end).
                        Some((region, seq, in_len, out_len)) if out_len > 0 => {
                            let input = region.read_data(seq, in_len as usize);
                            region.write_data(seq, &echo_output(&input, out_len as usize));
                            out_len
                        }
                        _ => 0,
                    };
                    // the model's finish, not the moment this thread woke up after it
                    let ran_for = Nanos(due.unwrap_or(now).min(now).saturating_sub(t.started));
                    mb.send(Msg::Finished { gpu, task: TaskId(id), ran_for, out_len });
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Clock, Mailbox, Msg};
    use tessera_client::region::Doorbell;

    /// Two tenants' tasks co-located on one emulated GPU share it as the model says:
    /// two equal tasks of work w, each demanding the whole GPU, started together,
    /// both finish after 2w — the prediction of the same model run directly.
    #[test]
    fn co_located_tasks_finish_when_the_model_says() {
        let (mb, rx) = Mailbox::new(Arc::new(Doorbell::new().unwrap()));
        let perf = EmulatedGpu { reset_latency: Nanos::from_millis(30), speed: 1.0 };
        let exec = Executor::emulated(1, perf, Clock::new(1.0), mb);
        let gpu = GpuId(0);
        let w = Nanos::from_millis(200);
        // queue both behind a reset, so that the GPU thread starts them back to back
        exec.send(gpu, Command::Reset);
        for t in [1, 2] {
            exec.send(
                gpu,
                Command::Run {
                    task: TaskId(t),
                    work: w,
                    memory: 0,
                    data: None,
                    hold: false,
                    demand: 1.0,
                },
            );
        }
        let mut prediction = SharedGpu::new(Sharing::Processor);
        prediction.start(0, 1, w.0, 1.0).unwrap();
        prediction.start(0, 2, w.0, 1.0).unwrap();
        let predicted: Vec<u64> =
            prediction.drain(u64::MAX).unwrap().iter().map(|(_, t)| *t).collect();
        assert_eq!(predicted, vec![2 * w.0, 2 * w.0]);
        let mut ran = Vec::new();
        while ran.len() < 2 {
            match rx.recv_timeout(Duration::from_secs(20)).expect("the GPU reports") {
                Msg::Finished { task, ran_for, .. } => ran.push((task.0, ran_for.0)),
                Msg::ResetDone { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        for (task, r) in ran {
            // the two starts are a few microseconds apart (the thread's own loop)
            assert!(
                r.abs_diff(predicted[0]) < 2_000_000,
                "task {task} ran {r} ns, model {}",
                predicted[0]
            );
        }
        exec.stop();
    }
}
