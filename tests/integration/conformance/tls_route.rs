//! The suite's TLSRoute tests: connections passed through by SNI or terminated by the
//! listener, hostname intersection, refused connections, listener kinds and modes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conformance::client::{Protocol, Tls, get};
use crate::conformance::echo::tcp_test;
use crate::conformance::suite::{APP, GW, INFRA, Listener, Suite};

/// A Gateway of the infra namespace with these listeners (YAML list items).
fn gateway(name: &str, listeners: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n{listeners}---\n"
    )
}

/// A TLS listener (`mode`: Passthrough, or a Terminate with the terminate certificate).
fn tls_listener(
    name: &str,
    port: u16,
    hostname: Option<&str>,
    kinds: Option<&str>,
    terminate: bool,
) -> String {
    let host = hostname
        .map(|h| format!("hostname: '{h}', "))
        .unwrap_or_default();
    let kinds = kinds.map(|k| format!(", kinds: {k}")).unwrap_or_default();
    let tls = if terminate {
        "{mode: Terminate, certificateRefs: [{name: tls-terminate-checks-certificate}]}"
    } else {
        "{mode: Passthrough}"
    };
    format!(
        "    - {{name: {name}, port: {port}, protocol: TLS, {host}allowedRoutes: {{namespaces: {{from: Same}}{kinds}}}, tls: {tls}}}\n"
    )
}

/// A TLSRoute of the infra namespace.
fn tls_route(name: &str, parents: &str, hostnames: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: {parents}\n  hostnames: [{hostnames}]\n  rules: [{{backendRefs: [{backend}]}}]\n---\n"
    )
}

/// The TLSRoute side of the suite's `GatewayAndTLSRoutesMustBeAccepted`: the Gateway's
/// address and each route `Accepted` by it.
async fn tls_routes_accepted(suite: &Suite, gw: &str, routes: &[&str]) -> SocketAddr {
    let addr = suite.gateway_address(INFRA, gw, None).await;
    for route in routes {
        suite
            .wait_for(
                (GW, "TLSRoute", INFRA, route),
                "Accepted by the Gateway",
                |r| {
                    crate::conformance::suite::parent_of(r, INFRA, gw, "Gateway").is_some_and(|p| {
                        crate::conformance::suite::has(
                            &p["conditions"],
                            "Accepted",
                            "True",
                            "Accepted",
                        )
                    })
                },
            )
            .await;
    }
    addr
}

