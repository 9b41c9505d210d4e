//! Who may reach a vhost or route, and how often: client address filters, CORS, local
//! and global rate limits.

use isobar_contour::api;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::headers::{escape_header_value, is_header_name, is_header_value};
use isobar_sdk::ir;
use isobar_sdk::policy::timeout;

use super::PolicyError;

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
