//! Extension services through a real Envoy, against real protocol servers the tests
//! start (`extension_servers`): ExtensionServices as extension clusters, external
//! authorization (an HTTPProxy's `authorization`, Contour's `globalExtAuth`), global
//! rate limits (Contour's `rateLimitService`, HTTPProxy `rateLimitPolicy.global`),
//! tracing (Contour's `tracing`, to an OTLP collector), JWT verification (HTTPProxy
//! `jwtProviders` with keys from a JWKS endpoint).

use std::time::Duration;

use crate::e2e::start_with;
use crate::extension_servers::{authorization_server, jwks, rate_limit_server, trace_collector};
use crate::support::{eventually, service_yaml, write};
use crate::tls::{Client, issue, new_ca, tls_secret};

const WAIT: Duration = Duration::from_secs(30);

/// An ExtensionService `name` in `default` calling Service `service` (port 80) over
/// clear-text HTTP/2.
fn extension_service(name: &str, service: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1alpha1\nkind: ExtensionService\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  protocol: h2c\n  services: [{{name: {service}, port: 80}}]\n  timeoutPolicy: {{response: 2s}}\n"
    )
}

/// A plain site to tell when Envoy is serving.
const READY: &str = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: ready, namespace: default}\nspec:\n  virtualhost: {fqdn: ready.example.com}\n  routes: [{services: [{name: echo-a, port: 80}]}]\n";

/// A TLS vhost with `authorization`: a request the server allows reaches the backend,
/// one it denies gets the server's answer (401 and its body), a route with
/// `authPolicy.disabled` is never checked, each check carries the vhost's context merged
/// with the route's; with the server gone, requests fail closed (403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_authorization_checks_requests_through_envoy() {
    let auth = authorization_server().await;
    let ca = new_ca("Isobar Test CA");
    let cert = issue(&ca, "guarded.example.com");
    let proxy = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: guarded, namespace: default}
spec:
  virtualhost:
    fqdn: guarded.example.com
    tls: {secretName: guarded}
    authorization:
      extensionRef: {name: authz}
      authPolicy: {context: {tier: gold}}
  routes:
    - conditions: [{prefix: /public}]
      authPolicy: {disabled: true}
      services: [{name: echo-b, port: 80}]
    - conditions: [{prefix: /api}]
      authPolicy: {context: {site: api}}
      services: [{name: mirror, port: 80}]
    - services: [{name: echo-a, port: 80}]
