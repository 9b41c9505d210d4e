//! `test/e2e/httpproxy` (Contour v1.33.6).

use std::collections::BTreeMap;

use super::{E2e, Req, http};

/// The attributes of the `Set-Cookie` of `name` in `answer` (its value under `name`).
fn cookie(answer: &crate::conformance::client::Answer, name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (header, value) in &answer.headers {
        if !header.eq_ignore_ascii_case("set-cookie") {
            continue;
        }
        let mut parts = value.split(';').map(str::trim);
        let Some(first) = parts.next() else { continue };
        let (n, v) = first.split_once('=').unwrap_or((first, ""));
        if n != name {
            continue;
        }
        out.insert(n.to_string(), v.to_string());
        for part in parts.filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

/// Contour's `requestSetCookieHeader`: the echo is asked (`X-ECHO-HEADER`) to answer with
/// `set_cookie`; the answer, once 200.
async fn set_cookie(e2e: &E2e, req: Req, set_cookie: &str) -> crate::conformance::client::Answer {
    let req = req.header("X-ECHO-HEADER", &format!("Set-Cookie:{set_cookie}"));
    e2e.until_status(&req, 200).await
}

/// Contour's `checkReturnedSetCookieHeader`: the cookie's value (unless `""`), `Path`,
/// `Domain`, `SameSite` (each absent when `""`), `Secure`, and further attributes.
fn check_cookie(
    answer: &crate::conformance::client::Answer,
    name: &str,
    (value, path, domain, same_site): (&str, &str, &str, &str),
    secure: bool,
    more: &[(&str, &str)],
) {
    let got = cookie(answer, name);
    let context = format!("{name}: {got:?} ({:?})", answer.headers);
    if !value.is_empty() {
        assert_eq!(got.get(name).map(String::as_str), Some(value), "{context}");
    }
    for (attribute, want) in [("Path", path), ("Domain", domain), ("SameSite", same_site)] {
        if want.is_empty() {
            assert!(!got.contains_key(attribute), "{context}");
        } else {
            assert_eq!(
                got.get(attribute).map(String::as_str),
                Some(want),
                "{context}"
            );
        }
    }
    assert_eq!(got.contains_key("Secure"), secure, "{context}");
    for (attribute, want) in more {
        assert_eq!(
            got.get(*attribute).map(String::as_str),
            Some(*want),
            "{context}"
        );
    }
}

/// testAppCookieRewrite: a route's and a Service's cookie rewrite policies rewrite the
/// `Set-Cookie` headers of the app's answers, per route; a cookie both name gets the
/// Service's attributes over the route's, attribute by attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_cookie_rewrite() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-app-cookie-rewrite";
    e2e.deploy_echo(ns, "echo").await;
    e2e.deploy_echo(ns, "echo-other").await;
    let fqdn = "app-cookie-rewrite.projectcontour.io";
    let route = |prefix: &str, rewrites: &str, services: &str| {
        format!(
            "    - conditions: [{{prefix: {prefix}}}]\n      cookieRewritePolicies: {rewrites}\n      services: {services}\n"
        )
    };
    let echo = "[{name: echo, port: 80}]";
    let routes = [
        route("/no-rewrite", "[]", echo),
        route(
            "/no-attributes",
            "[{name: no-attributes, pathRewrite: {value: /foo}, domainRewrite: {value: foo.com}, secure: true, sameSite: Strict}]",
            echo,
        ),
        route(
            "/rewrite-all",
            "[{name: rewrite-all, pathRewrite: {value: /ra}, domainRewrite: {value: ra.com}, secure: false, sameSite: Lax}]",
            echo,
        ),
        route(
            "/rewrite-some",
            "[{name: rewrite-some, domainRewrite: {value: rs.com}}]",
            echo,
        ),
        route(
            "/multi",
            "[{name: multi-1, pathRewrite: {value: /m1}}, {name: multi-2, domainRewrite: {value: m2.com}}]",
            echo,
        ),
        route(
            "/service",
            "[]",
            "[{name: echo, port: 80, cookieRewritePolicies: [{name: service, pathRewrite: {value: /svc-new}}]}, {name: echo-other, port: 80, cookieRewritePolicies: [{name: service, pathRewrite: {value: /svc-new-other}}]}]",
        ),
        route(
            "/route-and-service",
            "[{name: route-service, pathRewrite: {value: /route}, domainRewrite: {value: route.com}}, {name: route, pathRewrite: {value: /route}}]",
            "[{name: echo, port: 80, cookieRewritePolicies: [{name: route-service, pathRewrite: {value: /service}, secure: true, sameSite: Lax}, {name: service, pathRewrite: {value: /service}}]}]",
        ),
    ];
    e2e.proxy(
        &format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: app-cookie-rewrite, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n{}",
            routes.concat()
        ),
        (ns, "app-cookie-rewrite"),
        "valid",
    )
    .await;
    let at = |path: &str| http(fqdn).path(path);
    let a = set_cookie(
        &e2e,
        at("/no-rewrite"),
        "no-rewrite=foo; Path=/nrw; Domain=nrw.com; SameSite=Strict; Secure",
    )
    .await;
    check_cookie(
        &a,
        "no-rewrite",
        ("foo", "/nrw", "nrw.com", "Strict"),
        true,
        &[],
    );
    let a = set_cookie(
        &e2e,
        at("/no-rewrite"),
        "rewrite-all=foo; Path=/ra; Domain=ra.com; SameSite=Strict; Secure",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-all",
        ("foo", "/ra", "ra.com", "Strict"),
        true,
        &[],
    );
    let a = set_cookie(&e2e, at("/no-attributes"), "no-attributes=foo").await;
    check_cookie(
        &a,
        "no-attributes",
        ("foo", "/foo", "foo.com", "Strict"),
        true,
        &[],
    );
    let a = set_cookie(
        &e2e,
        at("/rewrite-all"),
        "rewrite-all=bar; Path=/bar; Domain=bar.com; SameSite=None; Secure",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-all",
        ("bar", "/ra", "ra.com", "Lax"),
        false,
        &[],
    );
    let a = set_cookie(
        &e2e,
        at("/rewrite-all"),
        "rewrite-all=baz; Domain=bar.com; Max-Age=10; HttpOnly",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-all",
        ("baz", "/ra", "ra.com", "Lax"),
        false,
        &[("Max-Age", "10"), ("HttpOnly", "")],
    );
    let a = set_cookie(
        &e2e,
        at("/rewrite-some"),
        "rewrite-some=bar; Path=/bar; Domain=bar.com; SameSite=Lax; Secure",
    )
    .await;
    check_cookie(
        &a,
        "rewrite-some",
        ("bar", "/bar", "rs.com", "Lax"),
        true,
        &[],
    );
    let a = set_cookie(&e2e, at("/multi"), "multi-1=bar").await;
    check_cookie(&a, "multi-1", ("bar", "/m1", "", ""), false, &[]);
    let a = set_cookie(&e2e, at("/multi"), "multi-2=bar").await;
    check_cookie(&a, "multi-2", ("bar", "", "m2.com", ""), false, &[]);
    let mut services = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let a = set_cookie(&e2e, at("/service"), "service=baz; Path=/svc").await;
        match cookie(&a, "service").get("Path").map(String::as_str) {
            Some("/svc-new-other") => services.insert("echo-other"),
            Some("/svc-new") => services.insert("echo"),
            other => panic!("service cookie path {other:?}"),
        };
    }
    assert_eq!(services.len(), 2, "{services:?}");
    let a = set_cookie(&e2e, at("/route-and-service"), "route-service=baz").await;
    check_cookie(
        &a,
        "route-service",
        ("baz", "/service", "route.com", "Lax"),
        true,
        &[],
    );
    let a = set_cookie(&e2e, at("/route-and-service"), "route=baz").await;
    check_cookie(&a, "route", ("baz", "/route", "", ""), false, &[]);
    let a = set_cookie(&e2e, at("/route-and-service"), "service=baz").await;
    check_cookie(&a, "service", ("baz", "/service", "", ""), false, &[]);
    // A cookie that is not `name=value` is left as it is.
    let a = set_cookie(&e2e, at("/rewrite-some"), "rewrite-some").await;
    check_cookie(&a, "rewrite-some", ("", "", "", ""), false, &[]);
    for (set, path) in [
        ("rewrite-some=foo; Path=/;", "/"),
        ("rewrite-some=foo;   ", ""),
        ("rewrite-some=foo; ;", ""),
    ] {
        let a = set_cookie(&e2e, at("/rewrite-some"), set).await;
        check_cookie(&a, "rewrite-some", ("foo", path, "rs.com", ""), false, &[]);
    }
    e2e.assert_nothing_rejected().await;
}

/// An HTTPProxy `ns/name` for `fqdn` (plain HTTP) with `routes` (YAML list items, each
/// starting `    - `).
fn proxy(ns: &str, name: &str, fqdn: &str, routes: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n{routes}"
    )
}

/// A route of `conditions` (a YAML flow list) to `service`:80.
fn to(conditions: &str, service: &str) -> String {
    format!("    - conditions: {conditions}\n      services: [{{name: {service}, port: 80}}]\n")
}

/// `req` comes to answer 200 from `service` of namespace `ns`. Waits for the service, not
/// only the status: a route that covers `req` too (a wildcard vhost, a shorter prefix)
/// answers 200 until the route under test reaches Envoy, which may come after its status.
async fn answers(e2e: &E2e, req: &Req, ns: &str, service: &str) {
    e2e.until(req, |a| {
        a.status == 200
            && super::service(a) == service
            && super::seen(a, "namespace").as_str() == Some(ns)
    })
    .await;
}

/// testDirectResponseRule: routes answer their direct responses, status and body, the
/// longest prefix first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_response_rule() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-direct-response-policy";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "directresponse.projectcontour.io";
    let routes = "    - conditions: [{prefix: /directresponse-nobody}]\n      directResponsePolicy: {statusCode: 200}\n    - conditions: [{prefix: /directresponse}]\n      directResponsePolicy: {statusCode: 200, body: directResponse success}\n    - conditions: [{prefix: /directresponse-notfound}]\n      directResponsePolicy: {statusCode: 404, body: not found}\n";
    e2e.proxy(
        &proxy(ns, "direct-response", fqdn, routes),
        (ns, "direct-response"),
        "valid",
    )
    .await;
    for (path, status, body) in [
        ("/directresponse-nobody", 200, ""),
        ("/directresponse", 200, "directResponse success"),
        ("/directresponse-notfound", 404, "not found"),
    ] {
        let answer = e2e.until_status(&http(fqdn).path(path), status).await;
        assert_eq!(answer.body, body, "{path}");
    }
    e2e.assert_nothing_rejected().await;
}

