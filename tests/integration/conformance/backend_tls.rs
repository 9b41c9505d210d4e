//! The suite's BackendTLSPolicy tests: Envoy re-encrypts to the `tls-backend` pods with
//! the policy's SNI, verifies them with the policy's CA (and SANs), and the policies'
//! status on each Gateway their Services are reached through.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conformance::client::{self, Expect, Protocol, get};
use crate::conformance::suite::{GW, INFRA, Suite};

/// Services of the test selecting the `tls-backend` pods: name, ports (name, port,
/// appProtocol), each to the pods' 8443.
/// A Service's ports for [`tls_services`]: name, port, appProtocol.
type Ports<'a> = &'a [(&'a str, u16, &'a str)];

fn tls_services(suite: &Suite, services: &[(&str, Ports<'_>)]) {
    let pods = suite.pods_of(INFRA, "tls-backend");
    for (name, ports) in services {
        let ports: Vec<(&str, u16, u16, &str)> = ports
            .iter()
            .map(|(port_name, port, app)| (*port_name, *port, 8443, *app))
            .collect();
        suite.service(INFRA, name, &ports, &pods);
    }
}

/// A BackendTLSPolicy of the infra namespace for Service `service` (port `section`),
/// with these CA references, hostname and subjectAltNames (a YAML flow list, or "").
fn policy(
    name: &str,
    service: &str,
    section: Option<&str>,
    cas: &str,
    hostname: &str,
    sans: &str,
) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    let sans = if sans.is_empty() {
        String::new()
    } else {
        format!("\n    subjectAltNames: {sans}")
    };
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  targetRefs: [{{group: '', kind: Service, name: {service}{section}}}]\n  validation:\n    caCertificateRefs: {cas}\n    hostname: {hostname}{sans}\n---\n"
    )
}

const CHECKS_CA: &str = "[{group: '', kind: ConfigMap, name: tls-checks-ca-certificate}]";

/// An HTTPRoute of the infra namespace on `parent` for `abc.example.com` (or
/// `hostname`), with Exact path rules to Service ports.
fn route(name: &str, parent: &str, hostname: &str, rules: &[(&str, &str, u16)]) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|(path, service, port)| {
            format!("    - matches: [{{path: {{type: Exact, value: {path}}}}}]\n      backendRefs: [{{name: {service}, port: {port}}}]\n")
        })
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {parent}, namespace: gateway-conformance-infra}}]\n  hostnames: [{hostname}]\n  rules:\n{}---\n",
        rules.concat()
    )
}

/// The suite's `BackendTLSPolicyMustHaveCondition` (see [`Suite::policy_condition`]).
async fn policy_condition(suite: &Suite, name: &str, gw: &str, condition: (&str, &str, &str)) {
    suite
        .policy_condition((GW, "BackendTLSPolicy", name), gw, condition)
        .await;
}

const ACCEPTED: (&str, &str, &str) = ("Accepted", "True", "Accepted");
const RESOLVED: (&str, &str, &str) = ("ResolvedRefs", "True", "ResolvedRefs");
const NO_VALID_CA: (&str, &str, &str) = ("Accepted", "False", "NoValidCACertificate");
const INVALID_CA_REF: (&str, &str, &str) = ("ResolvedRefs", "False", "InvalidCACertificateRef");

/// The suite's `MakeRequestAndExpectFailure`: five answers in a row, within 30 s, that
/// are neither 200 nor a timeout (408, 504); a 200 fails at once.
async fn expect_failure(suite: &Suite, addr: SocketAddr, host: &str, path: &str) {
    let expect = get(path).host(host);
    let start = Instant::now();
    let mut in_a_row = 0;
    let mut last = String::new();
    while start.elapsed() < client::CONSISTENCY {
        match client::send(addr, &Protocol::Http, &expect.request, &[]).await {
            Ok(answer) if answer.status == 200 => {
                panic!(
                    "{host}{path}: answered 200 where it must fail: {}",
                    answer.body
                )
            }
            Ok(answer) if answer.status != 408 && answer.status != 504 => {
                in_a_row += 1;
                if in_a_row >= 5 {
                    return;
                }
                continue;
            }
            Ok(answer) => last = format!("status {}", answer.status),
            Err(e) => last = e,
        }
        in_a_row = 0;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "{host}{path}: no consistent failure: {last}\n{}",
        suite.logs()
    );
}

