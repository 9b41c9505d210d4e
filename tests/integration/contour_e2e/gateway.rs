//! `test/e2e/gateway` (Contour v1.33.6): Isobar serving one Gateway (`gatewayRef`, as
//! Contour's suite runs Contour), its listeners at Contour's container ports (80 → 8080,
//! 443 → 8443) on Envoy's address.

use std::net::SocketAddr;

use super::{E2e, Req, http, https, service};

const GW: &str = "gateway.networking.k8s.io/v1";

/// Isobar serving Gateway `ns/name` (`gatewayRef`), the Gateway applied with `listeners`
/// (YAML list items) and Programmed.
async fn with_gateway(ns: &str, name: &str, listeners: &str) -> E2e {
    let e2e = E2e::start_with(|c| {
        c.gateway = Some(serde_json::json!({"gatewayRef": {"namespace": ns, "name": name}}));
    })
    .await;
    e2e.apply("apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: contour-class}\nspec: {controllerName: projectcontour.io/ingress-controller-e2e}\n");
    e2e.apply(&format!(
        "apiVersion: {GW}\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  gatewayClassName: contour-class\n  listeners:\n{listeners}"
    ));
    e2e.suite
        .wait_for((GW, "Gateway", ns, name), "Programmed", |g| {
            crate::conformance::suite::has(&g["status"]["conditions"], "Programmed", "True", "")
        })
        .await;
    e2e
}

/// The `http` Gateway: one HTTP listener on 80 for routes of its namespace.
async fn http_gateway(ns: &str) -> E2e {
    with_gateway(
        ns,
        "http",
        "    - {name: http, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: Same}}}\n",
    )
    .await
}

/// Where Envoy serves a Gateway listener of `port`: Contour's container port.
fn listener(e2e: &E2e, port: u16) -> SocketAddr {
    SocketAddr::new(e2e.suite.envoy_http.ip(), port + 8000)
}

/// Waits for route `kind` `ns/name` to have condition (type, status, reason) under the
/// Gateway `ns/gw`; the route.
async fn route_has(
    e2e: &E2e,
    (kind, ns, name): (&str, &str, &str),
    gw: &str,
    (type_, status, reason): (&str, &str, &str),
) -> serde_json::Value {
    e2e.suite
        .wait_for(
            (GW, kind, ns, name),
            &format!("{type_}={status} ({reason})"),
            |r| {
                crate::conformance::suite::parent_of(r, ns, gw, "Gateway").is_some_and(|p| {
                    crate::conformance::suite::has(&p["conditions"], type_, status, reason)
                })
            },
        )
        .await
}

const ACCEPTED: (&str, &str, &str) = ("Accepted", "True", "Accepted");

/// The condition of `type_` under Gateway `ns/gw` in a route's status.
fn condition<'a>(
    route: &'a serde_json::Value,
    ns: &str,
    gw: &str,
    type_: &str,
) -> &'a serde_json::Value {
    crate::conformance::suite::parent_of(route, ns, gw, "Gateway")
        .and_then(|p| p["conditions"].as_array())
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&serde_json::Value::Null)
}

/// An HTTPRoute `ns/name` for `hostname` on the `http` Gateway with `rules` (YAML list
/// items).
fn route(ns: &str, name: &str, hostname: &str, rules: &str) -> String {
    format!(
        "apiVersion: {GW}\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  hostnames: [{hostname}]\n  parentRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: {ns}, name: http}}]\n  rules:\n{rules}"
    )
}

fn on(req: Req, e2e: &E2e, port: u16) -> Req {
    req.to(listener(e2e, port))
}

