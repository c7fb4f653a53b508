//! The ledger between real programs, tried as containers and attackers would: holders
//! in other pid namespaces, a ledger file zeroed, truncated, unlinked or replaced under
//! live clients, squatted paths and foreign owners, tables full of dead rows, waiters on
//! other GPUs, records of clients that held nothing, fork.
//!
//! Children are this test binary re-run with `TESSERA_HARDENING_CHILD` set (see
//! [`child`]); each prints `READY` once it has done its part, and never outlives the
//! test.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tessera_core::Bytes;
use tessera_ledger::layout::{COPIES, CopyHead, Header, State};
use tessera_ledger::{
    Access, GpuSource, Ledger, LedgerConfig, LedgerError, NotificationPolicy, Wait,
};

const CHILD_ENV: &str = "TESSERA_HARDENING_CHILD";
static N: AtomicU32 = AtomicU32::new(0);

/// A directory removed when the test ends (bound before the ledgers and children that
/// use it, so dropped after them).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh ledger path in its own directory under /tmp (world-traversable, so that
/// another uid can try it), and the guard that removes the directory.
fn fresh_path(tag: &str) -> (PathBuf, Scratch) {
    let dir = std::env::temp_dir().join(format!(
        "tessera-hardening-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir.join(format!("ledger-{tag}")), Scratch(dir))
}

fn config(path: &Path, gpus: &[u64]) -> LedgerConfig {
    LedgerConfig {
        policy: NotificationPolicy::Mmu,
        ..LedgerConfig::new(path, GpuSource::Explicit(gpus.iter().map(|b| Bytes(*b)).collect()))
    }
}

fn records_dir(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap().to_os_string();
    name.push(".clients");
    path.with_file_name(name)
}

use crate::common::Reaper;

impl Reaper {
    /// Start a child doing `mode` on `path` (optionally under `prefix`, e.g. `unshare`),
    /// and wait for its `READY` unless it is a waiter.
    fn spawn(&mut self, prefix: &[&str], mode: &str, path: &Path, gpu: u32, bytes: u64) -> usize {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let mut child = cmd
            .arg(crate::common::harness_name(module_path!(), "child"))
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{mode}:{gpu}:{bytes}:{}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        if mode != "wait" {
            let out = child.stdout.take().unwrap();
            let mut lines = BufReader::new(out).lines();
            // the harness prints "test child ... " before it on the same line
            let ready = lines.any(|l| l.is_ok_and(|l| l.contains("READY")));
            assert!(ready, "child ({mode}) did not get ready: {:?}", child.wait());
        }
        self.0.push(child);
        self.0.len() - 1
    }

    fn kill(&mut self, i: usize) {
        let c = &mut self.0[i];
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
    }
}

/// Not a test on its own: the body of each child process (it tells its parent on
/// stdout that it is ready).
#[test]
#[allow(clippy::print_stdout)]
fn child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut parts = spec.splitn(4, ':');
    let (mode, gpu, bytes, path) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().parse::<u32>().unwrap(),
        parts.next().unwrap().parse::<u64>().unwrap(),
        PathBuf::from(parts.next().unwrap()),
    );
    // never outlive the test (in a pid namespace getppid() is 0 and stays so: there
    // the time limit and unshare's --kill-child do it)
    let parent = rustix::process::getppid();
    std::thread::spawn(move || {
        let start = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            if rustix::process::getppid() != parent || start.elapsed() > Duration::from_secs(60) {
                std::process::exit(0);
            }
        }
    });
    let ledger = Ledger::open(&config(&path, &[1000, 1000])).expect("child opens the ledger");
    match mode.as_str() {
        "hold" => ledger.pre_alloc(gpu, bytes, Wait::NoWait).expect("child holds"),
        "idle" => {}
        "wait" => {
            let _ = ledger.pre_alloc(gpu, bytes, Wait::Forever);
        }
        "try" => {
            let code = match ledger.pre_alloc(gpu, bytes, Wait::NoWait) {
                Ok(()) => 0,
                Err(LedgerError::NotAvailableNow { .. }) => 3,
                Err(_) => 4,
            };
            println!("READY");
            std::process::exit(code);
        }
        other => panic!("unknown child mode {other}"),
    }
    println!("READY");
    std::thread::sleep(Duration::from_secs(3600));
}

