//! `test/e2e/httpproxy`'s external authorization tests (Contour v1.33.6), against an
//! authorization server answering as contour-authserver's `testserver` does (paths
//! holding `/allow` are allowed, the check's context reaches the backend as
//! `Auth-Context-<key>` headers). Contour's suite reaches its server over TLS (the
//! ExtensionService's default `h2`); this one speaks clear text (`h2c`).

use super::{E2e, Req, http, https};
use crate::extension_servers::{Check, Running, contour_testserver};

/// The testserver running, Service and ExtensionService `ns/testserver` naming it.
async fn testserver(e2e: &E2e, ns: &str) -> Running<Check> {
    let server = contour_testserver().await;
    e2e.extension_service((ns, "testserver"), 9443, server.port, "h2c");
    server
}

/// testExternalAuth: a vhost's authorization server with per-route context (merged with
/// the vhost's), routes opting out, direct responses behind authorization.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_auth() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-external-auth";
    let _server = testserver(&e2e, ns).await;
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "externalauth.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: external-auth, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {{secretName: echo}}\n    authorization:\n      extensionRef: {{name: testserver, namespace: {ns}}}\n      responseTimeout: 500ms\n      authPolicy: {{context: {{hostname: {fqdn}}}}}\n  routes:\n    - conditions: [{{prefix: /first}}]\n      authPolicy: {{context: {{target: first}}}}\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /second}}]\n      authPolicy: {{disabled: true}}\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /direct-response-auth-enabled}}]\n      directResponsePolicy: {{statusCode: 418}}\n    - conditions: [{{prefix: /direct-response-auth-disabled}}]\n      directResponsePolicy: {{statusCode: 418}}\n      authPolicy: {{disabled: true}}\n    - authPolicy: {{context: {{target: default}}}}\n      services: [{{name: echo, port: 80}}]\n"),
        (ns, "external-auth"),
        "valid",
    )
    .await;
    let at = |path: &str| https(fqdn).path(path);
    for (path, status) in [
        ("/first", 401),
        ("/second", 200),
        ("/matches-default-route", 401),
        ("/direct-response-auth-enabled", 401),
        ("/direct-response-auth-enabled/allow", 418),
        ("/direct-response-auth-disabled", 418),
    ] {
        e2e.until_status(&at(path), status).await;
    }
    for (path, target) in [
        ("/first/allow", "first"),
        ("/matches-default-route/allow", "default"),
    ] {
        let answer = e2e.until_status(&at(path), 200).await;
        assert_eq!(
            super::seen_header(&answer, "Auth-Context-Target").as_deref(),
            Some(target),
            "{path}"
        );
        assert_eq!(
            super::seen_header(&answer, "Auth-Context-Hostname").as_deref(),
            Some(fqdn),
            "{path}"
        );
    }
    e2e.assert_nothing_rejected().await;
}

/// Isobar with `globalExtAuth` naming `ns/testserver` (Contour's suite's settings).
async fn global(ns: &str) -> (E2e, Running<Check>) {
    let section = serde_json::json!({
        "extensionService": format!("{ns}/testserver"),
        "failOpen": false,
        "authPolicy": {"context": {"location": "global_config", "header_2": "message_2"}},
        "responseTimeout": "10s",
    });
    let auth = serde_json::from_value(section).unwrap_or_else(|e| panic!("{e}"));
    let e2e = E2e::start_with(|c| c.global_ext_auth = Some(auth)).await;
    let server = testserver(&e2e, ns).await;
    e2e.deploy_echo(ns, "echo").await;
    (e2e, server)
}

/// The routes of the global authorization tests: `/first`, `/second` (opting out unless
/// `vhost_disabled` says the vhost did) and the default route.
fn global_proxy(ns: &str, fqdn: &str, tls: bool, vhost_disabled: bool) -> String {
    let tls = if tls {
        "    tls: {secretName: echo}\n"
    } else {
        ""
    };
    let (vhost, second) = if vhost_disabled {
        ("    authorization: {authPolicy: {disabled: true}}\n", "")
    } else {
        ("", "      authPolicy: {disabled: true}\n")
    };
    let default = if vhost_disabled {
        ""
    } else {
        "      authPolicy: {context: {target: default}}\n"
    };
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: external-auth, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n{tls}{vhost}  routes:\n    - conditions: [{{prefix: /first}}]\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /second}}]\n{second}      services: [{{name: echo, port: 80}}]\n    - services: [{{name: echo, port: 80}}]\n{default}"
    )
}

