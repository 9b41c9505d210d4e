//! IR → Envoy resources (LDS, RDS, CDS, EDS, SDS; VHDS with `xds-server.vhds`), with
//! Contour's names and defaults.
//!
//! Pure functions: the same IR and objects give byte-identical resources.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use envoy_types::pb::envoy::config::accesslog::v3::{self as accesslog, AccessLog};
use envoy_types::pb::envoy::config::cluster::v3::{self as cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{
    self as core, Address, AggregatedConfigSource, ConfigSource, HeaderValue, HeaderValueOption,
    SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    self as endpoint, ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::{self as listener, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    self as route, DirectResponseAction, HeaderMatcher, RouteConfiguration, RouteMatch, Vhds,
    VirtualHost, WeightedCluster,
};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::FileAccessLog;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, HttpConnectionManager, HttpFilter, Rds,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatcher, StringMatcher, string_matcher};
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, Percent};
use envoy_types::pb::google::protobuf::{self as pb, Any, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;

use isobar_sdk::ir::{self, PathMatch, RouteAction};
use isobar_sdk::resolve::ready_endpoints;
use isobar_sdk::{Ir, Objects};

use super::encoder::Encoder;
use super::snapshot::{Encoded, XdsType};
use super::tls;

/// The listener and route configuration names Contour uses.
pub const HTTP_LISTENER: &str = "ingress_http";
pub const STATS_LISTENER: &str = "stats-health";
/// The bootstrap's static cluster that reaches Envoy's own admin socket.
pub const ADMIN_CLUSTER: &str = "envoy-admin";

/// Where Envoy listens, and cluster defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoySettings {
    /// `tls.envoy-client-certificate`: (namespace, name) of the secret Envoy presents
    /// to TLS upstreams.
    pub client_certificate: Option<(String, String)>,
    pub http_address: String,
    pub http_port: u16,
    pub https_address: String,
    pub https_port: u16,
    pub tls: TlsSettings,
    pub stats_address: String,
    pub stats_port: u16,
    pub connect_timeout: Duration,
    pub access_log_path: String,
    /// `xds-server.vhds`: `ingress_http`'s vhosts are `VirtualHost` resources of their
    /// own (VHDS), not fields of the RouteConfiguration.
    pub vhds: bool,
}

/// Bounds and parameters of every downstream TLS context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub min_version: ir::TlsVersion,
    pub max_version: ir::TlsVersion,
    pub cipher_suites: Vec<String>,
    pub ecdh_curves: Vec<String>,
}

/// Envoy resources by type, each by name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resources {
    pub clusters: BTreeMap<String, Encoded>,
    pub endpoints: BTreeMap<String, Encoded>,
    pub secrets: BTreeMap<String, Encoded>,
    pub listeners: BTreeMap<String, Encoded>,
    pub routes: BTreeMap<String, Encoded>,
    /// VHDS (`xds-server.vhds`): `ingress_http`'s vhosts.
    pub virtual_hosts: BTreeMap<String, Encoded>,
}

impl Resources {
    /// The resources of type `t`.
    pub fn of(&self, t: XdsType) -> &BTreeMap<String, Encoded> {
        match t {
            XdsType::Cluster => &self.clusters,
            XdsType::Endpoint => &self.endpoints,
            XdsType::Secret => &self.secrets,
            XdsType::Listener => &self.listeners,
            XdsType::Route => &self.routes,
            XdsType::VirtualHost => &self.virtual_hosts,
        }
    }
}

/// A resource encoded as snapshots hold it.
pub fn encoded(resource: &impl Message) -> Encoded {
    Encoded::from(resource.encode_to_vec())
}

pub fn translate(ir: &Ir, objects: &Objects, settings: &EnvoySettings) -> Resources {
    translate_keeping(ir, objects, settings).0
}

/// [`translate`], and what it keeps to later re-encode only what a change touches.
pub fn translate_keeping(
    ir: &Ir,
    objects: &Objects,
    settings: &EnvoySettings,
) -> (Resources, Encoder) {
    let mut out = Resources::default();
    // Envoy's client certificate for upstream TLS, served over SDS when it is valid.
    let client_certificate = settings.client_certificate.as_ref().and_then(|(ns, name)| {
        let check = objects.secret_check(ns, name)?;
        match &check.certificate {
            Ok(certificate) => {
                let sds = isobar_sdk::secret::sds_name(ns, name);
                let served = ir::ServedSecret {
                    namespace: ns.clone(),
                    name: name.clone(),
                    certificate: certificate.clone(),
                };
                out.secrets.insert(sds.clone(), tls::secret(&sds, &served));
                Some(sds)
            }
            Err(e) => {
                tracing::error!(secret = %format!("{ns}/{name}"), error = %e, "tls.envoy-client-certificate is not usable; upstream TLS goes without a client certificate");
                None
            }
        }
    });
    let uses_tls = ir
        .clusters
        .values()
        .any(|c| c.options.protocol.is_some_and(ir::UpstreamProtocol::is_tls));
    if !uses_tls && let Some(name) = &client_certificate {
        out.secrets.remove(name);
    }
    let mut encoder = Encoder::new(client_certificate);
    let every: BTreeSet<String> = ir
        .virtual_hosts
        .keys()
        .chain(ir.secure_virtual_hosts.keys())
        .cloned()
        .collect();
    // Every vhost is fresh: nothing is copied from a published snapshot, so nothing
    // can be stale.
    let changes = encoder
        .replace(ir, objects, settings, &every, None)
        .unwrap_or_default();
    for (t, resources) in changes.by_type {
        let map = match t {
            XdsType::Cluster => &mut out.clusters,
            XdsType::Endpoint => &mut out.endpoints,
            XdsType::Secret => &mut out.secrets,
            XdsType::Listener => &mut out.listeners,
            XdsType::Route => &mut out.routes,
            XdsType::VirtualHost => &mut out.virtual_hosts,
        };
        map.extend(resources.into_iter().filter_map(|(k, v)| Some((k, v?))));
    }
    (out, encoder)
}