/// A request through the plain HTTP Gateway that the backend answers over TLS with SNI
/// `sni`.
fn via_tls(path: &str, sni: &str) -> Expect {
    get(path)
        .host("abc.example.com")
        .namespace(INFRA)
        .sees_sni(sni)
}

/// BackendTLSPolicy: re-encryption from an HTTPS listener and from an HTTP one with the
/// policy's SNI, verified by its CA; a wrong hostname or CA fails the request but not the
/// policy; a CA ConfigMap created, emptied and restored is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy() {
    let suite = Suite::start().await;
    tls_services(
        &suite,
        &[
            ("backendtlspolicy-test", &[("btls", 443, "")]),
            (
                "backendtlspolicy-host-mismatch-test",
                &[("btls", 443, "HTTPS")],
            ),
            (
                "backendtlspolicy-cert-mismatch-test",
                &[("btls", 443, "HTTPS")],
            ),
            ("backendtlspolicy-reconcile-test", &[("btls", 443, "")]),
        ],
    );
    suite.apply(&format!(
        "{}{}{}{}{}{}",
        route(
            "backendtlspolicy",
            "same-namespace",
            "abc.example.com",
            &[
                ("/backendtlspolicy", "backendtlspolicy-test", 443),
                (
                    "/backendtlspolicy-host-mismatch",
                    "backendtlspolicy-host-mismatch-test",
                    443
                ),
                (
                    "/backendtlspolicy-cert-mismatch",
                    "backendtlspolicy-cert-mismatch-test",
                    443
                ),
                (
                    "/backendtlspolicy-reconcile-test",
                    "backendtlspolicy-reconcile-test",
                    443
                ),
            ],
        ),
        route(
            "backendtlspolicy-reencrypt",
            "same-namespace-with-https-listener",
            "https-listener.org",
            &[("/backendtlspolicy", "backendtlspolicy-test", 443)],
        ),
        policy(
            "normative-test",
            "backendtlspolicy-test",
            Some("btls"),
            CHECKS_CA,
            "abc.example.com",
            ""
        ),
        policy(
            "host-mismatch",
            "backendtlspolicy-host-mismatch-test",
            Some("btls"),
            CHECKS_CA,
            "mismatch.example.com",
            ""
        ),
        policy(
            "cert-mismatch",
            "backendtlspolicy-cert-mismatch-test",
            Some("btls"),
            "[{group: '', kind: ConfigMap, name: mismatch-ca-certificate}]",
            "abc.example.com",
            ""
        ),
        policy(
            "reconcile-test",
            "backendtlspolicy-reconcile-test",
            Some("btls"),
            CHECKS_CA,
            "abc.example.com",
            ""
        ),
    ));

    // Re-encrypt from the HTTPS listener.
    let https_gw = "same-namespace-with-https-listener";
    let https = suite
        .routes_accepted(
            (INFRA, https_gw),
            "HTTPRoute",
            &[(INFRA, "backendtlspolicy-reencrypt")],
        )
        .await;
    suite
        .route_resolved(
            ("HTTPRoute", INFRA, "backendtlspolicy-reencrypt"),
            (INFRA, https_gw),
        )
        .await;
    policy_condition(&suite, "normative-test", https_gw, ACCEPTED).await;
    policy_condition(&suite, "normative-test", https_gw, RESOLVED).await;
    let tls = suite.https("https-listener.org");
    let mut reencrypt = get("/backendtlspolicy")
        .host("https-listener.org")
        .namespace(INFRA)
        .sees_sni("abc.example.com");
    if let Some(seen) = reencrypt.seen.as_mut() {
        seen.host = None;
    }
    suite
        .expect_over(
            SocketAddr::new(https.ip(), 443),
            &Protocol::Https(tls),
            &reencrypt,
        )
        .await;

    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "backendtlspolicy")],
        )
        .await;
    suite
        .route_resolved(
            ("HTTPRoute", INFRA, "backendtlspolicy"),
            (INFRA, "same-namespace"),
        )
        .await;

    // A valid policy.
    policy_condition(&suite, "normative-test", "same-namespace", ACCEPTED).await;
    policy_condition(&suite, "normative-test", "same-namespace", RESOLVED).await;
    suite
        .expect(addr, &via_tls("/backendtlspolicy", "abc.example.com"))
        .await;

    // A hostname the certificate does not name.
    policy_condition(&suite, "host-mismatch", "same-namespace", ACCEPTED).await;
    policy_condition(&suite, "host-mismatch", "same-namespace", RESOLVED).await;
    expect_failure(
        &suite,
        addr,
        "abc.example.org",
        "/backendtlspolicy-host-mismatch",
    )
    .await;
    // (the suite's Host misses the route; the request the route does take fails too)
    expect_failure(
        &suite,
        addr,
        "abc.example.com",
        "/backendtlspolicy-host-mismatch",
    )
    .await;

    // A CA that did not sign the certificate.
    policy_condition(&suite, "cert-mismatch", "same-namespace", ACCEPTED).await;
    policy_condition(&suite, "cert-mismatch", "same-namespace", RESOLVED).await;
    expect_failure(
        &suite,
        addr,
        "abc.example.com",
        "/backendtlspolicy-cert-mismatch",
    )
    .await;

    // The CA ConfigMap followed as it comes, empties and returns.
    policy_condition(&suite, "reconcile-test", "same-namespace", ACCEPTED).await;
    policy_condition(&suite, "reconcile-test", "same-namespace", RESOLVED).await;
    let reconcile_cm = "tls-checks-ca-certificate-reconcile-test";
    suite.apply(&policy(
        "reconcile-test",
        "backendtlspolicy-reconcile-test",
        Some("btls"),
        &format!("[{{group: '', kind: ConfigMap, name: {reconcile_cm}}}]"),
        "abc.example.com",
        "",
    ));
    policy_condition(&suite, "reconcile-test", "same-namespace", NO_VALID_CA).await;
    policy_condition(&suite, "reconcile-test", "same-namespace", INVALID_CA_REF).await;
    suite.apply(&suite.certs.checks.config_map(INFRA, reconcile_cm));
    policy_condition(&suite, "reconcile-test", "same-namespace", ACCEPTED).await;
    policy_condition(&suite, "reconcile-test", "same-namespace", RESOLVED).await;
    suite.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {reconcile_cm}, namespace: gateway-conformance-infra}}\ndata: {{ca.crt: ''}}\n"
    ));
    policy_condition(&suite, "reconcile-test", "same-namespace", NO_VALID_CA).await;
    policy_condition(&suite, "reconcile-test", "same-namespace", INVALID_CA_REF).await;
    suite.apply(&suite.certs.checks.config_map(INFRA, reconcile_cm));
    policy_condition(&suite, "reconcile-test", "same-namespace", ACCEPTED).await;
    policy_condition(&suite, "reconcile-test", "same-namespace", RESOLVED).await;
    suite.assert_nothing_rejected().await;
}

