use super::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The spec's examples: a listener's wildcard takes route hosts under it (any depth),
/// a route wildcard narrows to the listener's host, disjoint names do not attach.
#[test]
fn listener_and_route_hostnames_intersect_as_the_spec_says() {
    assert_eq!(intersect(None, &[]), strings(&["*"]));
    assert_eq!(
        intersect(Some("test.example.com"), &[]),
        strings(&["test.example.com"])
    );
    assert_eq!(
        intersect(Some("test.example.com"), &strings(&["*.example.com"])),
        strings(&["test.example.com"])
    );
    assert_eq!(
        intersect(
            Some("*.example.com"),
            &strings(&["foo.test.example.com", "example.com", "test.example.net"])
        ),
        strings(&["foo.test.example.com"])
    );
    assert_eq!(
        intersect(Some("*.example.com"), &strings(&["*.example.com"])),
        strings(&["*.example.com"])
    );
    assert!(intersect(Some("a.example.com"), &strings(&["b.example.com"])).is_empty());
    assert!(valid("*.example.com") && valid("a-b.example"));
    assert!(!valid("10.0.0.1") && !valid("Upper.example.com") && !valid("a..b"));
}
