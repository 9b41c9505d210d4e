//! `test/e2e/httpproxy` (Contour v1.33.6).

use std::collections::BTreeMap;

use super::{E2e, Req, http};

/// The attributes of the `Set-Cookie` of `name` in `answer` (its value under `name`).
fn cookie(answer: &crate::conformance::client::Answer, name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (header, value) in &answer.headers {
        if !header.eq_ignore_ascii_case("set-cookie") {
            continue;
        }
        let mut parts = value.split(';').map(str::trim);
        let Some(first) = parts.next() else { continue };
        let (n, v) = first.split_once('=').unwrap_or((first, ""));
        if n != name {
            continue;
        }
        out.insert(n.to_string(), v.to_string());
        for part in parts.filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

/// Contour's `requestSetCookieHeader`: the echo is asked (`X-ECHO-HEADER`) to answer with
/// `set_cookie`; the answer, once 200.
async fn set_cookie(e2e: &E2e, req: Req, set_cookie: &str) -> crate::conformance::client::Answer {
    let req = req.header("X-ECHO-HEADER", &format!("Set-Cookie:{set_cookie}"));
    e2e.until_status(&req, 200).await
}

/// Contour's `checkReturnedSetCookieHeader`: the cookie's value (unless `""`), `Path`,
/// `Domain`, `SameSite` (each absent when `""`), `Secure`, and further attributes.
fn check_cookie(
    answer: &crate::conformance::client::Answer,
    name: &str,
    (value, path, domain, same_site): (&str, &str, &str, &str),
    secure: bool,
    more: &[(&str, &str)],
) {
    let got = cookie(answer, name);
    let context = format!("{name}: {got:?} ({:?})", answer.headers);
    if !value.is_empty() {
        assert_eq!(got.get(name).map(String::as_str), Some(value), "{context}");
    }
    for (attribute, want) in [("Path", path), ("Domain", domain), ("SameSite", same_site)] {
        if want.is_empty() {
            assert!(!got.contains_key(attribute), "{context}");
        } else {
            assert_eq!(
                got.get(attribute).map(String::as_str),
                Some(want),
                "{context}"
            );
        }
    }
    assert_eq!(got.contains_key("Secure"), secure, "{context}");
    for (attribute, want) in more {
        assert_eq!(
            got.get(*attribute).map(String::as_str),
            Some(*want),
            "{context}"
        );
    }
}

/// testAppCookieRewrite: a route's and a Service's cookie rewrite policies rewrite the
/// `Set-Cookie` headers of the app's answers, per route; a cookie both name gets the
/// Service's attributes over the route's, attribute by attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_cookie_rewrite() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-app-cookie-rewrite";
    e2e.deploy_echo(ns, "echo").await;
    e2e.deploy_echo(ns, "echo-other").await;
    let fqdn = "app-cookie-rewrite.projectcontour.io";
    let route = |prefix: &str, rewrites: &str, services: &str| {
        format!(
            "    - conditions: [{{prefix: {prefix}}}]\n      cookieRewritePolicies: {rewrites}\n      services: {services}\n"
        )
    };
    let echo = "[{name: echo, port: 80}]";
    let routes = [
        route("/no-rewrite", "[]", echo),
        route(
            "/no-attributes",
            "[{name: no-attributes, pathRewrite: {value: /foo}, domainRewrite: {value: foo.com}, secure: true, sameSite: Strict}]",
            echo,
        ),
        route(
            "/rewrite-all",
            "[{name: rewrite-all, pathRewrite: {value: /ra}, domainRewrite: {value: ra.com}, secure: false, sameSite: Lax}]",
            echo,
        ),
        route(
            "/rewrite-some",
            "[{name: rewrite-some, domainRewrite: {value: rs.com}}]",
            echo,
        ),
        route(
            "/multi",
            "[{name: multi-1, pathRewrite: {value: /m1}}, {name: multi-2, domainRewrite: {value: m2.com}}]",
            echo,
        ),
        route(
            "/service",
            "[]",
            "[{name: echo, port: 80, cookieRewritePolicies: [{name: service, pathRewrite: {value: /svc-new}}]}, {name: echo-other, port: 80, cookieRewritePolicies: [{name: service, pathRewrite: {value: /svc-new-other}}]}]",
        ),
        route(
            "/route-and-service",
            "[{name: route-service, pathRewrite: {value: /route}, domainRewrite: {value: route.com}}, {name: route, pathRewrite: {value: /route}}]",
            "[{name: echo, port: 80, cookieRewritePolicies: [{name: route-service, pathRewrite: {value: /service}, secure: true, sameSite: Lax}, {name: service, pathRewrite: {value: /service}}]}]",
        ),
    ];
    e2e.proxy(
        &format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: app-cookie-rewrite, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n{}",
            routes.concat()
        ),
        (ns, "app-cookie-rewrite"),
        "valid",
    )
    .await;
    let at = |path: &str| http(fqdn).path(path);
    let a = set_cookie(
        &e2e,
        at("/no-rewrite"),
        "no-rewrite=foo; Path=/nrw; Domain=nrw.com; SameSite=Strict; Secure",
    )
    .await;
    check_cookie(
        &a,
        "no-rewrite",
        ("foo", "/nrw", "nrw.com", "Strict"),
        true,
        &[],
    );
    let a = set_cookie(
        &e2e,
        at("/no-rewrite"),
        "rewrite-all=foo; Path=/ra; Domain=ra.com; SameSite=Strict; Secure",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-all",
        ("foo", "/ra", "ra.com", "Strict"),
        true,
        &[],
    );
    let a = set_cookie(&e2e, at("/no-attributes"), "no-attributes=foo").await;
    check_cookie(
        &a,
        "no-attributes",
        ("foo", "/foo", "foo.com", "Strict"),
        true,
        &[],
    );
    let a = set_cookie(
        &e2e,
        at("/rewrite-all"),
        "rewrite-all=bar; Path=/bar; Domain=bar.com; SameSite=None; Secure",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-all",
        ("bar", "/ra", "ra.com", "Lax"),
        false,
        &[],
    );
    let a = set_cookie(
        &e2e,
        at("/rewrite-all"),
        "rewrite-all=baz; Domain=bar.com; Max-Age=10; HttpOnly",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-all",
        ("baz", "/ra", "ra.com", "Lax"),
        false,
        &[("Max-Age", "10"), ("HttpOnly", "")],
    );
    let a = set_cookie(
        &e2e,
        at("/rewrite-some"),
        "rewrite-some=bar; Path=/bar; Domain=bar.com; SameSite=Lax; Secure",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-some",
        ("bar", "/bar", "rs.com", "Lax"),
        true,
        &[],
    );
    let a = set_cookie(&e2e, at("/multi"), "multi-1=bar").await;
    check_cookie(&a, "multi-1", ("bar", "/m1", "", ""), false, &[]);
    let a = set_cookie(&e2e, at("/multi"), "multi-2=bar").await;
    check_cookie(&a, "multi-2", ("bar", "", "m2.com", ""), false, &[]);
    let mut services = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let a = set_cookie(&e2e, at("/service"), "service=baz; Path=/svc").await;
        match cookie(&a, "service").get("Path").map(String::as_str) {
            Some("/svc-new-other") => services.insert("echo-other"),
            Some("/svc-new") => services.insert("echo"),
            other => panic!("service cookie path {other:?}"),
        };
    }
    assert_eq!(services.len(), 2, "{services:?}");
    let a = set_cookie(&e2e, at("/route-and-service"), "route-service=baz").await;
    check_cookie(
        &a,
        "route-service",
        ("baz", "/service", "route.com", "Lax"),
        true,
        &[],
    );
    let a = set_cookie(&e2e, at("/route-and-service"), "route=baz").await;
    check_cookie(&a, "route", ("baz", "/route", "", ""), false, &[]);
    let a = set_cookie(&e2e, at("/route-and-service"), "service=baz").await;
    check_cookie(&a, "service", ("baz", "/service", "", ""), false, &[]);
    // A cookie that is not `name=value` is left as it is.
    let a = set_cookie(&e2e, at("/rewrite-some"), "rewrite-some").await;
    check_cookie(&a, "rewrite-some", ("", "", "", ""), false, &[]);
    for (set, path) in [
        ("rewrite-some=foo; Path=/;", "/"),
        ("rewrite-some=foo;   ", ""),
        ("rewrite-some=foo; ;", ""),
    ] {
        let a = set_cookie(&e2e, at("/rewrite-some"), set).await;
        check_cookie(&a, "rewrite-some", ("foo", path, "rs.com", ""), false, &[]);
    }
    e2e.assert_nothing_rejected().await;
}
