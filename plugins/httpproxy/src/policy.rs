//! Route and service policies: HTTPProxy fields → IR, validated with Contour's rules.

use std::time::Duration;

use isobar_sdk::api::{self, HeadersPolicy, RedirectPolicy, RetryPolicy, TimeoutPolicy};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::headers::{escape_header_value, is_header_name, is_header_value};
use isobar_sdk::ir::{self, Redirect, Retry};
use isobar_sdk::policy::{RETRY_ON, timeout};

/// The longest direct response body Envoy serves (a route table's default
/// `max_direct_response_body_size_bytes`).
const MAX_DIRECT_RESPONSE_BODY_BYTES: usize = 4096;

pub(crate) use crate::upstream::{
    health_check, load_balancer, protocol, slow_start, tcp_health_check, upstream_validation,
};

/// A policy that cannot be used: the sub-condition type, reason and message.
pub(crate) type PolicyError = (ConditionType, Reason, String);

/// Header changes and an optional `Host` rewrite: a literal, or (`%REQ(name)%`) the
/// value of a request header.
pub(crate) struct Headers {
    pub policy: ir::HeadersPolicy,
    pub host: Option<String>,
    pub host_header: Option<String>,
}

/// Where a headers policy sits, for Contour's variables and error messages.
pub(crate) struct HeaderScope<'a> {
    pub field: &'a str,
    pub namespace: &'a str,
    /// The service (name, port) of a service-level policy.
    pub service: Option<(&'a str, i64)>,
    /// Response policies may not touch `Host`.
    pub response: bool,
}

pub(crate) fn headers(
    policy: &HeadersPolicy,
    scope: &HeaderScope<'_>,
) -> Result<Headers, PolicyError> {
    let reason = if scope.response {
        Reason::ResponseHeadersPolicyInvalid
    } else {
        Reason::RequestHeadersPolicyInvalid
    };
    let invalid = |message: String| {
        (
            ConditionType::RouteError,
            reason,
            format!("{}: {message}", scope.field),
        )
    };
    let mut out = Headers {
        policy: ir::HeadersPolicy::default(),
        host: None,
        host_header: None,
    };
    for header in &policy.set {
        let name = header.name.to_ascii_lowercase();
        if !is_header_value(&header.value) {
            return Err(invalid(format!(
                "header {:?} has a value Envoy refuses (a control character, or over 8,192 bytes)",
                header.name
            )));
        }
        if name == "host" {
            if scope.response {
                return Err(invalid(
                    "rewriting the Host header is not supported on responses".to_string(),
                ));
            }
            // `%REQ(name)%`: the Host is that request header's (Envoy's
            // `host_rewrite_header`), as Contour has it.
            let from = header
                .value
                .strip_prefix("%REQ(")
                .and_then(|v| v.strip_suffix(")%"))
                .map(str::to_ascii_lowercase);
            match from {
                Some(from) if is_header_name(&from) && scope.service.is_none() => {
                    out.host_header = Some(from);
                }
                Some(_) if scope.service.is_some() => {
                    return Err(invalid(
                        "the Host can be taken from a request header on a route only".to_string(),
                    ));
                }
                _ if header.value.contains('%') => {
                    return Err(invalid(
                        "the Host header must be a literal host name or %REQ(header-name)%"
                            .to_string(),
                    ));
                }
                _ => out.host = Some(header.value.clone()),
            }
            continue;
        }
        if !is_header_name(&name) {
            return Err(invalid(format!(
                "{:?} is not a header name that can be set",
                header.name
            )));
        }
        let value = escape_header_value(&substitute(&header.value, scope));
        if out.policy.set.insert(name, value).is_some() {
            return Err(invalid(format!(
                "duplicate header addition: {:?}",
                header.name
            )));
        }
    }
    for name in &policy.remove {
        let lower = name.to_ascii_lowercase();
        if lower == "host" || !is_header_name(&lower) {
            return Err(invalid(format!(
                "{name:?} is not a header name that can be removed"
            )));
        }
        if !out.policy.remove.contains(&lower) {
            out.policy.remove.push(lower);
        }
    }
    Ok(out)
}

/// Contour's own variables: `%CONTOUR_NAMESPACE%`, and for service policies
/// `%CONTOUR_SERVICE_NAME%` and `%CONTOUR_SERVICE_PORT%`.
fn substitute(value: &str, scope: &HeaderScope<'_>) -> String {
    let mut out = value.replace("%CONTOUR_NAMESPACE%", scope.namespace);
    if let Some((name, port)) = scope.service {
        out = out
            .replace("%CONTOUR_SERVICE_NAME%", name)
            .replace("%CONTOUR_SERVICE_PORT%", &port.to_string());
    }
    out
}

