//! The suite's HTTPRoute tests of references (backends, parents, ReferenceGrants), of
//! backend protocols and Service shapes, of retries and of status generations.

use crate::conformance::client::{Protocol, get};
use crate::conformance::suite::{APP, GW, INFRA, Suite, WEB};

const SAME: (&str, &str) = (INFRA, "same-namespace");

/// An HTTPRoute `ns/name` with these parentRefs (a YAML flow list) and rules.
fn route(ns: &str, name: &str, parents: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: {parents}\n  rules:\n{rules}"
    )
}

/// One rule without matches sending to `backend` (a YAML flow mapping).
fn to(backend: &str) -> String {
    format!("    - backendRefs: [{backend}]\n")
}

/// A route of `same-namespace` whose only backend does not resolve: accepted,
/// `ResolvedRefs` False with `reason`, and its requests answered 500.
async fn unresolved(suite: &Suite, name: &str, backend: &str, reason: &str, path: &str) {
    suite.apply(&route(
        INFRA,
        name,
        "[{name: same-namespace}]",
        &to(backend),
    ));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite
        .route_condition(
            ("HTTPRoute", INFRA, name),
            SAME,
            ("ResolvedRefs", "False", reason),
        )
        .await;
    suite.expect(addr, &get(path).status(500)).await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteInvalidBackendRefUnknownKind: a backend of a kind Isobar does not know
/// answers 500, `InvalidKind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_backend_ref_unknown_kind() {
    let suite = Suite::start().await;
    let backend =
        "{group: unknownkind.example.com, kind: NonExistent, name: infra-backend-v1, port: 8080}";
    unresolved(
        &suite,
        "invalid-backend-ref-unknown-kind",
        backend,
        "InvalidKind",
        "/v2",
    )
    .await;
}

/// HTTPRouteInvalidCrossNamespaceBackendRef: a backend of another namespace without a
/// ReferenceGrant answers 500, `RefNotPermitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_cross_namespace_backend_ref() {
    let suite = Suite::start().await;
    let backend = "{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}";
    unresolved(
        &suite,
        "invalid-cross-namespace-backend-ref",
        backend,
        "RefNotPermitted",
        "/",
    )
    .await;
}

/// HTTPRouteInvalidNonExistentBackendRef: a Service that does not exist answers 500,
/// `BackendNotFound`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_non_existent_backend_ref() {
    let suite = Suite::start().await;
    let backend = "{name: nonexistent, namespace: gateway-conformance-infra, port: 8080}";
    unresolved(
        &suite,
        "invalid-nonexistent-backend-ref",
        backend,
        "BackendNotFound",
        "/",
    )
    .await;
}

/// HTTPRouteInvalidReferenceGrant: ReferenceGrants that each miss one part of the
/// reference permit nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_reference_grant() {
    let suite = Suite::start().await;
    let grant = |ns: &str, name: &str, from: (&str, &str, &str), to: (&str, &str, &str)| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  from: [{{group: '{}', kind: {}, namespace: {}}}]\n  to: [{{group: '{}', kind: {}, name: {}}}]\n---\n",
            from.0, from.1, from.2, to.0, to.1, to.2
        )
    };
    let (gw, infra) = ("gateway.networking.k8s.io", INFRA);
    suite.apply(
        &[
            grant(
                INFRA,
                "reference-grant-wrong-namespace",
                (gw, "HTTPRoute", infra),
                ("", "Service", "web-backend"),
            ),
            grant(
                WEB,
                "reference-grant-wrong-from-group",
                ("not-the-group-youre-looking-for", "HTTPRoute", infra),
                ("", "Service", "web-backend"),
            ),
            grant(
                WEB,
                "reference-grant-wrong-from-kind",
                (gw, "Gateway", infra),
                ("", "Service", "web-backend"),
            ),
            grant(
                WEB,
                "reference-grant-wrong-from-namespace",
                (gw, "HTTPRoute", "not-the-namespace-youre-looking-for"),
                ("", "Service", "web-backend"),
            ),
            grant(
                WEB,
                "reference-grant-wrong-to-group",
                (gw, "HTTPRoute", infra),
                ("not-the-group-youre-looking-for", "Service", "web-backend"),
            ),
            grant(
                WEB,
                "reference-grant-wrong-to-kind",
                (gw, "HTTPRoute", infra),
                ("", "Secret", "web-backend"),
            ),
            grant(
                WEB,
                "reference-grant-wrong-to-name",
                (gw, "HTTPRoute", infra),
                ("", "Secret", "not-the-service-youre-looking-for"),
            ),
        ]
        .concat(),
    );
    let backend = "{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}";
    unresolved(&suite, "reference-grant", backend, "RefNotPermitted", "/").await;
}

