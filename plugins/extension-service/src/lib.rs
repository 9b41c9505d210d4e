//! The `extension-service` source: Contour's ExtensionServices
//! (`projectcontour.io/v1alpha1`) and the global settings that call one.
//!
//! Reads: ExtensionService, Service, Secret. Writes: one extension cluster per valid
//! ExtensionService (`extension/<namespace>/<name>`), and the IR's global HTTP
//! extensions from its settings (Contour's `globalExtAuth`, `rateLimitService`,
//! `tracing`). Conditions: each ExtensionService's `Valid`, with Contour's reasons.
//!
//! Contour reads the global settings' ExtensionServices once, at start-up, and will not
//! start while one is missing. Here they are read on every build: a global setting whose
//! ExtensionService is missing or invalid still runs its filter, against a cluster of
//! the same name without endpoints, so requests fail open or closed as configured (and
//! Envoy never refuses a listener naming a cluster it does not have); fixing the
//! ExtensionService fixes the filter, with no restart.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use isobar_contour::api::ExtensionService;
use isobar_contour::extension::{self, GlobalExtAuth, RateLimitService, Tracing};
use isobar_sdk::ir;
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{BuildContext, Claim, Ir, Kind, ObjectKey, Objects, Source, StatusReport};

pub const NAME: &str = "extension-service";

/// The `plugins.extension-service` section of `contour.yaml` (set from Contour's
/// top-level `globalExtAuth`, `rateLimitService` and `tracing`).
#[derive(Debug, Default, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ExtensionServiceConfig {
    /// External authorization of every vhost (Contour's `globalExtAuth`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_ext_auth: Option<GlobalExtAuth>,
    /// The global rate limit service (Contour's `rateLimitService`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit_service: Option<RateLimitService>,
    /// Spans to an OpenTelemetry collector (Contour's `tracing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<Tracing>,
}

#[derive(Debug)]
pub struct ExtensionServiceSource {
    config: ExtensionServiceConfig,
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Source>, ConfigError> {
    let config: ExtensionServiceConfig = parse_config(config)?;
    if let Some(t) = &config.tracing {
        for (key, value) in [
            ("overallSampling", &t.overall_sampling),
            ("clientSampling", &t.client_sampling),
            ("randomSampling", &t.random_sampling),
        ] {
            if let Some(s) = value
                && !s.parse::<f64>().is_ok_and(|v| (0.0..=100.0).contains(&v))
            {
                return Err(ConfigError(format!(
                    "tracing.{key}: {s:?} is not a percentage from 0 to 100"
                )));
            }
        }
    }
    Ok(Box::new(ExtensionServiceSource { config }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Contour ExtensionService (projectcontour.io/v1alpha1) extension clusters, and the global authorization, rate limit service and tracing that call them",
        factory: Factory::Source(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<ExtensionServiceConfig>()),
    }
}

/// Contour's extension service settings (`globalExtAuth`, `rateLimitService`,
/// `tracing`) configure the source, and enable it first among the sources.
fn from_top_level(contour: &serde_json::Value) -> isobar_sdk::plugin::FromTopLevel {
    let mut settings = serde_json::Map::new();
    for (key, ours) in [
        ("globalExtAuth", "global-ext-auth"),
        ("rateLimitService", "rate-limit-service"),
        ("tracing", "tracing"),
    ] {
        if let Some(value) = contour.get(key).filter(|v| !v.is_null()) {
            settings.insert(ours.into(), value.clone());
        }
    }
    let enable = (!settings.is_empty()).then_some(isobar_sdk::plugin::Enable::First);
    isobar_sdk::plugin::FromTopLevel {
        settings: settings.into(),
        enable,
    }
}

isobar_sdk::inventory::submit! {
    isobar_sdk::plugin::TopLevelKeys { plugin: NAME, read: from_top_level }
}

impl Source for ExtensionServiceSource {
    fn local(&self) -> bool {
        true
    }

    fn kinds(&self) -> &'static [Kind] {
        &[isobar_contour::EXTENSION_SERVICE]
    }

    fn reads(&self) -> &'static [Kind] {
        &[Kind::Service, Kind::EndpointSlice, Kind::Secret]
    }

