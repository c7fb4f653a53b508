//! What the ledger's multi-process test binaries share.

use std::process::Child;

/// Child processes, killed and reaped when the test ends, however it ends.
pub struct Reaper(pub Vec<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
