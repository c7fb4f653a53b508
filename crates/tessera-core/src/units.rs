//! Units: time in nanoseconds, memory in bytes, compute share in per-mille.
//!
//! Newtypes so that a duration is never added to a byte count by accident. The core
//! uses [`Nanos`] everywhere; `std::time::Duration` appears only at the edges.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time or a span of time, in nanoseconds since the driver's epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero: the driver's epoch, or an empty span.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest representable time; used as "never".
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// `s` seconds.
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(1_000_000_000))
    }

    /// Seconds as a float, rounded to the nearest nanosecond; negative and NaN give zero.
    pub fn from_secs_f64(s: f64) -> Nanos {
        if s.is_nan() || s <= 0.0 {
            Nanos::ZERO
        } else {
            Nanos((s * 1e9).round().min(u64::MAX as f64) as u64)
        }
    }

    /// This span in seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// This span in milliseconds.
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// `self - other`, or zero if `other` is later.
    pub fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }

    /// Conversion at the edge to `std::time::Duration`.
    pub fn to_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

impl From<Duration> for Nanos {
    fn from(d: Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Nanos {
    fn add_assign(&mut self, rhs: Nanos) {
        *self = *self + rhs;
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    /// Saturating: a span is never negative.
    fn sub(self, rhs: Nanos) -> Nanos {
        self.saturating_sub(rhs)
    }
}

/// An amount of memory in bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    /// `n` mebibytes.
    pub const fn mib(n: u64) -> Bytes {
        Bytes(n << 20)
    }
    /// `n` gibibytes.
    pub const fn gib(n: u64) -> Bytes {
        Bytes(n << 30)
    }
}

/// A share of one GPU's compute, in thousandths: 1000 is the whole GPU. MPS
/// percentages (x 10) and Alibaba's `gpu_milli` map onto it directly.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct PerMille(pub u16);

impl PerMille {
    /// The whole GPU.
    pub const WHOLE: PerMille = PerMille(1000);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Nanos(3) - Nanos(5), Nanos::ZERO);
        assert_eq!(Nanos::MAX + Nanos(1), Nanos::MAX);
        assert_eq!(Nanos::from_millis(200).as_secs_f64(), 0.2);
        assert_eq!(Nanos::from_secs_f64(-1.0), Nanos::ZERO);
        assert_eq!(Nanos::from_secs_f64(f64::NAN), Nanos::ZERO);
        assert_eq!(Nanos::from(Duration::from_millis(7)), Nanos::from_millis(7));
    }
}
