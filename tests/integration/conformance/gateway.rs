//! The suite's Gateway and GatewayClass tests: listeners and their status, addresses,
//! certificates and ReferenceGrants, client certificates of either side.

use crate::conformance::client::{self, Protocol, get};
use crate::conformance::suite::{CLASS, GW, INFRA, Listener, Suite, fresh, has};

/// A Gateway of the infra namespace with these listeners (YAML list items, indented by
/// four) and more spec (indented by two, may be empty).
fn gateway(name: &str, spec: &str, listeners: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n{spec}  listeners:\n{listeners}"
    )
}

/// An HTTPRoute of the infra namespace with these parentRefs (YAML flow list), hostnames
/// and rules.
fn route(name: &str, parents: &str, hostnames: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: {parents}\n  hostnames: [{hostnames}]\n  rules:\n{rules}"
    )
}

const TO_V1: &str = "    - backendRefs: [{name: infra-backend-v1, port: 8080}]\n";
const CERT: &str = "{certificateRefs: [{group: '', kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}";
const HTTP: &[&str] = &["HTTPRoute"];
const OK: &[(&str, &str, &str)] = &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")];

/// GatewayHTTPListenerIsolation: a request goes to the most specific listener whose
/// hostname covers its Host, and only to routes of that listener; with listener
/// hostnames only, and with route hostnames intersecting them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_http_listener_isolation() {
    let suite = Suite::start().await;
    let sections = [
        ("empty-hostname", None),
        ("wildcard-example-com", Some("'*.example.com'")),
        ("wildcard-foo-example-com", Some("'*.foo.example.com'")),
        ("abc-foo-example-com", Some("abc.foo.example.com")),
    ];
    let listeners: String = sections
        .iter()
        .map(|(name, host)| {
            let host = host.map(|h| format!("hostname: {h}, ")).unwrap_or_default();
            format!("    - {{name: {name}, port: 80, protocol: HTTP, {host}allowedRoutes: {{namespaces: {{from: All}}}}}}\n")
        })
        .collect();
    for (gw, suffix, hostnames) in [
        ("http-listener-isolation", "", ""),
        (
            "http-listener-isolation-with-hostname-intersection",
            "-with-hostname-intersection",
            "bar.com, '*.example.com', '*.foo.example.com', abc.foo.example.com",
        ),
    ] {
        suite.apply(&gateway(gw, "", &listeners));
        let mut routes = Vec::new();
        for (section, _) in &sections {
            let name = format!("attaches-to-{section}{suffix}");
            suite.apply(&route(
                &name,
                &format!("[{{name: {gw}, namespace: gateway-conformance-infra, sectionName: {section}}}]"),
                hostnames,
                &format!("    - matches: [{{path: {{type: PathPrefix, value: /{section}}}}}]\n      backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"),
            ));
            routes.push(name);
        }
        let keys: Vec<(&str, &str)> = routes.iter().map(|r| (INFRA, r.as_str())).collect();
        let addr = suite.routes_accepted((INFRA, gw), "HTTPRoute", &keys).await;
        for (ns, name) in &keys {
            suite
                .route_resolved(("HTTPRoute", ns, name), (INFRA, gw))
                .await;
        }
        for (i, host) in [
            "bar.com",
            "bar.example.com",
            "bar.foo.example.com",
            "abc.foo.example.com",
        ]
        .iter()
        .enumerate()
        {
            for (j, (section, _)) in sections.iter().enumerate() {
                let expect = get(&format!("/{section}")).host(host);
                let expect = if i == j {
                    expect.backend("infra-backend-v1")
                } else {
                    expect.status(404)
                };
                suite.expect(addr, &expect).await;
            }
        }
    }
    suite.assert_nothing_rejected().await;
}

/// GatewayInvalidRouteKind: `allowedRoutes.kinds` naming a kind Isobar does not serve is
/// `ResolvedRefs` False `InvalidRouteKinds`; the valid kinds named stay supported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_route_kind() {
    let suite = Suite::start().await;
    for (name, kinds, supported) in [
        (
            "gateway-only-invalid-route-kind",
            "[{kind: InvalidRoute}]",
            &[][..],
        ),
        (
            "gateway-supported-and-invalid-route-kind",
            "[{kind: InvalidRoute}, {kind: HTTPRoute}]",
            HTTP,
        ),
    ] {
        suite.apply(&gateway(
            name,
            "",
            &format!("    - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}, kinds: {kinds}}}}}\n"),
        ));
        suite
            .listeners_exactly(
                (INFRA, name),
                &[Listener {
                    name: "http",
                    kinds: supported,
                    attached: 0,
                    conditions: &[("ResolvedRefs", "False", "InvalidRouteKinds")],
                }],
            )
            .await;
    }
}