pub(super) fn duration(d: Duration) -> pb::Duration {
    pb::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

pub(super) fn ads() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

pub(super) fn socket_address(address: &str, port: u16) -> Address {
    Address {
        address: Some(core::address::Address::SocketAddress(SocketAddress {
            address: address.to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(
                port,
            ))),
            ..Default::default()
        })),
    }
}

pub(super) fn cluster_for(
    c: &ir::Cluster,
    settings: &EnvoySettings,
    client_certificate: Option<&str>,
) -> Cluster {
    Cluster {
        name: c.name.clone(),
        alt_stat_name: c.alt_stat_name.clone(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: Some(ads()),
            service_name: c.eds_name.clone(),
        }),
        connect_timeout: Some(duration(settings.connect_timeout)),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(Percent { value: 0.0 }),
            ..Default::default()
        }),
        lb_policy: match c.options.lb_policy {
            ir::LbPolicy::RoundRobin => cluster::cluster::LbPolicy::RoundRobin,
            ir::LbPolicy::LeastRequest => cluster::cluster::LbPolicy::LeastRequest,
            ir::LbPolicy::Random => cluster::cluster::LbPolicy::Random,
            ir::LbPolicy::RingHash => cluster::cluster::LbPolicy::RingHash,
        } as i32,
        health_checks: c
            .options
            .health_check
            .as_deref()
            .into_iter()
            .map(health_check)
            .chain(
                c.options
                    .tcp_health_check
                    .as_deref()
                    .into_iter()
                    .map(tcp_health_check),
            )
            .collect(),
        circuit_breakers: c.options.circuit_breakers.as_deref().map(circuit_breakers),
        typed_extension_protocol_options: upstream_http_options(&c.options),
        lb_config: c
            .options
            .slow_start
            .as_ref()
            .map(|s| slow_start(s, c.options.lb_policy)),
        transport_socket: tls::upstream_transport_socket(&c.options, settings, client_certificate),
        ..Default::default()
    }
}

fn slow_start(s: &ir::SlowStart, lb: ir::LbPolicy) -> cluster::cluster::LbConfig {
    use cluster::cluster::{LbConfig, LeastRequestLbConfig, RoundRobinLbConfig, SlowStartConfig};
    let config = SlowStartConfig {
        slow_start_window: Some(duration(s.window)),
        aggression: Some(core::RuntimeDouble {
            default_value: s.aggression.parse().unwrap_or(1.0),
            runtime_key: "upstream.slowstart.aggression".to_string(),
        }),
        min_weight_percent: Some(Percent {
            value: f64::from(s.min_weight_percent),
        }),
    };
    match lb {
        ir::LbPolicy::LeastRequest => LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
            slow_start_config: Some(config),
            ..Default::default()
        }),
        _ => LbConfig::RoundRobinLbConfig(RoundRobinLbConfig {
            slow_start_config: Some(config),
        }),
    }
}

/// A health check with its timings; `checker` says what is checked.
fn timed_check(
    timeout: u64,
    interval: u64,
    unhealthy: u32,
    healthy: u32,
    checker: core::health_check::HealthChecker,
) -> core::HealthCheck {
    let seconds = |s: u64| duration(Duration::from_secs(s));
    core::HealthCheck {
        timeout: Some(seconds(timeout)),
        interval: Some(seconds(interval)),
        unhealthy_threshold: Some(UInt32Value { value: unhealthy }),
        healthy_threshold: Some(UInt32Value { value: healthy }),
        health_checker: Some(checker),
        ..Default::default()
    }
}

fn tcp_health_check(h: &ir::TcpHealthCheck) -> core::HealthCheck {
    use core::health_check::{HealthChecker, TcpHealthCheck};
    timed_check(
        h.timeout_seconds,
        h.interval_seconds,
        h.unhealthy_threshold,
        h.healthy_threshold,
        HealthChecker::TcpHealthCheck(TcpHealthCheck::default()),
    )
}

fn health_check(h: &ir::HealthCheck) -> core::HealthCheck {
    use core::health_check::{HealthChecker, HttpHealthCheck};
    timed_check(
        h.timeout_seconds,
        h.interval_seconds,
        h.unhealthy_threshold,
        h.healthy_threshold,
        HealthChecker::HttpHealthCheck(HttpHealthCheck {
            host: h.host.clone(),
            path: h.path.clone(),
            expected_statuses: h
                .expected_statuses
                .iter()
                .map(
                    |(start, end)| envoy_types::pb::envoy::r#type::v3::Int64Range {
                        start: *start,
                        end: *end,
                    },
                )
                .collect(),
            ..Default::default()
        }),
    )
}

fn circuit_breakers(b: &ir::CircuitBreakers) -> cluster::CircuitBreakers {
    let limit = |v: Option<u32>| v.map(|value| UInt32Value { value });
    cluster::CircuitBreakers {
        thresholds: vec![cluster::circuit_breakers::Thresholds {
            max_connections: limit(b.max_connections),
            max_pending_requests: limit(b.max_pending_requests),
            max_requests: limit(b.max_requests),
            max_retries: limit(b.max_retries),
            ..Default::default()
        }],
        per_host_thresholds: b
            .per_host_max_connections
            .map(|max| {
                vec![cluster::circuit_breakers::Thresholds {
                    max_connections: limit(Some(max)),
                    ..Default::default()
                }]
            })
            .unwrap_or_default(),
    }
}