/// testGatewayMultipleQueryParamMatch: only a parameter's first occurrence is matched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_multiple_query_param_match() {
    let ns = "gateway-query-param-match";
    let e2e = http_gateway(ns).await;
    for s in ["echo-1", "echo-2", "echo-3", "echo-4"] {
        e2e.deploy_echo(ns, s).await;
    }
    let host = "queryparams.gateway.projectcontour.io";
    e2e.apply(&route(ns, "httproute-1", host, "    - matches: [{queryParams: [{type: Exact, name: animal, value: whale}]}]\n      backendRefs: [{name: echo-1, port: 80, weight: 1}]\n    - matches: [{queryParams: [{type: Exact, name: animal, value: dolphin}]}]\n      backendRefs: [{name: echo-2, port: 80, weight: 1}]\n"));
    route_has(&e2e, ("HTTPRoute", ns, "httproute-1"), "http", ACCEPTED).await;
    for (path, svc) in [
        ("/?animal=whale&animal=dolphin", "echo-1"),
        ("/?animal=dolphin&animal=whale", "echo-2"),
    ] {
        let answer = e2e
            .until(&on(http(host).path(path), &e2e, 80), |a| {
                a.status == 200 && service(a) == svc
            })
            .await;
        assert_eq!(super::seen(&answer, "namespace"), ns);
    }
    e2e.assert_nothing_rejected().await;
}

/// testRequestHeaderModifierBackendRef: a backend's request header modifier (add, set,
/// remove) applies to the requests sent to it only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_modifier_backend_ref() {
    let ns = "gateway-request-header-modifier-backendref-filter";
    let e2e = http_gateway(ns).await;
    e2e.deploy_echo(ns, "echo-header-filter").await;
    e2e.deploy_echo(ns, "echo-header-nofilter").await;
    let host = "requestheadermodifierbackendref.gateway.projectcontour.io";
    e2e.apply(&route(ns, "http-filter-1", host, "    - matches: [{path: {type: PathPrefix, value: /filter}}]\n      backendRefs:\n        - kind: Service\n          name: echo-header-filter\n          port: 80\n          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: My-Header, value: Foo}], set: [{name: Replace-Header, value: Bar}], remove: [Other-Header]}}]\n    - matches: [{path: {type: PathPrefix, value: /nofilter}}]\n      backendRefs: [{name: echo-header-nofilter, port: 80, weight: 1}]\n"));
    route_has(&e2e, ("HTTPRoute", ns, "http-filter-1"), "http", ACCEPTED).await;
    let req = on(http(host).path("/filter"), &e2e, 80)
        .header("Other-Header", "Remove")
        .header("Replace-Header", "Tobe-Replaced");
    let answer = e2e
        .until(&req, |a| {
            a.status == 200 && service(a) == "echo-header-filter"
        })
        .await;
    assert_eq!(
        super::seen_header(&answer, "My-Header").as_deref(),
        Some("Foo")
    );
    assert_eq!(
        super::seen_header(&answer, "Replace-Header").as_deref(),
        Some("Bar")
    );
    assert_eq!(super::seen_header(&answer, "Other-Header"), None);
    let req = on(http(host).path("/nofilter"), &e2e, 80).header("Other-Header", "Exist");
    let answer = e2e
        .until(&req, |a| {
            a.status == 200 && service(a) == "echo-header-nofilter"
        })
        .await;
    assert_eq!(
        super::seen_header(&answer, "Other-Header").as_deref(),
        Some("Exist")
    );
    assert_eq!(super::seen_header(&answer, "My-Header"), None);
    e2e.assert_nothing_rejected().await;
}

