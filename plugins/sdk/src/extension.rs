//! ExtensionServices (`projectcontour.io/v1alpha1`) as filters use them: each valid one
//! is an extension cluster, `extension/<namespace>/<name>`, that an authorization
//! server, a rate limit service or a trace collector is called through, with Contour's
//! rules for what makes one valid. Sources resolve the ones their objects name here, the
//! `extension-service` source writes every one's status and cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::{ExtensionService, ExtensionServiceSpec, GlobalRateLimitPolicy};
use crate::condition::{ConditionType, Reason};
use crate::ir;
use crate::plugin::BuildContext;

/// The apiVersion an `extensionRef` may name (and the one it defaults to).
pub const API_VERSION: &str = "projectcontour.io/v1alpha1";

/// The cluster of ExtensionService `namespace/name`.
pub fn cluster_name(namespace: &str, name: &str) -> String {
    format!("extension/{namespace}/{name}")
}

/// The `:authority` of calls to `cluster`: the server name its certificate is checked
/// for, else the cluster's name with dots (Contour's).
pub fn authority(cluster: &str, sni: Option<&str>) -> String {
    match sni {
        Some(sni) if !sni.is_empty() => sni.to_string(),
        _ => cluster.replace('/', "."),
    }
}

/// `namespace/name` as contour.yaml names an ExtensionService; `default` without a
/// namespace, as Contour.
pub fn split_reference(reference: &str) -> (&str, &str) {
    match reference.split_once('/') {
        Some(("", name)) => ("default", name),
        Some((namespace, name)) => (namespace, name),
        None => ("default", reference),
    }
}

/// A timeout in Contour's extension syntax: `""` (and zero) for Envoy's default
/// (`None`), `infinity` for none (zero), else a duration.
pub fn timeout_setting(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if matches!(text, "infinity" | "infinite") {
        return Ok(Some(Duration::ZERO));
    }
    let parsed = crate::policy::timeout(text)?;
    Ok((!parsed.is_zero()).then_some(parsed))
}

/// One problem with an ExtensionService: an error (it is not served) or a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub error: bool,
    pub type_: ConditionType,
    pub reason: Reason,
    pub message: String,
}

/// A valid ExtensionService: its cluster, and what calls to it default to.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub cluster: ir::Cluster,
    /// The server name checked in its certificate (the first subject name).
    pub sni: Option<String>,
    /// `timeoutPolicy.response`: the default timeout of calls.
    pub response_timeout: Option<Duration>,
}

impl Resolved {
    /// A call to it with `timeout` (its own response timeout when `None`).
    pub fn grpc(&self, timeout: Option<Duration>) -> ir::GrpcService {
        ir::GrpcService {
            cluster: self.cluster.name.clone(),
            authority: authority(&self.cluster.name, self.sni.as_deref()),
            timeout: timeout.or(self.response_timeout),
        }
    }
}