/// The suite's TCP exchange over TLS with SNI `sni` (trusting the backends' CA): the TCP
/// echo pod greets, answers, says whether it got TLS itself and which SNI.
async fn tcp_over_tls(suite: &Suite, addr: SocketAddr, sni: &str, backend_tls: bool) {
    let tls = Tls::new(sni, &[suite.certs.checks.der()]);
    let start = Instant::now();
    loop {
        match tls.connect(addr, &[]).await {
            Ok(stream) => match tcp_test(stream).await {
                Ok(echo) => {
                    assert_eq!(echo["namespace"], INFRA, "{echo}");
                    assert!(
                        echo["pod"]
                            .as_str()
                            .unwrap_or_default()
                            .starts_with("tcp-backend-"),
                        "{echo}"
                    );
                    assert_eq!(echo["isTLS"], backend_tls, "{echo}");
                    if backend_tls {
                        assert_eq!(echo["tls"]["serverName"], sni, "{echo}");
                    }
                    return;
                }
                Err(e) if start.elapsed() > Duration::from_secs(30) => {
                    panic!("{sni}: {e}\n{}", suite.logs())
                }
                Err(_) => {}
            },
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                panic!("{sni}: {e}\n{}", suite.logs())
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The suite's rejection probe: a TLS connection with SNI `sni` is closed or reset
/// before the handshake completes, without a TLS alert and with the port open.
async fn rejected(suite: &Suite, addr: SocketAddr, sni: &str) {
    let tls = Tls::new(sni, &[suite.certs.checks.der()]);
    let start = Instant::now();
    loop {
        let outcome = match tokio::net::TcpStream::connect(addr).await {
            Err(e) => Err(format!("connect: {e}")),
            Ok(_) => match tls.connect(addr, &[]).await {
                Ok(_) => Err("the handshake completed".to_string()),
                Err(e)
                    if ["eof", "end of file", "reset", "closed"]
                        .iter()
                        .any(|m| e.to_ascii_lowercase().contains(m)) =>
                {
                    Ok(())
                }
                Err(e) => Err(e),
            },
        };
        match outcome {
            Ok(()) => return,
            Err(e) if start.elapsed() > Duration::from_secs(30) => {
                panic!(
                    "{sni}: not refused as the suite asks: {e}\n{}",
                    suite.logs()
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// TLSRouteSimpleSameNamespace: a TLS connection is passed through by SNI to the
/// route's backend, which terminates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_simple_same_namespace() {
    let suite = Suite::start().await;
    let gw = "gateway-tlsroute";
    suite.apply(&format!(
        "{}{}",
        gateway(
            gw,
            &tls_listener(
                "https",
                443,
                Some("*.example.com"),
                Some("[{kind: TLSRoute}]"),
                false
            )
        ),
        tls_route(
            "gateway-conformance-infra-test",
            &format!("[{{name: {gw}, namespace: gateway-conformance-infra}}]"),
            "abc.example.com",
            "{name: tcp-backend, port: 8443}"
        )
    ));
    let addr = tls_routes_accepted(&suite, gw, &["gateway-conformance-infra-test"]).await;
    tcp_over_tls(&suite, addr, "abc.example.com", true).await;
    suite.assert_nothing_rejected().await;
}

/// TLSRouteTerminateSimpleSameNamespace: a TLS listener in Terminate mode ends TLS with
/// its certificate and forwards the bytes in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_terminate_simple_same_namespace() {
    let suite = Suite::start().await;
    let gw = "gateway-tlsroute-terminate";
    suite.apply(&format!(
        "{}{}",
        gateway(
            gw,
            &tls_listener(
                "tlsterminate",
                8443,
                Some("tls.example.com"),
                Some("[{kind: TLSRoute}]"),
                true
            )
        ),
        tls_route(
            "tlsroute-terminated-test",
            &format!("[{{name: {gw}, namespace: gateway-conformance-infra}}]"),
            "tls.example.com",
            "{name: tcp-backend, port: 3000}"
        )
    ));
    let addr = tls_routes_accepted(&suite, gw, &["tlsroute-terminated-test"]).await;
    tcp_over_tls(&suite, addr, "tls.example.com", false).await;
    suite.assert_nothing_rejected().await;
}

/// TLSRouteMixedTerminationSameNamespace: on one port, one listener terminates and
/// another passes through, by SNI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_mixed_termination_same_namespace() {
    let suite = Suite::start().await;
    let gw = "gateway-tlsroute-mixed-termination";
    let parents = format!("[{{name: {gw}, namespace: gateway-conformance-infra}}]");
    suite.apply(&format!(
        "{}{}{}",
        gateway(
            gw,
            &format!(
                "{}{}",
                tls_listener(
                    "tls-terminate",
                    8883,
                    Some("tls.example.com"),
                    Some("[{kind: TLSRoute}]"),
                    true
                ),
                tls_listener(
                    "tls-passthrough",
                    8883,
                    Some("abc.example.com"),
                    Some("[{kind: TLSRoute}]"),
                    false
                )
            )
        ),
        tls_route(
            "gateway-conformance-mixed-passthroughroute",
            &parents,
            "abc.example.com",
            "{name: tcp-backend, port: 8443}"
        ),
        tls_route(
            "gateway-conformance-mixed-terminateroute",
            &parents,
            "tls.example.com",
            "{name: tcp-backend, port: 3000}"
        ),
    ));
    let addr =
        tls_routes_accepted(&suite, gw, &["gateway-conformance-mixed-passthroughroute"]).await;
    let tls = &["TLSRoute"][..];
    let accepted = &[("Accepted", "True", "Accepted")][..];
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[
                Listener {
                    name: "tls-terminate",
                    kinds: tls,
                    attached: 1,
                    conditions: accepted,
                },
                Listener {
                    name: "tls-passthrough",
                    kinds: tls,
                    attached: 1,
                    conditions: accepted,
                },
            ],
        )
        .await;
    tls_routes_accepted(&suite, gw, &["gateway-conformance-mixed-terminateroute"]).await;
    tcp_over_tls(&suite, addr, "tls.example.com", false).await;
    tcp_over_tls(&suite, addr, "abc.example.com", true).await;
    suite.assert_nothing_rejected().await;
}

/// One Gateway of the intersection test: its name, listener name and hostname, its routes
/// (name, hostnames, backend), the SNI names served (name, backend) and one refused.
type Intersection<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a [(&'a str, &'a str, &'a str)],
    &'a [(&'a str, &'a str)],
    &'a str,
);

/// TLSRouteHostnameIntersection: a TLSRoute takes the SNI names its hostnames and the
/// listener's share, the most specific winning; another name is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_hostname_intersection() {
    let suite = Suite::start().await;
    let groups: [Intersection; 4] = [
        (
            "gw-tlsroute-exact-hostname-x-1",
            "listener-exact-hostname",
            Some("abc.example.com"),
            &[(
                "tlsroute-more-specific-wc-hostname-x-1",
                "'*.example.com'",
                "tls-backend",
            )],
            &[("abc.example.com", "tls-backend")],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            "listener-more-specific-wc-hostname",
            Some("*.example.com"),
            &[
                (
                    "tlsroute-exact-hostname-x-2",
                    "abc.example.com",
                    "tls-backend",
                ),
                (
                    "tlsroute-less-specific-wc-hostname-x-2",
                    "'*.com'",
                    "tls-backend-2",
                ),
            ],
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-less-specific-wc-hostname-x-3",
            "listener-less-specific-wc-hostname",
            Some("*.com"),
            &[
                (
                    "tlsroute-exact-hostname-x-3",
                    "abc.example.com",
                    "tls-backend",
                ),
                (
                    "tlsroute-more-specific-wc-hostname-x-3",
                    "'*.example.com'",
                    "tls-backend-2",
                ),
            ],
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-empty-hostname-x-4",
            "listener-empty-hostname",
            None,
            &[
                (
                    "tlsroute-exact-hostname-x-4",
                    "abc.example.com",
                    "tls-backend",
                ),
                (
                    "tlsroute-less-specific-wc-hostname-x-4",
                    "'*.com'",
                    "tls-backend-2",
                ),
            ],
            &[
                ("abc.example.com", "tls-backend"),
                ("other.example.com", "tls-backend-2"),
            ],
            "non.matching.org",
        ),
    ];
    for (gw, listener, hostname, routes, requests, refused) in groups {
        let mut yaml = gateway(
            gw,
            &tls_listener(listener, 443, hostname, Some("[{kind: TLSRoute}]"), false),
        );
        for (route, hostnames, backend) in routes {
            yaml.push_str(&tls_route(
                route,
                &format!("[{{name: {gw}, namespace: gateway-conformance-infra}}]"),
                hostnames,
                &format!("{{name: {backend}, port: 443}}"),
            ));
        }
        suite.apply(&yaml);
        let names: Vec<&str> = routes.iter().map(|(r, _, _)| *r).collect();
        let addr = tls_routes_accepted(&suite, gw, &names).await;
        for route in &names {
            suite
                .route_resolved(("TLSRoute", INFRA, route), (INFRA, gw))
                .await;
        }
        for (host, backend) in requests {
            let https = Protocol::Https(Tls::new(host, &[suite.certs.checks.der()]));
            suite
                .expect_over(addr, &https, &get("/").host(host).backend(backend))
                .await;
        }
        rejected(&suite, addr, refused).await;
    }
    suite.assert_nothing_rejected().await;
}

/// A TLSRoute on a passthrough listener without a hostname whose backend does not
/// resolve: accepted, `ResolvedRefs` False with `reason`, and its connections refused.
async fn invalid_backend(name: &str, route: &str, backend: &str, reason: &str) {
    let suite = Suite::start().await;
    suite.apply(&format!(
        "{}{}",
        gateway(name, &tls_listener("tls", 443, None, None, false)),
        tls_route(
            route,
            &format!("[{{name: {name}, namespace: gateway-conformance-infra}}]"),
            "example.com",
            backend
        )
    ));
    let addr = tls_routes_accepted(&suite, name, &[route]).await;
    suite
        .route_condition(
            ("TLSRoute", INFRA, route),
            (INFRA, name),
            ("ResolvedRefs", "False", reason),
        )
        .await;
    rejected(&suite, addr, "example.com").await;
    suite.assert_nothing_rejected().await;
}

/// TLSRouteInvalidBackendRefNonexistent: a Service that does not exist refuses the
/// connection, `BackendNotFound`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_backend_ref_nonexistent() {
    invalid_backend(
        "gateway-tlsroute-invalid-backend-ref-nonexistent",
        "invalid-backend-ref-nonexistent",
        "{name: nonexistent, namespace: gateway-conformance-infra, port: 443}",
        "BackendNotFound",
    )
    .await;
}

/// TLSRouteInvalidBackendRefUnknownKind: a backend of an unknown kind refuses the
/// connection, `InvalidKind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_backend_ref_unknown_kind() {
    invalid_backend(
        "gateway-tlsroute-invalid-backend-ref-unknown-kind",
        "invalid-backend-ref-unknown-kind",
        "{group: unknownkind.example.com, kind: NonExistent, name: tls-backend, port: 443}",
        "InvalidKind",
    )
    .await;
}

/// A TLSRoute not attached to `gw`: not accepted with `reason`, no accepted parent.
async fn not_attached(suite: &Suite, route: &str, gw: &str, reason: &str) {
    suite
        .route_condition(
            ("TLSRoute", INFRA, route),
            (INFRA, gw),
            ("Accepted", "False", reason),
        )
        .await;
    suite.no_accepted_parents(("TLSRoute", INFRA, route)).await;
}

/// TLSRouteInvalidNoMatchingListenerHostname: routes whose hostnames no listener's
/// intersect are `NoMatchingListenerHostname`, counted nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_no_matching_listener_hostname() {
    let suite = Suite::start().await;
    suite.apply(&format!(
        "{}{}{}{}",
        gateway(
            "gateway-tls-exact-hostname",
            &tls_listener(
                "tls",
                443,
                Some("www.example.com"),
                Some("[{kind: TLSRoute}]"),
                false
            )
        ),
        gateway(
            "gateway-tls-wildcard-hostname",
            &tls_listener(
                "tls",
                443,
                Some("*.example.com"),
                Some("[{kind: TLSRoute}]"),
                false
            )
        ),
        tls_route(
            "tlsroute-hostname-mismatch-1",
            "[{name: gateway-tls-exact-hostname}]",
            "www.nomatch.com, '*.nomatch.com'",
            "{name: tls-backend, port: 443}"
        ),
        tls_route(
            "tlsroute-hostname-mismatch-2",
            "[{name: gateway-tls-wildcard-hostname}]",
            "www.different.com, '*.different.com'",
            "{name: tls-backend, port: 443}"
        ),
    ));
    not_attached(
        &suite,
        "tlsroute-hostname-mismatch-1",
        "gateway-tls-exact-hostname",
        "NoMatchingListenerHostname",
    )
    .await;
    not_attached(
        &suite,
        "tlsroute-hostname-mismatch-2",
        "gateway-tls-wildcard-hostname",
        "NoMatchingListenerHostname",
    )
    .await;
    suite
        .zero_routes((INFRA, "gateway-tls-exact-hostname"))
        .await;
    suite
        .zero_routes((INFRA, "gateway-tls-wildcard-hostname"))
        .await;
}

/// TLSRouteInvalidNoMatchingListener: HTTP and HTTPS listeners do not take TLSRoutes
/// (`NotAllowedByListeners`); a sectionName no listener has is `NoMatchingParent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_no_matching_listener() {
    let suite = Suite::start().await;
    suite.apply(&format!(
        "{}{}{}{}{}{}",
        gateway("gateway-tlsroute-tls-passthrough-only", &tls_listener("tls-passthrough", 443, None, None, false)),
        gateway("gateway-tlsroute-http-only", "    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}\n"),
        gateway("gateway-tlsroute-https-only", "    - {name: https, port: 443, protocol: HTTPS, allowedRoutes: {namespaces: {from: Same}}, tls: {mode: Terminate, certificateRefs: [{name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}}\n"),
        tls_route("tlsroute-not-allowed-protocol-http", "[{name: gateway-tlsroute-http-only}]", "tls.example.com", "{name: tls-backend, port: 443}"),
        tls_route("tlsroute-not-allowed-protocol-https", "[{name: gateway-tlsroute-https-only}]", "tls.example.com", "{name: tls-backend, port: 443}"),
        tls_route("tlsroute-no-matching-section-name", "[{name: gateway-tlsroute-tls-passthrough-only, sectionName: nonexistent-listener}]", "tls.example.com", "{name: tls-backend, port: 443}"),
    ));
    for gw in [
        "gateway-tlsroute-tls-passthrough-only",
        "gateway-tlsroute-http-only",
        "gateway-tlsroute-https-only",
    ] {
        suite
            .gateway_condition((INFRA, gw), ("Accepted", "True", ""))
            .await;
        suite
            .gateway_condition((INFRA, gw), ("Programmed", "True", ""))
            .await;
    }
    not_attached(
        &suite,
        "tlsroute-not-allowed-protocol-http",
        "gateway-tlsroute-http-only",
        "NotAllowedByListeners",
    )
    .await;
    not_attached(
        &suite,
        "tlsroute-not-allowed-protocol-https",
        "gateway-tlsroute-https-only",
        "NotAllowedByListeners",
    )
    .await;
    not_attached(
        &suite,
        "tlsroute-no-matching-section-name",
        "gateway-tlsroute-tls-passthrough-only",
        "NoMatchingParent",
    )
    .await;
    suite
        .zero_routes((INFRA, "gateway-tlsroute-http-only"))
        .await;
    suite
        .zero_routes((INFRA, "gateway-tlsroute-https-only"))
        .await;
    suite.assert_nothing_rejected().await;
}

