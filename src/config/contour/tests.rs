use super::*;

#[test]
fn format_strings_and_fields() {
    assert!(valid_format(
        "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH):64%\" %RESPONSE_CODE%\n"
    ));
    assert!(!valid_format("%START_TIME\n"));
    assert!(!valid_format("%lower%\n"));
    assert_eq!(json_fields(&[]).map(|f| f.len()), Ok(23));
    assert!(json_fields(&["nope".to_string()]).is_err());
    // Contour main's fingerprint fields.
    assert_eq!(
        json_fields(&["tls_ja4_fingerprint".to_string()]),
        Ok(vec![(
            "tls_ja4_fingerprint".to_string(),
            "%TLS_JA4_FINGERPRINT%".to_string()
        )])
    );
    assert_eq!(
        json_fields(&["method".to_string(), "x=%REQ(X)%".to_string()]),
        Ok(vec![
            ("method".to_string(), "%REQ(:METHOD)%".to_string()),
            ("x".to_string(), "%REQ(X)%".to_string())
        ])
    );
    assert_eq!(timeout("infinity"), Ok(Some(Duration::ZERO)));
    assert_eq!(timeout(""), Ok(None));
    assert!(timeout("soon").is_err());
}