/// `timeoutPolicy`: `response` → route timeout, `idle` → route idle timeout;
/// `infinity` disables either.
pub(crate) fn timeouts(
    policy: &TimeoutPolicy,
) -> Result<(Option<Duration>, Option<Duration>), PolicyError> {
    let parse = |field: &str, value: &Option<String>| match value.as_deref() {
        None => Ok(None),
        Some(text) => timeout(text).map(Some).map_err(|e| {
            (
                ConditionType::RouteError,
                Reason::TimeoutPolicyNotValid,
                format!("route.timeoutPolicy.{field} failed to parse: {e}"),
            )
        }),
    };
    Ok((
        parse("response", &policy.response)?,
        parse("idle", &policy.idle)?,
    ))
}

/// Contour's retry semantics: `count` unset, 0 or 1 → 1 retry, −1 → none; `retryOn`
/// empty → `5xx`.
pub(crate) fn retry(policy: &RetryPolicy) -> Result<Retry, PolicyError> {
    let invalid = |m: String| (ConditionType::RouteError, Reason::RetryPolicyNotValid, m);
    let num_retries = match policy.count {
        None | Some(0) | Some(1) => 1,
        Some(-1) => 0,
        Some(n) => u32::try_from(n)
            .map_err(|_| invalid(format!("route.retryPolicy.count {n} is not valid")))?,
    };
    for on in &policy.retry_on {
        if !RETRY_ON.contains(&on.as_str()) {
            return Err(invalid(format!(
                "route.retryPolicy.retryOn {on:?} is not one of {}",
                RETRY_ON.join(", ")
            )));
        }
    }
    if let Some(code) = policy
        .retriable_status_codes
        .iter()
        .find(|c| !(100..=599).contains(*c))
    {
        return Err(invalid(format!(
            "route.retryPolicy.retriableStatusCodes {code} is not an HTTP status"
        )));
    }
    let per_try_timeout = match &policy.per_try_timeout {
        None => None,
        Some(text) => Some(
            timeout(text).map_err(|e| invalid(format!("route.retryPolicy.perTryTimeout: {e}")))?,
        ),
    };
    let retry_on = if policy.retry_on.is_empty() {
        "5xx".to_string()
    } else {
        policy.retry_on.join(",")
    };
    Ok(Retry {
        retry_on,
        num_retries,
        per_try_timeout: per_try_timeout.filter(|d| !d.is_zero()),
        retriable_status_codes: policy.retriable_status_codes.clone(),
        backoff: None,
    })
}