/// HTTPRouteReferenceGrant: a ReferenceGrant lets a route send to another namespace's
/// Service; without it that share answers 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_reference_grant() {
    let suite = Suite::start().await;
    suite.apply(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {name: reference-grant, namespace: gateway-conformance-web-backend}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]\n  to: [{group: '', kind: Service, name: web-backend}]\n",
    );
    let backend = "{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}";
    suite.apply(&route(
        INFRA,
        "reference-grant",
        "[{name: same-namespace}]",
        &to(backend),
    ));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, "reference-grant")])
        .await;
    suite
        .route_resolved(("HTTPRoute", INFRA, "reference-grant"), SAME)
        .await;
    suite
        .expect(addr, &get("/").backend("web-backend").namespace(WEB))
        .await;
    suite.delete(GW, "ReferenceGrant", WEB, "reference-grant");
    suite.expect(addr, &get("/").status(500)).await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRoutePartiallyInvalidViaInvalidReferenceGrant: a grant for one Service permits
/// that one only; the rule sending to another answers 500, the rest is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_partially_invalid_via_invalid_reference_grant() {
    let suite = Suite::start().await;
    suite.apply(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {name: invalid-reference-grant, namespace: gateway-conformance-app-backend}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]\n  to: [{group: '', kind: Service, name: app-backend-v1}]\n",
    );
    let rules = "    - matches: [{path: {type: PathPrefix, value: /v2}}]\n      backendRefs: [{name: app-backend-v2, namespace: gateway-conformance-app-backend, port: 8080}]\n    - backendRefs: [{name: app-backend-v1, namespace: gateway-conformance-app-backend, port: 8080}]\n";
    let name = "invalid-reference-grant";
    suite.apply(&route(INFRA, name, "[{name: same-namespace}]", rules));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite
        .route_condition(
            ("HTTPRoute", INFRA, name),
            SAME,
            ("ResolvedRefs", "False", "RefNotPermitted"),
        )
        .await;
    suite.expect(addr, &get("/v2").status(500)).await;
    suite
        .expect(addr, &get("/").backend("app-backend-v1").namespace(APP))
        .await;
    suite.assert_nothing_rejected().await;
}

/// A route that attaches to no listener of `gw`: its references resolve (unless
/// `resolved` is false), it is not accepted with `reason`, and the Gateway counts no
/// route.
async fn not_attached(
    suite: &Suite,
    (ns, name): (&str, &str),
    gw: (&str, &str),
    reason: &str,
    resolved: bool,
) {
    if resolved {
        suite.route_resolved(("HTTPRoute", ns, name), gw).await;
    }
    suite
        .route_condition(("HTTPRoute", ns, name), gw, ("Accepted", "False", reason))
        .await;
    suite.no_accepted_parents(("HTTPRoute", ns, name)).await;
    suite.zero_routes(gw).await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteInvalidCrossNamespaceParentRef: a route of a namespace the listener does
/// not take is `NotAllowedByListeners`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_cross_namespace_parent_ref() {
    let suite = Suite::start().await;
    let name = "invalid-cross-namespace-parent-ref";
    suite.apply(&route(
        WEB,
        name,
        "[{name: same-namespace, namespace: gateway-conformance-infra}]",
        &to("{name: web-backend, port: 8080}"),
    ));
    not_attached(&suite, (WEB, name), SAME, "NotAllowedByListeners", true).await;
}

/// HTTPRouteInvalidParentRefNotMatchingListenerPort: a parentRef port no listener has
/// is `NoMatchingParent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_parent_ref_not_matching_listener_port() {
    let suite = Suite::start().await;
    let name = "httproute-listener-not-matching-route-port";
    suite.apply(&route(
        INFRA,
        name,
        "[{name: same-namespace, namespace: gateway-conformance-infra, port: 81}]",
        &to("{kind: Service, name: infra-backend-v1, port: 8080}"),
    ));
    not_attached(&suite, (INFRA, name), SAME, "NoMatchingParent", true).await;
}

/// HTTPRouteInvalidParentRefNotMatchingSectionName: a sectionName no listener has is
/// `NoMatchingParent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_parent_ref_not_matching_section_name() {
    let suite = Suite::start().await;
    let name = "httproute-listener-not-matching-section-name";
    suite.apply(&route(
        INFRA,
        name,
        "[{name: same-namespace, namespace: gateway-conformance-infra, port: 80, sectionName: http1}]",
        &to("{kind: Service, name: infra-backend-v1, port: 8080}"),
    ));
    not_attached(&suite, (INFRA, name), SAME, "NoMatchingParent", false).await;
}

