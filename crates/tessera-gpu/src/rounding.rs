//! Rounding a non-negative time to a whole number, exactly as `f64::round` and
//! `f64::ceil` followed by `as u64` do, without their library call: on the baseline
//! x86-64 target (no SSE4.1) both compile to a call into the soft-float `libm`, which
//! was 2% of `tessera sim flexy`'s profile and a tenth of a task's instructions in the
//! simulator's exclusive path (issue 55). The truncating conversion is one instruction,
//! and below 2^52 the fraction it leaves is computed exactly, so the answers are the
//! same to the last bit; anything else (negative, NaN, huge) takes the library's path.

/// 2^52: at and above it every `f64` is a whole number.
const WHOLE_FROM: f64 = 4_503_599_627_370_496.0;

/// `x.round() as u64`, exactly (halves away from zero).
#[inline]
pub fn round_u64(x: f64) -> u64 {
    if (0.0..WHOLE_FROM).contains(&x) {
        // through i64, whose conversions are single instructions (u64's are not)
        let t = x as i64;
        // t <= x < t + 1 <= 2t (or t = 0): x - t is exact (Sterbenz)
        (t + i64::from(x - t as f64 >= 0.5)) as u64
    } else {
        x.round() as u64
    }
}

/// `x.ceil() as u64`, exactly.
#[inline]
pub fn ceil_u64(x: f64) -> u64 {
    if (0.0..WHOLE_FROM).contains(&x) {
        let t = x as i64;
        (t + i64::from(x > t as f64)) as u64
    } else {
        x.ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(x: f64) {
        assert_eq!(round_u64(x), x.round() as u64, "round of {x:e} ({:#x})", x.to_bits());
        assert_eq!(ceil_u64(x), x.ceil() as u64, "ceil of {x:e} ({:#x})", x.to_bits());
    }

    #[test]
    fn edges_answer_as_the_library_does() {
        let halves: [f64; 5] = [0.5, 1.5, 2.5, 1e6 + 0.5, 4_503_599_627_370_495.5];
        for h in halves {
            for x in [h, f64::from_bits(h.to_bits() - 1), f64::from_bits(h.to_bits() + 1)] {
                check(x);
            }
        }
        for x in [
            0.0,
            -0.0,
            0.49999999999999994,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            WHOLE_FROM,
            WHOLE_FROM - 0.5,
            WHOLE_FROM * 2.0 + 2.0,
            1.8446744073709552e19,
            1e300,
            -0.4,
            -0.6,
            -3.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ] {
            check(x);
        }
    }

    proptest! {
        /// Any `f64` at all, and values near whole numbers and halves.
        #[test]
        fn answers_as_the_library_does(bits in any::<u64>(), n in 0u64..1 << 53, ulps in -3i64..=3) {
            check(f64::from_bits(bits));
            for base in [n as f64, n as f64 + 0.5] {
                check(f64::from_bits((base.to_bits() as i64 + ulps).max(0) as u64));
            }
        }
    }
}
