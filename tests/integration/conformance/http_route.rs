//! The suite's HTTPRoute tests.

use crate::conformance::client::{Location, Protocol, get};
use crate::conformance::suite::{INFRA, Suite, WEB};

const SAME: (&str, &str) = (INFRA, "same-namespace");
const HTTPS_GW: (&str, &str) = (INFRA, "same-namespace-with-https-listener");

/// HTTPRouteSimpleSameNamespace: a route of the Gateway's namespace answers from its
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_simple_same_namespace() {
    let suite = Suite::start().await;
    suite.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: gateway-conformance-infra-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"#,
    );
    let route = ("HTTPRoute", INFRA, "gateway-conformance-infra-test");
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, route.2)])
        .await;
    suite.route_resolved(route, SAME).await;
    suite
        .expect(addr, &get("/").backend("infra-backend-v1"))
        .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteCrossNamespace: a route of a namespace the listener selects by label
/// attaches, and its backend of that namespace answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_cross_namespace() {
    let suite = Suite::start().await;
    suite.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross-namespace, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: web-backend, port: 8080}]}]
"#,
    );
    let gw = (INFRA, "backend-namespaces");
    let addr = suite
        .routes_accepted(gw, "HTTPRoute", &[(WEB, "cross-namespace")])
        .await;
    suite
        .route_resolved(("HTTPRoute", WEB, "cross-namespace"), gw)
        .await;
    suite
        .expect(addr, &get("/").backend("web-backend").namespace(WEB))
        .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteHTTPSListener: an HTTPS listener without a hostname completes the handshake
/// for any server name and answers 404 for a host no route has; one with a hostname
/// serves its routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_https_listener() {
    let suite = Suite::start().await;
    suite.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-https-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener}]
  hostnames: [example.org]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-https-test-no-hostname, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
"#,
    );
    let routes = [
        (INFRA, "httproute-https-test"),
        (INFRA, "httproute-https-test-no-hostname"),
    ];
    let addr = suite.routes_accepted(HTTPS_GW, "HTTPRoute", &routes).await;
    for (ns, name) in routes {
        suite
            .route_resolved(("HTTPRoute", ns, name), HTTPS_GW)
            .await;
    }
    for (host, expect) in [
        ("example.org", get("/").backend("infra-backend-v1")),
        ("unknown-example.org", get("/").status(404)),
        ("second-example.org", get("/").backend("infra-backend-v2")),
    ] {
        let https = Protocol::Https(suite.https(host));
        suite.expect_over(addr, &https, &expect.host(host)).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteHTTPSListenerDetectMisdirectedRequests: a request whose Host would choose
/// another HTTPS listener than its SNI did answers 421; one whose Host no listener's
/// route has answers 404 on the listener without a hostname.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_https_listener_detect_misdirected_requests() {
    let suite = Suite::start().await;
    let route = |n: u8, section: &str, hostnames: &str, backend: &str| {
        format!(
            r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: https-listener-detect-misdirected-requests-test-{n}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace-with-https-listener, sectionName: {section}}}]
  hostnames: {hostnames}
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /detect-misdirected-requests}}}}]
      backendRefs: [{{name: {backend}, port: 8080}}]
