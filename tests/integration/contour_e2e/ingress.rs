//! `test/e2e/ingress` (Contour v1.33.6).

use super::{E2e, http, https, service};

/// testTLSWildcardHost: a TLS Ingress for `*.<suffix>` answers each name of one label
/// under it over its own SNI, 404 for a name of two labels, and 421 when the Host is
/// another name than the SNI (a port in the Host aside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_wildcard_host() {
    let e2e = E2e::start().await;
    let ns = "tls-wildcard-host";
    let suffix = "wildcardhost.ingress.projectcontour.io";
    e2e.deploy_echo(ns, "echo").await;
    e2e.self_signed_cert(ns, "echo-one-cert", &format!("*.{suffix}"));
    e2e.apply(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: wildcard-ingress, namespace: {ns}}}\nspec:\n  tls: [{{hosts: ['*.{suffix}'], secretName: echo-one-cert}}]\n  rules:\n    - host: '*.{suffix}'\n      http:\n        paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{number: 80}}}}}}}}]\n"
    ));
    for (host, sni, status) in [
        (
            format!("random1.{suffix}"),
            format!("random1.{suffix}"),
            200,
        ),
        (
            format!("random2.{suffix}"),
            format!("random2.{suffix}"),
            200,
        ),
        (
            format!("a.random3.{suffix}"),
            format!("a.random3.{suffix}"),
            404,
        ),
        (
            format!("random4.{suffix}"),
            format!("other-random4.{suffix}"),
            421,
        ),
        (
            format!("random5.{suffix}"),
            format!("a.random5.{suffix}"),
            421,
        ),
        (
            format!("random6.{suffix}:9999"),
            format!("random6.{suffix}"),
            200,
        ),
    ] {
        let answer = e2e.until_status(&https(&host).sni(&sni), status).await;
        if status == 200 {
            assert_eq!(service(&answer), "echo");
        }
    }
    e2e.assert_nothing_rejected().await;
}

/// An Ingress `ns/name` with one rule: `host`, `paths` (YAML flow list items of `path`,
/// `pathType`) to Service `service`:`port`.
fn ingress(
    ns: &str,
    name: &str,
    spec_extra: &str,
    host: &str,
    paths: &[(&str, &str)],
    (service, port): (&str, u16),
) -> String {
    let paths: Vec<String> = paths
        .iter()
        .map(|(path, kind)| {
            format!("{{path: '{path}', pathType: {kind}, backend: {{service: {{name: {service}, port: {{number: {port}}}}}}}}}")
        })
        .collect();
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec_extra}  rules:\n    - host: {host}\n      http:\n        paths: [{}]\n",
        paths.join(", ")
    )
}

/// testBackendTLS: a Service annotated `upstream-protocol.tls` is spoken to over TLS,
/// Envoy presenting the configured client certificate (`tls.envoy-client-certificate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls() {
    use crate::conformance::certs::Ca;
    let ns = "backend-tls";
    let e2e = E2e::start_with(|c| {
        c.tls.envoy_client_certificate = isobar::config::NamespacedName {
            namespace: ns.to_string(),
            name: "backend-client-cert".to_string(),
        };
    })
    .await;
    let ca = Ca::new("ca-cert");
    let client = ca.client();
    e2e.tls_secret_with_ca(ns, "backend-client-cert", &client, &ca);
    let server = ca.server(&["echo-secure"]);
    e2e.tls_secret_with_ca(ns, "backend-server-cert", &server, &ca);
    e2e.deploy_echo_secure(ns, "echo-secure", &server, false)
        .await;
    let host = "backend-tls.ingress.projectcontour.io";
    e2e.apply(&ingress(
        ns,
        "backend-tls",
        "",
        host,
        &[("/", "Prefix")],
        ("echo-secure", 443),
    ));
    let answer = e2e.until_status(&http(host), 200).await;
    let peers = super::seen(&answer, "tls")["peerCertificates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(peers.len(), 1, "{answer:?}");
    assert_eq!(
        squash(peers[0].as_str().unwrap_or_default()),
        squash(&client.cert_pem)
    );
    e2e.assert_nothing_rejected().await;
}

/// testIngressClass: with `--ingress-class-name=contour,team1`, Ingresses of either class
/// (`spec.ingressClassName`, no IngressClass object) are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_class() {
    let e2e = E2e::start_with(|c| {
        c.plugins.insert(
            "ingress-class".to_string(),
            serde_json::json!({"names": ["contour", "team1"]}),
        );
    })
    .await;
    for class in ["contour", "team1"] {
        let ns = format!("ingress-multiple-ingress-classes-{class}");
        e2e.deploy_echo(&ns, "echo").await;
        let host = format!("{class}ingress.projectcontour.io");
        e2e.apply(&ingress(
            &ns,
            &format!("{class}ingress"),
            &format!("  ingressClassName: {class}\n"),
            &host,
            &[("/", "Prefix")],
            ("echo", 80),
        ));
        let answer = e2e.until_status(&http(&host), 200).await;
        assert_eq!(service(&answer), "echo");
    }
    e2e.assert_nothing_rejected().await;
}

/// testLongPathMatch: long prefixes and a long regex are served (Envoy's RE2 program size
/// limit is not in the way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_path_match() {
    let e2e = E2e::start().await;
    let ns = "long-path-match";
    e2e.deploy_echo(ns, "echo").await;
    let host = "long-patch-match.ingress.projectcontour.io";
    let a = format!("/{}", "a".repeat(82));
    let b = format!("/{}", "b".repeat(500));
    let c = format!("/{}", "c".repeat(200));
    let c_regex = format!("{c}.*");
    e2e.apply(&ingress(
        ns,
        "long-patch-match",
        "",
        host,
        &[
            (&a, "Prefix"),
            (&b, "Prefix"),
            (&c_regex, "ImplementationSpecific"),
        ],
        ("echo", 80),
    ));
    for path in [&a, &b, &c] {
        let answer = e2e.until_status(&http(host).path(path), 200).await;
        assert_eq!(service(&answer), "echo");
    }
    e2e.assert_nothing_rejected().await;
}

/// testGlobalHeadersPolicy: the global header policies reach Ingresses only with
/// `applyToIngress`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_headers_policy() {
    for apply in [false, true] {
        let e2e = E2e::start_with(|c| {
            c.policy.request_headers.set.insert(
                "X-Contour-GlobalRequestHeader".to_string(),
                "foo".to_string(),
            );
            c.policy.response_headers.set.insert(
                "X-Contour-GlobalResponseHeader".to_string(),
                "bar".to_string(),
            );
            c.policy.apply_to_ingress = apply;
        })
        .await;
        let ns = format!("global-headers-policy-apply-to-ingress-{apply}");
        e2e.deploy_echo(&ns, "echo").await;
        let host = format!("{ns}.ingress.projectcontour.io");
        e2e.apply(&ingress(
            &ns,
            "global-headers-policy",
            "",
            &host,
            &[("/", "Prefix")],
            ("echo", 80),
        ));
        let answer = e2e.until_status(&http(&host), 200).await;
        let request = super::seen_header(&answer, "X-Contour-GlobalRequestHeader");
        let response = answer.header("X-Contour-GlobalResponseHeader");
        if apply {
            assert_eq!(request.as_deref(), Some("foo"), "{answer:?}");
            assert_eq!(response.as_deref(), Some("bar"), "{answer:?}");
        } else {
            assert_eq!(request, None, "{answer:?}");
            assert_eq!(response, None, "{answer:?}");
        }
        e2e.assert_nothing_rejected().await;
    }
}