/// testResponseHeaderModifierBackendRef: a backend's response header modifier applies to
/// its answers only, the other backend of the rule answering untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_header_modifier_backend_ref() {
    let ns = "gateway-response-header-modifier-backendref-filter";
    let e2e = http_gateway(ns).await;
    e2e.deploy_echo(ns, "echo-header-filter").await;
    e2e.deploy_echo(ns, "echo-header-nofilter").await;
    let host = "responseheadermodifierbackendref.gateway.projectcontour.io";
    e2e.apply(&route(ns, "http-filter-1", host, "    - matches: [{path: {type: PathPrefix, value: /filter}}]\n      backendRefs:\n        - kind: Service\n          name: echo-header-filter\n          port: 80\n          filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {add: [{name: My-Header, value: Foo}], set: [{name: Replace-Header, value: Bar}], remove: [Other-Header]}}]\n        - {kind: Service, name: echo-header-nofilter, port: 80}\n"));
    route_has(&e2e, ("HTTPRoute", ns, "http-filter-1"), "http", ACCEPTED).await;
    e2e.until_status(&on(http(host).path("/filter"), &e2e, 80), 200)
        .await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let req = on(http(host).path("/filter"), &e2e, 80).header(
            "X-Echo-Set-Header",
            "Other-Header:Remove,Replace-Header:Tobe-Replaced",
        );
        let answer = e2e.until_status(&req, 200).await;
        let svc = service(&answer);
        if svc == "echo-header-filter" {
            assert_eq!(answer.header("My-Header").as_deref(), Some("Foo"));
            assert_eq!(answer.header("Replace-Header").as_deref(), Some("Bar"));
            assert_eq!(answer.header("Other-Header"), None);
        } else {
            assert_eq!(svc, "echo-header-nofilter");
            assert_eq!(answer.header("My-Header"), None);
            assert_eq!(
                answer.header("Replace-Header").as_deref(),
                Some("Tobe-Replaced")
            );
            assert_eq!(answer.header("Other-Header").as_deref(), Some("Remove"));
        }
        seen.insert(svc);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    e2e.assert_nothing_rejected().await;
}

/// testHostRewrite: a rule's request header modifier adding `Host` rewrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rewrite() {
    let ns = "gateway-host-rewrite";
    let e2e = http_gateway(ns).await;
    e2e.deploy_echo(ns, "echo").await;
    let host = "hostrewrite.gateway.projectcontour.io";
    e2e.apply(&route(ns, "host-rewrite", host, "    - matches: [{path: {type: PathPrefix, value: /}}]\n      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: Host, value: rewritten.com}]}}]\n      backendRefs: [{name: echo, port: 80, weight: 1}]\n"));
    route_has(&e2e, ("HTTPRoute", ns, "host-rewrite"), "http", ACCEPTED).await;
    let answer = e2e.until_status(&on(http(host), &e2e, 80), 200).await;
    assert_eq!(service(&answer), "echo");
    assert_eq!(super::seen(&answer, "host"), "rewritten.com");
    e2e.assert_nothing_rejected().await;
}

/// testRequestRedirectRule: a redirect to another scheme, host and port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_redirect_rule() {
    let ns = "gateway-request-redirect-rule";
    let e2e = http_gateway(ns).await;
    e2e.deploy_echo(ns, "echo").await;
    let host = "requestredirectrule.gateway.projectcontour.io";
    e2e.apply(&route(ns, "httproute-redirect", host, "    - matches: [{path: {type: PathPrefix, value: /complex-redirect}}]\n      filters: [{type: RequestRedirect, requestRedirect: {hostname: envoyproxy.io, statusCode: 301, scheme: https, port: 8080}}]\n"));
    route_has(
        &e2e,
        ("HTTPRoute", ns, "httproute-redirect"),
        "http",
        ACCEPTED,
    )
    .await;
    let answer = e2e
        .until_status(&on(http(host).path("/complex-redirect"), &e2e, 80), 301)
        .await;
    assert_eq!(
        answer.header("location").as_deref(),
        Some("https://envoyproxy.io:8080/complex-redirect")
    );
    e2e.assert_nothing_rejected().await;
}

