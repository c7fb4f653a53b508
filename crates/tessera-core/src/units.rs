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

/// A size that is not one: what `Bytes::from_str` accepts is a whole number with an
/// optional binary unit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a size: write a whole number with an optional binary unit (4GiB, 4096MiB, 4G, 512K, 1048576)"
)]
pub struct SizeError(pub String);

/// One size syntax everywhere tessera reads a size (flags, environment, files): a
/// whole number of bytes, or with a binary unit — `K`/`KiB`, `M`/`MiB`, `G`/`GiB`,
/// `T`/`TiB`, any case, powers of 1024. Decimal units (`GB`, `MB`) are refused rather
/// than guessed.
impl std::str::FromStr for Bytes {
    type Err = SizeError;
    fn from_str(s: &str) -> Result<Bytes, SizeError> {
        let bad = || SizeError(s.to_string());
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let n: u64 = number.parse().map_err(|_| bad())?;
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kib" => 10,
            "m" | "mib" => 20,
            "g" | "gib" => 30,
            "t" | "tib" => 40,
            _ => return Err(bad()),
        };
        n.checked_mul(1u64 << shift).map(Bytes).ok_or_else(bad)
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
    fn sizes_have_one_syntax() {
        for (text, bytes) in [
            ("4GiB", 4u64 << 30),
            ("4096MiB", 4 << 30),
            ("4G", 4 << 30),
            ("4g", 4 << 30),
            (" 512K ", 512 << 10),
            ("1048576", 1 << 20),
            ("2 TiB", 2 << 40),
        ] {
            assert_eq!(text.parse::<Bytes>(), Ok(Bytes(bytes)), "{text}");
        }
        for bad in ["4GB", "4MB", "lots", "", "-1G", "1.5G", "18446744073709551615T"] {
            let e = bad.parse::<Bytes>().unwrap_err();
            assert!(e.to_string().contains("4GiB"), "{bad}: {e}");
        }
    }

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
