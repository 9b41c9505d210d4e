//! Keys Contour's main defines past v1.33.6 (`pkg/config/parameters.go`), through Envoy:
//! `tls.fingerprint`, `tls.ecdh-curves`, `cluster.upstream-tls.ecdh-curves`,
//! `listener.max-connections-to-accept-per-socket-event`, `runtime-settings`.

use super::{E2e, http, https, service};

/// JA3 and JA4 fingerprints reach the backend through a header policy; key exchange
/// groups downstream and upstream, the accept batch and runtime settings are taken by
/// Envoy, which serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contour_main_keys_reach_envoy() {
    use crate::conformance::certs::Ca;
    let ns = "main-keys";
    let e2e = E2e::start_with(|c| {
        c.tls.fingerprint.ja3 = true;
        c.tls.fingerprint.ja4 = true;
        c.tls.ecdh_curves = vec![
            "P-256".to_string(),
            "X25519".to_string(),
            "MLKEM1024".to_string(),
        ];
        c.cluster.upstream_tls.ecdh_curves = vec!["P-256".to_string()];
        c.listener.max_connections_to_accept_per_socket_event = Some(1);
        c.runtime_settings
            .insert("isobar.test.flag".to_string(), "on".to_string());
    })
    .await;
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "fingerprints.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    let ca = Ca::new("upstream-ca");
    let server = ca.server(&["echo-secure"]);
    e2e.deploy_echo_secure(ns, "echo-secure", &server, false)
        .await;
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: fingerprints, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo}}}}\n  routes:\n    - services: [{{name: echo, port: 80}}]\n      requestHeadersPolicy: {{set: [{{name: X-Ja3, value: '%TLS_JA3_FINGERPRINT%'}}, {{name: X-Ja4, value: '%TLS_JA4_FINGERPRINT%'}}]}}\n"),
        (ns, "fingerprints"),
        "valid",
    )
    .await;
    let answer = e2e.until_status(&https(fqdn), 200).await;
    assert_eq!(service(&answer), "echo");
    let ja3 = super::seen_header(&answer, "X-Ja3").unwrap_or_default();
    assert!(
        ja3.len() == 32 && ja3.chars().all(|c| c.is_ascii_hexdigit()),
        "JA3 {ja3:?}"
    );
    let ja4 = super::seen_header(&answer, "X-Ja4").unwrap_or_default();
    assert!(
        ja4.starts_with('t') && ja4.split('_').count() == 3,
        "JA4 {ja4:?}"
    );
    // Upstream TLS with its key exchange groups.
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: upstream, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: upstream.projectcontour.io}}\n  routes:\n    - services: [{{name: echo-secure, port: 443}}]\n"),
        (ns, "upstream"),
        "valid",
    )
    .await;
    let answer = e2e
        .until_status(&http("upstream.projectcontour.io"), 200)
        .await;
    assert_eq!(service(&answer), "echo-secure");
    let runtime = e2e.suite.admin("/runtime").await;
    assert!(runtime.contains("isobar.test.flag"), "{runtime}");
    e2e.assert_nothing_rejected().await;
}