fn namespaces_work() -> bool {
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIPPED: `unshare --pid --fork --mount-proc` does not work here (needs root or user namespaces)"
        );
    }
    ok
}

const CONTAINER: &[&str] = &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"];

/// A holder in its own pid namespace (as Kubernetes and Slurm run jobs) is alive while
/// it runs and dead once it is gone, as seen from the host; and a container sees the
/// host's holders. Before, liveness went by pid: the container's pid 1 was taken for
/// the host's init, or not found at all, and its memory granted twice.
#[test]
fn holders_in_other_pid_namespaces_are_judged_by_their_lock() {
    if !namespaces_work() {
        return;
    }
    let (path, _path_dir) = fresh_path("ns");
    let host = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    let mut kids = Reaper(Vec::new());
    let boxed = kids.spawn(CONTAINER, "hold", &path, 0, 600);
    let s = host.status().unwrap();
    assert_eq!(s.gpus[0].used, 600, "the status sweep kept the container's memory: {s:?}");
    assert!(
        matches!(host.pre_alloc(0, 600, Wait::NoWait), Err(LedgerError::NotAvailableNow { .. })),
        "a live container's memory must not be granted again"
    );
    // unshare dies at once; the process in the container follows it (PDEATHSIG), and
    // its lock goes with it: a waiter's periodic sanity check sees that
    kids.kill(boxed);
    host.pre_alloc(0, 600, Wait::Timeout(Duration::from_secs(20)))
        .expect("the dead container's memory is released");

    // the other way round: the host holds, a container asks
    let probe = kids.spawn(CONTAINER, "try", &path, 0, 600);
    let code = kids.0[probe].wait().unwrap().code();
    assert_eq!(code, Some(3), "the container was refused (3 = not available now)");
    host.post_free(0, 600).unwrap();
    let probe = kids.spawn(CONTAINER, "try", &path, 0, 600);
    assert_eq!(kids.0[probe].wait().unwrap().code(), Some(0), "and granted once it is free");
}