/// testBackendTLSPolicy: a BackendTLSPolicy has Envoy speak TLS (1.3) to a Service not
/// annotated for it, checking its certificate against the CA of a Secret's `ca.crt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy() {
    use crate::conformance::certs::Ca;
    let ns = "gateway-backend-tls-policy";
    let e2e = http_gateway(ns).await;
    let ca = Ca::new("ca-cert");
    let server = ca.server(&["echo-secure"]);
    e2e.tls_secret_with_ca(ns, "backend-server-cert", &server, &ca);
    e2e.deploy_echo_secure(ns, "echo-secure", &server, true)
        .await;
    let host = "backend-tls-policy.projectcontour.io";
    e2e.apply(&route(ns, "http-route-1", host, "    - matches: [{path: {type: PathPrefix, value: /}}]\n      backendRefs: [{name: echo-secure, port: 443, weight: 1}]\n"));
    route_has(&e2e, ("HTTPRoute", ns, "http-route-1"), "http", ACCEPTED).await;
    e2e.apply(&format!("apiVersion: {GW}\nkind: BackendTLSPolicy\nmetadata: {{name: echo-secure-backend-tls-policy, namespace: {ns}}}\nspec:\n  targetRefs: [{{group: '', kind: Service, name: echo-secure}}]\n  validation:\n    caCertificateRefs: [{{group: '', kind: Secret, name: backend-server-cert}}]\n    hostname: echo-secure\n"));
    e2e.suite
        .wait_for(
            (GW, "BackendTLSPolicy", ns, "echo-secure-backend-tls-policy"),
            "Accepted on an ancestor",
            |p| {
                p["status"]["ancestors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| {
                        crate::conformance::suite::has(&a["conditions"], "Accepted", "True", "")
                    })
            },
        )
        .await;
    let answer = e2e.until_status(&on(http(host), &e2e, 80), 200).await;
    assert_eq!(service(&answer), "echo-secure");
    assert_eq!(super::seen(&answer, "tls")["version"], "TLSv1.3");
    e2e.assert_nothing_rejected().await;
}

/// The routes of the conflict tests: exact query matches on `animal`.
const WHALE_DOLPHIN: &str = "    - matches: [{queryParams: [{type: Exact, name: animal, value: whale}]}]\n      backendRefs: [{name: echo-1, port: 80}]\n    - matches: [{queryParams: [{type: Exact, name: animal, value: dolphin}]}]\n      backendRefs: [{name: echo-2, port: 80}]\n";

/// testHTTPRouteConflictMatch: a newer route all of whose matches an older route of the
/// host has is not accepted (`RuleMatchConflict`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_conflict_match() {
    let ns = "gateway-httproute-conflict-match";
    let e2e = http_gateway(ns).await;
    let host = "queryparams.gateway.projectcontour.io";
    e2e.apply(&route(ns, "httproute-1", host, WHALE_DOLPHIN));
    route_has(&e2e, ("HTTPRoute", ns, "httproute-1"), "http", ACCEPTED).await;
    e2e.apply(&route(ns, "httproute-2", host, "    - matches: [{queryParams: [{type: Exact, name: animal, value: whale}]}]\n      backendRefs: [{name: echo-1, port: 80}]\n"));
    let r = route_has(
        &e2e,
        ("HTTPRoute", ns, "httproute-2"),
        "http",
        ("Accepted", "False", "RuleMatchConflict"),
    )
    .await;
    assert_eq!(
        condition(&r, ns, "http", "Accepted")["message"],
        "HTTPRoute's Match has conflict with other HTTPRoute's Match"
    );
    e2e.assert_nothing_rejected().await;
}

/// testHTTPRoutePartiallyConflictMatch: a newer route some of whose matches an older
/// route has is accepted and partially invalid (`RuleMatchPartiallyConflict`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_partially_conflict_match() {
    let ns = "gateway-httproute-partially-conflict-match";
    let e2e = http_gateway(ns).await;
    let host = "queryparams.gateway.projectcontour.io";
    e2e.apply(&route(ns, "httproute-1", host, WHALE_DOLPHIN));
    route_has(&e2e, ("HTTPRoute", ns, "httproute-1"), "http", ACCEPTED).await;
    e2e.apply(&route(ns, "httproute-2", host, "    - matches: [{queryParams: [{type: Exact, name: animal, value: whale}]}]\n      backendRefs: [{name: echo-1, port: 80}]\n    - matches: [{queryParams: [{type: Exact, name: no-conflict, value: no-joke}, {type: Exact, name: no-conflict-again, value: no-joke}]}]\n      backendRefs: [{name: echo-2, port: 80}]\n"));
    let r = route_has(
        &e2e,
        ("HTTPRoute", ns, "httproute-2"),
        "http",
        ("PartiallyInvalid", "True", "RuleMatchPartiallyConflict"),
    )
    .await;
    assert_eq!(
        condition(&r, ns, "http", "PartiallyInvalid")["message"],
        "Dropped Rule: some of HTTPRoute's rule(s) has(ve) been dropped because of conflict against other HTTPRoute's rule(s)"
    );
    assert_eq!(condition(&r, ns, "http", "Accepted")["status"], "True");
    e2e.assert_nothing_rejected().await;
}

