use super::*;

#[test]
fn hosts_are_lowercased_without_trailing_dot() {
    assert_eq!(
        parse_host("Foo.Example.COM.").map(|h| h.fqdn),
        Ok("foo.example.com".into())
    );
}

#[test]
fn empty_host_is_any() {
    assert_eq!(parse_host("").map(|h| h.fqdn), Ok("*".into()));
}

#[test]
fn wildcard_gets_a_one_label_regex() {
    let host = parse_host("*.example.com").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(host.fqdn, "*.example.com");
    assert_eq!(
        host.authority_regex.as_deref(),
        Some("(?i)[a-z0-9]([-a-z0-9]*[a-z0-9])?\\.example\\.com(:[0-9]+)?")
    );
}

#[test]
fn bad_hosts_are_refused() {
    for bad in [
        "a b.com",
        "foo.*.com",
        "-a.com",
        "a..com",
        "%x.com",
        "a.com/x",
    ] {
        assert!(parse_host(bad).is_err(), "{bad} should be refused");
    }
}
