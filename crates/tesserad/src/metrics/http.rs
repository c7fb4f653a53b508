//! The metrics endpoint's HTTP side: one thread, one `mio` event loop over non-blocking
//! sockets (see the module above for the limits and why).

use super::{Listen, NodeMetrics};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Connections open at once. Past it, a new connection closes the oldest one that is
/// not about to be answered (a slow client's, most likely) rather than being refused,
/// so a flood of idle connections cannot lock scrapers out for long.
pub const MAX_CONNECTIONS: usize = 256;
/// The longest request head read (request line and headers); a longer one gets `431`.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;
/// How long a client has, from its connection, to send its request's whole head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer may make no progress (its client not reading) before the
/// connection is dropped.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between two of the core's refreshes: requests arriving meanwhile wait
/// for the next one and share it, so a flood of scrapes costs the core at most 20
/// refreshes a second and a scrape never gets values older than its request.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(50);
/// After an answer, how long and how much of what the client still sends is read and
/// dropped before closing: closing with unread bytes resets the connection, which can
/// destroy the answer before the client has read it.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 16 << 10;
/// The request headers parsed; more get `431`.
const MAX_HEADERS: usize = 64;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

const LISTENER: mio::Token = mio::Token(0);
const WAKER: mio::Token = mio::Token(1);

/// The listening socket's backlog (the kernel clamps it to `net.core.somaxconn`): a
/// burst of connections, slow clients' included, waits there for the loop rather than
/// having a scraper's SYN dropped, which would cost it a 1 s retransmission (std's and
/// mio's `bind` ask for 128).
const BACKLOG: i32 = 1024;

enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

impl Listener {
    /// A non-blocking listening socket on `listen`.
    fn bind(listen: &Listen) -> std::io::Result<Listener> {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
        match listen {
            Listen::Tcp(addr) => {
                let family =
                    if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
                let fd = rustix::net::socket_with(family, SocketType::STREAM, flags, None)?;
                // a restarted daemon binds again while its old connections are in TIME_WAIT
                rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
                rustix::net::bind(&fd, addr)?;
                rustix::net::listen(&fd, BACKLOG)?;
                Ok(Listener::Tcp(mio::net::TcpListener::from_std(fd.into())))
            }
            Listen::Unix(path) => {
                let fd =
                    rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, flags, None)?;
                rustix::net::bind(&fd, &rustix::net::SocketAddrUnix::new(path.as_path())?)?;
                rustix::net::listen(&fd, BACKLOG)?;
                Ok(Listener::Unix(mio::net::UnixListener::from_std(fd.into())))
            }
        }
    }

    /// Where it listens, as bound.
    fn address(&self) -> std::io::Result<String> {
        Ok(match self {
            Listener::Tcp(l) => l.local_addr()?.to_string(),
            Listener::Unix(l) => {
                l.local_addr()?.as_pathname().map(|p| p.display().to_string()).unwrap_or_default()
            }
        })
    }

    fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }

    fn register(&mut self, r: &mio::Registry) -> std::io::Result<()> {
        match self {
            Listener::Tcp(l) => r.register(l, LISTENER, mio::Interest::READABLE),
            Listener::Unix(l) => r.register(l, LISTENER, mio::Interest::READABLE),
        }
    }
}

enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Stream {
    fn register(&mut self, r: &mio::Registry, token: mio::Token) -> std::io::Result<()> {
        // both at once and edge-triggered: no re-registering as the phases change
        let both = mio::Interest::READABLE | mio::Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => r.register(s, token, both),
            Stream::Unix(s) => r.register(s, token, both),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::Read;
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    fn write(&mut self, head: &[u8], body: &[u8]) -> std::io::Result<usize> {
        use std::io::{IoSlice, Write};
        let bufs = [IoSlice::new(head), IoSlice::new(body)];
        match self {
            Stream::Tcp(s) => s.write_vectored(&bufs),
            Stream::Unix(s) => s.write_vectored(&bufs),
        }
    }

    fn shutdown_write(&self) {
        let how = std::net::Shutdown::Write;
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        };
    }
}

/// What a request head asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    NotAllowed,
    Bad,
    TooLarge,
}