/// testExactPathCondition: an exact path beats a prefix; a prefix is a string prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_path_condition() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-exact-path-condition-app";
    for s in ["echo-blue", "echo-green", "echo-default"] {
        e2e.deploy_echo(ns, s).await;
    }
    let fqdn = "exactpathcondition.projectcontour.io";
    let routes = [
        to("[{prefix: /blue}]", "echo-blue"),
        to("[{exact: /common/exact-blue}]", "echo-blue"),
        to("[{prefix: /common/exact-blue/}]", "echo-green"),
        to("[{exact: /blue-exact-green}]", "echo-green"),
        to("[{exact: /blue/exact-green}]", "echo-green"),
        to("[{prefix: /}]", "echo-default"),
    ]
    .concat();
    e2e.proxy(
        &proxy(ns, "echo-exact", fqdn, &routes),
        (ns, "echo-exact"),
        "valid",
    )
    .await;
    for (path, service) in [
        ("/", "echo-default"),
        ("/blue", "echo-blue"),
        ("/blue/exact-green", "echo-green"),
        ("/common/exact-blue", "echo-blue"),
        ("/common/exact-blue/green", "echo-green"),
        ("/blue-exact-green", "echo-green"),
        ("/blue-exact-green/extra", "echo-blue"),
        ("/app", "echo-default"),
    ] {
        answers(&e2e, &http(fqdn).path(path), ns, service).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testPathConditionMatch: prefixes with and without a trailing slash, and the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_condition_match() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-path-condition-match";
    for s in [
        "echo-slash-prefix",
        "echo-slash-noprefix",
        "echo-slash-default",
    ] {
        e2e.deploy_echo(ns, s).await;
    }
    let fqdn = "pathconditions.projectcontour.io";
    let routes = [
        to("[{prefix: /path/prefix/}]", "echo-slash-prefix"),
        to("[{prefix: /path/prefix}]", "echo-slash-noprefix"),
        to("[]", "echo-slash-default"),
    ]
    .concat();
    e2e.proxy(
        &proxy(ns, "path-conditions", fqdn, &routes),
        (ns, "path-conditions"),
        "valid",
    )
    .await;
    for (path, service) in [
        ("/", "echo-slash-default"),
        ("/foo", "echo-slash-default"),
        ("/path/prefix", "echo-slash-noprefix"),
        ("/path/prefixfoo", "echo-slash-noprefix"),
        ("/path/prefix/", "echo-slash-prefix"),
        ("/path/prefix/foo", "echo-slash-prefix"),
    ] {
        answers(&e2e, &http(fqdn).path(path), ns, service).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testWildcardSubdomainFQDN: a `*.domain` vhost answers one label under the domain, an
/// exact vhost beats it, two labels are not its.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_subdomain_fqdn() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-wildcard-subdomain-fqdn";
    for s in ["wildcarddomainio", "domainio", "bardomainio"] {
        e2e.deploy_echo(ns, s).await;
    }
    for (name, fqdn, service) in [
        ("wildcard", "'*.domain.io'", "wildcarddomainio"),
        ("full-fqdn", "domain.io", "domainio"),
        ("fqdn-subdomain", "bar.domain.io", "bardomainio"),
    ] {
        e2e.proxy(
            &proxy(ns, name, fqdn, &to("[]", service)),
            (ns, name),
            "valid",
        )
        .await;
    }
    for (host, service) in [
        ("domain.io", "domainio"),
        ("www.domain.io", "wildcarddomainio"),
        ("bar.domain.io", "bardomainio"),
        ("foo.domain.io", "wildcarddomainio"),
    ] {
        answers(&e2e, &http(host), ns, service).await;
    }
    e2e.until_status(&http("bar.foo.domain.io"), 404).await;
    e2e.assert_nothing_rejected().await;
}

/// testIngressWildcardSubdomainFQDN: an HTTPProxy's exact host beats an Ingress's
/// wildcard covering it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_wildcard_subdomain_fqdn() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-ingress-wildcard-override";
    for s in ["wildcarddomainio", "bardomainio"] {
        e2e.deploy_echo(ns, s).await;
    }
    e2e.apply(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: wildcard-ingress, namespace: {ns}}}\nspec:\n  rules:\n    - host: '*.wildcard-override.projectcontour.io'\n      http:\n        paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: wildcarddomainio, port: {{number: 80}}}}}}}}]\n"
    ));
    let fqdn = "bar.wildcard-override.projectcontour.io";
    e2e.proxy(
        &proxy(ns, "fqdn-subdomain", fqdn, &to("[]", "bardomainio")),
        (ns, "fqdn-subdomain"),
        "valid",
    )
    .await;
    answers(
        &e2e,
        &http("www.wildcard-override.projectcontour.io"),
        ns,
        "wildcarddomainio",
    )
    .await;
    answers(&e2e, &http(fqdn), ns, "bardomainio").await;
    e2e.assert_nothing_rejected().await;
}

/// testHostRewriteLiteral: a route's `Host` set to a literal reaches the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rewrite_literal() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-host-header-rewrite-literal";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    let fqdn = "hostheaderrewrite.projectcontour.io";
    let routes = "    - services: [{name: ingress-conformance-echo, port: 80}]\n      requestHeadersPolicy: {set: [{name: Host, value: rewritten.com}]}\n";
    e2e.proxy(
        &proxy(ns, "host-header-rewrite", fqdn, routes),
        (ns, "host-header-rewrite"),
        "valid",
    )
    .await;
    let answer = e2e.until_status(&http(fqdn), 200).await;
    assert_eq!(super::seen(&answer, "host"), "rewritten.com");
    e2e.assert_nothing_rejected().await;
}

/// testHostRewriteHeaderHTTPService: a route's `Host` set to `%REQ(x-host-rewrite)%` is
/// that request header's value upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rewrite_header_http_service() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-host-header-rewrite-header";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    let fqdn = "dynamichostrewrite.projectcontour.io";
    let routes = "    - services: [{name: ingress-conformance-echo, port: 80}]\n      requestHeadersPolicy: {set: [{name: Host, value: '%REQ(x-host-rewrite)%'}]}\n";
    e2e.proxy(
        &proxy(ns, "host-header-rewrite", fqdn, routes),
        (ns, "host-header-rewrite"),
        "valid",
    )
    .await;
    let req = http(fqdn).header("x-host-rewrite", "dynamichostrewritten.com");
    let answer = e2e.until_status(&req, 200).await;
    assert_eq!(super::seen(&answer, "host"), "dynamichostrewritten.com");
    e2e.assert_nothing_rejected().await;
}

/// testHostRewriteHeaderHTTPSService: the same on a TLS vhost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rewrite_header_https_service() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-host-header-rewrite-header-https";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    e2e.self_signed_cert(
        ns,
        "ingress-conformance-echo",
        "https.hostheaderrewrite.projectcontour.io",
    );
    let fqdn = "https.dynamichostrewrite.projectcontour.io";
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: host-header-rewrite, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: ingress-conformance-echo}}}}\n  routes:\n    - services: [{{name: ingress-conformance-echo, port: 80}}]\n      requestHeadersPolicy: {{set: [{{name: Host, value: '%REQ(x-host-rewrite)%'}}]}}\n"),
        (ns, "host-header-rewrite"),
        "valid",
    )
    .await;
    let req = super::https(fqdn).header("x-host-rewrite", "securedynamichostrewritten.com");
    let answer = e2e.until_status(&req, 200).await;
    assert_eq!(
        super::seen(&answer, "host"),
        "securedynamichostrewritten.com"
    );
    e2e.assert_nothing_rejected().await;
}

/// testExternalNameServiceLocalhostInvalid: a route to an ExternalName Service naming
/// localhost is an unresolved service reference, in Contour's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_name_service_localhost_invalid() {
    let e2e = E2e::start_with(|c| c.enable_external_name_service = true).await;
    let ns = "httpproxy-external-name-service-localhost";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    e2e.apply(&format!("apiVersion: v1\nkind: Service\nmetadata: {{name: external-name-service-localhost, namespace: {ns}}}\nspec: {{type: ExternalName, externalName: localhost.localdomain, ports: [{{name: http, port: 80}}]}}\n"));
    let routes = "    - services: [{name: external-name-service-localhost, port: 80}]\n      requestHeadersPolicy: {set: [{name: Host, value: localhost.localdomain}]}\n";
    e2e.apply(&proxy(
        ns,
        "external-name-proxy",
        "externalnameservice.projectcontour.io",
        routes,
    ));
    e2e.suite
        .wait_for(
            (
                "projectcontour.io/v1",
                "HTTPProxy",
                ns,
                "external-name-proxy",
            ),
            "Valid False with a ServiceError ServiceUnresolvedReference",
            |p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| {
                        c["type"] == "Valid"
                            && c["status"] == "False"
                            && c["errors"].as_array().into_iter().flatten().any(|e| {
                                e["type"] == "ServiceError"
                                    && e["reason"] == "ServiceUnresolvedReference"
                                    && e["message"].as_str().is_some_and(|m| {
                                        m.contains(
                                            "is an ExternalName service that points to localhost",
                                        )
                                    })
                            })
                    })
            },
        )
        .await;
    e2e.assert_nothing_rejected().await;
}

/// testRequestRedirectRuleNoService: redirects without services, 302 unless the policy
/// says 301, with hostname, scheme, port, path and prefix rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_redirect_rule_no_service() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-request-redirect-policy-nosvc";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "requestredirectrule.projectcontour.io";
    let routes = "    - conditions: [{prefix: /basic-redirect}]\n      requestRedirectPolicy: {hostname: projectcontour.io}\n    - conditions: [{prefix: /complex-redirect}]\n      requestRedirectPolicy: {scheme: https, hostname: envoyproxy.io, port: 8080, statusCode: 301}\n    - conditions: [{prefix: /path-rewrite}]\n      requestRedirectPolicy: {path: /path}\n    - conditions: [{prefix: /prefix-rewrite}]\n      requestRedirectPolicy: {prefix: /v2}\n    - conditions: [{prefix: /prefix-rewrite-trailing-slash/}]\n      requestRedirectPolicy: {prefix: /v2}\n";
    e2e.proxy(
        &proxy(ns, "redirect", fqdn, routes),
        (ns, "redirect"),
        "valid",
    )
    .await;
    for (path, status, location) in [
        (
            "/basic-redirect",
            302,
            "http://projectcontour.io/basic-redirect".to_string(),
        ),
        (
            "/complex-redirect",
            301,
            "https://envoyproxy.io:8080/complex-redirect".to_string(),
        ),
        ("/path-rewrite", 302, format!("http://{fqdn}/path")),
        (
            "/prefix-rewrite/foo/bar/zed",
            302,
            format!("http://{fqdn}/v2/foo/bar/zed"),
        ),
        (
            "/prefix-rewrite-trailing-slash/foo/bar",
            302,
            format!("http://{fqdn}/v2foo/bar"),
        ),
    ] {
        let answer = e2e.until_status(&http(fqdn).path(path), status).await;
        assert_eq!(
            answer.header("location").as_deref(),
            Some(location.as_str()),
            "{path}"
        );
    }
    e2e.assert_nothing_rejected().await;
}

/// testRequestRedirectRuleInvalid: a redirect with both a path and a prefix is invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_redirect_rule_invalid() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-request-redirect-policy-invalid";
    e2e.deploy_echo(ns, "echo").await;
    let routes = "    - conditions: [{prefix: /basic-redirect}]\n      services: [{name: echo, port: 80}]\n      requestRedirectPolicy: {path: /path, prefix: /path}\n";
    e2e.proxy(
        &proxy(
            ns,
            "invalid",
            "requestredirectrule.projectcontour.io",
            routes,
        ),
        (ns, "invalid"),
        "invalid",
    )
    .await;
    e2e.assert_nothing_rejected().await;
}

/// testHTTPSMisdirectedRequest: a Host other than the SNI name answers 421; a port in
/// the Host and its case do not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_misdirected_request() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-https-misdirected-request";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "https-misdirected-request.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &tls_proxy(ns, "echo", fqdn, "echo", "echo"),
        (ns, "echo"),
        "valid",
    )
    .await;
    let answer = e2e.until_status(&super::https(fqdn), 200).await;
    assert_eq!(super::service(&answer), "echo");
    for (host, status) in [
        ("non-matching-host.projectcontour.io".to_string(), 421),
        (format!("{fqdn}:9999"), 200),
        (
            "HTTPS-Misdirected-reQUest.projectcontour.io".to_string(),
            200,
        ),
    ] {
        e2e.until_status(&super::https(&host).sni(fqdn), status)
            .await;
    }
    e2e.assert_nothing_rejected().await;
}

/// An HTTPProxy `ns/name` for `fqdn` over TLS (`secret`), every path to `service`:80.
fn tls_proxy(ns: &str, name: &str, fqdn: &str, secret: &str, service: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: {secret}}}}}\n  routes:\n    - services: [{{name: {service}, port: 80}}]\n"
    )
}

