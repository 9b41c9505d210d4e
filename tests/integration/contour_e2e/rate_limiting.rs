//! `test/e2e/httpproxy`'s global rate limiting tests (Contour v1.33.6): a rate limit
//! service of the tests' own (each descriptor allowed once), reached through an
//! ExtensionService, as Contour's suite reaches envoyproxy/ratelimit.

use super::{E2e, Req, http, https};
use crate::extension_servers::{Limited, Running, rate_limit_server};

/// Isobar with `rateLimitService` naming `ns/ratelimit` (domain `domain`, the default
/// policy `default` when set), the service running and its ExtensionService applied.
async fn rate_limited(
    ns: &str,
    domain: &str,
    default: Option<serde_json::Value>,
) -> (E2e, Running<Limited>) {
    let server = rate_limit_server(1).await;
    let mut section = serde_json::json!({
        "extensionService": format!("{ns}/ratelimit"),
        "domain": domain,
        "failOpen": false,
        "enableXRateLimitHeaders": false,
    });
    if let Some(policy) = default {
        section["defaultGlobalRateLimitPolicy"] = policy;
    }
    let service = serde_json::from_value(section).unwrap_or_else(|e| panic!("{e}"));
    let e2e = E2e::start_with(|c| c.rate_limit_service = Some(service)).await;
    e2e.extension_service((ns, "ratelimit"), 8081, server.port, "h2c");
    e2e.deploy_echo(ns, "echo").await;
    (e2e, server)
}

/// An HTTPProxy `ns/name` for `fqdn` (over TLS with Secret `echo` when `tls`), with
/// `vhost` added to its virtualhost and `routes`.
fn proxy(ns: &str, name: &str, fqdn: &str, tls: bool, vhost: &str, routes: &str) -> String {
    let tls = if tls {
        "    tls: {secretName: echo}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n{tls}{vhost}  routes:\n{routes}"
    )
}

const ROUTE: &str = "    - services: [{name: echo, port: 80}]\n";
const UNLIMITED: &str =
    "    - conditions: [{prefix: /unlimited}]\n      services: [{name: echo, port: 80}]\n";

/// The default global policy of the default-policy tests: two request header
/// descriptors.
fn default_policy() -> serde_json::Value {
    serde_json::json!({"descriptors": [
        {"entries": [{"requestHeader": {"headerName": "X-Default-Header", "descriptorKey": "defaultHeader"}}]},
        {"entries": [{"requestHeader": {"headerName": "X-Another-Header", "descriptorKey": "anotherHeader"}}]},
    ]})
}

/// Limited (429) soon; answered twice in a row.
async fn limited(e2e: &E2e, req: &Req) {
    e2e.until_status(req, 429).await;
}

async fn unlimited(e2e: &E2e, req: &Req) {
    e2e.until_status(req, 200).await;
    e2e.until_status(req, 200).await;
    let again = e2e.send(req).await.map(|a| a.status);
    assert_eq!(again, Ok(200), "{req:?}");
}

/// The three cases of the default-policy tests on one vhost: the default applies; the
/// proxy opts out; the proxy's own policy replaces it.
async fn default_cases(
    tls: bool,
    ns: &str,
    (first, second): (&str, &str),
    (descriptors, headers): (&str, &[(&str, &str)]),
) {
    let (e2e, _server) = rate_limited(
        ns,
        "contour-default-global-rate-limit",
        Some(default_policy()),
    )
    .await;
    let fqdn = "defaultglobalratelimitvhostnontls.projectcontour.io";
    if tls {
        e2e.self_signed_cert(ns, "echo", fqdn);
    }
    let name = "defaultglobalratelimitvhostnontls";
    let with_vhost = |vhost: &str| proxy(ns, name, fqdn, tls, vhost, ROUTE);
    let base = if tls { https(fqdn) } else { http(fqdn) };
    e2e.proxy(&with_vhost(""), (ns, name), "valid").await;
    limited(&e2e, &base.clone().header("X-Default-Header", first)).await;
    let opted_out = "    rateLimitPolicy: {global: {disabled: true}}\n";
    e2e.proxy(&with_vhost(opted_out), (ns, name), "valid").await;
    unlimited(&e2e, &base.clone().header("X-Default-Header", second)).await;
    let own = format!("    rateLimitPolicy: {{global: {{descriptors: {descriptors}}}}}\n");
    e2e.proxy(&with_vhost(&own), (ns, name), "valid").await;
    let req = headers
        .iter()
        .fold(base, |req, (name, value)| req.header(name, value));
    limited(&e2e, &req).await;
    e2e.assert_nothing_rejected().await;
}

