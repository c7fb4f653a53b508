//! The control plane: a Unix socket (owner-only) served by one thread with one event
//! loop (`mio`, epoll underneath) for every connection — a connection costs a socket
//! and a little memory, not a thread. The peer's pid and uid come from `SO_PEERCRED`,
//! never from what it says. A malformed, truncated or oversized message is answered
//! with a typed error and the connection is closed; nothing a client sends can panic
//! the daemon, block the loop, or touch another client's tenants.
//!
//! Requests the core must answer go to it through the mailbox with a [`ReplyTo`]; the
//! core's answer comes back on a channel and wakes the loop. One request per
//! connection is with the core at a time, so answers keep the order of requests.

use crate::core::{ConnId, Mailbox, Msg};
use crate::memory::MemoryDesk;
use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::collections::HashMap;
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};
use tessera_client::proto::{self, ErrorCode, MAX_FRAME, PROTOCOL, Reply, Request};
use tessera_client::region::Region;

/// Forbid any later change of `file`'s size (and of its seals).
pub(crate) fn seal_size(file: &File) -> std::io::Result<()> {
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(())
}

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection ids start here (they double as `mio` tokens).
const FIRST_CONN: ConnId = 2;
/// Replies a client has not read, beyond which its connection is closed.
const MAX_UNREAD: usize = 1 << 20;

/// Every open connection's socket, so that stopping — or the core, when a client
/// misbehaves — can close it (the loop then sees the end and cleans up).
#[derive(Debug, Default)]
pub(crate) struct Connections(
    std::sync::Mutex<std::collections::BTreeMap<ConnId, std::os::fd::OwnedFd>>,
);

impl Connections {
    fn insert(&self, conn: ConnId, fd: std::os::fd::OwnedFd) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, fd);
    }

    fn remove(&self, conn: ConnId) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn);
    }

    /// How many are open.
    pub(crate) fn count(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Close one connection.
    pub(crate) fn kick(&self, conn: ConnId) {
        if let Some(s) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&conn) {
            let _ = rustix::net::shutdown(s, rustix::net::Shutdown::Both);
        }
    }
}

/// Where the core sends its answer to one control request.
#[derive(Debug)]
pub struct ReplyTo {
    conn: ConnId,
    tx: Sender<Answer>,
    waker: Arc<Waker>,
}

/// An answer for a connection, with a descriptor to pass along with it, if any.
type Answer = (ConnId, Reply, Option<std::os::fd::OwnedFd>);

impl ReplyTo {
    /// Answer (and wake the control loop).
    pub fn send(self, reply: Reply) {
        if self.tx.send((self.conn, reply, None)).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// Answer with a descriptor for the client (`SCM_RIGHTS`).
    pub fn send_with_fd(self, reply: Reply, fd: std::os::fd::OwnedFd) {
        if self.tx.send((self.conn, reply, Some(fd))).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// Shared by the daemon and the control loop.
#[derive(Debug)]
pub struct Server {
    pub(crate) mailbox: Mailbox,
    pub(crate) slots: u32,
    pub(crate) slot_bytes: u32,
    max_conns_per_uid: u32,
    idle_timeout: Duration,
    /// Draining: new sessions are refused.
    pub(crate) stopping: AtomicBool,
    /// The loop should end (after the core stopped).
    exit: AtomicBool,
    waker: Arc<Waker>,
    streams: Arc<Connections>,
    /// Memory requests go here, never to the core (they take the ledger's lock).
    desk: Arc<MemoryDesk>,
}

/// One connection, as the loop sees it.
struct Conn {
    stream: UnixStream,
    pid: u32,
    uid: u32,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    hello_done: bool,
    /// A request is with the core.
    awaiting: bool,
    /// Close once `outbuf` is flushed.
    closing: bool,
    writable_interest: bool,
    last_active: Instant,
}

impl Server {
    /// A server and the poll its loop will run on.
    pub(crate) fn new(
        mailbox: Mailbox,
        slots: u32,
        slot_bytes: u32,
        max_conns_per_uid: u32,
        idle_timeout: Duration,
        streams: Arc<Connections>,
        desk: Arc<MemoryDesk>,
    ) -> std::io::Result<(Arc<Server>, Poll)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let server = Server {
            mailbox,
            slots,
            slot_bytes,
            max_conns_per_uid,
            idle_timeout,
            stopping: AtomicBool::new(false),
            exit: AtomicBool::new(false),
            waker,
            streams,
            desk,
        };
        Ok((Arc::new(server), poll))
    }

    /// End the loop (after the core has drained): every connection is closed.
    pub(crate) fn exit(&self) {
        self.exit.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// Serve until [`Server::exit`].
    pub(crate) fn run(self: Arc<Self>, mut poll: Poll, listener: std::os::unix::net::UnixListener) {
        if let Err(e) = listener.set_nonblocking(true) {
            tracing::error!(error = %e, "cannot make the listening socket non-blocking");
            return;
        }
        let mut listener = UnixListener::from_std(listener);
        if let Err(e) = poll.registry().register(&mut listener, LISTENER, Interest::READABLE) {
            tracing::error!(error = %e, "cannot watch the listening socket");
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let registry = match poll.registry().try_clone() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot clone the poll registry");
                return;
            }
        };
        let mut state = Loop {
            server: &self,
            registry,
            tx,
            conns: HashMap::new(),
            per_uid: HashMap::new(),
            next_conn: FIRST_CONN,
        };
        let mut events = Events::with_capacity(1024);
        let mut last_sweep = Instant::now();
        while !self.exit.load(Ordering::SeqCst) {
            if let Err(e) = poll.poll(&mut events, Some(Duration::from_secs(1))) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "poll failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => state.accept(&listener),
                    WAKER => state.replies(&rx),
                    // a writable event needs nothing of its own: `ready` always
                    // flushes what is pending
                    Token(t) => state.ready(t as ConnId, ev.is_readable()),
                }
            }
            if last_sweep.elapsed() >= Duration::from_secs(1) {
                last_sweep = Instant::now();
                state.close_idle();
            }
        }
        let all: Vec<ConnId> = state.conns.keys().copied().collect();
        for c in all {
            state.close(c);
        }
    }
}