/// GatewayListenerUnsupportedProtocol: a listener of a protocol Isobar does not serve
/// is not accepted (`UnsupportedProtocol`); the Gateway is not accepted without another
/// listener, and is with one (`ListenersNotValid`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_listener_unsupported_protocol() {
    let suite = Suite::start().await;
    let invalid = "    - {name: invalid, port: 1111, protocol: INVALID}\n";
    let unsupported = Listener {
        name: "invalid",
        kinds: &[],
        attached: 0,
        conditions: &[("Accepted", "False", "UnsupportedProtocol")],
    };
    suite.apply(&gateway("gateway-only-unsupported-protocols", "", invalid));
    let only = (INFRA, "gateway-only-unsupported-protocols");
    suite
        .gateway_condition(only, ("Accepted", "False", "ListenersNotValid"))
        .await;
    suite.listeners_exactly(only, &[unsupported]).await;
    suite.apply(&gateway(
        "gateway-supported-and-unsupported-protocols",
        "",
        &format!("    - {{name: http, port: 80, protocol: HTTP}}\n{invalid}"),
    ));
    let both = (INFRA, "gateway-supported-and-unsupported-protocols");
    suite
        .gateway_condition(both, ("Accepted", "True", "ListenersNotValid"))
        .await;
    suite
        .gateway_condition(both, ("Programmed", "True", ""))
        .await;
    suite
        .listeners_exactly(
            both,
            &[
                Listener {
                    name: "http",
                    kinds: HTTP,
                    attached: 0,
                    conditions: &[("Accepted", "True", "Accepted")],
                },
                Listener {
                    name: "invalid",
                    kinds: &[],
                    attached: 0,
                    conditions: &[("Accepted", "False", "UnsupportedProtocol")],
                },
            ],
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// GatewayInvalidParametersRef: infrastructure parameters of a kind Isobar does not read
/// leave the Gateway not accepted (`InvalidParameters`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_parameters_ref() {
    let suite = Suite::start().await;
    let name = "gateway-invalid-parameters-ref";
    suite.apply(&gateway(
        name,
        "  infrastructure: {parametersRef: {group: invalid.io, kind: InvalidParameters, name: invalid}}\n",
        "    - {name: http, port: 80, protocol: HTTP}\n",
    ));
    suite
        .gateway_condition((INFRA, name), ("Accepted", "False", "InvalidParameters"))
        .await;
}

/// GatewayInvalidTLSConfiguration: a certificate reference that does not resolve (no
/// such Secret, another group or kind, not a certificate) is `InvalidCertificateRef`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_tls_configuration() {
    let suite = Suite::start().await;
    use base64::Engine;
    let hello = base64::engine::general_purpose::STANDARD.encode("Hello world\n");
    suite.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: malformed-certificate, namespace: gateway-conformance-infra}}\ntype: kubernetes.io/tls\ndata: {{tls.crt: {hello}, tls.key: {hello}}}\n"
    ));
    for (name, reference) in [
        (
            "gateway-certificate-nonexistent-secret",
            "{group: '', kind: Secret, name: nonexistent-certificate}",
        ),
        (
            "gateway-certificate-unsupported-group",
            "{group: wrong.group.company.io, kind: Secret, name: tls-validity-checks-certificate}",
        ),
        (
            "gateway-certificate-unsupported-kind",
            "{group: '', kind: WrongKind, name: tls-validity-checks-certificate}",
        ),
        (
            "gateway-certificate-malformed-secret",
            "{group: '', kind: Secret, name: malformed-certificate}",
        ),
    ] {
        suite.apply(&gateway(
            name,
            "",
            &format!("    - {{name: https, port: 443, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: All}}}}, tls: {{certificateRefs: [{reference}]}}}}\n"),
        ));
        suite
            .listeners_exactly(
                (INFRA, name),
                &[Listener {
                    name: "https",
                    kinds: HTTP,
                    attached: 0,
                    conditions: &[("ResolvedRefs", "False", "InvalidCertificateRef")],
                }],
            )
            .await;
    }
}

/// An HTTPS listener on 443 whose certificate is `web/certificate`.
fn web_certificate_listener() -> String {
    "    - {name: https, port: 443, protocol: HTTPS, allowedRoutes: {namespaces: {from: All}}, tls: {certificateRefs: [{group: '', kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}]}}\n".to_string()
}

/// A ReferenceGrant `ns/name` from (group, kind, namespace) to (group, kind, name).
fn grant(ns: &str, name: &str, from: (&str, &str, &str), to: (&str, &str, Option<&str>)) -> String {
    let to_name = to.2.map(|n| format!(", name: {n}")).unwrap_or_default();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  from: [{{group: '{}', kind: {}, namespace: {}}}]\n  to: [{{group: '{}', kind: {}{to_name}}}]\n---\n",
        from.0, from.1, from.2, to.0, to.1
    )
}

/// A Gateway whose certificate is another namespace's: its listener as `expected`.
async fn secret_of_another_namespace(
    suite: &Suite,
    name: &str,
    grants: &str,
    expected: &[(&str, &str, &str)],
) {
    suite.apply(grants);
    suite.apply(&gateway(name, "", &web_certificate_listener()));
    suite
        .listeners_exactly(
            (INFRA, name),
            &[Listener {
                name: "https",
                kinds: HTTP,
                attached: 0,
                conditions: expected,
            }],
        )
        .await;
    suite
        .gateway_condition((INFRA, name), ("Accepted", "True", ""))
        .await;
    suite
        .gateway_condition((INFRA, name), ("Programmed", "True", ""))
        .await;
}

