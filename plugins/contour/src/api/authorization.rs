//! HTTPProxy's authorization: external authorization servers and JWT verification.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

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
