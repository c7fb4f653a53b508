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

/// The name the test harness gives `test` of the module whose `module_path!()` is
/// `module` (`file::test`: the tests are modules of one binary), for a test that runs
/// its own binary with `--exact` to start a helper process (a wrong name would run no
/// test at all, and exit 0).
pub fn harness_name(module: &str, test: &str) -> String {
    let file = module.split_once("::").map_or(module, |(_, m)| m);
    format!("{file}::{test}")
}
