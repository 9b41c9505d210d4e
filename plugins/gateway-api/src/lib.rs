//! The `gateway-api` source: Gateway API (`gateway.networking.k8s.io`) → IR.
//!
//! Serves the Gateways this controller owns — the one `gatewayRef` names (Contour's
//! static mode) or, without it, every Gateway whose GatewayClass names
//! `controllerName` — on one Envoy fleet. Each Gateway listener port P becomes the Envoy
//! listener `http-P` or `https-P` on Contour's container port (P + 8000), at the
//! address of the configured HTTP (or HTTPS) listener; listeners of
//! several Gateways on one port share it, a later listener of another protocol (or the
//! same hostname) is `Conflicted`. HTTPRoutes attach per parent reference
//! (`sectionName`, `port`, `allowedRoutes`, hostname intersection) and are placed on
//! the intersected hosts; an older route keeps a match a newer one repeats.
//!
//! Reads: GatewayClass, Gateway, ListenerSet, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute,
//! UDPRoute, BackendTLSPolicy, XBackendTrafficPolicy, ReferenceGrant (`v1`, `v1beta1`), ConfigMap (CA certificates),
//! Namespace (labels, for `allowedRoutes.namespaces.selector`), Service,
//! EndpointSlice, Secret. Writes status to GatewayClasses and Gateways it owns and to
//! the `parents[]` entries of routes attached to them, nothing else.

/// A route's parent reference as the SDK spells it, from any route kind's generated
/// `…ParentRefs` type (they share their fields), with the group and kind an API server
/// defaults (`status.parents[].parentRef` carries them).
macro_rules! parent_ref {
    ($p:expr) => {{
        let p = $p;
        $crate::defaulted(isobar_sdk::ParentRef {
            group: p.group.clone(),
            kind: p.kind.clone(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            section_name: p.section_name.clone(),
            port: p.port,
        })
    }};
}

/// A parent reference with the CRD's defaults: group `gateway.networking.k8s.io`, kind
/// `Gateway`.
fn defaulted(mut parent: isobar_sdk::ParentRef) -> isobar_sdk::ParentRef {
    parent.group.get_or_insert_with(|| kinds::GROUP.to_string());
    parent.kind.get_or_insert_with(|| "Gateway".to_string());
    parent
}

/// A backend reference, from any route kind's generated `…BackendRefs` type.
macro_rules! backend_ref {
    ($b:expr) => {{
        let b = $b;
        $crate::rules::BackendRef {
            group: b.group.as_deref(),
            kind: b.kind.as_deref(),
            name: &b.name,
            namespace: b.namespace.as_deref(),
            port: b.port,
        }
    }};
}

/// A namespace label selector, from any generated `…Selector` type (they share the
/// fields of Kubernetes' `LabelSelector`).
macro_rules! label_selector {
    ($s:expr) => {{
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        let s = $s;
        meta::LabelSelector {
            match_labels: s.match_labels.clone(),
            match_expressions: s.match_expressions.as_ref().map(|e| {
                e.iter()
                    .map(|e| meta::LabelSelectorRequirement {
                        key: e.key.clone(),
                        operator: e.operator.clone(),
                        values: e.values.clone(),
                    })
                    .collect()
            }),
        }
    }};
}

mod addresses;
mod backend_client;
mod backend_tls;
mod backend_traffic;
mod claims;
mod defaults;
mod frontend;
mod gateways;
mod grants;
mod grpc;
pub mod hosts;
pub mod kinds;
mod listener_sets;
mod routes;
mod rules;
mod streams;

pub use gateways::SUPPORTED_FEATURES;

use serde::{Deserialize, Serialize};

use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, Settings, parse_config};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use isobar_sdk::{BuildContext, Claim, Ir, Kind, ObjectKey, Objects, Source, StatusReport};

pub use gateways::container_port;

pub const NAME: &str = "gateway-api";

/// Contour's Gateway controller name, the default `controllerName`.
pub const CONTOUR_CONTROLLER: &str = "projectcontour.io/gateway-controller";

/// A Gateway by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields)]
pub struct GatewayRef {
    pub namespace: String,
    pub name: String,
}

