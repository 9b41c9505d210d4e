//! IR listeners → Envoy `Listener`s: the HTTP connection manager and its filters, the
//! HTTPS listener's SNI filter chains (TLS terminated, TCP proxied or passed through),
//! the fallback certificate's chain, and Contour's `stats-health`.

use envoy_types::pb::envoy::config::core::v3::{self as core, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{
    self as listener, FilterChain, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::config::route::v3::{
    self as route, HeaderMatcher, RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    self as tls, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, TlsParameters,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use envoy_types::pb::google::protobuf::{self as pb, BoolValue, UInt32Value};
use envoy_types::util::pack_any;

use isobar_sdk::ir;

use crate::xds::filter::http_filter;
use crate::xds::proto::{ads, socket_address, tls_version};
use crate::xds::settings::EnvoySettings;

mod chain;
mod manager;

pub use chain::LISTENER_FILTER_CHAINS;
pub(in crate::xds) use chain::{
    encode_vhost_chain, fallback_chain_bytes, fallback_routes, https_listener_shell,
    tcp_proxy_filter,
};
pub(in crate::xds) use manager::{connection_manager, hcm_filter};

/// The bootstrap's static cluster that reaches Envoy's own admin socket.
pub const ADMIN_CLUSTER: &str = "envoy-admin";

/// The fallback certificate's filter chain (Contour's name).
pub(in crate::xds) const FALLBACK_CHAIN: &str = "fallback-certificate";

/// What every listener of traffic gets, as Contour's: TCP keep-alive, the `listener`
/// section's socket options, connection balancer and per-connection buffer limit. The
/// IPv4 TOS is set on IPv4 listeners and the IPv6 traffic class on IPv6 ones only (the
/// other fails the listener's socket, as Contour's does).
fn traffic_listener(on: &ir::Listener, settings: &EnvoySettings) -> Listener {
    let l = &settings.listener;
    let mut options = keepalive();
    let ipv6 = on.address.parse::<std::net::Ipv6Addr>().is_ok();
    let (level, name, value, what) = if ipv6 {
        (41, 67, l.traffic_class, "Set IPv6 Traffic Class field")
    } else {
        (0, 1, l.tos, "Set IPv4 TOS field")
    };
    if value != 0 {
        options.push(socket_option(level, name, i64::from(value), what));
    }
    Listener {
        socket_options: options,
        per_connection_buffer_limit_bytes: Some(UInt32Value {
            value: l.per_connection_buffer_limit,
        }),
        max_connections_to_accept_per_socket_event: l
            .max_accept_per_event
            .map(|value| UInt32Value { value }),
        connection_balance_config: l.exact_balance.then(|| {
            use listener::listener::{ConnectionBalanceConfig, connection_balance_config};
            ConnectionBalanceConfig {
                balance_type: Some(connection_balance_config::BalanceType::ExactBalance(
                    connection_balance_config::ExactBalance {},
                )),
            }
        }),
        ..Default::default()
    }
}

/// A socket option set on the listening socket (Linux's levels and names).
fn socket_option(level: i64, name: i64, value: i64, what: &str) -> core::SocketOption {
    core::SocketOption {
        description: what.to_string(),
        level,
        name,
        value: Some(core::socket_option::Value::IntValue(value)),
        state: core::socket_option::SocketState::StateListening as i32,
        ..Default::default()
    }
}

/// TCP keep-alive on accepted connections: probes after 45 s idle, every 5 s, 9 of
/// them (Contour's).
fn keepalive() -> Vec<core::SocketOption> {
    vec![
        socket_option(1, 9, 1, "Enable TCP keep-alive"),
        socket_option(6, 4, 45, "TCP keep-alive initial idle time"),
        socket_option(6, 5, 5, "TCP keep-alive time between probes"),
        socket_option(6, 6, 9, "TCP keep-alive probe count"),
    ]
}

/// The PROXY protocol listener filter (`--use-proxy-protocol`), first of a listener's:
/// the client address comes from the load balancer's PROXY header.
fn proxy_protocol(settings: &EnvoySettings) -> Vec<ListenerFilter> {
    use envoy_types::pb::envoy::extensions::filters::listener::proxy_protocol::v3::ProxyProtocol;
    if !settings.proxy_protocol {
        return Vec::new();
    }
    vec![ListenerFilter {
        name: "envoy.filters.listener.proxy_protocol".to_string(),
        config_type: Some(listener::listener_filter::ConfigType::TypedConfig(
            pack_any(ProxyProtocol::default()),
        )),
        ..Default::default()
    }]
}

/// A plain HTTP listener: one connection manager, routed by the RouteConfiguration of
/// the listener's name, or (`shards` > 0) by the shards of its routes (see
/// `xds::shard`).
pub(in crate::xds) fn http_listener(
    on: &ir::Listener,
    settings: &EnvoySettings,
    shards: usize,
) -> Listener {
    let mut manager = connection_manager(on, settings, &on.name, true, None);
    if shards > 0 {
        manager.route_specifier = Some(hcm::http_connection_manager::RouteSpecifier::ScopedRoutes(
            crate::xds::shard::scoped_routes(&on.name),
        ));
        manager.early_header_mutation_extensions =
            vec![crate::xds::shard::scope_header_mutation(&on.name, shards)];
    }
    Listener {
        name: on.name.clone(),
        address: Some(socket_address(&on.address, on.port)),
        listener_filters: proxy_protocol(settings),
        filter_chains: vec![FilterChain {
            filters: vec![hcm_filter(manager)],
            ..Default::default()
        }],
        ..traffic_listener(on, settings)
    }
}

/// A plain TCP listener: every connection forwarded by its proxy.
pub(in crate::xds) fn tcp_listener(
    on: &ir::Listener,
    proxy: &ir::TcpProxy,
    settings: &EnvoySettings,
) -> Listener {
    Listener {
        name: on.name.clone(),
        address: Some(socket_address(&on.address, on.port)),
        listener_filters: proxy_protocol(settings),
        filter_chains: vec![FilterChain {
            filters: vec![tcp_proxy_filter(&on.name, proxy)],
            ..Default::default()
        }],
        ..traffic_listener(on, settings)
    }
}

/// A UDP listener: Envoy's UDP proxy forwards each session (source address and port)
/// to the proxy's one cluster (a route's several weighted backends are one cluster of
/// weighted localities).
pub(in crate::xds) fn udp_listener(on: &ir::Listener, proxy: &ir::TcpProxy) -> Listener {
    use envoy_types::pb::envoy::extensions::filters::udp::udp_proxy::v3 as udp;
    use envoy_types::pb::xds::r#type::matcher::v3::{Matcher, matcher};
    let cluster = proxy
        .clusters
        .first()
        .map_or_else(|| "udp/no-service".to_string(), |c| c.cluster.clone());
    let route = matcher::OnMatch {
        keep_matching: false,
        on_match: Some(matcher::on_match::OnMatch::Action(
            envoy_types::pb::xds::core::v3::TypedExtensionConfig {
                name: "route".to_string(),
                typed_config: Some(pack_any(udp::Route { cluster })),
            },
        )),
    };
    let mut address = socket_address(&on.address, on.port);
    if let Some(core::address::Address::SocketAddress(a)) = address.address.as_mut() {
        a.protocol = core::socket_address::Protocol::Udp as i32;
    }
    Listener {
        name: on.name.clone(),
        address: Some(address),
        udp_listener_config: Some(listener::UdpListenerConfig::default()),
        listener_filters: vec![ListenerFilter {
            name: "envoy.filters.udp_listener.udp_proxy".to_string(),
            config_type: Some(listener::listener_filter::ConfigType::TypedConfig(
                pack_any(udp::UdpProxyConfig {
                    stat_prefix: on.name.clone(),
                    route_specifier: Some(udp::udp_proxy_config::RouteSpecifier::Matcher(
                        Matcher {
                            on_no_match: Some(Box::new(route)),
                            matcher_type: None,
                        },
                    )),
                    ..Default::default()
                }),
            )),
            filter_disabled: None,
        }],
        ..Default::default()
    }
}

/// A listener onto Envoy's admin (Contour's `stats-health`, `envoy-admin`,
/// `health-om-enforced`): GET on its admin paths, and nothing else of it.
pub(in crate::xds) fn stats_listener(on: &ir::Listener, settings: &EnvoySettings) -> Listener {
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
    let routes = on
        .admin_paths
        .iter()
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
        http_filters: on
            .http_filters
            .iter()
            .filter_map(|f| {
                let manager = crate::xds::filter::Manager {
                    http: &Default::default(),
                    extensions: &on.extensions,
                    vhost: None,
                };
                http_filter(*f, &manager)
            })
            .collect(),
        normalize_path: Some(pb::BoolValue { value: true }),
        ..Default::default()
    };
    let transport_socket = settings
        .metrics_tls
        .as_ref()
        .filter(|_| on.metrics_tls)
        .map(|(_, _, ca)| metrics_tls_socket(ca.is_some()));
    Listener {
        name: on.name.clone(),
        address: Some(socket_address(&on.address, on.port)),
        filter_chains: vec![FilterChain {
            filters: vec![hcm_filter(manager)],
            transport_socket,
            ..Default::default()
        }],
        socket_options: keepalive(),
        ignore_global_conn_limit: !on.connection_limited,
        ..Default::default()
    }
}

/// TLS 1.3 with the metrics certificate over SDS, and clients of the metrics CA only
/// when there is one (Contour's stats listener).
fn metrics_tls_socket(client_ca: bool) -> TransportSocket {
    use crate::xds::secret::{METRICS_CA, METRICS_CERTIFICATE};
    let sds = |name: &str| SdsSecretConfig {
        name: name.to_string(),
        sds_config: Some(ads()),
    };
    let context = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(TlsParameters {
                tls_minimum_protocol_version: tls_version(ir::TlsVersion::V1_3),
                tls_maximum_protocol_version: tls_version(ir::TlsVersion::V1_3),
                ..Default::default()
            }),
            tls_certificate_sds_secret_configs: vec![sds(METRICS_CERTIFICATE)],
            validation_context_type: client_ca.then(|| {
                tls::common_tls_context::ValidationContextType::ValidationContextSdsSecretConfig(
                    sds(METRICS_CA),
                )
            }),
            ..Default::default()
        }),
        require_client_certificate: client_ca.then_some(BoolValue { value: true }),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(
            context,
        ))),
    }
}