/// The loop's own state (one thread; no locks).
struct Loop<'a> {
    server: &'a Server,
    registry: mio::Registry,
    tx: Sender<Answer>,
    conns: HashMap<ConnId, Conn>,
    per_uid: HashMap<u32, u32>,
    next_conn: ConnId,
}

fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error { code, message: message.into() }
}

fn frame(reply: &Reply) -> Vec<u8> {
    let body = serde_json::to_vec(reply).unwrap_or_else(|e| {
        serde_json::to_vec(&error(ErrorCode::BadRequest, format!("cannot encode the reply: {e}")))
            .unwrap_or_default()
    });
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

impl Loop<'_> {
    fn accept(&mut self, listener: &UnixListener) {
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // e.g. out of descriptors: the pending connection waits for the next
                    // event rather than spinning a core
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            };
            let (pid, uid) = match rustix::net::sockopt::socket_peercred(&stream) {
                Ok(c) => (c.pid.as_raw_nonzero().get() as u32, c.uid.as_raw()),
                Err(e) => {
                    tracing::warn!(error = %e, "no peer credentials; dropping connection");
                    continue;
                }
            };
            let n = self.per_uid.entry(uid).or_default();
            if *n >= self.server.max_conns_per_uid {
                let msg = format!(
                    "uid {uid} already has {} connections (max_conns_per_uid)",
                    self.server.max_conns_per_uid
                );
                let mut s = stream;
                let _ = s.write(&frame(&error(ErrorCode::NoCapacity, msg)));
                continue;
            }
            *n += 1;
            let conn = self.next_conn;
            self.next_conn += 1;
            let mut c = Conn {
                stream,
                pid,
                uid,
                inbuf: Vec::new(),
                outbuf: Vec::new(),
                hello_done: false,
                awaiting: false,
                closing: false,
                writable_interest: false,
                last_active: Instant::now(),
            };
            if let Err(e) =
                self.registry.register(&mut c.stream, Token(conn as usize), Interest::READABLE)
            {
                tracing::warn!(error = %e, "cannot watch a connection");
                *self.per_uid.entry(uid).or_default() -= 1;
                continue;
            }
            if let Ok(dup) = c.stream.as_fd().try_clone_to_owned() {
                self.server.streams.insert(conn, dup);
            }
            tracing::debug!(conn, pid, uid, "client connected");
            self.conns.insert(conn, c);
            // it may have written already
            self.ready(conn, true);
        }
    }

    fn replies(&mut self, rx: &Receiver<Answer>) {
        while let Ok((conn, reply, fd)) = rx.try_recv() {
            let Some(c) = self.conns.get_mut(&conn) else { continue };
            c.awaiting = false;
            match fd {
                None => c.outbuf.extend_from_slice(&frame(&reply)),
                Some(fd) => send_with_fd(conn, c, &reply, fd),
            }
            // frames that waited behind this request, and data left unread meanwhile
            self.ready(conn, true);
        }
    }

    /// Read what there is, handle complete frames, write what is pending.
    fn ready(&mut self, conn: ConnId, readable: bool) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let mut eof = false;
        if readable && !c.closing {
            let mut buf = [0u8; 16 * 1024];
            // stop reading while a full frame waits: its sender is ahead of us
            while c.inbuf.len() < 2 * (MAX_FRAME + 4) {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => c.inbuf.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
        }
        self.handle_frames(conn);
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if !c.outbuf.is_empty() {
            match c.stream.write(&c.outbuf) {
                Ok(n) => {
                    c.outbuf.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => eof = true,
            }
        }
        if c.outbuf.len() > MAX_UNREAD {
            tracing::info!(conn, pid = c.pid, "client does not read its replies; closing");
            eof = true;
        }
        let want_write = !c.outbuf.is_empty();
        if want_write != c.writable_interest {
            c.writable_interest = want_write;
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = self.registry.reregister(&mut c.stream, Token(conn as usize), interest);
        }
        if eof || (c.closing && c.outbuf.is_empty()) {
            self.close(conn);
        }
    }

    fn handle_frames(&mut self, conn: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&conn) else { return };
            if c.awaiting || c.closing || c.inbuf.len() < 4 {
                return;
            }
            let len = u32::from_le_bytes(c.inbuf[..4].try_into().expect("4 bytes")) as usize;
            if len > MAX_FRAME {
                let e = proto::FrameError::TooLarge(len);
                tracing::info!(conn, pid = c.pid, error = %e, "bad message; closing the connection");
                c.outbuf.extend_from_slice(&frame(&error(ErrorCode::BadRequest, e.to_string())));
                c.closing = true;
                return;
            }
            if c.inbuf.len() < 4 + len {
                return;
            }
            let body: Vec<u8> = c.inbuf.drain(..4 + len).skip(4).collect();
            c.last_active = Instant::now();
            let request: Request = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => {
                    let e = proto::FrameError::Malformed(e.to_string());
                    tracing::info!(conn, pid = c.pid, error = %e, "bad message; closing the connection");
                    c.outbuf
                        .extend_from_slice(&frame(&error(ErrorCode::BadRequest, e.to_string())));
                    c.closing = true;
                    return;
                }
            };
            self.request(conn, request);
        }
    }

    fn request(&mut self, conn: ConnId, request: Request) {
        let server = self.server;
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let reply = match request {
            Request::Hello { protocol } if protocol != PROTOCOL => {
                c.closing = true;
                error(
                    ErrorCode::UnsupportedVersion,
                    format!("daemon speaks protocol {PROTOCOL}, client {protocol}"),
                )
            }
            Request::Ping => Reply::Pong,
            Request::Hello { .. } if c.hello_done => {
                error(ErrorCode::BadRequest, "hello sent twice")
            }
            Request::Hello { .. } if server.stopping.load(Ordering::SeqCst) => {
                error(ErrorCode::ShuttingDown, "the daemon is shutting down")
            }
            Request::Hello { .. } => {
                // the welcome carries descriptors, so it must go out first and whole
                if !c.outbuf.is_empty() {
                    let _ = c.stream.write(&c.outbuf).map(|n| c.outbuf.drain(..n).count());
                }
                if c.outbuf.is_empty() {
                    match open_rings(server, conn, c) {
                        Ok(()) => {
                            c.hello_done = true;
                            return;
                        }
                        Err(e) => {
                            tracing::error!(conn, error = %e, "cannot set up shared memory for a client");
                            error(ErrorCode::NoCapacity, format!("shared memory: {e}"))
                        }
                    }
                } else {
                    error(ErrorCode::BadRequest, "hello while earlier replies are unread")
                }
            }
            request @ (Request::Reserve { .. }
            | Request::ReserveContext { .. }
            | Request::Unreserve { .. }
            | Request::MemoryInfo { .. }
            | Request::KeepLedgerRecord { .. }
            | Request::Adopt { .. }) => {
                c.awaiting = true;
                let reply = ReplyTo { conn, tx: self.tx.clone(), waker: server.waker.clone() };
                server.desk.submit(c.uid, c.pid, request, reply);
                return;
            }
            request => {
                c.awaiting = true;
                let reply = ReplyTo { conn, tx: self.tx.clone(), waker: server.waker.clone() };
                server.mailbox.send(Msg::Control { conn, pid: c.pid, uid: c.uid, request, reply });
                return;
            }
        };
        c.outbuf.extend_from_slice(&frame(&reply));
    }

    /// Control-only connections (no rings) idle for the idle timeout are closed;
    /// sessions with rings are not (their traffic goes through the rings).
    fn close_idle(&mut self) {
        let limit = self.server.idle_timeout;
        let idle: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.hello_done && !c.awaiting && c.last_active.elapsed() > limit)
            .map(|(id, _)| *id)
            .collect();
        for conn in idle {
            tracing::debug!(conn, "closing an idle control connection");
            self.close(conn);
        }
    }

    fn close(&mut self, conn: ConnId) {
        let Some(mut c) = self.conns.remove(&conn) else { return };
        let _ = self.registry.deregister(&mut c.stream);
        self.server.streams.remove(conn);
        if let Some(n) = self.per_uid.get_mut(&c.uid) {
            *n -= 1;
            if *n == 0 {
                self.per_uid.remove(&c.uid);
            }
        }
        self.server.mailbox.send(Msg::Disconnected { conn });
        tracing::debug!(conn, pid = c.pid, "client disconnected");
    }
}

