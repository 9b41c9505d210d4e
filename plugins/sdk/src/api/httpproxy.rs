//! `HTTPProxy` (`projectcontour.io/v1`).
//!
//! Fields Isobar does not implement yet are kept in `unsupported` maps rather than
//! dropped, so a source can warn about them (`IgnoredField`) instead of silently
//! routing differently from Contour.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// `virtualhost.authorization` (and Contour's `globalExtAuth`): the ExtensionService
/// every request is checked with.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationServer {
    #[serde(default)]
    pub extension_ref: ExtensionServiceReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_policy: Option<AuthorizationPolicy>,
    /// How long a check may take (the ExtensionService's `timeoutPolicy.response`
    /// when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_timeout: Option<String>,
    /// Let requests through while the server cannot answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_open: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_request_body: Option<AuthorizationServerBufferSettings>,
    /// `grpc` (the default) or `http`: how the server is asked (Contour's main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<String>,
    /// An HTTP server's settings (`serviceType: http` only; Contour's main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_settings: Option<HttpAuthorizationServerSettings>,
}

/// How an HTTP authorization server is asked: its path prefix, the request headers it
/// sees and the headers of its answer that go upstream. Contour's `contour.yaml` spells the
/// keys in lower case (`pathprefix`, …), its resources in camel case; both are read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthorizationServerSettings {
    #[serde(default, alias = "pathprefix", skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(
        default,
        alias = "allowedauthorizationheaders",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_authorization_headers: Vec<AllowedHeader>,
    #[serde(
        default,
        alias = "allowedupstreamheaders",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_upstream_headers: Vec<AllowedHeader>,
}

/// A header name matcher: exactly one of `exact`, `prefix`, `suffix`, `contains`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedHeader {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    #[serde(
        default,
        alias = "ignorecase",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub ignore_case: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionServiceReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: String,
}

/// Whether (and with what context) requests are authorized: on a vhost, the default of
/// its routes; on a route, its own.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationPolicy {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
}

/// The request body sent with each check.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationServerBufferSettings {
    /// At most this many bytes (1024 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_partial_message: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pack_as_bytes: bool,
}

/// A JWT issuer and where its keys are.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtProvider {
    #[serde(default)]
    pub name: String,
    /// Routes without a `jwtVerificationPolicy` require this provider.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    #[serde(default, rename = "remoteJWKS")]
    pub remote_jwks: RemoteJwks,
    /// Keys from a Secret of the proxy's namespace (Contour's main).
    #[serde(default, rename = "localJWKS", skip_serializing_if = "Option::is_none")]
    pub local_jwks: Option<LocalJwks>,
    /// Pass the token on upstream.
    #[serde(
        default,
        rename = "forwardJWT",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub forward_jwt: bool,
}

/// A JWKS held by a Secret of the proxy's namespace, under `key` (Contour's main).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalJwks {
    pub secret_name: String,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteJwks {
    #[serde(default)]
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<UpstreamValidation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_lookup_family: Option<String>,
}

/// A route's JWT requirement: a provider by name, or none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtVerificationPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

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