/// Upstream HTTP/2 (`h2`, `h2c`) and the idle timeout of upstream connections, as
/// Envoy's `HttpProtocolOptions` (one entry, so the map encodes deterministically).
fn upstream_http_options(options: &ir::ClusterOptions) -> HashMap<String, Any> {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
        HttpProtocolOptions, http_protocol_options,
    };
    use http_protocol_options::explicit_http_config::ProtocolConfig;
    if options.protocol.is_none() && options.idle_connection_timeout.is_none() {
        return HashMap::new();
    }
    let http2 = options.protocol.is_some_and(ir::UpstreamProtocol::is_http2);
    if !http2 && options.idle_connection_timeout.is_none() {
        return HashMap::new();
    }
    let protocol = if http2 {
        ProtocolConfig::Http2ProtocolOptions(core::Http2ProtocolOptions::default())
    } else {
        ProtocolConfig::HttpProtocolOptions(core::Http1ProtocolOptions::default())
    };
    let value = pack_any(HttpProtocolOptions {
        common_http_protocol_options: options.idle_connection_timeout.map(|d| {
            core::HttpProtocolOptions {
                idle_timeout: Some(duration(d)),
                ..Default::default()
            }
        }),
        upstream_protocol_options: Some(
            http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                http_protocol_options::ExplicitHttpConfig {
                    protocol_config: Some(protocol),
                },
            ),
        ),
        ..Default::default()
    });
    HashMap::from([(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        value,
    )])
}

fn hash_policy(h: &ir::HashPolicy) -> route::route_action::HashPolicy {
    use route::route_action::hash_policy::{self, PolicySpecifier};
    let (specifier, terminal) = match h {
        ir::HashPolicy::Cookie => (
            PolicySpecifier::Cookie(hash_policy::Cookie {
                name: "X-Contour-Session-Affinity".to_string(),
                ttl: Some(duration(Duration::ZERO)),
                path: "/".to_string(),
                ..Default::default()
            }),
            false,
        ),
        ir::HashPolicy::Header { name, terminal } => (
            PolicySpecifier::Header(hash_policy::Header {
                header_name: name.clone(),
                ..Default::default()
            }),
            *terminal,
        ),
        ir::HashPolicy::QueryParameter { name, terminal } => (
            PolicySpecifier::QueryParameter(hash_policy::QueryParameter { name: name.clone() }),
            *terminal,
        ),
        ir::HashPolicy::SourceIp { terminal } => (
            PolicySpecifier::ConnectionProperties(hash_policy::ConnectionProperties {
                source_ip: true,
            }),
            *terminal,
        ),
    };
    route::route_action::HashPolicy {
        policy_specifier: Some(specifier),
        terminal,
    }
}

pub(super) fn load_assignment(
    eds_name: &str,
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: &str,
) -> ClusterLoadAssignment {
    let lb_endpoints: Vec<LbEndpoint> = ready_endpoints(objects, namespace, service, port_name)
        .into_iter()
        .map(|(address, port)| LbEndpoint {
            host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                endpoint::Endpoint {
                    address: Some(socket_address(&address, port)),
                    ..Default::default()
                },
            )),
            ..Default::default()
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: eds_name.to_string(),
        endpoints: if lb_endpoints.is_empty() {
            Vec::new()
        } else {
            vec![LocalityLbEndpoints {
                lb_endpoints,
                ..Default::default()
            }]
        },
        ..Default::default()
    }
}

/// `ingress_http` under `xds-server.vhds`: no vhosts of its own, Envoy subscribes to
/// them over the same (delta) ADS stream.
pub(super) fn vhds_route_configuration() -> Encoded {
    let shell = RouteConfiguration {
        vhds: Some(Vhds {
            config_source: Some(ads()),
        }),
        ..route_configuration_shell(HTTP_LISTENER)
    };
    encoded(&shell)
}

/// A plain vhost's VHDS resource name, which is also its `VirtualHost` name: Envoy
/// files a vhost under the RouteConfiguration its name starts with (up to the last
/// `/`).
pub(super) fn vhds_name(fqdn: &str) -> String {
    format!(
        "{HTTP_LISTENER}/{}",
        isobar_sdk::names::hashname(60, &[fqdn]).replace('/', "_")
    )
}

/// A RouteConfiguration with the given encoded vhosts, encoded canonically.
///
/// prost encodes protobuf map fields (the `Struct` of route metadata) in `HashMap` order,
/// which differs run to run; identical input must give identical bytes (versions are
/// content hashes). So routes are encoded one by one with their metadata appended in key
/// order; protobuf parsers accept fields in any order and merge them.
pub(super) fn route_configuration<'a>(
    name: &str,
    vhosts: impl Iterator<Item = &'a [u8]>,
    misdirected: bool,
) -> Vec<u8> {
    // A request whose Host is not the vhost its SNI chose is answered 421, as Contour's
    // Lua filter does, without any code: a catch-all vhost.
    let misdirected = misdirected.then(|| tls::misdirected_vhost().encode_to_vec());
    let mut vhosts: Vec<&[u8]> = vhosts.collect();
    vhosts.extend(misdirected.as_deref());
    let shell = route_configuration_shell(name);
    // Allocated at its exact size (the caller makes it the snapshot's block, or the
    // shell of a spliced table).
    let len = shell.encoded_len()
        + vhosts
            .iter()
            .map(|v| super::wire::field_len(ROUTE_CONFIGURATION_VIRTUAL_HOSTS, v.len()))
            .sum::<usize>();
    let mut bytes = Vec::with_capacity(len);
    shell.encode_raw(&mut bytes);
    for vhost in vhosts {
        append_field(&mut bytes, ROUTE_CONFIGURATION_VIRTUAL_HOSTS, vhost);
    }
    bytes
}