"#
        )
    };
    suite.apply(&route(1, "https", "[example.org]", "infra-backend-v1"));
    suite.apply(&route(2, "https-with-hostname", "[]", "infra-backend-v2"));
    suite.apply(&route(
        3,
        "https-with-wildcard-hostname",
        "[]",
        "infra-backend-v3",
    ));
    suite.apply(&route(
        4,
        "https-with-hostname-matching-wildcard",
        "[]",
        "infra-backend-v1",
    ));
    let names: Vec<String> = (1..=4)
        .map(|n| format!("https-listener-detect-misdirected-requests-test-{n}"))
        .collect();
    let routes: Vec<(&str, &str)> = names.iter().map(|n| (INFRA, n.as_str())).collect();
    let addr = suite.routes_accepted(HTTPS_GW, "HTTPRoute", &routes).await;
    for (ns, name) in &routes {
        suite
            .route_resolved(("HTTPRoute", ns, name), HTTPS_GW)
            .await;
    }
    let path = "/detect-misdirected-requests";
    for (sni, host, status, backend) in [
        ("example.org", "example.org", 200, "infra-backend-v1"),
        ("example.org", "second-example.org", 421, ""),
        ("example.org", "unknown-example.org", 404, ""),
        (
            "second-example.org",
            "second-example.org",
            200,
            "infra-backend-v2",
        ),
        ("second-example.org", "example.org", 421, ""),
        ("second-example.org", "unknown-example.org", 421, ""),
        (
            "third-example.wildcard.org",
            "third-example.wildcard.org",
            200,
            "infra-backend-v3",
        ),
        (
            "third-example.wildcard.org",
            "fith-example.wildcard.org",
            200,
            "infra-backend-v3",
        ),
        (
            "third-example.wildcard.org",
            "fourth-example.wildcard.org",
            421,
            "",
        ),
        ("third-example.wildcard.org", "second-example.org", 421, ""),
        ("third-example.wildcard.org", "unknown-example.org", 421, ""),
        (
            "fourth-example.wildcard.org",
            "fourth-example.wildcard.org",
            200,
            "infra-backend-v1",
        ),
        (
            "fourth-example.wildcard.org",
            "fith-example.wildcard.org",
            421,
            "",
        ),
        (
            "unknown-example.org",
            "example.org",
            200,
            "infra-backend-v1",
        ),
        ("unknown-example.org", "unknown-example.org", 404, ""),
    ] {
        let h2 = Protocol::H2(suite.https(sni));
        let expect = get(path).host(host).status(status).backend(backend);
        suite.expect_over(addr, &h2, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRewritePath: prefix and full path rewrites, a prefix replaced by `/`
/// without a doubled slash, with header modifications beside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_rewrite_path() {
    let suite = Suite::start().await;
    let modifier = r#"
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Header-Set, value: set-overwrites-values}]
            add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]
            remove: [X-Header-Remove]"#;
    suite.apply(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: rewrite-path, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /prefix/one}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /one}}}}
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /strip-prefix}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /full/one}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /one}}}}
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /full/rewrite-path-and-modify-headers}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /test}}}}{modifier}
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /prefix/rewrite-path-and-modify-headers}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /prefix}}}}{modifier}
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"#
    ));
    let route = ("HTTPRoute", INFRA, "rewrite-path");
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, route.2)])
        .await;
    suite.route_resolved(route, SAME).await;
    for (path, seen) in [
        ("/prefix/one/two", "/one/two"),
        ("/strip-prefix/three", "/three"),
        ("/strip-prefix", "/"),
        ("/full/one/two", "/one"),
    ] {
        let expect = get(path).backend("infra-backend-v1").sees_path(seen);
        suite.expect(addr, &expect).await;
    }
    for (path, seen) in [
        ("/full/rewrite-path-and-modify-headers/test", "/test"),
        ("/prefix/rewrite-path-and-modify-headers/one", "/prefix/one"),
    ] {
        let expect = get(path)
            .header("X-Header-Remove", "remove-val")
            .header("X-Header-Add-Append", "append-val-1")
            .header("X-Header-Set", "set-val")
            .backend("infra-backend-v1")
            .sees_path(seen)
            .sees_headers(&[
                ("X-Header-Add", "header-val-1"),
                ("X-Header-Add-Append", "append-val-1,header-val-2"),
                ("X-Header-Set", "set-overwrites-values"),
            ])
            .sees_no(&["X-Header-Remove"]);
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRedirectPortAndScheme: a redirect's port is the one it names, else the
/// well-known port of the scheme it names, else the listener's; the well-known port of
/// the Location's scheme may be left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_redirect_port_and_scheme() {
    let suite = Suite::start().await;
    let rules = |rows: &[(&str, &str)]| {
        rows.iter()
            .map(|(path, redirect)| {
                format!(
                    "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      filters: [{{type: RequestRedirect, requestRedirect: {{hostname: example.org{redirect}}}}}]\n"
                )
            })
            .collect::<String>()
    };
    suite.apply(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: same-namespace-with-http-listener-on-8080, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{{name: http, port: 8080, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: http-route-for-listener-on-port-80, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
{}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: http-route-for-listener-on-port-8080, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace-with-http-listener-on-8080}}]
  rules:
{}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: http-route-for-listener-on-port-443, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace-with-https-listener}}]
  rules:
{}"#,
        rules(&[
            ("/scheme-nil-and-port-nil", ""),
            ("/scheme-nil-and-port-80", ", port: 80"),
            ("/scheme-nil-and-port-8080", ", port: 8080"),
            ("/scheme-https-and-port-nil", ", scheme: https"),
            ("/scheme-https-and-port-443", ", scheme: https, port: 443"),
            ("/scheme-https-and-port-8443", ", scheme: https, port: 8443"),
        ]),
        rules(&[
            ("/scheme-nil-and-port-nil", ""),
            ("/scheme-nil-and-port-80", ", port: 80"),
            ("/scheme-https-and-port-nil", ", scheme: https"),
        ]),
        rules(&[
            ("/scheme-nil-and-port-nil", ""),
            ("/scheme-nil-and-port-443", ", port: 443"),
            ("/scheme-nil-and-port-8443", ", port: 8443"),
            ("/scheme-http-and-port-nil", ", scheme: http"),
            ("/scheme-http-and-port-80", ", scheme: http, port: 80"),
            ("/scheme-http-and-port-8080", ", scheme: http, port: 8080"),
        ]),
    ));
    let on_80 = suite
        .routes_accepted(
            SAME,
            "HTTPRoute",
            &[(INFRA, "http-route-for-listener-on-port-80")],
        )
        .await;
    let gw_8080 = (INFRA, "same-namespace-with-http-listener-on-8080");
    let on_8080 = suite
        .routes_accepted(
            gw_8080,
            "HTTPRoute",
            &[(INFRA, "http-route-for-listener-on-port-8080")],
        )
        .await;
    let on_443 = suite
        .routes_accepted(
            HTTPS_GW,
            "HTTPRoute",
            &[(INFRA, "http-route-for-listener-on-port-443")],
        )
        .await;
    for (route, gw) in [
        ("http-route-for-listener-on-port-80", SAME),
        ("http-route-for-listener-on-port-8080", gw_8080),
        ("http-route-for-listener-on-port-443", HTTPS_GW),
    ] {
        suite.route_resolved(("HTTPRoute", INFRA, route), gw).await;
    }
    let location = |scheme: &str, port: Option<&str>| Location {
        scheme: Some(scheme.to_string()),
        host: Some("example.org".to_string()),
        port: port.map(str::to_string),
        path: None,
    };
    for (path, scheme, port) in [
        ("/scheme-nil-and-port-nil", "http", None),
        ("/scheme-nil-and-port-80", "http", None),
        ("/scheme-nil-and-port-8080", "http", Some("8080")),
        ("/scheme-https-and-port-nil", "https", None),
        ("/scheme-https-and-port-443", "https", None),
        ("/scheme-https-and-port-8443", "https", Some("8443")),
    ] {
        let expect = get(path).redirect(302, location(scheme, port));
        suite.expect(on_80, &expect).await;
    }
    for (path, scheme, port) in [
        ("/scheme-nil-and-port-nil", "http", Some("8080")),
        ("/scheme-nil-and-port-80", "http", None),
        ("/scheme-https-and-port-nil", "https", None),
    ] {
        let expect = get(path).redirect(302, location(scheme, port));
        suite.expect(on_8080, &expect).await;
    }
    let https = Protocol::Https(suite.https("example.org"));
    for (path, scheme, port) in [
        ("/scheme-nil-and-port-nil", "https", None),
        ("/scheme-nil-and-port-443", "https", None),
        ("/scheme-nil-and-port-8443", "https", Some("8443")),
        ("/scheme-http-and-port-nil", "http", None),
        ("/scheme-http-and-port-80", "http", None),
        ("/scheme-http-and-port-8080", "http", Some("8080")),
    ] {
        let expect = get(path)
            .host("example.org")
            .redirect(302, location(scheme, port));
        suite.expect_over(on_443, &https, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}
