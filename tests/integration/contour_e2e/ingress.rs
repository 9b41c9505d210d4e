//! `test/e2e/ingress` (Contour v1.33.6).

use super::{E2e, https, service};

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