/// The global authorization cases on one vhost.
async fn global_cases(ns: &str, fqdn: &str, tls: bool, vhost_disabled: bool) {
    let (e2e, _server) = global(ns).await;
    if tls {
        e2e.self_signed_cert(ns, "echo", fqdn);
    }
    e2e.proxy(
        &global_proxy(ns, fqdn, tls, vhost_disabled),
        (ns, "external-auth"),
        "valid",
    )
    .await;
    let at = |path: &str| -> Req {
        if tls {
            https(fqdn).path(path)
        } else {
            http(fqdn).path(path)
        }
    };
    let guarded = if vhost_disabled { 200 } else { 401 };
    for (path, status) in [
        ("/first", guarded),
        ("/second", 200),
        ("/matches-default-route", guarded),
    ] {
        e2e.until_status(&at(path), status).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testGlobalExternalAuthVirtualHostNonTLS: the global authorization server guards plain
/// HTTP vhosts; a route opts out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_external_auth_virtual_host_non_tls() {
    global_cases(
        "httpproxy-global-ext-auth-non-tls",
        "http.globalexternalauth.projectcontour.io",
        false,
        false,
    )
    .await;
}

/// testGlobalExternalAuthTLS: the same on a TLS vhost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_external_auth_tls() {
    global_cases(
        "httpproxy-global-ext-auth-tls",
        "https.globalexternalauth.projectcontour.io",
        true,
        false,
    )
    .await;
}

/// testGlobalExternalAuthNonTLSAuthDisabled: a vhost opting out of global authorization.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_external_auth_non_tls_auth_disabled() {
    global_cases(
        "httpproxy-global-ext-auth-non-tls-disabled",
        "disabled.http.globalexternalauth.projectcontour.io",
        false,
        true,
    )
    .await;
}

/// testGlobalExternalAuthTLSAuthDisabled: a TLS vhost opting out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_external_auth_tls_auth_disabled() {
    global_cases(
        "httpproxy-global-ext-auth-tls-disabled",
        "disabled.https.globalexternalauth.projectcontour.io",
        true,
        true,
    )
    .await;
}

/// What the HTTP authorization mock answers (Contour's main suite swaps its handler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Deny,
    Allow,
    /// 200, echoing request headers back as `x-got-*` and adding `x-auth-user: jane` and
    /// `x-not-allowed: dropped`.
    Headers,
}

/// Contour main's local HTTP authorization mock: a plain HTTP/1.1 server on loopback
/// answering as its current verdict says, recording the paths it is asked.
struct HttpAuthMock {
    port: u16,
    verdict: std::sync::Arc<std::sync::Mutex<Verdict>>,
    paths: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl HttpAuthMock {
    async fn start() -> HttpAuthMock {
        use hyper_util::rt::TokioIo;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let verdict = std::sync::Arc::new(std::sync::Mutex::new(Verdict::Deny));
        let paths = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (v, p) = (verdict.clone(), paths.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (v, p) = (v.clone(), p.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let verdict = *v.lock().unwrap_or_else(|e| e.into_inner());
                            p.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(request.uri().path().to_string());
                            let header = |name: &str| {
                                request
                                    .headers()
                                    .get(name)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or_default()
                                    .to_string()
                            };
                            let mut answer = hyper::Response::builder();
                            answer = match verdict {
                                Verdict::Deny => answer.status(401),
                                Verdict::Allow => answer.status(200),
                                Verdict::Headers => answer
                                    .status(200)
                                    .header("x-got-exact", header("x-token"))
                                    .header("x-got-prefix", header("x-app-id"))
                                    .header("x-got-blocked", header("x-secret"))
                                    .header("x-auth-user", "jane")
                                    .header("x-not-allowed", "dropped"),
                            };
                            let answer = answer
                                .body(http_body_util::Full::new(hyper::body::Bytes::new()))
                                .unwrap_or_default();
                            async move { Ok::<_, std::convert::Infallible>(answer) }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        HttpAuthMock {
            port,
            verdict,
            paths,
        }
    }

    fn answer(&self, verdict: Verdict) {
        *self.verdict.lock().unwrap_or_else(|e| e.into_inner()) = verdict;
    }

    fn last_path(&self) -> Option<String> {
        self.paths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
    }
}

/// testExternalAuthzHTTP (Contour's main): an HTTP authorization server — its denial
/// status relayed, the path prefix before each path, only the allowed request headers
/// sent to it, only the allowed headers of its answer sent upstream, a route opting out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_authz_http() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-ext-auth-http";
    let mock = HttpAuthMock::start().await;
    e2e.extension_service((ns, "http-auth-mock"), 80, mock.port, "http/1.1");
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "externalauthhttp.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: external-auth-http, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {{secretName: echo}}\n    authorization:\n      responseTimeout: 5s\n      serviceType: http\n      extensionRef: {{name: http-auth-mock, namespace: {ns}}}\n      httpSettings:\n        pathPrefix: /auth\n        allowedAuthorizationHeaders: [{{exact: x-token}}, {{prefix: x-app-}}]\n        allowedUpstreamHeaders: [{{exact: x-auth-user}}, {{prefix: x-got-}}]\n  routes:\n    - conditions: [{{prefix: /}}]\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /open}}]\n      authPolicy: {{disabled: true}}\n      services: [{{name: echo, port: 80}}]\n"),
        (ns, "external-auth-http"),
        "valid",
    )
    .await;
    let test = https(fqdn).path("/test");
    mock.answer(Verdict::Deny);
    e2e.until_status(&test, 401).await;
    mock.answer(Verdict::Allow);
    e2e.until_status(&test, 200).await;
    let asked = mock.last_path().unwrap_or_default();
    assert!(asked.starts_with("/auth/"), "asked {asked:?}");
    mock.answer(Verdict::Headers);
    let with_headers = test
        .clone()
        .header("x-token", "abc")
        .header("x-app-id", "123")
        .header("x-secret", "should-be-blocked");
    let answer = e2e
        .until(&with_headers, |a| {
            a.status == 200 && super::seen_header(a, "x-auth-user").is_some()
        })
        .await;
    let seen = |name: &str| super::seen_header(&answer, name).unwrap_or_default();
    assert_eq!(seen("x-got-exact"), "abc");
    assert_eq!(seen("x-got-prefix"), "123");
    assert_eq!(seen("x-got-blocked"), "");
    assert_eq!(seen("x-auth-user"), "jane");
    assert_eq!(seen("x-not-allowed"), "");
    mock.answer(Verdict::Deny);
    e2e.until_status(&https(fqdn).path("/open"), 200).await;
    e2e.assert_nothing_rejected().await;
}