"#;
    let files = [
        ("ready.yaml", READY.to_string()),
        ("tls.yaml", tls_secret("default", "guarded", &cert)),
        (
            "authz-service.yaml",
            service_yaml("default", "authz", auth.port),
        ),
        ("authz.yaml", extension_service("authz", "authz")),
        ("guarded.yaml", proxy.to_string()),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let stack = start_with(None, &files, ("ready.example.com", "/", "a")).await;
    let client = Client::new(&[&ca]);
    let get = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        let client = &client;
        let port = stack.https_port;
        async move {
            client
                .get_with(
                    port,
                    "guarded.example.com",
                    "guarded.example.com",
                    path,
                    headers,
                )
                .await
        }
    };
    let allowed = eventually(WAIT, || async {
        get("/", &[("x-allow", "yes")])
            .await
            .ok()
            .filter(|a| a.status == 200)
    })
    .await
    .unwrap_or_else(|| panic!("an allowed request never got through\n{}", stack.logs()));
    assert_eq!(allowed.body, "a");
    let denied = get("/", &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(denied.status, 401, "{denied:?}");
    assert_eq!(denied.body, "denied by the test authorization server");
    let before = auth.seen().len();
    let public = get("/public", &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((public.status, public.body.as_str()), (200, "b"));
    assert_eq!(
        auth.seen().len(),
        before,
        "a route with checks off was checked"
    );
    let api = get("/api", &[("x-allow", "yes")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((api.status, api.body.as_str()), (200, "mirror"));
    let checks = auth.seen();
    let root = checks
        .iter()
        .find(|c| c.path == "/")
        .unwrap_or_else(|| panic!("{checks:?}"));
    assert_eq!(root.host, "guarded.example.com");
    assert_eq!(
        root.context.iter().collect::<Vec<_>>(),
        vec![(&"tier".to_string(), &"gold".to_string())]
    );
    let api = checks
        .iter()
        .find(|c| c.path == "/api")
        .unwrap_or_else(|| panic!("{checks:?}"));
    assert_eq!(api.context.get("site").map(String::as_str), Some("api"));
    assert_eq!(api.context.get("tier").map(String::as_str), Some("gold"));
    // Plain HTTP to the vhost is redirected, not checked.
    let plain = stack
        .get("guarded.example.com", "/")
        .await
        .map(|(status, _)| status);
    assert_eq!(plain, Some(301));
    // The server gone: not failOpen, so requests are refused.
    auth.stop();
    let refused = eventually(WAIT, || async {
        get("/", &[("x-allow", "yes")])
            .await
            .ok()
            .filter(|a| a.status == 403)
    })
    .await;
    assert!(refused.is_some(), "requests got through without the server");
    stack.assert_nothing_rejected().await;
}

/// Contour's `globalExtAuth` checks plain HTTP vhosts through the plain listener's
/// filter. Its ExtensionService may come later: until it exists requests fail closed
/// (Contour would not start), once it does the server decides; `authPolicy.disabled`
/// routes are never checked, and the global context (and the request body) goes with
/// each check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_authorization_follows_its_extension_service() {
    let auth = authorization_server().await;
    let config = "globalExtAuth:\n  extensionService: default/authz\n  authPolicy: {context: {from: global}}\n  withRequestBody: {maxRequestBytes: 64, allowPartialMessage: true}\n";
    let site = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: site, namespace: default}
spec:
  virtualhost: {fqdn: site.example.com}
  routes:
    - conditions: [{prefix: /open}]
      authPolicy: {disabled: true}
      services: [{name: echo-b, port: 80}]
    - services: [{name: echo-a, port: 80}]
"#;
    let stack = start_with(
        Some(config),
        &[("site.yaml", site)],
        ("site.example.com", "/open", "b"),
    )
    .await;
    let status = |headers: &'static [(&'static str, &'static str)]| {
        let stack = &stack;
        async move {
            let url = format!("http://127.0.0.1:{}/", stack.http_port());
            let mut request = stack.client.get(url).header("host", "site.example.com");
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            request.send().await.ok().map(|r| r.status().as_u16())
        }
    };
    // No ExtensionService yet: the check cannot be made, the request is refused.
    assert_eq!(status(&[("x-allow", "yes")]).await, Some(403));
    write(
        &stack.manifests(),
        "authz-service.yaml",
        &service_yaml("default", "authz", auth.port),
    );
    write(
        &stack.manifests(),
        "authz.yaml",
        &extension_service("authz", "authz"),
    );
    let allowed = eventually(WAIT, || async {
        (status(&[("x-allow", "yes")]).await == Some(200)).then_some(())
    })
    .await;
    assert!(allowed.is_some(), "never allowed\n{}", stack.logs());
    assert_eq!(status(&[]).await, Some(401));
    let checks = auth.seen();
    assert!(
        checks
            .iter()
            .all(|c| c.path == "/" && c.context.get("from").map(String::as_str) == Some("global")),
        "{checks:?}"
    );
    // The body goes with the check (`withRequestBody`).
    let posted = stack
        .client
        .post(format!("http://127.0.0.1:{}/", stack.http_port()))
        .header("host", "site.example.com")
        .header("x-allow", "yes")
        .body("a body to check")
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(posted.ok(), Some(200));
    assert!(
        auth.seen().iter().any(|c| c.body == "a body to check"),
        "{:?}",
        auth.seen()
    );
    let before = auth.seen().len();
    assert_eq!(stack.body_of("site.example.com", "/open").await, "b");
    assert_eq!(
        auth.seen().len(),
        before,
        "a route with checks off was checked"
    );
    stack.assert_nothing_rejected().await;
}

/// `globalExtAuth.failOpen`: with the server down, requests go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_authorization_fails_open_when_asked() {
    let auth = authorization_server().await;
    auth.stop();
    let config = "globalExtAuth: {extensionService: default/authz, failOpen: true}\n";
    let files = [
        (
            "authz-service.yaml",
            service_yaml("default", "authz", auth.port),
        ),
        ("authz.yaml", extension_service("authz", "authz")),
        ("ready.yaml", READY.to_string()),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    // Ready means a request went through with nobody to check it.
    let stack = start_with(Some(config), &files, ("ready.example.com", "/", "a")).await;
    assert_eq!(stack.body_of("ready.example.com", "/").await, "a");
    assert!(auth.seen().is_empty());
    stack.assert_nothing_rejected().await;
}

