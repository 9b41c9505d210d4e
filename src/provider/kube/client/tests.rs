use super::*;

/// Any finite positive rate is either a window a rate limiter takes (never zero, never
/// past a day) or an error naming the key; none panics.
#[test]
fn request_rates_make_usable_windows_or_errors() {
    let window = |qps: f32, burst: Option<u32>| {
        RequestRate {
            qps: Some(qps),
            burst,
        }
        .window()
    };
    for (qps, burst) in [(1e20, None), (1e10, Some(1)), (f32::MAX, None), (5.0, None)] {
        let (b, w) = window(qps, burst)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{qps} {burst:?}"));
        assert!(
            b >= 1 && !w.is_zero() && w <= MAX_RATE_WINDOW,
            "{qps}: {b} per {w:?}"
        );
    }
    let slow = window(1e-30, None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(slow.contains("kubernetesClientQPS"), "{slow}");
    assert!(matches!(window(0.0, None), Ok(None)));
}