/// HTTPRouteInvalidParentRefSectionNameNotMatchingPort: a parentRef whose sectionName
/// names a listener on another port than its port is `NoMatchingParent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_invalid_parent_ref_section_name_not_matching_port() {
    let suite = Suite::start().await;
    let gw = "gateway-with-one-not-matching-port-and-section-name-route";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners: [{{name: http, port: 80, protocol: HTTP, allowedRoutes: {{kinds: [{{kind: HTTPRoute}}], namespaces: {{from: All}}}}}}]\n"
    ));
    let name = "httproute-listener-section-name-not-matching-port";
    suite.apply(&route(
        INFRA,
        name,
        &format!(
            "[{{name: {gw}, namespace: gateway-conformance-infra, sectionName: http, port: 81}}]"
        ),
        &to("{kind: Service, name: infra-backend-v1, port: 8080}"),
    ));
    not_attached(
        &suite,
        (INFRA, name),
        (INFRA, gw),
        "NoMatchingParent",
        false,
    )
    .await;
}

/// HTTPRouteDisallowedKind: a listener that takes TLSRoutes only leaves an HTTPRoute
/// `NotAllowedByListeners`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_disallowed_kind() {
    let suite = Suite::start().await;
    let gw = "tlsroutes-only";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n    - name: tls\n      port: 443\n      protocol: TLS\n      tls: {{mode: Passthrough}}\n      allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}\n"
    ));
    suite
        .gateway_condition((INFRA, gw), ("Programmed", "True", ""))
        .await;
    suite
        .gateway_condition((INFRA, gw), ("Accepted", "True", ""))
        .await;
    let name = "disallowed-kind";
    suite.apply(&route(
        INFRA,
        name,
        &format!("[{{name: {gw}, namespace: gateway-conformance-infra}}]"),
        &to("{name: infra-backend-v1, port: 8080}"),
    ));
    not_attached(
        &suite,
        (INFRA, name),
        (INFRA, gw),
        "NotAllowedByListeners",
        true,
    )
    .await;
}

/// HTTPRouteObservedGenerationBump: an edit of a route's spec moves every condition of
/// its parents to the new generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_observed_generation_bump() {
    let suite = Suite::start().await;
    let name = "observed-generation-bump";
    let yaml = |backend: &str| {
        route(
            INFRA,
            name,
            "[{name: same-namespace}]",
            &to(&format!("{{name: {backend}, port: 8080}}")),
        )
    };
    suite.apply(&yaml("infra-backend-v1"));
    suite
        .route_condition(("HTTPRoute", INFRA, name), SAME, ("Accepted", "True", ""))
        .await;
    let before = suite.get(GW, "HTTPRoute", INFRA, name)["metadata"]["generation"].clone();
    suite.apply(&yaml("infra-backend-v2"));
    suite
        .route_condition(("HTTPRoute", INFRA, name), SAME, ("Accepted", "True", ""))
        .await;
    suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    let after = suite.get(GW, "HTTPRoute", INFRA, name)["metadata"]["generation"].clone();
    assert_ne!(before, after, "the generation did not move");
}

/// HTTPRouteBackendProtocolH2C: a Service port of appProtocol `kubernetes.io/h2c` is
/// called over HTTP/2 in clear text, from a client speaking it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_backend_protocol_h2c() {
    let suite = Suite::start().await;
    let name = "backend-protocol-h2c";
    suite.apply(&route(
        INFRA,
        name,
        "[{name: same-namespace}]",
        &to("{name: infra-backend-v1, port: 8081}"),
    ));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite
        .expect_over(addr, &Protocol::H2c, &get("/").backend("infra-backend-v1"))
        .await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteBackendProtocolWebSocket: a Service port of appProtocol `kubernetes.io/ws`