/// TLSRouteInvalidReferenceGrant: ReferenceGrants that each miss one part of the
/// reference permit nothing: accepted, `RefNotPermitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_invalid_reference_grant() {
    let suite = Suite::start().await;
    let grant = |ns: &str, name: &str, from: (&str, &str, &str), to: (&str, &str, &str)| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  from: [{{group: '{}', kind: {}, namespace: {}}}]\n  to: [{{group: '{}', kind: {}, name: {}}}]\n---\n",
            from.0, from.1, from.2, to.0, to.1, to.2
        )
    };
    let g = "gateway.networking.k8s.io";
    let gw = "gateway-tlsroute-referencegrant";
    let route = "gateway-conformance-infra-test";
    suite.apply(
        &[
            grant(
                INFRA,
                "reference-grant-wrong-namespace",
                (g, "TLSRoute", INFRA),
                ("", "Service", "tls-backend"),
            ),
            grant(
                APP,
                "reference-grant-wrong-from-group",
                ("not-the-group-youre-looking-for", "TLSRoute", INFRA),
                ("", "Service", "tls-backend"),
            ),
            grant(
                APP,
                "reference-grant-wrong-from-kind",
                (g, "Gateway", INFRA),
                ("", "Service", "tls-backend"),
            ),
            grant(
                APP,
                "reference-grant-wrong-from-namespace",
                (g, "TLSRoute", "not-the-namespace-youre-looking-for"),
                ("", "Service", "tls-backend"),
            ),
            grant(
                APP,
                "reference-grant-wrong-to-group",
                (g, "TLSRoute", INFRA),
                ("not-the-group-youre-looking-for", "Service", "tls-backend"),
            ),
            grant(
                APP,
                "reference-grant-wrong-to-kind",
                (g, "TLSRoute", INFRA),
                ("", "Secret", "tls-backend"),
            ),
            grant(
                APP,
                "reference-grant-wrong-to-name",
                (g, "TLSRoute", INFRA),
                ("", "Service", "not-the-service-youre-looking-for"),
            ),
            gateway(
                gw,
                &tls_listener(
                    "https",
                    443,
                    Some("*.example.com"),
                    Some("[{kind: TLSRoute}]"),
                    false,
                ),
            ),
            tls_route(
                route,
                &format!("[{{name: {gw}}}]"),
                "abc.example.com",
                "{name: tls-backend, namespace: gateway-conformance-app-backend, port: 443}",
            ),
        ]
        .concat(),
    );
    tls_routes_accepted(&suite, gw, &[route]).await;
    suite
        .route_condition(
            ("TLSRoute", INFRA, route),
            (INFRA, gw),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// Whether this controller's GatewayClass claims `feature`.
async fn claims(suite: &Suite, feature: &str) -> bool {
    let class = suite
        .wait_for(
            (GW, "GatewayClass", "", crate::conformance::suite::CLASS),
            "supportedFeatures",
            |c| c["status"]["supportedFeatures"].is_array(),
        )
        .await;
    class["status"]["supportedFeatures"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["name"] == feature)
}

/// TLSRouteListenerMixedTerminationNotSupported: the suite checks this only of an
/// implementation without TLSRouteModeMixed; Isobar claims it, and serves terminating
/// and passthrough listeners side by side on one port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_listener_mixed_termination_not_supported() {
    let suite = Suite::start().await;
    assert!(claims(&suite, "TLSRouteModeMixed").await);
    let gw = "gateway-tlsroute-mixed-termination-not-supported";
    suite.apply(&gateway(
        gw,
        &format!(
            "{}{}",
            tls_listener(
                "tls-terminate",
                8443,
                Some("terminate.example.com"),
                Some("[{kind: TLSRoute}]"),
                true
            ),
            tls_listener(
                "tls-passthrough",
                8443,
                Some("passthrough.example.com"),
                Some("[{kind: TLSRoute}]"),
                false
            )
        ),
    ));
    let tls = &["TLSRoute"][..];
    let accepted = &[
        ("Accepted", "True", "Accepted"),
        ("Conflicted", "False", ""),
    ][..];
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[
                Listener {
                    name: "tls-terminate",
                    kinds: tls,
                    attached: 0,
                    conditions: accepted,
                },
                Listener {
                    name: "tls-passthrough",
                    kinds: tls,
                    attached: 0,
                    conditions: accepted,
                },
            ],
        )
        .await;
}