/// GatewaySecretMissingReferenceGrant: another namespace's Secret without a grant is
/// `RefNotPermitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_missing_reference_grant() {
    let suite = Suite::start().await;
    // Isobar serves a listener it cannot program as not programmed; the Gateway is
    // programmed by its others, so this one needs one more to be.
    secret_of_another_namespace(
        &suite,
        "gateway-secret-missing-reference-grant",
        "",
        &[("ResolvedRefs", "False", "RefNotPermitted")],
    )
    .await;
}

/// GatewaySecretInvalidReferenceGrant: grants that each miss one part of the
/// reference permit nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_invalid_reference_grant() {
    let suite = Suite::start().await;
    let (gw, web, app) = (
        "gateway.networking.k8s.io",
        crate::conformance::suite::WEB,
        crate::conformance::suite::APP,
    );
    let grants = [
        grant(
            app,
            "reference-grant-wrong-namespace",
            (gw, "Gateway", INFRA),
            ("", "Secret", Some("certificate")),
        ),
        grant(
            web,
            "reference-grant-wrong-from-group",
            ("not-the-group-youre-looking-for", "Gateway", INFRA),
            ("", "Secret", Some("certificate")),
        ),
        grant(
            web,
            "reference-grant-wrong-from-kind",
            (gw, "HTTPRoute", INFRA),
            ("", "Secret", Some("certificate")),
        ),
        grant(
            web,
            "reference-grant-wrong-from-namespace",
            (gw, "Gateway", "not-the-namespace-youre-looking-for"),
            ("", "Secret", Some("certificate")),
        ),
        grant(
            web,
            "reference-grant-wrong-to-group",
            (gw, "Gateway", INFRA),
            (
                "not-the-group-youre-looking-for",
                "Secret",
                Some("not-the-certificate-youre-looking-for"),
            ),
        ),
        grant(
            web,
            "reference-grant-wrong-to-kind",
            (gw, "Gateway", INFRA),
            ("", "Service", Some("certificate")),
        ),
        grant(
            web,
            "reference-grant-wrong-to-name",
            (gw, "Gateway", INFRA),
            ("", "Secret", Some("not-the-certificate-youre-looking-for")),
        ),
    ]
    .concat();
    secret_of_another_namespace(
        &suite,
        "gateway-secret-invalid-reference-grant",
        &grants,
        &[("ResolvedRefs", "False", "RefNotPermitted")],
    )
    .await;
}

