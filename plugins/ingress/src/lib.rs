//! The `ingress` source: `networking.k8s.io/v1` Ingress → IR.
//!
//! Reads: Ingress, Service, EndpointSlice, Secret. Writes: virtual hosts (one per rule
//! host, `*` for none), secure virtual hosts for the hosts of `spec.tls`, routes,
//! clusters. Conditions: `HostNotValid`, `PathMatchConditionsNotValid`,
//! `ServiceUnresolvedReference` (the route then answers 503), `SecretNotValid` and
//! `DelegationNotPermitted` (the host is then not served over HTTPS; plain HTTP is
//! unaffected), `IgnoredField`.
//!
//! TLS follows Contour: a `tls[]` entry serves its hosts (each must also be a rule host,
//! never `*`) over HTTPS with `secretName` (in the Ingress's namespace, or the one named
//! by `projectcontour.io/tls-cert-namespace`, or written `namespace/name`; another
//! namespace needs a TLSCertificateDelegation). Plain HTTP keeps serving the routes
//! unless `kubernetes.io/ingress.allow-http: "false"`; `ingress.kubernetes.io/
//! force-ssl-redirect: "true"` turns them into 301 redirects to HTTPS.
//!
//! Path types follow Contour: `Exact` is an exact match; `Prefix` is a segment prefix
//! (`/foo` matches `/foo/bar`, not `/foobar`), with `/` a plain prefix;
//! `ImplementationSpecific` (the default) is a regex when the path holds any of `^+*[]%`,
//! else a string prefix.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{HTTPIngressPath, Ingress, IngressBackend, IngressSpec};
use serde::{Deserialize, Serialize};

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::headers::DefaultHeaders;
use isobar_sdk::host::parse_host;
use isobar_sdk::ir::{
    DownstreamTls, HTTP_LISTENER, HTTPS_LISTENER, PathMatch, Redirect, Route, RouteAction,
    RouteMatch, RoutePolicy, SecureVirtualHost, ServedSecret, WeightedCluster,
};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, Claim, Ir, Kind, ObjectKey, Objects, Source, StatusReport};

mod annotations;

pub const NAME: &str = "ingress";

/// The `plugins.ingress` section of `contour.yaml` (set from Contour's `policy` section
/// when it has `applyToIngress`).
#[derive(Debug, Default, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct IngressConfig {
    /// Header changes of every backend's requests and responses.
    pub default_headers: DefaultHeaders,
}

#[derive(Debug)]
pub struct IngressSource {
    default_headers: DefaultHeaders,
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Source>, ConfigError> {
    let config: IngressConfig = parse_config(config)?;
    Ok(Box::new(IngressSource {
        default_headers: config.default_headers,
    }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Kubernetes Ingress (networking.k8s.io/v1) rules and default backends",
        factory: Factory::Source(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<IngressConfig>()),
    }
}

/// Contour's `policy` section: with `applyToIngress`, its default headers apply to
/// Ingress backends too.
fn from_top_level(contour: &serde_json::Value) -> isobar_sdk::plugin::FromTopLevel {
    let policy = isobar_sdk::headers::ContourPolicy::of(contour);
    let defaults = policy.defaults();
    let mut settings = serde_json::Map::new();
    if policy.apply_to_ingress
        && !defaults.is_empty()
        && let Ok(value) = serde_json::to_value(&defaults)
    {
        settings.insert("default-headers".into(), value);
    }
    isobar_sdk::plugin::FromTopLevel {
        settings: settings.into(),
        enable: None,
    }
}

isobar_sdk::inventory::submit! {
    isobar_sdk::plugin::TopLevelKeys { plugin: NAME, read: from_top_level }
}

const REGEX_CHARS: &[char] = &['^', '+', '*', '[', ']', '%'];

impl Source for IngressSource {
    fn local(&self) -> bool {
        true
    }

    fn kinds(&self) -> &'static [Kind] {
        &[Kind::Ingress]
    }

    fn reads(&self) -> &'static [Kind] {
        &[Kind::Service, Kind::EndpointSlice, Kind::Secret]
    }

