//! The `ingress` source: `networking.k8s.io/v1` Ingress → IR.
//!
//! Reads: Ingress, Service. Writes: virtual hosts (one per rule host, `*` for none),
//! routes, clusters. Conditions: `HostNotValid`, `PathMatchConditionsNotValid`,
//! `ServiceUnresolvedReference` (the route then answers 503), `IgnoredField`.
//!
//! Path types follow Contour: `Exact` is an exact match; `Prefix` is a segment prefix
//! (`/foo` matches `/foo/bar`, not `/foobar`), with `/` a plain prefix;
//! `ImplementationSpecific` (the default) is a regex when the path holds any of `^+*[]%`,
//! else a string prefix.

use k8s_openapi::api::networking::v1::{HTTPIngressPath, IngressBackend};
use serde::Deserialize;

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::parse_host;
use isobar_sdk::ir::{
    PathMatch, Redirect, Route, RouteAction, RouteMatch, RoutePolicy, WeightedCluster,
};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, Ir, Kind, ObjectKey, Source, StatusReport};

mod annotations;

pub const NAME: &str = "ingress";

/// The `plugins.ingress` section of `contour.yaml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct IngressConfig {}

#[derive(Debug)]
pub struct IngressSource;

fn build(config: &serde_json::Value) -> Result<Box<dyn Source>, ConfigError> {
    let _config: IngressConfig = parse_config(config)?;
    Ok(Box::new(IngressSource))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Kubernetes Ingress (networking.k8s.io/v1) rules and default backends",
        factory: Factory::Source(build),
    }
}

const REGEX_CHARS: &[char] = &['^', '+', '*', '[', ']', '%'];

impl Source for IngressSource {
    fn kinds(&self) -> &'static [Kind] {
        &[Kind::Ingress, Kind::Service, Kind::EndpointSlice]
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        for (key, ingress) in ctx.ingresses() {
            status.touch(&key);
            let Some(spec) = ingress.spec.as_ref() else {
                continue;
            };
            let notes = annotations::read(&ingress.metadata, &key, status);
            if !notes.allow_http {
                // Served only over TLS, which this version does not terminate yet.
                status.warning(
                    &key,
                    ConditionType::SpecError,
                    Reason::IgnoredField,
                    "kubernetes.io/ingress.allow-http is \"false\": the Ingress is not served over HTTP",
                );
                continue;
            }
            let route = RouteBuilder {
                key: &key,
                notes: &notes,
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

fn require_slash(path: &str) -> Result<(), String> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(format!("path {path:?} must start with \"/\""))
    }
}

/// One Ingress's routes: its annotations apply to each.
struct RouteBuilder<'a> {
    key: &'a ObjectKey,
    notes: &'a annotations::Annotations,
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
            _ if self.notes.force_ssl_redirect => RouteAction::Redirect(Box::new(Redirect {
                scheme: Some("https".to_string()),
                status: 301,
                ..Default::default()
            })),
            Some(cluster) => {
                let name = cluster.name.clone();
                ir.add_cluster(cluster);
                RouteAction::Forward(vec![WeightedCluster {
                    cluster: name,
                    weight: 1,
                    ..Default::default()
                }])
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
            policy: policy.boxed(),
        };
        ir.add_route(&host.fqdn, route);
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