/// What the head read so far asks for; `None` while it is incomplete.
fn route(head: &[u8]) -> Option<Route> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Partial) => {
            (head.len() >= MAX_REQUEST_HEAD).then_some(Route::TooLarge)
        }
        Err(httparse::Error::TooManyHeaders) => Some(Route::TooLarge),
        Err(_) => Some(Route::Bad),
        Ok(httparse::Status::Complete(_)) => Some(match (request.method, request.path) {
            (Some("GET"), Some(p)) if p == "/metrics" || p.starts_with("/metrics?") => {
                Route::Metrics
            }
            (Some("GET"), _) => Route::NotFound,
            _ => Route::NotAllowed,
        }),
    }
}

/// Where a connection is.
enum Phase {
    /// Reading its request's head (at most [`MAX_REQUEST_HEAD`]).
    Reading(Vec<u8>),
    /// Its request wants the metrics: waiting for the next refresh.
    Waiting,
    /// Writing its answer: the head, then the body (shared by every answer of a refresh);
    /// `at` counts the bytes written.
    Writing { head: Vec<u8>, body: std::sync::Arc<[u8]>, at: usize },
    /// Answered and shut for writing: dropping what the client still sends (so many
    /// bytes so far) until it closes.
    Lingering(usize),
}

/// One request per connection, then close: a client pipelining requests gets one
/// answer, and no connection holds more than its head's bytes and its answer's head.
struct Conn {
    stream: Stream,
    accepted: Instant,
    /// When it is dropped unless it makes progress (not while `Waiting`).
    deadline: Instant,
    phase: Phase,
}

/// The phase of an answer.
fn answer(status: &str, extra: &str, content_type: &str, body: std::sync::Arc<[u8]>) -> Phase {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra}\r\n",
        body.len()
    );
    Phase::Writing { head: head.into_bytes(), body, at: 0 }
}

fn text_answer(status: &str, extra: &str, body: &str) -> Phase {
    answer(status, extra, TEXT, std::sync::Arc::from(body.as_bytes()))
}

impl Conn {
    /// Read, write or drop bytes as far as the socket allows (bounded: a head, an
    /// answer, [`LINGER_BYTES`]); `false`: close it.
    fn advance(&mut self, now: Instant) -> bool {
        use std::io::ErrorKind::{Interrupted, WouldBlock};
        loop {
            let next = match &mut self.phase {
                Phase::Reading(head) => {
                    let old = head.len();
                    head.resize(MAX_REQUEST_HEAD, 0);
                    let read = self.stream.read(&mut head[old..]);
                    head.truncate(old + *read.as_ref().unwrap_or(&0));
                    match read {
                        Ok(0) => return false, // gone before its request ended
                        Ok(_) => match route(head) {
                            None => continue,
                            Some(Route::Metrics) => Phase::Waiting,
                            Some(Route::NotFound) => {
                                text_answer("404 Not Found", "", "see /metrics\n")
                            }
                            Some(Route::NotAllowed) => text_answer(
                                "405 Method Not Allowed",
                                "Allow: GET\r\n",
                                "only GET\n",
                            ),
                            Some(Route::Bad) => text_answer("400 Bad Request", "", "bad request\n"),
                            Some(Route::TooLarge) => text_answer(
                                "431 Request Header Fields Too Large",
                                "",
                                "request head too large\n",
                            ),
                        },
                        Err(e) if e.kind() == WouldBlock => return true,
                        Err(e) if e.kind() == Interrupted => continue,
                        Err(_) => return false,
                    }
                }
                Phase::Waiting => return true,
                Phase::Writing { head, body, at } => {
                    if *at == head.len() + body.len() {
                        self.stream.shutdown_write();
                        self.deadline = now + LINGER;
                        Phase::Lingering(0)
                    } else {
                        let (h, b) = match head.get(*at..) {
                            Some(h) => (h, &body[..]),
                            None => (&[][..], &body[*at - head.len()..]),
                        };
                        match self.stream.write(h, b) {
                            Ok(0) => return false,
                            Ok(n) => {
                                *at += n;
                                self.deadline = now + WRITE_STALL_TIMEOUT;
                                continue;
                            }
                            Err(e) if e.kind() == WouldBlock => return true,
                            Err(e) if e.kind() == Interrupted => continue,
                            Err(_) => return false,
                        }
                    }
                }
                Phase::Lingering(dropped) => {
                    let mut sink = [0u8; 4096];
                    match self.stream.read(&mut sink) {
                        Ok(0) => return false,
                        Ok(n) => {
                            *dropped += n;
                            if *dropped > LINGER_BYTES {
                                return false;
                            }
                            continue;
                        }
                        Err(e) if e.kind() == WouldBlock => return true,
                        Err(e) if e.kind() == Interrupted => continue,
                        Err(_) => return false,
                    }
                }
            };
            if matches!(next, Phase::Writing { .. }) {
                self.deadline = now + WRITE_STALL_TIMEOUT;
            }
            self.phase = next;
        }
    }
}