    /// An Ingress claims the host of each rule (no host, and the default backend, is
    /// `*`) and names the Services of its backends (in its own namespace).
    fn claim(&self, objects: &Objects, key: &ObjectKey) -> Claim {
        let mut claim = Claim::default();
        let ingress = objects.get::<Ingress>(&key.namespace, &key.name);
        let Some(spec) = ingress.and_then(|i| i.spec.as_ref()) else {
            return claim;
        };
        let default = spec.default_backend.as_ref().map(|_| "");
        let rules = spec.rules.iter().flatten();
        let hosts = rules.clone().map(|r| r.host.as_deref().unwrap_or_default());
        for host in default.into_iter().chain(hosts) {
            if let Ok(host) = parse_host(host)
                && !claim.hosts.contains(&host.fqdn)
            {
                claim.hosts.push(host.fqdn);
            }
        }
        let paths = rules.filter_map(|r| r.http.as_ref()).flat_map(|h| &h.paths);
        let backends = spec.default_backend.iter().chain(paths.map(|p| &p.backend));
        for service in backends.filter_map(|b| b.service.as_ref()) {
            let id = (key.namespace.clone(), service.name.clone());
            if !claim.services.contains(&id) {
                claim.services.push(id);
            }
        }
        claim
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        for (key, ingress) in ctx.all::<Ingress>() {
            status.touch(&key);
            let Some(spec) = ingress.spec.as_ref() else {
                continue;
            };
            let notes = annotations::read(&ingress.metadata, &key, status);
            let secure = secure_hosts(ctx, status, &key, spec, &notes);
            if !notes.allow_http && secure.is_empty() {
                status.warning(
                    &key,
                    ConditionType::SpecError,
                    Reason::IgnoredField,
                    "kubernetes.io/ingress.allow-http is \"false\" and no host has TLS: the Ingress is served neither over HTTP nor over HTTPS",
                );
            }
            let route = RouteBuilder {
                key: &key,
                notes: &notes,
                secure: &secure,
                default_headers: &self.default_headers,
            };
            if let Some(backend) = &spec.default_backend {
                let path = PathMatch::Prefix("/".to_string());
                route.add(ctx, ir, status, "", path, "/", backend);
            }
            for rule in spec.rules.iter().flatten() {
                let host = rule.host.as_deref().unwrap_or_default();
                let Some(http) = &rule.http else { continue };
                for path in &http.paths {
                    let raw = path.path.as_deref().unwrap_or("/");
                    match path_match(path) {
                        Ok(m) => route.add(ctx, ir, status, host, m, raw, &path.backend),
                        Err(message) => status.error(
                            &key,
                            ConditionType::RouteError,
                            Reason::PathMatchConditionsNotValid,
                            message,
                        ),
                    }
                }
            }
        }
    }
}

fn path_match(path: &HTTPIngressPath) -> Result<PathMatch, String> {
    let raw = path.path.as_deref().unwrap_or_default();
    let raw = if raw.is_empty() { "/" } else { raw };
    match path.path_type.as_str() {
        "Exact" => {
            require_slash(raw)?;
            Ok(PathMatch::Exact(raw.to_string()))
        }
        "Prefix" => {
            require_slash(raw)?;
            let trimmed = raw.trim_end_matches('/');
            if trimmed.is_empty() {
                Ok(PathMatch::Prefix("/".to_string()))
            } else {
                Ok(PathMatch::SegmentPrefix(trimmed.to_string()))
            }
        }
        "ImplementationSpecific" | "" => {
            if raw.contains(REGEX_CHARS) {
                isobar_sdk::regex::check_re2(raw).map_err(|e| format!("path {e}"))?;
                Ok(PathMatch::Regex(raw.to_string()))
            } else {
                require_slash(raw)?;
                Ok(PathMatch::Prefix(raw.to_string()))
            }
        }
        other => Err(format!(
            "pathType {other:?} is not one of Exact, Prefix, ImplementationSpecific"
        )),
    }
}

/// An Exact or Prefix path: absolute, without `?` or `#` (the query and fragment are
/// never part of the path Envoy matches, and Envoy refuses them in a segment prefix) or
/// control characters.
fn require_slash(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("path {path:?} must start with \"/\""));
    }
    if path.chars().any(|c| c == '?' || c == '#' || c.is_control()) {
        return Err(format!(
            "path {path:?} must not hold ?, # or control characters"
        ));
    }
    Ok(())
}

/// The hosts an Ingress serves over HTTPS, each with its TLS and certificate.
type SecureHosts = BTreeMap<String, (DownstreamTls, ServedSecret)>;