/// testDefaultGlobalRateLimitingVirtualHostNonTLS: the default global policy applies to
/// a vhost without one; `disabled` opts out; a vhost's own policy replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_global_rate_limiting_virtual_host_non_tls() {
    default_cases(
        false,
        "httpproxy-default-global-rate-limiting-vhost-non-tls",
        ("test_value_1", "test_value_2"),
        ("[{entries: [{genericKey: {value: foo}}]}]", &[]),
    )
    .await;
}

/// testDefaultGlobalRateLimitingVirtualHostTLS: the same over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_global_rate_limiting_virtual_host_tls() {
    default_cases(
        true,
        "httpproxy-default-global-rate-limiting-vhost-tls",
        ("test_value_3", "test_value_4"),
        (
            "[{entries: [{requestHeader: {headerName: X-HTTPProxy-Descriptor, descriptorKey: customHeader}}]}]",
            &[("X-HTTPProxy-Descriptor", "test_value")],
        ),
    )
    .await;
}

/// testDefaultGlobalRateLimitingWithVhRateLimitsIgnore: a route whose global policy is
/// disabled ignores the vhost's (the default) limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_global_rate_limiting_with_vh_rate_limits_ignore() {
    let ns = "httpproxy-default-global-rate-limiting-vhost-rate-limits-ignore";
    let (e2e, _server) = rate_limited(
        ns,
        "contour-default-global-rate-limit",
        Some(default_policy()),
    )
    .await;
    let fqdn = "defaultglobalratelimitvhratelimits.projectcontour.io";
    let name = "defaultglobalratelimitvhratelimits";
    let route = "    - conditions: [{prefix: /echo}]\n      services: [{name: echo, port: 80}]\n";
    e2e.proxy(
        &proxy(ns, name, fqdn, false, "", route),
        (ns, name),
        "valid",
    )
    .await;
    let req = http(fqdn)
        .path("/echo")
        .header("X-Another-Header", "randomvalue");
    limited(&e2e, &req).await;
    let route = format!("{route}      rateLimitPolicy: {{global: {{disabled: true}}}}\n");
    e2e.proxy(
        &proxy(ns, name, fqdn, false, "", &route),
        (ns, name),
        "valid",
    )
    .await;
    e2e.until_status(&req, 200).await;
    e2e.assert_nothing_rejected().await;
}

/// A vhost answered, then limited once its global policy is set.
async fn vhost_limit(tls: bool, ns: &str, name: &str, fqdn: &str, value: &str) {
    let (e2e, _server) = rate_limited(ns, "contour", None).await;
    if tls {
        e2e.self_signed_cert(ns, "echo", fqdn);
    }
    let req = if tls { https(fqdn) } else { http(fqdn) };
    e2e.proxy(&proxy(ns, name, fqdn, tls, "", ROUTE), (ns, name), "valid")
        .await;
    e2e.until_status(&req, 200).await;
    let vhost = format!(
        "    rateLimitPolicy: {{global: {{descriptors: [{{entries: [{{genericKey: {{value: {value}}}}}]}}]}}}}\n"
    );
    e2e.proxy(
        &proxy(ns, name, fqdn, tls, &vhost, ROUTE),
        (ns, name),
        "valid",
    )
    .await;
    limited(&e2e, &req).await;
    e2e.assert_nothing_rejected().await;
}