/// A GRPCRoute `ns/name` on the `http` Gateway for `host`, one rule of `matches` (method
/// matches, YAML flow items) to `backend`:9000.
fn grpc_route(ns: &str, name: &str, host: &str, matches: &[(&str, &str)], backend: &str) -> String {
    let matches: Vec<String> = matches
        .iter()
        .map(|(svc, method)| {
            format!("{{method: {{type: Exact, service: {svc}, method: {method}}}}}")
        })
        .collect();
    format!(
        "apiVersion: {GW}\nkind: GRPCRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  hostnames: [{host}]\n  parentRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: {ns}, name: http}}]\n  rules:\n    - matches: [{}]\n      backendRefs: [{{name: {backend}, port: 9000, weight: 1}}]\n",
        matches.join(", ")
    )
}

/// testGRPCRouteConflictMatch: a newer GRPCRoute one of whose method matches an older
/// one has. Contour drops the whole rule and does not accept the route; Isobar keeps the
/// rule's other match, as the Gateway API's match precedence has it, and reports the
/// route partially invalid (`RuleMatchPartiallyConflict`) — a difference kept on
/// purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_conflict_match() {
    let ns = "gateway-grpcroute-conflict-match";
    let e2e = http_gateway(ns).await;
    let host = "queryparams.gateway.projectcontour.io";
    e2e.apply(&grpc_route(
        ns,
        "grpcroute-1",
        host,
        &[
            ("com.example.service", "Login"),
            ("foo.com.example.service", "Login"),
        ],
        "grpc-echo",
    ));
    route_has(&e2e, ("GRPCRoute", ns, "grpcroute-1"), "http", ACCEPTED).await;
    e2e.apply(&grpc_route(
        ns,
        "grpcroute-2",
        host,
        &[
            ("com.example.service", "Login"),
            ("bar.com.example.service", "Login"),
        ],
        "grpc-echo",
    ));
    let r = route_has(
        &e2e,
        ("GRPCRoute", ns, "grpcroute-2"),
        "http",
        ("PartiallyInvalid", "True", "RuleMatchPartiallyConflict"),
    )
    .await;
    assert_eq!(condition(&r, ns, "http", "Accepted")["status"], "True");
    e2e.assert_nothing_rejected().await;
}

/// testGRPCRoutePartiallyConflictMatch: Contour's test asserts only that the first
/// route is accepted (its second route, the same as the first, is a full conflict).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_partially_conflict_match() {
    let ns = "gateway-grpcroute-partially-conflict-match";
    let e2e = http_gateway(ns).await;
    let host = "queryparams.gateway.projectcontour.io";
    let matches = [
        ("com.example.service", "Login"),
        ("foo.com.example.service", "Login"),
    ];
    e2e.apply(&grpc_route(ns, "grpcroute-1", host, &matches, "grpc-cho"));
    route_has(&e2e, ("GRPCRoute", ns, "grpcroute-1"), "http", ACCEPTED).await;
    e2e.apply(&grpc_route(ns, "grpcroute-2", host, &matches, "grpc-cho"));
    let r = route_has(
        &e2e,
        ("GRPCRoute", ns, "grpcroute-2"),
        "http",
        ("Accepted", "False", "RuleMatchConflict"),
    )
    .await;
    assert_eq!(
        condition(&r, ns, "http", "Accepted")["message"],
        "GRPCRoute's Match has conflict with other GRPCRoute's Match"
    );
    e2e.assert_nothing_rejected().await;
}

