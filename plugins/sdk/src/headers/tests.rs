use super::*;

#[test]
fn percent_is_escaped_except_in_allowed_variables() {
    assert_eq!(escape_header_value("100%"), "100%%");
    assert_eq!(escape_header_value("%HOSTNAME%"), "%HOSTNAME%");
    assert_eq!(escape_header_value("a %REQ(X-Foo)% b"), "a %REQ(X-Foo)% b");
    assert_eq!(escape_header_value("%REQ(X-Foo:10)%"), "%REQ(X-Foo:10)%");
    assert_eq!(
        escape_header_value("%DYNAMIC_METADATA(x)%"),
        "%%DYNAMIC_METADATA(x)%%"
    );
    assert_eq!(escape_header_value("%REQ(a b)%"), "%%REQ(a b)%%");
    assert_eq!(escape_header_value("%%"), "%%%%");
}

#[test]
fn header_names() {
    assert!(is_header_name("x-request-id"));
    assert!(!is_header_name(":path"));
    assert!(!is_header_name("bad name"));
    assert!(!is_header_name(""));
}