/// testHTTPSSNIEnforcement: each TLS vhost answers over its own SNI; a request for one
/// over the other's SNI answers 421.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_sni_enforcement() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-https-sni-enforcement";
    let one = "sni-enforcement-echo-one.projectcontour.io";
    let two = "sni-enforcement-echo-two.projectcontour.io";
    e2e.deploy_echo(ns, "echo-one").await;
    e2e.self_signed_cert(ns, "echo-one", one);
    e2e.proxy(
        &tls_proxy(ns, "echo-one", one, "echo-one", "echo-one"),
        (ns, "echo-one"),
        "valid",
    )
    .await;
    let answer = e2e
        .until_status(&super::https(one).path("/https-sni-enforcement"), 200)
        .await;
    assert_eq!(super::service(&answer), "echo-one");
    e2e.deploy_echo(ns, "echo-two").await;
    e2e.self_signed_cert(ns, "echo-two", two);
    e2e.proxy(
        &tls_proxy(ns, "echo-two", two, "echo-two", "echo-two"),
        (ns, "echo-two"),
        "valid",
    )
    .await;
    let answer = e2e
        .until_status(&super::https(two).path("/https-sni-enforcement"), 200)
        .await;
    assert_eq!(super::service(&answer), "echo-two");
    e2e.until_status(&super::https(two).sni(one), 421).await;
    e2e.assert_nothing_rejected().await;
}

/// testHTTPSFallbackCertificate: a vhost taking the fallback certificate answers a
/// client whose SNI no vhost has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_fallback_certificate() {
    let ns = "httpproxy-https-fallback-certificate";
    let e2e = E2e::start_with(|c| {
        c.tls.fallback_certificate = isobar::config::NamespacedName {
            namespace: ns.to_string(),
            name: "fallback-cert".to_string(),
        };
    })
    .await;
    e2e.self_signed_cert(ns, "fallback-cert", "fallback.projectcontour.io");
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "fallback-cert-echo.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: echo, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo, enableFallbackCertificate: true}}}}\n  routes:\n    - services: [{{name: echo, port: 80}}]\n"),
        (ns, "echo"),
        "valid",
    )
    .await;
    let answer = e2e.until_status(&super::https(fqdn), 200).await;
    assert_eq!(super::service(&answer), "echo");
    let answer = e2e
        .until_status(
            &super::https(fqdn).sni("invalid-sni-should-use-fallback.projectcontour.io"),
            200,
        )
        .await;
    assert_eq!(super::service(&answer), "echo");
    e2e.assert_nothing_rejected().await;
}

/// testHeaderConditionMatch: header conditions of every kind pick their routes (routes of
/// one path ordered as Contour orders them); a missing header fails a negated match
/// unless `treatMissingAsEmpty`; `present` and `notpresent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_condition_match() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-header-condition-match";
    let fqdn = "headerconditions.projectcontour.io";
    let routes: &[(&str, &str)] = &[
        (
            "echo-header-present",
            "[{header: {name: Target-Present, present: true}}]",
        ),
        (
            "echo-header-contains",
            "[{header: {name: Target-Contains, contains: ContainsValue}}]",
        ),
        (
            "echo-header-contains-case-insensitive",
            "[{header: {name: Target-Contains, contains: cOnTainSvalue, ignoreCase: true}}]",
        ),
        (
            "echo-header-notcontains",
            "[{header: {name: Target-NotContains, notcontains: ContainsValue}}]",
        ),
        (
            "echo-header-notcontains-set-missing-as-empty",
            "[{header: {name: Target-NotContains, notcontains: ContainsValue, treatMissingAsEmpty: true}}, {header: {name: X-Force-NotContains-Case, exact: 'True'}}]",
        ),
        (
            "echo-header-exact",
            "[{header: {name: Target-Exact, exact: ExactValue}}]",
        ),
        (
            "echo-header-exact-case-insensitive",
            "[{header: {name: Target-Exact, exact: exactvalue, ignoreCase: true}}]",
        ),
        (
            "echo-header-notexact",
            "[{header: {name: Target-NotExact, notexact: ExactValue}}]",
        ),
        (
            "echo-header-notexact-set-missing-as-empty",
            "[{header: {name: Target-NotExact, notcontains: ExactValue, treatMissingAsEmpty: true}}, {header: {name: X-Force-NotExact-Case, exact: 'True'}}]",
        ),
        (
            "echo-header-regex",
            "[{header: {name: Target-Regex, regex: 'Regex.*'}}]",
        ),
    ];
    for (service, _) in routes {
        e2e.deploy_echo(ns, service).await;
    }
    let body: String = routes.iter().map(|(s, c)| to(c, s)).collect();
    e2e.proxy(
        &proxy(ns, "header-conditions", fqdn, &body),
        (ns, "header-conditions"),
        "valid",
    )
    .await;
    for (name, value, status, service) in [
        ("Target-Present", "random", 200, "echo-header-present"),
        ("Target-Contains", "random", 404, ""),
        (
            "Target-Contains",
            "ContainsValue",
            200,
            "echo-header-contains",
        ),
        (
            "Target-Contains",
            "xxx ContainsValue xxx",
            200,
            "echo-header-contains",
        ),
        (
            "Target-Contains",
            "cOnTainSvalue",
            200,
            "echo-header-contains-case-insensitive",
        ),
        ("Target-NotContains", "ContainsValue", 404, ""),
        (
            "X-Force-NotContains-Case",
            "True",
            200,
            "echo-header-notcontains-set-missing-as-empty",
        ),
        ("Target-NotContains", "xxx ContainsValue xxx", 404, ""),
        (
            "Target-NotContains",
            "random",
            200,
            "echo-header-notcontains",
        ),
        ("Target-Exact", "random", 404, ""),
        ("Target-Exact", "NotExactValue", 404, ""),
        ("Target-Exact", "ExactValue", 200, "echo-header-exact"),
        (
            "Target-Exact",
            "eXacTValue",
            200,
            "echo-header-exact-case-insensitive",
        ),
        ("Target-NotExact", "random", 200, "echo-header-notexact"),
        (
            "Target-NotExact",
            "NotExactValue",
            200,
            "echo-header-notexact",
        ),
        ("Target-NotExact", "ExactValue", 404, ""),
        (
            "X-Force-NotExact-Case",
            "True",
            200,
            "echo-header-notexact-set-missing-as-empty",
        ),
        ("Target-Regex", "RegexMatch", 200, "echo-header-regex"),
        ("Target-Regex", "NonMatching", 404, ""),
    ] {
        let req = http(fqdn).header(name, value);
        if status == 200 {
            answers(&e2e, &req, ns, service).await;
        } else {
            e2e.until_status(&req, status).await;
        }
    }
    e2e.deploy_echo(ns, "echo-header-notpresent").await;
    let body = [
        to(
            "[{header: {name: Target-Present, present: true}}]",
            "echo-header-present",
        ),
        to(
            "[{header: {name: Target-Present, notpresent: true}}]",
            "echo-header-notpresent",
        ),
    ]
    .concat();
    e2e.apply(&proxy(ns, "header-conditions", fqdn, &body));
    answers(
        &e2e,
        &http(fqdn).header("Target-Present", "random"),
        ns,
        "echo-header-present",
    )
    .await;
    answers(&e2e, &http(fqdn), ns, "echo-header-notpresent").await;
    e2e.assert_nothing_rejected().await;
}

/// A child HTTPProxy `ns/name` (no vhost) with `routes`.
fn child(ns: &str, name: &str, routes: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  routes:\n{routes}"
    )
}

/// A root HTTPProxy `ns/name` for `fqdn` including `includes` (a YAML flow list).
fn root(ns: &str, name: &str, fqdn: &str, includes: &str) -> String {
    format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  includes: {includes}\n"
    )
}