/// GatewaySecretReferenceGrantAllInNamespace: a grant of every Secret of a namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_reference_grant_all_in_namespace() {
    let suite = Suite::start().await;
    let web = crate::conformance::suite::WEB;
    secret_of_another_namespace(
        &suite,
        "gateway-secret-reference-grant-all-in-namespace",
        &grant(
            web,
            "reference-grant-all-in-namespace",
            ("gateway.networking.k8s.io", "Gateway", INFRA),
            ("", "Secret", None),
        ),
        &[
            ("Programmed", "True", "Programmed"),
            ("ResolvedRefs", "True", ""),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// GatewaySecretReferenceGrantSpecific: a grant of the one Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_reference_grant_specific() {
    let suite = Suite::start().await;
    let web = crate::conformance::suite::WEB;
    secret_of_another_namespace(
        &suite,
        "gateway-secret-reference-grant-specific",
        &grant(
            web,
            "reference-grant-specific",
            ("gateway.networking.k8s.io", "Gateway", INFRA),
            ("", "Secret", Some("certificate")),
        ),
        &[
            ("Programmed", "True", "Programmed"),
            ("ResolvedRefs", "True", ""),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// GatewayModifyListeners: a listener added or removed is (or no longer is) in the
/// status, with the routes attached to it counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_modify_listeners() {
    let suite = Suite::start().await;
    let https = format!(
        "    - {{name: https, port: 443, protocol: HTTPS, hostname: secure.test.com, allowedRoutes: {{namespaces: {{from: All}}}}, tls: {CERT}}}\n"
    );
    let added = "    - {name: http, port: 80, protocol: HTTP, hostname: data.test.com, allowedRoutes: {namespaces: {from: All}}}\n";
    let plain =
        "    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}\n";
    let parent =
        |gw: &str| format!("[{{kind: Gateway, name: {gw}, namespace: gateway-conformance-infra}}]");
    suite.apply(&gateway("gateway-add-listener", "", &https));
    suite.apply(&route(
        "http-route-1",
        &parent("gateway-add-listener"),
        "",
        TO_V1,
    ));
    let add = (INFRA, "gateway-add-listener");
    suite
        .gateway_condition(add, ("Programmed", "True", ""))
        .await;
    let before = suite.get(GW, "Gateway", INFRA, add.1)["metadata"]["generation"].clone();
    suite.apply(&gateway(
        "gateway-add-listener",
        "",
        &format!("{https}{added}"),
    ));
    suite.gateway_condition(add, ("Accepted", "True", "")).await;
    suite
        .gateway_condition(add, ("Programmed", "True", ""))
        .await;
    suite
        .listeners_exactly(
            add,
            &[
                Listener {
                    name: "https",
                    kinds: HTTP,
                    attached: 1,
                    conditions: OK,
                },
                Listener {
                    name: "http",
                    kinds: HTTP,
                    attached: 1,
                    conditions: OK,
                },
            ],
        )
        .await;
    let after = suite.get(GW, "Gateway", INFRA, add.1)["metadata"]["generation"].clone();
    assert_ne!(before, after);

    suite.apply(&gateway(
        "gateway-remove-listener",
        "",
        &format!("{https}{plain}"),
    ));
    suite.apply(&route(
        "http-route-2",
        &parent("gateway-remove-listener"),
        "",
        TO_V1,
    ));
    let remove = (INFRA, "gateway-remove-listener");
    suite
        .gateway_condition(remove, ("Programmed", "True", ""))
        .await;
    let before = suite.get(GW, "Gateway", INFRA, remove.1)["metadata"]["generation"].clone();
    suite.apply(&gateway("gateway-remove-listener", "", plain));
    suite
        .gateway_condition(remove, ("Programmed", "True", ""))
        .await;
    suite
        .listeners_exactly(
            remove,
            &[Listener {
                name: "http",
                kinds: HTTP,
                attached: 1,
                conditions: OK,
            }],
        )
        .await;
    let after = suite.get(GW, "Gateway", INFRA, remove.1)["metadata"]["generation"].clone();
    assert_ne!(before, after);
    suite.assert_nothing_rejected().await;
}

/// GatewayObservedGenerationBump: an edit of a Gateway moves its conditions to the new
/// generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_observed_generation_bump() {
    let suite = Suite::start().await;
    let name = "gateway-observed-generation-bump";
    let first = "    - {name: http, hostname: bar.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}\n";
    let second = "    - {name: alternate, hostname: foo.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}\n";
    suite.apply(&gateway(name, "", first));
    suite
        .gateway_condition((INFRA, name), ("Programmed", "True", ""))
        .await;
    let before = suite.get(GW, "Gateway", INFRA, name)["metadata"]["generation"].clone();
    suite.apply(&gateway(name, "", &format!("{first}{second}")));
    suite
        .gateway_condition((INFRA, name), ("Accepted", "True", ""))
        .await;
    suite
        .gateway_condition((INFRA, name), ("Programmed", "True", ""))
        .await;
    let after = suite.get(GW, "Gateway", INFRA, name)["metadata"]["generation"].clone();
    assert_ne!(before, after);
}

/// GatewayClassObservedGenerationBump: an edit of a GatewayClass moves its conditions to
/// the new generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_class_observed_generation_bump() {
    let suite = Suite::start().await;
    let name = "gatewayclass-observed-generation-bump";
    let class = |description: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: {name}}}\nspec: {{controllerName: {}, description: {description}}}\n",
            crate::conformance::suite::CONTROLLER
        )
    };
    let accepted = |c: &serde_json::Value| {
        fresh(c)
            && c["status"]["conditions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|c| c["type"] == "Accepted"))
    };
    suite.apply(&class("old"));
    suite
        .wait_for((GW, "GatewayClass", "", name), "Accepted", accepted)
        .await;
    let before = suite.get(GW, "GatewayClass", "", name)["metadata"]["generation"].clone();
    suite.apply(&class("new"));
    let after = suite
        .wait_for((GW, "GatewayClass", "", name), "Accepted", |c| {
            accepted(c) && c["metadata"]["generation"] != before
        })
        .await;
    assert_ne!(before, after["metadata"]["generation"]);
    assert_eq!(CLASS, "gateway-conformance");
}