/// takes WebSocket upgrades; frames go both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_backend_protocol_websocket() {
    let suite = Suite::start().await;
    let name = "backend-protocol-ws";
    suite.apply(&route(
        INFRA,
        name,
        "[{name: same-namespace}]",
        &to("{name: infra-backend-v1, port: 8082}"),
    ));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    let host = addr.to_string();
    let mut in_a_row = 0;
    let start = std::time::Instant::now();
    while in_a_row < 3 {
        match crate::conformance::ws::round_trip(addr, &host, "/ws", "Websocket Support!").await {
            Ok(text) if text == "Websocket Support!" => in_a_row += 1,
            other => {
                in_a_row = 0;
                assert!(
                    start.elapsed() < crate::conformance::client::CONSISTENCY,
                    "no WebSocket echo through Envoy: {other:?}\n{}",
                    suite.logs()
                );
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteServiceTypes: Services without a selector and headless Services are sent
/// to at the endpoints of their EndpointSlices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_service_types() {
    let suite = Suite::start().await;
    let rule = |path: &str, service: &str| {
        format!(
            "    - matches: [{{path: {{type: Exact, value: {path}}}}}]\n      backendRefs: [{{name: {service}, port: 8080}}]\n"
        )
    };
    let rules = [
        rule("/manual-endpointslices", "manual-endpointslices"),
        rule("/headless", "headless"),
        rule(
            "/headless-manual-endpointslices",
            "headless-manual-endpointslices",
        ),
    ]
    .concat();
    let service = |name: &str, headless: bool, selector: bool| {
        let mut spec = serde_json::json!({"ports": [{"name": "first-port", "protocol": "TCP", "port": 8080, "targetPort": 3000}]});
        if headless {
            spec["clusterIP"] = serde_json::json!("None");
        }
        if selector {
            spec["selector"] = serde_json::json!({"app": "infra-backend-v1"});
        }
        serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": INFRA}, "spec": spec}).to_string()
    };
    let slice = |service: &str, family: &str, ips: &[&str]| {
        let endpoints: Vec<serde_json::Value> = ips
            .iter()
            .map(|ip| serde_json::json!({"addresses": [ip], "conditions": {"ready": true, "serving": true, "terminating": false}}))
            .collect();
        serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{service}-{family}"), "namespace": INFRA, "labels": {"kubernetes.io/service-name": service}},
            "addressType": if family == "ip4" { "IPv4" } else { "IPv6" },
            "ports": [{"name": "first-port", "port": 3000, "protocol": "TCP"}],
            "endpoints": endpoints,
        })
        .to_string()
    };
    suite.apply(&service("manual-endpointslices", false, false));
    suite.apply(&service("headless", true, true));
    suite.apply(&service("headless-manual-endpointslices", true, false));
    for s in ["manual-endpointslices", "headless-manual-endpointslices"] {
        suite.apply(&slice(s, "ip4", &[]));
        suite.apply(&slice(s, "ip6", &[]));
    }
    // The headless Service's own slice, as Kubernetes keeps it for its selector.
    let pods = suite.pods_of(INFRA, "infra-backend-v1");
    let pod_ips: Vec<String> = pods.iter().map(|ip| ip.to_string()).collect();
    let ips: Vec<&str> = pod_ips.iter().map(String::as_str).collect();
    suite.apply(&slice("headless", "ip4", &ips));
    let name = "service-types";
    suite.apply(&route(INFRA, name, "[{name: same-namespace}]", &rules));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    for s in ["manual-endpointslices", "headless-manual-endpointslices"] {
        suite.apply(&slice(s, "ip4", &ips));
    }
    for path in [
        "/manual-endpointslices",
        "/headless-manual-endpointslices",
        "/headless",
    ] {
        suite
            .expect(addr, &get(path).backend("infra-backend-v1"))
            .await;
    }
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRetry: a rule's `retry` retries the codes it lists, `attempts` times after
/// the first; other codes and exhausted retries answer the backend's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_retry() {
    let suite = Suite::start().await;
    let name = "retries";
    let rules = "    - matches: [{path: {type: PathPrefix, value: /retry/code-500-attempts-3}}]\n      retry: {codes: [500], attempts: 3}\n      backendRefs: [{name: infra-backend-v3, port: 8080}]\n    - matches: [{path: {type: PathPrefix, value: /retry/code-all-attempts-2}}]\n      retry: {codes: [500, 502, 503, 504], attempts: 2}\n      backendRefs: [{name: infra-backend-v3, port: 8080}]\n";
    suite.apply(&route(INFRA, name, "[{name: same-namespace}]", rules));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    for (path, code, after, status) in [
        ("/retry/code-500-attempts-3", 500, 2, 200),
        ("/retry/code-500-attempts-3", 500, 4, 500),
        ("/retry/code-500-attempts-3", 503, 2, 503),
        ("/retry/code-all-attempts-2", 500, 1, 200),
        ("/retry/code-all-attempts-2", 500, 3, 500),
        ("/retry/code-all-attempts-2", 502, 1, 200),
        ("/retry/code-all-attempts-2", 502, 3, 502),
        ("/retry/code-all-attempts-2", 503, 1, 200),
        ("/retry/code-all-attempts-2", 503, 3, 503),
        ("/retry/code-all-attempts-2", 504, 1, 200),
        ("/retry/code-all-attempts-2", 504, 3, 504),
    ] {
        retries(
            &suite,
            addr,
            path,
            &format!("responseCode={code}&succeedAfter={after}"),
            &[status],
        )
        .await;
    }
    suite.assert_nothing_rejected().await;
}