/// testIncludeExactCondition: an include's prefix joins its child's exact conditions; an
/// include with an exact condition is invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_exact_condition() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-include-exact-condition";
    let app = "httpproxy-include-exact-condition-app";
    let admin = "httpproxy-include-exact-condition-admin";
    e2e.deploy_echo(app, "echo-app").await;
    e2e.deploy_echo(admin, "echo-admin").await;
    e2e.apply(&child(
        app,
        "echo-app",
        &[
            to("[{exact: /foo}]", "echo-app"),
            to("[{prefix: /v1}]", "echo-app"),
        ]
        .concat(),
    ));
    e2e.apply(&child(
        admin,
        "echo-admin",
        &[
            to("[{prefix: /}]", "echo-admin"),
            to("[{exact: /portal}]", "echo-admin"),
        ]
        .concat(),
    ));
    let fqdn = "includeexactcondition.projectcontour.io";
    let includes = format!(
        "[{{name: echo-app, namespace: {app}, conditions: [{{prefix: /app}}]}}, {{name: echo-admin, namespace: {admin}, conditions: [{{prefix: /app/}}]}}, {{name: echo-admin, namespace: {admin}, conditions: [{{prefix: /admin}}]}}]"
    );
    e2e.proxy(&root(ns, "echo", fqdn, &includes), (ns, "echo"), "valid")
        .await;
    let invalid = format!("[{{name: echo-app, namespace: {app}, conditions: [{{exact: /app}}]}}]");
    e2e.proxy(
        &root(
            ns,
            "echo-invalid",
            "includeexactcondition-invalid.projectcontour.io",
            &invalid,
        ),
        (ns, "echo-invalid"),
        "invalid",
    )
    .await;
    for (path, namespace, service) in [
        ("/app/foo", app, "echo-app"),
        ("/app/admin", admin, "echo-admin"),
        ("/app/bar", admin, "echo-admin"),
        ("/app/v1", app, "echo-app"),
        ("/app/v1/page", app, "echo-app"),
        ("/admin/portal", admin, "echo-admin"),
    ] {
        answers(&e2e, &http(fqdn).path(path), namespace, service).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testIncludePrefixCondition: includes by prefix across namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_prefix_condition() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-include-prefix-condition";
    let app = "httpproxy-include-prefix-condition-app";
    let admin = "httpproxy-include-prefix-condition-admin";
    e2e.deploy_echo(app, "echo-app").await;
    e2e.deploy_echo(admin, "echo-admin").await;
    e2e.apply(&child(app, "echo-app", &to("[]", "echo-app")));
    e2e.apply(&child(admin, "echo-admin", &to("[]", "echo-admin")));
    let fqdn = "includeprefixcondition.projectcontour.io";
    let includes = format!(
        "[{{name: echo-app, namespace: {app}, conditions: [{{prefix: /}}]}}, {{name: echo-admin, namespace: {admin}, conditions: [{{prefix: /admin}}]}}]"
    );
    e2e.proxy(&root(ns, "echo", fqdn, &includes), (ns, "echo"), "valid")
        .await;
    for (path, namespace, service) in [
        ("/", app, "echo-app"),
        ("/app", app, "echo-app"),
        ("/admin", admin, "echo-admin"),
        ("/admin/", admin, "echo-admin"),
        ("/admin/app", admin, "echo-admin"),
    ] {
        answers(&e2e, &http(fqdn).path(path), namespace, service).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testIncludeRegexCondition: a child's regex under an include's prefix is anchored at
/// it; an include with a regex condition is invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_regex_condition() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-include-regex-condition";
    e2e.deploy_echo("echo-1", "echo-1").await;
    e2e.deploy_echo("echo-2", "echo-2").await;
    e2e.apply(&child(
        "echo-1",
        "echo-1",
        &[
            to("[{regex: '/us-west-3/.*'}]", "echo-1"),
            to("[{regex: '/us-west-1/.*'}]", "echo-1"),
        ]
        .concat(),
    ));
    e2e.apply(&child(
        "echo-2",
        "echo-2",
        &[
            to("[{prefix: /}]", "echo-2"),
            to("[{regex: '/(dev|staging)/.*'}]", "echo-2"),
        ]
        .concat(),
    ));
    let fqdn = "includeregexmatch.projectcontour.io";
    let includes = "[{name: echo-1, namespace: echo-1, conditions: [{prefix: /echo1}]}, {name: echo-2, namespace: echo-2, conditions: [{prefix: /echo2}]}]";
    e2e.proxy(&root(ns, "echo", fqdn, includes), (ns, "echo"), "valid")
        .await;
    e2e.proxy(
        &root(
            ns,
            "echo-invalid",
            "regex-condition-invalid.projectcontour.io",
            "[{name: echo-1, namespace: echo-1, conditions: [{regex: '/echo.*'}]}]",
        ),
        (ns, "echo-invalid"),
        "invalid",
    )
    .await;
    for (path, service) in [
        ("/echo2/", "echo-2"),
        ("/echo1/us-west-1/test", "echo-1"),
        ("/echo1/us-west-3/test", "echo-1"),
        ("/echo2/dev/utils", "echo-2"),
    ] {
        answers(&e2e, &http(fqdn).path(path), service, service).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testPathPrefixRewrite: a replaced prefix, to another prefix or to the root, as the
/// backend sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_prefix_rewrite() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-path-prefix-rewrite";
    for s in ["no-rewrite", "prefix-rewrite", "prefix-rewrite-to-root"] {
        e2e.deploy_echo(ns, s).await;
    }
    let fqdn = "prefixrewrite.projectcontour.io";
    let routes = [
        to("[{prefix: /}]", "no-rewrite"),
        to("[{prefix: /someprefix1}]", "prefix-rewrite")
            + "      pathRewritePolicy: {replacePrefix: [{prefix: /someprefix1, replacement: /someotherprefix}]}\n",
        to("[{prefix: /someprefix2}]", "prefix-rewrite-to-root")
            + "      pathRewritePolicy: {replacePrefix: [{prefix: /someprefix2, replacement: /}]}\n",
    ]
    .concat();
    e2e.proxy(
        &proxy(ns, "prefix-rewrite", fqdn, &routes),
        (ns, "prefix-rewrite"),
        "valid",
    )
    .await;
    for (path, service, seen) in [
        ("/", "no-rewrite", "/"),
        ("/foo", "no-rewrite", "/foo"),
        ("/someprefix1", "prefix-rewrite", "/someotherprefix"),
        (
            "/someprefix1foobar",
            "prefix-rewrite",
            "/someotherprefixfoobar",
        ),
        (
            "/someprefix1/segment",
            "prefix-rewrite",
            "/someotherprefix/segment",
        ),
        ("/someprefix2", "prefix-rewrite-to-root", "/"),
        ("/someprefix2foobar", "prefix-rewrite-to-root", "/foobar"),
        ("/someprefix2/segment", "prefix-rewrite-to-root", "/segment"),
    ] {
        let answer = e2e
            .until(&http(fqdn).path(path), |a| {
                a.status == 200 && super::service(a) == service
            })
            .await;
        assert_eq!(super::seen(&answer, "path"), seen, "{path}");
    }
    e2e.assert_nothing_rejected().await;
}

/// testQueryParameterConditionMatch: query parameter conditions of every kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_parameter_condition_match() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-query-parameter-condition-match";
    let fqdn = "queryparam.projectcontour.io";
    let routes: &[(&str, &str)] = &[
        (
            "echo-query-parameter-exact",
            "{name: targetExact, exact: ExactValue}",
        ),
        (
            "echo-query-parameter-exact-ignorecase",
            "{name: targetExactIgnoreCase, exact: exactvalueIgnorecase, ignoreCase: true}",
        ),
        (
            "echo-query-parameter-prefix",
            "{name: targetPrefix, prefix: Prefix}",
        ),
        (
            "echo-query-parameter-prefix-ignorecase",
            "{name: targetPrefixIgnoreCase, prefix: prefixval, ignoreCase: true}",
        ),
        (
            "echo-query-parameter-suffix",
            "{name: targetSuffix, suffix: ffixValue}",
        ),
        (
            "echo-query-parameter-suffix-ignorecase",
            "{name: targetSuffixIgnoreCase, suffix: ffixvalueignorecase, ignoreCase: true}",
        ),
        (
            "echo-query-parameter-regex",
            "{name: targetRegex, regex: '^RegexV.*'}",
        ),
        (
            "echo-query-parameter-contains",
            "{name: targetContains, contains: nsVal}",
        ),
        (
            "echo-query-parameter-contains-ignorecase",
            "{name: targetContainsIgnoreCase, contains: svalueIgnorec, ignoreCase: true}",
        ),
        (
            "echo-query-parameter-present",
            "{name: targetPresent, present: true}",
        ),
    ];
    for (service, _) in routes {
        e2e.deploy_echo(ns, service).await;
    }
    let body: String = routes
        .iter()
        .map(|(s, c)| to(&format!("[{{queryParameter: {c}}}]"), s))
        .collect();
    e2e.proxy(
        &proxy(ns, "query-parameter-conditions", fqdn, &body),
        (ns, "query-parameter-conditions"),
        "valid",
    )
    .await;
    for (query, status, service) in [
        ("targetExact=random", 404, ""),
        ("targetExact=ExactValue", 200, "echo-query-parameter-exact"),
        ("targetExact=exactvalue", 404, ""),
        (
            "targetExactIgnoreCase=ExactValueIgnoreCase",
            200,
            "echo-query-parameter-exact-ignorecase",
        ),
        ("targetPrefix=random", 404, ""),
        (
            "targetPrefix=PrefixValue",
            200,
            "echo-query-parameter-prefix",
        ),
        ("targetPrefix=prefixvalue", 404, ""),
        (
            "targetPrefixIgnoreCase=PrefixValueIgnoreCase",
            200,
            "echo-query-parameter-prefix-ignorecase",
        ),
        ("targetSuffix=random", 404, ""),
        (
            "targetSuffix=SuffixValue",
            200,
            "echo-query-parameter-suffix",
        ),
        ("targetSuffix=suffixvalue", 404, ""),
        (
            "targetSuffixIgnoreCase=SuffixValueIgnoreCase",
            200,
            "echo-query-parameter-suffix-ignorecase",
        ),
        ("targetRegex=random", 404, ""),
        ("targetRegex=RegexValue", 200, "echo-query-parameter-regex"),
        ("targetContains=random", 404, ""),
        (
            "targetContains=ContainsValue",
            200,
            "echo-query-parameter-contains",
        ),
        (
            "targetContains=xxx+ContainsValue+xxx",
            200,
            "echo-query-parameter-contains",
        ),
        ("targetContains=containsvalueignorecase", 404, ""),
        (
            "targetContainsIgnoreCase=ContainsValueIgnoreCase",
            200,
            "echo-query-parameter-contains-ignorecase",
        ),
        ("targetPresent=random", 200, "echo-query-parameter-present"),
    ] {
        let req = http(fqdn).path(&format!("/?{query}"));
        if status == 200 {
            answers(&e2e, &req, ns, service).await;
        } else {
            e2e.until_status(&req, status).await;
        }
    }
    e2e.assert_nothing_rejected().await;
}

/// testQueryParameterConditionMultiple: only a parameter's first occurrence is matched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_parameter_condition_multiple() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-query-parameter-condition-multiple";
    e2e.deploy_echo(ns, "echo-1").await;
    e2e.deploy_echo(ns, "echo-2").await;
    let fqdn = "queryparam-multiple.projectcontour.io";
    let routes = [
        to("[{queryParameter: {name: animal, exact: whale}}]", "echo-1"),
        to(
            "[{queryParameter: {name: animal, exact: dolphin}}]",
            "echo-2",
        ),
    ]
    .concat();
    e2e.proxy(
        &proxy(ns, "query-parameter-multiple", fqdn, &routes),
        (ns, "query-parameter-multiple"),
        "valid",
    )
    .await;
    answers(
        &e2e,
        &http(fqdn).path("/?animal=whale&animal=dolphin"),
        ns,
        "echo-1",
    )
    .await;
    answers(
        &e2e,
        &http(fqdn).path("/?animal=dolphin&animal=whale"),
        ns,
        "echo-2",
    )
    .await;
    e2e.assert_nothing_rejected().await;
}

