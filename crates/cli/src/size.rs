//! Parsing of sizes such as `4096`, `64KiB`, `4MiB`, `1G` (binary and decimal units).

/// Parses a size; the error says what is accepted.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 4096, 64KiB, 4MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{text}' (use KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{text}' is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_units() {
        assert_eq!(super::parse("4096"), Ok(4096));
        assert_eq!(super::parse("64KiB"), Ok(65536));
        assert_eq!(super::parse("4MiB"), Ok(4 << 20));
        assert_eq!(super::parse("1G"), Ok(1 << 30));
        assert_eq!(super::parse("2MB"), Ok(2_000_000));
        assert!(super::parse("x").is_err());
        assert!(super::parse("4XB").is_err());
    }
}
