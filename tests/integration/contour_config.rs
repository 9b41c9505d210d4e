//! Contour's `contour.yaml` sections as a real Envoy takes them: compression, the
//! `listener` and `cluster` sections, `default-http-versions`, the runtime keys served
//! over RTDS.

use std::time::Duration;

use crate::e2e::start_with;
use crate::support::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// A site answering a long plain-text body (compressible) and forwarding the rest.
const SITE: &str = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: site, namespace: default}\nspec:\n  virtualhost: {fqdn: site.example.com}\n  routes:\n    - conditions: [{prefix: /big}]\n      directResponsePolicy:\n        statusCode: 200\n        body: \"Contour's users move to Isobar without rewriting a manifest; their responses stay as they were, compressed where Envoy compressed them before the move, plain where it did not.\"\n    - services: [{name: echo-a, port: 80}]\n";

async fn content_encoding(stack: &crate::e2e::Stack, accept: Option<&str>) -> Option<String> {
    let url = format!("http://127.0.0.1:{}/big", stack.http_port());
    let mut request = stack.client.get(url).header("host", "site.example.com");
    if let Some(accept) = accept {
        request = request.header("accept-encoding", accept);
    }
    let response = request.send().await.ok()?;
    assert_eq!(response.status(), 200);
    Some(
        response
            .headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
    )
}

/// One `GET /` for site.example.com on `stream`, its response read whole; whether it
/// says the connection closes after it.
async fn exchange(stream: &mut tokio::net::TcpStream) -> Option<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: site.example.com\r\n\r\n")
        .await
        .ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head, body_start) = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break (
                String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase(),
                end + 4,
            );
        }
    };
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    while buf.len() < body_start + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(head.lines().any(|l| l.trim() == "connection: close"))
}

/// By default (Contour's), responses above Envoy's size threshold are gzipped for a
/// client that accepts it, and not for one that does not; small ones are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_gzipped_by_default() {
    let stack = start_with(None, &[("site.yaml", SITE)], ("site.example.com", "/", "a")).await;
    assert_eq!(
        content_encoding(&stack, Some("gzip")).await.as_deref(),
        Some("gzip")
    );
    assert_eq!(content_encoding(&stack, None).await.as_deref(), Some(""));
    // "a" is below the 30-byte threshold.
    let small = stack
        .client
        .get(format!("http://127.0.0.1:{}/", stack.http_port()))
        .header("host", "site.example.com")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(small.headers().get("content-encoding").is_none());
    stack.assert_nothing_rejected().await;
}

/// `compression.algorithm: brotli` compresses with brotli; `disabled` not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_follows_the_configured_algorithm() {
    let brotli = start_with(
        Some("compression: {algorithm: brotli}\n"),
        &[("site.yaml", SITE)],
        ("site.example.com", "/", "a"),
    )
    .await;
    assert_eq!(
        content_encoding(&brotli, Some("br, gzip")).await.as_deref(),
        Some("br")
    );
    brotli.assert_nothing_rejected().await;
    drop(brotli);
    let off = start_with(
        Some("compression: {algorithm: disabled}\n"),
        &[("site.yaml", SITE)],
        ("site.example.com", "/", "a"),
    )
    .await;
    assert_eq!(
        content_encoding(&off, Some("gzip")).await.as_deref(),
        Some("")
    );
    off.assert_nothing_rejected().await;
}

/// Every key of Contour's `listener` and `cluster` sections and `default-http-versions`
/// set at once: Envoy accepts all of it, closes a connection after its
/// `max-requests-per-connection`, and holds the runtime keys Isobar serves over RTDS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contours_listener_and_cluster_sections_reach_envoy() {
    let config = r#"listener:
  connection-balancer: exact
  socket-options: {tos: 64, traffic-class: 64}
  max-requests-per-connection: 2
  per-connection-buffer-limit-bytes: 65536
  http2-max-concurrent-streams: 50
  max-requests-per-io-cycle: 4
  max-connections-per-listener: 1000
cluster:
  max-requests-per-connection: 100
  per-connection-buffer-limit-bytes: 65536
  circuit-breakers: {max-connections: 100, max-pending-requests: 50}
  upstream-tls: {minimum-protocol-version: "1.3", cipher-suites: [ECDHE-RSA-AES256-GCM-SHA384]}
