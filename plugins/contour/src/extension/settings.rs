//! The contour.yaml settings that call an ExtensionService (the global rate limit
//! service, global external authorization, tracing) and an HTTPProxy's authorization,
//! resolved to what the IR holds.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::GlobalRateLimitPolicy;
use isobar_sdk::condition::Reason;
use isobar_sdk::ir;
use isobar_sdk::plugin::BuildContext;

use super::*;

/// Contour's `rateLimitService`: the global rate limit service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RateLimitService {
    /// `namespace/name` of the ExtensionService.
    pub extension_service: String,
    pub domain: String,
    pub fail_open: bool,
    #[serde(rename = "enableXRateLimitHeaders")]
    pub enable_x_rate_limit_headers: bool,
    pub enable_resource_exhausted_code: bool,
    /// Descriptors of root HTTPProxy vhosts that set no global policy of their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_global_rate_limit_policy: Option<GlobalRateLimitPolicy>,
}

/// Contour's `globalExtAuth`: external authorization of every vhost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GlobalExtAuth {
    /// `namespace/name` of the ExtensionService.
    pub extension_service: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_policy: Option<AuthPolicy>,
    pub response_timeout: String,
    pub fail_open: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with_request_body: Option<RequestBody>,
    /// `grpc` (the default) or `http` (Contour's main).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_type: String,
    /// An HTTP server's settings (Contour's main; `pathprefix`, … as its `contour.yaml`
    /// spells them, or camel case).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_settings: Option<HttpSettings>,
}

/// `globalExtAuth.httpSettings`, its keys checked (see
/// [`crate::api::HttpAuthorizationServerSettings`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct HttpSettings {
    #[serde(alias = "pathprefix", skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(
        alias = "allowedauthorizationheaders",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_authorization_headers: Vec<AllowedHeader>,
    #[serde(
        alias = "allowedupstreamheaders",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_upstream_headers: Vec<AllowedHeader>,
}

/// A header name matcher of [`HttpSettings`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AllowedHeader {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    #[serde(alias = "ignorecase")]
    pub ignore_case: bool,
}