pub(crate) fn redirect(policy: &RedirectPolicy) -> Result<Redirect, PolicyError> {
    let invalid = |m: &str| {
        (
            ConditionType::RouteError,
            Reason::RequestRedirectPolicyNotValid,
            format!("route.requestRedirectPolicy: {m}"),
        )
    };
    let scheme = match policy.scheme.as_deref() {
        None | Some("") => None,
        Some(s @ ("http" | "https")) => Some(s.to_string()),
        Some(_) => return Err(invalid("scheme must be http or https")),
    };
    // The CRD's default (an API server fills it in; a manifest may leave it out).
    let status = match policy.status_code {
        None => 302,
        Some(code @ (301 | 302)) => code,
        Some(_) => return Err(invalid("statusCode must be 301 or 302")),
    };
    let port = match policy.port {
        None => None,
        Some(p) => Some(
            u32::try_from(p)
                .ok()
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(|| invalid("port must be 1-65535"))?,
        ),
    };
    if policy.path.is_some() && policy.prefix.is_some() {
        return Err(invalid("path and prefix cannot both be set"));
    }
    for value in [&policy.path, &policy.prefix].into_iter().flatten() {
        if !value.starts_with('/') || !is_header_value(value) {
            return Err(invalid("path and prefix must start with /"));
        }
    }
    if let Some(host) = &policy.hostname
        && (host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
    {
        return Err(invalid("hostname must be a DNS name"));
    }
    Ok(Redirect {
        scheme,
        host: policy.hostname.clone(),
        port,
        path: policy.path.clone(),
        prefix: policy.prefix.clone(),
        regex: None,
        status,
    })
}

pub(crate) fn direct_response(
    policy: &api::DirectResponsePolicy,
) -> Result<ir::RouteAction, PolicyError> {
    if !(200..=599).contains(&policy.status_code) {
        return Err((
            ConditionType::RouteError,
            Reason::DirectResponsePolicyNotValid,
            format!(
                "route.directResponsePolicy.statusCode {} must be between 200 and 599",
                policy.status_code
            ),
        ));
    }
    if let Some(body) = &policy.body
        && body.len() > MAX_DIRECT_RESPONSE_BODY_BYTES
    {
        return Err((
            ConditionType::RouteError,
            Reason::DirectResponsePolicyNotValid,
            format!(
                "route.directResponsePolicy.body is {} bytes, over Envoy's 4,096",
                body.len()
            ),
        ));
    }
    Ok(ir::RouteAction::DirectResponse {
        status: policy.status_code,
        body: policy.body.clone(),
    })
}

/// `ipAllowPolicy` / `ipDenyPolicy` of a vhost or route (at most one of the two).
pub(crate) fn ip_filter(
    field: &str,
    allow: &[api::IpFilterPolicy],
    deny: &[api::IpFilterPolicy],
) -> Result<Option<ir::IpFilter>, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::IPFilterError,
            Reason::IPFilterPolicyNotValid,
            format!("{field}: {m}"),
        )
    };
    let (is_allow, list) = match (allow.is_empty(), deny.is_empty()) {
        (true, true) => return Ok(None),
        (false, false) => {
            return Err(invalid(
                "cannot specify both ipAllowPolicy and ipDenyPolicy".to_string(),
            ));
        }
        (false, true) => (true, allow),
        (true, false) => (false, deny),
    };
    let mut rules = Vec::with_capacity(list.len());
    for entry in list {
        let remote = match entry.source.as_str() {
            "Peer" => false,
            "Remote" => true,
            other => return Err(invalid(format!("source {other:?} must be Peer or Remote"))),
        };
        let (address, len) = match entry.cidr.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (entry.cidr.as_str(), None),
        };
        let ip: std::net::IpAddr = address.parse().map_err(|_| {
            invalid(format!(
                "{:?} is not an IP address or CIDR range",
                entry.cidr
            ))
        })?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix_len =
            match len {
                None => max,
                Some(l) => l.parse::<u32>().ok().filter(|l| *l <= max).ok_or_else(|| {
                    invalid(format!("{:?} has an invalid prefix length", entry.cidr))
                })?,
            };
        rules.push(ir::IpRule {
            address: ip.to_string(),
            prefix_len,
            remote,
        });
    }
    Ok(Some(ir::IpFilter {
        allow: is_allow,
        rules,
    }))
}

/// `corsPolicy` of a vhost. Origins are exact (`*` allowed) unless they hold regex
/// characters, in which case they must be valid RE2.
pub(crate) fn cors(policy: &api::CorsPolicy) -> Result<ir::Cors, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::CORSError,
            Reason::CORSPolicyNotValid,
            format!("spec.virtualhost.corsPolicy: {m}"),
        )
    };
    if policy.allow_origin.is_empty() {
        return Err(invalid(
            "allowOrigin must list at least one origin".to_string(),
        ));
    }
    if policy.allow_methods.is_empty() {
        return Err(invalid(
            "allowMethods must list at least one method".to_string(),
        ));
    }
    let mut origins = Vec::new();
    for origin in &policy.allow_origin {
        if origin == "*" {
            origins.push(ir::StringMatch::Exact("*".to_string()));
        } else if origin.contains(['^', '$', '(', ')', '[', ']', '+', '?', '\\', '|', '{', '}'])
            || origin.contains(".*")
        {
            isobar_sdk::regex::check_re2(origin)
                .map_err(|e| invalid(format!("allowOrigin {e}")))?;
            origins.push(ir::StringMatch::Regex(origin.clone()));
        } else if origin.contains("://") && is_header_value(origin) {
            origins.push(ir::StringMatch::Exact(origin.clone()));
        } else {
            return Err(invalid(format!(
                "allowOrigin {origin:?} is not *, scheme://host[:port] or a regex"
            )));
        }
    }
    let list = |items: &[String], what: &str| -> Result<String, PolicyError> {
        for item in items {
            if !(item == "*" || is_header_name(item)) {
                return Err(invalid(format!("{what} entry {item:?} is not a token")));
            }
        }
        Ok(items.join(","))
    };
    let max_age_seconds = match &policy.max_age {
        None => None,
        Some(text) => Some(
            timeout(text)
                .map_err(|e| invalid(format!("maxAge: {e}")))?
                .as_secs(),
        ),
    };
    Ok(ir::Cors {
        allow_origin: origins,
        allow_methods: list(&policy.allow_methods, "allowMethods")?,
        allow_headers: list(&policy.allow_headers, "allowHeaders")?,
        expose_headers: list(&policy.expose_headers, "exposeHeaders")?,
        max_age_seconds,
        allow_credentials: policy.allow_credentials,
        allow_private_network: policy.allow_private_network,
        answer_unmatched_preflights: false,
    })
}

