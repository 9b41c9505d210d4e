//! The suite's HTTPRoute matching tests: paths, headers, methods, query parameters,
//! precedence across rules and routes, hostnames and ports of listeners.

use crate::conformance::client::get;
use crate::conformance::suite::{INFRA, Listener, Suite};

const SAME: (&str, &str) = (INFRA, "same-namespace");

/// An HTTPRoute of the infra namespace on `same-namespace` with these rules (YAML list
/// items, indented by four).
fn on_same(name: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: same-namespace}}]\n  rules:\n{rules}"
    )
}

/// Applies `yaml`, waits for the route `name` to be accepted by `same-namespace` with
/// its references resolved; the Gateway's address.
async fn accepted_on_same(suite: &Suite, name: &str, yaml: &str) -> std::net::SocketAddr {
    suite.apply(yaml);
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    addr
}

/// HTTPRouteMatching: path prefixes by segment and header matches, the more specific
/// winning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_matching() {
    let suite = Suite::start().await;
    let addr = accepted_on_same(
        &suite,
        "matching",
        &on_same(
            "matching",
            r#"    - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
"#,
        ),
    )
    .await;
    for (path, header, backend) in [
        ("/", None, "infra-backend-v1"),
        ("/example", None, "infra-backend-v1"),
        ("/", Some("one"), "infra-backend-v1"),
        ("/v2", None, "infra-backend-v2"),
        ("/v2/example", None, "infra-backend-v2"),
        ("/", Some("two"), "infra-backend-v2"),
        ("/v2/", None, "infra-backend-v2"),
        ("/v2example", None, "infra-backend-v1"),
        ("/foo/v2/example", None, "infra-backend-v1"),
    ] {
        let mut expect = get(path).backend(backend);
        if let Some(v) = header {
            expect = expect.header("Version", v);
        }
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteMatchingAcrossRoutes: matches of two routes on one host ranked together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_matching_across_routes() {
    let suite = Suite::start().await;
    suite.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com, example.net]
  rules:
    - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
"#,
    );
    let routes = [(INFRA, "matching-part1"), (INFRA, "matching-part2")];
    let addr = suite.routes_accepted(SAME, "HTTPRoute", &routes).await;
    for (_, name) in routes {
        suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    }
    for (host, path, header, backend) in [
        ("example.com", "/", None, "infra-backend-v1"),
        ("example.com", "/example", None, "infra-backend-v1"),
        ("example.net", "/example", None, "infra-backend-v1"),
        ("example.com", "/example", Some("one"), "infra-backend-v1"),
        ("example.com", "/v2", None, "infra-backend-v2"),
        ("example.net", "/v2", None, "infra-backend-v1"),
        ("example.com", "/v2/example", None, "infra-backend-v2"),
        ("example.com", "/", Some("two"), "infra-backend-v2"),
    ] {
        let mut expect = get(path).host(host).backend(backend);
        if let Some(v) = header {
            expect = expect.header("Version", v);
        }
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteExactPathMatching: exact paths, case-sensitive, without a trailing slash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_exact_path_matching() {
    let suite = Suite::start().await;
    let addr = accepted_on_same(
        &suite,
        "exact-matching",
        &on_same(
            "exact-matching",
            r#"    - matches: [{path: {type: Exact, value: /one}}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{path: {type: Exact, value: /two}}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
"#,
        ),
    )
    .await;
    suite
        .expect(addr, &get("/one").backend("infra-backend-v1"))
        .await;
    suite
        .expect(addr, &get("/two").backend("infra-backend-v2"))
        .await;
    for path in ["/", "/one/example", "/two/", "/Two"] {
        suite.expect(addr, &get(path).status(404)).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteHeaderMatching: header matches, names without case; more header matches
/// win, then the earlier rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_header_matching() {
    let suite = Suite::start().await;
    let addr = accepted_on_same(
        &suite,
        "header-matching",
        &on_same(
            "header-matching",
            r#"    - matches: [{headers: [{name: version, value: one}]}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{headers: [{name: version, value: two}]}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
    - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{headers: [{name: color, value: blue}]}, {headers: [{name: color, value: green}]}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{headers: [{name: color, value: red}]}, {headers: [{name: color, value: yellow}]}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
"#,
        ),
    )
    .await;
    let v1 = "infra-backend-v1";
    let v2 = "infra-backend-v2";
    for (headers, answer) in [
        (&[("Version", "one")][..], Some(v1)),
        (&[("Version", "two")], Some(v2)),
        (&[("Version", "two"), ("Color", "orange")], Some(v1)),
        (&[("Version", "two"), ("Color", "blue")], Some(v2)),
        (&[("Color", "orange")], None),
        (&[("Some-Other-Header", "one")], None),
        (&[("Color", "blue")], Some(v1)),
        (&[("Color", "green")], Some(v1)),
        (&[("Color", "red")], Some(v2)),
        (&[("Color", "yellow")], Some(v2)),
        (&[("Color", "purple")], None),
    ] {
        let mut expect = get("/");
        for (name, value) in headers {
            expect = expect.header(name, value);
        }
        expect = match answer {
            Some(backend) => expect.backend(backend),
            None => expect.status(404),
        };
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteMethodMatching: methods, ranked below paths and above headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_method_matching() {
    let suite = Suite::start().await;
    let addr = accepted_on_same(
        &suite,
        "method-matching",
        &on_same(
            "method-matching",
            r#"    - matches: [{method: POST}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{method: GET}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
    - matches: [{path: {type: PathPrefix, value: /path1}, method: GET}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{headers: [{name: version, value: one}], method: PUT}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
    - matches: [{path: {type: PathPrefix, value: /path2}, headers: [{name: version, value: two}], method: POST}]
      backendRefs: [{name: infra-backend-v3, port: 8080}]
    - matches:
        - {path: {type: PathPrefix, value: /path3}, method: PATCH}
        - {path: {type: PathPrefix, value: /path4}, headers: [{name: version, value: three}], method: DELETE}
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{path: {type: PathPrefix, value: /path5}}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{method: PATCH}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
    - matches: [{headers: [{name: version, value: four}]}]
      backendRefs: [{name: infra-backend-v3, port: 8080}]
"#,
        ),
    )
    .await;
    for (method, path, header, answer) in [
        ("POST", "/", None, Some("infra-backend-v1")),
        ("GET", "/", None, Some("infra-backend-v2")),
        ("HEAD", "/", None, None),
        ("GET", "/path1", None, Some("infra-backend-v1")),
        ("PUT", "/", Some("one"), Some("infra-backend-v2")),
        ("POST", "/path2", Some("two"), Some("infra-backend-v3")),
        ("PATCH", "/path3", None, Some("infra-backend-v1")),
        ("DELETE", "/path4", Some("three"), Some("infra-backend-v1")),
        ("PUT", "/", None, None),
        ("DELETE", "/path4", None, None),
        ("PATCH", "/path5", None, Some("infra-backend-v1")),
        ("PATCH", "/", Some("four"), Some("infra-backend-v2")),
    ] {
        let mut expect = get(path).method(method);
        if let Some(v) = header {
            expect = expect.header("version", v);
        }
        expect = match answer {
            Some(backend) => expect.backend(backend),
            None => expect.status(404),
        };
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteQueryParamMatching: query parameters, exact and case-sensitive, ranked
/// below headers; the query reaches the backend as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_query_param_matching() {
    let suite = Suite::start().await;
    let qp = |name: &str, value: &str| format!("{{name: {name}, value: {value}}}");
    let whale = qp("animal", "whale");
    let addr = accepted_on_same(
        &suite,
        "query-param-matching",
        &on_same(
            "query-param-matching",
            &format!(
                r#"    - matches: [{{queryParams: [{whale}]}}]
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{queryParams: [{dolphin}]}}]
      backendRefs: [{{name: infra-backend-v2, port: 8080}}]
    - matches: [{{queryParams: [{dolphin}, {blue}]}}, {{queryParams: [{upper}]}}]
      backendRefs: [{{name: infra-backend-v3, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /path1}}, queryParams: [{whale}]}}]
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{headers: [{{name: version, value: one}}], queryParams: [{whale}]}}]
      backendRefs: [{{name: infra-backend-v2, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /path2}}, headers: [{{name: version, value: two}}], queryParams: [{whale}]}}]
      backendRefs: [{{name: infra-backend-v3, port: 8080}}]
    - matches:
        - {{path: {{type: PathPrefix, value: /path3}}, queryParams: [{shark}]}}
        - {{path: {{type: PathPrefix, value: /path4}}, headers: [{{name: version, value: three}}], queryParams: [{kraken}]}}
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{path: {{type: PathPrefix, value: /path5}}}}]
      backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    - matches: [{{queryParams: [{hydra}]}}]
      backendRefs: [{{name: infra-backend-v2, port: 8080}}]
    - matches: [{{headers: [{{name: version, value: four}}]}}]
      backendRefs: [{{name: infra-backend-v3, port: 8080}}]