/// Send `reply` with `fd` (`SCM_RIGHTS`): at once if nothing is pending before it (one
/// request at a time: the client waits for this answer, so it reads), finishing the
/// frame if the kernel takes it in parts; a client that left earlier answers unread
/// gets the answer without the descriptor, which it reports as a protocol error.
fn send_with_fd(conn: ConnId, c: &mut Conn, reply: &Reply, fd: std::os::fd::OwnedFd) {
    if !c.outbuf.is_empty() {
        let _ = c.stream.write(&c.outbuf).map(|n| c.outbuf.drain(..n).count());
    }
    let bytes = frame(reply);
    if !c.outbuf.is_empty() {
        tracing::info!(conn, pid = c.pid, "answers unread: a descriptor is not sent");
        c.outbuf.extend_from_slice(&bytes);
        return;
    }
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    cmsg.push(SendAncillaryMessage::ScmRights(&fds));
    match rustix::net::sendmsg(&c.stream, &[IoSlice::new(&bytes)], &mut cmsg, SendFlags::NOSIGNAL) {
        // the rest of the frame, if any, goes as the loop writes
        Ok(n) => c.outbuf.extend_from_slice(&bytes[n..]),
        Err(e) => {
            tracing::info!(conn, pid = c.pid, error = %e, "a descriptor could not be sent");
            c.outbuf.extend_from_slice(&bytes);
        }
    }
}