/// Contour main's global HTTP authorization (`globalExtAuth.serviceType: http`, its
/// `httpSettings` keys in `contour.yaml`'s lower case): vhosts without their own are
/// guarded, a route opts out; a vhost opting out with a route opting back in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_external_authz_http() {
    let ns = "global-ext-auth-http";
    let section = serde_json::json!({
        "extensionService": format!("{ns}/http-auth-mock"),
        "serviceType": "http",
        "responseTimeout": "10s",
        "httpSettings": {"pathprefix": "/auth"},
    });
    let auth = serde_json::from_value(section).unwrap_or_else(|e| panic!("{e}"));
    let e2e = E2e::start_with(|c| c.global_ext_auth = Some(auth)).await;
    let mock = HttpAuthMock::start().await;
    e2e.extension_service((ns, "http-auth-mock"), 80, mock.port, "http/1.1");
    e2e.deploy_echo(ns, "echo").await;
    // Global HTTP authorization applies to virtual hosts.
    let fqdn = "globalexternalauthhttp.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: global-ext-auth-http, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo}}}}\n  routes:\n    - conditions: [{{prefix: /}}]\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /open}}]\n      authPolicy: {{disabled: true}}\n      services: [{{name: echo, port: 80}}]\n"),
        (ns, "global-ext-auth-http"),
        "valid",
    )
    .await;
    mock.answer(Verdict::Deny);
    e2e.until_status(&https(fqdn).path("/test"), 401).await;
    mock.answer(Verdict::Allow);
    e2e.until_status(&https(fqdn).path("/test"), 200).await;
    mock.answer(Verdict::Deny);
    e2e.until_status(&https(fqdn).path("/open"), 200).await;
    // A vhost opting out, a route opting back in.
    let fqdn = "globalextauthvhostoptout.projectcontour.io";
    e2e.self_signed_cert(ns, "echo-optout", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: global-ext-auth-http-vhost-optout, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {{secretName: echo-optout}}\n    authorization: {{authPolicy: {{disabled: true}}}}\n  routes:\n    - conditions: [{{prefix: /protected}}]\n      authPolicy: {{}}\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /public}}]\n      services: [{{name: echo, port: 80}}]\n"),
        (ns, "global-ext-auth-http-vhost-optout"),
        "valid",
    )
    .await;
    mock.answer(Verdict::Deny);
    e2e.until_status(&https(fqdn).path("/protected"), 401).await;
    e2e.until_status(&https(fqdn).path("/public"), 200).await;
    mock.answer(Verdict::Allow);
    e2e.until_status(&https(fqdn).path("/protected"), 200).await;
    e2e.assert_nothing_rejected().await;
}
