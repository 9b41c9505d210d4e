//! ExtensionServices (`projectcontour.io/v1alpha1`) as filters use them: each valid one
//! is an extension cluster, `extension/<namespace>/<name>`, that an authorization
//! server, a rate limit service or a trace collector is called through, with Contour's
//! rules for what makes one valid. Sources resolve the ones their objects name here, the
//! `extension-service` source writes every one's status and cluster.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::api::{ExtensionCircuitBreakers, ExtensionService, ExtensionServiceSpec, TimeoutPolicy};
use isobar_sdk::Objects;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir;
use isobar_sdk::plugin::BuildContext;

mod settings;

pub use settings::{
    AllowedHeader, AuthPolicy, CustomTag, DEFAULT_MAX_REQUEST_BYTES, GlobalExtAuth, HttpSettings,
    RateLimitService, RequestBody, Tracing, authorization,
};

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
    let parsed = isobar_sdk::policy::timeout(text)?;
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
    let (response_timeout, idle_connection) = timeouts(&policy, &mut error);
    let cluster = cluster_name(namespace, name);
    let mut options = ir::ClusterOptions {
        protocol: Some(ir::UpstreamProtocol::H2),
        idle_connection_timeout: idle_connection,
        ..Default::default()
    };
    options.circuit_breakers = spec
        .circuit_breaker_policy
        .as_ref()
        .and_then(circuit_breakers);
    let mut warnings = Vec::new();
    options.lb_policy = lb_policy(spec, &mut warnings);
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
        let checked = check_upstream_validation(ctx, namespace, v, &names);
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
    let (localities, first) = service_localities(ctx, namespace, spec, &mut error);
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

/// Its `timeoutPolicy`'s response and idle connection timeouts; a timeout that does not
/// parse is an error.
fn timeouts(
    policy: &TimeoutPolicy,
    error: &mut impl FnMut(ConditionType, Reason, String),
) -> (Option<Duration>, Option<Duration>) {
    let (mut response, mut idle_connection) = (None, None);
    for (field, text) in [
        ("response", policy.response.as_deref()),
        ("idle", policy.idle.as_deref()),
        ("idle connection", policy.idle_connection.as_deref()),
    ] {
        match timeout_setting(text.unwrap_or_default()) {
            Ok(value) if field == "response" => response = value,
            Ok(value) if field == "idle connection" => idle_connection = value,
            Ok(_) => {}
            Err(e) => error(
                ConditionType::SpecError,
                Reason::TimeoutPolicyNotValid,
                format!("spec.timeoutPolicy failed to parse: error parsing {field} timeout: {e}"),
            ),
        }
    }
    (response, idle_connection)
}

/// Its circuit breakers: the positive limits set (none: Envoy's defaults).
fn circuit_breakers(b: &ExtensionCircuitBreakers) -> Option<Box<ir::CircuitBreakers>> {
    let limit = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0);
    Some(Box::new(ir::CircuitBreakers {
        max_connections: limit(b.max_connections),
        max_pending_requests: limit(b.max_pending_requests),
        max_requests: limit(b.max_requests),
        max_retries: limit(b.max_retries),
        per_host_max_connections: limit(b.per_host_max_connections),
        retry_budget: None,
    }))
    .filter(|b| **b != ir::CircuitBreakers::default())
}

/// Its load balancer: round robin unless it names one an extension cluster has
/// (`Cookie` and `RequestHash` are warned about and ignored).
fn lb_policy(spec: &ExtensionServiceSpec, warnings: &mut Vec<String>) -> ir::LbPolicy {
    let strategy = spec
        .load_balancer_policy
        .as_ref()
        .map(|p| p.strategy.as_str());
    match strategy {
        Some("WeightedLeastRequest") => ir::LbPolicy::LeastRequest,
        Some("Random") => ir::LbPolicy::Random,
        Some(strategy @ ("Cookie" | "RequestHash")) => {
            warnings.push(format!("ignoring field \".Spec.LoadBalancerPolicy\"; {strategy} load balancer policy is not supported for ExtensionClusters"));
            ir::LbPolicy::RoundRobin
        }
        _ => ir::LbPolicy::RoundRobin,
    }
}

/// An ExtensionService's `upstreamValidation` checked (its subject names `names`, the
/// first being the SNI): the CA bundle to validate with, or why it cannot be used.
fn check_upstream_validation(
    ctx: &BuildContext<'_>,
    namespace: &str,
    v: &crate::api::UpstreamValidation,
    names: &[String],
) -> Result<ir::PemBundle, (Reason, String)> {
    let first_matches = v.subject_names.first().is_none_or(|f| *f == v.subject_name);
    if v.subject_name.is_empty() {
        Err((
            Reason::TLSUpstreamValidation,
            "TLS upstream validation policy error: missing subject alternative name".to_string(),
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
        .any(|n| !isobar_sdk::headers::is_header_value(n) || n.contains(char::is_whitespace))
    {
        Err((
            Reason::TLSUpstreamValidation,
            "TLS upstream validation policy error: subject names must be host names".to_string(),
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
    }
}

/// The Services an ExtensionService sends to, as the localities of its cluster (equal
/// shares when no weight is set), and the first one's (name, port, port name); each that
/// cannot be used is reported through `error`.
fn service_localities(
    ctx: &BuildContext<'_>,
    namespace: &str,
    spec: &ExtensionServiceSpec,
    error: &mut impl FnMut(ConditionType, Reason, String),
) -> (Vec<ir::Locality>, Option<(String, i32, String)>) {
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
    (localities, first)
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

/// What the objects calling an ExtensionService of `namespace` read of it, as a digest
/// (see `Claim::face`): whether it is valid, its SNI and its response timeout. It is
/// taken over every field of the spec these depend on and the Services it names as
/// `objects` has them (a change to a Secret or a delegation rebuilds everything
/// anyway); its balancing and circuit breakers, read only by its own cluster, are left
/// out, and so are the fields it ignores.
pub fn face(objects: &Objects, namespace: &str, spec: &ExtensionServiceSpec) -> u64 {
    let read = ExtensionServiceSpec {
        services: spec.services.clone(),
        upstream_validation: spec.upstream_validation.clone(),
        protocol: spec.protocol.clone(),
        timeout_policy: spec.timeout_policy.clone(),
        protocol_version: spec.protocol_version.clone(),
        ..Default::default()
    };
    let mut hasher = std::hash::DefaultHasher::new();
    serde_json::to_string(&read)
        .unwrap_or_default()
        .hash(&mut hasher);
    for target in &spec.services {
        let service = objects.service(namespace, &target.name);
        service
            .map(|s| (&s.ports, &s.external_name))
            .hash(&mut hasher);
    }
    hasher.finish()
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
