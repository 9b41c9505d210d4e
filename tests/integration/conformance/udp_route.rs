//! The suite's UDPRoute tests: UDP listeners forwarding datagrams (by session) to the
//! routes' backends, UDP echo pods answering with who they are, a DNS query through the
//! Gateway, weights, reference grants and refused attachments.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::conformance::echo::{self, PodInfo};
use crate::conformance::suite::{APP, GW, INFRA, Listener, Suite, backend_counts, has, parent_of};

/// A Gateway of the infra namespace with UDP listeners (name, port) for UDPRoutes.
fn udp_gateway(name: &str, listeners: &[(&str, u16)]) -> String {
    let listeners: Vec<String> = listeners
        .iter()
        .map(|(l, port)| {
            format!("    - {{name: {l}, port: {port}, protocol: UDP, allowedRoutes: {{kinds: [{{kind: UDPRoute}}]}}}}\n")
        })
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n{}---\n",
        listeners.concat()
    )
}

/// A UDPRoute (v1) of the infra namespace: one parentRef (YAML flow map), backendRefs
/// (YAML flow list).
fn udp_route_yaml(name: &str, parent: &str, backends: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: UDPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{parent}]\n  rules: [{{backendRefs: {backends}}}]\n---\n"
    )
}

/// A UDP echo pod behind a new Service `ns/name` (port 8080, UDP).
async fn udp_backend(suite: &Suite, ns: &str, name: &str) {
    let ip = suite.pod_ip();
    let info = PodInfo {
        namespace: ns.to_string(),
        pod: format!("{name}-pod-0"),
    };
    echo::udp_pod(ip, info, name).await;
    suite.service_of("UDP", ns, name, &[("udp", 8080, 8080, "")], &[ip]);
}

/// The suite's `coredns` Service (port 53, UDP) and its pod.
async fn coredns(suite: &Suite) {
    let ip = suite.pod_ip();
    echo::dns_pod(ip, 5353).await;
    suite.service_of("UDP", INFRA, "coredns", &[("udp-dns", 53, 5353, "")], &[ip]);
}

/// One datagram from a new socket; the echo's JSON answer (2 s at most).
async fn send_once(addr: SocketAddr, payload: &[u8]) -> Result<Value, String> {
    let socket = tokio::net::UdpSocket::bind(SocketAddr::new(
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        0,
    ))
    .await
    .map_err(|e| format!("bind: {e}"))?;
    socket
        .send_to(payload, addr)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), socket.recv_from(&mut buf))
        .await
        .map_err(|_| "no answer within 2 s".to_string())?
        .map_err(|e| format!("receive: {e}"))?;
    serde_json::from_slice(&buf[..n]).map_err(|e| format!("answer: {e}"))
}