/// Checks ExtensionService `namespace/name` and builds its cluster, as Contour does:
/// `None` when any error is found (every problem is returned, warnings too).
pub fn resolve(
    ctx: &BuildContext<'_>,
    namespace: &str,
    name: &str,
    spec: &ExtensionServiceSpec,
) -> (Option<Resolved>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut error = |type_, reason, message: String| {
        problems.push(Problem {
            error: true,
            type_,
            reason,
            message,
        })
    };
    let policy = spec.timeout_policy.clone().unwrap_or_default();
    let mut response_timeout = None;
    let mut idle_connection = None;
    for (field, text) in [
        ("response", policy.response.as_deref()),
        ("idle", policy.idle.as_deref()),
        ("idle connection", policy.idle_connection.as_deref()),
    ] {
        match timeout_setting(text.unwrap_or_default()) {
            Ok(value) if field == "response" => response_timeout = value,
            Ok(value) if field == "idle connection" => idle_connection = value,
            Ok(_) => {}
            Err(e) => error(
                ConditionType::SpecError,
                Reason::TimeoutPolicyNotValid,
                format!("spec.timeoutPolicy failed to parse: error parsing {field} timeout: {e}"),
            ),
        }
    }
    let cluster = cluster_name(namespace, name);
    let mut options = ir::ClusterOptions {
        protocol: Some(ir::UpstreamProtocol::H2),
        idle_connection_timeout: idle_connection,
        ..Default::default()
    };
    if let Some(b) = &spec.circuit_breaker_policy {
        let limit = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0);
        options.circuit_breakers = Some(Box::new(ir::CircuitBreakers {
            max_connections: limit(b.max_connections),
            max_pending_requests: limit(b.max_pending_requests),
            max_requests: limit(b.max_requests),
            max_retries: limit(b.max_retries),
            per_host_max_connections: limit(b.per_host_max_connections),
            retry_budget: None,
        }))
        .filter(|b| **b != ir::CircuitBreakers::default());
    }
    let mut warnings = Vec::new();
    let strategy = spec
        .load_balancer_policy
        .as_ref()
        .map(|p| p.strategy.as_str());
    options.lb_policy = match strategy {
        Some("WeightedLeastRequest") => ir::LbPolicy::LeastRequest,
        Some("Random") => ir::LbPolicy::Random,
        Some(strategy @ ("Cookie" | "RequestHash")) => {
            warnings.push(format!("ignoring field \".Spec.LoadBalancerPolicy\"; {strategy} load balancer policy is not supported for ExtensionClusters"));
            ir::LbPolicy::RoundRobin
        }
        _ => ir::LbPolicy::RoundRobin,
    };
    if policy.idle.as_deref().is_some_and(|s| !s.is_empty()) {
        warnings.push("ignoring field \".Spec.TimeoutPolicy.Idle\"; idle timeouts are not supported for ExtensionClusters".to_string());
    }
    match spec.protocol.as_deref() {
        None | Some("") | Some("h2") => {}
        Some("h2c") => options.protocol = Some(ir::UpstreamProtocol::H2c),
        // Clear-text HTTP/1.1: an HTTP authorization server (Contour's main).
        Some("http/1.1") => options.protocol = None,
        Some(other) => error(
            ConditionType::SpecError,
            Reason::UnsupportedProtocol,
            format!("unsupported protocol {other:?}: must be h2, h2c or http/1.1"),
        ),
    }
    match spec.protocol_version.as_deref() {
        None | Some("") | Some("v3") => {}
        Some(other) => error(
            ConditionType::SpecError,
            Reason::UnsupportedProtocol,
            format!("unsupported protocolVersion {other:?}: must be v3"),
        ),
    }
    let mut sni = None;
    if let Some(v) = &spec.upstream_validation {
        let mut names: Vec<String> = v.subject_names.clone();
        if !v.subject_name.is_empty() && !names.contains(&v.subject_name) {
            names.insert(0, v.subject_name.clone());
        }
        let first_matches = v.subject_names.first().is_none_or(|f| *f == v.subject_name);
        let checked = if v.subject_name.is_empty() {
            Err((
                Reason::TLSUpstreamValidation,
                "TLS upstream validation policy error: missing subject alternative name"
                    .to_string(),
            ))
        } else if !first_matches {
            Err((
                Reason::TLSUpstreamValidation,
                format!(
                    "TLS upstream validation policy error: first entry of SubjectNames ({}) does not match SubjectName ({})",
                    v.subject_names
                        .first()
                        .map(String::as_str)
                        .unwrap_or_default(),
                    v.subject_name
                ),
            ))
        } else if names
            .iter()
            .any(|n| !crate::headers::is_header_value(n) || n.contains(char::is_whitespace))
        {
            Err((
                Reason::TLSUpstreamValidation,
                "TLS upstream validation policy error: subject names must be host names"
                    .to_string(),
            ))
        } else {
            ctx.ca_bundle(namespace, &v.ca_secret)
                .map_err(|(reason, message)| match reason {
                    Reason::DelegationNotPermitted => (
                        Reason::CACertificateNotDelegated,
                        format!(
                            "service.UpstreamValidation.CACertificate Secret \"{}\" is not configured for certificate delegation",
                            qualified(&v.ca_secret, namespace)
                        ),
                    ),
                    _ => (
                        Reason::TLSUpstreamValidation,
                        format!("TLS upstream validation policy error: invalid CA {message}"),
                    ),
                })
        };
        match checked {
            Ok(ca) => {
                sni = names.first().cloned();
                options.sni = sni.clone();
                options.upstream_validation = Some(Box::new(ir::UpstreamValidation {
                    ca,
                    subject_names: names,
                    subject_uris: Vec::new(),
                }));
                if options.protocol != Some(ir::UpstreamProtocol::H2) {
                    let protocol = spec.protocol.as_deref().unwrap_or("h2c");
                    error(
                        ConditionType::SpecError,
                        Reason::InconsistentProtocol,
                        format!("upstream TLS validation not supported for {protocol:?} protocol"),
                    );
                }
            }
            Err((reason, message)) => {
                let type_ = if reason == Reason::CACertificateNotDelegated {
                    ConditionType::TLSError
                } else {
                    ConditionType::SpecError
                };
                error(type_, reason, message);
                return (None, finish(problems, warnings));
            }
        }
    }
    let mut localities = Vec::new();
    let mut first = None;
    if spec.services.is_empty() {
        error(
            ConditionType::ServiceError,
            Reason::ServiceUnresolvedReference,
            "spec.services must name at least one Service".to_string(),
        );
    }
    for target in &spec.services {
        let unresolved =
            |why: String| format!("unresolved service \"{namespace}/{}\": {why}", target.name);
        let Some(service) = ctx.store().service(namespace, &target.name) else {
            error(
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                unresolved(format!("service \"{namespace}/{}\" not found", target.name)),
            );
            continue;
        };
        let wanted = target.port.to_string();
        let port = service
            .ports
            .iter()
            .find(|p| i64::from(p.port) == target.port || p.name.as_deref() == Some(&wanted));
        let Some(port) = port else {
            error(
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                unresolved(format!(
                    "port \"{}\" on service \"{namespace}/{}\" not matched",
                    target.port, target.name
                )),
            );
            continue;
        };
        if let Some(protocol) = &port.not_tcp {
            error(
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                unresolved(format!("unsupported service protocol \"{protocol}\"")),
            );
            continue;
        }
        if service.external_name.is_some() {
            error(
                ConditionType::ServiceError,
                Reason::UnsupportedServiceType,
                format!(
                    "Service \"{namespace}/{}\" is of unsupported type \"ExternalName\".",
                    target.name
                ),
            );
            continue;
        }
        let weight = target
            .weight
            .and_then(|w| u32::try_from(w).ok())
            .unwrap_or(0);
        let port_name = port.name.as_deref().unwrap_or_default().to_string();
        first.get_or_insert((target.name.clone(), port.port, port_name.clone()));
        localities.push(ir::Locality {
            namespace: String::new(),
            service: target.name.clone(),
            port_name,
            weight,
        });
    }
    // All weights unset (or zero): equal shares.
    if localities.iter().all(|l| l.weight == 0) {
        for l in &mut localities {
            l.weight = 1;
        }
    }
    let valid = !problems.iter().any(|p| p.error);
    let resolved = match first {
        Some((service, port, port_name)) if valid => Some(Resolved {
            cluster: ir::Cluster {
                alt_stat_name: cluster.replace('/', "_"),
                eds_name: cluster.clone(),
                name: cluster,
                namespace: namespace.to_string(),
                service,
                port,
                port_name,
                options,
                localities,
            },
            sni,
            response_timeout,
        }),
        _ => None,
    };
    (resolved, finish(problems, warnings))
}