/// GatewayWithAttachedRoutes: listeners count the routes attached to them (not those
/// whose hostnames do not intersect), a listener whose certificate does not resolve too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_with_attached_routes() {
    let suite = Suite::start().await;
    let allowed = "allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: Selector, selector: {matchLabels: {kubernetes.io/metadata.name: gateway-conformance-infra}}}}";
    // What an API server labels every namespace with.
    suite.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: gateway-conformance-infra, labels: {gateway-conformance: infra, kubernetes.io/metadata.name: gateway-conformance-infra}}\n");
    let parent = |gw: &str, section: &str| {
        format!("[{{kind: Gateway, name: {gw}, namespace: gateway-conformance-infra{section}}}]")
    };
    suite.apply(&gateway(
        "gateway-with-one-attached-route",
        "",
        &format!("    - {{name: http, port: 80, protocol: HTTP, {allowed}}}\n"),
    ));
    suite.apply(&route(
        "http-route-1",
        &parent("gateway-with-one-attached-route", ""),
        "",
        TO_V1,
    ));
    suite.apply(&gateway(
        "gateway-with-two-attached-routes",
        "",
        &format!(
            "    - {{name: http, port: 80, protocol: HTTP, hostname: foo.example.com, {allowed}}}\n"
        ),
    ));
    for name in ["http-route-2", "http-route-3"] {
        suite.apply(&route(
            name,
            &parent("gateway-with-two-attached-routes", ""),
            "",
            TO_V1,
        ));
    }
    suite.apply(&route(
        "http-route-not-accepted",
        &parent("gateway-with-two-attached-routes", ""),
        "not-accepted.test.com",
        TO_V1,
    ));
    let unresolved = "unresolved-gateway-with-one-attached-unresolved-route";
    suite.apply(&gateway(unresolved, "", &format!("    - {{name: tls, port: 443, protocol: HTTPS, {allowed}, tls: {{certificateRefs: [{{group: '', kind: Secret, name: does-not-exist}}], mode: Terminate}}}}\n")));
    suite.apply(&route(
        "http-route-4",
        &parent(unresolved, ", sectionName: tls"),
        "",
        "    - backendRefs: [{name: does-not-exist, port: 8080}]\n",
    ));
    suite
        .listeners_exactly(
            (INFRA, "gateway-with-one-attached-route"),
            &[Listener {
                name: "http",
                kinds: HTTP,
                attached: 1,
                conditions: OK,
            }],
        )
        .await;
    suite
        .listeners_exactly(
            (INFRA, "gateway-with-two-attached-routes"),
            &[Listener {
                name: "http",
                kinds: HTTP,
                attached: 2,
                conditions: OK,
            }],
        )
        .await;
    suite
        .route_condition(
            ("HTTPRoute", INFRA, "http-route-not-accepted"),
            (INFRA, "gateway-with-two-attached-routes"),
            ("Accepted", "False", "NoMatchingListenerHostname"),
        )
        .await;
    suite
        .listeners_exactly(
            (INFRA, unresolved),
            &[Listener {
                name: "tls",
                kinds: HTTP,
                attached: 1,
                conditions: &[("Programmed", "False", ""), ("ResolvedRefs", "False", "")],
            }],
        )
        .await;
    suite
        .route_condition(
            ("HTTPRoute", INFRA, "http-route-4"),
            (INFRA, unresolved),
            ("ResolvedRefs", "False", ""),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// GatewayWithAttachedRoutesWithPort8080: a route attached by sectionName counts on its
/// listener only, beside a listener on 8080.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_with_attached_routes_with_port_8080() {
    let suite = Suite::start().await;
    let name = "gateway-with-two-listeners-and-one-attached-route";
    suite.apply(&gateway(
        name,
        "",
        "    - {name: http-unattached, port: 8080, protocol: HTTP, allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: All}}}\n    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: All}}}\n",
    ));
    suite.apply(&route("http-route-4-port-8080", &format!("[{{kind: Gateway, name: {name}, namespace: gateway-conformance-infra, sectionName: http}}]"), "", TO_V1));
    suite
        .listeners_exactly(
            (INFRA, name),
            &[
                Listener {
                    name: "http-unattached",
                    kinds: HTTP,
                    attached: 0,
                    conditions: OK,
                },
                Listener {
                    name: "http",
                    kinds: HTTP,
                    attached: 1,
                    conditions: OK,
                },
            ],
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// GatewayStaticAddresses: an address of a type Isobar does not serve leaves the Gateway
/// not accepted; one outside the address pool leaves it not programmed; one in the pool
/// becomes its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_static_addresses() {
    let suite = Suite::start().await;
    let name = "gateway-static-addresses";
    let (usable, unusable) = (suite.usable_address().await, suite.unusable_address());
    let yaml = |addresses: &str| {
        gateway(
            name,
            &format!("  addresses: [{addresses}]\n"),
            "    - {name: http, port: 8080, protocol: HTTP}\n",
        )
    };
    let invalid = "{type: test/fake-invalid-type, value: 'fake address teehee!'}";
    let unusable_entry = format!("{{type: IPAddress, value: '{unusable}'}}");
    let usable_entry = format!("{{type: IPAddress, value: '{usable}'}}");
    let gw = (INFRA, name);
    suite.apply(&yaml(&format!(
        "{invalid}, {unusable_entry}, {usable_entry}"
    )));
    suite
        .gateway_condition(gw, ("Accepted", "False", "UnsupportedAddress"))
        .await;
    suite.apply(&yaml(&format!("{unusable_entry}, {usable_entry}")));
    suite
        .gateway_condition(gw, ("Accepted", "True", "Accepted"))
        .await;
    suite
        .gateway_condition(gw, ("Programmed", "False", "AddressNotUsable"))
        .await;
    suite.apply(&yaml(&usable_entry));
    suite
        .gateway_condition(gw, ("Accepted", "True", "Accepted"))
        .await;
    suite
        .gateway_condition(gw, ("Programmed", "True", "Programmed"))
        .await;
    suite
        .listeners_exactly(
            gw,
            &[Listener {
                name: "http",
                kinds: HTTP,
                attached: 0,
                conditions: OK,
            }],
        )
        .await;
    let g = suite.get(GW, "Gateway", INFRA, name);
    let addresses = g["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(addresses.len(), 1, "{}", g["status"]);
    assert_eq!(addresses[0]["value"], usable.to_string());
    assert_eq!(addresses[0]["type"], "IPAddress");
    // And it serves there.
    suite.apply(&route("static", &format!("[{{name: {name}}}]"), "", TO_V1));
    let addr = suite
        .routes_accepted(gw, "HTTPRoute", &[(INFRA, "static")])
        .await;
    assert_eq!(addr.ip(), usable);
    suite
        .expect(addr, &get("/").backend("infra-backend-v1"))
        .await;
    suite.assert_nothing_rejected().await;
}

/// GatewayOptionalAddressValue: an address asked for without a value is chosen; the
/// Gateway without addresses gets one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_optional_address_value() {
    let suite = Suite::start().await;
    let name = "gateway-without-address-value";
    suite.apply(&gateway(
        name,
        "  addresses: [{type: IPAddress}]\n",
        "    - {name: http, port: 8080, protocol: HTTP}\n",
    ));
    let addr = suite.gateway_address(INFRA, name, Some("http")).await;
    assert_eq!(addr.port(), 8080);
    suite
        .gateway_condition((INFRA, name), ("Programmed", "True", ""))
        .await;
}

/// Client certificates of the frontend tests.
struct Clients {
    matching: client::Tls,
    other: client::Tls,
}

/// TLS to the frontend tests' listeners with SNI `sni`: with the certificate of `ca`
/// (matching), the other one, and none.
fn clients(suite: &Suite, sni: &str, per_port: bool) -> (Clients, client::Tls) {
    let (v, p) = (&suite.certs.frontend_client, &suite.certs.per_port_client);
    let (mine, theirs) = if per_port { (p, v) } else { (v, p) };
    (
        Clients {
            matching: suite.https(sni).with_identity(&mine.der, &mine.key_pem),
            other: suite.https(sni).with_identity(&theirs.der, &theirs.key_pem),
        },
        suite.https(sni),
    )
}

/// The frontend tests' Gateway: client validation by default and on 8443, listeners on
/// 443 and 8443 (`second-example.org`), and a route on each.
fn frontend_objects(name: &str, mode: &str, route_prefix: &str) -> String {
    let validation = |ca: &str| {
        format!("{{{mode}caCertificateRefs: [{{kind: ConfigMap, group: '', name: {ca}}}]}}")
    };
    format!(
        "{}---\n{}---\n{}",
        gateway(
            name,
            &format!(
                "  tls:\n    frontend:\n      default: {{validation: {}}}\n      perPort: [{{port: 8443, tls: {{validation: {}}}}}]\n",
                validation("tls-validity-checks-ca-certificate"),
                validation("tls-validity-checks-per-port-ca-certificate")
            ),
            &format!(
                "    - {{name: https, port: 443, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {CERT}}}\n    - {{name: https-with-hostname, port: 8443, hostname: second-example.org, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {CERT}}}\n"
            ),
        ),
        route(
            route_prefix,
            &format!("[{{name: {name}}}]"),
            "example.org",
            TO_V1
        ),
        route(
            &format!("{route_prefix}-no-hostname"),
            &format!("[{{name: {name}, sectionName: https-with-hostname}}]"),
            "",
            "    - backendRefs: [{name: infra-backend-v2, port: 8080}]\n"
        ),
    )
}

/// GatewayFrontendClientCertificateValidation: HTTPS listeners ask clients for
/// certificates of the CA named by default or for their port, and refuse the handshake
/// of any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_client_certificate_validation() {
    let suite = Suite::start().await;
    let name = "client-validation-default";
    let prefix = "client-certificate-validation-https-test";
    suite.apply(&frontend_objects(name, "", prefix));
    let routes = [
        (INFRA, prefix.to_string()),
        (INFRA, format!("{prefix}-no-hostname")),
    ];
    let keys: Vec<(&str, &str)> = routes.iter().map(|(n, r)| (*n, r.as_str())).collect();
    let addr = suite
        .routes_accepted((INFRA, name), "HTTPRoute", &keys)
        .await;
    for (ns, r) in &keys {
        suite
            .route_resolved(("HTTPRoute", ns, r), (INFRA, name))
            .await;
    }
    for (port, sni, backend, per_port) in [
        (443, "example.org", "infra-backend-v1", false),
        (8443, "second-example.org", "infra-backend-v2", true),
    ] {
        let at = std::net::SocketAddr::new(addr.ip(), port);
        let (clients, _) = clients(&suite, sni, per_port);
        let expect = get("/").host(sni).backend(backend);
        suite
            .expect_over(at, &Protocol::Https(clients.matching.clone()), &expect)
            .await;
        assert!(
            clients
                .matching
                .asked
                .load(std::sync::atomic::Ordering::SeqCst),
            "{sni}: no certificate asked for"
        );
        let refused = client::send(
            at,
            &Protocol::Https(clients.other.clone()),
            &expect.request,
            &[],
        )
        .await;
        assert!(
            refused.is_err(),
            "{sni}: a certificate of another CA got an answer: {refused:?}"
        );
        assert!(
            clients
                .other
                .asked
                .load(std::sync::atomic::Ordering::SeqCst)
        );
    }
    suite.assert_nothing_rejected().await;
}

