//! Process identity: a pid and the process's start time, so that a pid recycled by the
//! kernel is never mistaken for the process that held memory under it.

use std::fs;

/// A process, as the ledger records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcessId {
    /// The pid.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat`, field 22).
    pub start_time: u64,
}

/// What `/proc/<pid>/stat` says: (state letter, start time).
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain anything, so parse
    // from the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // after ')' come field 3 (state) .. ; start time is field 22, i.e. the 20th here
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

impl ProcessId {
    /// This process.
    pub fn current() -> std::io::Result<ProcessId> {
        let pid = std::process::id();
        let (_, start_time) =
            stat(pid).ok_or_else(|| std::io::Error::other("cannot read /proc/self/stat"))?;
        Ok(ProcessId { pid, start_time })
    }

    /// Whether this process still runs: its pid exists, is not a zombie, and started at
    /// the recorded time.
    ///
    /// When `/proc` cannot tell (mounted with `hidepid`, or the process is in another pid
    /// namespace), `kill(pid, 0)` decides: a process that exists but is not ours counts
    /// as alive, since releasing a live process's memory would let the GPU be
    /// over-committed, while keeping a dead one's only delays others.
    pub fn is_alive(&self) -> bool {
        match stat(self.pid) {
            Some((state, start)) => start == self.start_time && state != 'Z' && state != 'X',
            None => match i32::try_from(self.pid).ok().and_then(rustix::process::Pid::from_raw) {
                None => false,
                Some(pid) => {
                    !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH))
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_recycled_pid_is_not() {
        let me = ProcessId::current().unwrap();
        assert!(me.is_alive());
        assert!(!ProcessId { start_time: me.start_time + 1, ..me }.is_alive());
        assert!(!ProcessId { pid: u32::MAX - 1, start_time: 0 }.is_alive());
    }

    #[test]
    fn an_exited_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = ProcessId { pid: child.id(), start_time: stat(child.id()).map_or(0, |s| s.1) };
        child.wait().unwrap();
        assert!(!id.is_alive());
    }
}
