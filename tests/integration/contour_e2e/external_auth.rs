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
    e2e.extension_service(ns, "testserver", 9443, server.port);
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
