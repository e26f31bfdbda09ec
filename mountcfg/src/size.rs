//! Human sizes ("64K", "64KiB", "1.5G", "65536") and durations ("30s", "500ms", "2m").

use std::time::Duration;

/// Parses a size in bytes; K, M, G, T are powers of 1024 (with or without "iB"/"B").
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return Err(format!("unknown unit \"{unit}\" (use K, M, G or T)")),
    };
    if num.is_empty() {
        return Err("a number is needed, e.g. 64K".into());
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("\"{num}\" is not a number"))?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
        return Err(format!("\"{text}\" is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats a byte count the way configs spell it ("64K", "1M", "12345").
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Parses "250ms", "30s", "2m", "1h", or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| "must be a duration such as 500ms, 30s or 2m".to_string())?;
    let secs = match unit.trim() {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown unit \"{other}\" (use us, ms, s, m or h)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err("must be a positive duration".into());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| "is too long".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_every_spelling() {
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("64kb").unwrap(), 65536);
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("1.5M").unwrap(), 3 << 19);
        assert_eq!(parse_size("4G").unwrap(), 4 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("0.3").is_err());
        assert_eq!(format_size(65536), "64K");
        assert_eq!(format_size(3 << 20), "3M");
        assert_eq!(format_size(1000), "1000");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5y").is_err());
    }
}