/// Contour's `rateLimitService` with HTTPProxy global descriptors: the service sees the
/// configured domain and each vhost's descriptors (the default policy for a vhost
/// without its own), a request past the limit is answered 429 with `X-RateLimit-*`
/// headers, a route with `global.disabled` is never limited; with the service down,
/// requests are refused (not failOpen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limits_through_envoy() {
    let rls = rate_limit_server(2).await;
    let config = r#"rateLimitService:
  extensionService: default/ratelimit
  domain: isobar
  enableXRateLimitHeaders: true
  defaultGlobalRateLimitPolicy:
    descriptors: [{entries: [{genericKey: {key: site, value: default}}]}]
"#;
    let limited = r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: limited, namespace: default}
spec:
  virtualhost:
    fqdn: limited.example.com
    rateLimitPolicy:
      global:
        descriptors: [{entries: [{genericKey: {value: limited}}, {requestHeader: {headerName: x-tenant, descriptorKey: tenant}}]}]
  routes:
    - conditions: [{prefix: /health}]
      rateLimitPolicy: {global: {disabled: true}}
      services: [{name: echo-b, port: 80}]
    - services: [{name: echo-a, port: 80}]
"#;
    let files = [
        (
            "rls-service.yaml",
            service_yaml("default", "ratelimit", rls.port),
        ),
        ("rls.yaml", extension_service("ratelimit", "ratelimit")),
        ("limited.yaml", limited.to_string()),
        ("ready.yaml", READY.to_string()),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let stack = start_with(
        Some(config),
        &files,
        ("limited.example.com", "/health", "b"),
    )
    .await;
    let send = |host: &'static str, path: &'static str, tenant: &'static str| {
        let stack = &stack;
        async move {
            let url = format!("http://127.0.0.1:{}{path}", stack.http_port());
            stack
                .client
                .get(url)
                .header("host", host)
                .header("x-tenant", tenant)
                .send()
                .await
                .ok()
        }
    };
    let mut statuses = Vec::new();
    let mut limit_header = None;
    for _ in 0..3 {
        let response = send("limited.example.com", "/", "blue")
            .await
            .unwrap_or_else(|| panic!("no answer\n{}", stack.logs()));
        limit_header = limit_header.or_else(|| {
            response
                .headers()
                .get("x-ratelimit-limit")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, vec![200, 200, 429]);
    assert!(
        limit_header.as_deref().is_some_and(|v| v.starts_with('2')),
        "{limit_header:?}"
    );
    // Another tenant is another descriptor, with limits of its own.
    let other = send("limited.example.com", "/", "green")
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(other, Some(200));
    for _ in 0..4 {
        let health = send("limited.example.com", "/health", "blue")
            .await
            .map(|r| r.status().as_u16());
        assert_eq!(
            health,
            Some(200),
            "a route out of the vhost's limits was limited"
        );
    }
    // A vhost without a policy of its own: the default descriptors.
    assert_eq!(
        send("ready.example.com", "/", "blue")
            .await
            .map(|r| r.status().as_u16()),
        Some(200)
    );
    let seen = rls.seen();
    assert!(seen.iter().all(|l| l.domain == "isobar"), "{seen:?}");
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert!(
        seen.iter()
            .any(|l| l.descriptors
                == vec![vec![pair("generic_key", "limited"), pair("tenant", "blue")]]),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.descriptors == vec![vec![pair("site", "default")]]),
        "{seen:?}"
    );
    // The service gone: failure_mode_deny (failOpen false) refuses requests.
    rls.stop();
    let refused = eventually(WAIT, || async {
        send("limited.example.com", "/", "red")
            .await
            .map(|r| r.status().as_u16())
            .filter(|s| *s >= 500)
    })
    .await;
    assert!(
        refused.is_some(),
        "requests went through without the service"
    );
    stack.assert_nothing_rejected().await;
}

/// Contour's `tracing`: Envoy sends OpenTelemetry spans of the requests it routes to
/// the collector, under the configured service name, with the custom tags (a literal
/// and a request header's value), the request's own span and its upstream one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_the_collector() {
    let collector = trace_collector().await;
    let config = r#"tracing:
  extensionService: default/otel
  serviceName: isobar-test
  customTags:
    - {tagName: env, literal: test}
    - {tagName: tenant, requestHeaderName: x-tenant}