/// BackendTLSPolicyConflictResolution: of two policies for one Service (or one port of
/// it) the older is applied and the other is `Conflicted`; a port's own policy beats the
/// Service's, which still covers the other ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_conflict_resolution() {
    let suite = Suite::start().await;
    let two_ports: &[(&str, u16, &str)] = &[("https-1", 443, ""), ("https-2", 8443, "")];
    tls_services(
        &suite,
        &[
            (
                "backendtlspolicy-conflicted-without-section-name-test",
                &[("https", 443, "")],
            ),
            (
                "backendtlspolicy-conflicted-with-section-name-test",
                two_ports,
            ),
            ("backendtlspolicy-not-conflicted-test", two_ports),
        ],
    );
    suite.apply(&route(
        "backendtlspolicy-conflict-resolution",
        "same-namespace",
        "abc.example.com",
        &[
            (
                "/backendtlspolicy-conflicted-without-section-name",
                "backendtlspolicy-conflicted-without-section-name-test",
                443,
            ),
            (
                "/backendtlspolicy-conflicted-with-section-name",
                "backendtlspolicy-conflicted-with-section-name-test",
                443,
            ),
            (
                "/backendtlspolicy-not-conflicted-with-section-name",
                "backendtlspolicy-not-conflicted-test",
                443,
            ),
            (
                "/backendtlspolicy-not-conflicted-without-section-name",
                "backendtlspolicy-not-conflicted-test",
                8443,
            ),
        ],
    ));
    // One at a time, in the suite's order: creation order decides.
    for (name, service, section, hostname) in [
        (
            "conflicted-without-section-name-1",
            "backendtlspolicy-conflicted-without-section-name-test",
            None,
            "other.example.com",
        ),
        (
            "conflicted-without-section-name-2",
            "backendtlspolicy-conflicted-without-section-name-test",
            None,
            "abc.example.com",
        ),
        (
            "conflicted-with-section-name-1",
            "backendtlspolicy-conflicted-with-section-name-test",
            Some("https-1"),
            "other.example.com",
        ),
        (
            "conflicted-with-section-name-2",
            "backendtlspolicy-conflicted-with-section-name-test",
            Some("https-1"),
            "abc.example.com",
        ),
        (
            "not-conflicted-with-section-name",
            "backendtlspolicy-not-conflicted-test",
            Some("https-1"),
            "other.example.com",
        ),
        (
            "not-conflicted-without-section-name",
            "backendtlspolicy-not-conflicted-test",
            None,
            "abc.example.com",
        ),
    ] {
        suite.apply(&policy(name, service, section, CHECKS_CA, hostname, ""));
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "backendtlspolicy-conflict-resolution")],
        )
        .await;
    suite
        .route_resolved(
            ("HTTPRoute", INFRA, "backendtlspolicy-conflict-resolution"),
            (INFRA, "same-namespace"),
        )
        .await;
    let conflicted = ("Accepted", "False", "Conflicted");
    let gw = "same-namespace";
    policy_condition(&suite, "conflicted-without-section-name-1", gw, ACCEPTED).await;
    policy_condition(&suite, "conflicted-without-section-name-2", gw, conflicted).await;
    suite
        .expect(
            addr,
            &via_tls(
                "/backendtlspolicy-conflicted-without-section-name",
                "other.example.com",
            ),
        )
        .await;
    policy_condition(&suite, "conflicted-with-section-name-1", gw, ACCEPTED).await;
    policy_condition(&suite, "conflicted-with-section-name-2", gw, conflicted).await;
    suite
        .expect(
            addr,
            &via_tls(
                "/backendtlspolicy-conflicted-with-section-name",
                "other.example.com",
            ),
        )
        .await;
    policy_condition(&suite, "not-conflicted-with-section-name", gw, ACCEPTED).await;
    policy_condition(&suite, "not-conflicted-without-section-name", gw, ACCEPTED).await;
    suite
        .expect(
            addr,
            &via_tls(
                "/backendtlspolicy-not-conflicted-with-section-name",
                "other.example.com",
            ),
        )
        .await;
    suite
        .expect(
            addr,
            &via_tls(
                "/backendtlspolicy-not-conflicted-without-section-name",
                "abc.example.com",
            ),
        )
        .await;
    suite.assert_nothing_rejected().await;
}

