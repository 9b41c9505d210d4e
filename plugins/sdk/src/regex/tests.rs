use super::check_re2;

#[test]
fn accepts_what_re2_accepts() {
    for ok in [
        "/api/v[0-9]+",
        "^/a(b|c)*$",
        "(?i)/Foo",
        "/\\d{1,3}",
        "[a-z]+-[^/]",
        "\\pL+\\p{Greek}\\p{Lu}[\\p{Old_Italic}x]",
        "(?P<id>[0-9]+)(a{10}){100}",
        "a*?b+?\\x41\\x{42}",
    ] {
        assert!(check_re2(ok).is_ok(), "{ok}: {:?}", check_re2(ok));
    }
}

#[test]
fn rejects_what_re2_rejects() {
    for bad in [
        "/(",
        "/a{1001}",
        "/(?=x)",
        "/\\1",
        "[a-z&&[^m]]",
        "(?x)a b",
        "\\<word",
        "[[a]]",
        "(a{1000}){1000}",
        "(?-u)a",
        "((a{30}){30}){30}",
        "a**",
        "a{2}{3}",
        "\\8",
        "\\u0041",
        "[\\u0041-\\u0042]",
        "\\p{Letter}",
        "\\p{greek}",
        "\\p{sc=Greek}",
        "\\p{White_Space}",
        "(?P<a.b>x)",
        "",
    ] {
        assert!(check_re2(bad).is_err(), "{bad} was accepted");
    }
}