/// The endpoint's event loop: one thread, non-blocking sockets, so no client's socket
/// can hold up another's, and its threads do not grow with its clients.
struct Endpoint {
    poll: mio::Poll,
    listener: Listener,
    conns: std::collections::HashMap<mio::Token, Conn>,
    next_token: usize,
    /// When to accept again: the listener became readable, or a pass stopped short.
    accept_at: Option<Instant>,
    accept_failing: bool,
    last_refresh: Option<Instant>,
    metrics: std::sync::Arc<NodeMetrics>,
    refresh: Box<dyn Fn() -> bool + Send>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Endpoint {
    fn run(mut self) {
        let mut events = mio::Events::with_capacity(256);
        while !self.stop.load(Ordering::Relaxed) {
            let timeout = self.timeout(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %e, "the metrics endpoint cannot wait on its sockets: it stops");
                return;
            }
            let now = Instant::now();
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_at = Some(now),
                    WAKER => {}
                    token => {
                        if let Some(c) = self.conns.get_mut(&token)
                            && !c.advance(now)
                        {
                            self.conns.remove(&token);
                        }
                    }
                }
            }
            if self.accept_at.is_some_and(|at| at <= now) {
                self.accept(now);
            }
            self.answer_waiting();
            self.expire(Instant::now());
        }
    }

    /// How long the next poll may sleep: to the earliest deadline, refresh or retry.
    fn timeout(&self, now: Instant) -> Option<Duration> {
        let refresh_at = self.last_refresh.map_or(now, |at| at + REFRESH_INTERVAL);
        self.conns
            .values()
            .map(|c| if matches!(c.phase, Phase::Waiting) { refresh_at } else { c.deadline })
            .chain(self.accept_at)
            .min()
            .map(|at| at.saturating_duration_since(now))
    }

    fn accept(&mut self, now: Instant) {
        self.accept_at = None;
        // at most a cap's worth a pass, so that a flood of connections cannot keep the
        // loop from the connections it has; the rest on the next pass
        for _ in 0..MAX_CONNECTIONS {
            let mut stream = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.accept_failing = false;
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // out of descriptors, say: the listener will not say again that
                    // connections wait, so try again shortly rather than spin
                    if !std::mem::replace(&mut self.accept_failing, true) {
                        tracing::warn!(error = %e, "the metrics endpoint cannot accept connections");
                    }
                    self.accept_at = Some(now + Duration::from_millis(100));
                    return;
                }
            };
            if self.conns.len() >= MAX_CONNECTIONS && !self.evict() {
                continue; // dropped: closed at once
            }
            let token = mio::Token(self.next_token);
            self.next_token = self.next_token.wrapping_add(1).max(2);
            if let Err(e) = stream.register(self.poll.registry(), token) {
                tracing::debug!(error = %e, "cannot watch a metrics connection");
                continue;
            }
            let conn = Conn {
                stream,
                accepted: now,
                deadline: now + REQUEST_TIMEOUT,
                phase: Phase::Reading(Vec::new()),
            };
            self.conns.insert(token, conn);
        }
        self.accept_at = Some(now);
    }

    /// Close the oldest connection not waiting for the next refresh; `false`: none.
    fn evict(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .filter(|(_, c)| !matches!(c.phase, Phase::Waiting))
            .min_by_key(|(_, c)| c.accepted)
            .map(|(t, _)| *t);
        let Some(token) = oldest else { return false };
        self.conns.remove(&token);
        tracing::debug!(max = MAX_CONNECTIONS, "metrics connections at the cap: closed the oldest");
        true
    }

    /// If requests wait and the core was not asked within [`REFRESH_INTERVAL`], ask it
    /// once, encode once, and start every waiting answer.
    fn answer_waiting(&mut self) {
        if !self.conns.values().any(|c| matches!(c.phase, Phase::Waiting))
            || self.last_refresh.is_some_and(|at| at.elapsed() < REFRESH_INTERVAL)
        {
            return;
        }
        // synchronous, bounded by SCRAPE_TIMEOUT: meanwhile the sockets wait in the
        // kernel, none of them can hold this up
        let answered = (self.refresh)();
        let (status, content_type, body): (_, _, std::sync::Arc<[u8]>) = if answered {
            ("200 OK", OPENMETRICS, self.metrics.encode().into_bytes().into())
        } else {
            ("503 Service Unavailable", TEXT, (&b"the daemon's core did not answer\n"[..]).into())
        };
        let now = Instant::now();
        self.last_refresh = Some(now);
        self.conns.retain(|_, c| {
            if !matches!(c.phase, Phase::Waiting) {
                return true;
            }
            c.phase = answer(status, "", content_type, body.clone());
            c.deadline = now + WRITE_STALL_TIMEOUT;
            c.advance(now)
        });
    }

    /// Drop the connections past their deadline (slow to ask, not reading).
    fn expire(&mut self, now: Instant) {
        let before = self.conns.len();
        self.conns.retain(|_, c| matches!(c.phase, Phase::Waiting) || c.deadline > now);
        if self.conns.len() < before {
            tracing::debug!(dropped = before - self.conns.len(), "metrics connections timed out");
        }
    }
}