/// testRegexPathCondition: regex conditions match whole paths, in the routes' order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_path_condition() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-regex-condition";
    for s in ["echo-1", "echo-2", "echo-3"] {
        e2e.deploy_echo(ns, s).await;
    }
    let fqdn = "regexpath.projectcontour.io";
    let routes = [
        to("[{regex: '/apiv1/prod-.+/'}]", "echo-2"),
        to("[{regex: '/(local|global)/.*/'}]", "echo-3"),
        to("[{regex: '/[a-zA-Z]+'}]", "echo-1"),
        to("[{regex: '/[\\d]+/.+/'}]", "echo-3"),
        to("[{regex: '/base/.*'}]", "echo-1"),
        to("[{regex: /}]", "echo-1"),
    ]
    .concat();
    e2e.proxy(&proxy(ns, "regex", fqdn, &routes), (ns, "regex"), "valid")
        .await;
    for (path, service) in [
        ("/", "echo-1"),
        ("/apiv1/prod-v2/echo-2/", "echo-2"),
        ("/local/echo-3/", "echo-3"),
        ("/echo", "echo-1"),
        ("/3/echo/", "echo-3"),
        ("/base/root", "echo-1"),
    ] {
        answers(&e2e, &http(fqdn).path(path), ns, service).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testDisableMergeSlashes: `//foo` is `/foo` unless `disableMergeSlashes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_merge_slashes() {
    for disabled in [false, true] {
        let e2e = E2e::start_with(|c| c.disable_merge_slashes = disabled).await;
        let (ns, fqdn) = if disabled {
            (
                "httpproxy-disable-merge-slashes",
                "disable.mergeslashes.projectcontour.io",
            )
        } else {
            (
                "httpproxy-enable-merge-slashes",
                "enable.mergeslashes.projectcontour.io",
            )
        };
        e2e.deploy_echo(ns, "echo-1").await;
        e2e.deploy_echo(ns, "echo-2").await;
        let routes = [
            to("[{prefix: /foo}]", "echo-1"),
            to("[{prefix: /}]", "echo-2"),
        ]
        .concat();
        e2e.proxy(&proxy(ns, "echo", fqdn, &routes), (ns, "echo"), "valid")
            .await;
        answers(&e2e, &http(fqdn).path("/foo"), ns, "echo-1").await;
        let merged = if disabled { "echo-2" } else { "echo-1" };
        answers(&e2e, &http(fqdn).path("//foo"), ns, merged).await;
        e2e.assert_nothing_rejected().await;
    }
}

/// Isobar serving the Ingress classes `contour` and `team1` (`--ingress-class-name`).
async fn two_classes() -> E2e {
    E2e::start_with(|c| {
        c.plugins.insert(
            "ingress-class".to_string(),
            serde_json::json!({"names": ["contour", "team1"]}),
        );
    })
    .await
}

/// testMultipleIngressClassesField: proxies of either class (`spec.ingressClassName`)
/// are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_ingress_classes_field() {
    let e2e = two_classes().await;
    let ns = "httpproxy-multiple-ingress-classes-field";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    for class in ["contour", "team1"] {
        let name = format!("multiple-ingress-classes{class}-httpproxy");
        let fqdn = format!("{class}httpproxy.projectcontour.io");
        e2e.proxy(
            &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  ingressClassName: {class}\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n    - services: [{{name: ingress-conformance-echo, port: 80}}]\n"),
            (ns, &name),
            "valid",
        )
        .await;
        e2e.until_status(&http(&fqdn), 200).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testMultipleIngressClassesAnnotation: the same with `kubernetes.io/ingress.class`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_ingress_classes_annotation() {
    let e2e = two_classes().await;
    let ns = "httpproxy-multiple-ingress-classes-annotation";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    for class in ["contour", "team1"] {
        let name = format!("multiple-ingress-classes{class}-httpproxy-annotation");
        let fqdn = format!("{class}httpproxy-annotation.projectcontour.io");
        e2e.proxy(
            &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}, annotations: {{kubernetes.io/ingress.class: {class}}}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n    - services: [{{name: ingress-conformance-echo, port: 80}}]\n"),
            (ns, &name),
            "valid",
        )
        .await;
        e2e.until_status(&http(&fqdn), 200).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// Waits `for_` and asserts HTTPProxy `ns/name` got no status from Isobar (in a cluster
/// it keeps the CRD's default, `NotReconciled`), and that its host answers 404.
async fn never_reconciled(e2e: &E2e, (ns, name): (&str, &str), fqdn: &str) {
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let object = e2e.suite.get("projectcontour.io/v1", "HTTPProxy", ns, name);
    assert!(
        object["status"]["currentStatus"].is_null(),
        "Isobar wrote status for an unwatched namespace: {}",
        object["status"]
    );
    e2e.not_served(&http(fqdn)).await;
}

/// testWatchNamespaces: with `--watch-namespaces`, proxies of the watched namespaces are
/// served and those of others are neither served nor given status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_namespaces() {
    let e2e = E2e::start_watching(&["watched-ns-1", "watched-ns-2"], |_| {}).await;
    for ns in ["watched-ns-1", "watched-ns-2", "nonwatched-ns"] {
        e2e.deploy_echo(ns, "echo").await;
        let fqdn = format!("proxy-{ns}.projectcontour.io");
        let yaml = proxy(ns, "proxy", &fqdn, &to("[]", "echo"));
        if ns == "nonwatched-ns" {
            e2e.apply(&yaml);
            never_reconciled(&e2e, (ns, "proxy"), &fqdn).await;
        } else {
            e2e.proxy(&yaml, (ns, "proxy"), "valid").await;
            e2e.until_status(&http(&fqdn), 200).await;
        }
    }
    e2e.assert_nothing_rejected().await;
}

/// Isobar taking root proxies only in `namespaces` (`--root-namespaces`).
fn with_root_namespaces(c: &mut isobar::config::Config, namespaces: &[&str]) {
    c.plugins.insert(
        "root-namespaces".to_string(),
        serde_json::json!({ "namespaces": namespaces }),
    );
}

/// A root proxy in a namespace that is not a root namespace is invalid, with a
/// `RootNamespaceError`.
async fn not_a_root_namespace(e2e: &E2e, ns: &str) {
    e2e.apply(&proxy(
        ns,
        "root-proxy",
        &format!("root-proxy-{ns}.projectcontour.io"),
        &to("[]", "echo"),
    ));
    e2e.suite
        .wait_for(
            ("projectcontour.io/v1", "HTTPProxy", ns, "root-proxy"),
            "Valid False with a RootNamespaceError",
            |p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| {
                        c["type"] == "Valid"
                            && c["status"] == "False"
                            && c["errors"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|e| e["type"] == "RootNamespaceError" && e["status"] == "True")
                    })
            },
        )
        .await;
}

/// testWatchAndRootNamespaces: root namespaces among the watched ones; a leaf of a
/// watched non-root namespace is included; an unwatched namespace is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_root_namespaces() {
    let e2e = E2e::start_watching(&["root-ns-1", "root-ns-2", "nonroot-ns"], |c| {
        with_root_namespaces(c, &["root-ns-1", "root-ns-2"]);
    })
    .await;
    for ns in ["root-ns-1", "root-ns-2"] {
        e2e.deploy_echo(ns, "echo").await;
        let fqdn = format!("root-proxy-{ns}.projectcontour.io");
        e2e.proxy(
            &proxy(ns, "root-proxy", &fqdn, &to("[]", "echo")),
            (ns, "root-proxy"),
            "valid",
        )
        .await;
        e2e.until_status(&http(&fqdn), 200).await;
    }
    e2e.deploy_echo("nonroot-ns", "echo").await;
    not_a_root_namespace(&e2e, "nonroot-ns").await;
    e2e.apply(&child("nonroot-ns", "leaf-proxy", &to("[]", "echo")));
    let fqdn = "root-root-ns-1.projectcontour.io";
    e2e.proxy(
        &root(
            "root-ns-1",
            "root",
            fqdn,
            "[{name: leaf-proxy, namespace: nonroot-ns}]",
        ),
        ("root-ns-1", "root"),
        "valid",
    )
    .await;
    answers(&e2e, &http(fqdn), "nonroot-ns", "echo").await;
    let ns = "nonwatched-nonroot-ns";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = format!("root-proxy-{ns}.projectcontour.io");
    e2e.apply(&proxy(ns, "root-proxy", &fqdn, &to("[]", "echo")));
    never_reconciled(&e2e, (ns, "root-proxy"), &fqdn).await;
    e2e.assert_nothing_rejected().await;
}

/// testRootNamespaces: root proxies only in the root namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_namespaces() {
    let e2e =
        E2e::start_with(|c| with_root_namespaces(c, &["root-ns-cli-1", "root-ns-cli-2"])).await;
    for ns in ["root-ns-cli-1", "root-ns-cli-2"] {
        e2e.deploy_echo(ns, "echo").await;
        let fqdn = format!("root-proxy-{ns}.projectcontour.io");
        e2e.proxy(
            &proxy(ns, "root-proxy", &fqdn, &to("[]", "echo")),
            (ns, "root-proxy"),
            "valid",
        )
        .await;
        e2e.until_status(&http(&fqdn), 200).await;
    }
    e2e.deploy_echo("nonroot-ns-cli", "echo").await;
    not_a_root_namespace(&e2e, "nonroot-ns-cli").await;
    e2e.assert_nothing_rejected().await;
}

/// testLocalRateLimitingVirtualHost: a vhost's local limit of one request an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_rate_limiting_virtual_host() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-local-rate-limiting-vhost";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "vhostlocalratelimit.projectcontour.io";
    e2e.proxy(
        &proxy(ns, "vhostlocalratelimit", fqdn, &to("[]", "echo")),
        (ns, "vhostlocalratelimit"),
        "valid",
    )
    .await;
    e2e.until_status(&http(fqdn), 200).await;
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: vhostlocalratelimit, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n    rateLimitPolicy: {{local: {{requests: 1, unit: hour}}}}\n  routes:\n{}", to("[]", "echo")),
        (ns, "vhostlocalratelimit"),
        "valid",
    )
    .await;
    e2e.until_status(&http(fqdn), 429).await;
    e2e.assert_nothing_rejected().await;
}

/// testLocalRateLimitingRoute: a route's local limit leaves the other routes alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_rate_limiting_route() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-local-rate-limiting-route";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "routelocalratelimit.projectcontour.io";
    let unlimited = to("[{prefix: /unlimited}]", "echo");
    e2e.proxy(
        &proxy(
            ns,
            "routelocalratelimit",
            fqdn,
            &(to("[]", "echo") + &unlimited),
        ),
        (ns, "routelocalratelimit"),
        "valid",
    )
    .await;
    e2e.until_status(&http(fqdn), 200).await;
    let limited = to("[]", "echo") + "      rateLimitPolicy: {local: {requests: 1, unit: hour}}\n";
    e2e.proxy(
        &proxy(ns, "routelocalratelimit", fqdn, &(limited + &unlimited)),
        (ns, "routelocalratelimit"),
        "valid",
    )
    .await;
    e2e.until_status(&http(fqdn), 429).await;
    e2e.until_status(&http(fqdn).path("/unlimited"), 200).await;
    e2e.assert_nothing_rejected().await;
}

/// testIPFilterPolicy: deny and allow lists on routes and vhosts, by the remote address
/// (`X-Forwarded-For` with one trusted hop); a route's list replaces its vhost's; an
/// included route's own list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_filter_policy() {
    let e2e = E2e::start_with(|c| c.network.num_trusted_hops = 1).await;
    let ns = "httpproxy-ip-filters";
    e2e.deploy_echo(ns, "echo").await;
    let deny_all = "[{source: Peer, cidr: 10.8.8.8/0}, {source: Remote, cidr: 10.8.8.8/0}, {source: Peer, cidr: '::/0'}, {source: Remote, cidr: '::/0'}]";
    let from = |req: Req, ip: &str| req.header("X-Forwarded-For", ip);
    // A route's own lists.
    let fqdn = "ipfilter1.projectcontour.io";
    let with = |policy: &str| proxy(ns, "ipfilter1", fqdn, &(to("[]", "echo") + policy));
    e2e.proxy(&with(""), (ns, "ipfilter1"), "valid").await;
    e2e.until_status(&http(fqdn), 200).await;
    e2e.apply(&with(&format!("      ipDenyPolicy: {deny_all}\n")));
    e2e.until_status(&http(fqdn), 403).await;
    e2e.apply(&with(
        "      ipAllowPolicy: [{source: Remote, cidr: 10.10.10.10/32}]\n",
    ));
    e2e.until_status(&from(http(fqdn), "10.10.10.10"), 200)
        .await;
    e2e.until_status(&from(http(fqdn), "10.10.10.0"), 403).await;
    // A vhost's list, and a route's replacing it.
    let fqdn = "ipfilter2.projectcontour.io";
    let two = |vhost: &str, one: &str| {
        format!(
            "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: ipfilter2, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {fqdn}\n{vhost}  routes:\n{}{one}{}",
            to("[{prefix: /one}]", "echo"),
            to("[{prefix: /other}]", "echo")
        )
    };
    e2e.proxy(&two("", ""), (ns, "ipfilter2"), "valid").await;
    e2e.until_status(&http(fqdn).path("/one"), 200).await;
    let vhost_deny = format!("    ipDenyPolicy: {deny_all}\n");
    e2e.apply(&two(&vhost_deny, ""));
    e2e.until_status(&http(fqdn).path("/one"), 403).await;
    e2e.apply(&two(
        &vhost_deny,
        "      ipAllowPolicy: [{source: Remote, cidr: 10.10.10.10}]\n",
    ));
    e2e.until_status(&from(http(fqdn).path("/one"), "10.10.10.10"), 200)
        .await;
    e2e.until_status(&from(http(fqdn).path("/one"), "10.10.10.0"), 403)
        .await;
    e2e.until_status(&from(http(fqdn).path("/other"), "10.10.10.0"), 403)
        .await;
    // An included route's lists.
    let fqdn = "ipfilter3.projectcontour.io";
    e2e.proxy(
        &root(
            ns,
            "ipfilter3-root",
            fqdn,
            &format!("[{{namespace: {ns}, name: ipfilter3-child}}]"),
        ),
        (ns, "ipfilter3-root"),
        "invalid",
    )
    .await;
    let leaf = |policy: &str| child(ns, "ipfilter3-child", &(to("[]", "echo") + policy));
    e2e.proxy(&leaf(""), (ns, "ipfilter3-child"), "valid").await;
    e2e.until_status(&http(fqdn), 200).await;
    e2e.apply(&leaf(&format!("      ipDenyPolicy: {deny_all}\n")));
    e2e.until_status(&http(fqdn), 403).await;
    e2e.apply(&leaf(
        "      ipAllowPolicy: [{source: Remote, cidr: 10.10.10.10/32}]\n",
    ));
    e2e.until_status(&from(http(fqdn), "10.10.10.10"), 200)
        .await;
    e2e.until_status(&from(http(fqdn), "10.10.10.0"), 403).await;
    e2e.assert_nothing_rejected().await;
}

/// testHTTPHealthChecks: an active health check failing (418) leaves no healthy
/// endpoint (503); passing again, the route answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_health_checks() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-http-health-checks";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "healthchecks.projectcontour.io";
    let with = |check: &str| {
        let policy = if check.is_empty() {
            String::new()
        } else {
            format!(
                "      healthCheckPolicy: {{path: {check}, intervalSeconds: 1, timeoutSeconds: 1, unhealthyThresholdCount: 1, healthyThresholdCount: 1}}\n"
            )
        };
        proxy(ns, "health-checks", fqdn, &(to("[]", "echo") + &policy))
    };
    e2e.proxy(&with(""), (ns, "health-checks"), "valid").await;
    e2e.until_status(&http(fqdn), 200).await;
    e2e.apply(&with("/status/418"));
    e2e.until_status(&http(fqdn), 503).await;
    e2e.apply(&with("/status/200"));
    e2e.until_status(&http(fqdn), 200).await;
    e2e.assert_nothing_rejected().await;
}

/// testTCPRouteHTTPSTermination: a TCP proxy behind TLS termination, the server's
/// certificate checked against its CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_https_termination() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-tcproute-https-termination";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    let fqdn = "tcp-route-https-termination.projectcontour.io";
    let ca = e2e.self_signed_cert(ns, "echo-cert", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: echo-tcpproxy, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo-cert}}}}\n  tcpproxy: {{services: [{{name: ingress-conformance-echo, port: 80}}]}}\n"),
        (ns, "echo-tcpproxy"),
        "valid",
    )
    .await;
    let answer = e2e
        .until_status(&super::https(fqdn).verified_by(ca), 200)
        .await;
    assert_eq!(super::service(&answer), "ingress-conformance-echo");
    e2e.assert_nothing_rejected().await;
}

/// testCookieRewriteLuaInjection: a rewrite value is data, never code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_rewrite_lua_injection() {
    let e2e = E2e::start().await;
    let ns = "cookie-rewrite-lua-injection";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "cookie-rewrite-path-injection.projectcontour.io";
    let injected = r#"" .. (function() return "injected" end)() .. ""#;
    let route = format!(
        "    - conditions: [{{prefix: /inject-path}}]\n      cookieRewritePolicies: [{{name: inject-path, pathRewrite: {{value: '{injected}'}}}}]\n      services: [{{name: echo, port: 80}}]\n"
    );
    e2e.proxy(
        &proxy(ns, "cookie-rewrite-path-injection", fqdn, &route),
        (ns, "cookie-rewrite-path-injection"),
        "valid",
    )
    .await;
    let a = set_cookie(
        &e2e,
        http(fqdn).path("/inject-path"),
        "inject-path=bar; Path=/bar; Domain=bar.com; SameSite=None; Secure",
    )
    .await;
    check_cookie(
        &a,
        "inject-path",
        ("bar", injected, "bar.com", "None"),
        true,
        &[],
    );
    e2e.assert_nothing_rejected().await;
}

/// testHeaderGlobalRewriteCookieRewrite: a cookie set by the global response header
/// policy is rewritten by the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_global_rewrite_cookie_rewrite() {
    let e2e = E2e::start_with(|c| {
        c.policy
            .response_headers
            .set
            .insert("Set-Cookie".to_string(), "global=foo".to_string());
    })
    .await;
    let ns = "global-rewrite-headers-cookie-rewrite";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "global-header-rewrite-cookie-rewrite.projectcontour.io";
    let route = "    - conditions: [{prefix: /global}]\n      cookieRewritePolicies: [{name: global, pathRewrite: {value: /global}}]\n      services: [{name: echo, port: 80}]\n";
    e2e.proxy(
        &proxy(ns, "global-header-rewrite-cookie-rewrite", fqdn, route),
        (ns, "global-header-rewrite-cookie-rewrite"),
        "valid",
    )
    .await;
    let a = e2e.until_status(&http(fqdn).path("/global"), 200).await;
    check_cookie(&a, "global", ("foo", "/global", "", ""), false, &[]);
    e2e.assert_nothing_rejected().await;
}

/// testHeaderRewriteCookieRewrite: cookies Envoy makes (cookie load balancing) and
/// cookies set by route and service header policies are rewritten by route and service
/// rewrite policies alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_rewrite_cookie_rewrite() {
    let e2e = E2e::start().await;
    let ns = "rewrite-headers-cookie-rewrite";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "header-rewrite-cookie-rewrite.projectcontour.io";
    let routes = "    - conditions: [{prefix: /cookie-lb}]\n      loadBalancerPolicy: {strategy: Cookie}\n      cookieRewritePolicies: [{name: X-Contour-Session-Affinity, secure: true, sameSite: Strict}]\n      services: [{name: echo, port: 80}]\n    - conditions: [{prefix: /route-route}]\n      responseHeadersPolicy: {set: [{name: Set-Cookie, value: route-route=foo}]}\n      cookieRewritePolicies: [{name: route-route, pathRewrite: {value: /route-route}}]\n      services: [{name: echo, port: 80}]\n    - conditions: [{prefix: /route-service}]\n      responseHeadersPolicy: {set: [{name: Set-Cookie, value: route-service=foo}]}\n      services: [{name: echo, port: 80, cookieRewritePolicies: [{name: route-service, pathRewrite: {value: /route-service}}]}]\n    - conditions: [{prefix: /service-service}]\n      services: [{name: echo, port: 80, responseHeadersPolicy: {set: [{name: Set-Cookie, value: service-service=bar}]}, cookieRewritePolicies: [{name: service-service, pathRewrite: {value: /service-service}}]}]\n    - conditions: [{prefix: /service-route}]\n      cookieRewritePolicies: [{name: service-route, pathRewrite: {value: /service-route}}]\n      services: [{name: echo, port: 80, responseHeadersPolicy: {set: [{name: Set-Cookie, value: service-route=bar}]}}]\n";
    e2e.proxy(
        &proxy(ns, "header-rewrite-cookie-rewrite", fqdn, routes),
        (ns, "header-rewrite-cookie-rewrite"),
        "valid",
    )
    .await;
    let a = e2e.until_status(&http(fqdn).path("/cookie-lb"), 200).await;
    check_cookie(
        &a,
        "X-Contour-Session-Affinity",
        ("", "/", "", "Strict"),
        true,
        &[("HttpOnly", "")],
    );
    for (path, name, value) in [
        ("/route-route", "route-route", "foo"),
        ("/route-service", "route-service", "foo"),
        ("/service-service", "service-service", "bar"),
        ("/service-route", "service-route", "bar"),
    ] {
        let a = e2e.until_status(&http(fqdn).path(path), 200).await;
        check_cookie(&a, name, (value, path, "", ""), false, &[]);
    }
    e2e.assert_nothing_rejected().await;
}

/// testCookieRewriteTLS: rewrites on a TLS vhost, whose misdirected requests still
/// answer 421.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_rewrite_tls() {
    let e2e = E2e::start().await;
    let ns = "cookie-rewrite-tls";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "cookie-rewrite-tls.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: cookie-rewrite-tls, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo}}}}\n  routes:\n    - cookieRewritePolicies: [{{name: a-cookie, pathRewrite: {{value: /}}, domainRewrite: {{value: {fqdn}}}, secure: true, sameSite: Strict}}]\n      services: [{{name: echo, port: 80}}]\n"),
        (ns, "cookie-rewrite-tls"),
        "valid",
    )
    .await;
    let a = set_cookie(
        &e2e,
        super::https(fqdn),
        &format!("a-cookie=bar; Domain={fqdn}; Path=/; SameSite=Strict; Secure"),
    )
    .await;
    check_cookie(&a, "a-cookie", ("bar", "/", fqdn, "Strict"), true, &[]);
    e2e.until_status(
        &super::https("non-matching-host.projectcontour.io").sni(fqdn),
        421,
    )
    .await;
    e2e.assert_nothing_rejected().await;
}

/// testPodRestart: the pod behind a Service replaced by another (at another address),
/// requests reach the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_restart() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-pod-restart";
    e2e.deploy_echo(ns, "echo").await;
    let fqdn = "podrestart.projectcontour.io";
    e2e.proxy(
        &proxy(ns, "pod-restart", fqdn, &to("[]", "echo")),
        (ns, "pod-restart"),
        "valid",
    )
    .await;
    let before = e2e.until_status(&http(fqdn), 200).await;
    assert_eq!(super::service(&before), "echo");
    let old = super::seen(&before, "pod").clone();
    // What the Deployment controller does: a new pod, and the EndpointSlice names it.
    e2e.replace_pod(ns, "echo", "echo-restarted").await;
    let after = e2e
        .until(&http(fqdn), |a| {
            a.status == 200 && super::seen(a, "pod") != &old
        })
        .await;
    assert_eq!(super::seen(&after, "namespace"), ns);
}

/// testRetryPolicyValidation: a `retryOn` value Envoy does not have. The API server
/// refuses it by the CRD's schema; Isobar, reading it anyway (a manifest), marks the
/// proxy invalid and serves nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_policy_validation() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-retry-policy-validation";
    e2e.deploy_echo(ns, "foo").await;
    let routes = to("[]", "foo") + "      retryPolicy: {retryOn: [foobar]}\n";
    e2e.proxy_invalid(
        &proxy(
            ns,
            "invalid-retry-on-condition",
            "retry.projectcontour.io",
            &routes,
        ),
        (ns, "invalid-retry-on-condition"),
        "foobar",
    )
    .await;
    e2e.not_served(&http("retry.projectcontour.io")).await;
    e2e.assert_nothing_rejected().await;
}

/// testEnvoyDisableCompression: responses are compressed with the configured algorithm
/// (gzip by default, brotli, zstd) or not at all (`disabled`). Beyond Contour's test:
/// a gRPC-Web response is compressed too (Contour's compressor lists its types).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_disable_compression() {
    use isobar::config::sections::CompressionAlgorithm as A;
    for (ns, algorithm, encoding) in [
        ("httpproxy-default-compression", A::Gzip, Some("gzip")),
        ("httpproxy-disable-compression", A::Disabled, None),
        ("httpproxy-brotli-compression", A::Brotli, Some("br")),
        ("httpproxy-zstd-compression", A::Zstd, Some("zstd")),
    ] {
        let e2e = E2e::start_with(|c| c.compression.algorithm = algorithm).await;
        e2e.deploy_echo(ns, "echo").await;
        let fqdn = format!("{ns}-fqdn.projectcontour.io");
        let body = "minimum_text_to_enable_gzip".repeat(6);
        let routes = format!(
            "    - conditions: [{{prefix: /directresponse}}]\n      directResponsePolicy: {{statusCode: 200, body: {body}}}\n{}",
            to("[{prefix: /grpc-web}]", "echo")
        );
        e2e.proxy(
            &proxy(ns, "direct-response", &fqdn, &routes),
            (ns, "direct-response"),
            "valid",
        )
        .await;
        let accept = format!("{}, deflate", encoding.unwrap_or("gzip"));
        let req = http(&fqdn)
            .path("/directresponse")
            .header("Accept-Encoding", &accept);
        let grpc_web = http(&fqdn)
            .path("/grpc-web")
            .header("Accept-Encoding", &accept)
            .header("X-ECHO-HEADER", "Content-Type:application/grpc-web-text");
        for req in [req, grpc_web] {
            let answer = e2e.until_status(&req, 200).await;
            let got = answer.header("content-encoding");
            match encoding {
                Some(want) => assert_eq!(
                    got.as_deref(),
                    Some(want),
                    "{ns} {}: {:?}",
                    req.path,
                    answer.headers
                ),
                None => assert_ne!(got.as_deref(), Some("gzip"), "{ns}"),
            }
        }
        e2e.assert_nothing_rejected().await;
    }
}

/// One HTTP/2 POST of `body` to `path` for `authority` at `addr`, over TLS (SNI the
/// authority, any certificate) or, without `tls`, h2c: the status, headers, body and
/// trailers.
async fn h2_post(
    addr: std::net::SocketAddr,
    tls: bool,
    authority: &str,
    (path, headers): (&str, &[(&str, &str)]),
    body: Vec<u8>,
) -> Result<(u16, hyper::HeaderMap, Vec<u8>, Option<hyper::HeaderMap>), String> {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let mut request = hyper::Request::post(format!("https://{authority}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = if tls {
        let stream = crate::conformance::client::Tls::insecure(authority)
            .connect(addr, &[b"h2"])
            .await?;
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(request)
            .await
            .map_err(|e| e.to_string())?
    } else {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(request)
            .await
            .map_err(|e| e.to_string())?
    };
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.map_err(|e| e.to_string())?;
    let trailers = collected.trailers().cloned();
    Ok((
        parts.status.as_u16(),
        parts.headers,
        collected.to_bytes().to_vec(),
        trailers,
    ))
}

/// The messages of a gRPC (or gRPC-Web) body: (flag byte, payload) per frame.
fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let end = (5 + len).min(body.len());
        out.push((body[0], body[5..end].to_vec()));
        body = &body[end..];
    }
    out
}

/// testGRPCServicePlaintext: a gRPC service over h2c behind a TLS vhost that permits
/// insecure requests answers `Ping` over clear text and over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_service_plaintext() {
    use prost::Message;
    let e2e = E2e::start().await;
    let ns = "grpc-upstream-plaintext";
    e2e.deploy_grpc(ns, "grpc-echo").await;
    let fqdn = "grpc-echo-plaintext.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: grpc-echo-plaintext, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo}}}}\n  routes:\n    - permitInsecure: true\n      conditions: [{{prefix: /yages.Echo/Ping}}]\n      services: [{{name: grpc-echo, port: 9000, protocol: h2c}}]\n"),
        (ns, "grpc-echo-plaintext"),
        "valid",
    )
    .await;
    for (addr, tls) in [(e2e.suite.envoy_http, false), (e2e.suite.envoy_https, true)] {
        let start = std::time::Instant::now();
        loop {
            let answer = h2_post(
                addr,
                tls,
                fqdn,
                (
                    "/yages.Echo/Ping",
                    &[("content-type", "application/grpc"), ("te", "trailers")],
                ),
                vec![0, 0, 0, 0, 0],
            )
            .await;
            let pong = answer
                .as_ref()
                .ok()
                .and_then(|(status, _, body, trailers)| {
                    let ok = *status == 200
                        && trailers
                            .as_ref()
                            .and_then(|t| t.get("grpc-status"))
                            .is_some_and(|s| s == "0");
                    let (_, message) = frames(body).into_iter().next()?;
                    let content =
                        crate::conformance::grpc::Content::decode(message.as_slice()).ok()?;
                    (ok && content.text == "pong").then_some(())
                });
            if pong.is_some() {
                break;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "tls {tls}: {answer:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    e2e.assert_nothing_rejected().await;
}

/// testGRPCWeb: a gRPC-Web call (HTTPS) reaches the gRPC service; the answer is a data
/// frame with `pong` and a trailer frame with `grpc-status: 0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web() {
    use prost::Message;
    let e2e = E2e::start().await;
    let ns = "grpc-web";
    e2e.deploy_grpc(ns, "grpc-echo").await;
    let fqdn = "grpc-web.projectcontour.io";
    e2e.self_signed_cert(ns, "echo", fqdn);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: grpc-web, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {{secretName: echo}}}}\n  routes:\n    - services: [{{name: grpc-echo, port: 9000, protocol: h2c}}]\n"),
        (ns, "grpc-web"),
        "valid",
    )
    .await;
    let start = std::time::Instant::now();
    loop {
        let answer = h2_post(
            e2e.suite.envoy_https,
            true,
            fqdn,
            (
                "/yages.Echo/Ping",
                &[
                    ("content-type", "application/grpc-web+proto"),
                    ("accept", "application/grpc-web+proto"),
                    ("x-grpc-web", "1"),
                ],
            ),
            vec![0, 0, 0, 0, 0],
        )
        .await;
        let good = answer.as_ref().ok().is_some_and(|(status, _, body, _)| {
            let frames = frames(body);
            let data = frames.iter().find(|(flag, _)| *flag == 0);
            let trailer = frames.iter().find(|(flag, _)| *flag == 0x80);
            *status == 200
                && data.is_some_and(|(_, m)| {
                    crate::conformance::grpc::Content::decode(m.as_slice())
                        .is_ok_and(|c| c.text == "pong")
                })
                && trailer.is_some_and(|(_, t)| {
                    String::from_utf8_lossy(t).lines().any(|l| {
                        l.trim().eq_ignore_ascii_case("grpc-status:0")
                            || l.trim().eq_ignore_ascii_case("grpc-status: 0")
                    })
                })
        });
        if good {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{answer:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    e2e.assert_nothing_rejected().await;
}

/// testDynamicHeaders: Envoy's variables in a Service's header policies, requests and
/// responses alike (`%HOSTNAME%` is Envoy's host's name, here this machine's rather than
/// an `envoy-` pod's); unknown variables pass literally, Contour's own are filled in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_headers() {
    let e2e = E2e::start().await;
    let ns = "httpproxy-dynamic-headers";
    e2e.deploy_echo(ns, "ingress-conformance-echo").await;
    let fqdn = "dynamicheaders.projectcontour.io";
    let common = [
        ("X-App-Weight", "100%"),
        ("X-Envoy-Hostname", "%HOSTNAME%"),
        ("X-Envoy-Unknown", "%UNKNOWN%"),
        (
            "X-Envoy-Upstream-Remote-Address",
            "%UPSTREAM_REMOTE_ADDRESS%",
        ),
        ("X-Request-Host", "%REQ(Host)%"),
        ("X-Request-Missing-Header", "%REQ(Missing-Header)%ook"),
        ("X-Host-Protocol", "%REQ(Host)% - %PROTOCOL%"),
    ];
    let list = |first: (&str, &str), extra: &[(&str, &str)]| {
        let items: Vec<String> = std::iter::once(first)
            .chain(common.iter().copied())
            .chain(extra.iter().copied())
            .map(|(n, v)| format!("{{name: {n}, value: '{v}'}}"))
            .collect();
        format!("[{}]", items.join(", "))
    };
    let request = list(
        ("Request-Header", "foo"),
        &[
            ("X-Contour-Namespace", "%CONTOUR_NAMESPACE%"),
            (
                "X-Contour-Service",
                "%CONTOUR_SERVICE_NAME%:%CONTOUR_SERVICE_PORT%",
            ),
        ],
    );
    let response = list(("Response-Header", "bar"), &[]);
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: dynamic-headers, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}}}\n  routes:\n    - services:\n        - name: ingress-conformance-echo\n          port: 80\n          requestHeadersPolicy: {{set: {request}}}\n          responseHeadersPolicy: {{set: {response}}}\n"),
        (ns, "dynamic-headers"),
        "valid",
    )
    .await;
    let answer = e2e.until_status(&http(fqdn), 200).await;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    let host = super::seen(&answer, "host")
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(host, fqdn);
    let request = |name: &str| super::seen_header(&answer, name).unwrap_or_default();
    let response = |name: &str| answer.header(name).unwrap_or_default();
    for (side, get) in [
        ("request", &request as &dyn Fn(&str) -> String),
        ("response", &response),
    ] {
        assert_eq!(get("X-App-Weight"), "100%", "{side}");
        assert_eq!(get("X-Envoy-Hostname"), hostname, "{side}");
        assert_eq!(get("X-Envoy-Unknown"), "%UNKNOWN%", "{side}");
        assert_eq!(get("X-Request-Host"), host, "{side}");
        assert_eq!(get("X-Request-Missing-Header"), "ook", "{side}");
        assert_eq!(
            get("X-Host-Protocol"),
            format!("{host} - HTTP/1.1"),
            "{side}"
        );
    }
    assert_eq!(request("X-Contour-Service"), "ingress-conformance-echo:80");
    assert_eq!(request("X-Contour-Namespace"), ns);
    e2e.assert_nothing_rejected().await;
}