"#;
    let files = [
        (
            "otel-service.yaml",
            service_yaml("default", "otel", collector.port),
        ),
        ("otel.yaml", extension_service("otel", "otel")),
        ("ready.yaml", READY.to_string()),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let stack = start_with(Some(config), &files, ("ready.example.com", "/", "a")).await;
    let url = format!("http://127.0.0.1:{}/traced", stack.http_port());
    // Envoy exports its spans in batches (every few seconds): keep sending until one
    // of these requests' spans arrives.
    let span = eventually(WAIT, || async {
        let _ = stack
            .client
            .get(&url)
            .header("host", "ready.example.com")
            .header("x-tenant", "blue")
            .send()
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        collector.seen().into_iter().find(|s| {
            s.tags.get("tenant").map(String::as_str) == Some("blue")
                && s.tags.values().any(|v| v.contains("/traced"))
        })
    })
    .await
    .unwrap_or_else(|| panic!("no span arrived: {:?}\n{}", collector.seen(), stack.logs()));
    assert_eq!(span.service, "isobar-test");
    assert_eq!(span.tags.get("env").map(String::as_str), Some("test"));
    // Envoy's span of the upstream request too (Contour's spawn_upstream_span).
    assert!(
        collector.seen().iter().any(|s| s.name.contains("egress")),
        "{:?}",
        collector.seen()
    );
    stack.assert_nothing_rejected().await;
}

/// HTTPProxy `jwtProviders`: Envoy fetches the provider's keys from its JWKS URI and
/// lets through requests with a token they sign, of the right issuer and audience, not
/// expired; others get 401 (403 for another audience). A route with `jwtVerificationPolicy.disabled` needs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_verification_through_envoy() {
    let keys = jwks().await;
    let ca = new_ca("Isobar Test CA");
    let cert = issue(&ca, "jwt.example.com");
    let proxy = format!(
        r#"apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {{name: jwt, namespace: default}}
spec:
  virtualhost:
    fqdn: jwt.example.com
    tls: {{secretName: jwt}}
    jwtProviders:
      - name: test
        default: true
        issuer: https://issuer.example.com
        audiences: [isobar]
        remoteJWKS: {{uri: "http://127.0.0.1:{}/jwks.json", timeout: 2s, cacheDuration: 5m}}
  routes:
    - conditions: [{{prefix: /public}}]
      jwtVerificationPolicy: {{disabled: true}}
      services: [{{name: echo-b, port: 80}}]
    - services: [{{name: echo-a, port: 80}}]
"#,
        keys.server.port
    );
    let files = [
        ("ready.yaml", READY.to_string()),
        ("tls.yaml", tls_secret("default", "jwt", &cert)),
        ("jwt.yaml", proxy),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let stack = start_with(None, &files, ("ready.example.com", "/", "a")).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let claims = |iss: &str, aud: &str, exp: u64| serde_json::json!({"iss": iss, "aud": aud, "sub": "tester", "exp": exp});
    let good = keys.token(&claims("https://issuer.example.com", "isobar", now + 600));
    let client = Client::new(&[&ca]);
    let get = |path: &'static str, token: Option<String>| {
        let client = &client;
        let port = stack.https_port;
        async move {
            let bearer = token.map(|t| format!("Bearer {t}"));
            let headers: Vec<(&str, &str)> = bearer
                .as_deref()
                .map(|b| vec![("authorization", b)])
                .unwrap_or_default();
            client
                .get_with(port, "jwt.example.com", "jwt.example.com", path, &headers)
                .await
                .map(|a| (a.status, a.body))
                .ok()
        }
    };
    let allowed = eventually(WAIT, || async {
        get("/", Some(good.clone()))
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await
    .unwrap_or_else(|| panic!("a valid token never got through\n{}", stack.logs()));
    assert_eq!(allowed.1, "a");
    assert!(
        !keys.server.seen().is_empty(),
        "Envoy never fetched the keys"
    );
    let refused = [
        ("no token", None, 401),
        (
            "expired",
            Some(keys.token(&claims("https://issuer.example.com", "isobar", now - 600))),
            401,
        ),
        (
            "another issuer",
            Some(keys.token(&claims(
                "https://elsewhere.example.com",
                "isobar",
                now + 600,
            ))),
            401,
        ),
        (
            "another audience",
            Some(keys.token(&claims("https://issuer.example.com", "others", now + 600))),
            // Envoy: a token for another audience is forbidden, not unauthenticated.
            403,
        ),
        (
            "another key",
            Some(keys.forged(&claims("https://issuer.example.com", "isobar", now + 600))),
            401,
        ),
    ];
    for (what, token, status) in refused {
        let answer = get("/", token).await.map(|(status, _)| status);
        assert_eq!(answer, Some(status), "{what}");
    }
    assert_eq!(get("/public", None).await, Some((200, "b".to_string())));
    stack.assert_nothing_rejected().await;
}