/// BackendTLSPolicyInvalidCACertificateRef: a CA ConfigMap that does not exist, or has
/// no `ca.crt`, is `NoValidCACertificate`/`InvalidCACertificateRef`, and the Service's
/// requests fail with a 5xx rather than going out in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_invalid_ca_certificate_ref() {
    let suite = Suite::start().await;
    let nonexistent = "backendtlspolicy-nonexistent-ca-certificate-ref-test";
    let malformed = "backendtlspolicy-malformed-ca-certificate-ref-test";
    tls_services(
        &suite,
        &[
            (nonexistent, &[("https", 443, "HTTPS")]),
            (malformed, &[("https", 443, "HTTPS")]),
        ],
    );
    suite.apply(&format!(
        "{}{}{}apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: malformed-ca-certificate, namespace: gateway-conformance-infra}}\ndata: {{}}\n",
        route(
            "backendtlspolicy-invalid-ca-certificate-ref",
            "same-namespace",
            "abc.example.com",
            &[
                ("/backendtlspolicy-nonexistent-ca-certificate-ref", nonexistent, 443),
                ("/backendtlspolicy-malformed-ca-certificate-ref", malformed, 443),
            ],
        ),
        policy(
            "nonexistent-ca-certificate-ref",
            nonexistent,
            None,
            "[{group: '', kind: ConfigMap, name: nonexistent-ca-certificate}]",
            "abc.example.com",
            ""
        ),
        policy(
            "malformed-ca-certificate-ref",
            malformed,
            None,
            "[{group: '', kind: ConfigMap, name: malformed-ca-certificate}]",
            "abc.example.com",
            ""
        ),
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "backendtlspolicy-invalid-ca-certificate-ref")],
        )
        .await;
    for name in [
        "nonexistent-ca-certificate-ref",
        "malformed-ca-certificate-ref",
    ] {
        policy_condition(&suite, name, "same-namespace", NO_VALID_CA).await;
        policy_condition(&suite, name, "same-namespace", INVALID_CA_REF).await;
        let mut expect = get(&format!("/backendtlspolicy-{name}")).host("abc.example.com");
        expect.statuses = vec![500, 502, 503];
        suite.expect(addr, &expect).await;
    }
    suite.assert_nothing_rejected().await;
}

