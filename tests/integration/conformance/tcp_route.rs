//! The suite's TCPRoute tests: TCP listeners forwarding connections to the routes'
//! backends (the suite's line protocol: greeting, PING, IS_TLS, TEST), by section name
//! and port, weights, reference grants and refused attachments.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::conformance::echo::{self, PodInfo};
use crate::conformance::suite::{GW, INFRA, Listener, Suite, WEB, backend_counts, has, parent_of};

/// A Gateway of the infra namespace with TCP listeners (name, port) for TCPRoutes.
fn tcp_gateway(name: &str, listeners: &[(&str, u16)]) -> String {
    let listeners: Vec<String> = listeners
        .iter()
        .map(|(l, port)| {
            format!("    - {{name: {l}, port: {port}, protocol: TCP, allowedRoutes: {{kinds: [{{kind: TCPRoute}}]}}}}\n")
        })
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n{}---\n",
        listeners.concat()
    )
}

/// A TCPRoute (v1) of the infra namespace: one parentRef (YAML flow map), backendRefs
/// (YAML flow list).
fn tcp_route(name: &str, parent: &str, backends: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{parent}]\n  rules: [{{backendRefs: {backends}}}]\n---\n"
    )
}

/// TCP echo pods behind a new Service `ns/name` (port 3000).
async fn tcp_backend(suite: &Suite, ns: &str, name: &str) {
    let ip = suite.pod_ip();
    let info = PodInfo {
        namespace: ns.to_string(),
        pod: format!("{name}-pod-0"),
    };
    echo::tcp_pod(ip, info, None).await;
    suite.service(ns, name, &[("tcp", 3000, 3000, "")], &[ip]);
}

/// The suite's exchange on one new connection: the greeting, PING, IS_TLS (false) and
/// TEST's account of the pod.
async fn exchange(addr: SocketAddr) -> Result<Value, String> {
    let tcp = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let (read, mut write) = tcp.into_split();
    let mut reader = BufReader::new(read);
    let greeting = next_line(&mut reader).await?;
    if greeting != "Gateway API Test TCP Server" {
        return Err(format!("greeting {greeting:?}"));
    }
    for (command, want) in [
        ("PING", Some("PONG")),
        ("IS_TLS", Some("false")),
        ("TEST", None),
    ] {
        write
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let answer = next_line(&mut reader).await?;
        match want {
            Some(want) if answer != want => {
                return Err(format!("{command}: {answer:?}, expected {want}"));
            }
            Some(_) => {}
            None => return serde_json::from_str(&answer).map_err(|e| format!("{answer:?}: {e}")),
        }
    }
    Err("no answer to TEST".to_string())
}

