//! HTTPProxy's route and service policies: CORS, rate limits, redirects, rewrites,
//! load balancing, health checks, timeouts, retries and headers.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorsPolicy {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_credentials: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_private_network: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_origin: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalRateLimitPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalRateLimitPolicy>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// Descriptors sent to the global rate limit service (Contour's `rateLimitService`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalRateLimitPolicy {
    /// On a vhost: not the configured default policy; on a route: not the vhost's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<RateLimitDescriptor>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitDescriptor {
    #[serde(default)]
    pub entries: Vec<RateLimitDescriptorEntry>,
}

/// One entry of a descriptor: exactly one field set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitDescriptorEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generic_key: Option<GenericKeyDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header: Option<RequestHeaderDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_value_match: Option<RequestHeaderValueMatchDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_address: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenericKeyDescriptor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestHeaderDescriptor {
    #[serde(default)]
    pub header_name: String,
    #[serde(default)]
    pub descriptor_key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestHeaderValueMatchDescriptor {
    #[serde(default)]
    pub headers: Vec<HeaderMatchCondition>,
    /// Whether the headers must match (true, the default) or not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_match: Option<bool>,
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalRateLimitPolicy {
    #[serde(default)]
    pub requests: i64,
    #[serde(default)]
    pub unit: String,
    #[serde(default)]
    pub burst: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_status_code: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub response_headers_to_add: Vec<HeaderValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InternalRedirectPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_internal_redirects: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirect_response_codes: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_cross_scheme_redirect: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deny_repeated_route_redirect: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CookieRewritePolicy {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_rewrite: Option<ValueRewrite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_rewrite: Option<ValueRewrite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValueRewrite {
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerPolicy {
    #[serde(default)]
    pub strategy: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_hash_policies: Vec<RequestHashPolicy>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestHashPolicy {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_hash_options: Option<HeaderHashOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_parameter_hash_options: Option<QueryParameterHashOptions>,
    #[serde(
        default,
        rename = "hashSourceIP",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub hash_source_ip: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderHashOptions {
    #[serde(default)]
    pub header_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueryParameterHashOptions {
    #[serde(default)]
    pub parameter_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckPolicy {
    #[serde(default)]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_threshold_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_threshold_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_statuses: Vec<StatusRange>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusRange {
    pub start: i64,
    pub end: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlowStartPolicy {
    #[serde(default)]
    pub window: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_weight_percent: Option<i64>,
}

/// One CIDR of an `ipAllowPolicy` / `ipDenyPolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpFilterPolicy {
    /// `Peer` (the directly connected client) or `Remote` (from `X-Forwarded-For`).
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub cidr: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_connection: Option<String>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retriable_status_codes: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PathRewritePolicy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace_prefix: Vec<ReplacePrefix>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplacePrefix {
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub replacement: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadersPolicy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<HeaderValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValue {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedirectPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectResponsePolicy {
    #[serde(default)]
    pub status_code: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}