/// Every RouteConfiguration's settings, without vhosts.
fn route_configuration_shell(name: &str) -> RouteConfiguration {
    RouteConfiguration {
        name: name.to_string(),
        request_headers_to_add: vec![HeaderValueOption {
            header: Some(HeaderValue {
                key: "x-request-start".to_string(),
                value: "t=%START_TIME(%s.%3f)%".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ignore_port_in_host_matching: true,
        ..Default::default()
    }
}

pub(super) const ROUTE_CONFIGURATION_VIRTUAL_HOSTS: u32 = 2;
const VIRTUAL_HOST_ROUTES: u32 = 3;
const ROUTE_METADATA: u32 = 4;
const MAP_FIELD: u32 = 1;
const MAP_KEY: u32 = 1;
const MAP_VALUE: u32 = 2;

pub(super) fn append_field(buf: &mut impl prost::bytes::BufMut, tag: u32, bytes: &[u8]) {
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, buf);
    prost::encoding::encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

/// A vhost's `VirtualHost`; `vhds`: named as a VHDS resource (see [`vhds_name`]).
pub(super) fn virtual_host(vhost: &ir::VirtualHost, vhds: bool) -> Vec<u8> {
    let mut routes: Vec<&ir::Route> = vhost.routes.values().collect();
    routes.sort_by(|a, b| route_order(a).cmp(&route_order(b)));
    let shell = VirtualHost {
        name: if vhds {
            vhds_name(&vhost.fqdn)
        } else {
            isobar_sdk::names::hashname(60, &[&vhost.fqdn])
        },
        domains: vec![vhost.fqdn.clone()],
        ..Default::default()
    };
    let mut bytes = shell.encode_to_vec();
    for r in routes {
        let mut route = envoy_route(r).encode_to_vec();
        append_field(&mut route, ROUTE_METADATA, &source_metadata(&r.source));
        // Per-filter configs in filter-name order: local_ratelimit, lua, rbac.
        if let Some(limit) = &r.policy().rate_limit {
            append_filter_config(
                &mut route,
                ROUTE_FILTER_CONFIG,
                RATE_LIMIT_FILTER,
                &local_rate_limit(limit),
            );
        }
        if !r.policy().cookie_rewrites.is_empty() {
            append_filter_config(
                &mut route,
                ROUTE_FILTER_CONFIG,
                LUA_FILTER,
                &cookie_rewrite_context(&r.policy().cookie_rewrites),
            );
        }
        if let Some(filter) = &r.policy().ip_filter {
            append_filter_config(
                &mut route,
                ROUTE_FILTER_CONFIG,
                RBAC_FILTER,
                &rbac_per_route(filter),
            );
        }
        append_field(&mut bytes, VIRTUAL_HOST_ROUTES, &route);
    }
    // In filter-name order: cors, local_ratelimit, rbac.
    if let Some(cors) = &vhost.cors {
        append_filter_config(
            &mut bytes,
            VHOST_FILTER_CONFIG,
            CORS_FILTER,
            &cors_policy(cors),
        );
    }
    if let Some(limit) = &vhost.rate_limit {
        append_filter_config(
            &mut bytes,
            VHOST_FILTER_CONFIG,
            RATE_LIMIT_FILTER,
            &local_rate_limit(limit),
        );
    }
    if let Some(filter) = &vhost.ip_filter {
        append_filter_config(
            &mut bytes,
            VHOST_FILTER_CONFIG,
            RBAC_FILTER,
            &rbac_per_route(filter),
        );
    }
    bytes
}

const CORS_FILTER: &str = "envoy.filters.http.cors";
const LUA_FILTER: &str = "envoy.filters.http.lua";

/// The fixed cookie-rewriting script; rules reach it as the route's filter context.
const COOKIE_REWRITE_LUA: &str = include_str!("cookie_rewrite.lua");

/// A `google.protobuf.Value` built by hand, so maps are written in key order.
enum PbValue<'a> {
    Str(&'a str),
    Bool(bool),
    List(Vec<PbValue<'a>>),
    Struct(Vec<(&'a str, PbValue<'a>)>),
}

impl PbValue<'_> {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            PbValue::Str(s) => append_field(&mut out, 3, s.as_bytes()),
            PbValue::Bool(b) => {
                prost::encoding::bool::encode(4, b, &mut out);
            }
            PbValue::List(items) => {
                let mut list = Vec::new();
                for item in items {
                    append_field(&mut list, 1, &item.encode());
                }
                append_field(&mut out, 6, &list);
            }
            PbValue::Struct(fields) => append_field(&mut out, 5, &struct_bytes(fields)),
        }
        out
    }
}

/// A `google.protobuf.Struct` with its fields in the given (sorted) order.
fn struct_bytes(fields: &[(&str, PbValue<'_>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in fields {
        let mut entry = Vec::new();
        append_field(&mut entry, MAP_KEY, key.as_bytes());
        append_field(&mut entry, MAP_VALUE, &value.encode());
        append_field(&mut out, MAP_FIELD, &entry);
    }
    out
}

fn cookie_rewrite_context(rewrites: &[ir::CookieRewrite]) -> Any {
    use envoy_types::pb::envoy::extensions::filters::http::lua::v3::LuaPerRoute;
    let rules = rewrites
        .iter()
        .map(|c| {
            let mut fields = Vec::new();
            if let Some(domain) = &c.domain {
                fields.push(("domain", PbValue::Str(domain)));
            }
            fields.push(("name", PbValue::Str(&c.name)));
            if let Some(path) = &c.path {
                fields.push(("path", PbValue::Str(path)));
            }
            if let Some(same_site) = &c.same_site {
                fields.push(("same_site", PbValue::Str(same_site)));
            }
            if let Some(secure) = c.secure {
                fields.push(("secure", PbValue::Bool(secure)));
            }
            PbValue::Struct(fields)
        })
        .collect();
    let context = struct_bytes(&[("cookies", PbValue::List(rules))]);
    // LuaPerRoute.filter_context is field 4.
    let mut value = Vec::new();
    append_field(&mut value, 4, &context);
    Any {
        type_url: <LuaPerRoute as prost::Name>::type_url(),
        value,
    }
}
const RATE_LIMIT_FILTER: &str = "envoy.filters.http.local_ratelimit";

fn cors_policy(c: &ir::Cors) -> Any {
    use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy;
    pack_any(CorsPolicy {
        allow_origin_string_match: c
            .allow_origin
            .iter()
            .map(|m| string_matcher(m, false))
            .collect(),
        allow_methods: c.allow_methods.clone(),
        allow_headers: c.allow_headers.clone(),
        expose_headers: c.expose_headers.clone(),
        max_age: c.max_age_seconds.map(|s| s.to_string()).unwrap_or_default(),
        allow_credentials: Some(pb::BoolValue {
            value: c.allow_credentials,
        }),
        allow_private_network_access: Some(pb::BoolValue {
            value: c.allow_private_network,
        }),
        ..Default::default()
    })
}

fn local_rate_limit(l: &ir::LocalRateLimit) -> Any {
    use envoy_types::pb::envoy::extensions::filters::http::local_ratelimit::v3::LocalRateLimit;
    use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, HttpStatus, TokenBucket};
    let always = || {
        Some(core::RuntimeFractionalPercent {
            default_value: Some(FractionalPercent {
                numerator: 100,
                denominator: 0,
            }),
            ..Default::default()
        })
    };
    pack_any(LocalRateLimit {
        stat_prefix: "http_local_rate_limiter".to_string(),
        status: Some(HttpStatus {
            code: i32::try_from(l.status).unwrap_or(429),
        }),
        token_bucket: Some(TokenBucket {
            max_tokens: l.requests.saturating_add(l.burst),
            tokens_per_fill: Some(UInt32Value { value: l.requests }),
            fill_interval: Some(duration(Duration::from_secs(l.fill_interval_seconds))),
        }),
        filter_enabled: always(),
        filter_enforced: always(),
        response_headers_to_add: overwrite_headers(&l.response_headers),
        ..Default::default()
    })
}

fn internal_redirect_policy(r: &ir::InternalRedirect) -> route::InternalRedirectPolicy {
    use envoy_types::pb::envoy::extensions::internal_redirect::previous_routes::v3::PreviousRoutesConfig;
    use envoy_types::pb::envoy::extensions::internal_redirect::safe_cross_scheme::v3::SafeCrossSchemeConfig;
    let mut predicates = Vec::new();
    if r.safe_cross_scheme_only {
        predicates.push(core::TypedExtensionConfig {
            name: "envoy.internal_redirect_predicates.safe_cross_scheme".to_string(),
            typed_config: Some(pack_any(SafeCrossSchemeConfig {})),
        });
    }
    if r.deny_repeated_route {
        predicates.push(core::TypedExtensionConfig {
            name: "envoy.internal_redirect_predicates.previous_routes".to_string(),
            typed_config: Some(pack_any(PreviousRoutesConfig {})),
        });
    }
    route::InternalRedirectPolicy {
        max_internal_redirects: Some(UInt32Value {
            value: r.max_internal_redirects,
        }),
        redirect_response_codes: r.response_codes.clone(),
        predicates,
        allow_cross_scheme_redirect: r.allow_cross_scheme,
        ..Default::default()
    }
}

fn empty_filter(name: &str, config: Any) -> HttpFilter {
    HttpFilter {
        name: name.to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(config)),
        ..Default::default()
    }
}

/// `typed_per_filter_config` of a Route and of a VirtualHost: maps, written entry by entry
/// (one filter name per call, callers in name order) so the bytes stay deterministic.
const ROUTE_FILTER_CONFIG: u32 = 13;
const VHOST_FILTER_CONFIG: u32 = 15;
const RBAC_FILTER: &str = "envoy.filters.http.rbac";

fn append_filter_config(buf: &mut Vec<u8>, tag: u32, filter: &str, config: &Any) {
    let mut entry = Vec::new();
    append_field(&mut entry, MAP_KEY, filter.as_bytes());
    append_field(&mut entry, MAP_VALUE, &config.encode_to_vec());
    append_field(buf, tag, &entry);
}

/// An IP allow or deny list as Envoy's per-route RBAC: any request from a listed range
/// (peer or `X-Forwarded-For` address) is allowed, or denied.
fn rbac_per_route(filter: &ir::IpFilter) -> Any {
    use envoy_types::pb::envoy::config::rbac::v3 as rbac;
    use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as rbac_filter;
    let principals = filter
        .rules
        .iter()
        .map(|r| {
            let range = core::CidrRange {
                address_prefix: r.address.clone(),
                prefix_len: Some(UInt32Value {
                    value: r.prefix_len,
                }),
            };
            rbac::Principal {
                identifier: Some(if r.remote {
                    rbac::principal::Identifier::RemoteIp(range)
                } else {
                    rbac::principal::Identifier::DirectRemoteIp(range)
                }),
            }
        })
        .collect();
    let action = if filter.allow {
        rbac::rbac::Action::Allow
    } else {
        rbac::rbac::Action::Deny
    };
    pack_any(rbac_filter::RbacPerRoute {
        rbac: Some(rbac_filter::Rbac {
            rules: Some(rbac::Rbac {
                action: action as i32,
                policies: HashMap::from([(
                    "ip-rules".to_string(),
                    rbac::Policy {
                        permissions: vec![rbac::Permission {
                            rule: Some(rbac::permission::Rule::Any(true)),
                        }],
                        principals,
                        ..Default::default()
                    },
                )]),
                ..Default::default()
            }),
            ..Default::default()
        }),
    })
}

/// The RBAC filter with no rules of its own: it enforces only the per-route configs.
fn rbac_filter() -> HttpFilter {
    empty_filter(
        RBAC_FILTER,
        pack_any(envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac::default()),
    )
}

/// Contour's route order: exact, then regex, then prefixes; longer values first, equal
/// lengths in descending byte order; a segment prefix before a string prefix of the same
/// value; then routes matching `:method` first, then more header matches, then more query
/// matches.
/// The sort key [`route_order`] builds: smaller sorts first.
type RouteOrder<'a> = (
    u8,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<&'a str>,
    u8,
    std::cmp::Reverse<bool>,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<usize>,
);