default-http-versions: [HTTP/1.1]
"#;
    let stack = start_with(
        Some(config),
        &[("site.yaml", SITE)],
        ("site.example.com", "/", "a"),
    )
    .await;
    // Two requests on one connection: the second is its last (Envoy says so and closes).
    let closes = eventually(WAIT, || async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", stack.http_port()))
            .await
            .ok()?;
        let first = exchange(&mut stream).await?;
        let second = exchange(&mut stream).await?;
        Some([first, second])
    })
    .await;
    assert_eq!(
        closes,
        Some([false, true]),
        "max-requests-per-connection: 2"
    );

    let runtime = eventually(WAIT, || async {
        let text = stack.admin_get("/runtime").await;
        text.contains("http.max_requests_per_io_cycle")
            .then_some(text)
    })
    .await
    .unwrap_or_else(|| panic!("no runtime from RTDS\n{}", stack.logs()));
    let value: serde_json::Value = serde_json::from_str(&runtime).unwrap_or_default();
    let entries = &value["entries"];
    assert_eq!(
        entries["http.max_requests_per_io_cycle"]["final_value"], "4",
        "{runtime}"
    );
    assert_eq!(
        entries["envoy.resource_limits.listener.ingress_http.connection_limit"]["final_value"],
        "1000",
        "{runtime}"
    );

    let dump = stack.admin_get("/config_dump").await;
    for expected in [
        "\"codec_type\": \"HTTP1\"",
        "\"exact_balance\"",
        "\"max_concurrent_streams\": 50",
        "\"description\": \"Set IPv4 TOS field\"",
        "\"per_connection_buffer_limit_bytes\": 65536",
        "\"max_pending_requests\": 50",
    ] {
        assert!(
            dump.contains(expected),
            "{expected} is not in Envoy's configuration"
        );
    }
    stack.assert_nothing_rejected().await;
}

/// Contour's `policy` section: every HTTPProxy service's requests and responses get its
/// header changes under the service's own (`%CONTOUR_SERVICE_NAME%` is the service's),
/// and Ingress backends' too with `applyToIngress`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_sections_headers_reach_every_service() {
    let config = "policy:\n  request-headers:\n    set: {x-hello: \"%CONTOUR_SERVICE_NAME%\"}\n  response-headers:\n    set: {x-policy: \"on\"}\n  applyToIngress: true\n";
    let proxy = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: pol, namespace: default}\nspec:\n  virtualhost: {fqdn: pol.example.com}\n  routes:\n    - conditions: [{prefix: /own}]\n      services:\n        - name: echo-b\n          port: 80\n          requestHeadersPolicy: {set: [{name: x-hello, value: mine}]}\n    - services: [{name: echo-a, port: 80}]\n";
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: ing, namespace: default}\nspec:\n  rules:\n    - host: ing.example.com\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: echo-a, port: {number: 80}}}}\n";
    let stack = start_with(
        Some(config),
        &[("pol.yaml", proxy), ("ing.yaml", ingress)],
        ("pol.example.com", "/", "a"),
    )
    .await;
    stack.wait_for("ing.example.com", "/", "a", WAIT).await;
    let seen = |host: &'static str, path: &'static str| {
        let stack = &stack;
        async move {
            let url = format!("http://127.0.0.1:{}{path}", stack.http_port());
            let response = stack
                .client
                .get(url)
                .header("host", host)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            (header("x-seen-hello"), header("x-policy"))
        }
    };
    assert_eq!(
        seen("pol.example.com", "/").await,
        ("echo-a".to_string(), "on".to_string())
    );
    assert_eq!(
        seen("pol.example.com", "/own").await,
        ("mine".to_string(), "on".to_string())
    );
    assert_eq!(
        seen("ing.example.com", "/").await,
        ("echo-a".to_string(), "on".to_string())
    );
    stack.assert_nothing_rejected().await;
}

