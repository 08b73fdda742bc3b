//! Kubernetes resource quantities (`k8s.io/apimachinery/pkg/api/resource`): parsed as
//! `ParseQuantity` parses them, added and compared exactly, and printed in the canonical form
//! `Quantity.String()` prints (`1536Mi`, `500m`, `2k`), which is what kube-apiserver stores and
//! quotes in messages.
//!
//! A value is kept in nano-units (`1n`), as Go rounds every parsed value up to that precision,
//! and saturates at Go's largest quantity, 2⁶³-1 units.

use std::cmp::Ordering;
use std::fmt;

/// How a quantity prints (`resource.Format`): the format of the suffix it was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `1e3`, `5E-3`.
    DecimalExponent,
    /// `Ki`, `Mi`, ... `Ei`.
    BinarySI,
    /// no suffix, `n`, `u`, `m`, `k`, `M`, ... `E`.
    DecimalSI,
}

/// Why a string is not a quantity, worded as `k8s.io/apimachinery/pkg/api/resource`'s errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityError {
    /// `ErrFormatWrong`.
    FormatWrong,
    /// `ErrSuffix`.
    Suffix,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::FormatWrong => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Suffix => "unable to parse quantity's suffix",
        })
    }
}

impl std::error::Error for QuantityError {}

const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// Go's `maxAllowed`: 2⁶³-1 units, in nano-units.
const MAX_NANOS: i128 = (i64::MAX as i128) * NANOS_PER_UNIT;
/// Significant digits kept while parsing (the rest only decides rounding up).
const MAX_DIGITS: usize = 36;

/// A resource quantity: an exact value in nano-units and the format it prints in.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    /// Equal values are equal quantities whatever their format (`1Ki` == `1024`), as `Cmp`.
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Default for Quantity {
    /// Zero, as `resource.Quantity{Format: DecimalSI}`.
    fn default() -> Self {
        Quantity { nanos: 0, format: Format::DecimalSI }
    }
}

impl Quantity {
    /// `resource.NewQuantity(n, DecimalSI)`.
    pub fn from_int(n: i64) -> Quantity {
        Quantity { nanos: n as i128 * NANOS_PER_UNIT, format: Format::DecimalSI }
    }

    /// `resource.ParseQuantity`: no surrounding whitespace, a sign, digits with at most one
    /// `.`, and a suffix (`m`, `Ki`, `e3`, ...). Values finer than `1n` are rounded up (away from
    /// zero), larger ones than 2⁶³-1 are clamped.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::FormatWrong);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        let negative = match b[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };
        let digits_end = |from: usize| from + b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
        let int_end = digits_end(pos);
        let int = &s[pos..int_end];
        pos = int_end;
        let mut frac = "";
        if b.get(pos) == Some(&b'.') {
            let frac_end = digits_end(pos + 1);
            frac = &s[pos + 1..frac_end];
            pos = frac_end;
        }
        if int.is_empty() && frac.is_empty() {
            // Go reads `m` or `.` as 0; the documented form needs a digit.
            return Err(QuantityError::FormatWrong);
        }
        // The suffix: letters of the SI and binary prefixes, then an optional signed exponent.
        let suffix_start = pos;
        pos += b[pos..].iter().take_while(|c| b"eEinumkKMGTP".contains(c)).count();
        if matches!(b.get(pos), Some(b'-' | b'+')) {
            pos += 1;
        }
        if digits_end(pos) != b.len() {
            return Err(QuantityError::FormatWrong);
        }
        let (exp10, exp2, mut format) = interpret_suffix(&s[suffix_start..]).ok_or(QuantityError::Suffix)?;
        let nanos = to_nanos(int, frac, exp10, exp2);
        // A binary quantity below 1 prints as a decimal one ("This avoids rounding").
        if format == Format::BinarySI && nanos > 0 && nanos < NANOS_PER_UNIT {
            format = Format::DecimalSI;
        }
        if nanos == 0 {
            format = Format::DecimalSI;
        }
        Ok(Quantity { nanos: if negative { -nanos } else { nanos }, format })
    }

    /// The format this quantity prints in.
    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// `MilliValue()`: thousandths of a unit, rounded up (away from zero).
    pub fn milli_value(&self) -> i128 {
        let m = (self.nanos.abs() + 999_999) / 1_000_000;
        if self.nanos < 0 { -m } else { m }
    }

    /// `q.Add(y)`: a zero quantity takes the other's format.
    pub fn add(&mut self, other: &Quantity) {
        if self.nanos == 0 {
            self.format = other.format;
        }
        self.nanos = self.nanos.saturating_add(other.nanos);
    }

    /// `q.Sub(y)`: a zero quantity takes the other's format.
    pub fn sub(&mut self, other: &Quantity) {
        if self.nanos == 0 {
            self.format = other.format;
        }
        self.nanos = self.nanos.saturating_sub(other.nanos);
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(s)
    }
}

