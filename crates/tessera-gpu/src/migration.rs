//! What moving a tenant's context from one GPU to another costs: a pause (stopping its
//! work, tearing down and setting up the context) plus its device memory copied over
//! PCIe. While it moves its work does not progress on either GPU; what it had left is
//! carried over exactly (see [`crate::sharing::SharedGpu::remove`]).

use serde::{Deserialize, Serialize};

/// Parameters of a migration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationCost {
    /// Fixed pause, ns.
    pub pause_ns: u64,
    /// Copy bandwidth, bytes per second.
    pub bytes_per_s: f64,
}

impl MigrationCost {
    /// PCIe 3.0 x16 moves about 12 GB/s in practice (of 15.75 GB/s theoretical); the
    /// pause is an assumption (context set-up is tens of milliseconds), to be
    /// calibrated against DCUDA §3.4's measurements when its experiments are built.
    pub const PCIE3: MigrationCost = MigrationCost { pause_ns: 50_000_000, bytes_per_s: 12e9 };

    /// How long moving `bytes` takes, ns.
    pub fn duration(&self, bytes: u64) -> u64 {
        let copy = if self.bytes_per_s > 0.0 { bytes as f64 / self.bytes_per_s * 1e9 } else { 0.0 };
        self.pause_ns + copy.ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migration_costs_its_pause_and_its_copy() {
        let m = MigrationCost { pause_ns: 1_000, bytes_per_s: 1e9 };
        assert_eq!(m.duration(0), 1_000);
        assert_eq!(m.duration(2_000_000_000), 1_000 + 2_000_000_000);
    }
}
