//! Policy values shared by sources: Contour's timeout syntax and retry conditions.

use std::time::Duration;

/// The longest duration Go's `time.ParseDuration` (Contour's parser) takes: 2^63 − 1 ns,
/// about 2,562,047 h, within protobuf's range for Envoy.
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// A timeout in Go's duration syntax (`1s`, `1m30s`, `250ms`, `1.5h`), or `infinity`
/// (zero: disabled); longer than [`MAX_DURATION`] is an error, as in Go.
pub fn timeout(text: &str) -> Result<Duration, String> {
    match text.trim() {
        "infinity" | "infinite" => Ok(Duration::ZERO),
        other => go_duration(other),
    }
}

fn go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like 1s, 500ms or 1m30s");
    if text.is_empty() {
        return Err(bad());
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    let parsed = Duration::try_from_secs_f64(total).map_err(|_| bad())?;
    if parsed > MAX_DURATION {
        return Err(format!("{text:?} is longer than 2562047h47m16s"));
    }
    Ok(parsed)
}

/// The 4xx and 5xx codes of Envoy's `type.v3.StatusCode`, which fields of that type (a
/// local rate limit's answer) must hold: Envoy refuses any other.
const ENVOY_ERROR_STATUS_CODES: &[u32] = &[
    400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421,
    422, 423, 424, 426, 428, 429, 431, 500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511,
];

/// Whether `code` is a 4xx or 5xx status Envoy's `StatusCode` names.
pub fn is_envoy_error_status(code: u32) -> bool {
    ENVOY_ERROR_STATUS_CODES.contains(&code)
}

/// Envoy `retry_on` conditions Contour accepts.
pub const RETRY_ON: &[&str] = &[
    "5xx",
    "gateway-error",
    "reset",
    "connect-failure",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(timeout("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(timeout("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(timeout("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(timeout("infinity"), Ok(Duration::ZERO));
        assert!(timeout("forever").is_err());
        assert!(timeout("10").is_err());
        assert!(timeout("-1s").is_err());
    }
}