/// (power of ten, power of two, format) of a suffix (`quantitySuffixer.interpret`).
fn interpret_suffix(suffix: &str) -> Option<(i64, u32, Format)> {
    let decimal = |e: i64| Some((e, 0, Format::DecimalSI));
    let binary = |e: u32| Some((0, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        s if s.len() > 1 && s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().ok()?;
            Some((e as i64, 0, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// `int.frac · 10^exp10 · 2^exp2` in nano-units, rounded up, clamped to [`MAX_NANOS`].
fn to_nanos(int: &str, frac: &str, exp10: i64, exp2: u32) -> i128 {
    let all = format!("{int}{frac}");
    let digits = all.trim_start_matches('0');
    if digits.is_empty() {
        return 0;
    }
    let mut e = exp10 - frac.len() as i64 + 9;
    let (kept, dropped) = digits.split_at(digits.len().min(MAX_DIGITS));
    // A dropped digit that is not 0 makes the value round up if it ends below a nano-unit.
    let mut sticky = dropped.bytes().any(|c| c != b'0');
    e += dropped.len() as i64;
    let mut m: u128 = kept.parse().unwrap_or(0);
    let pow2 = 1u128 << exp2;
    loop {
        match m.checked_mul(pow2) {
            Some(x) => {
                m = x;
                break;
            }
            None => {
                sticky |= !m.is_multiple_of(10);
                m /= 10;
                e += 1;
            }
        }
    }
    let max = MAX_NANOS as u128;
    let v = if e >= 0 {
        let mut v = m;
        for _ in 0..e {
            v = match v.checked_mul(10) {
                Some(x) if x <= max => x,
                _ => return MAX_NANOS,
            };
        }
        v
    } else {
        let Some(div) = u32::try_from(-e).ok().and_then(|e| 10u128.checked_pow(e)) else {
            return 1;
        };
        let q = m / div;
        if !m.is_multiple_of(div) || sticky { q + 1 } else { q }
    };
    v.min(max) as i128
}

impl fmt::Display for Quantity {
    /// `Quantity.String()`: the canonical form (`CanonicalizeBytes`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let nanos_per_unit = NANOS_PER_UNIT as u128;
        let binary =
            self.format == Format::BinarySI && abs >= 1024 * nanos_per_unit && abs.is_multiple_of(nanos_per_unit);
        if binary {
            let mut v = abs / nanos_per_unit;
            let mut k = 0;
            while v >= 1024 && v.is_multiple_of(1024) {
                v /= 1024;
                k += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].get(k).copied().unwrap_or_default();
            return write!(f, "{sign}{v}{suffix}");
        }
        let (mut m, mut e) = (abs, -9i64);
        while m >= 10 && m.is_multiple_of(10) {
            m /= 10;
            e += 1;
        }
        // The exponent comes down to a multiple of 3 (Go's `%` keeps the sign, as Rust's).
        match e % 3 {
            1 | -2 => {
                m *= 10;
                e -= 1;
            }
            2 | -1 => {
                m *= 100;
                e -= 2;
            }
            _ => {}
        }
        if self.format == Format::DecimalExponent {
            return if e == 0 { write!(f, "{sign}{m}") } else { write!(f, "{sign}{m}e{e}") };
        }
        let suffix = match e {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => return write!(f, "{sign}{m}e{e}"),
        };
        write!(f, "{sign}{m}{suffix}")
    }
}

/// A quantity (`100m`, `2`, `1.5Gi`, `500Mi`, `1e3`, `2k`) in thousandths of its unit, rounded
/// up: `100m` cpu is 100, `1Ki` is 1 024 000. `None` when malformed; surrounding whitespace is
/// ignored.
pub fn parse_quantity(s: &str) -> Option<i128> {
    Quantity::parse(s.trim()).ok().map(|q| q.milli_value())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_print_in_kubernetes_canonical_form() {
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("000", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("1500000", "1500k"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("1025", "1025"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("1.5e3", "1500"),
            ("2e-3", "2e-3"),
            ("1u", "1u"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("1E", "1E"),
            ("-1", "-1"),
            ("+3", "3"),
            ("-1.5Gi", "-1536Mi"),
            ("100M", "100M"),
            ("12e9", "12e9"),
            ("99999999999999999999999999", "9223372036854775807"),
        ];
        for (input, want) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.to_string(), want, "{input}");
        }
    }

    #[test]
    fn malformed_quantities_are_rejected_with_kubernetes_errors() {
        let regex = QuantityError::FormatWrong;
        for (input, want) in [
            ("", regex),
            ("m", regex),
            ("1.2.3", regex),
            ("1x", regex),
            ("12Kb", regex),
            (" 1", regex),
            ("1 ", regex),
            ("1e", QuantityError::Suffix),
            ("1K", QuantityError::Suffix),
            ("1i", QuantityError::Suffix),
            ("1Mm", QuantityError::Suffix),
        ] {
            assert_eq!(Quantity::parse(input), Err(want), "{input:?}");
        }
        assert_eq!(
            QuantityError::FormatWrong.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn a_sum_takes_the_format_of_its_first_non_zero_term() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let sum = |terms: &[&str]| {
            let mut total = Quantity::default();
            for t in terms {
                total.add(&q(t));
            }
            total.to_string()
        };
        assert_eq!(sum(&["0", "1Gi", "512Mi"]), "1536Mi");
        assert_eq!(sum(&["500m", "500m"]), "1");
        assert_eq!(sum(&["1G", "1Gi"]), "2073741824");
        assert_eq!(sum(&["1Gi", "1G"]), "2073741824");
        assert_eq!(sum(&["1Ki", "1Ki"]), "2Ki");
        let mut left = q("1536Mi");
        left.sub(&q("1Gi"));
        assert_eq!(left.to_string(), "512Mi");
        assert!(q("1Ki") == q("1024") && q("2") > q("1999m"));
    }

    #[test]
    fn thousandths_are_rounded_up() {
        let cases: &[(&str, Option<i128>)] = &[
            ("100m", Some(100)),
            ("2", Some(2000)),
            (".5", Some(500)),
            ("1Ki", Some(1024 * 1000)),
            ("1.5Gi", Some(1536 * 1024 * 1024 * 1000)),
            ("2e-3", Some(2)),
            ("1E", Some(1_000_000_000_000_000_000_000)),
            ("1Ei", Some((1i128 << 60) * 1000)),
            ("1u", Some(1)),
            ("1n", Some(1)),
            ("-1", Some(-1000)),
            (" 3 ", Some(3000)),
            ("1e", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_quantity(s), *want, "{s:?}");
        }
    }
}