/// TLSRouteListenerTerminateNotSupported: the suite checks this only of an
/// implementation without TLSRouteModeTerminate; Isobar claims it (see
/// `tls_route_listener_terminate_supported_kinds`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_listener_terminate_not_supported() {
    let suite = Suite::start().await;
    assert!(claims(&suite, "TLSRouteModeTerminate").await);
}

/// TLSRouteListenerTerminateSupportedKinds: a terminating TLS listener takes TLSRoutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_listener_terminate_supported_kinds() {
    let suite = Suite::start().await;
    let gw = "gateway-tlsroute-terminate-supported";
    suite.apply(&gateway(
        gw,
        &tls_listener(
            "tls-terminate",
            8443,
            Some("terminate.example.com"),
            Some("[{kind: TLSRoute}]"),
            true,
        ),
    ));
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[Listener {
                name: "tls-terminate",
                kinds: &["TLSRoute"],
                attached: 0,
                conditions: &[("Accepted", "True", "Accepted")],
            }],
        )
        .await;
}

/// TLSRouteListenerPassthroughSupportedKinds: a TLS listener naming TCPRoute among its
/// kinds keeps TLSRoute and says `InvalidRouteKinds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_listener_passthrough_supported_kinds() {
    let suite = Suite::start().await;
    let gw = "gateway-tlsroute-passthrough-supported-kind";
    suite.apply(&gateway(
        gw,
        &tls_listener(
            "tls-passthrough",
            443,
            None,
            Some("[{kind: TCPRoute}, {kind: TLSRoute}]"),
            false,
        ),
    ));
    suite
        .listeners_exactly(
            (INFRA, gw),
            &[Listener {
                name: "tls-passthrough",
                kinds: &["TLSRoute"],
                attached: 0,
                conditions: &[("ResolvedRefs", "False", "InvalidRouteKinds")],
            }],
        )
        .await;
}
