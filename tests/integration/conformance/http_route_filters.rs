//! The suite's HTTPRoute filter tests: header modifiers (of a rule, of a backend, of
//! responses), host rewrites, redirects, mirrors, CORS.

use std::time::{Duration, Instant};

use crate::conformance::client::{Expect, Location, get};
use crate::conformance::suite::{INFRA, Suite};

const SAME: (&str, &str) = (INFRA, "same-namespace");

/// An HTTPRoute of the infra namespace on `same-namespace` with these rules (YAML list
/// items, indented by four), and optionally hostnames.
fn on_same(name: &str, hostnames: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: same-namespace}}]\n  hostnames: [{hostnames}]\n  rules:\n{rules}"
    )
}

/// Applies `yaml`; waits for route `name` on `same-namespace`: accepted and, with
/// `resolved`, its references resolved. The Gateway's address.
async fn accepted(suite: &Suite, name: &str, yaml: &str, resolved: bool) -> std::net::SocketAddr {
    suite.apply(yaml);
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    if resolved {
        suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    }
    addr
}

/// The header modifier of the modify-and-… rules: set, two adds, a removal.
const MODIFY: &str = "type: RequestHeaderModifier\n          requestHeaderModifier:\n            set: [{name: X-Header-Set, value: set-overwrites-values}]\n            add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]\n            remove: [X-Header-Remove]";

/// `expect` with the requests and expectations of [`MODIFY`].
fn modified(expect: Expect) -> Expect {
    expect
        .header("X-Header-Remove", "remove-val")
        .header("X-Header-Add-Append", "append-val-1")
        .sees_headers(&[
            ("X-Header-Add", "header-val-1"),
            ("X-Header-Add-Append", "append-val-1,header-val-2"),
            ("X-Header-Set", "set-overwrites-values"),
        ])
        .sees_no(&["X-Header-Remove"])
}

/// The five rules of the request header modifier tests, each filter on the rule or, with
/// `on_backend`, on its backend.
fn header_modifier_rules(on_backend: bool) -> String {
    let modifiers = [
        (
            "/set",
            "set: [{name: X-Header-Set, value: set-overwrites-values}]",
        ),
        (
            "/add",
            "add: [{name: X-Header-Add, value: add-appends-values}]",
        ),
        ("/remove", "remove: [X-Header-Remove]"),
        (
            "/multiple",
            "set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}], add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}, {name: X-Header-Add-3, value: header-add-3}], remove: [X-Header-Remove-1, X-Header-Remove-2]",
        ),
        (
            "/case-insensitivity",
            "set: [{name: X-Header-Set, value: header-set}], add: [{name: X-Header-Add, value: header-add}], remove: [X-Header-Remove]",
        ),
    ];
    modifiers
        .iter()
        .map(|(path, m)| {
            let filter = format!("[{{type: RequestHeaderModifier, requestHeaderModifier: {{{m}}}}}]");
            if on_backend {
                format!(
                    "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      backendRefs: [{{name: infra-backend-v1, port: 8080, filters: {filter}}}]\n"
                )
            } else {
                format!(
                    "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      filters: {filter}\n      backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"
                )
            }
        })
        .collect()
}

/// The requests of the request header modifier tests and what the backend sees.
fn header_modifier_cases() -> Vec<Expect> {
    let v1 = |path: &str| get(path).backend("infra-backend-v1");
    vec![
        v1("/set")
            .header("Some-Other-Header", "val")
            .sees_headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ]),
        v1("/set")
            .header("Some-Other-Header", "val")
            .header("X-Header-Set", "some-other-value")
            .sees_headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ]),
        v1("/add")
            .header("Some-Other-Header", "val")
            .sees_headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "add-appends-values"),
            ]),
        v1("/add")
            .header("Some-Other-Header", "val")
            .header("X-Header-Add", "some-other-value")
            .sees_headers(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value,add-appends-values"),
            ]),
        v1("/remove")
            .header("X-Header-Remove", "val")
            .sees_headers(&[])
            .sees_no(&["X-Header-Remove"]),
        v1("/multiple")
            .header("X-Header-Set-2", "set-val-2")
            .header("X-Header-Add-2", "add-val-2")
            .header("X-Header-Remove-2", "remove-val-2")
            .header("Another-Header", "another-header-val")
            .sees_headers(&[
                ("X-Header-Set-1", "header-set-1"),
                ("X-Header-Set-2", "header-set-2"),
                ("X-Header-Add-1", "header-add-1"),
                ("X-Header-Add-2", "add-val-2,header-add-2"),
                ("X-Header-Add-3", "header-add-3"),
                ("Another-Header", "another-header-val"),
            ])
            .sees_no(&["X-Header-Remove-1", "X-Header-Remove-2"]),
        v1("/case-insensitivity")
            .header("x-header-set", "original-val-set")
            .header("x-header-add", "original-val-add")
            .header("x-header-remove", "original-val-remove")
            .header("Another-Header", "another-header-val")
            .sees_headers(&[
                ("X-Header-Set", "header-set"),
                ("X-Header-Add", "original-val-add,header-add"),
                ("Another-Header", "another-header-val"),
            ])
            .sees_no(&["x-header-remove", "X-Header-Remove"]),
    ]
}