/// A route limited once its global policy is set; another route not.
async fn route_limit(tls: bool, ns: &str, name: &str, fqdn: &str, entry: &str) {
    let (e2e, _server) = rate_limited(ns, "contour", None).await;
    if tls {
        e2e.self_signed_cert(ns, "echo", fqdn);
    }
    let req = if tls { https(fqdn) } else { http(fqdn) };
    e2e.proxy(
        &proxy(ns, name, fqdn, tls, "", &format!("{ROUTE}{UNLIMITED}")),
        (ns, name),
        "valid",
    )
    .await;
    e2e.until_status(&req, 200).await;
    let route = format!(
        "{ROUTE}      rateLimitPolicy: {{global: {{descriptors: [{{entries: [{{genericKey: {entry}}}]}}]}}}}\n{UNLIMITED}"
    );
    e2e.proxy(&proxy(ns, name, fqdn, tls, "", &route), (ns, name), "valid")
        .await;
    limited(&e2e, &req).await;
    unlimited(&e2e, &req.clone().path("/unlimited")).await;
    e2e.assert_nothing_rejected().await;
}

/// testGlobalRateLimitingVirtualHostNonTLS: a vhost's global limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limiting_virtual_host_non_tls() {
    vhost_limit(
        false,
        "httpproxy-global-rate-limiting-vhost-non-tls",
        "globalratelimitvhostnontls",
        "globalratelimitvhostnontls.projectcontour.io",
        "vhostlimit",
    )
    .await;
}

/// testGlobalRateLimitingRouteNonTLS: a route's global limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limiting_route_non_tls() {
    route_limit(
        false,
        "httpproxy-global-rate-limiting-route-non-tls",
        "globalratelimitroutenontls",
        "globalratelimitroutenontls.projectcontour.io",
        "{key: route_limit_key, value: routelimit}",
    )
    .await;
}

/// testGlobalRateLimitingVirtualHostTLS: a TLS vhost's global limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limiting_virtual_host_tls() {
    vhost_limit(
        true,
        "httpproxy-global-rate-limiting-vhost-tls",
        "globalratelimitvhosttls",
        "globalratelimitvhosttls.projectcontour.io",
        "tlsvhostlimit",
    )
    .await;
}

/// testGlobalRateLimitingRouteTLS: a TLS vhost's route's global limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limiting_route_tls() {
    route_limit(
        true,
        "httpproxy-global-rate-limiting-route-tls",
        "globalratelimitroutetls",
        "globalratelimitroutetls.projectcontour.io",
        "{value: tlsroutelimit}",
    )
    .await;
}

/// testDisableVirtualHostGlobalRateLimitingOnRoute: a route's `disabled: false` keeps
/// the vhost's limit; `disabled: true` lifts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_virtual_host_global_rate_limiting_on_route() {
    for disabled in [false, true] {
        let ns = "httpproxy-global-rate-limiting-vhost-disable-per-route";
        let (e2e, _server) = rate_limited(ns, "contour", None).await;
        let fqdn = "globalratelimitvhostnontls.projectcontour.io";
        let name = "globalratelimitvhostnontls";
        let route =
            "    - conditions: [{prefix: /echo}]\n      services: [{name: echo, port: 80}]\n";
        let req = http(fqdn).path("/echo");
        e2e.proxy(
            &proxy(ns, name, fqdn, false, "", route),
            (ns, name),
            "valid",
        )
        .await;
        e2e.until_status(&req, 200).await;
        let vhost = "    rateLimitPolicy: {global: {descriptors: [{entries: [{genericKey: {value: randomvalue}}]}]}}\n";
        e2e.proxy(
            &proxy(ns, name, fqdn, false, vhost, route),
            (ns, name),
            "valid",
        )
        .await;
        limited(&e2e, &req).await;
        let route = format!("{route}      rateLimitPolicy: {{global: {{disabled: {disabled}}}}}\n");
        e2e.proxy(
            &proxy(ns, name, fqdn, false, vhost, &route),
            (ns, name),
            "valid",
        )
        .await;
        e2e.until_status(&req, if disabled { 200 } else { 429 })
            .await;
        e2e.assert_nothing_rejected().await;
    }
}
