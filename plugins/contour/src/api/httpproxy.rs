//! `HTTPProxy` (`projectcontour.io/v1`).
//!
//! Fields Isobar does not implement yet are kept in `unsupported` maps rather than
//! dropped, so a source can warn about them (`IgnoredField`) instead of silently
//! routing differently from Contour.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// Fields present in a manifest that this version of Isobar does not act on.
pub type Unsupported = BTreeMap<String, serde_json::Value>;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HTTPProxy {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: HTTPProxySpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPProxySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualhost: Option<VirtualHost>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub includes: Vec<Include>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcpproxy: Option<Box<TcpProxy>>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// `spec.tcpproxy`: TCP forwarding for a TLS vhost (terminated or passed through).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpProxy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_policy: Option<LoadBalancerPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<RouteService>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<TcpProxyInclude>,
    /// Deprecated spelling of `include`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub includes: Option<TcpProxyInclude>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_policy: Option<TcpHealthCheckPolicy>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpProxyInclude {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpHealthCheckPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_threshold_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_threshold_count: Option<i64>,
}

/// `spec.virtualhost.tls`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    /// `name` (the proxy's namespace) or `namespace/name` (needs a delegation).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub secret_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passthrough: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_validation: Option<Box<ClientValidation>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_fallback_certificate: bool,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientValidation {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub ca_secret: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_client_cert_validation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_client_certificate: Option<ClientCertificateDetails>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional_client_certificate: bool,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub crl_secret: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crl_only_verify_leaf_cert: bool,
}

/// Which parts of a client certificate go upstream in `X-Forwarded-Client-Cert`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificateDetails {
    #[serde(default)]
    pub subject: bool,
    #[serde(default)]
    pub cert: bool,
    #[serde(default)]
    pub chain: bool,
    #[serde(default)]
    pub dns: bool,
    #[serde(default)]
    pub uri: bool,
}

/// Upstream certificate verification of a `tls`/`h2` service.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamValidation {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub ca_secret: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub subject_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_names: Vec<String>,
}

/// `TLSCertificateDelegation` (`projectcontour.io/v1`): lets other namespaces use secrets
/// of this one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TLSCertificateDelegation {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TLSCertificateDelegationSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TLSCertificateDelegationSpec {
    #[serde(default)]
    pub delegations: Vec<CertificateDelegation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateDelegation {
    pub secret_name: String,
    /// Namespaces allowed to use the secret; `*` allows all.
    #[serde(default)]
    pub target_namespaces: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualHost {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub fqdn: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_allow_policy: Vec<IpFilterPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_deny_policy: Vec<IpFilterPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors_policy: Option<Box<CorsPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_policy: Option<Box<RateLimitPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// External authorization of every request (a root proxy that terminates TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Box<AuthorizationServer>>,
    /// Issuers whose JWTs routes may require (a root proxy that terminates TLS).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jwt_providers: Vec<JwtProvider>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Include {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MatchCondition>,
}

// Its policies are boxed: most routes set none of them, and inline they made
// every route about 1 KB before it held anything (20 MB at 10,000 two-route proxies).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MatchCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<RouteService>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_websockets: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub permit_insecure: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_policy: Option<Box<TimeoutPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<Box<RetryPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_rewrite_policy: Option<Box<PathRewritePolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_headers_policy: Option<Box<HeadersPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers_policy: Option<Box<HeadersPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_redirect_policy: Option<Box<RedirectPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_response_policy: Option<Box<DirectResponsePolicy>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_allow_policy: Vec<IpFilterPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_deny_policy: Vec<IpFilterPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_policy: Option<Box<LoadBalancerPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_policy: Option<Box<HealthCheckPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_policy: Option<Box<RateLimitPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_redirect_policy: Option<Box<InternalRedirectPolicy>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookie_rewrite_policies: Vec<CookieRewritePolicy>,
    /// Whether (and with what context) requests to this route are authorized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_policy: Option<Box<AuthorizationPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt_verification_policy: Option<Box<JwtVerificationPolicy>>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// One entry of `conditions`: a path condition (`prefix`, `exact` or `regex`), a header
/// or a query parameter match.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<Box<HeaderMatchCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_parameter: Option<Box<QueryParameterMatchCondition>>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatchCondition {
    /// Required, as Contour's CRD has it (a condition without one is refused on read).
    pub name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub present: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notpresent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notcontains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notexact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    // The lower-case spellings are contour.yaml's (its `defaultGlobalRateLimitPolicy`).
    #[serde(
        default,
        alias = "ignorecase",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub ignore_case: bool,
    #[serde(
        default,
        alias = "treatmissingasempty",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub treat_missing_as_empty: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueryParameterMatchCondition {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_case: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub present: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteService {
    pub name: String,
    pub port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mirror: bool,
    /// `h2`, `h2c` or `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<Box<UpstreamValidation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_start_policy: Option<Box<SlowStartPolicy>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookie_rewrite_policies: Vec<CookieRewritePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_headers_policy: Option<Box<HeadersPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers_policy: Option<Box<HeadersPolicy>>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// Kubernetes treats an explicit `null` like an absent field.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    /// Every stored proxy pays for its fields before it sets any: the rarely set
    /// policies are boxed so that a plain proxy stays small.
    #[test]
    fn a_proxy_that_sets_little_costs_little() {
        let route = std::mem::size_of::<super::Route>();
        let proxy = std::mem::size_of::<super::HTTPProxy>();
        assert!(route <= 256, "a Route is {route} bytes");
        assert!(proxy <= 1024, "an HTTPProxy is {proxy} bytes");
    }
}