/// The suite's `assertConsistentRetryBehaviour`: `path?query&uuid=…` (a fresh simulation
/// each time) answered with one of `statuses` (from `infra-backend-v3` when 200) three
/// times in a row, within 30 s.
async fn retries(
    suite: &Suite,
    addr: std::net::SocketAddr,
    path: &str,
    query: &str,
    statuses: &[u16],
) {
    static PROBE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut in_a_row = 0;
    let start = std::time::Instant::now();
    while in_a_row < 3 {
        let probe = PROBE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let uri = format!("{path}?{query}&uuid=probe-{probe}");
        let mut expect = get(&uri);
        expect.statuses = statuses.to_vec();
        if statuses == [200] {
            expect = expect.backend("infra-backend-v3");
        }
        let outcome = crate::conformance::client::send(addr, &Protocol::Http, &expect.request, &[])
            .await
            .and_then(|answer| crate::conformance::client::compare(&expect, addr, false, &answer));
        match outcome {
            Ok(()) => in_a_row += 1,
            Err(e) => {
                in_a_row = 0;
                assert!(
                    start.elapsed() < crate::conformance::client::CONSISTENCY,
                    "{uri}: {e}\n{}",
                    suite.logs()
                );
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

/// HTTPRouteRetryConnectionError (the suite after v1.6.1): connections the backend
/// resets are retried, `attempts` times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_retry_connection_error() {
    let suite = Suite::start().await;
    let name = "retries-connection-error";
    let rules = "    - matches: [{path: {type: PathPrefix, value: /retry/no-status-code-attempts-3}}]\n      retry: {attempts: 3}\n      backendRefs: [{name: infra-backend-v3, port: 8080}]\n";
    suite.apply(&route(INFRA, name, "[{name: same-namespace}]", rules));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    let path = "/retry/no-status-code-attempts-3";
    retries(&suite, addr, path, "succeedAfter=2", &[200]).await;
    retries(&suite, addr, path, "succeedAfter=4", &[500, 503]).await;
    suite.assert_nothing_rejected().await;
}

/// HTTPRouteRetryWithTimeouts (the suite after v1.6.1): an attempt past
/// `timeouts.backendRequest` is retried like a failure; `timeouts.request` bounds the
/// attempts together (504 past it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_retry_with_timeouts() {
    let suite = Suite::start().await;
    let name = "retries-with-timeouts";
    let rules = "    - matches: [{path: {type: PathPrefix, value: /retry/backend-request-timeout-200ms}}]\n      retry: {attempts: 2}\n      timeouts: {backendRequest: 200ms}\n      backendRefs: [{name: infra-backend-v3, port: 8080}]\n    - matches: [{path: {type: PathPrefix, value: /retry/request-timeout-200ms}}]\n      retry: {codes: [500], attempts: 5}\n      timeouts: {backendRequest: 200ms, request: 400ms}\n      backendRefs: [{name: infra-backend-v3, port: 8080}]\n";
    suite.apply(&route(INFRA, name, "[{name: same-namespace}]", rules));
    let addr = suite
        .routes_accepted(SAME, "HTTPRoute", &[(INFRA, name)])
        .await;
    suite.route_resolved(("HTTPRoute", INFRA, name), SAME).await;
    let backend = "/retry/backend-request-timeout-200ms";
    let request = "/retry/request-timeout-200ms";
    let slow = "responseCode=500&delayRetry=300ms";
    retries(
        &suite,
        addr,
        backend,
        &format!("{slow}&succeedAfter=2"),
        &[200],
    )
    .await;
    retries(
        &suite,
        addr,
        backend,
        &format!("{slow}&succeedAfter=3"),
        &[504],
    )
    .await;
    retries(
        &suite,
        addr,
        request,
        "responseCode=500&succeedAfter=1",
        &[200],
    )
    .await;
    retries(
        &suite,
        addr,
        request,
        "responseCode=500&succeedAfter=4&delayRetry=100ms",
        &[504],
    )
    .await;
    suite.assert_nothing_rejected().await;
}