/// HTTPRouteRequestHeaderModifier: a rule sets, adds and removes request headers,
/// names without case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_header_modifier() {
    let suite = Suite::start().await;
    let name = "request-header-modifier";
    let addr = accepted(
        &suite,
        name,
        &on_same(name, "", &header_modifier_rules(false)),
        true,
    )
    .await;
    for expect in header_modifier_cases() {
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteBackendRequestHeaderModifier: the same modifications as filters of the
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_backend_request_header_modifier() {
    let suite = Suite::start().await;
    let name = "request-header-modifier";
    let addr = accepted(
        &suite,
        name,
        &on_same(name, "", &header_modifier_rules(true)),
        true,
    )
    .await;
    for expect in header_modifier_cases() {
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRequestHeaderModifierBackendWeights: each backend's header modifier
/// applies to the requests sent to it only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_header_modifier_backend_weights() {
    let suite = Suite::start().await;
    let name = "request-header-modifier-backend-weights";
    let backend = |b: &str| {
        format!(
            "{{name: {b}, port: 8080, weight: 10, filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: Backend, value: {b}}}]}}}}]}}"
        )
    };
    let rules = format!(
        "    - backendRefs: [{}, {}]\n",
        backend("infra-backend-v1"),
        backend("infra-backend-v2")
    );
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    suite.expect(addr, &get("/").sees_headers(&[])).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let answer = crate::conformance::client::send(
            addr,
            &crate::conformance::client::Protocol::Http,
            &get("/").request,
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("GET /: {e}"));
        let echo = answer.echo.unwrap_or_default();
        let values = echo["headers"]["Backend"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(values.len(), 1, "Backend header seen: {}", echo["headers"]);
        let backend = values[0].as_str().unwrap_or_default().to_string();
        let pod = echo["pod"].as_str().unwrap_or_default();
        assert!(pod.starts_with(&backend), "{pod} saw Backend: {backend}");
        seen.insert(backend);
    }
    assert_eq!(seen.len(), 2, "both backends take requests: {seen:?}");
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteResponseHeaderModifier: response headers set, added and removed, names
/// without case, beside request header modifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_response_header_modifier() {
    let suite = Suite::start().await;
    let name = "response-header-modifier";
    let rule = |path: &str, filters: &str| {
        format!(
            "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      filters: [{filters}]\n      backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"
        )
    };
    let response =
        |m: &str| format!("{{type: ResponseHeaderModifier, responseHeaderModifier: {{{m}}}}}");
    let rules = [
        rule("/set", &response("set: [{name: X-Header-Set, value: set-overwrites-values}]")),
        rule("/add", &response("add: [{name: X-Header-Add, value: add-appends-values}]")),
        rule("/remove", &response("remove: [X-Header-Remove]")),
        rule(
            "/multiple",
            &response("set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}], add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}, {name: X-Header-Add-3, value: header-add-3}], remove: [X-Header-Remove-1, X-Header-Remove-2]"),
        ),
        rule(
            "/case-insensitivity",
            &response("set: [{name: X-Header-Set, value: header-set}], add: [{name: X-Header-Add, value: header-add}, {name: x-lowercase-add, value: lowercase-add}, {name: x-Mixedcase-ADD-1, value: mixedcase-add-1}, {name: X-mixeDcase-add-2, value: mixedcase-add-2}, {name: X-UPPERCASE-ADD, value: uppercase-add}], remove: [X-Header-Remove]"),
        ),
        rule(
            "/response-and-request-header-modifiers",
            &format!(
                "{}, {{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: X-Header-Set, value: set-overwrites-values}}], add: [{{name: X-Header-Add, value: header-val-1}}, {{name: X-Header-Add-Append, value: header-val-2}}], remove: [X-Header-Remove]}}}}",
                response("set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}], add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}], remove: [X-Header-Remove-1, X-Header-Remove-2]")
            ),
        ),
    ]
    .concat();
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    let v1 = |path: &str| get(path).backend("infra-backend-v1");
    let cases = [
        v1("/set")
            .backend_sets(&[("Some-Other-Header", "val")])
            .response_header("Some-Other-Header", "val")
            .response_header("X-Header-Set", "set-overwrites-values"),
        v1("/set")
            .backend_sets(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "some-other-value"),
            ])
            .response_header("Some-Other-Header", "val")
            .response_header("X-Header-Set", "set-overwrites-values"),
        v1("/add")
            .backend_sets(&[("Some-Other-Header", "val")])
            .response_header("Some-Other-Header", "val")
            .response_header("X-Header-Add", "add-appends-values"),
        v1("/add")
            .backend_sets(&[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value"),
            ])
            .response_header("Some-Other-Header", "val")
            .response_header("X-Header-Add", "some-other-value,add-appends-values"),
        v1("/remove")
            .backend_sets(&[("X-Header-Remove", "val")])
            .no_response_headers(&["X-Header-Remove"]),
        v1("/multiple")
            .backend_sets(&[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
                ("X-Header-Remove-1", "val"),
            ])
            .response_header("X-Header-Set-1", "header-set-1")
            .response_header("X-Header-Set-2", "header-set-2")
            .response_header("X-Header-Add-1", "header-add-1")
            .response_header("X-Header-Add-2", "add-val-2,header-add-2")
            .response_header("X-Header-Add-3", "header-add-3")
            .response_header("Another-Header", "another-header-val")
            .no_response_headers(&["X-Header-Remove-1", "X-Header-Remove-2"]),
        v1("/case-insensitivity")
            .backend_sets(&[
                ("x-header-set", "original-val-set"),
                ("x-header-add", "original-val-add"),
                ("x-header-remove", "original-val-remove"),
                ("Another-Header", "another-header-val"),
            ])
            .response_header("X-Header-Set", "header-set")
            .response_header("X-Header-Add", "original-val-add,header-add")
            .response_header("X-Lowercase-Add", "lowercase-add")
            .response_header("X-Mixedcase-Add-1", "mixedcase-add-1")
            .response_header("X-Mixedcase-Add-2", "mixedcase-add-2")
            .response_header("X-Uppercase-Add", "uppercase-add")
            .response_header("Another-Header", "another-header-val")
            .no_response_headers(&["x-header-remove", "X-Header-Remove"]),
        v1("/response-and-request-header-modifiers")
            .header("X-Header-Remove", "remove-val")
            .header("X-Header-Add-Append", "append-val-1")
            .header("X-Header-Echo", "echo")
            .backend_sets(&[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
                ("X-Header-Remove-1", "remove-val-1"),
                ("X-Header-Echo", "echo"),
            ])
            .sees_headers(&[
                ("X-Header-Add", "header-val-1"),
                ("X-Header-Set", "set-overwrites-values"),
                ("X-Header-Add-Append", "append-val-1,header-val-2"),
                ("X-Header-Echo", "echo"),
            ])
            .sees_no(&["X-Header-Remove"])
            .response_header("X-Header-Set-1", "header-set-1")
            .response_header("X-Header-Set-2", "header-set-2")
            .response_header("X-Header-Add-1", "header-add-1")
            .response_header("X-Header-Add-2", "add-val-2,header-add-2")
            .response_header("Another-Header", "another-header-val")
            .response_header("X-Header-Echo", "echo")
            .no_response_headers(&["X-Header-Remove-1", "X-Header-Remove-2"]),
    ];
    for expect in cases {
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRewriteHost: the backend sees the Host a rule rewrites to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_rewrite_host() {
    let suite = Suite::start().await;
    let name = "rewrite-host";
    let rules = format!(
        r#"    - matches: [{{path: {{type: PathPrefix, value: /one}}}}]
      filters: [{{type: URLRewrite, urlRewrite: {{hostname: one.example.org}}}}]
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - filters: [{{type: URLRewrite, urlRewrite: {{hostname: example.org}}}}]
      backendRefs: [{{name: infra-backend-v2, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /rewrite-host-and-modify-headers}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{hostname: test.example.org}}
        - {MODIFY}
      backendRefs: [{{name: infra-backend-v2, port: 8080}}]
"#
    );
    let addr = accepted(
        &suite,
        name,
        &on_same(name, "rewrite.example", &rules),
        true,
    )
    .await;
    let host = "rewrite.example";
    suite
        .expect(
            addr,
            &get("/one")
                .host(host)
                .backend("infra-backend-v1")
                .sees_host("one.example.org"),
        )
        .await;
    suite
        .expect(
            addr,
            &get("/two")
                .host(host)
                .backend("infra-backend-v2")
                .sees_host("example.org"),
        )
        .await;
    let expect = modified(get("/rewrite-host-and-modify-headers").host(host))
        .backend("infra-backend-v2")
        .sees_host("test.example.org");
    suite.expect(addr, &expect).await;
    suite.assert_nothing_rejected().await;
}

/// A redirect rule (no backend) for `path`.
fn redirect_rule(path: &str, redirect: &str) -> String {
    format!(
        "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      filters: [{{type: RequestRedirect, requestRedirect: {{{redirect}}}}}]\n"
    )
}

fn location(
    scheme: Option<&str>,
    host: Option<&str>,
    port: Option<&str>,
    path: Option<&str>,
) -> Location {
    Location {
        scheme: scheme.map(str::to_string),
        host: host.map(str::to_string),
        port: port.map(str::to_string),
        path: path.map(str::to_string),
    }
}

/// HTTPRouteRedirectHostAndStatus: a redirect to another host, 302 unless it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_host_and_status() {
    let suite = Suite::start().await;
    let name = "redirect-host-and-status";
    let rules = [
        redirect_rule("/hostname-redirect", "hostname: example.org"),
        redirect_rule("/host-and-status", "statusCode: 301, hostname: example.org"),
    ]
    .concat();
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    let to = location(Some("http"), Some("example.org"), None, None);
    suite
        .expect(addr, &get("/hostname-redirect").redirect(302, to.clone()))
        .await;
    suite
        .expect(addr, &get("/host-and-status").redirect(301, to))
        .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRoute303Redirect, HTTPRoute307Redirect, HTTPRoute308Redirect: a redirect with
/// status 303, 307 or 308 answers that status (a POST for 303, as the suite sends it).
async fn redirect_status(name: &str, path: &str, status: u16, method: &str) {
    let suite = Suite::start().await;
    let rules = redirect_rule(path, &format!("statusCode: {status}"));
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    let to = location(None, None, None, Some(path));
    suite
        .expect(addr, &get(path).method(method).redirect(status, to))
        .await;
    suite.assert_nothing_rejected().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_303_redirect() {
    redirect_status("303-redirect", "/see-other", 303, "POST").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_307_redirect() {
    redirect_status("307-redirect", "/temporary", 307, "GET").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_308_redirect() {
    redirect_status("308-redirect", "/permanent", 308, "GET").await;
}

/// HTTPRouteRedirectPath: a redirect replacing the path or its matched prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_path() {
    let suite = Suite::start().await;
    let name = "redirect-path";
    let prefix = "path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}";
    let rules = [
        redirect_rule("/original-prefix", prefix),
        redirect_rule("/full", "path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}"),
        redirect_rule("/path-and-host", &format!("hostname: example.org, {prefix}")),
        redirect_rule("/path-and-status", &format!("{prefix}, statusCode: 301")),
        redirect_rule("/full-path-and-host", "hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}"),
        redirect_rule("/full-path-and-status", "path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}, statusCode: 301"),
    ]
    .concat();
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    for (path, status, host, to) in [
        (
            "/original-prefix/lemon",
            302,
            None,
            "/replacement-prefix/lemon",
        ),
        ("/full/path/original", 302, None, "/full-path-replacement"),
        (
            "/path-and-host",
            302,
            Some("example.org"),
            "/replacement-prefix",
        ),
        ("/path-and-status", 301, None, "/replacement-prefix"),
        (
            "/full-path-and-host",
            302,
            Some("example.org"),
            "/replacement-full",
        ),
        ("/full-path-and-status", 301, None, "/replacement-full"),
    ] {
        let expect = get(path).redirect(status, location(Some("http"), host, None, Some(to)));
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRedirectPort: a redirect to another port, kept in the Location.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_port() {
    let suite = Suite::start().await;
    let name = "redirect-port";
    let rules = [
        redirect_rule("/port", "port: 8083"),
        redirect_rule("/port-and-host", "hostname: example.org, port: 8083"),
        redirect_rule("/port-and-status", "port: 8083, statusCode: 301"),
        redirect_rule(
            "/port-and-host-and-status",
            "port: 8083, hostname: example.org, statusCode: 302",
        ),
    ]
    .concat();
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    for (path, status, host) in [
        ("/port", 302, None),
        ("/port-and-host", 302, Some("example.org")),
        ("/port-and-status", 301, None),
        ("/port-and-host-and-status", 302, Some("example.org")),
    ] {
        let expect = get(path).redirect(status, location(Some("http"), host, Some("8083"), None));
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRedirectScheme: a redirect to https, at its well-known port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_scheme() {
    let suite = Suite::start().await;
    let name = "redirect-scheme";
    let rules = [
        redirect_rule("/scheme", "scheme: https"),
        redirect_rule("/scheme-and-host", "hostname: example.org, scheme: https"),
        redirect_rule("/scheme-and-status", "scheme: https, statusCode: 301"),
        redirect_rule(
            "/scheme-and-host-and-status",
            "scheme: https, statusCode: 302, hostname: example.org",
        ),
    ]
    .concat();
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    for (path, status, host) in [
        ("/scheme", 302, None),
        ("/scheme-and-host", 302, Some("example.org")),
        ("/scheme-and-status", 301, None),
        ("/scheme-and-host-and-status", 302, Some("example.org")),
    ] {
        let expect = get(path).redirect(status, location(Some("https"), host, None, None));
        suite.expect(addr, &expect).await;
        // Isobar leaves the scheme's well-known port out, as the spec prefers (the suite
        // also takes `:443`).
        let answer = crate::conformance::client::send(
            addr,
            &crate::conformance::client::Protocol::Http,
            &expect.request,
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
        let to = answer.header("location").unwrap_or_default();
        assert!(!to.contains(":443"), "{path}: Location {to}");
    }
    suite.assert_nothing_rejected().await;
}

/// A request id of one case: the mirror tests find each mirrored request by it.
fn request_id(case: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("gateway-api-conformance-request-id={case}-{nanos}")
}

/// Waits (10 s at most) for every pod prefix of `mirrors` to have echoed `uri`.
async fn mirrored(suite: &Suite, uri: &str, mirrors: &[&str]) {
    let start = Instant::now();
    for mirror in mirrors {
        while !suite.logs.of(mirror).iter().any(|u| u == uri) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{mirror} never saw the mirror of {uri}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The mirror tests' two rules: `/{prefix}` mirrors to `mirrors`, and
/// `/{prefix}-and-modify-…` modifies headers too.
fn mirror_rules(first: &str, second: &str, mirrors: &[&str]) -> String {
    let mirror_filters: String = mirrors
        .iter()
        .map(|m| {
            format!(
                "        - {{type: RequestMirror, requestMirror: {{backendRef: {{name: {m}, namespace: gateway-conformance-infra, port: 8080}}}}}}\n"
            )
        })
        .collect();
    format!(
        "    - matches: [{{path: {{type: PathPrefix, value: {first}}}}}]\n      filters:\n{mirror_filters}      backendRefs: [{{name: infra-backend-v1, namespace: gateway-conformance-infra, port: 8080}}]\n    - matches: [{{path: {{type: PathPrefix, value: {second}}}}}]\n      filters:\n        - {MODIFY}\n{mirror_filters}      backendRefs: [{{name: infra-backend-v1, namespace: gateway-conformance-infra, port: 8080}}]\n"
    )
}

async fn mirrors_answer(
    suite: &Suite,
    addr: std::net::SocketAddr,
    paths: [&str; 2],
    mirrors: &[&str],
) {
    for (i, path) in paths.iter().enumerate() {
        let uri = format!("{path}?{}", request_id(i));
        let mut expect = get(&uri).backend("infra-backend-v1");
        if i == 1 {
            expect = modified(expect);
        }
        suite.expect(addr, &expect).await;
        mirrored(suite, &uri, mirrors).await;
    }
}

/// HTTPRouteRequestMirror: every request is mirrored to another backend; the answer is
/// the backend's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_mirror() {
    let suite = Suite::start().await;
    let name = "request-mirror";
    let mirrors = ["infra-backend-v2"];
    let rules = mirror_rules("/mirror", "/mirror-and-modify-headers", &mirrors);
    let addr = accepted(&suite, name, &on_same(name, "", &rules), false).await;
    mirrors_answer(
        &suite,
        addr,
        ["/mirror", "/mirror-and-modify-headers"],
        &mirrors,
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRequestMultipleMirrors: every request is mirrored to two backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_multiple_mirrors() {
    let suite = Suite::start().await;
    let name = "request-multiple-mirrors";
    let mirrors = ["infra-backend-v2", "infra-backend-v3"];
    let rules = mirror_rules(
        "/multi-mirror",
        "/multi-mirror-and-modify-request-headers",
        &mirrors,
    );
    let addr = accepted(&suite, name, &on_same(name, "", &rules), false).await;
    mirrors_answer(
        &suite,
        addr,
        ["/multi-mirror", "/multi-mirror-and-modify-request-headers"],
        &mirrors,
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRequestPercentageMirror: a share of requests is mirrored (a percent, or a
/// fraction), within three standard deviations over 500 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_request_percentage_mirror() {
    let suite = Suite::start().await;
    let name = "request-percentage-mirror";
    let mirror = |share: &str| {
        format!(
            "{{type: RequestMirror, requestMirror: {{backendRef: {{name: infra-backend-v2, namespace: gateway-conformance-infra, port: 8080}}, {share}}}}}"
        )
    };
    let rule = |path: &str, filters: &str| {
        format!(
            "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      filters:\n{filters}      backendRefs: [{{name: infra-backend-v1, namespace: gateway-conformance-infra, port: 8080}}]\n"
        )
    };
    let rules = [
        rule(
            "/percent-mirror",
            &format!("        - {}\n", mirror("percent: 20")),
        ),
        rule(
            "/percent-mirror-fraction",
            &format!(
                "        - {}\n",
                mirror("fraction: {numerator: 25, denominator: 50}")
            ),
        ),
        rule(
            "/percent-mirror-and-modify-headers",
            &format!("        - {MODIFY}\n        - {}\n", mirror("percent: 35")),
        ),
    ]
    .concat();
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    for (i, (path, share)) in [
        ("/percent-mirror", 0.20_f64),
        ("/percent-mirror-fraction", 0.50),
        ("/percent-mirror-and-modify-headers", 0.35),
    ]
    .into_iter()
    .enumerate()
    {
        let case = |uri: &str| {
            let expect = get(uri).backend("infra-backend-v1");
            if i == 2 { modified(expect) } else { expect }
        };
        suite.expect(addr, &case(path)).await;
        let band = 3.0 * (500.0 * share * (1.0 - share)).sqrt();
        let mut within = false;
        for attempt in 0..5 {
            let uri = format!("{path}?{}", request_id(10 * i + attempt));
            for _ in 0..50 {
                let expect = case(&uri);
                let batch =
                    (0..10).map(|_| crate::conformance::client::eventually_once(addr, &expect));
                for outcome in futures::future::join_all(batch).await {
                    outcome.unwrap_or_else(|e| panic!("{e}\n{}", suite.logs()));
                }
            }
            // Mirrors are sent as the request is forwarded; a moment for the last.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let count = suite
                .logs
                .of("infra-backend-v2")
                .iter()
                .filter(|u| **u == uri)
                .count() as f64;
            if (count - 500.0 * share).abs() <= band {
                within = true;
                break;
            }
            eprintln!(
                "{path}: {count} of 500 mirrored, expected {}",
                500.0 * share
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert!(within, "{path}: the mirrored share is not {share}");
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteTimeoutRequest: a request timeout answers 504; `0s` disables it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_timeout_request() {
    timeouts(
        "request-timeout",
        "request",
        "/request-timeout",
        "/disable-request-timeout",
    )
    .await;
}

/// HTTPRouteTimeoutBackendRequest: a backend request timeout answers 504; `0s`
/// disables it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_timeout_backend_request() {
    timeouts(
        "backend-request-timeout",
        "backendRequest",
        "/backend-timeout",
        "/disable-backend-timeout",
    )
    .await;
}

async fn timeouts(name: &str, field: &str, path: &str, disabled: &str) {
    let suite = Suite::start().await;
    let rules = format!(
        "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      timeouts: {{{field}: 500ms}}\n      backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n    - matches: [{{path: {{type: PathPrefix, value: {disabled}}}}}]\n      timeouts: {{{field}: 0s}}\n      backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"
    );
    let addr = accepted(&suite, name, &on_same(name, "", &rules), true).await;
    suite.expect(addr, &get(path)).await;
    suite
        .expect(addr, &get(&format!("{path}?delay=1s")).status(504))
        .await;
    suite
        .expect(addr, &get(&format!("{disabled}?delay=1s")))
        .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteWeight: backends take shares of requests by weight (±5% over 500), none
/// for weight 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_weight() {
    let suite = Suite::start().await;
    let name = "weighted-backends";
    let rules = "    - backendRefs:\n        - {name: infra-backend-v1, port: 8080, weight: 70}\n        - {name: infra-backend-v2, port: 8080, weight: 30}\n        - {name: infra-backend-v3, port: 8080, weight: 0}\n";
    let addr = accepted(&suite, name, &on_same(name, "", rules), true).await;
    suite.expect(addr, &get("/")).await;
    let want = [
        ("infra-backend-v1", 0.7),
        ("infra-backend-v2", 0.3),
        ("infra-backend-v3", 0.0),
    ];
    let mut last = String::new();
    for _ in 0..10 {
        let shares = crate::conformance::client::distribution(addr, &get("/"), 500).await;
        let counts = shares.unwrap_or_else(|e| panic!("{e}"));
        let fits = counts
            .keys()
            .all(|b| want.iter().any(|(w, share)| w == b && *share > 0.0))
            && want.iter().all(|(backend, share)| {
                let got = counts.get(*backend).copied().unwrap_or(0) as f64 / 500.0;
                (got - share).abs() <= 0.05
            });
        if fits {
            suite.assert_nothing_rejected().await;
            return;
        }
        last = format!("{counts:?}");
    }
    panic!("the shares never matched the weights: {last}");
}

/// HTTPRouteCORS: preflights answered by Envoy for the origins, methods and headers
/// allowed (echoing concrete values where credentials are allowed), nothing for other
/// origins; actual requests forwarded with the CORS headers of the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_cors() {
    let suite = Suite::start().await;
    let route = |name: &str, rules: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: same-namespace}}]\n  rules:\n{rules}---\n"
        )
    };
    let rule = |path: &str, cors: &str| {
        format!(
            "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      filters: [{{type: CORS, cors: {{{cors}}}}}]\n      backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"
        )
    };
    suite.apply(&[
        route("cors-multiple-origins-methods-headers", &rule("/cors-1", "allowOrigins: ['https://www.foo.com', 'https://*.bar.com'], allowMethods: [GET, OPTIONS], allowHeaders: [x-header-1, x-header-2], exposeHeaders: [x-header-3, x-header-4], allowCredentials: true, maxAge: 3600")),
        route("cors-wildcard-methods", &rule("/cors-2", "allowOrigins: ['https://www.foo.com'], allowMethods: ['*']")),
        route("cors-wildcard-origin", &rule("/cors-wildcard-origin", "allowOrigins: ['*'], allowMethods: [PUT], allowCredentials: false")),
        route(
            "cors-wildcard-methods-headers",
            &[
                rule("/cors-wildcard-methods-headers", "allowOrigins: ['*'], allowMethods: ['*'], allowHeaders: ['*'], allowCredentials: true"),
                rule("/cors-wildcard-methods-headers-unauth", "allowOrigins: ['*'], allowMethods: ['*'], allowHeaders: ['*'], allowCredentials: false"),
            ]
            .concat(),
        ),
    ]
    .concat());
    let addr = suite
        .routes_accepted(
            SAME,
            "HTTPRoute",
            &[
                (INFRA, "cors-multiple-origins-methods-headers"),
                (INFRA, "cors-wildcard-methods"),
            ],
        )
        .await;
    for name in [
        "cors-multiple-origins-methods-headers",
        "cors-wildcard-methods",
        "cors-wildcard-origin",
        "cors-wildcard-methods-headers",
    ] {
        suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    }
    const ACAO: &str = "access-control-allow-origin";
    const ACAM: &str = "access-control-allow-methods";
    const ACAH: &str = "access-control-allow-headers";
    const ACEH: &str = "access-control-expose-headers";
    const ACAC: &str = "access-control-allow-credentials";
    let preflight = |path: &str, origin: &str, method: &str| {
        get(path)
            .header("Origin", origin)
            .header("Access-Control-Request-Method", method)
            .preflight()
    };
    let ok = |mut e: Expect| {
        e.statuses = vec![200, 204];
        e
    };
    for origin in [
        "https://www.foo.com",
        "https://www.bar.com",
        "https://xpto.www.bar.com",
    ] {
        let expect = ok(preflight("/cors-1", origin, "GET")
            .header("Access-Control-Request-Headers", "x-header-1, x-header-2"))
        .response_header_in(ACAO, &[origin])
        .response_header_in(ACAM, &["GET, OPTIONS", "OPTIONS, GET"])
        .response_header_in(ACAH, &["x-header-1, x-header-2", "x-header-2, x-header-1"])
        .response_header_in(ACEH, &["x-header-3, x-header-4", "x-header-4, x-header-3"])
        .response_header_in("access-control-max-age", &["3600"])
        .response_header_in(ACAC, &["true"]);
        suite.expect(addr, &expect).await;
    }
    let mut other = preflight("/cors-1", "https://foobar.com", "GET").no_response_headers(&[ACAO]);
    other.statuses = vec![200, 204, 403];
    suite.expect(addr, &other).await;
    for origin in ["https://www.foo.com", "https://www.bar.com"] {
        let expect = get("/cors-1")
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "GET")
            .header("Access-Control-Request-Headers", "x-header-1, x-header-2")
            .response_header(ACAO, origin);
        suite.expect(addr, &expect).await;
    }
    let foreign = get("/cors-1")
        .header("Origin", "https://foobar.com")
        .header("Access-Control-Request-Method", "GET")
        .no_response_headers(&[ACAO]);
    suite.expect(addr, &foreign).await;
    for _ in 0..2 {
        let expect = ok(preflight("/cors-2", "https://www.foo.com", "POST"))
            .response_header_in(ACAM, &["POST", "*"])
            .response_header(ACAO, "https://www.foo.com")
            .no_response_headers(&[ACAC]);
        suite.expect(addr, &expect).await;
    }
    for origin in ["https://foobar.com", "https://foobar.com:12345"] {
        let expect = ok(preflight("/cors-wildcard-origin", origin, "PUT"))
            .response_header_in(ACAO, &[origin, "*"])
            .response_header(ACAM, "PUT")
            .no_response_headers(&[ACAC]);
        suite.expect(addr, &expect).await;
    }
    let put = |origin: &str| {
        get("/cors-wildcard-origin")
            .method("PUT")
            .header("Origin", origin)
            .response_header_in(ACAO, &[origin, "*"])
    };
    suite.expect(addr, &put("https://foobar.com:12345")).await;
    suite
        .expect(
            addr,
            &put("https://foobar.com").no_response_headers(&[ACAC]),
        )
        .await;
    let origin = "https://other.foo.com";
    let wild = |path: &str| {
        ok(preflight(path, origin, "PUT")
            .header("Access-Control-Request-Headers", "x-header-1, x-header-2"))
    };
    let credentialed = wild("/cors-wildcard-methods-headers")
        .response_header_in(ACAO, &[origin])
        .response_header_in(ACAM, &["PUT"])
        .response_header_in(ACAH, &["x-header-1, x-header-2", "x-header-2, x-header-1"])
        .response_header_in(ACAC, &["true"]);
    suite.expect(addr, &credentialed).await;
    let open = wild("/cors-wildcard-methods-headers-unauth")
        .response_header_in(ACAO, &[origin, "*"])
        .response_header_in(ACAM, &["PUT", "*"])
        .response_header_in(
            ACAH,
            &["x-header-1, x-header-2", "x-header-2, x-header-1", "*"],
        )
        .no_response_headers(&[ACAC]);
    suite.expect(addr, &open).await;
    let actual = get("/cors-wildcard-methods-headers")
        .header("Origin", origin)
        .response_header(ACAO, origin)
        .response_header(ACAC, "true");
    suite.expect(addr, &actual).await;
    let actual = get("/cors-wildcard-methods-headers-unauth")
        .header("Origin", origin)
        .response_header_in(ACAO, &[origin, "*"])
        .no_response_headers(&[ACAC]);
    suite.expect(addr, &actual).await;
    suite.assert_nothing_rejected().await;
}