/// `rateLimitPolicy.global` (of a vhost, a route, or Contour's default policy): the
/// descriptors sent to the rate limit service, each entry one of a generic key, a
/// request header's value, whether headers match, or the client's address. Values
/// Envoy would refuse (empty keys and values, header names it cannot take) are errors.
pub(crate) fn global_rate_limit(
    policy: &api::GlobalRateLimitPolicy,
) -> Result<Vec<ir::RateLimitDescriptor>, String> {
    if policy.disabled {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(policy.descriptors.len());
    for (d, descriptor) in policy.descriptors.iter().enumerate() {
        if descriptor.entries.is_empty() {
            return Err(format!("descriptors[{d}] has no entries"));
        }
        let mut entries = Vec::with_capacity(descriptor.entries.len());
        for (e, entry) in descriptor.entries.iter().enumerate() {
            let at = || format!("descriptors[{d}].entries[{e}]");
            let set = usize::from(entry.generic_key.is_some())
                + usize::from(entry.request_header.is_some())
                + usize::from(entry.request_header_value_match.is_some())
                + usize::from(entry.remote_address.is_some());
            if set != 1 {
                return Err("rate limit descriptor entry must have exactly one field set".into());
            }
            let converted = if let Some(g) = &entry.generic_key {
                if g.value.is_empty() || g.key.as_deref() == Some("") {
                    return Err(format!(
                        "{}: genericKey needs a value (and a non-empty key when one is set)",
                        at()
                    ));
                }
                ir::RateLimitEntry::GenericKey {
                    key: g.key.clone(),
                    value: g.value.clone(),
                }
            } else if let Some(h) = &entry.request_header {
                let header = h.header_name.to_ascii_lowercase();
                if !is_header_name(&header) || h.descriptor_key.is_empty() {
                    return Err(format!(
                        "{}: requestHeader needs a valid headerName and a descriptorKey",
                        at()
                    ));
                }
                ir::RateLimitEntry::RequestHeader {
                    header,
                    key: h.descriptor_key.clone(),
                }
            } else if let Some(m) = &entry.request_header_value_match {
                if m.headers.is_empty() || m.value.is_empty() {
                    return Err(format!(
                        "{}: requestHeaderValueMatch needs headers and a value",
                        at()
                    ));
                }
                let headers = m
                    .headers
                    .iter()
                    .map(|h| {
                        crate::conditions::header_match(h)
                            .map_err(|(_, message)| format!("{}: {message}", at()))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                ir::RateLimitEntry::HeaderValueMatch {
                    headers,
                    expect_match: m.expect_match.unwrap_or(true),
                    value: m.value.clone(),
                }
            } else {
                ir::RateLimitEntry::RemoteAddress
            };
            entries.push(converted);
        }
        out.push(ir::RateLimitDescriptor { entries });
    }
    Ok(out)
}

/// `rateLimitPolicy.local` of a vhost or route: a token bucket of `requests` per `unit`
/// plus `burst`, answering `responseStatusCode` (429) when empty.
pub(crate) fn local_rate_limit(
    field: &str,
    policy: &api::RateLimitPolicy,
) -> Result<Option<ir::LocalRateLimit>, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::RouteError,
            Reason::RateLimitPolicyNotValid,
            format!("{field}.rateLimitPolicy: {m}"),
        )
    };
    if let Some(other) = policy.unsupported.keys().next() {
        // A global limit this version cannot enforce must not leave the route unlimited.
        return Err(invalid(format!(
            "{other} rate limiting is not supported by this version of Isobar"
        )));
    }
    let Some(local) = &policy.local else {
        return Ok(None);
    };
    let requests = u32::try_from(local.requests)
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| invalid("local.requests must be positive".to_string()))?;
    let burst = u32::try_from(local.burst)
        .map_err(|_| invalid("local.burst must be from 0 to 4294967295".to_string()))?;
    let fill_interval_seconds = match local.unit.as_str() {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        other => {
            return Err(invalid(format!(
                "local.unit {other:?} must be second, minute or hour"
            )));
        }
    };
    let status = match local.response_status_code {
        None => 429,
        Some(code) if isobar_sdk::policy::is_envoy_error_status(code) => code,
        Some(code) => {
            return Err(invalid(format!(
                "local.responseStatusCode {code} must be a 4xx or 5xx status Envoy knows (not 418, 419, 420, 425, 427, 430, 432-499, 509 or 512-599)"
            )));
        }
    };
    let mut response_headers = std::collections::BTreeMap::new();
    for header in &local.response_headers_to_add {
        let name = header.name.to_ascii_lowercase();
        if !is_header_name(&name) || name == "host" || !is_header_value(&header.value) {
            return Err(invalid(format!(
                "local.responseHeadersToAdd {:?} is not a header that can be set",
                header.name
            )));
        }
        response_headers.insert(name, escape_header_value(&header.value));
    }
    Ok(Some(ir::LocalRateLimit {
        requests,
        burst,
        fill_interval_seconds,
        status,
        response_headers,
    }))
}