/// BackendTLSPolicyInvalidKind: a CA reference of a kind other than ConfigMap is
/// `NoValidCACertificate`/`InvalidKind`; the Service's requests fail with a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_invalid_kind() {
    let suite = Suite::start().await;
    let service = "backendtlspolicy-invalid-kind-test";
    tls_services(&suite, &[(service, &[("https", 443, "HTTPS")])]);
    suite.apply(&format!(
        "{}{}",
        route(
            "backendtlspolicy-invalid-kind-test",
            "same-namespace",
            "abc.example.com",
            &[("/backendtlspolicy-invalid-kind", service, 443)],
        ),
        policy(
            "invalid-kind",
            service,
            None,
            "[{group: invalid.io, kind: InvalidKind, name: invalid-kind}]",
            "abc.example.com",
            ""
        ),
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "backendtlspolicy-invalid-kind-test")],
        )
        .await;
    policy_condition(&suite, "invalid-kind", "same-namespace", NO_VALID_CA).await;
    policy_condition(
        &suite,
        "invalid-kind",
        "same-namespace",
        ("ResolvedRefs", "False", "InvalidKind"),
    )
    .await;
    let mut expect = get("/backendtlspolicy-invalid-kind").host("abc.example.com");
    expect.statuses = vec![500, 502, 503];
    suite.expect(addr, &expect).await;
    suite.assert_nothing_rejected().await;
}

