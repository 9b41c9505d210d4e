//! Gateway API through a real Envoy (files provider) and status written to an API
//! server: what a user of Gateways and HTTPRoutes sees.

use std::time::Duration;

use serde_json::Value;

use crate::apiserver::ApiServer;
use crate::e2e::{Stack, start_with};
use crate::support::{eventually, write};
use crate::tls::{Client, issue, new_ca, tls_backend, tls_secret};

const WAIT: Duration = Duration::from_secs(30);

/// A GatewayClass of this controller.
const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: isobar}\nspec: {controllerName: projectcontour.io/gateway-controller}\n";

/// Gateways of classes naming Contour's controller are served.
const CONFIG: &str = "gateway:\n  controllerName: projectcontour.io/gateway-controller\n";

/// A GatewayClass of ours and a Gateway whose listeners land on `http_port` and
/// `https_port` (Contour's container port of listener port P is P + 8000).
fn gateway(http_port: u16, https_port: u16) -> String {
    assert!(
        http_port > 9023 && https_port > 9023,
        "ports {http_port}/{https_port} have no Gateway listener port below them"
    );
    format!(
        r#"{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: isobar
  listeners:
    - {{name: http, protocol: HTTP, port: {}}}
    - name: https
      protocol: HTTPS
      port: {}
      hostname: "*.gw.example.com"
      tls: {{certificateRefs: [{{name: gw-cert}}]}}
"#,
        http_port - 8000,
        https_port - 8000
    )
}

/// The older of two HTTPRoutes on app.gw.example.com: `/shared` and everything else go
/// to echo-a.
const OLDER: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: older, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw}]
  hostnames: [app.gw.example.com]
  rules:
    - matches: [{path: {value: /shared}}]
      backendRefs: [{name: echo-a, port: 80}]
    - matches: [{path: {value: /tie}, headers: [{name: x-z, value: "1"}]}]
      backendRefs: [{name: echo-a, port: 80}]
    - backendRefs: [{name: echo-a, port: 80}]
"#;

/// The newer route: repeats `/shared` (the older keeps it), and matches by exact path,
/// header, method and query; rewrites, modifies headers (of the rule, and of one
/// backend), redirects, and splits with a missing Service.
fn newer(exact_backend: &str) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: newer, namespace: default, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [app.gw.example.com]
  rules:
    - matches: [{{path: {{value: /shared}}}}]
      backendRefs: [{{name: echo-b, port: 80}}]
    - matches: [{{path: {{value: /tie}}, headers: [{{name: x-a, value: "1"}}]}}]
      backendRefs: [{{name: echo-b, port: 80}}]
    - matches: [{{path: {{value: /order}}, headers: [{{name: x-y, value: "1"}}]}}]
      backendRefs: [{{name: echo-b, port: 80}}]
    - matches: [{{path: {{value: /order}}, headers: [{{name: x-c, value: "1"}}]}}]
      backendRefs: [{{name: echo-a, port: 80}}]
    - name: exact
      matches: [{{path: {{type: Exact, value: /shared/exact}}}}]
      backendRefs: [{{name: {exact_backend}, port: 80}}]
    - matches:
        - path: {{value: /canary}}
          headers: [{{name: x-env, value: canary}}]
        - path: {{value: /post}}
          method: POST
        - path: {{value: /query}}
          queryParams: [{{name: v, value: "2"}}]
      backendRefs:
        - name: echo-b
          port: 80
          filters:
            - type: RequestHeaderModifier
              requestHeaderModifier: {{set: [{{name: x-hello, value: backend}}]}}
    - matches: [{{path: {{value: /rewrite}}}}]
      filters:
        - type: URLRewrite
          urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}
        - type: RequestHeaderModifier
          requestHeaderModifier: {{set: [{{name: x-hello, value: gateway}}]}}
      backendRefs: [{{name: echo-a, port: 80}}]
    - matches: [{{path: {{value: /redirect}}}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {{hostname: elsewhere.example.com}}
    - matches: [{{path: {{value: /to-https}}}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {{scheme: https, statusCode: 301}}
    - matches: [{{path: {{value: /to-port}}}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {{hostname: elsewhere.example.com, port: 80}}
    - matches: [{{path: {{value: /retry}}}}]
      retry: {{codes: [503], attempts: 2, backoff: 10ms}}
      backendRefs: [{{name: flaky, port: 80}}]
    - matches: [{{path: {{value: /slow}}}}]
      timeouts: {{backendRequest: 300ms}}
      backendRefs: [{{name: slow, port: 80}}]
    - matches: [{{path: {{value: /half}}}}]
      backendRefs:
        - {{name: echo-a, port: 80}}
        - {{name: no-such-service, port: 80}}
"#
    )
}

/// CORS on one rule; two mirrors (one of every request, one of half) on another.
const CORS_AND_MIRRORS: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cors, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [cors.gw.example.com]
  rules:
    - matches: [{path: {value: /cors}}]
      filters:
        - type: CORS
          cors:
            allowOrigins: ["https://www.foo.com", "https://*.bar.com"]
            allowMethods: [GET, OPTIONS]
            allowHeaders: [x-header-1]
            exposeHeaders: [x-header-3]
            allowCredentials: true
            maxAge: 3600
      backendRefs: [{name: echo-a, port: 80}]
    - matches: [{path: {value: /mirrors}}]
      filters:
        - type: RequestMirror
          requestMirror: {backendRef: {name: mirror, port: 80}}
        - type: RequestMirror
          requestMirror:
            backendRef: {name: flaky, port: 80}
            fraction: {numerator: 1, denominator: 2}
      backendRefs: [{name: echo-a, port: 80}]
"#;

/// A route from namespace team: the Gateway's listeners take routes from their own
/// namespace only.
const OTHER_NAMESPACE: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: team-route, namespace: team}
spec:
  parentRefs: [{name: gw, namespace: default}]
  hostnames: [team.gw.example.com]
  rules: [{backendRefs: [{name: echo-c, port: 80}]}]
"#;

/// `(status, body, headers)` of a request with `method`, `Host: host` and `headers`.
async fn request(
    stack: &Stack,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, reqwest::header::HeaderMap) {
    let url = format!("http://127.0.0.1:{}{path}", stack.http_port());
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or_default();
    let mut builder = stack.client.request(method, url).header("host", host);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    match builder.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            (status, response.text().await.unwrap_or_default(), headers)
        }
        Err(e) => panic!("{host}{path}: {e}\n{}", stack.logs()),
    }
}

/// An HTTPProxy answering while the Gateway is not there yet.
const READY: &str = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: ready, namespace: default}\nspec:\n  virtualhost: {fqdn: ready.example.com}\n  routes: [{services: [{name: echo-a, port: 80}]}]\n";