/// The `plugins.gateway-api` section (Contour's `gateway` section, same keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GatewayApiConfig {
    /// GatewayClasses naming this controller are this instance's (without `gatewayRef`).
    pub controller_name: String,
    /// Serve this one Gateway, whatever its class (Contour's static mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_ref: Option<GatewayRef>,
    /// Isobar's own: IP addresses (`10.0.0.5`) and ranges (`10.0.1.0/24`) Gateways may
    /// have for themselves. Each Gateway then gets one (the one its `spec.addresses`
    /// asks for, or one chosen for it) and Envoy listens for its listeners there, at
    /// their own ports. Empty: every Gateway shares the fleet's listeners.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub address_pool: Vec<String>,
}

impl Default for GatewayApiConfig {
    fn default() -> Self {
        GatewayApiConfig {
            controller_name: CONTOUR_CONTROLLER.to_string(),
            gateway_ref: None,
            address_pool: Vec::new(),
        }
    }
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Source>, ConfigError> {
    let config: GatewayApiConfig = parse_config(config)?;
    let pool = addresses::Pool::parse(&config.address_pool).map_err(ConfigError)?;
    Ok(Box::new(GatewayApiSource {
        config,
        pool,
        attached: Mutex::new(Attached::default()),
    }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Gateway API (gateway.networking.k8s.io): GatewayClasses, Gateways, ListenerSets, HTTP/GRPC/TLS/TCP/UDP routes, ReferenceGrants, BackendTLSPolicies, XBackendTrafficPolicies",
        factory: Factory::Source(build),
        settings: Some(Settings::of::<GatewayApiConfig>()),
    }
}

/// Contour's `gateway` section (`controllerName`, `gatewayRef`) configures the source
/// and enables it, last among the sources.
fn from_top_level(contour: &serde_json::Value) -> isobar_sdk::plugin::FromTopLevel {
    match contour.get("gateway").filter(|v| !v.is_null()) {
        Some(gateway) => isobar_sdk::plugin::FromTopLevel {
            settings: gateway.clone(),
            enable: Some(isobar_sdk::plugin::Enable::Last),
        },
        None => isobar_sdk::plugin::FromTopLevel::default(),
    }
}

isobar_sdk::inventory::submit! {
    isobar_sdk::plugin::TopLevelKeys { plugin: NAME, read: from_top_level }
}

pub struct GatewayApiSource {
    config: GatewayApiConfig,
    /// `address_pool`, read.
    pool: addresses::Pool,
    /// The listeners every route is attached to, as the builds so far found them: a
    /// build of part of the routes updates theirs, and every build reports each
    /// listener's `attachedRoutes` from all of them.
    attached: Mutex<Attached>,
}

/// Routes attached to Gateway listeners, kept between builds.
#[derive(Debug, Default)]
struct Attached {
    by_route: HashMap<ObjectKey, routes::Attachments>,
    counts: HashMap<(ObjectKey, String), i32>,
    /// The policies (BackendTLS, XBackendTraffic) naming the Services each route sends to.
    policies: HashMap<ObjectKey, BTreeSet<ObjectKey>>,
}

impl Attached {
    /// Each policy's ancestors: the Gateways of the routes sending to its Services.
    fn ancestors(&self) -> BTreeMap<ObjectKey, BTreeSet<ObjectKey>> {
        let mut out: BTreeMap<ObjectKey, BTreeSet<ObjectKey>> = BTreeMap::new();
        for (route, policies) in &self.policies {
            let gateways = self.by_route.get(route).into_iter().flatten();
            for (gateway, _) in gateways {
                for policy in policies {
                    out.entry(policy.clone())
                        .or_default()
                        .insert(gateway.clone());
                }
            }
        }
        out
    }

    /// Records the listeners `route` is attached to now (none: it is gone).
    fn set(&mut self, route: &ObjectKey, now: routes::Attachments) {
        if let Some(old) = self.by_route.remove(route) {
            for listener in old {
                if let Some(n) = self.counts.get_mut(&listener) {
                    *n -= 1;
                }
            }
        }
        if now.is_empty() {
            return;
        }
        for listener in &now {
            *self.counts.entry(listener.clone()).or_default() += 1;
        }
        self.by_route.insert(route.clone(), now);
    }
}

impl Source for GatewayApiSource {
    fn kinds(&self) -> &'static [Kind] {
        &[
            kinds::GATEWAY_CLASS,
            kinds::GATEWAY,
            kinds::HTTP_ROUTE,
            kinds::GRPC_ROUTE,
            kinds::TLS_ROUTE,
            kinds::TCP_ROUTE,
            kinds::UDP_ROUTE,
            kinds::BACKEND_TLS_POLICY,
            kinds::BACKEND_TRAFFIC_POLICY,
            kinds::LISTENER_SET,
        ]
    }

    fn reads(&self) -> &'static [Kind] {
        &[
            kinds::REFERENCE_GRANT,
            kinds::CONFIG_MAP,
            kinds::NAMESPACE,
            Kind::Service,
            Kind::EndpointSlice,
            Kind::Secret,
        ]
    }