impl HttpSettings {
    fn to_api(&self) -> crate::api::HttpAuthorizationServerSettings {
        let headers = |list: &[AllowedHeader]| {
            list.iter()
                .map(|h| crate::api::AllowedHeader {
                    exact: h.exact.clone(),
                    prefix: h.prefix.clone(),
                    suffix: h.suffix.clone(),
                    contains: h.contains.clone(),
                    ignore_case: h.ignore_case,
                })
                .collect()
        };
        crate::api::HttpAuthorizationServerSettings {
            path_prefix: self.path_prefix.clone(),
            allowed_authorization_headers: headers(&self.allowed_authorization_headers),
            allowed_upstream_headers: headers(&self.allowed_upstream_headers),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AuthPolicy {
    pub disabled: bool,
    pub context: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RequestBody {
    /// 0: 1024, as for an HTTPProxy's `withRequestBody`.
    pub max_request_bytes: u32,
    pub allow_partial_message: bool,
    pub pack_as_bytes: bool,
}

/// Contour's `tracing`: spans to an OpenTelemetry collector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Tracing {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_pod_detail: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overall_sampling: Option<String>,
    /// Percentage of requests carrying `x-client-trace-id` traced (Contour's main).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_sampling: Option<String>,
    /// Percentage of requests traced at random (Contour's main).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub random_sampling: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_path_tag_length: Option<u32>,
    pub custom_tags: Vec<CustomTag>,
    /// `namespace/name` of the ExtensionService.
    pub extension_service: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CustomTag {
    pub tag_name: String,
    pub literal: String,
    pub request_header_name: String,
}

/// Bytes of the request body sent with a check when `maxRequestBytes` is not set.
pub const DEFAULT_MAX_REQUEST_BYTES: u32 = 1024;

impl RequestBody {
    pub fn to_ir(&self) -> ir::RequestBody {
        ir::RequestBody {
            max_request_bytes: if self.max_request_bytes == 0 {
                DEFAULT_MAX_REQUEST_BYTES
            } else {
                self.max_request_bytes
            },
            allow_partial_message: self.allow_partial_message,
            pack_as_bytes: self.pack_as_bytes,
        }
    }
}

impl GlobalExtAuth {
    /// The ExtensionService (namespace, name) it names.
    pub fn service(&self) -> (&str, &str) {
        split_reference(&self.extension_service)
    }

    /// As an HTTPProxy's `authorization` (its `extensionRef` in the service's namespace).
    pub fn as_authorization(&self) -> crate::api::AuthorizationServer {
        let (namespace, name) = self.service();
        crate::api::AuthorizationServer {
            extension_ref: crate::api::ExtensionServiceReference {
                api_version: None,
                namespace: Some(namespace.to_string()),
                name: name.to_string(),
            },
            auth_policy: self
                .auth_policy
                .as_ref()
                .map(|p| crate::api::AuthorizationPolicy {
                    disabled: p.disabled,
                    context: p.context.clone(),
                }),
            response_timeout: (!self.response_timeout.is_empty())
                .then(|| self.response_timeout.clone()),
            fail_open: self.fail_open,
            service_type: (!self.service_type.is_empty()).then(|| self.service_type.clone()),
            http_settings: self.http_settings.as_ref().map(HttpSettings::to_api),
            with_request_body: self.with_request_body.as_ref().map(|b| {
                crate::api::AuthorizationServerBufferSettings {
                    max_request_bytes: Some(b.max_request_bytes).filter(|n| *n > 0),
                    allow_partial_message: b.allow_partial_message,
                    pack_as_bytes: b.pack_as_bytes,
                }
            }),
        }
    }
}

/// The HTTP side of an `authorization` (`serviceType: http`), checked as Contour's main
/// checks it; `None` for a gRPC server.
fn http_authz(
    server: &crate::api::AuthorizationServer,
) -> Result<Option<Box<ir::HttpAuthz>>, (Reason, String)> {
    match server.service_type.as_deref() {
        None | Some("") | Some("grpc") => {
            if server.http_settings.is_some() {
                return Err((
                    Reason::AuthServiceTypeInvalid,
                    "Spec.Virtualhost.Authorization.HTTPSettings can only be set when serviceType is 'http'".to_string(),
                ));
            }
            return Ok(None);
        }
        Some("http") => {}
        Some(other) => {
            return Err((
                Reason::AuthServiceTypeInvalid,
                format!("Spec.Virtualhost.Authorization.ServiceType {other:?} is not grpc or http"),
            ));
        }
    }
    if server
        .auth_policy
        .as_ref()
        .is_some_and(|p| !p.context.is_empty())
    {
        return Err((
            Reason::AuthContextForHTTP,
            "Spec.Virtualhost.Authorization.AuthPolicy.Context are only applied to grpc service type".to_string(),
        ));
    }
    let settings = server.http_settings.clone().unwrap_or_default();
    let matchers = |headers: &[crate::api::AllowedHeader]| {
        headers
            .iter()
            .map(|h| {
                let set: Vec<ir::StringMatch> = [
                    h.exact.clone().map(ir::StringMatch::Exact),
                    h.prefix.clone().map(ir::StringMatch::Prefix),
                    h.suffix.clone().map(ir::StringMatch::Suffix),
                    h.contains.clone().map(ir::StringMatch::Contains),
                ]
                .into_iter()
                .flatten()
                .collect();
                match set.as_slice() {
                    [one] if !isobar_sdk::headers::is_header_value(match one {
                        ir::StringMatch::Exact(v)
                        | ir::StringMatch::Prefix(v)
                        | ir::StringMatch::Suffix(v)
                        | ir::StringMatch::Contains(v)
                        | ir::StringMatch::Regex(v) => v,
                    }) =>
                    {
                        Err((
                            Reason::AuthBadAllowedHeader,
                            "Spec.Virtualhost.Authorization.HTTPSettings: an allowedHeader is not a valid value".to_string(),
                        ))
                    }
                    [one] => Ok((one.clone(), h.ignore_case)),
                    [] => Err((
                        Reason::AuthBadAllowedHeader,
                        "one of prefix, suffix, exact or contains is required for each allowedHeader".to_string(),
                    )),
                    _ => Err((
                        Reason::AuthBadAllowedHeader,
                        "only one of prefix, suffix, exact, and contains should be set in the allowedHeader".to_string(),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let path_prefix = settings.path_prefix.clone().unwrap_or_default();
    if !path_prefix.is_empty()
        && (!path_prefix.starts_with('/') || !isobar_sdk::headers::is_header_value(&path_prefix))
    {
        return Err((
            Reason::AuthServiceTypeInvalid,
            format!(
                "Spec.Virtualhost.Authorization.HTTPSettings.PathPrefix {path_prefix:?} must start with /"
            ),
        ));
    }
    Ok(Some(Box::new(ir::HttpAuthz {
        path_prefix,
        allowed_headers: matchers(&settings.allowed_authorization_headers)?,
        allowed_upstream_headers: matchers(&settings.allowed_upstream_headers)?,
    })))
}

/// An `authorization` (a vhost's, or `globalExtAuth` as one) of an object in
/// `namespace`, as the `ext_authz` filter runs it, with Contour's checks in Contour's
/// order: its `extensionRef`'s apiVersion, the ExtensionService (valid), the response
/// timeout. The error is the reason and message for the object's `AuthError`.
pub fn authorization(
    ctx: &BuildContext<'_>,
    server: &crate::api::AuthorizationServer,
    namespace: &str,
) -> Result<ir::ExtAuthz, (Reason, String)> {
    let reference = &server.extension_ref;
    let version = reference.api_version.as_deref().unwrap_or(API_VERSION);
    if version != API_VERSION {
        return Err((
            Reason::AuthBadResourceVersion,
            format!(
                "Spec.Virtualhost.Authorization.extensionRef specifies an unsupported resource version {version:?}"
            ),
        ));
    }
    let service_namespace = reference
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(namespace);
    let Some(resolved) = lookup(ctx, service_namespace, &reference.name) else {
        return Err((
            Reason::ExtensionServiceNotFound,
            format!(
                "Spec.Virtualhost.Authorization.ServiceRef extension service \"{service_namespace}/{}\" not found",
                reference.name
            ),
        ));
    };
    let timeout =
        timeout_setting(server.response_timeout.as_deref().unwrap_or_default()).map_err(|e| {
            (
                Reason::AuthResponseTimeoutInvalid,
                format!("Spec.Virtualhost.Authorization.ResponseTimeout is invalid: {e}"),
            )
        })?;
    let http = http_authz(server)?;
    Ok(ir::ExtAuthz {
        service: resolved.grpc(timeout),
        http,
        fail_open: server.fail_open,
        with_request_body: server.with_request_body.as_ref().map(|b| ir::RequestBody {
            max_request_bytes: b
                .max_request_bytes
                .filter(|n| *n > 0)
                .unwrap_or(DEFAULT_MAX_REQUEST_BYTES),
            allow_partial_message: b.allow_partial_message,
            pack_as_bytes: b.pack_as_bytes,
        }),
    })
}
