//! The doorbell: how clients (and the daemon's own threads) wake a sleeping daemon.

use std::time::Duration;

/// How clients (and the daemon's own threads) wake a sleeping daemon: an eventfd. A
/// client writes to it only when its own region says the daemon sleeps, so a busy
/// daemon costs clients no system call; and a client can only ever cause spurious
/// wake-ups, never suppress another client's.
#[derive(Debug)]
pub struct Doorbell {
    fd: std::os::fd::OwnedFd,
}

impl Doorbell {
    /// A new doorbell (daemon).
    pub fn new() -> std::io::Result<Doorbell> {
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        Ok(Doorbell { fd })
    }

    /// The doorbell received from the daemon (client).
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Doorbell {
        Doorbell { fd }
    }

    /// Its descriptor, to pass to clients.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Wake the daemon.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Daemon: reset a doorbell no client holds (a non-blocking read; on a client's,
    /// whose flags the client controls, it could block).
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut buf);
    }

    /// Sleep until rung or `timeout`, then reset the bell (only for a doorbell no one
    /// else holds: see [`Doorbell::drain`]).
    pub fn wait(&self, timeout: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [rustix::event::PollFd::new(&self.fd, rustix::event::PollFlags::IN)];
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut buf);
    }
}
