//! Quantities given on the command line, parsed once (by clap, through these functions) into
//! one meaning each: a size is bytes (`4096`, `64KiB`, `4MiB`, `2MB`), a duration is a
//! [`Duration`] and always says its unit (`100us`, `15ms`, `2s`), a [`Rate`] is bytes per
//! second whether it was given in bytes (`800MB/s`, `512MiB/s`) or bits (`10gbit`,
//! `100mbit`). A bare number is a size in bytes, never a duration or a rate (but `0`, which
//! is the same in every unit).

use std::fmt;
use std::time::Duration;
use thiserror::Error;

/// Why a quantity could not be read; the message shows what is accepted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("'{text}' is not a {what} (e.g. {example})")]
    NotANumber {
        text: String,
        what: &'static str,
        example: &'static str,
    },
    #[error("unknown {what} unit '{unit}' in '{text}' (use {accepted})")]
    UnknownUnit {
        text: String,
        unit: String,
        what: &'static str,
        accepted: &'static str,
    },
    #[error("'{text}' has no unit; say which (e.g. {example})")]
    NoUnit { text: String, example: &'static str },
    #[error("{what} '{text}' is out of range ({range})")]
    OutOfRange {
        text: String,
        what: &'static str,
        range: &'static str,
    },
}

/// Splits `12.5ms` into 12.5 and `ms` (the unit in lower case).
fn number_and_unit(
    text: &str,
    what: &'static str,
    example: &'static str,
) -> Result<(f64, String), UnitError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let not_a_number = || UnitError::NotANumber {
        text: text.to_string(),
        what,
        example,
    };
    let n: f64 = t[..split].parse().map_err(|_| not_a_number())?;
    if !n.is_finite() || n < 0.0 {
        return Err(not_a_number());
    }
    Ok((n, t[split..].trim().to_ascii_lowercase()))
}

/// The error for a quantity whose `unit` is missing (a non-zero bare number) or unknown.
fn bad_unit(
    text: &str,
    unit: &str,
    what: &'static str,
    accepted: &'static str,
    example: &'static str,
) -> UnitError {
    if unit.is_empty() {
        UnitError::NoUnit {
            text: text.to_string(),
            example,
        }
    } else {
        UnitError::UnknownUnit {
            text: text.to_string(),
            unit: unit.to_string(),
            what,
            accepted,
        }
    }
}

/// A size in bytes: a whole number, with an optional binary (`KiB`, `MiB`, `GiB`, or `K`,
/// `M`, `G`) or decimal (`KB`, `MB`, `GB`) unit.
pub fn size(text: &str) -> Result<u64, UnitError> {
    const EXAMPLE: &str = "4096, 64KiB, 4MiB";
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| UnitError::NotANumber {
        text: text.to_string(),
        what: "size",
        example: EXAMPLE,
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(UnitError::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
                what: "size",
                accepted: "KiB, MiB, GiB, KB, MB, GB",
            })
        }
    };
    n.checked_mul(mult).ok_or_else(|| UnitError::OutOfRange {
        text: text.to_string(),
        what: "size",
        range: "at most 16 EiB",
    })
}

/// Longest duration any option takes.
const MAX_DURATION: Duration = Duration::from_secs(3600);

/// A duration with its unit: `ns`, `us` (or `µs`), `ms`, `s`, `min` or `h`, at most an hour.
/// `0` needs no unit.
pub fn duration(text: &str) -> Result<Duration, UnitError> {
    duration_within(text, MAX_DURATION, "at most 1 hour")
}

/// Longest [`long_duration`].
const MAX_LONG_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// A duration as [`duration`], up to 30 days (how long a transfer keeps trying, for one).
pub fn long_duration(text: &str) -> Result<Duration, UnitError> {
    duration_within(text, MAX_LONG_DURATION, "at most 30 days")
}