fn route_order(r: &ir::Route) -> RouteOrder<'_> {
    let (class, value, tie) = match &r.matcher.path {
        PathMatch::Exact(v) => (0, v.as_str(), 0),
        PathMatch::Regex(v) => (1, v.as_str(), 0),
        PathMatch::SegmentPrefix(v) => (2, v.as_str(), 0),
        PathMatch::Prefix(v) => (2, v.as_str(), 1),
    };
    let method = r.matcher.headers.iter().any(|h| h.name == ":method");
    let headers = usize::from(r.matcher.authority_regex.is_some()) + r.matcher.headers.len();
    (
        class,
        std::cmp::Reverse(value.len()),
        std::cmp::Reverse(value),
        tie,
        std::cmp::Reverse(method),
        std::cmp::Reverse(headers),
        std::cmp::Reverse(r.matcher.query.len()),
    )
}

fn string_matcher(m: &ir::StringMatch, ignore_case: bool) -> StringMatcher {
    use string_matcher::MatchPattern;
    let pattern = match m {
        ir::StringMatch::Exact(v) => MatchPattern::Exact(v.clone()),
        ir::StringMatch::Prefix(v) => MatchPattern::Prefix(v.clone()),
        ir::StringMatch::Suffix(v) => MatchPattern::Suffix(v.clone()),
        ir::StringMatch::Contains(v) => MatchPattern::Contains(v.clone()),
        ir::StringMatch::Regex(v) => MatchPattern::SafeRegex(RegexMatcher {
            regex: v.clone(),
            ..Default::default()
        }),
    };
    StringMatcher {
        match_pattern: Some(pattern),
        // Envoy rejects ignore_case on a regex matcher.
        ignore_case: ignore_case && !matches!(m, ir::StringMatch::Regex(_)),
    }
}