/// The CA, client certificate (`backend-client-cert`, Envoy's) and server certificate
/// (`echo-secure`) of the backend TLS tests, and the TLS echo `echo-secure`.
async fn backend_tls_setup(
    e2e: &E2e,
    ns: &str,
) -> (
    crate::conformance::certs::Ca,
    crate::conformance::certs::Leaf,
) {
    use crate::conformance::certs::Ca;
    let ca = Ca::new("ca-cert");
    let client = ca.client();
    e2e.tls_secret_with_ca(ns, "backend-client-cert", &client, &ca);
    let server = ca.server(&["echo-secure"]);
    e2e.tls_secret_with_ca(ns, "backend-server-cert", &server, &ca);
    e2e.deploy_echo_secure(ns, "echo-secure", &server, false)
        .await;
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: backend-tls, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: backend-tls.projectcontour.io}}\n  routes:\n    - services: [{{name: echo-secure, port: 443, validation: {{caSecret: backend-client-cert, subjectName: echo-secure}}}}]\n"),
        (ns, "backend-tls"),
        "valid",
    )
    .await;
    (ca, client)
}

/// Isobar presenting `ns/backend-client-cert` to TLS upstreams, with `upstream` as the
/// `cluster.upstream-tls` minimum version.
async fn with_client_cert(ns: &str, minimum: &str) -> E2e {
    let (ns, minimum) = (ns.to_string(), minimum.to_string());
    E2e::start_with(move |c| {
        c.tls.envoy_client_certificate = isobar::config::NamespacedName {
            namespace: ns,
            name: "backend-client-cert".to_string(),
        };
        c.cluster.upstream_tls.minimum_protocol_version = minimum;
    })
    .await
}

