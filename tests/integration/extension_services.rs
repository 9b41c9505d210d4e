//! Extension services through a real Envoy, against real protocol servers the tests
//! start (`extension_servers`): ExtensionServices as extension clusters, external
//! authorization (an HTTPProxy's `authorization`, Contour's `globalExtAuth`).

use std::time::Duration;

use crate::e2e::start_with;
use crate::extension_servers::authorization_server;
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