fn header_matcher(h: &ir::HeaderMatch) -> HeaderMatcher {
    use route::header_matcher::HeaderMatchSpecifier;
    let specifier = match &h.value {
        None => HeaderMatchSpecifier::PresentMatch(true),
        Some(m) => HeaderMatchSpecifier::StringMatch(string_matcher(m, h.ignore_case)),
    };
    HeaderMatcher {
        name: h.name.clone(),
        header_match_specifier: Some(specifier),
        invert_match: h.invert,
        treat_missing_header_as_empty: h.treat_missing_as_empty,
    }
}

fn query_matcher(q: &ir::QueryMatch) -> route::QueryParameterMatcher {
    use route::query_parameter_matcher::QueryParameterMatchSpecifier;
    let specifier = match &q.value {
        None => QueryParameterMatchSpecifier::PresentMatch(true),
        Some(m) => QueryParameterMatchSpecifier::StringMatch(string_matcher(m, q.ignore_case)),
    };
    route::QueryParameterMatcher {
        name: q.name.clone(),
        query_parameter_match_specifier: Some(specifier),
    }
}

fn envoy_route(r: &ir::Route) -> route::Route {
    let path_specifier = match &r.matcher.path {
        PathMatch::Prefix(p) => route::route_match::PathSpecifier::Prefix(p.clone()),
        PathMatch::SegmentPrefix(p) => {
            route::route_match::PathSpecifier::PathSeparatedPrefix(p.clone())
        }
        PathMatch::Exact(p) => route::route_match::PathSpecifier::Path(p.clone()),
        PathMatch::Regex(p) => route::route_match::PathSpecifier::SafeRegex(RegexMatcher {
            regex: p.clone(),
            ..Default::default()
        }),
    };
    let authority = r.matcher.authority_regex.iter().map(|regex| HeaderMatcher {
        name: ":authority".to_string(),
        header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(
            string_matcher(&ir::StringMatch::Regex(regex.clone()), false),
        )),
        ..Default::default()
    });
    let headers = authority
        .chain(r.matcher.headers.iter().map(header_matcher))
        .collect();
    let query_parameters = r.matcher.query.iter().map(query_matcher).collect();
    let action = match &r.action {
        RouteAction::Forward(clusters) => {
            route::route::Action::Route(forward(clusters, r.policy()))
        }
        RouteAction::DirectResponse { status, body } => {
            route::route::Action::DirectResponse(DirectResponseAction {
                status: *status,
                body: body.as_ref().map(|b| core::DataSource {
                    specifier: Some(core::data_source::Specifier::InlineString(b.clone())),
                    ..Default::default()
                }),
                ..Default::default()
            })
        }
        RouteAction::Redirect(redirect) => {
            route::route::Action::Redirect(redirect_action(redirect))
        }
    };
    let policy = r.policy();
    route::Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(path_specifier),
            headers,
            query_parameters,
            ..Default::default()
        }),
        action: Some(action),
        request_headers_to_add: headers_to_add(&policy.request_headers),
        request_headers_to_remove: policy.request_headers.remove.clone(),
        response_headers_to_add: headers_to_add(&policy.response_headers),
        response_headers_to_remove: policy.response_headers.remove.clone(),
        ..Default::default()
    }
}