"#,
                dolphin = qp("animal", "dolphin"),
                blue = qp("color", "blue"),
                upper = qp("ANIMAL", "Whale"),
                shark = qp("animal", "shark"),
                kraken = qp("animal", "kraken"),
                hydra = qp("animal", "hydra"),
            ),
        ),
    )
    .await;
    for (path, header, answer) in [
        ("/?animal=whale", None, Some("infra-backend-v1")),
        ("/?animal=dolphin", None, Some("infra-backend-v2")),
        (
            "/?animal=dolphin&color=blue",
            None,
            Some("infra-backend-v3"),
        ),
        ("/?ANIMAL=Whale", None, Some("infra-backend-v3")),
        (
            "/?animal=whale&otherparam=irrelevant",
            None,
            Some("infra-backend-v1"),
        ),
        (
            "/?animal=dolphin&color=yellow",
            None,
            Some("infra-backend-v2"),
        ),
        ("/?color=blue", None, None),
        ("/?animal=dog", None, None),
        ("/?animal=whaledolphin", None, None),
        ("/", None, None),
        ("/path1?animal=whale", None, Some("infra-backend-v1")),
        ("/?animal=whale", Some("one"), Some("infra-backend-v2")),
        ("/path2?animal=whale", Some("two"), Some("infra-backend-v3")),
        ("/path3?animal=shark", None, Some("infra-backend-v1")),
        (
            "/path4?animal=kraken",
            Some("three"),
            Some("infra-backend-v1"),
        ),
        ("/?animal=shark", None, None),
        ("/path4?animal=kraken", None, None),
        ("/path5?animal=hydra", None, Some("infra-backend-v1")),
        ("/?animal=hydra", Some("four"), Some("infra-backend-v3")),
    ] {
        let mut expect = get(path);
        if let Some(v) = header {
            expect = expect.header("version", v);
        }
        expect = match answer {
            Some(backend) => expect.backend(backend),
            None => expect.status(404),
        };
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRoutePathMatchOrder: exact paths before prefixes, longer prefixes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_path_match_order() {
    let suite = Suite::start().await;
    let rule = |kind: &str, path: &str, backend: &str| {
        format!(
            "    - matches: [{{path: {{type: {kind}, value: {path}}}}}]\n      backendRefs: [{{name: {backend}, port: 8080}}]\n"
        )
    };
    let rules = [
        rule("Exact", "/match", "infra-backend-v1"),
        rule("Exact", "/match/exact", "infra-backend-v2"),
        rule("Exact", "/match/exact/one", "infra-backend-v3"),
        rule("PathPrefix", "/match/", "infra-backend-v3"),
        rule("PathPrefix", "/match/prefix/", "infra-backend-v1"),
        rule("PathPrefix", "/match/prefix/one", "infra-backend-v2"),
    ]
    .concat();
    let addr = accepted_on_same(
        &suite,
        "path-matching-order",
        &on_same("path-matching-order", &rules),
    )
    .await;
    for (path, backend) in [
        ("/match/exact/one", "infra-backend-v3"),
        ("/match/exact", "infra-backend-v2"),
        ("/match", "infra-backend-v1"),
        ("/match/prefix/one/any", "infra-backend-v2"),
        ("/match/prefix/any", "infra-backend-v1"),
        ("/match/any", "infra-backend-v3"),
    ] {
        suite.expect(addr, &get(path).backend(backend)).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteNamedRule: a rule's `name` is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_named_rule() {
    let suite = Suite::start().await;
    let addr = accepted_on_same(
        &suite,
        "http-named-rules",
        &on_same(
            "http-named-rules",
            r#"    - name: named-rule
      matches: [{path: {type: PathPrefix, value: /named}}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
    - matches: [{path: {type: PathPrefix, value: /unnamed}}]
      backendRefs: [{name: infra-backend-v2, port: 8080}]
"#,
        ),
    )
    .await;
    suite.expect(addr, &get("/named")).await;
    suite.expect(addr, &get("/unnamed")).await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteNoBackendRefs: a rule without backends (field left out, or empty) answers
/// 500 and resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_no_backend_refs() {
    let suite = Suite::start().await;
    let addr = accepted_on_same(
        &suite,
        "omitted-backendrefs",
        &on_same(
            "omitted-backendrefs",
            r#"    - matches: [{path: {type: Exact, value: /omitted-no-forward}}]
    - matches: [{path: {type: Exact, value: /empty-no-forward}}]
      backendRefs: []
    - matches: [{path: {type: PathPrefix, value: /}}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
"#,
        ),
    )
    .await;
    suite
        .expect(addr, &get("/forward").backend("infra-backend-v1"))
        .await;
    suite
        .expect(addr, &get("/omitted-no-forward").status(500))
        .await;
    suite
        .expect(addr, &get("/empty-no-forward").status(500))
        .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteMultipleGateways: one route on two Gateways beside routes of each; each
/// Gateway answers with its own routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_multiple_gateways() {
    let suite = Suite::start().await;
    suite.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: multiple-gateways-shared-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}, {name: all-namespaces}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /shared}}]
      backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: same-namespace-dedicated-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: all-namespaces-dedicated-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  rules: [{backendRefs: [{name: infra-backend-v3, port: 8080}]}]
"#,
    );
    for (gw, dedicated, backend) in [
        (
            "same-namespace",
            "same-namespace-dedicated-route",
            "infra-backend-v2",
        ),
        (
            "all-namespaces",
            "all-namespaces-dedicated-route",
            "infra-backend-v3",
        ),
    ] {
        let addr = suite
            .routes_accepted(
                (INFRA, gw),
                "HTTPRoute",
                &[
                    (INFRA, "multiple-gateways-shared-route"),
                    (INFRA, dedicated),
                ],
            )
            .await;
        suite
            .expect(addr, &get("/shared").backend("infra-backend-v1"))
            .await;
        suite.expect(addr, &get("/").backend(backend)).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteHostnameIntersection: a route attaches to the listeners whose hostnames
/// intersect its own and serves only the intersection; a route intersecting none is
/// `NoMatchingListenerHostname` and counted nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_hostname_intersection() {
    let suite = Suite::start().await;
    let route = |name: &str, gw: &str, hostnames: &str, path: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {gw}, namespace: gateway-conformance-infra}}]\n  hostnames: {hostnames}\n  rules:\n    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      backendRefs: [{{name: {backend}, port: 8080}}]\n---\n"
        )
    };
    let gw = "httproute-hostname-intersection";
    let all = "httproute-hostname-intersection-all";
    suite.apply(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gw}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
    - {{name: listener-1, port: 80, protocol: HTTP, hostname: very.specific.com, allowedRoutes: {{namespaces: {{from: Same}}}}}}
    - {{name: listener-2, port: 80, protocol: HTTP, hostname: "*.wildcard.io", allowedRoutes: {{namespaces: {{from: Same}}}}}}
    - {{name: listener-3, port: 80, protocol: HTTP, hostname: "*.anotherwildcard.io", allowedRoutes: {{namespaces: {{from: Same}}}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {all}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{{name: listener-1, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}]
---
{}{}{}{}{}{}"#,
        route("specific-host-matches-listener-specific-host", gw, "[non.matching.com, '*.nonmatchingwildcard.io', very.specific.com]", "/s1", "infra-backend-v1"),
        route("specific-host-matches-listener-wildcard-host", gw, "[non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io]", "/s2", "infra-backend-v2"),
        route("wildcard-host-matches-listener-specific-host", gw, "[non.matching.com, '*.specific.com']", "/s3", "infra-backend-v3"),
        route("wildcard-host-matches-listener-wildcard-host", gw, "['*.anotherwildcard.io']", "/s4", "infra-backend-v1"),
        route("no-intersecting-hosts", gw, "[specific.but.wrong.com, wildcard.io]", "/s5", "infra-backend-v2"),
        route(all, all, "[first.com, sub.first.com, second.com, sub.second.com]", "/", "infra-backend-v2"),
    ));
    let routes = [
        (INFRA, "specific-host-matches-listener-specific-host"),
        (INFRA, "specific-host-matches-listener-wildcard-host"),
        (INFRA, "wildcard-host-matches-listener-specific-host"),
        (INFRA, "wildcard-host-matches-listener-wildcard-host"),
    ];
    let addr = suite
        .routes_accepted((INFRA, gw), "HTTPRoute", &routes)
        .await;
    for (ns, name) in routes {
        suite
            .route_resolved(("HTTPRoute", ns, name), (INFRA, gw))
            .await;
    }
    for (host, path, answer) in [
        ("very.specific.com", "/s1", Some("infra-backend-v1")),
        ("very.specific.com:1234", "/s1", Some("infra-backend-v1")),
        ("non.matching.com", "/s1", None),
        ("foo.nonmatchingwildcard.io", "/s1", None),
        ("foo.wildcard.io", "/s1", None),
        ("very.specific.com", "/non-matching-prefix", None),
        ("foo.wildcard.io", "/s2", Some("infra-backend-v2")),
        ("bar.wildcard.io", "/s2", Some("infra-backend-v2")),
        ("foo.bar.wildcard.io", "/s2", Some("infra-backend-v2")),
        ("non.matching.com", "/s2", None),
        ("wildcard.io", "/s2", None),
        ("very.specific.com", "/s2", None),
        ("foo.wildcard.io", "/non-matching-prefix", None),
        ("very.specific.com", "/s3", Some("infra-backend-v3")),
        ("non.matching.com", "/s3", None),
        ("foo.specific.com", "/s3", None),
        ("foo.wildcard.io", "/s3", None),
        ("very.specific.com", "/non-matching-prefix", None),
        ("foo.anotherwildcard.io", "/s4", Some("infra-backend-v1")),
        ("bar.anotherwildcard.io", "/s4", Some("infra-backend-v1")),
        (
            "foo.bar.anotherwildcard.io",
            "/s4",
            Some("infra-backend-v1"),
        ),
        ("anotherwildcard.io", "/s4", None),
        ("foo.wildcard.io", "/s4", None),
        ("very.specific.com", "/s4", None),
        ("foo.anotherwildcard.io", "/non-matching-prefix", None),
        ("specific.but.wrong.com", "/s5", None),
        ("wildcard.io", "/s5", None),
    ] {
        let expect = get(path).host(host);
        let expect = match answer {
            Some(backend) => expect.backend(backend),
            None => expect.status(404),
        };
        suite.expect(addr, &expect).await;
    }
    suite
        .route_condition(
            ("HTTPRoute", INFRA, "no-intersecting-hosts"),
            (INFRA, gw),
            ("Accepted", "False", "NoMatchingListenerHostname"),
        )
        .await;
    let http = &["HTTPRoute"][..];
    let ok = &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")][..];
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[
                Listener {
                    name: "listener-1",
                    kinds: http,
                    attached: 2,
                    conditions: ok,
                },
                Listener {
                    name: "listener-2",
                    kinds: http,
                    attached: 1,
                    conditions: ok,
                },
                Listener {
                    name: "listener-3",
                    kinds: http,
                    attached: 1,
                    conditions: ok,
                },
            ],
        )
        .await;
    let addr = suite
        .routes_accepted((INFRA, all), "HTTPRoute", &[(INFRA, all)])
        .await;
    suite
        .route_resolved(("HTTPRoute", INFRA, all), (INFRA, all))
        .await;
    for (host, found) in [
        ("first.com", true),
        ("sub.first.com", true),
        ("second.com", true),
        ("sub.second.com", true),
        ("third.com", false),
        ("sub.third.com", false),
    ] {
        let expect = get("/").host(host);
        let expect = if found {
            expect.backend("infra-backend-v2")
        } else {
            expect.status(404)
        };
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteListenerHostnameMatching: a request goes to the most specific listener
/// whose hostname covers its Host, and to the routes attached to that listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_listener_hostname_matching() {
    let suite = Suite::start().await;
    let gw = "httproute-listener-hostname-matching";
    let route = |name: &str, sections: &[&str], backend: &str| {
        let parents: Vec<String> = sections
            .iter()
            .map(|s| {
                format!("{{name: {gw}, namespace: gateway-conformance-infra, sectionName: {s}}}")
            })
            .collect();
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{}]\n  rules: [{{backendRefs: [{{name: {backend}, port: 8080}}]}}]\n---\n",
            parents.join(", ")
        )
    };
    suite.apply(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gw}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
    - {{name: listener-1, port: 80, protocol: HTTP, hostname: bar.com, allowedRoutes: {{namespaces: {{from: Same}}}}}}
    - {{name: listener-2, port: 80, protocol: HTTP, hostname: foo.bar.com, allowedRoutes: {{namespaces: {{from: Same}}}}}}
    - {{name: listener-3, port: 80, protocol: HTTP, hostname: "*.bar.com", allowedRoutes: {{namespaces: {{from: Same}}}}}}
    - {{name: listener-4, port: 80, protocol: HTTP, hostname: "*.foo.com", allowedRoutes: {{namespaces: {{from: Same}}}}}}
