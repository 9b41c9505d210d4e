//! A source plugin for Isobar's tests, written as any plugin would be, against the SDK
//! alone: it reads a kind the host has never heard of (`Mapping`,
//! `test.isobar.dev/v1`), routes it on a listener of its own, and reports on each
//! object in Gateway API's route shape (`status.parents[]`). Linking this crate (and
//! naming `mappings` in `pipeline.sources`) is all it takes; nothing in the host names it.
//!
//! ```yaml
//! apiVersion: test.isobar.dev/v1
//! kind: Mapping
//! metadata: {name: m, namespace: default}
//! spec:
//!   hostname: mapped.example.com   # the vhost
//!   prefix: /                      # the path prefix
//!   service: echo                  # a Service in the Mapping's namespace
//!   port: 80                       # its port
//!   parentRefs: [{name: mappings}] # the listener (by name) it attaches to
//!   regex: /a.*                    # optional: matched instead of the prefix
//! ```
//!
//! `regex` is passed to Envoy as it is, unchecked, unlike any regex a real source
//! takes: it is how tests make Envoy refuse an update (`a**`).
//!
//! With `tcp-port` set, the plugin also adds a TCP listener named `<listener>-tcp`: a
//! Mapping whose parent is that listener forwards every connection on it to its
//! Service (its hostname and prefix are not read); the newest such Mapping wins.
//!
//! Conditions, per parent: `Accepted` (False, `NoMatchingParent`, when the parent is not
//! this plugin's listener; False, `UnsupportedValue`, for a bad hostname or prefix) and
//! `ResolvedRefs` (False, `BackendNotFound`, when the Service or its port is missing;
//! the route then answers 503).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use isobar_sdk::api::ObjectMeta;
use isobar_sdk::condition::Condition;
use isobar_sdk::host::parse_host;
use isobar_sdk::ir::{
    Listener, PathMatch, Route, RouteAction, RouteMatch, TcpProxy, WeightedCluster,
};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, Settings, parse_config};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{
    BuildContext, Claim, Ir, Kind, KindId, KindInfo, ObjectKey, Objects, ParentRef, Resource,
    Source, StatusReport,
};

pub const NAME: &str = "mappings";

const MAPPING_ID: KindId = KindId::new("test.isobar.dev", "Mapping");

/// The kind this plugin reads.
pub const MAPPING: Kind = Kind::new(&MAPPING_ID);

/// One Mapping: a host and path prefix routed to a Service port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mapping {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: MappingSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MappingSpec {
    pub hostname: String,
    #[serde(default = "root")]
    pub prefix: String,
    pub service: String,
    pub port: i32,
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    /// Matched instead of `prefix`, and not checked (see the module comment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

fn root() -> String {
    "/".to_string()
}

impl Resource for Mapping {
    const KIND: Kind = MAPPING;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: MAPPING,
        versions: &["v1"],
        plural: "mappings",
        namespaced: true,
        decode: isobar_sdk::kind::decode_object::<Mapping>,
        status: &isobar_sdk::status::Route,
    }
}

/// The `plugins.mappings` section: the listener Mappings are served on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct MappingsConfig {
    pub listener: String,
    pub address: String,
    pub port: u16,
    /// The port of the TCP listener, when there is one.
    pub tcp_port: Option<u16>,
}

impl Default for MappingsConfig {
    fn default() -> Self {
        MappingsConfig {
            listener: NAME.to_string(),
            address: "127.0.0.1".to_string(),
            port: 18000,
            tcp_port: None,
        }
    }
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Source>, ConfigError> {
    let config: MappingsConfig = parse_config(config)?;
    Ok(Box::new(MappingSource {
        listener: Arc::new(Listener::http(
            &config.listener,
            &config.address,
            config.port,
        )),
        tcp: config.tcp_port.map(|port| {
            Arc::new(Listener::tcp(
                &format!("{}-tcp", config.listener),
                &config.address,
                port,
            ))
        }),
    }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Test plugin: routes Mappings (test.isobar.dev/v1) on a listener of its own",
        factory: Factory::Source(build),
        settings: Some(Settings::of::<MappingsConfig>()),
    }
}

pub struct MappingSource {
    /// The listener, as every build starts it.
    listener: Arc<Listener>,
    /// The TCP listener, when configured.
    tcp: Option<Arc<Listener>>,
}

impl Source for MappingSource {
    fn kinds(&self) -> &'static [Kind] {
        &[MAPPING]
    }

    fn reads(&self) -> &'static [Kind] {
        &[Kind::Service, Kind::EndpointSlice]
    }

    fn local(&self) -> bool {
        true
    }