fn headers_to_add(policy: &ir::HeadersPolicy) -> Vec<HeaderValueOption> {
    overwrite_headers(&policy.set)
}

/// Headers set with Envoy's overwrite-or-add, in name order.
fn overwrite_headers(headers: &BTreeMap<String, String>) -> Vec<HeaderValueOption> {
    headers
        .iter()
        .map(|(key, value)| HeaderValueOption {
            header: Some(HeaderValue {
                key: key.clone(),
                value: value.clone(),
                ..Default::default()
            }),
            append_action: core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd
                as i32,
            ..Default::default()
        })
        .collect()
}

fn redirect_action(r: &ir::Redirect) -> route::RedirectAction {
    use route::redirect_action::{
        PathRewriteSpecifier, RedirectResponseCode, SchemeRewriteSpecifier,
    };
    let path = match (&r.path, &r.prefix) {
        (Some(path), _) => Some(PathRewriteSpecifier::PathRedirect(path.clone())),
        (None, Some(prefix)) => Some(PathRewriteSpecifier::PrefixRewrite(prefix.clone())),
        (None, None) => None,
    };
    let code = if r.status == 302 {
        RedirectResponseCode::Found
    } else {
        RedirectResponseCode::MovedPermanently
    };
    route::RedirectAction {
        host_redirect: r.host.clone().unwrap_or_default(),
        port_redirect: r.port.unwrap_or_default(),
        response_code: code as i32,
        scheme_rewrite_specifier: r.scheme.clone().map(SchemeRewriteSpecifier::SchemeRedirect),
        path_rewrite_specifier: path,
        ..Default::default()
    }
}

