//! The node's ledger, off the core thread: admitting a task's memory and returning
//! it take the ledger's `flock`, which any process of the node can hold — a program
//! stopped inside an allocation (Ctrl-Z, a debugger, Slurm suspend) holds it for as
//! long as it is stopped. A worker thread of its own does those operations in order
//! and mails the core each admission's answer, so a held lock delays only the tasks
//! that need memory; `status` reads the worker's latest snapshot.

use super::*;
use std::sync::mpsc::RecvTimeoutError;
use tessera_ledger::LedgerStatus;

/// What the worker is asked, in order.
enum LedgerJob {
    /// Reserve `bytes` on `gpu` for `task` (without waiting: a task whose memory is
    /// not free fails), answered with [`Msg::Admitted`] under `ticket`.
    Admit { task: TaskId, ticket: u64, gpu: GpuId, bytes: u64 },
    /// Return `bytes` on `gpu`.
    Free { gpu: GpuId, bytes: u64 },
    /// Read the ledger for `status` (others reserve through it too: the memory desk,
    /// programs without the daemon).
    Read,
}

/// The ledger's worker thread and its latest view of the ledger.
pub struct LedgerWorker {
    jobs: Sender<LedgerJob>,
    /// Jobs asked so far.
    asked: std::sync::atomic::AtomicU64,
    view: Arc<(Mutex<View>, std::sync::Condvar)>,
    /// The thread, joined when the worker is dropped: it holds the daemon's handle on
    /// the ledger (its client record), and the daemon removes the ledger at its end only
    /// if no live client holds one — a thread still winding down then kept it (seen
    /// under CPU load: a stopped daemon left its ledger behind).
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LedgerWorker {
    fn drop(&mut self) {
        // a fresh sender in place of ours: the thread sees its channel disconnected,
        // finishes the jobs already asked and returns, dropping the ledger
        drop(std::mem::replace(&mut self.jobs, std::sync::mpsc::channel().0));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The worker's latest reading of the ledger, and how many jobs were done before it.
#[derive(Default)]
struct View {
    done: u64,
    status: Option<LedgerStatus>,
}

/// The longest `status` waits for the worker to read the ledger after the jobs the
/// core asked: beyond it (the ledger's lock held by someone), the older reading.
const CATCH_UP: Duration = Duration::from_millis(50);

/// How often an idle worker refreshes its snapshot.
const REFRESH: Duration = Duration::from_secs(1);

impl LedgerWorker {
    /// Start the worker on `ledger`, answering through `mailbox`. It stops when the
    /// worker handle is dropped, after the jobs already asked.
    pub fn start(ledger: Ledger, mailbox: Mailbox) -> std::io::Result<LedgerWorker> {
        let (jobs, rx) = std::sync::mpsc::channel::<LedgerJob>();
        let view = Arc::new((
            Mutex::new(View { done: 0, status: ledger.status().ok() }),
            std::sync::Condvar::new(),
        ));
        let shared = view.clone();
        let thread = std::thread::Builder::new().name("ledger".into()).spawn(move || {
            let mut done = 0;
            loop {
                let job = rx.recv_timeout(REFRESH);
                // read the ledger (a sweep and a commit) for status and when idle, not
                // after every reservation
                let read = matches!(job, Ok(LedgerJob::Read) | Err(RecvTimeoutError::Timeout));
                match job {
                    Ok(LedgerJob::Admit { task, ticket, gpu, bytes }) => {
                        let refused = ledger
                            .pre_alloc(gpu.0, bytes, Wait::NoWait)
                            .err()
                            .map(|e| e.to_string());
                        mailbox.send(Msg::Admitted { task, ticket, gpu, bytes, refused });
                        done += 1;
                    }
                    Ok(LedgerJob::Free { gpu, bytes }) => {
                        if let Err(e) = ledger.post_free(gpu.0, bytes) {
                            tracing::error!(error = %e, "ledger post-free failed");
                        }
                        done += 1;
                    }
                    Ok(LedgerJob::Read) => done += 1,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                let status = if read { ledger.status().ok() } else { None };
                let (lock, changed) = &*shared;
                if let Ok(mut v) = lock.lock() {
                    *v = View { done, status: status.or(v.status.take()) };
                    changed.notify_all();
                }
            }
        })?;
        Ok(LedgerWorker { jobs, asked: Default::default(), view, thread: Some(thread) })
    }

    fn ask(&self, job: LedgerJob) {
        // the worker only stops when this handle is dropped
        if self.jobs.send(job).is_ok() {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The ledger as the worker reads it now, after the jobs asked so far — or, if it
    /// has not done so within [`CATCH_UP`] (someone holds the ledger's lock), its
    /// latest reading.
    pub fn snapshot(&self) -> Option<LedgerStatus> {
        self.ask(LedgerJob::Read);
        let asked = self.asked.load(std::sync::atomic::Ordering::Relaxed);
        let (lock, changed) = &*self.view;
        let guard = lock.lock().ok()?;
        let (v, _) = changed.wait_timeout_while(guard, CATCH_UP, |v| v.done < asked).ok()?;
        v.status.clone()
    }
}

impl Core {
    /// Ask the ledger for `task`'s memory on `gpu`; the task holds its place on the
    /// GPU meanwhile, and starts (or fails) when the answer comes.
    pub(super) fn admit(
        &mut self,
        task: TaskId,
        gpu: GpuId,
        bytes: u64,
        batch: Option<(Nanos, f64)>,
    ) {
        let Some(worker) = &self.ledger else { return self.start_on(task, gpu, batch) };
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.admitting.insert(task, (ticket, batch));
        self.gpus[gpu.0 as usize].running.push(task);
        if let Some(info) = self.tasks.get_mut(&task) {
            info.started = Some((gpu, self.clock.now()));
        }
        worker.ask(LedgerJob::Admit { task, ticket, gpu, bytes });
    }

    /// The ledger's answer for `task` (`ticket`): start it, or fail it with the
    /// reason. An answer for a task that ended meanwhile (or was re-queued and
    /// dispatched anew) returns what it was granted.
    pub(super) fn admitted(
        &mut self,
        task: TaskId,
        ticket: u64,
        gpu: GpuId,
        bytes: u64,
        refused: Option<String>,
    ) {
        let current = self.admitting.get(&task).is_some_and(|(t, _)| *t == ticket);
        if !current {
            if refused.is_none() {
                self.release_memory(gpu, bytes);
            }
            return;
        }
        let Some((_, batch)) = self.admitting.remove(&task) else { return };
        match refused {
            None => self.start_on(task, gpu, batch),
            Some(why) => self.refuse_memory(task, gpu, why),
        }
    }

    /// Return a task's memory — unless the ledger has not answered its admission
    /// yet, in which case the answer, when it comes, returns what was granted.
    pub(super) fn return_task_memory(&mut self, task: TaskId, gpu: GpuId, memory: u64) {
        if self.admitting.remove(&task).is_none() {
            self.release_memory(gpu, memory);
        }
    }

    /// Return `memory` on `gpu` to the ledger (through the worker, in order).
    pub(super) fn release_memory(&mut self, gpu: GpuId, memory: u64) {
        if memory > 0
            && let Some(worker) = &self.ledger
        {
            worker.ask(LedgerJob::Free { gpu, bytes: memory });
        }
    }

    /// Whether `task`'s admission is still with the ledger (nothing runs for it yet).
    pub(super) fn is_admitting(&self, task: TaskId) -> bool {
        self.admitting.contains_key(&task)
    }
}