---
{}{}{}"#,
        route("backend-v1", &["listener-1"], "infra-backend-v1"),
        route("backend-v2", &["listener-2"], "infra-backend-v2"),
        route("backend-v3", &["listener-3", "listener-4"], "infra-backend-v3"),
    ));
    let routes = [
        (INFRA, "backend-v1"),
        (INFRA, "backend-v2"),
        (INFRA, "backend-v3"),
    ];
    let addr = suite
        .routes_accepted((INFRA, gw), "HTTPRoute", &routes)
        .await;
    for (ns, name) in routes {
        suite
            .route_resolved(("HTTPRoute", ns, name), (INFRA, gw))
            .await;
    }
    for (host, answer) in [
        ("bar.com", Some("infra-backend-v1")),
        ("foo.bar.com", Some("infra-backend-v2")),
        ("baz.bar.com", Some("infra-backend-v3")),
        ("boo.bar.com", Some("infra-backend-v3")),
        ("multiple.prefixes.bar.com", Some("infra-backend-v3")),
        ("multiple.prefixes.foo.com", Some("infra-backend-v3")),
        ("foo.com", None),
        ("no.matching.host", None),
    ] {
        let expect = get("/").host(host);
        let expect = match answer {
            Some(backend) => expect.backend(backend),
            None => expect.status(404),
        };
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteListenerPortMatching: a parentRef's port attaches a route to the listeners
/// on that port (with its sectionName, to that one), each port served apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_listener_port_matching() {
    let suite = Suite::start().await;
    let gw = "httproute-listener-port-matching";
    let route = |name: &str, parent: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {gw}, namespace: gateway-conformance-infra, {parent}}}]\n  rules: [{{backendRefs: [{{name: {backend}, port: 8080}}]}}]\n---\n"
        )
    };
    let listener = |name: &str, port: u16, host: &str| {
        format!(
            "    - {{name: {name}, port: {port}, protocol: HTTP, hostname: {host}, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n"
        )
    };
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n{}{}{}{}{}---\n{}{}{}",
        listener("listener-1", 80, "foo.com"),
        listener("listener-2", 8080, "foo.com"),
        listener("listener-3", 8080, "bar.com"),
        listener("listener-4", 8090, "foo.com"),
        listener("listener-5", 8090, "bar.com"),
        route("backend-v1", "port: 80", "infra-backend-v1"),
        route("backend-v2", "port: 8080", "infra-backend-v2"),
        route("backend-v3", "port: 8090, sectionName: listener-4", "infra-backend-v3"),
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, gw),
            "HTTPRoute",
            &[
                (INFRA, "backend-v1"),
                (INFRA, "backend-v2"),
                (INFRA, "backend-v3"),
            ],
        )
        .await;
    for name in ["backend-v1", "backend-v2", "backend-v3"] {
        suite
            .route_resolved(("HTTPRoute", INFRA, name), (INFRA, gw))
            .await;
    }
    for (host, port, answer) in [
        ("foo.com", 80, Some("infra-backend-v1")),
        ("foo.com:8080", 8080, Some("infra-backend-v2")),
        ("bar.com:8080", 8080, Some("infra-backend-v2")),
        ("foo.com:8090", 8090, Some("infra-backend-v3")),
        ("bar.com:8090", 8090, None),
    ] {
        let at = std::net::SocketAddr::new(addr.ip(), port);
        let expect = get("/").host(host);
        let expect = match answer {
            Some(backend) => expect.backend(backend),
            None => expect.status(404),
        };
        suite.expect(at, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}