fn forward(clusters: &[ir::WeightedCluster], policy: &ir::RoutePolicy) -> route::RouteAction {
    use route::weighted_cluster::cluster_weight;
    let specifier = match clusters {
        [single]
            if single.request_headers.is_empty()
                && single.response_headers.is_empty()
                && single.host_rewrite.is_none()
                && single.cookie_rewrites.is_empty() =>
        {
            route::route_action::ClusterSpecifier::Cluster(single.cluster.clone())
        }
        many => route::route_action::ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters: many
                .iter()
                .map(|w| route::weighted_cluster::ClusterWeight {
                    name: w.cluster.clone(),
                    weight: Some(UInt32Value { value: w.weight }),
                    request_headers_to_add: headers_to_add(&w.request_headers),
                    request_headers_to_remove: w.request_headers.remove.clone(),
                    response_headers_to_add: headers_to_add(&w.response_headers),
                    response_headers_to_remove: w.response_headers.remove.clone(),
                    host_rewrite_specifier: w
                        .host_rewrite
                        .clone()
                        .map(cluster_weight::HostRewriteSpecifier::HostRewriteLiteral),
                    // One entry at most, so the map encodes deterministically.
                    typed_per_filter_config: if w.cookie_rewrites.is_empty() {
                        HashMap::new()
                    } else {
                        HashMap::from([(
                            LUA_FILTER.to_string(),
                            cookie_rewrite_context(&w.cookie_rewrites),
                        )])
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
    };
    route::RouteAction {
        cluster_specifier: Some(specifier),
        prefix_rewrite: policy.prefix_rewrite.clone().unwrap_or_default(),
        host_rewrite_specifier: policy
            .host_rewrite
            .clone()
            .map(route::route_action::HostRewriteSpecifier::HostRewriteLiteral),
        timeout: policy.timeout.map(duration),
        idle_timeout: policy.idle_timeout.map(duration),
        retry_policy: policy.retry.as_ref().map(|r| route::RetryPolicy {
            retry_on: r.retry_on.clone(),
            num_retries: Some(UInt32Value {
                value: r.num_retries,
            }),
            per_try_timeout: r.per_try_timeout.map(duration),
            retriable_status_codes: r.retriable_status_codes.clone(),
            ..Default::default()
        }),
        upgrade_configs: if policy.websockets {
            vec![route::route_action::UpgradeConfig {
                upgrade_type: "websocket".to_string(),
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        hash_policy: policy.hash_policies.iter().map(hash_policy).collect(),
        internal_redirect_policy: policy
            .internal_redirect
            .as_ref()
            .map(internal_redirect_policy),
        request_mirror_policies: policy
            .mirror
            .iter()
            .map(|m| route::route_action::RequestMirrorPolicy {
                cluster: m.cluster.clone(),
                runtime_fraction: Some(core::RuntimeFractionalPercent {
                    default_value: Some(FractionalPercent {
                        numerator: m.percent,
                        denominator: 0,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The source object of a route, for access logs (Contour's keys), as an encoded
/// `Metadata` whose maps are written in key order.
fn source_metadata(source: &isobar_sdk::ObjectKey) -> Vec<u8> {
    let fields = struct_bytes(&[
        ("io.projectcontour.kind", PbValue::Str(source.kind.as_str())),
        ("io.projectcontour.name", PbValue::Str(&source.name)),
        (
            "io.projectcontour.namespace",
            PbValue::Str(&source.namespace),
        ),
    ]);
    let mut entry = Vec::new();
    append_field(&mut entry, MAP_KEY, b"envoy.access_loggers.file");
    append_field(&mut entry, MAP_VALUE, &fields);
    let mut metadata = Vec::new();
    append_field(&mut metadata, MAP_FIELD, &entry);
    metadata
}

fn router_filter() -> HttpFilter {
    HttpFilter {
        name: "envoy.filters.http.router".to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(pack_any(
            Router::default(),
        ))),
        ..Default::default()
    }
}

pub(super) fn file_access_log(path: &str) -> AccessLog {
    AccessLog {
        name: "envoy.access_loggers.file".to_string(),
        config_type: Some(accesslog::access_log::ConfigType::TypedConfig(pack_any(
            FileAccessLog {
                path: path.to_string(),
                ..Default::default()
            },
        ))),
        ..Default::default()
    }
}

pub(super) fn hcm_filter(manager: HttpConnectionManager) -> listener::Filter {
    listener::Filter {
        name: "envoy.filters.network.http_connection_manager".to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(manager))),
    }
}

/// Whether any route of `vhost` rewrites `Set-Cookie` (needs the Lua filter).
pub(super) fn rewrites_cookies(vhost: &ir::VirtualHost) -> bool {
    vhost.routes.values().any(|r| {
        !r.policy().cookie_rewrites.is_empty()
            || matches!(&r.action, ir::RouteAction::Forward(clusters)
                if clusters.iter().any(|w| !w.cookie_rewrites.is_empty()))
    })
}

/// The HTTP connection manager of `ingress_http` and of each HTTPS filter chain. The
/// cookie-rewriting Lua filter (2.5 KB of script) is only in managers whose routes may
/// use it (`cookies`): `ingress_http` and the fallback chain always carry it, an HTTPS
/// vhost's chain only when one of its routes rewrites cookies, so 10,000 HTTPS vhosts do
/// not repeat the script 10,000 times in the listener.
pub(super) fn connection_manager(
    settings: &EnvoySettings,
    stat_prefix: &str,
    rds_name: &str,
    cookies: bool,
) -> HttpConnectionManager {
    let mut manager = HttpConnectionManager {
        stat_prefix: stat_prefix.to_string(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: rds_name.to_string(),
        })),
        // Filters that act only where a vhost or route configures them.
        http_filters: vec![
            empty_filter(
                CORS_FILTER,
                pack_any(envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors::default()),
            ),
            empty_filter(
                RATE_LIMIT_FILTER,
                pack_any(
                    envoy_types::pb::envoy::extensions::filters::http::local_ratelimit::v3::LocalRateLimit {
                        stat_prefix: "http_local_rate_limiter".to_string(),
                        ..Default::default()
                    },
                ),
            ),
            empty_filter(
                LUA_FILTER,
                pack_any(envoy_types::pb::envoy::extensions::filters::http::lua::v3::Lua {
                    default_source_code: Some(core::DataSource {
                        specifier: Some(core::data_source::Specifier::InlineString(
                            COOKIE_REWRITE_LUA.to_string(),
                        )),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            ),
            rbac_filter(),
            router_filter(),
        ],
        use_remote_address: Some(pb::BoolValue { value: true }),
        normalize_path: Some(pb::BoolValue { value: true }),
        merge_slashes: true,
        preserve_external_request_id: true,
        http_protocol_options: Some(core::Http1ProtocolOptions {
            accept_http_10: true,
            ..Default::default()
        }),
        common_http_protocol_options: Some(core::HttpProtocolOptions {
            idle_timeout: Some(duration(Duration::from_secs(60))),
            ..Default::default()
        }),
        access_log: if settings.access_log_path.is_empty() {
            Vec::new()
        } else {
            vec![file_access_log(&settings.access_log_path)]
        },
        ..Default::default()
    };
    if !cookies {
        manager.http_filters.retain(|f| f.name != LUA_FILTER);
    }
    manager
}

pub(super) fn http_listener(settings: &EnvoySettings) -> Listener {
    let manager = connection_manager(settings, HTTP_LISTENER, HTTP_LISTENER, true);
    Listener {
        name: HTTP_LISTENER.to_string(),
        address: Some(socket_address(&settings.http_address, settings.http_port)),
        filter_chains: vec![FilterChain {
            filters: vec![hcm_filter(manager)],
            ..Default::default()
        }],
        per_connection_buffer_limit_bytes: Some(UInt32Value { value: 32768 }),
        ..Default::default()
    }
}

/// Contour's `stats-health` listener: GET `/ready`, `/stats` and `/stats/prometheus` from
/// Envoy's admin, and nothing else of it.
pub(super) fn stats_listener(settings: &EnvoySettings) -> Listener {
    let get_only = HeaderMatcher {
        name: ":method".to_string(),
        header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(
            StringMatcher {
                match_pattern: Some(string_matcher::MatchPattern::Exact("GET".to_string())),
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    let routes = ["/ready", "/stats", "/stats/prometheus"]
        .into_iter()
        .map(|path| route::Route {
            r#match: Some(RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Path(path.to_string())),
                headers: vec![get_only.clone()],
                ..Default::default()
            }),
            action: Some(route::route::Action::Route(route::RouteAction {
                cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
                    ADMIN_CLUSTER.to_string(),
                )),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    let manager = HttpConnectionManager {
        stat_prefix: "stats".to_string(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(
            RouteConfiguration {
                virtual_hosts: vec![VirtualHost {
                    name: "backend".to_string(),
                    domains: vec!["*".to_string()],
                    routes,
                    ..Default::default()
                }],
                ..Default::default()
            },
        )),
        http_filters: vec![router_filter()],
        normalize_path: Some(pb::BoolValue { value: true }),
        ..Default::default()
    };
    Listener {
        name: STATS_LISTENER.to_string(),
        address: Some(socket_address(&settings.stats_address, settings.stats_port)),
        filter_chains: vec![FilterChain {
            filters: vec![hcm_filter(manager)],
            ..Default::default()
        }],
        ..Default::default()
    }
}
