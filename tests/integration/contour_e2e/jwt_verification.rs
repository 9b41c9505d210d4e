//! `test/e2e/httpproxy/jwt_verification_test.go` of Contour's main: JWT verification with
//! keys from a JWKS endpoint (`remoteJWKS`) or from a Secret (`localJWKS`), and each kind
//! of key rotation. Contour signs RS256 tokens; these sign ES256 (the verification Envoy
//! does is the same). Contour's JWKS endpoint is a pod reached by cluster DNS; here it is
//! a server of the tests' own on loopback, named by its address.

use serde_json::json;

use super::{E2e, https, seen_header, service};
use crate::extension_servers::{JwtKey, jwks};

/// Seconds since the epoch, `offset` seconds from now.
fn at(offset: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    i64::try_from(now).unwrap_or_default() + offset
}

fn claims(issuer: &str, audience: &str, expiry: i64) -> serde_json::Value {
    json!({"iss": issuer, "aud": [audience], "exp": expiry})
}

fn bearer(fqdn: &str, path: &str, token: &str) -> super::Req {
    https(fqdn)
        .path(path)
        .header("Authorization", &format!("Bearer {token}"))
}

/// An `Opaque` Secret `ns/jwks` holding `key`'s JWKS under `jwks.json` (Contour's
/// `localJWKSProvider`).
fn jwks_secret(ns: &str, key: &JwtKey) -> String {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(key.jwks());
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: jwks, namespace: {ns}}}\ntype: Opaque\ndata: {{jwks.json: {data}}}\n"
    )
}

/// Contour's `testJWTVerification`: a proxy whose default provider (issuer
/// `correct-issuer`, audience `correct-audience`, token forwarded) has keys from
/// `keys` (the provider's JWKS field), signed by `key`; `/secured` requires a token,
/// `/open` disables verification.
async fn verification(e2e: &E2e, ns: &str, keys: &str, key: &JwtKey) {
    let fqdn = "jwt.projectcontour.io";
    e2e.deploy_echo(ns, "echo").await;
    e2e.self_signed_cert(ns, "echo-tls", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: jwt-verification, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {{secretName: echo-tls}}\n    jwtProviders:\n      - name: test-provider\n        default: true\n        issuer: correct-issuer\n        audiences: [correct-audience]\n        forwardJWT: true\n        {keys}\n  routes:\n    - conditions: [{{prefix: /secured}}]\n      services: [{{name: echo, port: 80}}]\n    - conditions: [{{prefix: /open}}]\n      jwtVerificationPolicy: {{disabled: true}}\n      services: [{{name: echo, port: 80}}]\n"),
        (ns, "jwt-verification"),
        "valid",
    )
    .await;
    // A valid token is accepted and forwarded to the backend.
    let valid = key.token(&claims("correct-issuer", "correct-audience", at(3600)));
    let answer = e2e
        .until_status(&bearer(fqdn, "/secured", &valid), 200)
        .await;
    assert_eq!(service(&answer), "echo");
    let forwarded = seen_header(&answer, "Authorization").unwrap_or_default();
    assert!(
        forwarded.contains("Bearer "),
        "not forwarded: {forwarded:?}"
    );
    // A missing token is rejected.
    e2e.until_status(&https(fqdn).path("/secured"), 401).await;
    // A token signed by another key is rejected.
    let other = JwtKey::new().token(&claims("correct-issuer", "correct-audience", at(3600)));
    e2e.until_status(&bearer(fqdn, "/secured", &other), 401)
        .await;
    // An expired token is rejected.
    let expired = key.token(&claims("correct-issuer", "correct-audience", at(-3600)));
    e2e.until_status(&bearer(fqdn, "/secured", &expired), 401)
        .await;
    // Another issuer is rejected.
    let issuer = key.token(&claims("wrong-issuer", "correct-audience", at(3600)));
    e2e.until_status(&bearer(fqdn, "/secured", &issuer), 401)
        .await;
    // Another audience is forbidden.
    let audience = key.token(&claims("correct-issuer", "wrong-audience", at(3600)));
    e2e.until_status(&bearer(fqdn, "/secured", &audience), 403)
        .await;
    // A route with verification disabled needs no token.
    let answer = e2e.until_status(&https(fqdn).path("/open"), 200).await;
    assert_eq!(service(&answer), "echo");
    e2e.assert_nothing_rejected().await;
}

/// `testJWTVerification(localJWKSProvider)` (`httpproxy-jwt-local-jwks`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_verification_local_jwks() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-jwt-local-jwks";
    let key = JwtKey::new();
    e2e.apply(&jwks_secret(ns, &key));
    let keys = "localJWKS: {secretName: jwks, key: jwks.json}";
    verification(&e2e, ns, keys, &key).await;
}

/// `testJWTVerification(remoteJWKSProvider)` (`httpproxy-jwt-remote-jwks`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_verification_remote_jwks() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-jwt-remote-jwks";
    let server = jwks().await;
    let port = server.server.port;
    let keys = format!(
        "remoteJWKS: {{uri: 'http://127.0.0.1:{port}/jwks.json', timeout: 5s, dnsLookupFamily: auto}}"
    );
    verification(&e2e, ns, &keys, server.key()).await;
    assert!(
        !server.server.seen().is_empty(),
        "Envoy never fetched the JWKS"
    );
}