async fn next_line(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Result<String, String> {
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(line.trim_end().to_string())
}

/// The suite's `MakeTCPRequestAndExpectEventuallyValidResponse`: connections until one
/// completes the exchange (30 s); that one must reach a pod of `backend` in `ns`.
async fn expect_backend(suite: &Suite, addr: SocketAddr, backend: &str, ns: &str) {
    let start = Instant::now();
    loop {
        match exchange(addr).await {
            Ok(echo) => {
                assert_eq!(echo["namespace"], ns, "{addr}: {echo}");
                assert!(
                    echo["pod"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with(&format!("{backend}-")),
                    "{addr}: expected {backend}, reached {echo}"
                );
                return;
            }
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                panic!("{addr}: {e}\n{}", suite.logs())
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// The backend (pod name without its last two parts) one connection reaches.
async fn backend_of(addr: SocketAddr) -> Result<String, String> {
    let echo = exchange(addr).await?;
    let pod = echo["pod"].as_str().unwrap_or_default();
    if pod.is_empty() {
        return Err(format!("no pod in {echo}"));
    }
    let parts: Vec<&str> = pod.split('-').collect();
    Ok(parts[..parts.len().saturating_sub(2)].join("-"))
}

/// `TCPRouteMustHaveParents`: the route's parent entry names the Gateway, Accepted.
async fn route_accepted(suite: &Suite, route: &str, gw: &str) {
    suite
        .wait_for(
            (GW, "TCPRoute", INFRA, route),
            "Accepted by the Gateway",
            |r| {
                parent_of(r, INFRA, gw, "Gateway")
                    .is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
            },
        )
        .await;
}

/// TCPRouteInvalidBackendRefNonexistent: a backend Service that does not exist is
/// `ResolvedRefs` False, `BackendNotFound`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_invalid_backend_ref_nonexistent() {
    let suite = Suite::start().await;
    let gw = "tcp-gateway-invalid-backend";
    suite.apply(&format!(
        "{}{}",
        tcp_gateway(gw, &[("tcp", 9300)]),
        tcp_route(
            "tcp-route-invalid-backend-ref-nonexistent",
            &format!("{{name: {gw}, sectionName: tcp}}"),
            "[{name: nonexistent-service, port: 8080}]"
        )
    ));
    suite
        .route_condition(
            (
                "TCPRoute",
                INFRA,
                "tcp-route-invalid-backend-ref-nonexistent",
            ),
            (INFRA, gw),
            ("ResolvedRefs", "False", "BackendNotFound"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// TCPRouteInvalidCrossNamespaceBackendRef: a backend of another namespace without a
/// grant is `RefNotPermitted`; the route is still accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_invalid_cross_namespace_backend_ref() {
    let suite = Suite::start().await;
    tcp_backend(&suite, WEB, "tcp-invalid-xns-backend").await;
    let gw = "tcp-invalid-cross-namespace-backend-ref-gateway";
    let route = "tcp-invalid-cross-namespace-backend-ref";
    suite.apply(&format!(
        "{}{}",
        tcp_gateway(gw, &[("tcp", 9321)]),
        tcp_route(
            route,
            &format!("{{name: {gw}, sectionName: tcp}}"),
            "[{name: tcp-invalid-xns-backend, namespace: gateway-conformance-web-backend, port: 3000}]"
        )
    ));
    suite
        .routes_accepted((INFRA, gw), "TCPRoute", &[(INFRA, route)])
        .await;
    suite
        .route_condition(
            ("TCPRoute", INFRA, route),
            (INFRA, gw),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// TCPRouteInvalidNonTCPListener: a TCPRoute on an HTTP listener for HTTPRoutes only is
/// `NotAllowedByListeners` and not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_invalid_non_tcp_listener() {
    let suite = Suite::start().await;
    let gw = "tcp-mixed-protocol-gateway";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n    - {{name: only-allow-http-routes, port: 5300, protocol: HTTP, allowedRoutes: {{kinds: [{{kind: HTTPRoute}}]}}}}\n---\n{}",
        tcp_route(
            "tcp-route",
            &format!("{{name: {gw}, sectionName: only-allow-http-routes}}"),
            "[{name: tcp-echo-backend, port: 8080}]"
        )
    ));
    suite
        .gateway_condition((INFRA, gw), ("Accepted", "True", ""))
        .await;
    suite
        .gateway_condition((INFRA, gw), ("Programmed", "True", ""))
        .await;
    suite
        .route_condition(
            ("TCPRoute", INFRA, "tcp-route"),
            (INFRA, gw),
            ("Accepted", "False", "NotAllowedByListeners"),
        )
        .await;
    suite.zero_routes((INFRA, gw)).await;
    suite.assert_nothing_rejected().await;
}

/// TCPRouteMultipleRoutesAttachment: two TCPRoutes on one TCP listener are both accepted
/// and counted; the older one takes the connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_multiple_routes_attachment() {
    let suite = Suite::start().await;
    tcp_backend(&suite, INFRA, "tcp-attach-backend-1").await;
    tcp_backend(&suite, INFRA, "tcp-attach-backend-2").await;
    let gw = "tcp-multi-route-attach-gateway";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n    - {{name: tcp, port: 9310, protocol: TCP, allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{group: gateway.networking.k8s.io, kind: TCPRoute}}]}}}}\n---\n{}",
        tcp_route(
            "tcproute-attach-older",
            &format!("{{name: {gw}, sectionName: tcp}}"),
            "[{name: tcp-attach-backend-1, port: 3000}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "TCPRoute", &[(INFRA, "tcproute-attach-older")])
        .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    suite.apply(&tcp_route(
        "tcproute-attach-newer",
        &format!("{{name: {gw}, sectionName: tcp}}"),
        "[{name: tcp-attach-backend-2, port: 3000}]",
    ));
    for route in ["tcproute-attach-older", "tcproute-attach-newer"] {
        suite
            .route_condition(
                ("TCPRoute", INFRA, route),
                (INFRA, gw),
                ("Accepted", "True", "Accepted"),
            )
            .await;
    }
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[Listener {
                name: "tcp",
                kinds: &["TCPRoute"],
                attached: 2,
                conditions: &[("Accepted", "True", "Accepted")],
            }],
        )
        .await;
    expect_backend(&suite, addr, "tcp-attach-backend-1", INFRA).await;
    for i in 0..100 {
        match backend_of(addr).await {
            Ok(backend) => assert_eq!(backend, "tcp-attach-backend-1", "connection {i}"),
            Err(e) => panic!("connection {i}: {e}\n{}", suite.logs()),
        }
    }
    suite.assert_nothing_rejected().await;
}