/// The `https` Gateway: HTTP on 80 (`insecure`) and HTTPS on 443 (`secure`, Secret
/// `tlscert` for `dns_name`); the CA of the certificate.
async fn https_gateway(
    ns: &str,
    dns_name: &str,
) -> (
    E2e,
    tokio_rustls::rustls::pki_types::CertificateDer<'static>,
) {
    let e2e = with_gateway(ns, "https", "    - {name: insecure, protocol: HTTP, port: 80, allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: Same}}}\n    - {name: secure, protocol: HTTPS, port: 443, tls: {certificateRefs: [{group: '', kind: Secret, name: tlscert}]}, allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: Same}}}\n").await;
    let ca = e2e.self_signed_cert(ns, "tlscert", dns_name);
    (e2e, ca)
}

/// An HTTPRoute `ns/name` for `hostnames` on listener `section` of Gateway `gw`, every
/// path to `service`:80.
fn section_route(
    ns: &str,
    name: &str,
    hostnames: &str,
    (gw, section): (&str, &str),
    service: &str,
) -> String {
    format!(
        "apiVersion: {GW}\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  hostnames: {hostnames}\n  parentRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: {gw}, sectionName: {section}}}]\n  rules:\n    - matches: [{{path: {{type: PathPrefix, value: /}}}}]\n      backendRefs: [{{name: {service}, port: 80, weight: 1}}]\n"
    )
}

/// testTLSGateway: one host on the HTTP and the HTTPS listener, each to its own backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_gateway() {
    let ns = "gateway-httproute-tls-gateway";
    let host = "tls-gateway.projectcontour.io";
    let (e2e, _) = https_gateway(ns, host).await;
    e2e.deploy_echo(ns, "echo-insecure").await;
    e2e.deploy_echo(ns, "echo-secure").await;
    e2e.apply(&section_route(
        ns,
        "http-route-1",
        &format!("[{host}]"),
        ("https", "insecure"),
        "echo-insecure",
    ));
    route_has(&e2e, ("HTTPRoute", ns, "http-route-1"), "https", ACCEPTED).await;
    e2e.apply(&section_route(
        ns,
        "http-route-2",
        &format!("[{host}]"),
        ("https", "secure"),
        "echo-secure",
    ));
    route_has(&e2e, ("HTTPRoute", ns, "http-route-2"), "https", ACCEPTED).await;
    let answer = e2e.until_status(&on(http(host), &e2e, 80), 200).await;
    assert_eq!(service(&answer), "echo-insecure");
    let answer = e2e.until_status(&on(https(host), &e2e, 443), 200).await;
    assert_eq!(service(&answer), "echo-secure");
    e2e.assert_nothing_rejected().await;
}

/// testTLSWildcardHost: a wildcard route on the HTTPS listener answers names of any depth
/// under it. Contour answers 421 when the Host is another name than the SNI; Isobar, as
/// the Gateway API conformance suite wants (HTTPRouteHTTPSListenerDetectMisdirectedRequests:
/// a connection to a wildcard listener serves every name it covers), answers 200 — a
/// difference kept on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_wildcard_host() {
    let ns = "gateway-httproute-tls-wildcard-host";
    let suffix = "wildcardhost.gateway.projectcontour.io";
    let (e2e, _) = https_gateway(ns, &format!("*.{suffix}")).await;
    e2e.deploy_echo(ns, "echo").await;
    e2e.apply(&section_route(
        ns,
        "http-route-1",
        &format!("['*.{suffix}']"),
        ("https", "secure"),
        "echo",
    ));
    route_has(&e2e, ("HTTPRoute", ns, "http-route-1"), "https", ACCEPTED).await;
    for (host, sni) in [
        (format!("random1.{suffix}"), format!("random1.{suffix}")),
        (format!("random2.{suffix}"), format!("random2.{suffix}")),
        (format!("a.random3.{suffix}"), format!("a.random3.{suffix}")),
        (
            format!("random4.{suffix}"),
            format!("other-random4.{suffix}"),
        ),
        (format!("random5.{suffix}"), format!("a.random5.{suffix}")),
        (
            format!("random6.{suffix}:9999"),
            format!("random6.{suffix}"),
        ),
    ] {
        let answer = e2e
            .until_status(&on(https(&host).sni(&sni), &e2e, 443), 200)
            .await;
        assert_eq!(service(&answer), "echo");
    }
    e2e.assert_nothing_rejected().await;
}

