//! The control plane: a Unix socket (owner-only), one thread per connection. The peer's
//! pid and uid come from `SO_PEERCRED`, never from what it says. A malformed, truncated
//! or oversized message is answered with a typed error and the connection is closed;
//! nothing a client sends can panic the daemon or touch another client's tenants.

use crate::core::{ConnId, Mailbox, Msg};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::fs::File;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tessera_client::proto::{self, ErrorCode, FrameError, PROTOCOL, Reply, Request};
use tessera_client::region::Region;

/// Forbid any later change of `file`'s size (and of its seals).
pub(crate) fn seal_size(file: &File) -> std::io::Result<()> {
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(())
}

/// Every open connection's socket, so that stopping — or the core, when a client
/// misbehaves — can close it (its thread then sees the end and cleans up).
#[derive(Debug, Default)]
pub(crate) struct Connections(std::sync::Mutex<std::collections::BTreeMap<ConnId, UnixStream>>);

impl Connections {
    fn insert(&self, conn: ConnId, s: UnixStream) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, s);
    }

    fn remove(&self, conn: ConnId) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn);
    }

    /// Close one connection.
    pub(crate) fn kick(&self, conn: ConnId) {
        if let Some(s) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&conn) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn close_all(&self) {
        for s in self.0.lock().unwrap_or_else(|p| p.into_inner()).values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Shared by the accept loop and connection threads.
#[derive(Debug)]
pub struct Server {
    pub(crate) mailbox: Mailbox,
    pub(crate) slots: u32,
    pub(crate) slot_bytes: u32,
    max_conns_per_uid: u32,
    /// Open connections per uid.
    per_uid: std::sync::Mutex<std::collections::HashMap<u32, u32>>,
    pub(crate) stopping: AtomicBool,
    next_conn: AtomicU64,
    /// Every open connection, so that stopping can close them (their threads would
    /// otherwise wait for the client forever).
    streams: Arc<Connections>,
}

impl Server {
    pub(crate) fn new(
        mailbox: Mailbox,
        slots: u32,
        slot_bytes: u32,
        max_conns_per_uid: u32,
        streams: Arc<Connections>,
    ) -> Server {
        Server {
            mailbox,
            slots,
            slot_bytes,
            max_conns_per_uid,
            per_uid: Default::default(),
            stopping: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            streams,
        }
    }

    /// Accept until told to stop.
    pub(crate) fn accept_loop(self: Arc<Self>, listener: UnixListener) {
        for stream in listener.incoming() {
            if self.stopping.load(Ordering::SeqCst) {
                break;
            }
            match stream {
                Ok(s) => {
                    let me = self.clone();
                    let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = std::thread::Builder::new()
                        .name(format!("conn{conn}"))
                        .spawn(move || me.serve(conn, s))
                    {
                        tracing::error!(error = %e, "cannot spawn a connection thread");
                    }
                }
                Err(_) if self.stopping.load(Ordering::SeqCst) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    // a persistent error (e.g. out of descriptors) must not spin a core
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
    }

    /// Close every client connection (at shutdown, after the core has drained).
    pub(crate) fn close_all(&self) {
        self.streams.close_all();
    }

    fn serve(&self, conn: ConnId, mut stream: UnixStream) {
        if let Ok(clone) = stream.try_clone() {
            self.streams.insert(conn, clone);
        }
        self.serve_stream(conn, &mut stream);
        self.streams.remove(conn);
    }

    fn serve_stream(&self, conn: ConnId, stream: &mut UnixStream) {
        let (pid, uid) = match rustix::net::sockopt::socket_peercred(&*stream) {
            Ok(c) => (c.pid.as_raw_nonzero().get() as u32, c.uid.as_raw()),
            Err(e) => {
                tracing::warn!(error = %e, "no peer credentials; dropping connection");
                return;
            }
        };
        tracing::debug!(conn, pid, uid, "client connected");
        {
            let mut per_uid = self.per_uid.lock().unwrap_or_else(|p| p.into_inner());
            let n = per_uid.entry(uid).or_default();
            if *n >= self.max_conns_per_uid {
                drop(per_uid);
                let _ = proto::write_frame(
                    stream,
                    &Reply::Error {
                        code: ErrorCode::NoCapacity,
                        message: format!(
                            "uid {uid} already has {} connections (max_conns_per_uid)",
                            self.max_conns_per_uid
                        ),
                    },
                );
                return;
            }
            *n += 1;
        }
        self.serve_connection(conn, pid, uid, stream);
        let mut per_uid = self.per_uid.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                per_uid.remove(&uid);
            }
        }
    }

    fn serve_connection(&self, conn: ConnId, pid: u32, uid: u32, stream: &mut UnixStream) {
        let mut hello_done = false;
        loop {
            let request: Request = match proto::read_frame(stream) {
                Ok(r) => r,
                Err(FrameError::Closed) => break,
                Err(e) => {
                    tracing::info!(conn, pid, error = %e, "bad message; closing the connection");
                    let _ = proto::write_frame(
                        stream,
                        &Reply::Error { code: ErrorCode::BadRequest, message: e.to_string() },
                    );
                    break;
                }
            };
            let reply = match request {
                Request::Hello { protocol } if protocol != PROTOCOL => {
                    let _ = proto::write_frame(
                        stream,
                        &Reply::Error {
                            code: ErrorCode::UnsupportedVersion,
                            message: format!(
                                "daemon speaks protocol {PROTOCOL}, client {protocol}"
                            ),
                        },
                    );
                    break;
                }
                Request::Ping => Reply::Pong,
                Request::Hello { .. } if hello_done => {
                    Reply::Error { code: ErrorCode::BadRequest, message: "hello sent twice".into() }
                }
                Request::Hello { .. } => {
                    if self.stopping.load(Ordering::SeqCst) {
                        Reply::Error {
                            code: ErrorCode::ShuttingDown,
                            message: "the daemon is shutting down".into(),
                        }
                    } else {
                        match self.open_rings(conn, pid, uid, stream) {
                            Ok(()) => {
                                hello_done = true;
                                continue; // the welcome went out with the descriptors
                            }
                            Err(e) => {
                                tracing::error!(conn, error = %e, "cannot set up shared memory for a client");
                                Reply::Error {
                                    code: ErrorCode::NoCapacity,
                                    message: format!("shared memory: {e}"),
                                }
                            }
                        }
                    }
                }
                request => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    self.mailbox.send(Msg::Control { conn, pid, uid, request, reply: tx });
                    match rx.recv() {
                        Ok(r) => r,
                        Err(_) => Reply::Error {
                            code: ErrorCode::ShuttingDown,
                            message: "the daemon stopped".into(),
                        },
                    }
                }
            };
            if proto::write_frame(stream, &reply).is_err() {
                break;
            }
        }
        self.mailbox.send(Msg::Disconnected { conn });
        tracing::debug!(conn, pid, "client disconnected");
    }

    fn open_rings(
        &self,
        conn: ConnId,
        pid: u32,
        uid: u32,
        stream: &UnixStream,
    ) -> std::io::Result<()> {
        let fd = rustix::fs::memfd_create(
            format!("tessera-client-{conn}"),
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        let file = File::from(fd);
        let region =
            Region::create(&file, self.slots, self.slot_bytes).map_err(std::io::Error::other)?;
        // the client gets a writable descriptor: sealing the size means it cannot
        // truncate the region under the daemon (which would fault the daemon)
        seal_size(&file)?;
        // the client's own doorbell: whatever it does to it (clear O_NONBLOCK, drain or
        // saturate the counter) touches no other client and never blocks the core
        let bell = tessera_client::region::Doorbell::new()?;
        let fds = [file.as_fd(), bell.as_fd()];
        let welcome =
            Reply::Welcome { protocol: PROTOCOL, slots: self.slots, slot_bytes: self.slot_bytes };
        let body = serde_json::to_vec(&welcome).map_err(std::io::Error::other)?;
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        cmsg.push(SendAncillaryMessage::ScmRights(&fds));
        let mut sent =
            rustix::net::sendmsg(stream, &[IoSlice::new(&frame)], &mut cmsg, SendFlags::NOSIGNAL)?;
        while sent < frame.len() {
            sent += rustix::net::send(stream, &frame[sent..], SendFlags::NOSIGNAL)?;
        }
        self.mailbox.send(Msg::Connected { conn, region: Arc::new(region), bell, pid, uid });
        Ok(())
    }
}
