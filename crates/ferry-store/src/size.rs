//! Sizes as people write them, one reading for every setting: `8MiB` and `8M` are binary
//! (8 × 2^20), `8MB` is decimal (8 × 10^6), a plain number is bytes; `1.5G` works too.

/// Bytes `s` names, or `None` when it is not a size.
pub fn parse(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if num.contains('.') {
        let n: f64 = num.parse().ok()?;
        let bytes = n * mult as f64;
        return (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64)
            .then_some(bytes as u64);
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    #[test]
    fn binary_decimal_and_plain() {
        for (s, n) in [
            ("8MiB", 8 << 20),
            ("8M", 8 << 20),
            ("8mb", 8_000_000),
            ("1.5G", 3 << 29),
            ("4096", 4096),
            (" 64k ", 64 << 10),
        ] {
            assert_eq!(super::parse(s), Some(n), "{s}");
        }
        for s in ["8 parsecs", "", "M", "1.2.3M", "99999999999999999999T"] {
            assert_eq!(super::parse(s), None, "{s}");
        }
    }
}