/// Reads the primary copy straight from the file (retrying a read torn by a writer:
/// we do not take the lock).
fn raw_state(path: &Path) -> State {
    for _ in 0..1000 {
        let bytes = std::fs::read(path).unwrap();
        let header: Header = bytemuck_header(&bytes);
        let at = COPIES as usize;
        let crc = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let start = at + std::mem::size_of::<CopyHead>();
        if let Some(Ok(s)) = bytes.get(start..start + len).map(|b| State::decode(&header, crc, b)) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the primary copy never read sound");
}

fn bytemuck_header(b: &[u8]) -> Header {
    let w = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let mut h = Header::new(w(16), w(20));
    h.wake = w(12);
    h
}

/// A zeroed file is rebuilt from the live clients' records, not reset empty.
#[test]
fn a_zeroed_ledger_is_rebuilt_from_the_live_clients() {
    let (path, _path_dir) = fresh_path("zeroed");
    let a = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    a.pre_alloc(0, 600, Wait::NoWait).unwrap();
    a.pre_alloc(1, 100, Wait::NoWait).unwrap();
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    std::fs::write(&path, vec![0u8; len]).unwrap();
    let b = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    assert!(
        matches!(b.pre_alloc(0, 600, Wait::NoWait), Err(LedgerError::NotAvailableNow { .. })),
        "a's 600 bytes must not be granted twice"
    );
    let s = b.status().unwrap();
    assert_eq!((s.gpus[0].used, s.gpus[1].used), (600, 100));
    a.post_free(0, 600).unwrap();
    b.pre_alloc(0, 600, Wait::NoWait).unwrap();
}

/// A sound but old copy of the ledger written back over the file in place (a backup
/// restored, a careless copy): before, it was taken as the truth — a new client was
/// granted memory a live client holds, and the holder's free failed with OVER_FREE.
/// Now the new client's open finds the state lacking what the live clients' records
/// hold, and the holder finds the file older than what it last wrote: either rebuilds
/// it from the records.
#[test]
fn an_old_copy_written_back_in_place_is_not_believed() {
    use std::os::unix::fs::FileExt;
    for new_client_first in [true, false] {
        let (path, _path_dir) = fresh_path("old-copy");
        let a = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
        a.pre_alloc(1, 100, Wait::NoWait).unwrap();
        let old = std::fs::read(&path).unwrap();
        a.pre_alloc(0, 600, Wait::NoWait).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&old, 0).unwrap();
        assert_eq!(raw_state(&path).gpus[0].used, 0, "the old copy is in place");
        if new_client_first {
            let b = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
            assert!(
                matches!(
                    b.pre_alloc(0, 600, Wait::NoWait),
                    Err(LedgerError::NotAvailableNow { .. })
                ),
                "a's 600 bytes must not be granted twice"
            );
            a.post_free(0, 600).expect("a's free finds its memory");
            b.pre_alloc(0, 600, Wait::NoWait).unwrap();
        } else {
            a.post_free(0, 600).expect("a's free finds its memory (not OVER_FREE)");
            let s = a.status().unwrap();
            assert_eq!((s.gpus[0].used, s.gpus[1].used), (0, 100));
        }
    }
}

/// An empty ledger put in the file's place (renamed over the path) under a live
/// holder: before, a new client was granted the holder's memory and the holder's free
/// failed with OVER_FREE.
#[test]
fn an_empty_ledger_renamed_over_the_path_is_not_believed() {
    let (path, _path_dir) = fresh_path("renamed");
    let a = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    a.pre_alloc(0, 600, Wait::NoWait).unwrap();
    let other = path.with_file_name("ledger-empty");
    drop(Ledger::open(&config(&other, &[1000, 1000])).unwrap());
    std::fs::rename(&other, &path).unwrap();
    let b = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    assert!(
        matches!(b.pre_alloc(0, 600, Wait::NoWait), Err(LedgerError::NotAvailableNow { .. })),
        "a's 600 bytes must not be granted twice"
    );
    a.post_free(0, 600).expect("a's free finds its memory (not OVER_FREE)");
    b.pre_alloc(0, 600, Wait::NoWait).unwrap();
}

/// Truncating the file under mapped clients used to kill them with SIGBUS; now their
/// next call repairs it — and a waiter asleep on the futex word survives too.
#[test]
fn a_truncated_ledger_neither_faults_its_clients_nor_loses_their_memory() {
    let (path, _path_dir) = fresh_path("truncated");
    let a = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    a.pre_alloc(0, 900, Wait::NoWait).unwrap();
    let p2 = path.clone();
    let waiter = std::thread::spawn(move || {
        let w = Ledger::open(&config(&p2, &[1000, 1000])).unwrap();
        w.pre_alloc(0, 500, Wait::Timeout(Duration::from_secs(30)))
    });
    let t = Instant::now();
    while a.status().unwrap().gpus[0].waiting == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the waiter never queued");
        std::thread::sleep(Duration::from_millis(2));
    }
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    let s = a.status().expect("no SIGBUS: the file was repaired");
    assert_eq!(s.gpus[0].used, 900, "a's memory survived the truncation");
    a.post_free(0, 900).unwrap();
    waiter.join().unwrap().expect("the waiter re-queued after the repair and was granted");
}