/// Contour's `envoy-admin` listener (on `network.admin-port`, loopback) answers GET for
/// Envoy's read-only admin pages and nothing else of the admin; the
/// `omEnforcedHealthListener` answers `/ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_and_om_enforced_health_listeners_answer_what_contours_do() {
    let health = crate::support::ServePorts::free().http;
    let config = format!("omEnforcedHealthListener: {{address: 127.0.0.1, port: {health}}}\n");
    let stack = start_with(
        Some(&config),
        &[("site.yaml", SITE)],
        ("site.example.com", "/", "a"),
    )
    .await;
    let get = |port: u16, path: &'static str| {
        let client = stack.client.clone();
        async move {
            let response = client
                .get(format!("http://127.0.0.1:{port}{path}"))
                .send()
                .await
                .ok()?;
            Some((response.status().as_u16(), response.text().await.ok()?))
        }
    };
    let info = eventually(WAIT, || async {
        get(stack.admin_port, "/server_info")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await
    .unwrap_or_else(|| panic!("no envoy-admin listener\n{}", stack.logs()));
    assert!(info.1.contains("\"state\": \"LIVE\""), "{}", info.1);
    let post = stack
        .client
        .post(format!(
            "http://127.0.0.1:{}/healthcheck/fail",
            stack.admin_port
        ))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .ok();
    assert_eq!(post, Some(404), "the admin's writes are not reachable");
    assert_eq!(
        get(stack.admin_port, "/quitquitquit").await.map(|r| r.0),
        Some(404)
    );
    let ready = eventually(WAIT, || async { get(health, "/ready").await })
        .await
        .unwrap_or_else(|| panic!("no omEnforcedHealthListener\n{}", stack.logs()));
    assert_eq!(ready, (200, "LIVE\n".to_string()));
    stack.assert_nothing_rejected().await;
}

/// `enableExternalNameService`: an ExternalName Service is routed to by its DNS name
/// (here the machine's host name, which /etc/hosts resolves to 127.0.0.1), at its port;
/// one naming localhost is not, and its route answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_name_services_are_routed_to_when_enabled() {
    use std::net::ToSocketAddrs;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    let resolved: Vec<std::net::SocketAddr> = (hostname.as_str(), 80)
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    assert!(
        resolved
            .iter()
            .any(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST),
        "this test needs the host name {hostname:?} to resolve to 127.0.0.1 (/etc/hosts): {resolved:?}"
    );
    let stack = start_with(
        Some("enableExternalNameService: true\n"),
        &[("site.yaml", SITE)],
        ("site.example.com", "/", "a"),
    )
    .await;
    let echo_a = std::fs::read_to_string(stack.manifests().join("services/echo-a.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let port: u16 = echo_a
        .split("targetPort: ")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no backend port in {echo_a}"));
    let objects = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: ext, namespace: default}}\nspec: {{type: ExternalName, externalName: {hostname}, ports: [{{port: {port}}}]}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: sneaky, namespace: default}}\nspec: {{type: ExternalName, externalName: localhost, ports: [{{port: {port}}}]}}\n---\napiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: ext, namespace: default}}\nspec:\n  virtualhost: {{fqdn: ext.example.com}}\n  routes:\n    - conditions: [{{prefix: /sneaky}}]\n      services: [{{name: sneaky, port: {port}}}]\n    - services: [{{name: ext, port: {port}}}]\n"
    );
    crate::support::write(&stack.manifests(), "ext.yaml", &objects);
    stack.wait_for("ext.example.com", "/", "a", WAIT).await;
    assert_eq!(
        stack.get("ext.example.com", "/sneaky").await.map(|r| r.0),
        Some(503)
    );
    stack.assert_nothing_rejected().await;
}

/// `metrics.contour` and `metrics.envoy` with certificates (Contour's metrics TLS):
/// Isobar's /metrics over HTTPS to clients of the configured CA only; Envoy's stats over
/// TLS on metrics.envoy's port, its /ready still plain HTTP where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_over_tls_as_contour_serves_them() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ca = crate::tls::new_ca("metrics CA");
    let (cert, key) = crate::tls::issue(&ca, "metrics.example.com").write(dir.path(), "server");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca.pem()).unwrap_or_else(|e| panic!("{e}"));
    let envoy_stats = crate::support::ServePorts::free().http;
    let config = format!(
        "metrics:\n  contour: {{server-certificate-path: {cert}, server-key-path: {key}, ca-certificate-path: {}}}\n  envoy: {{address: 127.0.0.1, port: {envoy_stats}, server-certificate-path: {cert}, server-key-path: {key}}}\n",
        ca_file.display()
    );
    let stack = start_with(
        Some(&config),
        &[("site.yaml", SITE)],
        ("site.example.com", "/", "a"),
    )
    .await;
    let name = "metrics.example.com";
    let trusting = crate::tls::Client::new(&[&ca]);
    let member = crate::tls::Client::new(&[&ca])
        .with_identity(&crate::tls::issue(&ca, "scraper.example.com"));
    let scraped = member
        .get(stack.metrics_port, name, name, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("/metrics over TLS: {e}\n{}", stack.logs()));
    assert_eq!(scraped.status, 200);
    assert!(
        scraped.body.contains("isobar_builds_total"),
        "{}",
        scraped.body
    );
    assert!(
        trusting
            .get(stack.metrics_port, name, name, "/metrics")
            .await
            .is_err(),
        "a client without a certificate of the CA was answered"
    );
    let plain = reqwest::get(format!("http://127.0.0.1:{}/metrics", stack.metrics_port)).await;
    assert!(plain.is_err(), "/metrics answered in plain HTTP");

    let stats = eventually(WAIT, || async {
        trusting.get(envoy_stats, name, name, "/stats").await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("Envoy's stats over TLS never answered\n{}", stack.logs()));
    assert_eq!(stats.status, 200);
    assert!(stats.body.contains("server.live"), "{}", stats.body);
    let ready = stack
        .client
        .get(format!("http://127.0.0.1:{}/ready", stack.stats_port))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .ok();
    assert_eq!(ready, Some(200));
    let rejected = stack.admin_get("/stats?filter=update_rejected").await;
    assert!(
        rejected
            .lines()
            .all(|l| l.trim_end().ends_with(": 0") || l.trim().is_empty()),
        "{rejected}"
    );
}