/// GatewayFrontendClientCertificateValidationInsecureFallback: with
/// `AllowInsecureFallback` the listeners still ask for certificates but let in clients
/// with another or none; the Gateway says `InsecureFrontendValidationMode`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_client_certificate_validation_insecure_fallback() {
    let suite = Suite::start().await;
    let name = "client-validation-insecure-fallback";
    let prefix = "client-cert-validation-insecure-fallback-test";
    suite.apply(&frontend_objects(
        name,
        "mode: AllowInsecureFallback, ",
        prefix,
    ));
    let routes = [
        (INFRA, prefix.to_string()),
        (INFRA, format!("{prefix}-no-hostname")),
    ];
    let keys: Vec<(&str, &str)> = routes.iter().map(|(n, r)| (*n, r.as_str())).collect();
    let addr = suite
        .routes_accepted((INFRA, name), "HTTPRoute", &keys)
        .await;
    for (ns, r) in &keys {
        suite
            .route_resolved(("HTTPRoute", ns, r), (INFRA, name))
            .await;
    }
    suite
        .gateway_condition(
            (INFRA, name),
            (
                "InsecureFrontendValidationMode",
                "True",
                "ConfigurationChanged",
            ),
        )
        .await;
    for (port, sni, backend, per_port) in [
        (443, "example.org", "infra-backend-v1", false),
        (8443, "second-example.org", "infra-backend-v2", true),
    ] {
        let at = std::net::SocketAddr::new(addr.ip(), port);
        let (clients, none) = clients(&suite, sni, per_port);
        let expect = get("/").host(sni).backend(backend);
        for tls in [&clients.matching, &clients.other] {
            suite
                .expect_over(at, &Protocol::Https(tls.clone()), &expect)
                .await;
            assert!(
                tls.asked.load(std::sync::atomic::Ordering::SeqCst),
                "{sni}: no certificate asked for"
            );
        }
        suite.expect_over(at, &Protocol::Https(none), &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// GatewayFrontendInvalidDefaultClientCertificateValidation: a default CA reference
/// that does not resolve leaves the HTTPS listener not accepted
/// (`NoValidCACertificate`) and closed, the HTTP one untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_invalid_default_client_certificate_validation() {
    let suite = Suite::start().await;
    let name = "invalid-default-client-validation-config";
    suite.apply(&gateway(
        name,
        "  tls:\n    frontend:\n      default: {validation: {caCertificateRefs: [{kind: ConfigMap, group: '', name: does-not-exist}]}}\n      perPort: [{port: 80, tls: {validation: {caCertificateRefs: [{kind: ConfigMap, group: '', name: tls-validity-checks-per-port-ca-certificate}]}}}]\n",
        &format!("    - {{name: https, port: 443, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {CERT}}}\n    - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n"),
    ));
    suite.apply(&route(
        name,
        &format!("[{{name: {name}}}]"),
        "example.org",
        TO_V1,
    ));
    let addr = suite.gateway_address(INFRA, name, None).await;
    let gw = (INFRA, name);
    suite
        .listener_conditions(
            gw,
            "http",
            &[
                ("ResolvedRefs", "True", ""),
                ("Accepted", "True", ""),
                ("Programmed", "True", ""),
            ],
        )
        .await;
    let http = std::net::SocketAddr::new(addr.ip(), 80);
    suite
        .expect(
            http,
            &get("/").host("example.org").backend("infra-backend-v1"),
        )
        .await;
    suite
        .listener_conditions(
            gw,
            "https",
            &[
                ("ResolvedRefs", "False", "InvalidCACertificateRef"),
                ("Accepted", "False", "NoValidCACertificate"),
                ("Programmed", "False", ""),
            ],
        )
        .await;
    let https = std::net::SocketAddr::new(addr.ip(), 443);
    let refused = client::send(
        https,
        &Protocol::Https(suite.https("example.org")),
        &get("/").host("example.org").request,
        &[],
    )
    .await;
    assert!(refused.is_err(), "the HTTPS listener answered: {refused:?}");
    suite.gateway_condition(gw, ("Accepted", "True", "")).await;
    suite
        .gateway_condition(gw, ("Programmed", "True", ""))
        .await;
    suite.assert_nothing_rejected().await;
}

/// GatewayInvalidFrontendClientCertificateValidation: a per-port CA reference that does
/// not resolve (no such ConfigMap, another kind, another namespace without a grant)
/// leaves only that port's listener not accepted, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_frontend_client_certificate_validation() {
    let suite = Suite::start().await;
    let name = "gateway-with-invalid-client-cert-validation";
    let listener = |n: &str, port: u16, host: &str| {
        format!(
            "    - {{name: {n}, port: {port}, {host}protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {CERT}}}\n"
        )
    };
    suite.apply(&gateway(
        name,
        "  tls:\n    frontend:\n      default: {validation: {caCertificateRefs: [{kind: ConfigMap, group: '', name: tls-validity-checks-ca-certificate}]}}\n      perPort:\n        - {port: 7443, tls: {validation: {caCertificateRefs: [{kind: ConfigMap, group: '', name: non-exisitng-cm}]}}}\n        - {port: 8443, tls: {validation: {caCertificateRefs: [{kind: Service, group: '', name: infra-backend-v2}]}}}\n        - {port: 6443, tls: {validation: {caCertificateRefs: [{kind: ConfigMap, group: '', name: web-backend-cm, namespace: gateway-conformance-web-backend}]}}}\n",
        &[
            listener("https", 443, ""),
            listener("https-unresolved", 7443, "hostname: first-example.org, "),
            listener("https-invalid-kind", 8443, "hostname: second-example.org, "),
            listener("https-grant-missing", 6443, "hostname: fourth-example.org, "),
        ]
        .concat(),
    ));
    let gw = (INFRA, name);
    suite
        .listener_conditions(
            gw,
            "https",
            &[
                ("ResolvedRefs", "True", ""),
                ("Accepted", "True", ""),
                ("Programmed", "True", ""),
            ],
        )
        .await;
    for (listener, reason) in [
        ("https-unresolved", "InvalidCACertificateRef"),
        ("https-invalid-kind", "InvalidCACertificateKind"),
        ("https-grant-missing", "RefNotPermitted"),
    ] {
        suite
            .listener_conditions(
                gw,
                listener,
                &[
                    ("ResolvedRefs", "False", reason),
                    ("Accepted", "False", "NoValidCACertificate"),
                    ("Programmed", "False", ""),
                ],
            )
            .await;
    }
    suite.gateway_condition(gw, ("Accepted", "True", "")).await;
    suite
        .gateway_condition(gw, ("Programmed", "True", ""))
        .await;
}