/// TCPRouteParentRefAttachAll: a parentRef naming only the Gateway attaches to each of
/// its TCP listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_parent_ref_attach_all() {
    let suite = Suite::start().await;
    tcp_backend(&suite, INFRA, "tcp-echo-attach-all").await;
    let gw = "tcp-attach-all-gateway";
    let listeners = [
        ("one", 9310),
        ("two", 9311),
        ("three", 9312),
        ("four", 9313),
    ];
    suite.apply(&format!(
        "{}{}",
        tcp_gateway(gw, &listeners),
        tcp_route(
            "tcp-route-attach-all",
            &format!("{{name: {gw}}}"),
            "[{name: tcp-echo-attach-all, port: 3000}]"
        )
    ));
    route_accepted(&suite, "tcp-route-attach-all", gw).await;
    for (listener, _) in listeners {
        let addr = suite.gateway_address(INFRA, gw, Some(listener)).await;
        expect_backend(&suite, addr, "tcp-echo-attach-all", INFRA).await;
    }
    suite.assert_nothing_rejected().await;
}

/// TCPRouteParentRefPortAndSectionName: parentRefs by port, by section name and by both
/// each attach to their one listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_parent_ref_port_and_section_name() {
    let suite = Suite::start().await;
    for backend in ["tcp-echo-one", "tcp-echo-two", "tcp-echo-three"] {
        tcp_backend(&suite, INFRA, backend).await;
    }
    let gw = "tcp-multi-listener-gateway";
    suite.apply(&format!(
        "{}{}{}{}",
        tcp_gateway(gw, &[("one", 9300), ("two", 9301), ("three", 9302)]),
        tcp_route(
            "tcp-route-by-port",
            &format!("{{name: {gw}, port: 9300}}"),
            "[{name: tcp-echo-one, port: 3000}]"
        ),
        tcp_route(
            "tcp-route-by-section",
            &format!("{{name: {gw}, sectionName: two}}"),
            "[{name: tcp-echo-two, port: 3000}]"
        ),
        tcp_route(
            "tcp-route-by-section-and-port",
            &format!("{{name: {gw}, sectionName: three, port: 9302}}"),
            "[{name: tcp-echo-three, port: 3000}]"
        ),
    ));
    for (route, listener, backend) in [
        ("tcp-route-by-port", "one", "tcp-echo-one"),
        ("tcp-route-by-section", "two", "tcp-echo-two"),
        ("tcp-route-by-section-and-port", "three", "tcp-echo-three"),
    ] {
        route_accepted(&suite, route, gw).await;
        let addr = suite.gateway_address(INFRA, gw, Some(listener)).await;
        expect_backend(&suite, addr, backend, INFRA).await;
    }
    suite.assert_nothing_rejected().await;
}

/// TCPRouteReferenceGrant: a grant lets the route reach another namespace's Service;
/// once deleted, the route is `RefNotPermitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_reference_grant() {
    let suite = Suite::start().await;
    tcp_backend(&suite, WEB, "tcp-reference-grant-backend").await;
    let gw = "tcp-reference-grant-gateway";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: tcp-reference-grant, namespace: gateway-conformance-web-backend}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: TCPRoute, namespace: gateway-conformance-infra}}]\n  to: [{{group: '', kind: Service, name: tcp-reference-grant-backend}}]\n---\n{}{}",
        tcp_gateway(gw, &[("tcp", 9320)]),
        tcp_route(
            "tcp-reference-grant",
            &format!("{{name: {gw}, sectionName: tcp}}"),
            "[{name: tcp-reference-grant-backend, namespace: gateway-conformance-web-backend, port: 3000}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "TCPRoute", &[(INFRA, "tcp-reference-grant")])
        .await;
    expect_backend(&suite, addr, "tcp-reference-grant-backend", WEB).await;
    suite.delete(GW, "ReferenceGrant", WEB, "tcp-reference-grant");
    suite
        .route_condition(
            ("TCPRoute", INFRA, "tcp-reference-grant"),
            (INFRA, gw),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// TCPRouteWeightedRouting: 500 connections split 70/30/0, each share within 0.05 and
/// none to the backend of weight 0 (ten attempts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_weighted_routing() {
    let suite = Suite::start().await;
    for backend in ["tcp-backend-v1", "tcp-backend-v2", "tcp-backend-v3"] {
        tcp_backend(&suite, INFRA, backend).await;
    }
    let gw = "tcp-weighted-gateway";
    suite.apply(&format!(
        "{}{}",
        tcp_gateway(gw, &[("tcp", 9300)]),
        tcp_route(
            "tcp-weighted-route",
            &format!("{{name: {gw}, sectionName: tcp}}"),
            "[{name: tcp-backend-v1, port: 3000, weight: 70}, {name: tcp-backend-v2, port: 3000, weight: 30}, {name: tcp-backend-v3, port: 3000, weight: 0}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "TCPRoute", &[(INFRA, "tcp-weighted-route")])
        .await;
    let start = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{addr} never opened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let weights = [
        ("tcp-backend-v1", 0.7),
        ("tcp-backend-v2", 0.3),
        ("tcp-backend-v3", 0.0),
    ];
    suite
        .weights_hold(&weights, || backend_counts(500, || backend_of(addr)))
        .await;
    suite.assert_nothing_rejected().await;
}