    /// An ExtensionService names the Services of its own namespace it calls.
    fn claim(&self, objects: &Objects, key: &ObjectKey) -> Claim {
        let Some(service) = objects.get::<ExtensionService>(&key.namespace, &key.name) else {
            return Claim::default();
        };
        Claim {
            services: service
                .spec
                .services
                .iter()
                .map(|s| (key.namespace.clone(), s.name.clone()))
                .collect(),
            face: Some(extension::face(objects, &key.namespace, &service.spec)),
            ..Claim::default()
        }
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        // Every ExtensionService, also in a build of part of the store: every extension
        // cluster is served, whichever vhost calls it (a change to one reaches the
        // proxies naming it, see `Claim::uses`, and the encoder replaces its cluster).
        for ((namespace, name), object) in ctx.store().of_kind(isobar_contour::EXTENSION_SERVICE) {
            let Some(service) = object.get::<ExtensionService>() else {
                continue;
            };
            let key = ObjectKey::new(isobar_contour::EXTENSION_SERVICE, namespace, name);
            if !ctx.admitted(&key) {
                continue;
            }
            let (resolved, problems) = extension::resolve(ctx, namespace, name, &service.spec);
            status.touch(&key);
            for p in problems {
                if p.error {
                    status.error(&key, p.type_, p.reason, p.message);
                } else {
                    status.warning(&key, p.type_, p.reason, p.message);
                }
            }
            if let Some(resolved) = resolved {
                ir.add_extension_cluster(resolved.cluster);
            }
        }
        if let Some(global) = &self.config.global_ext_auth {
            ir.extensions.authorization = Some(Arc::new(global_authorization(ctx, ir, global)));
        }
        if let Some(r) = &self.config.rate_limit_service {
            let service = callable(ctx, ir, &r.extension_service, "rateLimitService", None);
            ir.extensions.rate_limit = Some(Arc::new(ir::RateLimitService {
                service,
                domain: r.domain.clone(),
                fail_open: r.fail_open,
                x_rate_limit_headers: r.enable_x_rate_limit_headers,
                resource_exhausted: r.enable_resource_exhausted_code,
            }));
        }
        if let Some(t) = &self.config.tracing {
            let service = callable(ctx, ir, &t.extension_service, "tracing", None);
            ir.extensions.tracing = Some(Arc::new(tracing_of(t, service)));
        }
    }
}

/// `globalExtAuth` as the plain listeners' filter runs it: as an HTTPProxy's
/// `authorization` would, else (its ExtensionService missing or invalid) against the
/// unavailable cluster.
fn global_authorization(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    global: &GlobalExtAuth,
) -> ir::ExtAuthz {
    let (namespace, _) = global.service();
    match extension::authorization(ctx, &global.as_authorization(), namespace) {
        Ok(authorization) => authorization,
        Err((_, message)) => {
            let timeout = extension::timeout_setting(&global.response_timeout).unwrap_or(None);
            let service = callable(ctx, ir, &global.extension_service, "globalExtAuth", timeout);
            tracing::warn!(%message, "globalExtAuth: its ExtensionService cannot be used; requests fail as if it were down");
            ir::ExtAuthz {
                service,
                http: None,
                fail_open: global.fail_open,
                with_request_body: global.with_request_body.as_ref().map(|b| b.to_ir()),
            }
        }
    }
}

/// The call to ExtensionService `reference` (`namespace/name`) of a global setting;
/// when it is missing or invalid, the unavailable cluster of its name (added to `ir`).
fn callable(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    reference: &str,
    setting: &str,
    timeout: Option<std::time::Duration>,
) -> ir::GrpcService {
    let (namespace, name) = extension::split_reference(reference);
    match extension::lookup(ctx, namespace, name) {
        Some(resolved) => resolved.grpc(timeout),
        None => {
            tracing::warn!(
                extension_service = %format!("{namespace}/{name}"),
                "{setting}: the ExtensionService is missing or not valid; calls to it fail as if it were down"
            );
            let cluster = extension::unavailable_cluster(namespace, name);
            let call = ir::GrpcService {
                authority: extension::authority(&cluster.name, None),
                cluster: cluster.name.clone(),
                timeout,
            };
            ir.add_extension_cluster(cluster);
            call
        }
    }
}

/// Contour's `tracing` as the connection managers run it: service name `contour`, every
/// request sampled and paths tagged up to 256 bytes unless set; the pod's name and
/// namespace (Envoy's `HOSTNAME` and `CONTOUR_NAMESPACE`) tagged unless
/// `includePodDetail: false`, then the custom tags.
fn tracing_of(t: &Tracing, service: ir::GrpcService) -> ir::Tracing {
    let mut tags = Vec::new();
    if t.include_pod_detail.unwrap_or(true) {
        for (name, variable) in [
            ("podName", "HOSTNAME"),
            ("podNamespace", "CONTOUR_NAMESPACE"),
        ] {
            tags.push(ir::TraceTag {
                name: name.to_string(),
                value: ir::TagValue::Environment(variable.to_string()),
            });
        }
    }
    for tag in &t.custom_tags {
        let value = if !tag.literal.is_empty() {
            ir::TagValue::Literal(tag.literal.clone())
        } else {
            ir::TagValue::RequestHeader(tag.request_header_name.clone())
        };
        tags.push(ir::TraceTag {
            name: tag.tag_name.clone(),
            value,
        });
    }
    // Unset, unreadable or 0: 100 (Contour's reading).
    let percent = |s: &Option<String>| {
        s.as_deref()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|v| *v > 0.0)
            .unwrap_or(100.0)
    };
    let sampling = percent(&t.overall_sampling);
    let client_sampling = percent(&t.client_sampling);
    let random_sampling = percent(&t.random_sampling);
    ir::Tracing {
        service,
        service_name: t
            .service_name
            .clone()
            .unwrap_or_else(|| "contour".to_string()),
        sampling,
        client_sampling,
        random_sampling,
        max_path_tag_length: t.max_path_tag_length.unwrap_or(256),
        tags,
    }
}
