//! The memory desk as users and attackers meet it (issue 51): reservations follow
//! placement (a tenant's GPUs, a Slurm job's GPUs), and one user's waits cannot use up
//! the desk for everyone else.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use tessera_client::proto::{ErrorCode, JobGrant, PROTOCOL};
use tessera_client::{Client, ClientError, TenantOptions};
use tesserad::Daemon;
use tesserad::config::PolicyName;

const MIB: u64 = 1 << 20;

fn code(e: ClientError) -> ErrorCode {
    match e {
        ClientError::Refused { code, .. } => code,
        other => panic!("not a refusal: {other}"),
    }
}

/// Item 4: a tenant placed on GPU 0 reserves only there. Before, it could reserve
/// 900 MiB on GPU 1, where it runs nothing, and keep it from the tenants placed there.
#[test]
fn a_tenant_reserves_only_on_the_gpus_it_is_placed_on() {
    let mut cfg = common::config(PolicyName::RoundRobin);
    cfg.gpu_memory_mib = 1024;
    let d = Daemon::start(&cfg).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let placed = c.register_within(TenantOptions::batch(), 1, Some(vec!["0".into()])).unwrap();
    assert_eq!(placed.gpus, vec![0]);
    let mut desk = Client::connect_control(d.socket()).unwrap();
    let e = desk.reserve(placed.tenant, 1, 900 * MIB, Some(Duration::ZERO), false).unwrap_err();
    assert!(e.to_string().contains("placed on GPU(s) [0]"), "{e}");
    assert_eq!(code(e), ErrorCode::Forbidden);
    desk.reserve(placed.tenant, 0, 900 * MIB, Some(Duration::ZERO), false).unwrap();
    d.shutdown();
}

/// Item 4, Slurm: a job's tenant reserves only on its job's GPUs (before, on any: the
/// entitlement was counted in bytes, not per GPU), and its memory view is per GPU.
#[test]
fn a_jobs_tenant_cannot_reserve_on_another_jobs_gpu() {
    let mut cfg = common::config(PolicyName::Fair);
    cfg.gpu_memory_mib = 1024;
    let d = Daemon::start(&cfg).unwrap();
    let me = rustix::process::geteuid().as_raw();
    let grant = |job, gpus| JobGrant {
        job,
        uid: me,
        gpus,
        shards: 4,
        partition: "debug".into(),
        qos: String::new(),
        comment: String::new(),
    };
    let mut admin = Client::connect(d.socket()).unwrap();
    admin.job_start(grant(31, vec![0])).unwrap();
    admin.job_start(grant(32, vec![1])).unwrap();
    let mut a = Client::connect(d.socket()).unwrap();
    let ta = a.register(TenantOptions { job: Some(31), ..TenantOptions::batch() }).unwrap();
    let mut desk = Client::connect_control(d.socket()).unwrap();
    let e = desk.reserve(ta, 1, 100 * MIB, Some(Duration::ZERO), false).unwrap_err();
    assert!(e.to_string().contains("Slurm job 31"), "{e}");
    assert_eq!(code(e), ErrorCode::Forbidden);
    desk.reserve(ta, 0, 100 * MIB, Some(Duration::ZERO), false).unwrap();
    // half of GPU 0 (4 of its 8 shards), 100 MiB of it held
    assert_eq!(desk.memory_info(ta, 0).unwrap(), (412 * MIB, 512 * MIB));
    admin.job_end(31).unwrap();
    admin.job_end(32).unwrap();
    d.shutdown();
}