    fn local(&self) -> bool {
        true
    }

    /// Under a ReferenceGrant, a route sends to Services of other namespaces.
    fn names_other_namespaces(&self) -> bool {
        true
    }

    /// A Gateway's listeners count the routes attached to them; a GatewayClass decides
    /// which Gateways are served; a backend policy (BackendTLS, XBackendTraffic) reaches
    /// every route sending to its Services and reports the Gateways of all of them.
    fn whole_kinds(&self) -> &'static [Kind] {
        &[
            kinds::GATEWAY_CLASS,
            kinds::GATEWAY,
            kinds::BACKEND_TLS_POLICY,
            kinds::BACKEND_TRAFFIC_POLICY,
            kinds::LISTENER_SET,
        ]
    }

    /// A route claims the hosts (SNI names) it can have on the listeners its parents
    /// name and names its backends' (and mirrors') Services; a TCPRoute or UDPRoute claims
    /// no host.
    fn claim(&self, objects: &Objects, key: &ObjectKey) -> Claim {
        let (ns, name) = (&key.namespace, &key.name);
        let found = if key.kind == kinds::HTTP_ROUTE {
            objects
                .get::<kinds::HttpRoute>(ns, name)
                .map(|r| claims::route(objects, key, r))
        } else if key.kind == kinds::GRPC_ROUTE {
            objects
                .get::<kinds::GrpcRoute>(ns, name)
                .map(|r| claims::grpc_route(objects, key, r))
        } else if key.kind == kinds::TLS_ROUTE {
            objects
                .get::<kinds::TlsRoute>(ns, name)
                .map(|r| claims::tls_route(objects, key, r))
        } else if key.kind == kinds::TCP_ROUTE {
            objects
                .get::<kinds::TcpRoute>(ns, name)
                .map(|r| claims::tcp_route(key, r))
        } else if key.kind == kinds::UDP_ROUTE {
            objects
                .get::<kinds::UdpRoute>(ns, name)
                .map(|r| claims::udp_route(key, r))
        } else {
            None
        };
        found.unwrap_or_default()
    }

    fn controller_name(&self) -> Option<&str> {
        Some(&self.config.controller_name)
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        let grants = grants::Grants::new(ctx);
        let served = gateways::serve(ctx, &self.config, &self.pool, &grants, ir, status);
        let tls = backend_tls::BackendTls::new(ctx);
        let traffic = backend_traffic::BackendTraffic::new(ctx);
        let routes::Outcome { attached, policies } =
            routes::serve(ctx, &grants, &served, &tls, &traffic, ir, status);
        // A dry build (admission) judges one object against the store as it would be:
        // it counts its own routes and keeps nothing.
        let mut dry = Attached::default();
        let mut kept = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        let state = if ctx.focus().is_some() {
            &mut dry
        } else {
            &mut *kept
        };
        match ctx.scope() {
            None => *state = Attached::default(),
            Some(scope) => {
                // Routes of the scope this build did not serve: gone, or not admitted.
                for key in scope
                    .iter()
                    .filter(|k| routes::ROUTE_KINDS.contains(&k.kind))
                {
                    if !attached.contains_key(key) {
                        state.set(key, routes::Attachments::new());
                    }
                    state.policies.remove(key);
                }
            }
        }
        for (route, now) in attached {
            state.policies.remove(&route);
            state.set(&route, now);
        }
        state.policies.extend(policies);
        if !tls.is_empty() || !traffic.is_empty() {
            let ancestors = state.ancestors();
            tls.report(&ancestors, status);
            traffic.report(&ancestors, status);
        }
        for (gateway, listeners) in &served.listeners {
            let gw = status.gateway(gateway);
            for l in listeners {
                let count = state
                    .counts
                    .get(&(gateway.clone(), l.name.clone()))
                    .copied()
                    .unwrap_or(0);
                gw.listener(&l.name).attached_routes = count;
            }
        }
    }
}