fn secure_hosts(
    ctx: &BuildContext<'_>,
    status: &mut StatusReport,
    key: &ObjectKey,
    spec: &IngressSpec,
    notes: &annotations::Annotations,
) -> SecureHosts {
    let rule_hosts: BTreeSet<String> = spec
        .rules
        .iter()
        .flatten()
        .filter_map(|r| r.host.as_deref())
        .filter_map(|h| parse_host(h).ok())
        .map(|h| h.fqdn)
        .collect();
    let mut out = SecureHosts::new();
    for (index, tls) in spec.tls.iter().flatten().enumerate() {
        let Some(secret_name) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) else {
            continue;
        };
        let reference = match (&notes.tls_cert_namespace, secret_name.contains('/')) {
            (Some(ns), false) => format!("{ns}/{secret_name}"),
            _ => secret_name.to_string(),
        };
        let (sds, served) = match ctx.certificate(&key.namespace, &reference) {
            Ok(found) => found,
            Err((reason, message)) => {
                status.error(
                    key,
                    ConditionType::TLSError,
                    reason,
                    format!("spec.tls[{index}]: {message}; its hosts are not served over HTTPS"),
                );
                continue;
            }
        };
        for host in tls.hosts.iter().flatten() {
            let Ok(host) = parse_host(host) else { continue };
            if host.fqdn == "*" || !rule_hosts.contains(&host.fqdn) {
                continue;
            }
            out.entry(host.fqdn).or_insert_with(|| {
                (
                    DownstreamTls {
                        secret: sds.clone(),
                        min_version: notes.tls_min,
                        max_version: notes.tls_max,
                        alpn_http: true,
                        client_validation: None,
                    },
                    served.clone(),
                )
            });
        }
    }
    out
}

/// One Ingress's routes: its annotations apply to each.
struct RouteBuilder<'a> {
    key: &'a ObjectKey,
    notes: &'a annotations::Annotations,
    secure: &'a SecureHosts,
    default_headers: &'a DefaultHeaders,
}

impl RouteBuilder<'_> {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        ctx: &BuildContext<'_>,
        ir: &mut Ir,
        status: &mut StatusReport,
        host: &str,
        path: PathMatch,
        raw_path: &str,
        backend: &IngressBackend,
    ) {
        let key = self.key;
        let host = match parse_host(host) {
            Ok(host) => host,
            Err(message) => {
                status.error(
                    key,
                    ConditionType::VirtualHostError,
                    Reason::HostNotValid,
                    message,
                );
                return;
            }
        };
        let action = match backend_cluster(ctx, status, key, backend) {
            Some(cluster) => {
                let mut target = WeightedCluster {
                    cluster: cluster.name.clone(),
                    weight: 1,
                    ..Default::default()
                };
                self.default_headers.apply(
                    &mut target,
                    (&cluster.namespace, &cluster.service, cluster.port),
                );
                ir.add_cluster(cluster);
                RouteAction::Forward(vec![target])
            }
            None => RouteAction::DirectResponse {
                status: 503,
                body: None,
            },
        };
        let policy = RoutePolicy {
            websockets: self.notes.websocket_routes.contains(raw_path),
            ..self.notes.policy.clone()
        };
        let route = Route {
            matcher: RouteMatch {
                authority_regex: host.authority_regex,
                ..RouteMatch::path(path)
            },
            action,
            source: key.clone(),
            tie: None,
            policy: policy.boxed(),
        };
        if let Some((tls, secret)) = self.secure.get(&host.fqdn) {
            if let Some(secure) = ir.secure_virtual_hosts_mut(HTTPS_LISTENER) {
                secure
                    .entry(host.fqdn.clone())
                    .or_insert_with(|| SecureVirtualHost::new(&host.fqdn, Some(tls.clone())));
            }
            ir.add_secret(&tls.secret, secret.clone());
            ir.add_secure_route(HTTPS_LISTENER, &host.fqdn, route.clone());
        }
        if self.notes.force_ssl_redirect {
            ir.add_route(
                HTTP_LISTENER,
                &host.fqdn,
                Route {
                    action: RouteAction::Redirect(Box::new(Redirect {
                        scheme: Some("https".to_string()),
                        status: 301,
                        ..Default::default()
                    })),
                    policy: None,
                    ..route
                },
            );
        } else if self.notes.allow_http {
            ir.add_route(HTTP_LISTENER, &host.fqdn, route);
        }
    }
}

fn backend_cluster(
    ctx: &BuildContext<'_>,
    status: &mut StatusReport,
    key: &ObjectKey,
    backend: &IngressBackend,
) -> Option<isobar_sdk::ir::Cluster> {
    let Some(service) = &backend.service else {
        status.error(
            key,
            ConditionType::ServiceError,
            Reason::IgnoredField,
            "only Service backends are supported; resource backends are ignored",
        );
        return None;
    };
    let port = service.port.as_ref();
    let port = match (
        port.and_then(|p| p.number),
        port.and_then(|p| p.name.as_deref()),
    ) {
        (Some(n), _) => PortRef::Number(n),
        (None, Some(name)) => PortRef::Name(name),
        (None, None) => {
            status.error(
                key,
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                format!("backend Service {:?} has no port", service.name),
            );
            return None;
        }
    };
    match service_cluster(
        ctx.objects,
        &key.namespace,
        &service.name,
        port,
        Default::default(),
        ctx.external_names(),
    ) {
        Ok(cluster) => Some(cluster),
        Err(e) => {
            status.error(
                key,
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                e.to_string(),
            );
            None
        }
    }
}