/// The cluster of a global setting's ExtensionService that cannot be served (missing
/// or invalid): the same name, HTTP/2, and no endpoints, so that the filters calling it
/// find it unavailable (and fail open or closed as configured) instead of Envoy
/// refusing a listener that names a cluster it does not have.
pub fn unavailable_cluster(namespace: &str, name: &str) -> ir::Cluster {
    let cluster = cluster_name(namespace, name);
    ir::Cluster {
        alt_stat_name: cluster.replace('/', "_"),
        eds_name: cluster.clone(),
        name: cluster,
        namespace: namespace.to_string(),
        service: String::new(),
        port: 0,
        port_name: String::new(),
        options: ir::ClusterOptions {
            protocol: Some(ir::UpstreamProtocol::H2c),
            ..Default::default()
        },
        localities: Vec::new(),
    }
}

/// ExtensionService `namespace/name` as a filter calls it, when it exists and is valid;
/// otherwise why not (Contour's message, for the object naming it).
pub fn lookup(ctx: &BuildContext<'_>, namespace: &str, name: &str) -> Option<Resolved> {
    // The whole store: a dry build (admission) keeps only the routing objects linked
    // to the one it judges.
    let service: &ExtensionService = ctx.store().get(namespace, name)?;
    resolve(ctx, namespace, name, &service.spec).0
}

fn qualified(reference: &str, namespace: &str) -> String {
    if reference.contains('/') {
        reference.to_string()
    } else {
        format!("{namespace}/{reference}")
    }
}

fn finish(mut problems: Vec<Problem>, warnings: Vec<String>) -> Vec<Problem> {
    problems.extend(warnings.into_iter().map(|message| Problem {
        error: false,
        type_: ConditionType::SpecError,
        reason: Reason::IgnoredField,
        message,
    }));
    problems
}

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
                    [one] if !crate::headers::is_header_value(match one {
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
        && (!path_prefix.starts_with('/') || !crate::headers::is_header_value(&path_prefix))
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