/// testBackendTLS: a TLS upstream, validated (CA and subject name), is presented the
/// configured client certificate; replaced, the new one is presented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls() {
    let ns = "httpproxy-backend-tls";
    let e2e = with_client_cert(ns, "").await;
    let (ca, client) = backend_tls_setup(&e2e, ns).await;
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let presented = |a: &crate::conformance::client::Answer| {
        super::seen(a, "tls")["peerCertificates"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let answer = e2e
        .until_status(&http("backend-tls.projectcontour.io"), 200)
        .await;
    let peers = presented(&answer);
    assert_eq!(peers.len(), 1, "{answer:?}");
    assert_eq!(
        squash(peers[0].as_str().unwrap_or_default()),
        squash(&client.cert_pem)
    );
    // What cert-manager does when the Secret goes: a new certificate of the same CA
    // under the name.
    let renewed = ca.client();
    e2e.tls_secret_with_ca(ns, "backend-client-cert", &renewed, &ca);
    // Envoy presents a rotated certificate on new connections: each answer closes its own.
    let fresh = http("backend-tls.projectcontour.io").header("X-Echo-Close", "1");
    e2e.until(&fresh, |a| {
        a.status == 200
            && presented(a).len() == 1
            && squash(presented(a)[0].as_str().unwrap_or_default()) == squash(&renewed.cert_pem)
    })
    .await;
}

/// testBackendTLSProtocolVersion: `cluster.upstream-tls.minimum-protocol-version: 1.3`
/// has Envoy speak TLS 1.3 to the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_protocol_version() {
    let ns = "httpproxy-backend-tls-version";
    let e2e = with_client_cert(ns, "1.3").await;
    backend_tls_setup(&e2e, ns).await;
    let answer = e2e
        .until_status(&http("backend-tls.projectcontour.io"), 200)
        .await;
    assert_eq!(super::seen(&answer, "tls")["version"], "TLSv1.3");
    e2e.assert_nothing_rejected().await;
}