    /// A Mapping claims its hostname and names its Service.
    fn claim(&self, objects: &Objects, key: &ObjectKey) -> Claim {
        let Some(mapping) = objects.get::<Mapping>(&key.namespace, &key.name) else {
            return Claim::default();
        };
        Claim {
            hosts: parse_host(&mapping.spec.hostname)
                .map(|h| vec![h.fqdn])
                .unwrap_or_default(),
            services: vec![(key.namespace.clone(), mapping.spec.service.clone())],
            ..Claim::default()
        }
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        let name = self.listener.name.clone();
        ir.listeners
            .entry(name.clone())
            .or_insert_with(|| (*self.listener).clone());
        let tcp = self.tcp.as_ref().map(|l| l.name.clone());
        if let Some(l) = &self.tcp {
            ir.listeners
                .entry(l.name.clone())
                .or_insert_with(|| (**l).clone());
        }
        for (key, mapping) in ctx.all::<Mapping>() {
            let spec = &mapping.spec;
            let gateway = status.gateway(&key);
            let (ours, others): (Vec<&ParentRef>, Vec<&ParentRef>) = spec
                .parent_refs
                .iter()
                .partition(|p| p.name == name || Some(&p.name) == tcp.as_ref());
            if let (Some(tcp), [parent]) = (&tcp, ours.as_slice())
                && &parent.name == tcp
            {
                forward_tcp(ctx, ir, tcp, &key, spec, parent, gateway);
                continue;
            }
            for parent in others {
                gateway.set_parent(
                    parent,
                    Condition::new(
                        "Accepted",
                        false,
                        "NoMatchingParent",
                        format!("no listener {:?}", parent.name),
                    ),
                );
            }
            if ours.is_empty() {
                continue;
            }
            let host = parse_host(&spec.hostname).ok().filter(|h| h.fqdn != "*");
            let prefix_ok = spec.prefix.starts_with('/')
                && !spec
                    .prefix
                    .chars()
                    .any(|c| c.is_control() || c == '?' || c == '#');
            let Some(host) = host.filter(|_| prefix_ok) else {
                for parent in ours {
                    gateway.set_parent(
                        parent,
                        Condition::new(
                            "Accepted",
                            false,
                            "UnsupportedValue",
                            "spec.hostname must be a host name and spec.prefix a path",
                        ),
                    );
                }
                continue;
            };
            let port = PortRef::Number(spec.port);
            let cluster = service_cluster(
                ctx.objects,
                &key.namespace,
                &spec.service,
                port,
                Default::default(),
                ctx.external_names(),
            );
            let resolved = match &cluster {
                Ok(_) => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
                Err(e) => Condition::new("ResolvedRefs", false, "BackendNotFound", e.to_string()),
            };
            for parent in ours {
                gateway.set_parent(parent, Condition::new("Accepted", true, "Accepted", ""));
                gateway.set_parent(parent, resolved.clone());
            }
            let action = match cluster {
                Ok(cluster) => {
                    let forward = WeightedCluster {
                        cluster: cluster.name.clone(),
                        weight: 1,
                        ..Default::default()
                    };
                    ir.add_cluster(cluster);
                    RouteAction::Forward(vec![forward])
                }
                Err(_) => RouteAction::DirectResponse {
                    status: 503,
                    body: None,
                },
            };
            let route = Route {
                matcher: RouteMatch {
                    authority_regex: host.authority_regex,
                    ..RouteMatch::path(match &spec.regex {
                        Some(regex) => PathMatch::Regex(regex.clone()),
                        None => PathMatch::Prefix(spec.prefix.clone()),
                    })
                },
                action,
                source: key.clone(),
                tie: None,
                policy: None,
            };
            ir.add_route(&name, &host.fqdn, route);
        }
    }
}

/// Forwards TCP listener `listener` to the Mapping's Service, when it resolves.
fn forward_tcp(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    listener: &str,
    key: &ObjectKey,
    spec: &MappingSpec,
    parent: &ParentRef,
    gateway: &mut isobar_sdk::GatewayStatus,
) {
    let port = PortRef::Number(spec.port);
    match service_cluster(
        ctx.objects,
        &key.namespace,
        &spec.service,
        port,
        Default::default(),
        ctx.external_names(),
    ) {
        Ok(cluster) => {
            gateway.set_parent(parent, Condition::new("Accepted", true, "Accepted", ""));
            gateway.set_parent(
                parent,
                Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
            );
            let proxy = TcpProxy {
                clusters: vec![WeightedCluster {
                    cluster: cluster.name.clone(),
                    weight: 1,
                    ..Default::default()
                }],
                source: key.clone(),
            };
            ir.add_cluster(cluster);
            if let Some(l) = ir.listeners.get_mut(listener) {
                l.tcp_proxy = Some(proxy);
            }
        }
        Err(e) => {
            gateway.set_parent(parent, Condition::new("Accepted", true, "Accepted", ""));
            gateway.set_parent(
                parent,
                Condition::new("ResolvedRefs", false, "BackendNotFound", e.to_string()),
            );
        }
    }
}
