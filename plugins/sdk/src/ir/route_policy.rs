//! What a route does besides forwarding: header changes, retries, timeouts, mirrors,
//! redirects, rate limits, CORS, address filters, cookie rewrites and hash policies.

use std::collections::BTreeMap;

use serde::Serialize;

use super::*;

/// Headers to set (overwriting), to add (appending to a value already there) and to
/// remove. Values are already escaped for Envoy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeadersPolicy {
    pub set: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    pub remove: Vec<String>,
}

impl HeadersPolicy {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoutePolicy {
    #[serde(skip_serializing_if = "HeadersPolicy::is_empty")]
    pub request_headers: HeadersPolicy,
    #[serde(skip_serializing_if = "HeadersPolicy::is_empty")]
    pub response_headers: HeadersPolicy,
    /// A literal `Host` for upstream requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_rewrite: Option<String>,
    /// The `Host` for upstream requests is this request header's value (when present).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_rewrite_header: Option<String>,
    /// Replaces the matched path prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_rewrite: Option<String>,
    /// Rewrites the path (not the query) by a regex: a whole-path replacement, or a
    /// prefix replacement `prefix_rewrite` cannot say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex_rewrite: Option<RegexRewrite>,
    /// A request sent to a cluster that does not exist (the share of an invalid
    /// backend) is answered 500 rather than Envoy's 503.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub missing_cluster_500: bool,
    /// Whole-response timeout; zero disables it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<std::time::Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<std::time::Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    pub websockets: bool,
    /// Copies of each request, sent to these clusters (responses ignored).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<Mirror>,
    /// Overrides the vhost's CORS policy for this route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<Box<Cors>>,
    /// Overrides the vhost's IP filter for this route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_filter: Option<IpFilter>,
    /// Hash policies of a RingHash route.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hash_policies: Vec<HashPolicy>,
    /// Overrides the vhost's local rate limit for this route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<LocalRateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_redirect: Option<InternalRedirect>,
    /// `Set-Cookie` attributes rewritten in responses, by cookie name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cookie_rewrites: Vec<CookieRewrite>,
    /// How the connection manager's external authorization treats this route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<super::RouteAuth>,
    /// Global rate limit descriptors of this route (the vhost's apply without them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<super::RateLimitDescriptor>,
    /// The vhost's global rate limits do not apply to this route.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignore_vhost_rate_limits: bool,
    /// The JWT provider a request to this route must present a token of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt_requirement: Option<String>,
}

/// A path rewrite: the match of an RE2 `pattern` replaced by `substitution`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegexRewrite {
    pub pattern: String,
    pub substitution: String,
}

/// Validated cookie attribute values; they reach Envoy as data, never as code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CookieRewrite {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
}

/// A token bucket shared by every request to a vhost or route, per Envoy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalRateLimit {
    pub requests: u32,
    pub burst: u32,
    pub fill_interval_seconds: u64,
    pub status: u32,
    /// Headers added to limited responses, already escaped.
    pub response_headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InternalRedirect {
    pub max_internal_redirects: u32,
    pub response_codes: Vec<u32>,
    pub allow_cross_scheme: bool,
    /// Only redirects from http to https (Contour's `SafeOnly`).
    pub safe_cross_scheme_only: bool,
    pub deny_repeated_route: bool,
}

/// Cross-origin requests a vhost answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cors {
    /// Exact origins, or RE2 regexes (already checked).
    pub allow_origin: Vec<StringMatch>,
    pub allow_methods: String,
    pub allow_headers: String,
    pub expose_headers: String,
    pub max_age_seconds: Option<u64>,
    pub allow_credentials: bool,
    pub allow_private_network: bool,
    /// A preflight from an origin not allowed is answered by Envoy (200, no CORS
    /// headers) rather than forwarded upstream (Gateway API's rule; Contour forwards).
    pub answer_unmatched_preflights: bool,
}

/// Who may reach a vhost or route, by client address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpFilter {
    /// Allow only the listed ranges (else: deny the listed ranges).
    pub allow: bool,
    pub rules: Vec<IpRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpRule {
    pub address: String,
    pub prefix_len: u32,
    /// Match the client address from `X-Forwarded-For` rather than the peer's.
    pub remote: bool,
}

impl RoutePolicy {
    pub fn is_default(&self) -> bool {
        *self == RoutePolicy::default()
    }

    /// The policy as a route holds it: `None` when it is the default.
    pub fn boxed(self) -> Option<Box<RoutePolicy>> {
        (!self.is_default()).then(|| Box::new(self))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retry {
    /// Envoy `retry_on` conditions, comma-joined.
    pub retry_on: String,
    pub num_retries: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<std::time::Duration>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retriable_status_codes: Vec<u32>,
    /// The base interval between retries (Envoy's default, 25 ms, when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<std::time::Duration>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mirror {
    pub cluster: String,
    /// Share of requests mirrored, in millionths (1,000,000: every request).
    pub per_million: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Redirect {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The path rewritten by a regex (a prefix replacement Envoy's `prefix_rewrite`
    /// would get wrong).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<RegexRewrite>,
    /// 301, 302, 303, 307 or 308.
    pub status: u32,
}

/// How a RingHash route picks the hash of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HashPolicy {
    /// Contour's session affinity cookie `X-Contour-Session-Affinity`.
    Cookie,
    /// A session cookie of this name (for the whole site), made when a request has
    /// none: living `ttl`, or for the browser's session when zero (Gateway API's
    /// `sessionPersistence`).
    NamedCookie {
        name: String,
        ttl: std::time::Duration,
    },
    Header {
        name: String,
        terminal: bool,
    },
    QueryParameter {
        name: String,
        terminal: bool,
    },
    SourceIp {
        terminal: bool,
    },
}