/// Whether this test runs as root (it can then run a program as another uid).
fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A request frame.
fn frame(json: &str) -> Vec<u8> {
    let mut out = (json.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}

/// Item 5: one uid that fills the desk with waits cannot starve another uid. Root
/// sends 1,024 reservations that wait (GPU 0 is full); the desk takes its share and
/// refuses the rest at once; meanwhile uid 65534 registers a tenant and reserves on
/// the free GPU 1, which succeeds. Before, the cap was node-wide (1,024) and equal to
/// one uid's connections: every other user's allocation failed with `NoCapacity`.
#[test]
fn one_users_waits_leave_room_for_another_users_allocation() {
    if !root() {
        eprintln!("SKIPPED: running a client as another uid needs root");
        return;
    }
    let python = std::path::Path::new("/usr/bin/python3");
    if !python.exists() || !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("SKIPPED: needs /usr/bin/python3 and setpriv to act as another uid");
        return;
    }
    // a directory everyone may traverse, for a socket everyone may use
    let dir = std::env::temp_dir().join(format!("tessera-desk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, None, None).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = common::config(PolicyName::RoundRobin);
    cfg.gpu_memory_mib = 1024;
    cfg.socket = dir.join("d.sock");
    cfg.socket_mode = 0o666;
    cfg.max_conns_per_uid = 2048;
    let d = Daemon::start(&cfg).unwrap();
    // GPU 0 full, and a second tenant of root's there that asks for more
    let mut holder = Client::connect(d.socket()).unwrap();
    let full = holder.register_within(TenantOptions::batch(), 1, Some(vec!["0".into()])).unwrap();
    let mut desk = Client::connect_control(d.socket()).unwrap();
    desk.reserve(full.tenant, 0, 1024 * MIB, Some(Duration::ZERO), false).unwrap();
    let mut asker = Client::connect(d.socket()).unwrap();
    let ask = asker.register_within(TenantOptions::batch(), 1, Some(vec!["0".into()])).unwrap();
    let request = frame(&format!(
        r#"{{"type":"reserve","tenant":{},"gpu":0,"bytes":{MIB},"wait_ms":null,"lease":false}}"#,
        ask.tenant
    ));
    let mut waits = Vec::new();
    for _ in 0..1024 {
        let mut s = UnixStream::connect(d.socket()).unwrap();
        s.write_all(&request).unwrap();
        waits.push(s);
    }
    // the desk answers the waits beyond root's share at once
    std::thread::sleep(Duration::from_millis(500));
    let mut refused = 0;
    for s in &mut waits {
        s.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_ok() {
            let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            s.read_exact(&mut body).unwrap();
            let body = String::from_utf8_lossy(&body);
            assert!(body.contains("no_capacity") && body.contains("per user"), "{body}");
            refused += 1;
        }
    }
    assert!(refused >= 1024 - 256, "root's waits beyond its share are refused ({refused})");
    assert!(refused < 1024, "root still has its share of waits ({refused})");
    // another user's allocation on the free GPU goes through meanwhile
    let script = r#"
import json, socket, struct, sys
path, proto = sys.argv[1], int(sys.argv[2])
def send(c, o):
    b = json.dumps(o).encode(); c.sendall(struct.pack('<I', len(b)) + b)
def recv(c):
    buf, _, _, _ = c.recvmsg(1 << 16, socket.CMSG_SPACE(64))
    while len(buf) < 4: buf += c.recv(4 - len(buf))
    n = struct.unpack('<I', buf[:4])[0]; body = buf[4:]
    while len(body) < n: body += c.recv(n - len(body))
    return json.loads(body)
session = socket.socket(socket.AF_UNIX); session.connect(path)
send(session, {"type": "hello", "protocol": proto}); recv(session)
send(session, {"type": "register", "class": "batch", "gpus": 1, "visible": ["1"]})
t = recv(session)["tenant"]
mem = socket.socket(socket.AF_UNIX); mem.connect(path)
send(mem, {"type": "reserve", "tenant": t, "gpu": 1, "bytes": 100 << 20, "wait_ms": 2000, "lease": False})
print(json.dumps(recv(mem)))
"#;
    let out = std::process::Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(python)
        .arg("-c")
        .arg(script)
        .arg(d.socket())
        .arg(PROTOCOL.to_string())
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(r#""type": "reserved""#), "uid 65534's allocation: {stdout}");
    drop(waits);
    drop(asker);
    d.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Item 6a: a departed tenant's wait never makes a newcomer fail. Tenant A holds
/// 600 MiB of a 1 GiB GPU and asks for 500 more, which only its own memory stands in
/// the way of; its program goes; at once a new tenant asks for 900 MiB. Before, A's
/// request waited for ever, and until its cancellation was seen (up to 50 ms after A
/// closed) its rows made the newcomer's request look like a deadlock: refused. Now A's
/// request fails at once, and the newcomer's is granted once A's memory is released.
#[test]
fn a_departed_tenants_wait_never_makes_a_newcomer_fail() {
    let mut cfg = common::config(PolicyName::RoundRobin);
    cfg.gpu_memory_mib = 1024;
    let d = Daemon::start(&cfg).unwrap();
    let socket = d.socket().to_path_buf();
    let mut a = Client::connect(&socket).unwrap();
    let ta = a.register_within(TenantOptions::batch(), 1, Some(vec!["0".into()])).unwrap().tenant;
    let mut desk = Client::connect_control(&socket).unwrap();
    desk.reserve(ta, 0, 600 * MIB, Some(Duration::ZERO), false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let s = socket.clone();
    std::thread::spawn(move || {
        let mut grow = Client::connect_control(&s).unwrap();
        let _ = tx.send(grow.reserve(ta, 0, 500 * MIB, None, false));
    });
    let grown = rx.recv_timeout(Duration::from_millis(500));
    drop(a); // A's program goes
    let mut c = Client::connect(&socket).unwrap();
    let tc = c.register_within(TenantOptions::batch(), 1, Some(vec!["0".into()])).unwrap().tenant;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut mine = Client::connect_control(&socket).unwrap();
        let _ = tx.send(mine.reserve(tc, 0, 900 * MIB, None, false));
    });
    let newcomer = rx.recv_timeout(Duration::from_secs(10)).expect("the newcomer waited for ever");
    assert!(newcomer.is_ok(), "the newcomer's 900 MiB on a GPU nobody holds: {newcomer:?}");
    let e = grown.expect("A's request for memory only it stands in the way of waited").unwrap_err();
    assert!(e.to_string().contains("can never be granted"), "{e}");
    drop(c);
    d.shutdown();
}