/// `internalRedirectPolicy`: Envoy follows the upstream's redirect itself.
pub(crate) fn internal_redirect(
    policy: &api::InternalRedirectPolicy,
) -> Result<ir::InternalRedirect, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::RouteError,
            Reason::InternalRedirectPolicyNotValid,
            format!("route.internalRedirectPolicy: {m}"),
        )
    };
    let max_internal_redirects = match policy.max_internal_redirects {
        None => 1,
        Some(n) => u32::try_from(n).map_err(|_| {
            invalid("maxInternalRedirects must be from 0 to 4294967295".to_string())
        })?,
    };
    if let Some(code) = policy
        .redirect_response_codes
        .iter()
        .find(|c| ![301, 302, 303, 307, 308].contains(*c))
    {
        return Err(invalid(format!(
            "redirectResponseCodes {code} must be 301, 302, 303, 307 or 308"
        )));
    }
    let (allow_cross_scheme, safe_cross_scheme_only) =
        match policy.allow_cross_scheme_redirect.as_deref() {
            None | Some("Never") => (false, false),
            Some("Always") => (true, false),
            Some("SafeOnly") => (true, true),
            Some(other) => {
                return Err(invalid(format!(
                    "allowCrossSchemeRedirect {other:?} must be Always, Never or SafeOnly"
                )));
            }
        };
    Ok(ir::InternalRedirect {
        max_internal_redirects,
        response_codes: policy.redirect_response_codes.clone(),
        allow_cross_scheme,
        safe_cross_scheme_only,
        deny_repeated_route: policy.deny_repeated_route_redirect,
    })
}

/// A cookie domain as the CRD's pattern allows it: dot-separated labels of lower-case
/// letters, digits and inner hyphens (no wildcard, no trailing dot).
fn is_cookie_domain(domain: &str) -> bool {
    domain.split('.').all(|label| {
        let bytes = label.as_bytes();
        let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        bytes.first().is_some_and(inner)
            && bytes.last().is_some_and(inner)
            && bytes.iter().all(|b| inner(b) || *b == b'-')
    })
}

/// `cookieRewritePolicies` of a route. Every value is checked to be a plain cookie
/// attribute; the rewrite itself runs in a fixed Lua script that reads them as data.
pub(crate) fn cookie_rewrites(
    policies: &[api::CookieRewritePolicy],
) -> Result<Vec<ir::CookieRewrite>, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::RouteError,
            Reason::CookieRewritePolicyNotValid,
            format!("route.cookieRewritePolicies: {m}"),
        )
    };
    let attribute = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
    };
    let mut out = Vec::with_capacity(policies.len());
    for p in policies {
        if !is_header_name(&p.name) || p.name.contains(['=', ';']) {
            return Err(invalid(format!("{:?} is not a cookie name", p.name)));
        }
        if out.iter().any(|c: &ir::CookieRewrite| c.name == p.name) {
            return Err(invalid(format!("cookie {:?} is rewritten twice", p.name)));
        }
        // The CRD's pattern: no `;`, no control character. The value is data to the
        // rewriting script, never code.
        let path = p.path_rewrite.as_ref().map(|v| v.value.clone());
        if let Some(path) = &path
            && (path.is_empty() || path.chars().any(|c| c == ';' || c.is_ascii_control()))
        {
            return Err(invalid(format!(
                "path {path:?} must not be empty nor hold ; or a control character"
            )));
        }
        let domain = p.domain_rewrite.as_ref().map(|v| v.value.clone());
        if let Some(domain) = &domain
            && (!attribute(domain) || !is_cookie_domain(domain))
        {
            return Err(invalid(format!("domain {domain:?} is not a host name")));
        }
        let same_site = match p.same_site.as_deref() {
            None => None,
            Some(v @ ("Strict" | "Lax" | "None")) => Some(v.to_string()),
            Some(other) => {
                return Err(invalid(format!(
                    "sameSite {other:?} must be Strict, Lax or None"
                )));
            }
        };
        if path.is_none() && domain.is_none() && p.secure.is_none() && same_site.is_none() {
            return Err(invalid(format!(
                "cookie {:?} has nothing to rewrite",
                p.name
            )));
        }
        out.push(ir::CookieRewrite {
            name: p.name.clone(),
            path,
            domain,
            secure: p.secure,
            same_site,
        });
    }
    Ok(out)
}