/// testMultipleHTTPSListeners: three HTTPS listeners on one port, each serving its own
/// certificate by SNI and its own routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_https_listeners() {
    let ns = "gateway-multiple-https-listeners";
    let listeners: String = (1..=3)
        .map(|n| format!("    - {{name: https-{n}, protocol: HTTPS, port: 443, hostname: https-{n}.gateway.projectcontour.io, tls: {{certificateRefs: [{{group: '', kind: Secret, name: tlscert-{n}}}]}}, allowedRoutes: {{kinds: [{{kind: HTTPRoute}}], namespaces: {{from: Same}}}}}}\n"))
        .collect();
    let e2e = E2e::start_with(|c| {
        c.gateway = Some(serde_json::json!({"gatewayRef": {"namespace": ns, "name": "multiple-https-listeners"}}));
    })
    .await;
    let mut cas = Vec::new();
    for n in 1..=3 {
        cas.push(e2e.self_signed_cert(
            ns,
            &format!("tlscert-{n}"),
            &format!("https-{n}.gateway.projectcontour.io"),
        ));
    }
    e2e.apply("apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: contour-class}\nspec: {controllerName: projectcontour.io/ingress-controller-e2e}\n");
    e2e.apply(&format!("apiVersion: {GW}\nkind: Gateway\nmetadata: {{name: multiple-https-listeners, namespace: {ns}}}\nspec:\n  gatewayClassName: contour-class\n  listeners:\n{listeners}"));
    for (n, ca) in (1..=3).zip(cas) {
        e2e.deploy_echo(ns, &format!("echo-{n}")).await;
        let name = format!("httproute-{n}");
        e2e.apply(&section_route(
            ns,
            &name,
            "[]",
            ("multiple-https-listeners", &format!("https-{n}")),
            &format!("echo-{n}"),
        ));
        route_has(
            &e2e,
            ("HTTPRoute", ns, &name),
            "multiple-https-listeners",
            ACCEPTED,
        )
        .await;
        let host = format!("https-{n}.gateway.projectcontour.io");
        let answer = e2e
            .until_status(&on(https(&host).verified_by(ca), &e2e, 443), 200)
            .await;
        assert_eq!(service(&answer), format!("echo-{n}"));
    }
    e2e.assert_nothing_rejected().await;
}

/// testTCPRoute: a TCPRoute forwards the bytes (no HTTP manager: no `server` or
/// `x-envoy-upstream-service-time`); once it goes, the listener goes and connections
/// fail, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route() {
    let ns = "gateway-tcproute";
    let e2e = with_gateway(
        ns,
        "tcp",
        "    - {name: tcp, protocol: TCP, port: 80, allowedRoutes: {namespaces: {from: Same}}}\n",
    )
    .await;
    e2e.deploy_echo(ns, "echo-tcproute-backend").await;
    // `v1alpha2` in Contour's test: one object to an API server serving v1.6's CRDs
    // (the tests' API server keeps versions apart, so the served one is written).
    e2e.apply(&format!("apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\nmetadata: {{name: tcproute-1, namespace: {ns}}}\nspec:\n  parentRefs: [{{namespace: {ns}, name: tcp}}]\n  rules: [{{backendRefs: [{{group: '', kind: Service, name: echo-tcproute-backend, port: 80, weight: 1}}]}}]\n"));
    route_has(&e2e, ("TCPRoute", ns, "tcproute-1"), "tcp", ACCEPTED).await;
    let addr = listener(&e2e, 80);
    let req = http(&addr.to_string()).to(addr);
    let answer = e2e.until_status(&req, 200).await;
    assert_eq!(service(&answer), "echo-tcproute-backend");
    assert_eq!(answer.header("server"), None);
    assert_eq!(answer.header("x-envoy-upstream-service-time"), None);
    e2e.suite.delete(GW, "TCPRoute", ns, "tcproute-1");
    let start = std::time::Instant::now();
    while e2e.send(&req).await.is_ok() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "still served"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(e2e.send(&req).await.is_err(), "served again");
    }
    e2e.assert_nothing_rejected().await;
}
