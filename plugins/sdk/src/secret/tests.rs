use super::*;

fn check(type_: Option<&str>, key: &str, value: &str) -> Result<Arc<str>, String> {
    let other = BTreeMap::from([(key.to_string(), OtherValue::of(value.as_bytes()))]);
    SecretCheck::of_data("ns/s", type_, &BTreeMap::new(), &other).jwks("jwks.json")
}

/// A JWKS is read from an `Opaque` Secret (or one without a type) only, under the key
/// asked for, as a JSON object with a `keys` array, and is sent re-encoded; every
/// other case is worded as Contour's main words it.
#[test]
fn a_jwks_is_checked_as_contours_main_checks_it() {
    let jwks = r#" { "keys" : [ {"kty": "EC"} ] } "#;
    assert_eq!(
        check(Some("Opaque"), "jwks.json", jwks).as_deref(),
        Ok(r#"{"keys":[{"kty":"EC"}]}"#)
    );
    assert!(check(None, "jwks.json", jwks).is_ok());
    let err = |type_, key, value| check(type_, key, value).err().unwrap_or_default();
    assert_eq!(
        err(Some("kubernetes.io/tls"), "jwks.json", jwks),
        "secret type is not \"Opaque\""
    );
    assert_eq!(
        err(Some("Opaque"), "other", jwks),
        "missing \"jwks.json\" key or empty value"
    );
    assert_eq!(
        err(Some("Opaque"), "jwks.json", ""),
        "missing \"jwks.json\" key or empty value"
    );
    assert!(err(Some("Opaque"), "jwks.json", "{not json").starts_with("not valid JSON: "));
    for not_an_object in ["[1]", "password", "  "] {
        assert_eq!(
            err(Some("Opaque"), "jwks.json", not_an_object),
            "JWKS must be a JSON object"
        );
    }
    assert_eq!(
        err(Some("Opaque"), "jwks.json", r#"{"keys": {}}"#),
        "JWKS \"keys\" must be an array"
    );
    assert_eq!(
        err(Some("Opaque"), "jwks.json", r#"{"key": []}"#),
        "JWKS must contain a \"keys\" array"
    );
}