/// GatewayInvalidTLSBackendConfiguration: a backend client certificate reference that
/// does not resolve is the Gateway's `ResolvedRefs` False, with the reason; the Gateway
/// stays accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_tls_backend_configuration() {
    let suite = Suite::start().await;
    suite.apply("apiVersion: v1\nkind: Secret\nmetadata: {name: malformed-client-certificate, namespace: gateway-conformance-infra}\ntype: Opaque\ndata: {}\n");
    for (name, reference, reason) in [
        (
            "gateway-client-certificate-nonexistent-secret",
            "{group: '', kind: Secret, name: nonexistent-certificate}",
            "InvalidClientCertificateRef",
        ),
        (
            "gateway-client-certificate-unsupported-group",
            "{group: wrong.group.company.io, kind: Secret, name: tls-validity-checks-certificate}",
            "InvalidClientCertificateRef",
        ),
        (
            "gateway-client-certificate-unsupported-kind",
            "{group: '', kind: WrongKind, name: tls-validity-checks-certificate}",
            "InvalidClientCertificateRef",
        ),
        (
            "gateway-client-certificate-malformed-secret",
            "{group: '', kind: Secret, name: malformed-client-certificate}",
            "InvalidClientCertificateRef",
        ),
        (
            "gateway-client-certificate-missing-reference-grant",
            "{group: '', kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}",
            "RefNotPermitted",
        ),
    ] {
        suite.apply(&gateway(
            name,
            &format!("  tls: {{backend: {{clientCertificateRef: {reference}}}}}\n"),
            "    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}\n",
        ));
        suite
            .gateway_condition((INFRA, name), ("ResolvedRefs", "False", reason))
            .await;
        suite
            .gateway_condition((INFRA, name), ("Accepted", "True", "Accepted"))
            .await;
        suite
            .gateway_condition((INFRA, name), ("Programmed", "True", ""))
            .await;
    }
}

