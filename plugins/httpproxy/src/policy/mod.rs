//! Route and service policies: HTTPProxy fields → IR, validated with Contour's rules.

use std::time::Duration;

use isobar_contour::api::{self, HeadersPolicy, RedirectPolicy, RetryPolicy, TimeoutPolicy};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::headers::{escape_header_value, is_header_name, is_header_value};
use isobar_sdk::ir::{self, Redirect, Retry};
use isobar_sdk::policy::{RETRY_ON, timeout};

mod access;
mod cookies;

pub(crate) use access::{cors, global_rate_limit, ip_filter, local_rate_limit};
pub(crate) use cookies::{cookie_rewrites, internal_redirect};

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