/// The suite's `ExpectEchoResponse(FromBackend)`: datagrams each second until one is
/// answered (by `service` of `namespace`, when given), for at most `within`.
async fn expect_echo(
    suite: &Suite,
    addr: SocketAddr,
    expected: Option<(&str, &str)>,
    within: Duration,
) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < within {
        match send_once(addr, b"gateway-api-conformance-udp-echo").await {
            Ok(echo) => match expected {
                None => return,
                Some((service, namespace))
                    if echo["service"] == service && echo["namespace"] == namespace =>
                {
                    assert_eq!(
                        echo["request"], "gateway-api-conformance-udp-echo",
                        "{echo}"
                    );
                    return;
                }
                Some(_) => last = format!("answered by {echo}"),
            },
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let clusters = suite.admin("/clusters").await;
    let listeners = suite.admin("/listeners").await;
    panic!(
        "{addr}: no echo as expected ({expected:?}): {last}\n{}\n--- clusters\n{clusters}\n--- listeners\n{listeners}",
        suite.logs()
    );
}

/// The backend (pod name without its last two parts) answering one datagram.
async fn backend_of(addr: SocketAddr) -> Result<String, String> {
    let echo = send_once(addr, b"gateway-api-conformance-udp-weight\n").await?;
    let pod = echo["pod"].as_str().unwrap_or_default();
    if pod.is_empty() {
        return Err(format!("no pod in {echo}"));
    }
    let parts: Vec<&str> = pod.split('-').collect();
    Ok(parts[..parts.len().saturating_sub(2)].join("-"))
}

/// `UDPRouteMustHaveParents`: the route's parent entry names the Gateway, Accepted.
async fn route_accepted(suite: &Suite, route: &str, gw: &str) {
    suite
        .wait_for(
            (GW, "UDPRoute", INFRA, route),
            "Accepted by the Gateway",
            |r| {
                parent_of(r, INFRA, gw, "Gateway")
                    .is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
            },
        )
        .await;
}

/// UDPRoute: a DNS query through a UDP listener is answered by the `coredns` Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route() {
    let suite = Suite::start().await;
    coredns(&suite).await;
    let gw = "udp-gateway";
    suite.apply(&format!(
        "{}{}",
        udp_gateway(gw, &[("coredns", 5300)]),
        udp_route_yaml(
            "udp-coredns",
            &format!("{{name: {gw}, sectionName: coredns}}"),
            "[{name: coredns, port: 53}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "UDPRoute", &[(INFRA, "udp-coredns")])
        .await;
    // An A query for foo.bar.com: any answer to it will do.
    let mut query = vec![0x4a, 0x17, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["foo", "bar", "com"] {
        query.push(u8::try_from(label.len()).unwrap_or(0));
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    let start = Instant::now();
    loop {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = socket.send_to(&query, addr).await;
        let mut buf = vec![0u8; 512];
        let answer = tokio::time::timeout(Duration::from_secs(2), socket.recv_from(&mut buf)).await;
        if let Ok(Ok((n, _))) = answer
            && n >= 12
            && buf[..2] == query[..2]
            && buf[2] & 0x80 != 0
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no DNS answer through {addr}\n{}",
            suite.logs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    suite.assert_nothing_rejected().await;
}

/// UDPRouteInvalidBackendRefNonexistent: a backend Service that does not exist is
/// `ResolvedRefs` False, `BackendNotFound`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_invalid_backend_ref_nonexistent() {
    let suite = Suite::start().await;
    let gw = "udp-gateway-invalid-backend";
    suite.apply(&format!(
        "{}{}",
        udp_gateway(gw, &[("udp", 5300)]),
        udp_route_yaml(
            "udp-route-invalid-backend-ref-nonexistent",
            &format!("{{name: {gw}, sectionName: udp}}"),
            "[{name: nonexistent-service, port: 8080}]"
        )
    ));
    suite
        .route_condition(
            (
                "UDPRoute",
                INFRA,
                "udp-route-invalid-backend-ref-nonexistent",
            ),
            (INFRA, gw),
            ("ResolvedRefs", "False", "BackendNotFound"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// UDPRouteInvalidCrossNamespaceBackendRef: a backend of another namespace without a
/// grant is `RefNotPermitted` (before whether it exists); the route is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_invalid_cross_namespace_backend_ref() {
    let suite = Suite::start().await;
    let gw = "udp-gateway-invalid-cross-namespace-backend-ref";
    let route = "udp-route-invalid-cross-namespace-backend-ref";
    suite.apply(&format!(
        "{}{}",
        udp_gateway(gw, &[("udp", 5300)]),
        udp_route_yaml(
            route,
            &format!("{{name: {gw}, sectionName: udp}}"),
            "[{name: udp-echo-no-reference-grant, namespace: gateway-conformance-app-backend, port: 8080}]"
        )
    ));
    suite
        .routes_accepted((INFRA, gw), "UDPRoute", &[(INFRA, route)])
        .await;
    suite
        .route_condition(
            ("UDPRoute", INFRA, route),
            (INFRA, gw),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// UDPRouteMultipleRoutesAttachment: two UDPRoutes on one UDP listener are both accepted
/// and counted; the older one takes the datagrams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_multiple_routes_attachment() {
    let suite = Suite::start().await;
    udp_backend(&suite, INFRA, "udp-attach-backend-1").await;
    udp_backend(&suite, INFRA, "udp-attach-backend-2").await;
    let gw = "udp-multi-route-attach-gateway";
    suite.apply(&format!(
        "{}{}",
        udp_gateway(gw, &[("udp", 5301)]),
        udp_route_yaml(
            "udproute-attach-older",
            &format!("{{name: {gw}, sectionName: udp}}"),
            "[{name: udp-attach-backend-1, port: 8080}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "UDPRoute", &[(INFRA, "udproute-attach-older")])
        .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    suite.apply(&udp_route_yaml(
        "udproute-attach-newer",
        &format!("{{name: {gw}, sectionName: udp}}"),
        "[{name: udp-attach-backend-2, port: 8080}]",
    ));
    for route in ["udproute-attach-older", "udproute-attach-newer"] {
        suite
            .route_condition(
                ("UDPRoute", INFRA, route),
                (INFRA, gw),
                ("Accepted", "True", "Accepted"),
            )
            .await;
    }
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[Listener {
                name: "udp",
                kinds: &["UDPRoute"],
                attached: 2,
                conditions: &[("Accepted", "True", "Accepted")],
            }],
        )
        .await;
    let start = Instant::now();
    'rounds: loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no round of 20 datagrams all answered\n{}",
            suite.logs()
        );
        for _ in 0..20 {
            match backend_of(addr).await {
                Ok(backend) => assert_eq!(backend, "udp-attach-backend-1"),
                Err(_) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue 'rounds;
                }
            }
        }
        break;
    }
    suite.assert_nothing_rejected().await;
}

/// UDPRouteNotAllowedByListeners: a UDPRoute on a TLS listener is
/// `NotAllowedByListeners` and not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_not_allowed_by_listeners() {
    let suite = Suite::start().await;
    coredns(&suite).await;
    let gw = "udproute-tls-only-gateway";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n    - {{name: tls, port: 443, protocol: TLS, tls: {{mode: Passthrough}}, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n---\n{}",
        udp_route_yaml(
            "udproute-not-allowed-by-listeners",
            &format!("{{name: {gw}, sectionName: tls}}"),
            "[{name: coredns, port: 53}]"
        )
    ));
    suite
        .route_condition(
            ("UDPRoute", INFRA, "udproute-not-allowed-by-listeners"),
            (INFRA, gw),
            ("Accepted", "False", "NotAllowedByListeners"),
        )
        .await;
    suite.zero_routes((INFRA, gw)).await;
    suite.assert_nothing_rejected().await;
}

/// UDPRouteParentRefAttachAllListeners: a parentRef naming only the Gateway attaches to
/// each of its UDP listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_parent_ref_attach_all_listeners() {
    let suite = Suite::start().await;
    udp_backend(&suite, INFRA, "udp-echo-attach-all").await;
    let gw = "udp-attach-all-listeners-gateway";
    let listeners = [("udp-1", 5310), ("udp-2", 5311), ("udp-3", 5312)];
    suite.apply(&format!(
        "{}{}",
        udp_gateway(gw, &listeners),
        udp_route_yaml(
            "udp-route-attach-all",
            &format!("{{name: {gw}}}"),
            "[{name: udp-echo-attach-all, port: 8080}]"
        )
    ));
    route_accepted(&suite, "udp-route-attach-all", gw).await;
    let expected: Vec<Listener<'_>> = listeners
        .iter()
        .map(|(name, _)| Listener {
            name,
            kinds: &["UDPRoute"],
            attached: 1,
            conditions: &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
        })
        .collect();
    suite.listeners_exactly((INFRA, gw), &expected).await;
    for (listener, _) in listeners {
        let addr = suite.gateway_address(INFRA, gw, Some(listener)).await;
        expect_echo(
            &suite,
            addr,
            Some(("udp-echo-attach-all", INFRA)),
            Duration::from_secs(60),
        )
        .await;
    }
    suite.assert_nothing_rejected().await;
}

/// UDPRouteParentRefPortAndSectionName: parentRefs by port, by section name and by both
/// each attach to their one listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_parent_ref_port_and_section_name() {
    let suite = Suite::start().await;
    for backend in [
        "udp-echo-by-port",
        "udp-echo-by-section",
        "udp-echo-by-section-and-port",
    ] {
        udp_backend(&suite, INFRA, backend).await;
    }
    let gw = "udp-multi-listener-gateway";
    suite.apply(&format!(
        "{}{}{}{}",
        udp_gateway(
            gw,
            &[
                ("by-port", 5300),
                ("by-section", 5301),
                ("by-section-and-port", 5302)
            ]
        ),
        udp_route_yaml(
            "udp-route-by-port",
            &format!("{{name: {gw}, port: 5300}}"),
            "[{name: udp-echo-by-port, port: 8080}]"
        ),
        udp_route_yaml(
            "udp-route-by-section",
            &format!("{{name: {gw}, sectionName: by-section}}"),
            "[{name: udp-echo-by-section, port: 8080}]"
        ),
        udp_route_yaml(
            "udp-route-by-section-and-port",
            &format!("{{name: {gw}, sectionName: by-section-and-port, port: 5302}}"),
            "[{name: udp-echo-by-section-and-port, port: 8080}]"
        ),
    ));
    for (route, listener, backend) in [
        ("udp-route-by-port", "by-port", "udp-echo-by-port"),
        ("udp-route-by-section", "by-section", "udp-echo-by-section"),
        (
            "udp-route-by-section-and-port",
            "by-section-and-port",
            "udp-echo-by-section-and-port",
        ),
    ] {
        route_accepted(&suite, route, gw).await;
        let addr = suite.gateway_address(INFRA, gw, Some(listener)).await;
        expect_echo(
            &suite,
            addr,
            Some((backend, INFRA)),
            Duration::from_secs(60),
        )
        .await;
    }
    suite.assert_nothing_rejected().await;
}

/// UDPRouteReferenceGrant: a grant lets the route reach another namespace's Service;
/// once deleted, the route is `RefNotPermitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_reference_grant() {
    let suite = Suite::start().await;
    udp_backend(&suite, APP, "udp-echo-reference-grant").await;
    let gw = "udp-gateway-reference-grant";
    let route = "udp-route-reference-grant";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: udp-reference-grant, namespace: gateway-conformance-app-backend}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: UDPRoute, namespace: gateway-conformance-infra}}]\n  to: [{{group: '', kind: Service, name: udp-echo-reference-grant}}]\n---\n{}{}",
        udp_gateway(gw, &[("udp", 5300)]),
        udp_route_yaml(
            route,
            &format!("{{name: {gw}, sectionName: udp}}"),
            "[{name: udp-echo-reference-grant, namespace: gateway-conformance-app-backend, port: 8080}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "UDPRoute", &[(INFRA, route)])
        .await;
    suite
        .route_resolved(("UDPRoute", INFRA, route), (INFRA, gw))
        .await;
    expect_echo(&suite, addr, None, Duration::from_secs(60)).await;
    suite.delete(GW, "ReferenceGrant", APP, "udp-reference-grant");
    suite
        .route_condition(
            ("UDPRoute", INFRA, route),
            (INFRA, gw),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// UDPRouteWeightedRouting: 500 datagrams, each from a new socket, split 70/30/0, each
/// share within 0.05 and none to the backend of weight 0 (ten attempts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_weighted_routing() {
    let suite = Suite::start().await;
    for backend in ["udp-backend-v1", "udp-backend-v2", "udp-backend-v3"] {
        udp_backend(&suite, INFRA, backend).await;
    }
    let gw = "udp-weighted-gateway";
    suite.apply(&format!(
        "{}{}",
        udp_gateway(gw, &[("udp", 5300)]),
        udp_route_yaml(
            "udp-weighted-route",
            &format!("{{name: {gw}, sectionName: udp}}"),
            "[{name: udp-backend-v1, port: 8080, weight: 70}, {name: udp-backend-v2, port: 8080, weight: 30}, {name: udp-backend-v3, port: 8080, weight: 0}]"
        )
    ));
    let addr = suite
        .routes_accepted((INFRA, gw), "UDPRoute", &[(INFRA, "udp-weighted-route")])
        .await;
    expect_echo(&suite, addr, None, Duration::from_secs(30)).await;
    let weights = [
        ("udp-backend-v1", 0.7),
        ("udp-backend-v2", 0.3),
        ("udp-backend-v3", 0.0),
    ];
    suite
        .weights_hold(&weights, || backend_counts(500, || backend_of(addr)))
        .await;
    suite.assert_nothing_rejected().await;
}