/// The HTTP endpoint: a thread serving `GET /metrics` from an event loop (see the
/// module's documentation).
pub struct MetricsServer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    waker: std::sync::Arc<mio::Waker>,
    thread: Option<std::thread::JoinHandle<()>>,
    socket: Option<std::path::PathBuf>,
    /// Where it listens, as bound (the port chosen when 0 was asked).
    pub address: String,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer").field("address", &self.address).finish()
    }
}

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {listen}: {message}")]
pub struct MetricsError {
    /// Where it was to listen.
    pub listen: String,
    /// Why it cannot.
    pub message: String,
}

impl MetricsServer {
    /// Listen on `listen`; scrapes call `refresh` (which asks the core to bring the
    /// metrics up to date, `false` if it did not answer in time), then encode. Requests
    /// waiting at once share one refresh, and refreshes are [`REFRESH_INTERVAL`] apart.
    pub fn start(
        listen: &Listen,
        metrics: std::sync::Arc<NodeMetrics>,
        refresh: impl Fn() -> bool + Send + 'static,
    ) -> Result<MetricsServer, MetricsError> {
        let err = |e: &dyn std::fmt::Display| MetricsError {
            listen: format!("{listen:?}"),
            message: e.to_string(),
        };
        if let Listen::Unix(path) = listen
            && std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
        {
            // a previous daemon's socket
            let _ = std::fs::remove_file(path);
        }
        let mut listener = Listener::bind(listen).map_err(|e| err(&e))?;
        let address = listener.address().map_err(|e| err(&e))?;
        let socket = match listen {
            Listen::Unix(path) => Some(path.clone()),
            Listen::Tcp(_) => None,
        };
        let poll = mio::Poll::new().map_err(|e| err(&e))?;
        listener.register(poll.registry()).map_err(|e| err(&e))?;
        let waker =
            std::sync::Arc::new(mio::Waker::new(poll.registry(), WAKER).map_err(|e| err(&e))?);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let endpoint = Endpoint {
            poll,
            listener,
            conns: std::collections::HashMap::new(),
            next_token: 2,
            accept_at: None,
            accept_failing: false,
            last_refresh: None,
            metrics,
            refresh: Box::new(refresh),
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || endpoint.run())
            .map_err(|e| err(&e))?;
        tracing::info!(%address, "metrics endpoint listening");
        Ok(MetricsServer { stop, waker, thread: Some(thread), socket, address })
    }

    /// Stop serving (open connections are closed).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Err(e) = self.waker.wake() {
            tracing::warn!(error = %e, "cannot wake the metrics endpoint to stop it");
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(s) = self.socket.take() {
            let _ = std::fs::remove_file(s);
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
