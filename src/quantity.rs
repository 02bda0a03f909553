//! Exact Kubernetes resource quantities, parsed by the grammar of apimachinery's
//! `resource.ParseQuantity`, so that `1Gi` equals `1024Mi` and comparisons never go through a
//! float (storage sizes near 2^63 bytes must compare exactly). Values are held in nano-units;
//! like upstream, anything finer is rounded up to 1n ("if you want some resources, you should
//! get some resources").

use std::fmt;

/// A parsed quantity, stored as a count of nano-units (10^-9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

/// Errors with upstream's wording (`resource.ErrFormatWrong`, `ErrNumeric`, `ErrSuffix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    FormatWrong,
    #[error("unable to parse quantity's numeric part")]
    Numeric,
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

const NANO_SCALE: i32 = 9;
/// Longest quantity string we accept; upstream has no limit, but nothing real comes near it and
/// it bounds the work a hostile value can cause.
const MAX_LEN: usize = 128;

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parses a quantity string the way the apiserver does.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        if s.is_empty() || s.len() > MAX_LEN {
            return Err(QuantityError::FormatWrong);
        }
        let parts = split(s)?;
        let (base2_exp, base10_exp) = interpret_suffix(parts.suffix)?;
        let digits = format!("{}{}", parts.num, parts.denom);
        let digits = digits.trim_start_matches('0');
        let scale10 = i64::from(base10_exp) - parts.denom.len() as i64 + i64::from(NANO_SCALE);
        let magnitude = scaled_value(digits, scale10, base2_exp);
        Ok(Quantity {
            nanos: if parts.positive {
                magnitude
            } else {
                -magnitude
            },
        })
    }

    /// Builds a quantity from a whole number of units (bytes, for storage).
    pub fn from_units(units: i128) -> Self {
        Quantity {
            nanos: units.saturating_mul(1_000_000_000),
        }
    }

    /// The value in whole units, rounded up (a storage size in bytes).
    pub fn units_ceil(&self) -> i128 {
        let q = self.nanos / 1_000_000_000;
        if self.nanos % 1_000_000_000 > 0 {
            q + 1
        } else {
            q
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// Canonical form for whole numbers of units: the largest binary suffix that divides the
    /// value exactly, else plain decimal units; fractional values in nano-units.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % 1_000_000_000 != 0 {
            return write!(f, "{}n", self.nanos);
        }
        let units = self.nanos / 1_000_000_000;
        if units == 0 {
            return f.write_str("0");
        }
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i128 << shift;
            if units % unit == 0 {
                return write!(f, "{}{suffix}", units / unit);
            }
        }
        write!(f, "{units}")
    }
}

struct Parts<'a> {
    positive: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// `parseQuantityString`: sign, integer digits, fraction digits and suffix.
fn split(s: &str) -> Result<Parts<'_>, QuantityError> {
    let bytes = s.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match bytes.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let digits_end = |from: usize| {
        bytes[from..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |p| from + p)
    };
    let num_end = digits_end(pos);
    let num = &s[pos..num_end];
    pos = num_end;
    let mut denom = "";
    if bytes.get(pos) == Some(&b'.') {
        let denom_end = digits_end(pos + 1);
        denom = &s[pos + 1..denom_end];
        pos = denom_end;
    }
    let suffix_start = pos;
    while pos < bytes.len() && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < bytes.len() && (bytes[pos] == b'-' || bytes[pos] == b'+') {
        pos += 1;
    }
    if digits_end(pos) != bytes.len() {
        return Err(QuantityError::FormatWrong);
    }
    Ok(Parts {
        positive,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// `suffixHandler.interpret`: returns (power of two, power of ten).
fn interpret_suffix(suffix: &str) -> Result<(u32, i32), QuantityError> {
    let exp = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => {
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or(QuantityError::Suffix)?;
            let e: i32 = rest.parse().map_err(|_| QuantityError::Suffix)?;
            (0, e)
        }
    };
    Ok(exp)
}

/// `digits × 10^scale10 × 2^base2`, rounded up, saturating at the i128 bounds.
fn scaled_value(digits: &str, scale10: i64, base2: u32) -> i128 {
    if digits.is_empty() {
        return 0;
    }
    // More than 38 significant digits cannot be held; such a value is absurd for any resource.
    let Ok(mut value) = digits.parse::<i128>() else {
        return i128::MAX;
    };
    value = value.checked_mul(1i128 << base2).unwrap_or(i128::MAX);
    if scale10 >= 0 {
        let Ok(scale) = u32::try_from(scale10) else {
            return i128::MAX;
        };
        return 10i128
            .checked_pow(scale)
            .and_then(|m| value.checked_mul(m))
            .unwrap_or(i128::MAX);
    }
    let Some(divisor) = u32::try_from(-scale10)
        .ok()
        .and_then(|s| 10i128.checked_pow(s))
    else {
        // Smaller than one nano-unit: round up to it.
        return 1;
    };
    let q = value / divisor;
    if value % divisor != 0 { q + 1 } else { q }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn binary_and_decimal_forms_compare_exactly() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("1G"), q("1000M"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("1E3"), q("1000"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q(".5"), q("500m"));
        assert_eq!(q("+2Ki"), q("2048"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("-1") < Quantity::ZERO);
        assert!(q("8Ei") > q("9223372036854775807"));
    }

    #[test]
    fn finer_than_nano_rounds_up() {
        assert_eq!(q("0.1n"), q("1n"));
        assert_eq!(q("1e-12"), q("1n"));
        assert_eq!(q("0"), Quantity::ZERO);
    }

    #[test]
    fn malformed_quantities_are_rejected_with_upstream_messages() {
        for bad in ["", "abc", "1Gb", "1 Gi", "1e", "1x", "--1", "1.2.3", "1Gi1"] {
            let err = Quantity::parse(bad).expect_err(bad);
            assert!(
                err.to_string().starts_with("quantities must match")
                    || err.to_string().contains("suffix"),
                "{bad}: {err}"
            );
        }
        assert_eq!(Quantity::parse("1e99999999999"), Err(QuantityError::Suffix));
        assert!(Quantity::parse(&"9".repeat(200)).is_err());
    }

    #[test]
    fn absurd_values_saturate_instead_of_overflowing() {
        assert_eq!(q("1e40").nanos, i128::MAX);
        assert_eq!(q(&"9".repeat(60)).nanos, i128::MAX);
        assert_eq!(q("1e-400"), q("1n"));
    }

    #[test]
    fn display_is_canonical() {
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("1G").to_string(), "1000000000");
        assert_eq!(q("3Gi").saturating_add(q("1Gi")).to_string(), "4Gi");
        assert_eq!(q("0").to_string(), "0");
        assert_eq!(q("1536Mi").units_ceil(), 1536 * 1024 * 1024);
    }
}