/// Create the client's region and doorbell, and send them with the welcome.
fn open_rings(server: &Server, conn: ConnId, c: &Conn) -> std::io::Result<()> {
    let fd = rustix::fs::memfd_create(
        format!("tessera-client-{conn}"),
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )?;
    let file = File::from(fd);
    let region =
        Region::create(&file, server.slots, server.slot_bytes).map_err(std::io::Error::other)?;
    // the client gets a writable descriptor: sealing the size means it cannot
    // truncate the region under the daemon (which would fault the daemon)
    seal_size(&file)?;
    // the client's own doorbell: whatever it does to it (clear O_NONBLOCK, drain or
    // saturate the counter) touches no other client and never blocks the core
    let bell = tessera_client::region::Doorbell::new()?;
    let fds = [file.as_fd(), bell.as_fd()];
    let welcome =
        Reply::Welcome { protocol: PROTOCOL, slots: server.slots, slot_bytes: server.slot_bytes };
    let frame = frame(&welcome);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    cmsg.push(SendAncillaryMessage::ScmRights(&fds));
    let mut sent =
        rustix::net::sendmsg(&c.stream, &[IoSlice::new(&frame)], &mut cmsg, SendFlags::NOSIGNAL)?;
    // the welcome is small and the first thing in an empty socket buffer; if the
    // kernel still takes it in parts, finish it (briefly blocking is acceptable here)
    let started = Instant::now();
    while sent < frame.len() {
        match rustix::net::send(&c.stream, &frame[sent..], SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::AGAIN) if started.elapsed() < Duration::from_millis(100) => {
                std::thread::yield_now();
            }
            Err(e) => return Err(e.into()),
        }
    }
    server.mailbox.send(Msg::Connected {
        conn,
        region: Arc::new(region),
        bell,
        pid: c.pid,
        uid: c.uid,
    });
    Ok(())
}