/// A route's own policies (headers, timeouts, filters, retries, redirects, direct
/// responses) and the action its policies set, if any; problems go to `errors`.
pub(crate) fn route_policy(
    key: &isobar_sdk::ObjectKey,
    route: &api::Route,
    errors: &mut Vec<PolicyError>,
) -> (ir::RoutePolicy, Option<ir::RouteAction>) {
    let mut policy = ir::RoutePolicy {
        websockets: route.enable_websockets,
        ..Default::default()
    };
    let mut collect = |result: Result<(), PolicyError>| {
        if let Err(e) = result {
            errors.push(e);
        }
    };
    let route_scope = |field: &'static str, response: bool| HeaderScope {
        field,
        namespace: &key.namespace,
        service: None,
        response,
    };
    if let Some(h) = &route.request_headers_policy {
        collect(
            headers(h, &route_scope("route.requestHeadersPolicy", false)).map(|h| {
                policy.request_headers = h.policy;
                policy.host_rewrite = h.host;
                policy.host_rewrite_header = h.host_header;
            }),
        );
    }
    if let Some(h) = &route.response_headers_policy {
        collect(
            headers(h, &route_scope("route.responseHeadersPolicy", true))
                .map(|h| policy.response_headers = h.policy),
        );
    }
    if let Some(t) = &route.timeout_policy {
        collect(timeouts(t).map(|(response, idle)| {
            policy.timeout = response;
            policy.idle_timeout = idle;
        }));
    }
    collect(
        ip_filter("route", &route.ip_allow_policy, &route.ip_deny_policy)
            .map(|f| policy.ip_filter = f),
    );
    if let Some(r) = &route.rate_limit_policy {
        collect(local_rate_limit("route", r).map(|r| policy.rate_limit = r));
        match &r.global {
            // Not the vhost's global limits (the route's own descriptors are ignored).
            Some(g) if g.disabled => policy.ignore_vhost_rate_limits = true,
            Some(g) => collect(
                global_rate_limit(g)
                    .map(|d| policy.rate_limits = d)
                    .map_err(|e| {
                        (
                            ConditionType::RouteError,
                            Reason::RateLimitPolicyNotValid,
                            format!("route.rateLimitPolicy is invalid: {e}"),
                        )
                    }),
            ),
            None => {}
        }
    }
    if !route.cookie_rewrite_policies.is_empty() {
        collect(
            cookie_rewrites(&route.cookie_rewrite_policies).map(|c| policy.cookie_rewrites = c),
        );
    }
    if let Some(r) = &route.internal_redirect_policy {
        collect(internal_redirect(r).map(|r| policy.internal_redirect = Some(r)));
    }
    if let Some(r) = &route.retry_policy {
        collect(retry(r).map(|r| policy.retry = Some(r)));
    }
    let mut action = None;
    if let Some(r) = &route.request_redirect_policy {
        collect(redirect(r).map(|r| action = Some(ir::RouteAction::Redirect(Box::new(r)))));
    }
    if let Some(d) = &route.direct_response_policy {
        collect(direct_response(d).map(|a| action = Some(a)));
    }
    (policy, action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_counts_follow_contour() {
        let count = |c: Option<i64>| {
            retry(&RetryPolicy {
                count: c,
                ..Default::default()
            })
            .map(|r| r.num_retries)
            .ok()
        };
        assert_eq!(count(None), Some(1));
        assert_eq!(count(Some(0)), Some(1));
        assert_eq!(count(Some(-1)), Some(0));
        assert_eq!(count(Some(3)), Some(3));
        assert_eq!(count(Some(-2)), None);
    }
}