/// BackendTLSPolicyObservedGenerationBump: an edit of the policy is reflected in its
/// ancestors' conditions (a Service with no endpoints still gets status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_observed_generation_bump() {
    let suite = Suite::start().await;
    let service = "observed-generation-bump-test";
    suite.service(INFRA, service, &[("https", 443, 8443, "")], &[]);
    let route_yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: backendtlspolicy-observed-generation-bump, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: same-namespace}}]\n  rules: [{{backendRefs: [{{name: {service}, port: 443}}]}}]\n---\n"
    );
    suite.apply(&format!(
        "{route_yaml}{}",
        policy(
            "observed-generation-bump",
            service,
            Some("https"),
            CHECKS_CA,
            "abc.example.com",
            ""
        )
    ));
    let key = (GW, "BackendTLSPolicy", INFRA, "observed-generation-bump");
    policy_condition(
        &suite,
        "observed-generation-bump",
        "same-namespace",
        ("Accepted", "True", ""),
    )
    .await;
    let before = suite.get(key.0, key.1, key.2, key.3)["metadata"]["generation"].clone();
    suite.apply(&policy(
        "observed-generation-bump",
        service,
        Some("https"),
        CHECKS_CA,
        "foo.example.com",
        "",
    ));
    policy_condition(
        &suite,
        "observed-generation-bump",
        "same-namespace",
        ("Accepted", "True", ""),
    )
    .await;
    let after = suite.get(key.0, key.1, key.2, key.3);
    assert_ne!(after["metadata"]["generation"], before, "{after}");
    for ancestor in after["status"]["ancestors"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for condition in ancestor["conditions"].as_array().into_iter().flatten() {
            assert_eq!(
                condition["observedGeneration"], after["metadata"]["generation"],
                "{after}"
            );
        }
    }
}

/// BackendTLSPolicySANValidation: with subjectAltNames the backend is verified against
/// them (a DNS or URI SAN, any one matching), not against the hostname, which is only
/// the SNI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_san_validation() {
    let suite = Suite::start().await;
    let cases = [
        (
            "san-dns",
            "[{type: Hostname, hostname: abc.example.com}]",
            true,
        ),
        (
            "san-dns-mismatch",
            "[{type: Hostname, hostname: dce.example.com}]",
            false,
        ),
        (
            "san-uri",
            "[{type: URI, uri: 'spiffe://abc.example.com/test-identity'}]",
            true,
        ),
        (
            "san-uri-mismatch",
            "[{type: URI, uri: 'spiffe://def.example.com/test-identity'}]",
            false,
        ),
        (
            "multiple-sans",
            "[{type: URI, uri: 'spiffe://abc.example.com/test-identity'}, {type: Hostname, hostname: abc.example.com}]",
            true,
        ),
        (
            "multiple-mismatch-sans",
            "[{type: URI, uri: 'spiffe://def.example.com/test-identity'}, {type: Hostname, hostname: def.example.com}]",
            false,
        ),
    ];
    let services: Vec<(String, &str)> = cases
        .iter()
        .map(|(name, _, _)| {
            let app = if *name == "san-dns" { "" } else { "HTTPS" };
            (format!("backendtlspolicy-{name}-test"), app)
        })
        .collect();
    let pods = suite.pods_of(INFRA, "tls-backend");
    for (service, app) in &services {
        suite.service(INFRA, service, &[("btls", 443, 8443, app)], &pods);
    }
    let paths: Vec<(String, String)> = cases
        .iter()
        .map(|(name, _, _)| {
            (
                format!("/backendtlspolicy-{name}"),
                format!("backendtlspolicy-{name}-test"),
            )
        })
        .collect();
    let rules: Vec<(&str, &str, u16)> = paths
        .iter()
        .map(|(p, s)| (p.as_str(), s.as_str(), 443))
        .collect();
    let mut yaml = route(
        "backendtlspolicy-san-test",
        "same-namespace",
        "abc.example.com",
        &rules,
    );
    for (name, sans, _) in &cases {
        yaml.push_str(&policy(
            name,
            &format!("backendtlspolicy-{name}-test"),
            Some("btls"),
            CHECKS_CA,
            "abc.example.com",
            sans,
        ));
    }
    suite.apply(&yaml);
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "backendtlspolicy-san-test")],
        )
        .await;
    suite
        .route_resolved(
            ("HTTPRoute", INFRA, "backendtlspolicy-san-test"),
            (INFRA, "same-namespace"),
        )
        .await;
    for (name, _, passes) in cases {
        policy_condition(&suite, name, "same-namespace", ACCEPTED).await;
        let path = format!("/backendtlspolicy-{name}");
        if passes {
            suite.expect(addr, &via_tls(&path, "abc.example.com")).await;
        } else {
            expect_failure(&suite, addr, "abc.example.com", &path).await;
        }
    }
    suite.assert_nothing_rejected().await;
}