/// Unlinking the file used to split clients between two files, each granting the
/// whole GPU.
#[test]
fn an_unlinked_ledger_does_not_split_its_clients() {
    let (path, _path_dir) = fresh_path("unlinked");
    let a = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    a.pre_alloc(0, 600, Wait::NoWait).unwrap();
    std::fs::remove_file(&path).unwrap();
    let b = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    assert!(
        matches!(b.pre_alloc(0, 600, Wait::NoWait), Err(LedgerError::NotAvailableNow { .. })),
        "the new file was made from a's record"
    );
    a.post_free(0, 600).unwrap(); // a moves to the new file
    b.pre_alloc(0, 600, Wait::NoWait).expect("a's free reached the file b uses");
    assert!(a.pre_alloc(0, 600, Wait::NoWait).is_err(), "and a sees b's grant");
}

/// A file that is not a ledger is refused and left untouched (no records directory
/// made either); with a live client's record, the same bytes are a damaged ledger and
/// are repaired.
#[test]
fn a_file_that_is_not_a_ledger_is_refused_and_left_alone() {
    let (path, _path_dir) = fresh_path("foreign");
    let text = b"this is somebody's notes file, not a ledger\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let err = Ledger::open(&config(&path, &[1000])).unwrap_err();
    assert!(matches!(err, LedgerError::NotALedger { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), text);
    assert!(!records_dir(&path).exists(), "nothing created beside it");

    // replaced under a live client: repaired from its record
    let (path, _path_dir) = fresh_path("replaced");
    let a = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    a.pre_alloc(1, 700, Wait::NoWait).unwrap();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let b = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
    assert_eq!(b.status().unwrap().gpus[1].used, 700);
}

/// A failed creation leaves no file behind, and a damaged file with nothing to repair
/// it from is refused with a clear error.
#[test]
fn a_failed_init_leaves_nothing_and_an_unrepairable_file_says_so() {
    let (path, _path_dir) = fresh_path("failed");
    let err = Ledger::open(&LedgerConfig::new(&path, GpuSource::Explicit(vec![]))).unwrap_err();
    assert!(matches!(err, LedgerError::NoGpus(_)), "{err}");
    assert!(!path.exists(), "no zero-filled file left behind");
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().flatten().collect();
    assert!(
        leftovers.iter().all(|e| e.path() == records_dir(&path)),
        "no temporary files: {leftovers:?}"
    );

    drop(Ledger::open(&config(&path, &[1000])).unwrap());
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    std::fs::write(&path, vec![0u8; len]).unwrap();
    let err = Ledger::open(&LedgerConfig::new(&path, GpuSource::Explicit(vec![]))).unwrap_err();
    assert!(matches!(err, LedgerError::Unrepairable { .. }), "{err}");
}

/// A symlink, a file of another owner, or a file others may write is never trusted;
/// what the ledger creates only its owner can read or write — tried by another uid.
#[test]
fn squatted_and_foreign_files_are_refused_and_created_files_are_private() {
    let (path, _path_dir) = fresh_path("squat");
    let target = path.with_extension("target");
    std::fs::write(&target, b"precious").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let err = Ledger::open(&config(&path, &[1000])).unwrap_err();
    assert!(
        matches!(&err, LedgerError::Insecure { reason, .. } if reason.contains("symbolic link")),
        "{err}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    std::fs::remove_file(&path).unwrap();

    // writable by others (as a squatter would leave it for its victims)
    drop(Ledger::open(&config(&path, &[1000])).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = Ledger::open(&config(&path, &[1000])).unwrap_err();
    assert!(
        matches!(&err, LedgerError::Insecure { reason, .. } if reason.contains("writable")),
        "{err}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

    // a records directory planted as a symlink
    let (other, _other_dir) = fresh_path("squat-dir");
    let elsewhere = other.with_extension("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, records_dir(&other)).unwrap();
    let err = Ledger::open(&config(&other, &[1000])).unwrap_err();
    assert!(matches!(&err, LedgerError::Insecure { .. }), "{err}");

    // modes of what we create
    let a = Ledger::open(&config(&path, &[1000])).unwrap();
    a.pre_alloc(0, 10, Wait::NoWait).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let (fresh, _fresh_dir) = fresh_path("modes");
    let b = Ledger::open(&config(&fresh, &[1000])).unwrap();
    assert_eq!(mode(&fresh), 0o600);
    assert_eq!(mode(&records_dir(&fresh)), 0o700);
    let rec = records_dir(&fresh).join(b.client_id().to_string());
    assert_eq!(mode(&rec), 0o600);

    if rustix::process::geteuid().is_root() {
        // a file of another owner
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let err = Ledger::open(&config(&path, &[1000])).unwrap_err();
        assert!(
            matches!(&err, LedgerError::Insecure { reason, .. } if reason.contains("uid 65534")),
            "{err}"
        );
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        // another uid can neither write nor read the ledger or a record
        for target in [&fresh, &rec] {
            let out = Command::new("sh")
                .args(["-c", "printf x >> \"$0\" || cat \"$0\""])
                .arg(target)
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap();
            assert!(!out.status.success(), "uid 65534 got into {}", target.display());
        }
    } else {
        eprintln!("SKIPPED: the other-owner and other-uid cases need root");
    }
    drop(b);
    drop(a);
}

use std::os::unix::process::CommandExt;

/// A ledger shared by a group: group-owned, group-writable, nobody else.
#[test]
fn a_group_ledger_is_made_for_its_group() {
    let gid = rustix::process::getegid().as_raw();
    let (path, _path_dir) = fresh_path("group");
    let cfg = LedgerConfig { access: Access::Group(gid), ..config(&path, &[1000]) };
    let a = Ledger::open(&cfg).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!((meta.gid(), meta.permissions().mode() & 0o777), (gid, 0o660));
    let dir = std::fs::metadata(records_dir(&path)).unwrap();
    assert_eq!((dir.gid(), dir.permissions().mode() & 0o7777), (gid, 0o2770));
    drop(a);
    let err = Ledger::open(&LedgerConfig { access: Access::Group(gid + 1), ..cfg }).unwrap_err();
    assert!(matches!(&err, LedgerError::Insecure { .. }), "{err}");
}

/// Dead rows are swept before a table is declared full; tables hold thousands.
#[test]
fn a_table_full_of_dead_rows_serves_live_requests() {
    let (path, _path_dir) = fresh_path("dead-rows");
    let cfg = LedgerConfig { max_holders: 8, max_waiters: 4, ..config(&path, &[1000, 1000]) };
    let observer = Ledger::open(&cfg).unwrap();
    let mut kids = Reaper(Vec::new());
    // 7 children + the observer's row fill the holder table; then all children die
    let holders: Vec<usize> = (0..7).map(|_| kids.spawn(&[], "hold", &path, 0, 1)).collect();
    observer.pre_alloc(1, 1, Wait::NoWait).unwrap();
    let fresh = Ledger::open(&cfg).unwrap();
    assert!(matches!(
        fresh.pre_alloc(0, 1, Wait::NoWait),
        Err(LedgerError::TableFull { table: "holder", capacity: 8 })
    ));
    for i in holders {
        kids.kill(i);
    }
    fresh.pre_alloc(0, 1, Wait::NoWait).expect("the dead rows were swept first");

    // the waiter table: 4 waiters, killed; a fifth queues
    observer.pre_alloc(0, 999 - 1, Wait::NoWait).unwrap();
    let waiters: Vec<usize> = (0..4).map(|_| kids.spawn(&[], "wait", &path, 0, 500)).collect();
    let t = Instant::now();
    while observer.status().unwrap().gpus[0].waiting < 4 {
        assert!(t.elapsed() < Duration::from_secs(20), "the waiters never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in waiters {
        kids.kill(i);
    }
    let got = fresh.pre_alloc(0, 500, Wait::Timeout(Duration::from_millis(50)));
    assert!(matches!(got, Err(LedgerError::TimedOut { .. })), "queued, not refused: {got:?}");
}

#[test]
fn the_default_tables_hold_hundreds_of_live_holders_and_waiters() {
    // 500 handles in one process keep two descriptors each (a real client process has
    // one handle); the default soft limit of 1024 would be too tight
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let raised = rustix::process::Rlimit { current: limit.maximum, ..limit };
    let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, raised);
    let (path, _path_dir) = fresh_path("many");
    let handles: Vec<Ledger> = (0..300)
        .map(|_| {
            let l = Ledger::open(&config(&path, &[1000, 1000])).unwrap();
            l.pre_alloc(0, 1, Wait::NoWait).unwrap();
            l
        })
        .collect();
    let s = handles[0].status().unwrap();
    assert_eq!((s.holdings.len(), s.gpus[0].used), (300, 300));
    // 200 waiters for GPU 1, blocked behind one big holding
    handles[0].pre_alloc(1, 1000, Wait::NoWait).unwrap();
    let p = path.clone();
    let threads: Vec<_> = (0..200)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || {
                let l = Ledger::open(&config(&p, &[1000, 1000])).unwrap();
                l.pre_alloc(1, 5, Wait::Timeout(Duration::from_secs(60))).map(|()| l)
            })
        })
        .collect();
    let t = Instant::now();
    while handles[0].status().unwrap().gpus[1].waiting < 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "the waiters never all queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    handles[0].post_free(1, 1000).unwrap();
    for t in threads {
        t.join().unwrap().expect("every waiter granted, none refused");
    }
}

/// Whenever the sanity check releases a dead client's memory, the waiters on every GPU
/// are served — checked on the file itself, right after the call: no waiter is left
/// waiting for memory that is free (MMU serves every waiter that fits).
#[test]
fn memory_released_by_a_sweep_reaches_waiters_on_every_gpu() {
    let (path, _path_dir) = fresh_path("cross-gpu");
    let cfg = config(&path, &[1000, 1000]);
    let c = Ledger::open(&cfg).unwrap();
    let mut kids = Reaper(Vec::new());
    let dead = kids.spawn(&[], "hold", &path, 1, 1000);
    let p = path.clone();
    let waiter = std::thread::spawn(move || {
        let w = Ledger::open(&config(&p, &[1000, 1000])).unwrap();
        w.pre_alloc(1, 400, Wait::Timeout(Duration::from_secs(30)))
    });
    let t = Instant::now();
    while raw_state(&path).waiters.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "the waiter never queued");
        std::thread::sleep(Duration::from_millis(2));
    }
    kids.kill(dead);
    c.pre_alloc(0, 1000, Wait::NoWait).unwrap();
    // GPU 0 is short now: this request runs the sanity check
    let _ = c.pre_alloc(0, 1, Wait::NoWait);
    let s = raw_state(&path);
    for (g, row) in s.gpus.iter().enumerate() {
        let starving = s
            .waiters
            .iter()
            .filter(|w| w.gpu as usize == g && w.granted == 0 && w.bytes <= row.total - row.used)
            .count();
        assert_eq!(starving, 0, "GPU {g}: a waiter sits beside free memory: {s:?}");
    }
    waiter.join().unwrap().unwrap();
}

/// Clients killed while holding nothing are in no row, so no sweep meets them: their
/// records must still go (20,000 kills used to leave 4,131).
#[test]
fn records_of_idle_clients_that_died_are_removed() {
    let (path, _path_dir) = fresh_path("idle-records");
    let observer = Ledger::open(&config(&path, &[1000])).unwrap();
    let mut kids = Reaper(Vec::new());
    for _ in 0..12 {
        let i = kids.spawn(&[], "idle", &path, 0, 0);
        kids.kill(i);
    }
    // (opens check the records of an empty ledger too, so some may be gone already)
    observer.status().unwrap();
    let names: Vec<String> = std::fs::read_dir(records_dir(&path))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![observer.client_id().to_string()], "only the live client's record");
}