/// GatewayTLSBackendClientCertificate: Envoy presents the Gateway's backend client
/// certificate to a TLS backend, with the SNI its BackendTLSPolicy names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_tls_backend_client_certificate() {
    let suite = Suite::start().await;
    let name = "gateway-tls-backend-client-certificate";
    let backend = "tls-backend-with-client-cert-validation";
    suite
        .deploy_tls_echo(INFRA, backend, &[("https", 443, 8443, "")])
        .await;
    suite.apply(&gateway(
        name,
        "  tls: {backend: {clientCertificateRef: {group: '', kind: Secret, name: tls-checks-client-certificate}}}\n",
        "    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}\n",
    ));
    suite.apply(&route(
        name,
        &format!("[{{name: {name}, namespace: gateway-conformance-infra}}]"),
        "abc.example.com",
        &format!("    - matches: [{{path: {{type: Exact, value: /}}}}]\n      backendRefs: [{{group: '', kind: Service, name: {backend}, port: 443}}]\n"),
    ));
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: gateway-tls-backend-client-certificate-test, namespace: gateway-conformance-infra}}\nspec:\n  targetRefs: [{{group: '', kind: Service, name: {backend}}}]\n  validation:\n    caCertificateRefs: [{{group: '', kind: ConfigMap, name: tls-checks-ca-certificate}}]\n    hostname: abc.example.com\n"
    ));
    let addr = suite
        .routes_accepted((INFRA, name), "HTTPRoute", &[(INFRA, name)])
        .await;
    suite
        .route_resolved(("HTTPRoute", INFRA, name), (INFRA, name))
        .await;
    suite
        .wait_for(
            (
                GW,
                "BackendTLSPolicy",
                INFRA,
                "gateway-tls-backend-client-certificate-test",
            ),
            "Accepted on the Gateway",
            |p| {
                p["status"]["ancestors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| {
                        a["ancestorRef"]["name"] == name
                            && has(&a["conditions"], "Accepted", "True", "Accepted")
                    })
            },
        )
        .await;
    suite
        .gateway_condition((INFRA, name), ("ResolvedRefs", "True", "ResolvedRefs"))
        .await;
    let expect = get("/")
        .host("abc.example.com")
        .sees_sni("abc.example.com")
        .sees_client_cert(&suite.certs.checks_client.cert_pem);
    suite.expect(addr, &expect).await;
    suite.assert_nothing_rejected().await;
}