/// testClientCertAuth: client certificate validation per vhost — required (missing:
/// refused; another CA's: refused), skipped, skipped with a CA, optional, optional
/// without a CA. A refusal is a TLS alert: certificate required, or unknown CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cert_auth() {
    use crate::conformance::certs::Ca;
    let e2e = E2e::start().await;
    let ns = "httpproxy-client-cert-auth";
    let ca = Ca::new("ca-projectcontour-io");
    let other = Ca::new("ca-notprojectcontour-io");
    let valid = ca.client();
    let invalid = other.client();
    let vhosts = [
        ("echo-no-auth", ""),
        (
            "echo-with-auth",
            "clientValidation: {caSecret: echo-with-auth}",
        ),
        (
            "echo-with-auth-skip-verify",
            "clientValidation: {skipClientCertValidation: true}",
        ),
        (
            "echo-with-auth-skip-verify-with-ca",
            "clientValidation: {skipClientCertValidation: true, caSecret: echo-with-auth}",
        ),
        (
            "echo-with-optional-auth",
            "clientValidation: {optionalClientCertificate: true, caSecret: echo-with-auth}",
        ),
        (
            "echo-with-optional-auth-no-ca",
            "clientValidation: {optionalClientCertificate: true, skipClientCertValidation: true}",
        ),
    ];
    for (name, validation) in vhosts {
        e2e.deploy_echo(ns, name).await;
        let fqdn = format!("{name}.projectcontour.io");
        e2e.tls_secret_with_ca(ns, name, &ca.server(&[&fqdn]), &ca);
        let tls = if validation.is_empty() {
            format!("{{secretName: {name}}}")
        } else {
            format!("{{secretName: {name}, {validation}}}")
        };
        e2e.proxy(
            &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost: {{fqdn: {fqdn}, tls: {tls}}}\n  routes:\n    - services: [{{name: {name}, port: 80}}]\n"),
            (ns, name),
            "valid",
        )
        .await;
    }
    const OK: &str = "";
    const REQUIRED: &str = "CertificateRequired";
    const UNKNOWN_CA: &str = "UnknownCA";
    for (name, none, good, bad) in [
        ("echo-no-auth", OK, OK, OK),
        ("echo-with-auth", REQUIRED, OK, UNKNOWN_CA),
        ("echo-with-auth-skip-verify", OK, OK, OK),
        ("echo-with-auth-skip-verify-with-ca", REQUIRED, OK, OK),
        ("echo-with-optional-auth", OK, OK, UNKNOWN_CA),
        ("echo-with-optional-auth-no-ca", OK, OK, OK),
    ] {
        let fqdn = format!("{name}.projectcontour.io");
        for (client, want) in [(None, none), (Some(&valid), good), (Some(&invalid), bad)] {
            let mut req = super::https(&fqdn);
            if let Some(leaf) = client {
                req = req.identity(leaf);
            }
            if want.is_empty() {
                let answer = e2e.until_status(&req, 200).await;
                assert_eq!(super::service(&answer), name);
                continue;
            }
            comes_to(&e2e, &fqdn, client.map(|leaf| (leaf, &[][..])), want).await;
        }
    }
    e2e.assert_nothing_rejected().await;
}

/// A small PKI for the revocation tests: CAs (root or intermediate), leaves with known
/// serial numbers, CRLs.
mod pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertificateRevocationListParams, CertifiedIssuer,
        DnType, ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose,
        RevokedCertParams, SanType, SerialNumber,
    };
    use tokio_rustls::rustls::pki_types::CertificateDer;

    pub type Ca = CertifiedIssuer<'static, KeyPair>;

    /// A CA of serial `serial`, self-signed or signed by `parent`.
    pub fn ca(name: &str, serial: u64, parent: Option<&Ca>) -> Ca {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(SerialNumber::from(serial));
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        match parent {
            None => CertifiedIssuer::self_signed(params, key),
            Some(p) => CertifiedIssuer::signed_by(params, key, p),
        }
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A leaf of serial `serial` for `dns` names (a server's) or none (a client's).
    pub fn leaf(
        name: &str,
        serial: u64,
        dns: &[&str],
        issuer: &Ca,
    ) -> crate::conformance::certs::Leaf {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(DnType::CommonName, name);
        params.serial_number = Some(SerialNumber::from(serial));
        params.subject_alt_names = dns
            .iter()
            .map(|d| SanType::DnsName(d.to_string().try_into().unwrap_or_else(|e| panic!("{e}"))))
            .collect();
        params.extended_key_usages = vec![if dns.is_empty() {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = params
            .signed_by(&key, issuer)
            .unwrap_or_else(|e| panic!("{e}"));
        crate::conformance::certs::Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// `issuer`'s CRL revoking the serials `revoked`.
    pub fn crl(issuer: &Ca, revoked: &[u64]) -> String {
        let now = time::OffsetDateTime::now_utc();
        let params = CertificateRevocationListParams {
            this_update: now - time::Duration::minutes(1),
            next_update: now + time::Duration::days(1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from(*s),
                    revocation_time: now - time::Duration::minutes(1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        params
            .signed_by(issuer)
            .and_then(|c| c.pem())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn der(ca: &Ca) -> CertificateDer<'static> {
        ca.der().clone()
    }
}

/// An Opaque Secret `ns/name` with `key` holding `pem`.
fn opaque(ns: &str, name: &str, key: &str, pem: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: Opaque\ndata:\n  {key}: {b64}\n"
    )
}

/// What a request over TLS to `fqdn` presenting `client` (leaf, its issuers) comes to:
/// `""` for a 200 from the echo, else the TLS alert (or the error) met.
async fn outcome(
    e2e: &E2e,
    fqdn: &str,
    client: Option<(
        &crate::conformance::certs::Leaf,
        &[tokio_rustls::rustls::pki_types::CertificateDer<'static>],
    )>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = crate::conformance::client::Tls::insecure(fqdn);
    if let Some((leaf, chain)) = client {
        tls = tls
            .with_identity(&leaf.der, &leaf.key_pem)
            .with_chain(chain);
    }
    let result = async {
        let mut stream = tls.connect(e2e.suite.envoy_https, &[b"http/1.1"]).await?;
        let request = format!("GET / HTTP/1.1\r\nHost: {fqdn}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        stream
            .read_to_end(&mut out)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<String, String>(
            String::from_utf8_lossy(&out)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        )
    }
    .await;
    match result {
        Ok(line) if line.starts_with("HTTP/1.1 200") => String::new(),
        Ok(line) => line,
        Err(e) => e,
    }
}

/// Waits (30 s) until a request to `fqdn` with `client` comes to `want` (see
/// [`outcome`]; an alert's name is enough).
async fn comes_to(
    e2e: &E2e,
    fqdn: &str,
    client: Option<(
        &crate::conformance::certs::Leaf,
        &[tokio_rustls::rustls::pki_types::CertificateDer<'static>],
    )>,
    want: &str,
) {
    let start = std::time::Instant::now();
    loop {
        let got = outcome(e2e, fqdn, client).await;
        if (want.is_empty() && got.is_empty()) || (!want.is_empty() && got.contains(want)) {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{fqdn}: wanted {want:?}, got {got:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// testClientCertRevocation: client certificates checked against CRLs, the whole chain
/// (a missing CRL of an issuer refuses) or the leaf only; a CRL Secret that appears
/// later, and changes, is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cert_revocation() {
    const REVOKED: &str = "CertificateRevoked";
    const UNKNOWN_CA: &str = "UnknownCA";
    const REQUIRED: &str = "CertificateRequired";
    let e2e = E2e::start().await;
    // Revoked certificates are refused.
    let ns = "httpproxy-crl";
    e2e.deploy_echo(ns, "echo").await;
    let root = pki::ca("root-ca", 1, None);
    let unrevoked_sub = pki::ca("unrevoked-sub-ca", 2, Some(&root));
    let revoked_sub = pki::ca("revoked-sub-ca", 3, Some(&root));
    let server = pki::leaf("server", 10, &["*.projectcontour.io"], &root);
    let valid = pki::leaf("valid-client", 20, &[], &unrevoked_sub);
    let unrevoked = pki::leaf("unrevoked-client", 21, &[], &revoked_sub);
    let revoked = pki::leaf("revoked-client", 22, &[], &revoked_sub);
    let root_crl = pki::crl(&root, &[3]);
    let unrevoked_crl = pki::crl(&unrevoked_sub, &[]);
    let revoked_crl = pki::crl(&revoked_sub, &[22]);
    e2e.apply(&opaque(ns, "ca", "ca.crt", &root.pem()));
    e2e.apply(&server.secret(ns, "server-cert"));
    e2e.apply(&opaque(
        ns,
        "all-crls",
        "crl.pem",
        &format!("{root_crl}{unrevoked_crl}{revoked_crl}"),
    ));
    e2e.apply(&opaque(
        ns,
        "only-revoked-sub-ca-crl",
        "crl.pem",
        &revoked_crl,
    ));
    for (name, validation) in [
        ("crl-check-full", "{caSecret: ca, crlSecret: all-crls}"),
        (
            "crl-check-leaf-only",
            "{caSecret: ca, crlSecret: only-revoked-sub-ca-crl, crlOnlyVerifyLeafCert: true}",
        ),
        (
            "crl-check-full-but-missing-crl",
            "{caSecret: ca, crlSecret: only-revoked-sub-ca-crl}",
        ),
    ] {
        e2e.proxy(
            &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {name}.projectcontour.io\n    tls: {{secretName: server-cert, clientValidation: {validation}}}\n  routes:\n    - services: [{{name: echo, port: 80}}]\n"),
            (ns, name),
            "valid",
        )
        .await;
    }
    let unrevoked_chain = [pki::der(&unrevoked_sub)];
    let revoked_chain = [pki::der(&revoked_sub)];
    let full = "crl-check-full.projectcontour.io";
    let leaf_only = "crl-check-leaf-only.projectcontour.io";
    let missing = "crl-check-full-but-missing-crl.projectcontour.io";
    comes_to(&e2e, full, Some((&valid, &unrevoked_chain)), "").await;
    comes_to(&e2e, full, Some((&revoked, &revoked_chain)), REVOKED).await;
    comes_to(&e2e, missing, Some((&valid, &unrevoked_chain)), UNKNOWN_CA).await;
    comes_to(&e2e, leaf_only, Some((&revoked, &revoked_chain)), REVOKED).await;
    comes_to(&e2e, leaf_only, Some((&unrevoked, &revoked_chain)), "").await;
    for host in [full, leaf_only, missing] {
        comes_to(&e2e, host, None, REQUIRED).await;
    }
    // A CRL Secret that appears later, and changes.
    let ns = "httpproxy-crl-rotate";
    e2e.deploy_echo(ns, "echo").await;
    let root = pki::ca("root-ca", 1, None);
    let server = pki::leaf("server", 10, &["crl-rotate.projectcontour.io"], &root);
    let client = pki::leaf("client", 30, &[], &root);
    e2e.apply(&server.secret(ns, "server-cert"));
    e2e.apply(&opaque(ns, "ca", "ca.crt", &root.pem()));
    let rotate = "crl-rotate.projectcontour.io";
    e2e.proxy(
        &format!("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: crl-rotate, namespace: {ns}}}\nspec:\n  virtualhost:\n    fqdn: {rotate}\n    tls: {{secretName: server-cert, clientValidation: {{caSecret: ca, crlSecret: crl}}}}\n  routes:\n    - services: [{{name: echo, port: 80}}]\n"),
        (ns, "crl-rotate"),
        "invalid",
    )
    .await;
    e2e.apply(&opaque(ns, "crl", "crl.pem", &pki::crl(&root, &[30])));
    comes_to(&e2e, rotate, Some((&client, &[])), REVOKED).await;
    e2e.apply(&opaque(ns, "crl", "crl.pem", &pki::crl(&root, &[])));
    comes_to(&e2e, rotate, Some((&client, &[])), "").await;
    e2e.assert_nothing_rejected().await;
}