fn duration_within(text: &str, max: Duration, range: &'static str) -> Result<Duration, UnitError> {
    const EXAMPLE: &str = "100us, 15ms, 2s, 10min, 2h";
    let (n, unit) = number_and_unit(text, "duration", EXAMPLE)?;
    let per_second = match unit.as_str() {
        "ns" => 1e9,
        "us" | "µs" => 1e6,
        "ms" => 1e3,
        "s" => 1.0,
        "min" => 1.0 / 60.0,
        "h" => 1.0 / 3600.0,
        "" if n == 0.0 => 1.0,
        other => {
            return Err(bad_unit(
                text,
                other,
                "time",
                "ns, us, ms, s, min, h",
                EXAMPLE,
            ))
        }
    };
    let secs = n / per_second;
    if secs > max.as_secs_f64() {
        return Err(UnitError::OutOfRange {
            text: text.to_string(),
            what: "duration",
            range,
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A rate, kept in bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Rate {
    bytes_per_s: f64,
}

impl Rate {
    pub fn from_bytes_per_s(bytes_per_s: f64) -> Rate {
        Rate { bytes_per_s }
    }

    pub fn bytes_per_s(self) -> f64 {
        self.bytes_per_s
    }

    pub fn bits_per_s(self) -> f64 {
        self.bytes_per_s * 8.0
    }

    /// A rate with its unit: bytes (`B/s`, `KB/s`, `MB/s`, `GB/s`, `KiB/s`, `MiB/s`,
    /// `GiB/s`; the `/s` may be left out) or bits (`bit`, `kbit`, `mbit`, `gbit`, per second).
    /// As with rsync's --bwlimit, a bare number is KiB/s and a single letter `K`, `M` or `G`
    /// stands for KiB/s, MiB/s or GiB/s.
    pub fn parse(text: &str) -> Result<Rate, UnitError> {
        const EXAMPLE: &str = "800MB/s, 512MiB/s, 10gbit";
        let (n, unit) = number_and_unit(text, "rate", EXAMPLE)?;
        let unit = unit.strip_suffix("/s").unwrap_or(&unit);
        let bytes = match unit {
            "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "kib" => 1024.0,
            "mib" => 1048576.0,
            "gib" => 1073741824.0,
            "" | "k" => 1024.0,
            "m" => 1048576.0,
            "g" => 1073741824.0,
            "bit" => 1.0 / 8.0,
            "kbit" => 1e3 / 8.0,
            "mbit" => 1e6 / 8.0,
            "gbit" => 1e9 / 8.0,
            other => {
                let accepted = "MB/s, GB/s, MiB/s, kbit, mbit, gbit, ...";
                return Err(bad_unit(text, other, "rate", accepted, EXAMPLE));
            }
        };
        Ok(Rate::from_bytes_per_s(n * bytes))
    }
}

impl fmt::Display for Rate {
    /// In bits per second, as links are rated (`1000 Mbit/s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0} Mbit/s", self.bits_per_s() / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bytes_in_binary_or_decimal_units() {
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(size("64KiB"), Ok(65536));
        assert_eq!(size("4MiB"), Ok(4 << 20));
        assert_eq!(size("1G"), Ok(1 << 30));
        assert_eq!(size("2MB"), Ok(2_000_000));
        assert!(matches!(size("x"), Err(UnitError::NotANumber { .. })));
        assert!(matches!(size("4XB"), Err(UnitError::UnknownUnit { .. })));
        assert!(matches!(
            size("99999999999GiB"),
            Err(UnitError::OutOfRange { .. })
        ));
    }

    #[test]
    fn durations_say_their_unit() {
        assert_eq!(duration("15ms"), Ok(Duration::from_millis(15)));
        assert_eq!(duration("0.1ms"), Ok(Duration::from_micros(100)));
        assert_eq!(duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("50ns"), Ok(Duration::from_nanos(50)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert!(matches!(duration("15"), Err(UnitError::NoUnit { .. })));
        assert!(matches!(duration("5d"), Err(UnitError::UnknownUnit { .. })));
        assert_eq!(duration("10min"), Ok(Duration::from_secs(600)));
        assert!(matches!(duration("2h"), Err(UnitError::OutOfRange { .. })));
        assert_eq!(long_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(matches!(
            long_duration("800h"),
            Err(UnitError::OutOfRange { .. })
        ));
        assert!(matches!(
            duration("7200s"),
            Err(UnitError::OutOfRange { .. })
        ));
        assert!(matches!(
            duration("-1ms"),
            Err(UnitError::NotANumber { .. })
        ));
        let no_unit = duration("15").map_err(|e| e.to_string());
        assert_eq!(
            no_unit,
            Err("'15' has no unit; say which (e.g. 100us, 15ms, 2s, 10min, 2h)".to_string())
        );
    }

    #[test]
    fn rates_are_bytes_per_second_from_bytes_or_bits() {
        let r = |t| Rate::parse(t).map(Rate::bytes_per_s);
        assert_eq!(r("1gbit"), Ok(125e6));
        assert_eq!(r("80mbit"), Ok(10e6));
        assert_eq!(r("800MB/s"), Ok(800e6));
        assert_eq!(r("1.2GB/s"), Ok(1.2e9));
        assert_eq!(r("512MiB/s"), Ok(512.0 * 1048576.0));
        assert_eq!(r("2kb"), Ok(2e3));
        assert_eq!(r("0"), Ok(0.0));
        // rsync's forms: a bare number is KiB/s, one letter a binary multiple.
        assert_eq!(r("100"), Ok(102_400.0));
        assert_eq!(r("1M"), Ok(1048576.0));
        assert_eq!(r("1.5m"), Ok(1.5 * 1048576.0));
        assert_eq!(r("2K"), Ok(2048.0));
        assert_eq!(r("1g"), Ok(1073741824.0));
        assert!(matches!(
            Rate::parse("9parsecs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            Rate::parse("fast"),
            Err(UnitError::NotANumber { .. })
        ));
        assert_eq!(
            Rate::parse("1gbit").map(|r| r.to_string()),
            Ok("1000 Mbit/s".into())
        );
        assert_eq!(Rate::parse("1gbit").map(Rate::bits_per_s), Ok(1e9));
    }
}