/// An HTTPRoute's matches, precedence, filters and backends, HTTPS termination by SNI
/// (421 for another host on the connection), listener isolation by namespace, and an
/// edit followed: as Envoy answers them, with nothing rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproutes_answer_through_envoy_as_the_spec_says() {
    let ca = new_ca("gateway test CA");
    let cert = issue(&ca, "*.gw.example.com");
    let stack = start_with(
        Some(CONFIG),
        &[
            ("ready.yaml", READY),
            ("gw-cert.yaml", &tls_secret("default", "gw-cert", &cert)),
            ("older.yaml", OLDER),
            ("newer.yaml", &newer("echo-b")),
            ("team.yaml", OTHER_NAMESPACE),
            ("cors.yaml", CORS_AND_MIRRORS),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    // The Gateway's listeners land on the stack's ports (and are its listeners).
    write(
        &stack.manifests(),
        "gateway.yaml",
        &gateway(stack.http_port(), stack.https_port),
    );
    stack.wait_for("app.gw.example.com", "/", "a", WAIT).await;

    // The older route keeps the match the newer one repeats; an exact path beats it.
    assert_eq!(stack.body_of("app.gw.example.com", "/shared").await, "a");
    assert_eq!(stack.body_of("app.gw.example.com", "/shared/x").await, "a");
    assert_eq!(
        stack.body_of("app.gw.example.com", "/shared/exact").await,
        "b"
    );
    // Equally specific matches of two routes: the older route's first; of two rules of
    // one route: the first rule's.
    let both = [("x-a", "1"), ("x-z", "1")];
    assert_eq!(
        request(&stack, "GET", "app.gw.example.com", "/tie", &both)
            .await
            .1,
        "a"
    );
    let both = [("x-c", "1"), ("x-y", "1")];
    assert_eq!(
        request(&stack, "GET", "app.gw.example.com", "/order", &both)
            .await
            .1,
        "b"
    );
    // Header, method and query matches; without them the request falls through.
    let host = "app.gw.example.com";
    let canary = request(&stack, "GET", host, "/canary", &[("x-env", "canary")]).await;
    assert_eq!((canary.0, canary.1.as_str()), (200, "b"));
    assert_eq!(stack.body_of(host, "/canary").await, "a");
    assert_eq!(request(&stack, "POST", host, "/post", &[]).await.1, "b");
    assert_eq!(request(&stack, "GET", host, "/post", &[]).await.1, "a");
    // The backend's own filter sets a header on requests sent to it.
    let (_, body, headers) = request(&stack, "GET", host, "/query?v=2", &[]).await;
    assert_eq!(body, "b");
    assert_eq!(
        headers.get("x-seen-hello").and_then(|v| v.to_str().ok()),
        Some("backend")
    );
    assert_eq!(request(&stack, "GET", host, "/query?v=1", &[]).await.1, "a");
    // A path prefix PathPrefix-replaced by `/`, and a request header set on the way.
    let (status, body, headers) = request(&stack, "GET", host, "/rewrite/deeper?x=1", &[]).await;
    assert_eq!((status, body.as_str()), (200, "a"));
    let seen = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(seen("x-seen-path"), "/deeper?x=1");
    assert_eq!(seen("x-seen-hello"), "gateway");
    // RequestRedirect's default status is 302. Without a port, the redirect goes to the
    // Gateway listener's port; with a scheme, to its well-known port (left out of the
    // Location where it is the scheme's own).
    let location = |headers: &reqwest::header::HeaderMap| {
        headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let listener_port = stack.http_port() - 8000;
    let (status, _, headers) = request(&stack, "GET", host, "/redirect", &[]).await;
    assert_eq!(status, 302);
    assert_eq!(
        location(&headers),
        Some(format!(
            "http://elsewhere.example.com:{listener_port}/redirect"
        ))
    );
    let (status, _, headers) = request(&stack, "GET", host, "/to-https", &[]).await;
    assert_eq!(status, 301);
    assert_eq!(
        location(&headers).as_deref(),
        Some("https://app.gw.example.com:443/to-https")
    );
    let (status, _, headers) = request(&stack, "GET", host, "/to-port", &[]).await;
    assert_eq!(status, 302);
    assert_eq!(
        location(&headers).as_deref(),
        Some("http://elsewhere.example.com/to-port")
    );
    // A backend slower than the rule's backendRequest timeout: 504.
    let started = std::time::Instant::now();
    assert_eq!(request(&stack, "GET", host, "/slow", &[]).await.0, 504);
    assert!(started.elapsed() < Duration::from_millis(1500));
    // A missing Service's share of the weight answers 500, the rest goes through.
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..60 {
        let (status, body, _) = request(&stack, "GET", host, "/half", &[]).await;
        *answers.entry((status, body)).or_insert(0) += 1;
    }
    assert_eq!(
        answers.keys().cloned().collect::<Vec<_>>(),
        vec![(200, "a".to_string()), (500, String::new())],
        "{answers:?}"
    );
    // A route from another namespace is not attached: its host has no route.
    assert_eq!(
        stack.get("team.gw.example.com", "/").await.map(|r| r.0),
        Some(404)
    );

    // HTTPS: terminated with the listener's certificate for a name under its wildcard;
    // another host of the same listener on that connection is that listener's (404: no
    // route has it), not misdirected.
    let client = Client::new(&[&ca]);
    let secure = client
        .get(stack.https_port, host, host, "/")
        .await
        .unwrap_or_else(|e| panic!("https: {e}\n{}", stack.logs()));
    assert_eq!((secure.status, secure.body.as_str()), (200, "a"));
    let misdirected = client
        .get(stack.https_port, host, "other.gw.example.com", "/")
        .await
        .unwrap_or_else(|e| panic!("https: {e}"));
    assert_eq!(misdirected.status, 404);
    // The listener's certificate rotated: SDS alone carries it, the listener stays.
    let lds = |stats: &str| crate::tls::stat(stats, "listener_manager.lds.update_success");
    let lds_before = lds(&stack.envoy_stats().await);
    let rotated = issue(&ca, "*.gw.example.com");
    write(
        &stack.manifests(),
        "gw-cert.yaml",
        &tls_secret("default", "gw-cert", &rotated),
    );
    let seen = eventually(WAIT, || async {
        client
            .get(stack.https_port, host, host, "/")
            .await
            .ok()
            .filter(|a| a.peer.as_ref() == Some(&rotated.der))
    })
    .await
    .unwrap_or_else(|| panic!("the rotated certificate never arrived\n{}", stack.logs()));
    assert_eq!(seen.status, 200);
    assert_eq!(
        lds(&stack.envoy_stats().await),
        lds_before,
        "the rotation sent a listener update"
    );

    // CORS: a preflight from an allowed origin (under a wildcard host) is answered by
    // Envoy with the policy; one from another origin is answered without it, and
    // neither reaches the backend; actual requests get the origin echoed when allowed.
    let cors = "cors.gw.example.com";
    let preflight = |origin: &'static str| {
        let stack = &stack;
        async move {
            let headers = [
                ("origin", origin),
                ("access-control-request-method", "GET"),
                ("access-control-request-headers", "x-header-1"),
            ];
            request(stack, "OPTIONS", cors, "/cors", &headers).await
        }
    };
    let header = |headers: &reqwest::header::HeaderMap, name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (status, body, headers) = preflight("https://xpto.www.bar.com").await;
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(
        header(&headers, "access-control-allow-origin").as_deref(),
        Some("https://xpto.www.bar.com")
    );
    assert_eq!(
        header(&headers, "access-control-allow-methods").as_deref(),
        Some("GET,OPTIONS")
    );
    assert_eq!(
        header(&headers, "access-control-allow-headers").as_deref(),
        Some("x-header-1")
    );
    assert_eq!(
        header(&headers, "access-control-max-age").as_deref(),
        Some("3600")
    );
    assert_eq!(
        header(&headers, "access-control-allow-credentials").as_deref(),
        Some("true")
    );
    assert_eq!(
        header(&headers, "x-seen-path"),
        None,
        "forwarded: {headers:?}"
    );
    let (status, body, headers) = preflight("https://foobar.com").await;
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(header(&headers, "access-control-allow-origin"), None);
    assert_eq!(
        header(&headers, "x-seen-path"),
        None,
        "forwarded: {headers:?}"
    );
    let allowed = [("origin", "https://www.foo.com")];
    let (status, body, headers) = request(&stack, "GET", cors, "/cors", &allowed).await;
    assert_eq!((status, body.as_str()), (200, "a"));
    assert_eq!(
        header(&headers, "access-control-allow-origin").as_deref(),
        Some("https://www.foo.com")
    );
    assert_eq!(
        header(&headers, "access-control-expose-headers").as_deref(),
        Some("x-header-3")
    );
    let other = [("origin", "https://www.foo.com.evil.example")];
    let (status, body, headers) = request(&stack, "GET", cors, "/cors", &other).await;
    assert_eq!((status, body.as_str()), (200, "a"));
    assert_eq!(header(&headers, "access-control-allow-origin"), None);

    // Two mirrors: each gets its share of the requests, the client sees the primary.
    let hits = |name: &str| stack.hits[name].load(std::sync::atomic::Ordering::SeqCst);
    let (mirror_before, flaky_before) = (hits("mirror"), hits("flaky"));
    for _ in 0..40 {
        assert_eq!(request(&stack, "GET", cors, "/mirrors", &[]).await.1, "a");
    }
    let mirrored = eventually(WAIT, || async {
        (hits("mirror") >= mirror_before + 40).then_some(())
    })
    .await;
    assert!(mirrored.is_some(), "the first mirror saw not every request");
    let halved = hits("flaky") - flaky_before;
    assert!(
        (5..=35).contains(&halved),
        "the half mirror saw {halved} of 40"
    );

    // Retries: the flaky backend answers 503 to every other request; retried on 503,
    // every request gets through.
    for _ in 0..10 {
        let (status, body, _) = request(&stack, "GET", host, "/retry", &[]).await;
        assert_eq!((status, body.as_str()), (200, "flaky"));
    }

    // WebSocket: a Service port of appProtocol kubernetes.io/ws takes upgrades (the test
    // backend then answers without upgrading); Envoy refuses them to other backends.
    let echo_a = std::fs::read_to_string(stack.manifests().join("services/echo-a.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let ws_service = echo_a
        .replace("echo-a", "ws-echo")
        .replace("port: 80, ", "port: 80, appProtocol: kubernetes.io/ws, ");
    assert!(ws_service.contains("appProtocol"), "{ws_service}");
    write(
        &stack.manifests(),
        "ws.yaml",
        &format!(
            "{ws_service}---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: ws, namespace: default}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [ws.gw.example.com]\n  rules:\n    - matches: [{{path: {{value: /ws}}}}]\n      backendRefs: [{{name: ws-echo, port: 80}}]\n    - backendRefs: [{{name: echo-a, port: 80}}]\n"
        ),
    );
    stack.wait_for("ws.gw.example.com", "/ws", "a", WAIT).await;
    let upgrade = [("connection", "upgrade"), ("upgrade", "websocket")];
    let ws = "ws.gw.example.com";
    assert_eq!(request(&stack, "GET", ws, "/ws", &upgrade).await.0, 200);
    assert_eq!(request(&stack, "GET", ws, "/", &upgrade).await.0, 403);

    // An edit of a route is followed, built alone and spliced into the last build.
    let spliced = || async {
        let url = format!("http://127.0.0.1:{}/metrics", stack.metrics_port);
        let text = stack.client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .find(|l| l.starts_with("isobar_spliced_builds_total"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let before = spliced().await.unwrap_or_default();
    write(&stack.manifests(), "newer.yaml", &newer("echo-a"));
    stack
        .wait_for("app.gw.example.com", "/shared/exact", "a", WAIT)
        .await;
    assert!(
        spliced().await.unwrap_or_default() > before,
        "the route edit was not built alone\n{}",
        stack.logs()
    );
    stack.assert_nothing_rejected().await;
}

/// A TLSRoute passed through by SNI on a TLS listener (the client sees the backend's own
/// certificate), another terminated by a TLS listener on the same port (the backend
/// speaks plain text), and a TCPRoute forwarding a TCP listener's connections, through a
/// real Envoy; Envoy rejects nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_tcp_routes_forward_connections_through_envoy() {
    let ca = new_ca("passthrough test CA");
    let backend_cert = issue(&ca, "app.pass.example.com");
    let tls_port = tls_backend(&backend_cert).await;
    let end_cert = issue(&ca, "*.end.example.com");
    let stack = start_with(
        Some(CONFIG),
        &[
            ("ready.yaml", READY),
            (
                "tls-backend.yaml",
                &crate::support::service_yaml("default", "tls-backend", tls_port),
            ),
            (
                "end-cert.yaml",
                &tls_secret("default", "end-cert", &end_cert),
            ),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let tcp_port = crate::support::ServePorts::free().http;
    assert!(stack.https_port > 9023 && tcp_port > 9023);
    let objects = format!(
        r#"{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: streams, namespace: default}}
spec:
  gatewayClassName: isobar
  listeners:
    - name: pass
      protocol: TLS
      port: {}
      hostname: "*.pass.example.com"
      tls: {{mode: Passthrough}}
    - name: end
      protocol: TLS
      port: {}
      hostname: "*.end.example.com"
      tls: {{mode: Terminate, certificateRefs: [{{name: end-cert}}]}}
    - {{name: tcp, protocol: TCP, port: {}}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: pass, namespace: default}}
spec:
  parentRefs: [{{name: streams, sectionName: pass}}]
  hostnames: [app.pass.example.com]
  rules: [{{backendRefs: [{{name: tls-backend, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: end, namespace: default}}
spec:
  parentRefs: [{{name: streams, sectionName: end}}]
  hostnames: [app.end.example.com]
  rules: [{{backendRefs: [{{name: echo-a, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: tcp, namespace: default}}
spec:
  parentRefs: [{{name: streams, sectionName: tcp}}]
  rules: [{{backendRefs: [{{name: echo-a, port: 80}}]}}]
"#,
        stack.https_port - 8000,
        stack.https_port - 8000,
        tcp_port - 8000
    );
    write(&stack.manifests(), "streams.yaml", &objects);
    let client = Client::new(&[&ca]);
    let host = "app.pass.example.com";
    let passed = eventually(WAIT, || async {
        client.get(stack.https_port, host, host, "/").await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("no TLS passthrough\n{}", stack.logs()));
    assert_eq!((passed.status, passed.body.as_str()), (200, "passthrough"));
    assert_eq!(
        passed.peer.as_ref(),
        Some(&backend_cert.der),
        "not the backend's certificate"
    );
    // Terminated on the same port: the listener's certificate, the plain-text backend.
    let end = "app.end.example.com";
    let ended = eventually(WAIT, || async {
        client.get(stack.https_port, end, end, "/").await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("no TLS termination\n{}", stack.logs()));
    assert_eq!((ended.status, ended.body.as_str()), (200, "a"));
    assert_eq!(
        ended.peer.as_ref(),
        Some(&end_cert.der),
        "not the listener's certificate"
    );

    let tcp = eventually(WAIT, || async {
        let url = format!("http://127.0.0.1:{tcp_port}/");
        let response = stack.client.get(url).send().await.ok()?;
        let body = response.text().await.ok()?;
        (body == "a").then_some(body)
    })
    .await;
    assert!(
        tcp.is_some(),
        "the TCP listener never forwarded\n{}",
        stack.logs()
    );
    stack.assert_nothing_rejected().await;
}

/// A real gRPC service (Envoy's own ext_authz API, answering every Check) as the backend.
struct Allow;

#[tonic::async_trait]
impl envoy_types::pb::envoy::service::auth::v3::authorization_server::Authorization for Allow {
    async fn check(
        &self,
        _request: tonic::Request<envoy_types::pb::envoy::service::auth::v3::CheckRequest>,
    ) -> Result<
        tonic::Response<envoy_types::pb::envoy::service::auth::v3::CheckResponse>,
        tonic::Status,
    > {
        Ok(tonic::Response::new(
            envoy_types::pb::envoy::service::auth::v3::CheckResponse {
                status: Some(envoy_types::pb::google::rpc::Status {
                    code: 0,
                    message: "through the gateway".to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ))
    }
}

/// A GRPCRoute matching a service and method sends gRPC calls through a real Envoy to a
/// real gRPC server over h2c; so does an HTTPRoute to a Service port of appProtocol
/// `kubernetes.io/h2c`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcroutes_route_grpc_calls_through_envoy() {
    use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
    use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
    use envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let grpc_port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AuthorizationServer::new(Allow))
            .serve_with_incoming(isobar::xds::server::incoming(listener)),
    );
    let ca = new_ca("grpc test CA");
    let cert = issue(&ca, "*.gw.example.com");
    let stack = start_with(
        Some(CONFIG),
        &[
            ("ready.yaml", READY),
            ("gw-cert.yaml", &tls_secret("default", "gw-cert", &cert)),
            (
                "grpc.yaml",
                &crate::support::service_yaml("default", "authz", grpc_port),
            ),
            (
                "h2c.yaml",
                &crate::support::service_yaml("default", "authz-h2c", grpc_port)
                    .replace("port: 80, ", "port: 80, appProtocol: kubernetes.io/h2c, "),
            ),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let route = r#"apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: authz, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.gw.example.com]
  rules:
    - name: check
      matches: [{method: {service: envoy.service.auth.v3.Authorization, method: Check}}]
      backendRefs: [{name: authz, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: h2c, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [h2c.gw.example.com]
  rules: [{backendRefs: [{name: authz-h2c, port: 80}]}]
"#;
    write(
        &stack.manifests(),
        "gateway.yaml",
        &format!(
            "{}---\n{route}",
            gateway(stack.http_port(), stack.https_port)
        ),
    );
    for host in ["grpc.gw.example.com", "h2c.gw.example.com"] {
        let endpoint = tonic::transport::Endpoint::from_shared(format!(
            "http://127.0.0.1:{}",
            stack.http_port()
        ))
        .unwrap_or_else(|e| panic!("{e}"))
        .origin(
            format!("http://{host}")
                .parse()
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let answered = eventually(WAIT, || async {
            let channel = endpoint.connect().await.ok()?;
            let response = AuthorizationClient::new(channel)
                .check(CheckRequest::default())
                .await
                .ok()?;
            response.into_inner().status
        })
        .await
        .unwrap_or_else(|| panic!("no gRPC answer through Envoy for {host}\n{}", stack.logs()));
        assert_eq!(answered.message, "through the gateway");
    }
    stack.assert_nothing_rejected().await;
}

fn condition<'a>(conditions: &'a Value, type_: &str) -> &'a Value {
    conditions
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

const GW: &str = "gateway.networking.k8s.io/v1";
/// Gateway API's group, as status spells parent references.
const GW_GROUP: &str = "gateway.networking.k8s.io";

/// Read from the Kubernetes API: the GatewayClass and Gateway of this controller get
/// Gateway API status (listeners with their attached routes), a route's parent entry
/// names the controller; another controller's GatewayClass, Gateway and parent entries
/// are left as they are; kinds whose CRDs are not installed do not hold anything back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_status_is_written_for_what_this_controller_owns() {
    let server = ApiServer::start().await;
    // An older Gateway API install: no ListenerSet, BackendTLSPolicy or experimental
    // TCPRoute CRDs. Those kinds are taken as empty; everything else is served.
    for plural in ["listenersets", "backendtlspolicies", "tcproutes"] {
        server.unserve(plural);
    }
    for document in crate::support::service_yaml("default", "echo-a", 18080).split("\n---\n") {
        server.put(document);
    }
    server.put(&format!(
        "apiVersion: {GW}\nkind: GatewayClass\nmetadata: {{name: ours}}\nspec: {{controllerName: projectcontour.io/gateway-controller}}\n"
    ));
    server.put(&format!(
        "apiVersion: {GW}\nkind: GatewayClass\nmetadata: {{name: theirs}}\nspec: {{controllerName: example.com/other}}\n"
    ));
    server.put(&format!(
        "apiVersion: {GW}\nkind: Gateway\nmetadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: ours\n  listeners: [{{name: http, protocol: HTTP, port: 30080}}]\n"
    ));
    server.put(&format!(
        "apiVersion: {GW}\nkind: Gateway\nmetadata: {{name: other, namespace: default}}\nspec:\n  gatewayClassName: theirs\n  listeners: [{{name: http, protocol: HTTP, port: 30081}}]\n"
    ));
    // The other controller has already reported on its own parent.
    server.put(&format!(
        r#"apiVersion: {GW}
kind: HTTPRoute
metadata: {{name: app, namespace: default}}
spec:
  parentRefs: [{{name: gw}}, {{name: other}}]
  hostnames: [app.example.com]
  rules: [{{backendRefs: [{{name: echo-a, port: 80}}]}}]
status:
  parents:
    - parentRef: {{name: other}}
      controllerName: example.com/other
      conditions:
        - {{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}}
"#
    ));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = isobar::config::Config {
        gateway: Some(
            serde_json::json!({"controllerName": "projectcontour.io/gateway-controller"}),
        ),
        ..isobar::config::Config::default()
    };
    config.leader_election.disabled = true;
    config.pipeline.holdoff_delay.0 = Duration::ZERO;
    config.pipeline.holdoff_max_delay.0 = Duration::ZERO;
    let controller = server.controller(&config, dir.path()).await;

    let object = |kind: &str, ns: &str, name: &str| server.get(GW, kind, ns, name);
    let route = eventually(WAIT, || async {
        let route = object("HTTPRoute", "default", "app")?;
        (route["status"]["parents"].as_array()?.len() == 2).then_some(route)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no status on the route: {:?}",
            object("HTTPRoute", "default", "app")
        )
    });
    let parents = &route["status"]["parents"];
    let ours = parents
        .as_array()
        .and_then(|p| {
            p.iter()
                .find(|p| p["controllerName"] == "projectcontour.io/gateway-controller")
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        ours["parentRef"],
        serde_json::json!({"group": GW_GROUP, "kind": "Gateway", "name": "gw"}),
        "{parents}"
    );
    assert_eq!(condition(&ours["conditions"], "Accepted")["status"], "True");
    assert_eq!(
        condition(&ours["conditions"], "ResolvedRefs")["status"],
        "True"
    );
    assert!(
        parents
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["controllerName"] == "example.com/other")),
        "the other controller's entry was dropped: {parents}"
    );

    let class = eventually(WAIT, || async {
        let class = object("GatewayClass", "", "ours")?;
        (!condition(&class["status"]["conditions"], "Accepted").is_null()).then_some(class)
    })
    .await
    .unwrap_or_default();
    let accepted = condition(&class["status"]["conditions"], "Accepted");
    assert_eq!(accepted["status"], "True", "{class}");
    assert_eq!(accepted["observedGeneration"], 1, "{class}");
    let features = class["status"]["supportedFeatures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        features.contains(&serde_json::json!({"name": "HTTPRoute"})),
        "{class}"
    );

    // Statuses are written concurrently: the Gateway's may land after the class's.
    let gateway = eventually(WAIT, || async {
        let gateway = object("Gateway", "default", "gw")?;
        (!condition(&gateway["status"]["conditions"], "Programmed").is_null()).then_some(gateway)
    })
    .await
    .unwrap_or_default();
    assert_eq!(
        condition(&gateway["status"]["conditions"], "Programmed")["status"],
        "True",
        "{gateway}"
    );
    let listener = &gateway["status"]["listeners"][0];
    assert_eq!(listener["name"], "http", "{gateway}");
    assert_eq!(listener["attachedRoutes"], 1, "{gateway}");
    assert_eq!(
        listener["supportedKinds"],
        serde_json::json!([
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
            {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}
        ])
    );

    // A route created later (built alone) is counted on the listener.
    let spliced = controller.metrics.spliced_builds.get();
    server.put(&format!(
        "apiVersion: {GW}\nkind: HTTPRoute\nmetadata: {{name: second, namespace: default}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [second.example.com]\n  rules: [{{backendRefs: [{{name: echo-a, port: 80}}]}}]\n"
    ));
    let counted = eventually(WAIT, || async {
        let gateway = object("Gateway", "default", "gw")?;
        (gateway["status"]["listeners"][0]["attachedRoutes"] == 2).then_some(())
    })
    .await;
    assert!(
        counted.is_some(),
        "{:?}",
        object("Gateway", "default", "gw")
    );
    // The status is handed to the writer before the build is counted.
    let counted_spliced = eventually(WAIT, || async {
        (controller.metrics.spliced_builds.get() > spliced).then_some(())
    })
    .await;
    assert!(
        counted_spliced.is_some(),
        "builds {} spliced {} before {spliced}",
        controller.metrics.builds.get(),
        controller.metrics.spliced_builds.get()
    );

    // Nothing of the other controller's was written.
    assert!(
        object("GatewayClass", "", "theirs").is_some_and(|c| c["status"].is_null()),
        "{:?}",
        object("GatewayClass", "", "theirs")
    );
    assert!(object("Gateway", "default", "other").is_some_and(|g| g["status"].is_null()));
    controller.shutdown().await;
}

/// An API server with Gateway API CRDs from before v1.5 serves TLSRoute only as
/// `v1alpha2` and ReferenceGrant only as `v1beta1`: both are read there (found by API
/// discovery), and the route's status is written at the version it was read, under the
/// configured controller name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_gateway_api_versions_are_read_where_the_api_serves_them() {
    let server = ApiServer::start().await;
    server.unserve_version("gateway.networking.k8s.io/v1/tlsroutes");
    server.unserve_version("gateway.networking.k8s.io/v1/referencegrants");
    for plural in ["listenersets", "backendtlspolicies", "tcproutes"] {
        server.unserve(plural);
    }
    for document in crate::support::service_yaml("backends", "tls-app", 18443).split("\n---\n") {
        server.put(document);
    }
    server.put(&format!(
        "apiVersion: {GW}\nkind: GatewayClass\nmetadata: {{name: ours}}\nspec: {{controllerName: isobar.dev/gateway}}\n"
    ));
    server.put(&format!(
        "apiVersion: {GW}\nkind: Gateway\nmetadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: ours\n  listeners: [{{name: tls, protocol: TLS, port: 30443, tls: {{mode: Passthrough}}}}]\n"
    ));
    server.put(
        "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {name: app, namespace: default}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [app.example.com]\n  rules: [{backendRefs: [{name: tls-app, namespace: backends, port: 80}]}]\n",
    );
    server.put(
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: routes, namespace: backends}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: default}]\n  to: [{group: '', kind: Service}]\n",
    );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = isobar::config::Config::default();
    config.leader_election.disabled = true;
    config.pipeline.holdoff_delay.0 = Duration::ZERO;
    config.pipeline.holdoff_max_delay.0 = Duration::ZERO;
    config.gateway = Some(serde_json::json!({"controllerName": "isobar.dev/gateway"}));
    let controller = server.controller(&config, dir.path()).await;
    let parent = eventually(WAIT, || async {
        let route = server.get(
            "gateway.networking.k8s.io/v1alpha2",
            "TLSRoute",
            "default",
            "app",
        )?;
        route["status"]["parents"].as_array()?.first().cloned()
    })
    .await
    .unwrap_or_else(|| panic!("no status on the v1alpha2 TLSRoute"));
    assert_eq!(parent["controllerName"], "isobar.dev/gateway", "{parent}");
    assert_eq!(
        condition(&parent["conditions"], "Accepted")["status"],
        "True",
        "{parent}"
    );
    // The v1beta1 grant was read: the Service of the other namespace resolves.
    assert_eq!(
        condition(&parent["conditions"], "ResolvedRefs")["status"],
        "True",
        "{parent}"
    );
    let gateway = server
        .get(GW, "Gateway", "default", "gw")
        .unwrap_or_default();
    assert_eq!(
        gateway["status"]["listeners"][0]["attachedRoutes"], 1,
        "{gateway}"
    );
    controller.shutdown().await;
}

/// A Gateway's `tls.frontend`: its HTTPS listener asks clients for a certificate of the
/// CA its ConfigMap holds (one without, or of another CA, is refused); a per-port entry
/// lets clients without one in (`AllowInsecureFallback`, said on the Gateway); a CA
/// reference that does not resolve leaves its listener unserved, not open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_validation_asks_clients_for_certificates() {
    let ca = new_ca("frontend test CA");
    let client_ca = new_ca("frontend client CA");
    let cert = issue(&ca, "*.gw.example.com");
    let stack = start_with(
        Some(CONFIG),
        &[
            ("ready.yaml", READY),
            ("gw-cert.yaml", &tls_secret("default", "gw-cert", &cert)),
            ("client-ca.yaml", &ca_config_map("client-ca", &client_ca)),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let open_port = crate::support::ServePorts::free().https;
    let https = |name: &str, port: u16| {
        format!(
            "    - name: {name}\n      protocol: HTTPS\n      port: {}\n      hostname: \"*.gw.example.com\"\n      tls: {{certificateRefs: [{{name: gw-cert}}]}}\n",
            port - 8000
        )
    };
    let objects = format!(
        "{CLASS}---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: isobar\n  tls:\n    frontend:\n      default:\n        validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]}}\n      perPort:\n        - port: {}\n          tls: {{validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}], mode: AllowInsecureFallback}}}}\n  listeners:\n{}{}---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: app, namespace: default}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [app.gw.example.com]\n  rules: [{{backendRefs: [{{name: echo-a, port: 80}}]}}]\n",
        open_port - 8000,
        https("mtls", stack.https_port),
        https("open", open_port)
    );
    write(&stack.manifests(), "gateway.yaml", &objects);
    let host = "app.gw.example.com";
    let anonymous = Client::new(&[&ca]);
    let trusted = Client::new(&[&ca]).with_identity(&issue(&client_ca, "client.example.com"));
    let stranger = Client::new(&[&ca]).with_identity(&issue(&new_ca("other CA"), "x.example.com"));
    let good = eventually(WAIT, || async {
        trusted.get(stack.https_port, host, host, "/").await.ok()
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no answer with a trusted client certificate\n{}",
            stack.logs()
        )
    });
    assert_eq!((good.status, good.body.as_str()), (200, "a"));
    assert!(
        anonymous
            .get(stack.https_port, host, host, "/")
            .await
            .is_err()
    );
    assert!(
        stranger
            .get(stack.https_port, host, host, "/")
            .await
            .is_err()
    );
    // The insecure fallback port lets a client without a certificate in.
    let open = eventually(WAIT, || async {
        anonymous.get(open_port, host, host, "/").await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("the fallback port refused a client\n{}", stack.logs()));
    assert_eq!((open.status, open.body.as_str()), (200, "a"));

    // The CA ConfigMap goes away: the mutual TLS listener is no longer served (nothing
    // falls open), the fallback one neither.
    std::fs::remove_file(stack.manifests().join("client-ca.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let closed = eventually(WAIT, || async {
        trusted
            .get(stack.https_port, host, host, "/")
            .await
            .is_err()
            .then_some(())
    })
    .await;
    assert!(
        closed.is_some(),
        "still served without its CA\n{}",
        stack.logs()
    );
    assert!(
        anonymous
            .get(stack.https_port, host, host, "/")
            .await
            .is_err()
    );
    stack.assert_nothing_rejected().await;
}

/// A ConfigMap holding `ca`'s certificate as `ca.crt`.
fn ca_config_map(name: &str, ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) -> String {
    let pem: String = ca.pem().lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\ndata:\n  ca.crt: |\n{pem}"
    )
}

/// A BackendTLSPolicy on port `http` of Service `service`.
fn backend_tls_policy(name: &str, service: &str, config_map: &str, hostname: &str) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: "", kind: Service, name: {service}, sectionName: http}}]
  validation:
    caCertificateRefs: [{{group: "", kind: ConfigMap, name: {config_map}}}]
    hostname: {hostname}
"#
    )
}

/// BackendTLSPolicies through a real Envoy: TLS to the backend with the policy's
/// hostname as SNI, its certificate checked against the ConfigMap's CA and the
/// hostname; a certificate of another CA or name is refused (503), a policy without a
/// usable CA answers 500 and never falls back to plain text; a ConfigMap edit fixes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_secure_upstream_connections_through_envoy() {
    let ca = new_ca("backend CA");
    let other_ca = new_ca("another CA");
    let backend_cert = issue(&ca, "backend.internal");
    let backend = tls_backend(&backend_cert).await;
    let service = |name: &str| crate::support::service_yaml("default", name, backend);
    let stack = start_with(
        Some(CONFIG),
        &[
            ("ready.yaml", READY),
            (
                "tls-services.yaml",
                &[
                    service("good"),
                    service("wrong-ca"),
                    service("wrong-name"),
                    service("no-ca"),
                ]
                .join("---\n"),
            ),
            ("ca.yaml", &ca_config_map("backend-ca", &ca)),
            ("other-ca.yaml", &ca_config_map("other-ca", &other_ca)),
            (
                "policies.yaml",
                &[
                    backend_tls_policy("good", "good", "backend-ca", "backend.internal"),
                    backend_tls_policy("wrong-ca", "wrong-ca", "other-ca", "backend.internal"),
                    backend_tls_policy(
                        "wrong-name",
                        "wrong-name",
                        "backend-ca",
                        "elsewhere.internal",
                    ),
                    backend_tls_policy("no-ca", "no-ca", "late-ca", "backend.internal"),
                ]
                .join("---\n"),
            ),
            (
                "route.yaml",
                r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: tls, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [tls.gw.example.com]
  rules:
    - matches: [{path: {value: /good}}]
      backendRefs: [{name: good, port: 80}]
    - matches: [{path: {value: /wrong-ca}}]
      backendRefs: [{name: wrong-ca, port: 80}]
    - matches: [{path: {value: /wrong-name}}]
      backendRefs: [{name: wrong-name, port: 80}]
    - matches: [{path: {value: /no-ca}}]
      backendRefs: [{name: no-ca, port: 80}]
"#,
            ),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let ca_cert = issue(&ca, "*.gw.example.com");
    write(
        &stack.manifests(),
        "gw-cert.yaml",
        &tls_secret("default", "gw-cert", &ca_cert),
    );
    write(
        &stack.manifests(),
        "gateway.yaml",
        &gateway(stack.http_port(), stack.https_port),
    );
    let host = "tls.gw.example.com";
    stack.wait_for(host, "/good", "passthrough", WAIT).await;
    let (status, body, headers) = request(&stack, "GET", host, "/good", &[]).await;
    assert_eq!((status, body.as_str()), (200, "passthrough"));
    assert_eq!(
        headers.get("x-sni").and_then(|v| v.to_str().ok()),
        Some("backend.internal"),
        "the policy's hostname is the SNI"
    );
    assert_eq!(request(&stack, "GET", host, "/wrong-ca", &[]).await.0, 503);
    assert_eq!(
        request(&stack, "GET", host, "/wrong-name", &[]).await.0,
        503
    );
    assert_eq!(request(&stack, "GET", host, "/no-ca", &[]).await.0, 500);
    // The ConfigMap it names arrives: the backend is reached over TLS.
    write(
        &stack.manifests(),
        "late-ca.yaml",
        &ca_config_map("late-ca", &ca),
    );
    stack.wait_for(host, "/no-ca", "passthrough", WAIT).await;
    stack.assert_nothing_rejected().await;
}

/// HTTPProxies (with an include from another namespace, conditions, rewrites, header
/// policies, a redirect and TLS) and an Ingress: what `isobar convert` is checked on.
const TO_CONVERT: &str = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: shop, namespace: default}
spec:
  virtualhost: {fqdn: shop.example.com}
  routes:
    - services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /api/}]
      requestHeadersPolicy: {set: [{name: x-hello, value: converted}]}
      services: [{name: echo-b, port: 80}]
    - conditions: [{prefix: /old/}]
      pathRewritePolicy: {replacePrefix: [{prefix: /old/, replacement: /new/}]}
      services: [{name: echo-a, port: 80}]
    - conditions: [{prefix: /canary/}, {header: {name: x-env, exact: canary}}]
      services: [{name: echo-b, port: 80}]
    - conditions: [{prefix: /moved/}]
      requestRedirectPolicy: {hostname: elsewhere.example.com, statusCode: 301}
  includes:
    - {name: team, namespace: team, conditions: [{prefix: /team/}]}
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: team, namespace: team}
spec:
  routes: [{services: [{name: echo-c, port: 80}]}]
---
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: secure, namespace: default}
spec:
  virtualhost: {fqdn: secure.example.com, tls: {secretName: secure-cert}}
  routes: [{services: [{name: echo-b, port: 80}]}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: default}
spec:
  rules:
    - host: web.example.com
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: echo-a, port: {number: 80}}}}
          - {path: /exact, pathType: Exact, backend: {service: {name: echo-b, port: {number: 80}}}}
"#;

/// The round trip of `isobar convert`: the Gateway API objects it writes for HTTPProxies
/// and an Ingress, served by Isobar through a real Envoy, answer the same requests the
/// same way the originals did (backend, status, rewritten path, headers, redirects,
/// HTTPS), and the report names what has no equivalent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converted_objects_answer_as_the_originals_did() {
    let ca = new_ca("convert CA");
    let cert = issue(&ca, "secure.example.com");
    let stack = start_with(
        Some(CONFIG),
        &[
            (
                "secure-cert.yaml",
                &tls_secret("default", "secure-cert", &cert),
            ),
            ("original.yaml", TO_CONVERT),
        ],
        ("shop.example.com", "/", "a"),
    )
    .await;
    type Request<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let requests: &[Request<'_>] = &[
        ("shop.example.com", "/", &[]),
        ("shop.example.com", "/anything", &[]),
        ("shop.example.com", "/api/x", &[]),
        ("shop.example.com", "/old/x?q=1", &[]),
        ("shop.example.com", "/canary/", &[("x-env", "canary")]),
        ("shop.example.com", "/canary/", &[]),
        ("shop.example.com", "/moved/x", &[]),
        ("shop.example.com", "/team/x", &[]),
        ("secure.example.com", "/", &[]),
        ("web.example.com", "/", &[]),
        ("web.example.com", "/exact", &[]),
        ("web.example.com", "/exact/more", &[]),
    ];
    let client = Client::new(&[&ca]);
    let answers = || async {
        let mut out = Vec::new();
        for (host, path, headers) in requests {
            let (status, body, h) = request(&stack, "GET", host, path, headers).await;
            let seen = |name: &str| {
                h.get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            // A scheme's own port written out is the same place as none.
            let location = seen("location");
            let location = match location.split_once("://") {
                Some(("https", rest)) => format!("https://{}", rest.replacen(":443/", "/", 1)),
                Some(("http", rest)) => format!("http://{}", rest.replacen(":80/", "/", 1)),
                _ => location,
            };
            out.push(format!(
                "{host}{path} {headers:?} → {status} {body:?} path={} hello={} location={location}",
                seen("x-seen-path"),
                seen("x-seen-hello"),
            ));
        }
        let secure = client
            .get(
                stack.https_port,
                "secure.example.com",
                "secure.example.com",
                "/",
            )
            .await
            .map(|r| (r.status, r.body))
            .unwrap_or_else(|e| panic!("https: {e}\n{}", stack.logs()));
        out.push(format!("https://secure.example.com/ → {secure:?}"));
        out
    };
    let before = answers().await;
    // What the originals answer (so that an equal answer afterwards means something).
    for expected in [
        "/api/x [] → 200 \"b\" path=/api/x hello=converted",
        "/old/x?q=1 [] → 200 \"a\" path=/new/x?q=1",
        "/canary/ [(\"x-env\", \"canary\")] → 200 \"b\"",
        "/moved/x [] → 301",
        "/team/x [] → 200 \"c\"",
        "secure.example.com/ [] → 301",
        "web.example.com/exact/more [] → 200 \"a\"",
        "https://secure.example.com/ → (200, \"b\")",
    ] {
        assert!(
            before.iter().any(|answer| answer.contains(expected)),
            "no answer has {expected:?}: {before:#?}"
        );
    }

    let (ok, converted, report) = crate::support::isobar(
        &[
            "convert",
            &stack
                .manifests()
                .join("original.yaml")
                .display()
                .to_string(),
            "--gateway",
            "default/converted",
            "--gateway-class",
            "isobar",
            "--http-port",
            &(stack.http_port() - 8000).to_string(),
            "--https-port",
            &(stack.https_port - 8000).to_string(),
        ],
        &[],
    );
    assert!(ok, "{report}");
    assert!(
        converted.starts_with("# Converted by isobar convert: nothing was left out."),
        "{converted}"
    );
    std::fs::remove_file(stack.manifests().join("original.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let gone = eventually(WAIT, || async {
        (stack.get("shop.example.com", "/").await.map(|r| r.0) == Some(404)).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the originals were never removed\n{}",
        stack.logs()
    );
    write(&stack.manifests(), "class.yaml", CLASS);
    write(&stack.manifests(), "converted.yaml", &converted);
    stack
        .wait_for("shop.example.com", "/team/x", "c", WAIT)
        .await;
    stack.wait_for("web.example.com", "/exact", "b", WAIT).await;
    let after = answers().await;
    assert_eq!(before, after, "converted:\n{converted}");
    stack.assert_nothing_rejected().await;
}

/// `isobar convert` names, file and field, what it leaves out, and converts the rest.
#[test]
fn convert_reports_what_has_no_gateway_api_equivalent() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("proxy.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: p, namespace: a}
spec:
  virtualhost: {fqdn: p.example.com, ipAllowPolicy: [{source: Peer, cidr: 10.0.0.0/8}]}
  routes:
    - conditions: [{prefix: /app}]
      retryPolicy: {count: 3}
      services: [{name: web, port: 80}]
    - conditions: [{header: {name: x-a, notpresent: true}}]
      services: [{name: web, port: 80}]
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (ok, out, err) = crate::support::isobar(&["convert", &file.display().to_string()], &[]);
    assert!(ok, "{err}");
    for left_out in [
        "HTTPProxy a/p: virtualhost.ipAllowPolicy: Gateway API has no equivalent",
        "HTTPProxy a/p: retryPolicy: Gateway API has no equivalent",
        "HTTPProxy a/p: header condition on x-a: negated or case-insensitive header matches have no equivalent; the rule is left out",
    ] {
        assert!(
            out.contains(&format!("#   {left_out}\n")),
            "{left_out:?} not in\n{out}"
        );
        assert!(
            err.contains(&format!("left out: {left_out}")),
            "{left_out:?} not in\n{err}"
        );
    }
    // Written, with another meaning: said as changed, not as left out.
    let changed = "HTTPProxy a/p: prefix /app: the HTTPProxy also matched /appx…, PathPrefix only /app and /app/…";
    let (_, after) = out
        .split_once("# Changed (written, but matching otherwise than the original):\n")
        .unwrap_or_else(|| panic!("no changed section in\n{out}"));
    assert!(after.contains(&format!("#   {changed}\n")), "{out}");
    assert!(err.contains(&format!("changed: {changed}")), "{err}");
    assert!(out.contains("value: /app\n"), "{out}");
    // Without --gateway-class the output holds its own GatewayClass, of Isobar's
    // controller name, which the Gateway names.
    let docs: Vec<serde_json::Value> = out
        .split("\n---\n")
        .skip(1)
        .map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    let class = docs
        .iter()
        .find(|d| d["kind"] == "GatewayClass")
        .unwrap_or_else(|| panic!("no GatewayClass in\n{out}"));
    assert_eq!(
        class["spec"]["controllerName"],
        "projectcontour.io/gateway-controller"
    );
    let gateway = docs
        .iter()
        .find(|d| d["kind"] == "Gateway")
        .unwrap_or_else(|| panic!("no Gateway in\n{out}"));
    assert_eq!(
        gateway["spec"]["gatewayClassName"],
        class["metadata"]["name"]
    );
    assert!(err.contains("wrote GatewayClass"), "{err}");
    let (ok, _, err) = crate::support::isobar(
        &[
            "convert",
            &file.display().to_string(),
            "--gateway",
            "nameonly",
        ],
        &[],
    );
    assert!(
        !ok && err.contains("--gateway \"nameonly\" is not namespace/name"),
        "{err}"
    );
}

/// ListenerSets through a real Envoy: a set's HTTP and HTTPS listeners share the
/// Gateway's ports, routes attached to the set answer on its hosts (over HTTPS with its
/// certificate), routes of the Gateway only on the Gateway's, and a set the Gateway does
/// not allow serves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_sets_serve_their_routes_through_envoy() {
    let ca = new_ca("listener set CA");
    let cert = issue(&ca, "app.sets.example.com");
    let stack = start_with(
        Some(CONFIG),
        &[
            ("ready.yaml", READY),
            ("set-cert.yaml", &tls_secret("default", "set-cert", &cert)),
        ],
        ("ready.example.com", "/", "a"),
    )
    .await;
    let (http, https) = (stack.http_port() - 8000, stack.https_port - 8000);
    let objects = format!(
        r#"{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: sets, namespace: default}}
spec:
  gatewayClassName: isobar
  allowedListeners: {{namespaces: {{from: Same}}}}
  listeners: [{{name: http, protocol: HTTP, port: {http}, hostname: gw.sets.example.com}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: app, namespace: default}}
spec:
  parentRef: {{name: sets}}
  listeners:
    - {{name: app-http, protocol: HTTP, port: {http}, hostname: app.sets.example.com}}
    - name: app-https
      protocol: HTTPS
      port: {https}
      hostname: app.sets.example.com
      tls: {{certificateRefs: [{{name: set-cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: not-allowed, namespace: team}}
spec:
  parentRef: {{name: sets, namespace: default}}
  listeners: [{{name: team, protocol: HTTP, port: {http}, hostname: team.sets.example.com}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: on-set, namespace: default}}
spec:
  parentRefs: [{{kind: ListenerSet, name: app}}]
  rules: [{{backendRefs: [{{name: echo-a, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: on-gateway, namespace: default}}
spec:
  parentRefs: [{{name: sets}}]
  rules: [{{backendRefs: [{{name: echo-b, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: team-route, namespace: team}}
spec:
  parentRefs: [{{kind: ListenerSet, name: not-allowed}}]
  rules: [{{backendRefs: [{{name: echo-c, port: 80}}]}}]
"#
    );
    write(&stack.manifests(), "sets.yaml", &objects);
    stack.wait_for("app.sets.example.com", "/", "a", WAIT).await;
    assert_eq!(stack.body_of("gw.sets.example.com", "/").await, "b");
    assert_eq!(
        stack.get("team.sets.example.com", "/").await.map(|r| r.0),
        Some(404),
        "a set the Gateway does not allow is served"
    );
    let client = Client::new(&[&ca]);
    let host = "app.sets.example.com";
    // The HTTPS listener's route table may land a moment after the HTTP one.
    let secure = eventually(WAIT, || async {
        client.get(stack.https_port, host, host, "/").await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("no HTTPS answer\n{}", stack.logs()));
    assert_eq!((secure.status, secure.body.as_str()), (200, "a"));
    assert_eq!(
        secure.peer.as_ref(),
        Some(&cert.der),
        "not the set's certificate"
    );
    stack.assert_nothing_rejected().await;
}

/// A TLSRoute on a listener that terminates TLS, to a Service a BackendTLSPolicy covers:
/// Envoy speaks TLS to the backend again, with the policy's SNI, and checks the
/// backend's certificate against the policy's CA; the policy reports the Gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_tls_route_reencrypts_to_a_backend_as_its_policy_says() {
    use crate::conformance::client::Tls;
    use crate::conformance::suite::{GW, INFRA, Suite, has};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let suite = Suite::start().await;
    let gw = "reencrypting";
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n    - {{name: tls, port: 443, protocol: TLS, hostname: tls.example.com, tls: {{mode: Terminate, certificateRefs: [{{name: tls-terminate-checks-certificate}}]}}, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {{name: reencrypted, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {gw}}}]\n  hostnames: [tls.example.com]\n  rules: [{{backendRefs: [{{name: tls-backend, port: 443}}]}}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: tls-backend, namespace: gateway-conformance-infra}}\nspec:\n  targetRefs: [{{group: '', kind: Service, name: tls-backend}}]\n  validation:\n    caCertificateRefs: [{{group: '', kind: ConfigMap, name: tls-checks-ca-certificate}}]\n    hostname: abc.example.com\n"
    ));
    let addr = suite.gateway_address(INFRA, gw, None).await;
    suite
        .wait_for(
            (GW, "BackendTLSPolicy", INFRA, "tls-backend"),
            "Accepted on the Gateway",
            |p| {
                p["status"]["ancestors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| {
                        a["ancestorRef"]["name"] == gw
                            && has(&a["conditions"], "Accepted", "True", "Accepted")
                    })
            },
        )
        .await;
    let tls = Tls::new("tls.example.com", &[suite.certs.checks.der()]);
    let started = std::time::Instant::now();
    let mut last = String::new();
    while started.elapsed() < Duration::from_secs(30) {
        let answer = async {
            let mut stream = tls.connect(addr, &[]).await?;
            stream
                .write_all(b"GET /reencrypted HTTP/1.1\r\nHost: tls.example.com\r\nConnection: close\r\n\r\n")
                .await
                .map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
            Ok::<String, String>(String::from_utf8_lossy(&out).to_string())
        }
        .await;
        match answer {
            Ok(text) if text.starts_with("HTTP/1.1 200") => {
                let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
                let echo: Value =
                    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
                assert_eq!(echo["tls"]["serverName"], "abc.example.com", "{echo}");
                assert_eq!(echo["path"], "/reencrypted", "{echo}");
                suite.assert_nothing_rejected().await;
                return;
            }
            Ok(text) => last = text,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "no answer re-encrypted to the backend: {last}\n{}",
        suite.logs()
    );
}

/// An HTTPRoute rule's `sessionPersistence` (experimental): the first answer sets the
/// session cookie, and requests carrying it all reach the one pod it chose; requests
/// without one are spread over the pods as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cookie_keeps_requests_on_one_pod() {
    use crate::conformance::client::get;
    use crate::conformance::suite::{INFRA, Suite};
    let suite = Suite::start().await;
    suite.apply("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: sticky, namespace: gateway-conformance-infra}\nspec:\n  parentRefs: [{name: same-namespace}]\n  rules:\n    - matches: [{path: {type: PathPrefix, value: /sticky}}]\n      sessionPersistence: {sessionName: Sticky-Session, type: Cookie}\n      backendRefs: [{name: infra-backend-v1, port: 8080}]\n");
    let addr = suite
        .routes_accepted((INFRA, "same-namespace"), "HTTPRoute", &[(INFRA, "sticky")])
        .await;
    suite
        .expect(addr, &get("/sticky").backend("infra-backend-v1"))
        .await;
    one_pod_per_session(&suite, addr, "/sticky", "Sticky-Session").await;
    suite.assert_nothing_rejected().await;
}

/// `path`'s first answer sets session cookie `name`; 20 requests carrying it reach one
/// pod, 40 without it reach both of infra-backend-v1's.
async fn one_pod_per_session(
    suite: &crate::conformance::suite::Suite,
    addr: std::net::SocketAddr,
    path: &str,
    name: &str,
) {
    use crate::conformance::client::{Answer, Protocol, get, send};
    let pod = |answer: &Answer| {
        answer
            .echo
            .as_ref()
            .and_then(|e| e["pod"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let first = send(addr, &Protocol::Http, &get(path).request, &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let cookie = first
        .header("set-cookie")
        .and_then(|c| c.split(';').next().map(str::to_string))
        .unwrap_or_else(|| panic!("no session cookie: {:?}\n{}", first.headers, suite.logs()));
    assert!(cookie.starts_with(&format!("{name}=")), "{cookie}");
    let mut with = get(path).request;
    with.headers.push(("Cookie".to_string(), cookie.clone()));
    let mut pods = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let answer = send(addr, &Protocol::Http, &with, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.status, 200, "{}", answer.body);
        pods.insert(pod(&answer));
    }
    assert_eq!(pods.len(), 1, "one session reached {pods:?}");
    let mut without = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let answer = send(addr, &Protocol::Http, &get(path).request, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        without.insert(pod(&answer));
    }
    assert_eq!(without.len(), 2, "new sessions reached {without:?}");
}

/// Default Gateways (experimental, GEP-3793): a Gateway of `defaultScope: All` says
/// `DefaultGateway` and takes the routes of `useDefaultGateways: All` its listeners allow,
/// as if they named it (their status names it; a route of a namespace its listener does not
/// allow is `NotAllowedByListeners`); a route without `useDefaultGateways` is not taken;
/// once the Gateway is no longer default, the route leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_gateway_takes_the_routes_asking_for_one() {
    use crate::conformance::client::get;
    use crate::conformance::suite::{APP, CLASS, GW, INFRA, Suite, has};
    let suite = Suite::start().await;
    let gateway = |scope: &str| {
        format!(
            "apiVersion: {GW}\nkind: Gateway\nmetadata: {{name: default-gw, namespace: {INFRA}}}\nspec:\n  gatewayClassName: {CLASS}\n  defaultScope: {scope}\n  listeners: [{{name: http, port: 80, protocol: HTTP}}]\n"
        )
    };
    suite.apply(&gateway("All"));
    let route = |ns: &str, name: &str, defaulted: &str, path: &str| {
        format!(
            "apiVersion: {GW}\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{defaulted}  rules:\n    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      backendRefs: [{{name: infra-backend-v1, namespace: {INFRA}, port: 8080}}]\n"
        )
    };
    suite.apply(&route(
        INFRA,
        "defaulted",
        "  useDefaultGateways: All\n",
        "/defaulted",
    ));
    suite.apply(&route(
        INFRA,
        "explicit",
        "  parentRefs: [{name: same-namespace}]\n",
        "/explicit",
    ));
    suite.apply(&route(
        APP,
        "defaulted-elsewhere",
        "  useDefaultGateways: All\n",
        "/elsewhere",
    ));
    suite
        .gateway_condition((INFRA, "default-gw"), ("DefaultGateway", "True", ""))
        .await;
    let addr = suite
        .routes_accepted((INFRA, "default-gw"), "HTTPRoute", &[(INFRA, "defaulted")])
        .await;
    suite
        .route_condition(
            ("HTTPRoute", APP, "defaulted-elsewhere"),
            (INFRA, "default-gw"),
            ("Accepted", "False", "NotAllowedByListeners"),
        )
        .await;
    suite
        .expect(addr, &get("/defaulted").backend("infra-backend-v1"))
        .await;
    for path in ["/explicit", "/elsewhere"] {
        let mut not_found = get(path);
        not_found.statuses = vec![404];
        suite.expect(addr, &not_found).await;
    }
    let explicit = suite.get(GW, "HTTPRoute", INFRA, "explicit");
    assert!(
        crate::conformance::suite::parent_of(&explicit, INFRA, "default-gw", "Gateway").is_none(),
        "a route not asking for default Gateways got {}",
        explicit["status"]
    );
    let defaulted = suite.get(GW, "HTTPRoute", INFRA, "defaulted");
    assert!(
        defaulted["spec"].get("parentRefs").is_none(),
        "parentRefs written: {}",
        defaulted["spec"]
    );
    // The base Gateway of the same namespace is not a default one.
    let same = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "explicit")],
        )
        .await;
    suite
        .expect(same, &get("/explicit").backend("infra-backend-v1"))
        .await;
    let mut not_there = get("/defaulted");
    not_there.statuses = vec![404];
    suite.expect(same, &not_there).await;
    suite.apply(&gateway("None"));
    suite
        .wait_for(
            (GW, "Gateway", INFRA, "default-gw"),
            "no DefaultGateway condition",
            |g| {
                crate::conformance::suite::fresh(g)
                    && !g["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "DefaultGateway")
            },
        )
        .await;
    suite
        .wait_for(
            (GW, "HTTPRoute", INFRA, "defaulted"),
            "no parent entry for default-gw",
            |r| {
                r["status"].is_object()
                    && crate::conformance::suite::parent_of(r, INFRA, "default-gw", "Gateway")
                        .is_none()
            },
        )
        .await;
    // Its only route gone, the Gateway's listener answers nothing (or 404).
    let start = std::time::Instant::now();
    loop {
        let answer = crate::conformance::client::send(
            addr,
            &crate::conformance::client::Protocol::Http,
            &get("/defaulted").request,
            &[],
        )
        .await;
        match answer {
            Ok(a) if a.status == 200 => {
                assert!(start.elapsed() < Duration::from_secs(30), "still served");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(a) => {
                assert_eq!(a.status, 404, "{}", a.body);
                break;
            }
            Err(_) => break,
        }
    }
    assert!(has(
        &suite.get(GW, "Gateway", INFRA, "default-gw")["status"]["conditions"],
        "Accepted",
        "True",
        ""
    ));
    suite.assert_nothing_rejected().await;
}

/// A GRPCRoute rule's `sessionPersistence` (experimental), of type Header: calls carrying
/// the same session header reach one pod; calls without one reach both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_session_header_keeps_calls_on_one_pod() {
    use crate::conformance::grpc::{call, send};
    use crate::conformance::suite::{INFRA, Suite};
    let suite = Suite::start().await;
    suite.apply("apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: grpc-sticky, namespace: gateway-conformance-infra}\nspec:\n  parentRefs: [{name: same-namespace}]\n  rules:\n    - sessionPersistence: {sessionName: X-Grpc-Session, type: Header}\n      backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]\n");
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "GRPCRoute",
            &[(INFRA, "grpc-sticky")],
        )
        .await;
    let plain = call("Echo").backend("grpc-infra-backend-v1");
    if let Err(e) = crate::conformance::grpc::eventually(addr, &plain).await {
        panic!("{e}\n{}", suite.logs());
    }
    let pods = |call: crate::conformance::grpc::Call, n: usize| async move {
        let mut pods = std::collections::BTreeSet::new();
        for _ in 0..n {
            let (code, echo) = send(addr, &call).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(code, tonic::Code::Ok);
            let context = echo
                .and_then(|e| e.assertions)
                .and_then(|a| a.context)
                .unwrap_or_default();
            pods.insert(context.pod);
        }
        pods
    };
    for session in ["alpha", "beta", "gamma"] {
        let sticky = plain.clone().metadata(&[("X-Grpc-Session", session)]);
        let reached = pods(sticky, 15).await;
        assert_eq!(reached.len(), 1, "session {session} reached {reached:?}");
    }
    let reached = pods(plain, 40).await;
    assert_eq!(
        reached.len(),
        2,
        "calls without a session reached {reached:?}"
    );
    suite.assert_nothing_rejected().await;
}

/// An XBackendTrafficPolicy's `sessionPersistence` (experimental): every rule sending to
/// its Service without a session of its own keeps the policy's; a rule's own wins. The
/// policy is Accepted under the route's Gateway; a newer one naming the same Service is
/// Conflicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_traffic_policy_keeps_sessions_for_every_route_to_its_service() {
    use crate::conformance::client::get;
    use crate::conformance::suite::{INFRA, Suite};
    const X: &str = "gateway.networking.x-k8s.io/v1alpha1";
    let suite = Suite::start().await;
    suite.apply("apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {name: sessions, namespace: gateway-conformance-infra}\nspec:\n  targetRefs: [{group: '', kind: Service, name: infra-backend-v1}]\n  sessionPersistence: {sessionName: Policy-Session}\n");
    suite.apply("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: policy-sticky, namespace: gateway-conformance-infra}\nspec:\n  parentRefs: [{name: same-namespace}]\n  rules:\n    - matches: [{path: {type: PathPrefix, value: /by-policy}}]\n      backendRefs: [{name: infra-backend-v1, port: 8080}]\n    - matches: [{path: {type: PathPrefix, value: /by-rule}}]\n      sessionPersistence: {sessionName: Rule-Session}\n      backendRefs: [{name: infra-backend-v1, port: 8080}]\n");
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "HTTPRoute",
            &[(INFRA, "policy-sticky")],
        )
        .await;
    suite
        .policy_condition(
            (X, "XBackendTrafficPolicy", "sessions"),
            "same-namespace",
            ("Accepted", "True", "Accepted"),
        )
        .await;
    suite
        .expect(addr, &get("/by-policy").backend("infra-backend-v1"))
        .await;
    one_pod_per_session(&suite, addr, "/by-policy", "Policy-Session").await;
    one_pod_per_session(&suite, addr, "/by-rule", "Rule-Session").await;
    suite.apply("apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {name: sessions-later, namespace: gateway-conformance-infra}\nspec:\n  targetRefs: [{group: '', kind: Service, name: infra-backend-v1}]\n  sessionPersistence: {sessionName: Later-Session}\n");
    suite
        .policy_condition(
            (X, "XBackendTrafficPolicy", "sessions-later"),
            "same-namespace",
            ("Accepted", "False", "Conflicted"),
        )
        .await;
    one_pod_per_session(&suite, addr, "/by-policy", "Policy-Session").await;
    suite.assert_nothing_rejected().await;
}

/// An XBackendTrafficPolicy's `retryConstraint` (experimental) is Envoy's retry budget on
/// its Service: ten requests at once, each failing twice (400 ms apiece) before it
/// succeeds, all succeed under a budget of 100 % (Envoy's default alone lets 3 retries be
/// in flight); under a budget of 0 % with a minimum of 1, one retry is in flight at a
/// time and the other requests get the backend's 500 (Envoy counts the overflow).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_traffic_policy_retry_budget_bounds_the_retries_in_flight() {
    use crate::conformance::client::{Protocol, get, send};
    use crate::conformance::suite::{INFRA, Suite};
    const X: &str = "gateway.networking.x-k8s.io/v1alpha1";
    let suite = Suite::start().await;
    suite.apply("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: budget, namespace: gateway-conformance-infra}\nspec:\n  parentRefs: [{name: same-namespace}]\n  rules:\n    - matches: [{path: {type: PathPrefix, value: /retry/budget}}]\n      retry: {codes: [500], attempts: 3}\n      backendRefs: [{name: infra-backend-v3, port: 8080}]\n");
    let addr = suite
        .routes_accepted((INFRA, "same-namespace"), "HTTPRoute", &[(INFRA, "budget")])
        .await;
    static ROUND: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // The statuses of ten requests at once, each failing twice before it succeeds.
    let round = || async {
        let round = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let requests = (0..10).map(|i| {
            let uri = format!(
                "/retry/budget?responseCode=500&succeedAfter=2&delayRetry=400ms&uuid=r{round}-{i}"
            );
            async move {
                send(addr, &Protocol::Http, &get(&uri).request, &[])
                    .await
                    .map_or(0, |a| a.status)
            }
        });
        futures::future::join_all(requests).await
    };
    let ok = |statuses: &[u16]| statuses.iter().filter(|s| **s == 200).count();
    suite
        .expect(
            addr,
            &get("/retry/budget?succeedAfter=0&uuid=ready").backend("infra-backend-v3"),
        )
        .await;
    let unbudgeted = round().await;
    assert!(ok(&unbudgeted) < 10, "without a budget: {unbudgeted:?}");
    let policy = |percent: u32, count: u32| {
        format!(
            "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {{name: budget, namespace: gateway-conformance-infra}}\nspec:\n  targetRefs: [{{group: '', kind: Service, name: infra-backend-v3}}]\n  retryConstraint:\n    budget: {{percent: {percent}, interval: 10s}}\n    minRetryRate: {{count: {count}, interval: 1s}}\n"
        )
    };
    let until = |want: fn(usize) -> bool, what: &'static str| {
        let round = &round;
        let suite = &suite;
        async move {
            let start = std::time::Instant::now();
            loop {
                let statuses = round().await;
                if want(ok(&statuses)) {
                    return statuses;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "{what}: {statuses:?}\n{}",
                    suite.logs()
                );
            }
        }
    };
    suite.apply(&policy(100, 20));
    suite
        .policy_condition(
            (X, "XBackendTrafficPolicy", "budget"),
            "same-namespace",
            ("Accepted", "True", "Accepted"),
        )
        .await;
    until(|n| n == 10, "a budget of 100 % retries every request").await;
    let overflow = || async {
        let stats = suite.admin("/stats?filter=infra-backend-v3").await;
        stats
            .lines()
            .filter(|l| l.contains(".upstream_rq_retry_overflow: "))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let before = overflow().await;
    suite.apply(&policy(0, 1));
    let statuses = until(
        |n| n == 1,
        "a budget of 0 %, at least 1, retries one request",
    )
    .await;
    let after = overflow().await;
    // Each request answered with the backend's 500 was refused a retry (a request
    // the client gave up on under load is not counted).
    let refused = statuses.iter().filter(|s| **s == 500).count() as u64;
    assert!(refused >= 1, "no retry refused: {statuses:?}");
    assert!(
        after >= before + refused,
        "retry overflow {before} → {after} for {statuses:?}"
    );
    suite.assert_nothing_rejected().await;
}