/// A proxy at `fqdn` whose default provider (issuer `test-issuer`) has keys from `keys`,
/// for every path; a token of `key` is accepted.
async fn rotation_proxy(e2e: &E2e, ns: &str, fqdn: &str, keys: &str, key: &JwtKey) -> String {
    e2e.deploy_echo(ns, "echo").await;
    e2e.self_signed_cert(ns, "echo-tls", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: rotation, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {{secretName: echo-tls}}\n    jwtProviders:\n      - name: test-provider\n        default: true\n        issuer: test-issuer\n        {keys}\n  routes:\n    - services: [{{name: echo, port: 80}}]\n"),
        (ns, "rotation"),
        "valid",
    )
    .await;
    let token = key.token(&json!({"iss": "test-issuer", "exp": at(3600)}));
    let answer = e2e.until_status(&bearer(fqdn, "/", &token), 200).await;
    assert_eq!(service(&answer), "echo");
    token
}

/// `testJWTVerificationRemoteJWKSRotation` (`httpproxy-jwt-remote-jwks-rotation`): with a
/// one-second cache, a key rotated on the JWKS endpoint is taken once the cache expires,
/// and tokens of the old key are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_verification_remote_jwks_rotation() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-jwt-remote-jwks-rotation";
    let fqdn = "jwt-rotation.projectcontour.io";
    let mut server = jwks().await;
    let port = server.server.port;
    let keys = format!(
        "remoteJWKS: {{uri: 'http://127.0.0.1:{port}/jwks.json', timeout: 5s, cacheDuration: 1s, dnsLookupFamily: auto}}"
    );
    let initial = rotation_proxy(&e2e, ns, fqdn, &keys, server.key()).await;
    server.rotate(JwtKey::new());
    let rotated = server
        .key()
        .token(&json!({"iss": "test-issuer", "exp": at(3600)}));
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let answer = e2e.until_status(&bearer(fqdn, "/", &rotated), 200).await;
    assert_eq!(service(&answer), "echo");
    e2e.until_status(&bearer(fqdn, "/", &initial), 401).await;
    e2e.assert_nothing_rejected().await;
}

/// `testJWTVerificationLocalJWKSRotation` (`httpproxy-jwt-local-jwks-rotation`): a key
/// rotated in the Secret reaches Envoy with the Secret's update, and tokens of the old
/// key are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_verification_local_jwks_rotation() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-jwt-local-jwks-rotation";
    let fqdn = "jwt-rotation-local.projectcontour.io";
    let key = JwtKey::new();
    e2e.apply(&jwks_secret(ns, &key));
    let keys = "localJWKS: {secretName: jwks, key: jwks.json}";
    let initial = rotation_proxy(&e2e, ns, fqdn, keys, &key).await;
    let rotated_key = JwtKey::new();
    e2e.apply(&jwks_secret(ns, &rotated_key));
    let rotated = rotated_key.token(&json!({"iss": "test-issuer", "exp": at(3600)}));
    let answer = e2e.until_status(&bearer(fqdn, "/", &rotated), 200).await;
    assert_eq!(service(&answer), "echo");
    e2e.until_status(&bearer(fqdn, "/", &initial), 401).await;
    e2e.assert_nothing_rejected().await;
}

/// Contour main's checks of a provider's keys (its status tests, not its e2e suite): a
/// `localJWKS` Secret that is missing, or whose key is not a JWKS, makes the proxy
/// invalid with `LocalJWKSInvalid` and Contour's message, and nothing of it is served;
/// a provider with both `remoteJWKS` and `localJWKS` is `JWKSSourceConflict`. Once the
/// Secret holds a JWKS, the proxy is valid and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_jwks_problems_are_named() {
    let e2e = E2e::start().await;
    let ns = "jwt-local";
    let fqdn = "jwt-local.projectcontour.io";
    e2e.deploy_echo(ns, "echo").await;
    e2e.self_signed_cert(ns, "echo", fqdn);
    let proxy = |keys: &str| {
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: jwt, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    tls: {{secretName: echo}}\n    jwtProviders: [{{name: local, default: true, {keys}}}]\n  routes:\n    - services: [{{name: echo, port: 80}}]\n"
        )
    };
    let local = "localJWKS: {secretName: jwks, key: jwks.json}";
    let status = e2e
        .proxy_invalid(&proxy(local), (ns, "jwt"), "LocalJWKSInvalid")
        .await;
    assert!(
        status["status"].to_string().contains(
            "Spec.VirtualHost.JWTProviders.LocalJWKS for provider \\\"local\\\" is invalid: Secret not found"
        ),
        "{status}"
    );
    e2e.not_served(&https(fqdn)).await;
    e2e.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: jwks, namespace: {ns}}}\ntype: Opaque\nstringData: {{jwks.json: '{{not json'}}\n"
    ));
    e2e.proxy_invalid(&proxy(local), (ns, "jwt"), "is invalid: not valid JSON")
        .await;
    e2e.proxy_invalid(
        &proxy(&format!(
            "{local}, remoteJWKS: {{uri: 'http://127.0.0.1:1/jwks.json'}}"
        )),
        (ns, "jwt"),
        "JWKSSourceConflict",
    )
    .await;
    let key = JwtKey::new();
    e2e.apply(&jwks_secret(ns, &key));
    e2e.proxy(&proxy(local), (ns, "jwt"), "valid").await;
    let token = key.token(&json!({"exp": at(3600)}));
    let answer = e2e.until_status(&bearer(fqdn, "/", &token), 200).await;
    assert_eq!(service(&answer), "echo");
    e2e.until_status(&https(fqdn), 401).await;
    e2e.assert_nothing_rejected().await;
}
