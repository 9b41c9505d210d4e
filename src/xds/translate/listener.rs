//! IR listeners → Envoy `Listener`s: the HTTP connection manager and its filters, the
//! HTTPS listener's SNI filter chains (TLS terminated, TCP proxied or passed through),
//! the fallback certificate's chain, and Contour's `stats-health`.

use std::time::Duration;

use envoy_types::pb::envoy::config::accesslog::v3::{self as accesslog, AccessLog};
use envoy_types::pb::envoy::config::core::v3::{self as core, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{
    self as listener, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::config::route::v3::{
    self as route, HeaderMatcher, RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::FileAccessLog;
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, HttpConnectionManager, Rds, http_connection_manager::ForwardClientCertDetails,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    self as tls, CertificateValidationContext, CommonTlsContext, DownstreamTlsContext,
    SdsSecretConfig, TlsParameters,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use envoy_types::pb::google::protobuf::{self as pb, BoolValue, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;

use isobar_sdk::ir;

use crate::xds::filter::http_filter;
use crate::xds::proto::{ads, duration, inline, socket_address, tls_version};
use crate::xds::settings::{AccessLogSettings, EnvoySettings, TlsSettings};

/// The bootstrap's static cluster that reaches Envoy's own admin socket.
pub const ADMIN_CLUSTER: &str = "envoy-admin";

/// The fallback certificate's filter chain (Contour's name).
pub(in crate::xds) const FALLBACK_CHAIN: &str = "fallback-certificate";

pub(in crate::xds) fn versions(
    t: &ir::DownstreamTls,
    global: &TlsSettings,
) -> (ir::TlsVersion, ir::TlsVersion) {
    let min = t
        .min_version
        .map_or(global.min_version, |v| v.max(global.min_version));
    let max = t
        .max_version
        .map_or(global.max_version, |v| v.min(global.max_version));
    (min, max.max(min))
}

pub(in crate::xds) fn downstream_context(
    t: &ir::DownstreamTls,
    settings: &EnvoySettings,
) -> DownstreamTlsContext {
    let (min, max) = versions(t, &settings.tls);
    let validation = t.client_validation.as_ref().map(|v| {
        tls::common_tls_context::ValidationContextType::ValidationContext(
            CertificateValidationContext {
                trusted_ca: v.ca.as_ref().map(|ca| inline(&ca.pem)),
                crl: v.crl.as_ref().map(|crl| inline(&crl.pem)),
                only_verify_leaf_cert_crl: v.crl_only_verify_leaf,
                trust_chain_verification: if v.skip_verification {
                    tls::certificate_validation_context::TrustChainVerification::AcceptUntrusted
                        as i32
                } else {
                    0
                },
                ..Default::default()
            },
        )
    });
    DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(TlsParameters {
                tls_minimum_protocol_version: tls_version(min),
                tls_maximum_protocol_version: tls_version(max),
                cipher_suites: settings.tls.cipher_suites.clone(),
                ecdh_curves: settings.tls.ecdh_curves.clone(),
                ..Default::default()
            }),
            tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
                name: t.secret.clone(),
                sds_config: Some(ads()),
            }],
            alpn_protocols: if t.alpn_http {
                let http = &settings.http;
                [(http.http2, "h2"), (http.http1, "http/1.1")]
                    .into_iter()
                    .filter(|(on, _)| *on)
                    .map(|(_, p)| p.to_string())
                    .collect()
            } else {
                Vec::new()
            },
            validation_context_type: validation,
            ..Default::default()
        }),
        require_client_certificate: t
            .client_validation
            .as_ref()
            .map(|v| BoolValue { value: !v.optional }),
        ..Default::default()
    }
}

pub(in crate::xds) fn tcp_proxy_filter(stat_prefix: &str, t: &ir::TcpProxy) -> listener::Filter {
    let cluster = match t.clusters.as_slice() {
        // Sources never produce it (Envoy refuses an empty weighted list with the whole
        // listener); a cluster that does not exist closes each connection instead.
        [] => tcp::tcp_proxy::ClusterSpecifier::Cluster("tcp/no-service".to_string()),
        [one] => tcp::tcp_proxy::ClusterSpecifier::Cluster(one.cluster.clone()),
        many => {
            tcp::tcp_proxy::ClusterSpecifier::WeightedClusters(tcp::tcp_proxy::WeightedCluster {
                clusters: many
                    .iter()
                    .map(|c| tcp::tcp_proxy::weighted_cluster::ClusterWeight {
                        name: c.cluster.clone(),
                        weight: c.weight,
                        ..Default::default()
                    })
                    .collect(),
            })
        }
    };
    listener::Filter {
        name: "envoy.filters.network.tcp_proxy".to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(
            tcp::TcpProxy {
                stat_prefix: stat_prefix.to_string(),
                cluster_specifier: Some(cluster),
                idle_timeout: Some(duration(Duration::from_secs(9001))),
                ..Default::default()
            },
        ))),
    }
}

pub(in crate::xds) fn filter_chain(
    on: &ir::Listener,
    vhost: &ir::SecureVirtualHost,
    settings: &EnvoySettings,
) -> FilterChain {
    let filter = match &vhost.tcp_proxy {
        Some(t) => tcp_proxy_filter(&on.name, t),
        None => {
            let mut manager = connection_manager(
                on,
                settings,
                &on.route_config_name(&vhost.fqdn),
                rewrites_cookies(&vhost.http),
                Some(vhost.http.extensions()),
            );
            let forward = vhost
                .tls
                .as_ref()
                .and_then(|t| t.client_validation.as_ref())
                .and_then(|v| v.forward);
            if vhost.misdirected.host_is_sni && vhost.fqdn.starts_with("*.") {
                manager
                    .http_filters
                    .insert(0, crate::xds::filter::misdirected_filter());
            }
            if let Some(f) = forward {
                manager.forward_client_cert_details = ForwardClientCertDetails::SanitizeSet as i32;
                manager.set_current_client_cert_details =
                    Some(hcm::http_connection_manager::SetCurrentClientCertDetails {
                        subject: Some(BoolValue { value: f.subject }),
                        cert: f.cert,
                        chain: f.chain,
                        dns: f.dns,
                        uri: f.uri,
                        ..Default::default()
                    });
            }
            hcm_filter(manager)
        }
    };
    FilterChain {
        filter_chain_match: Some(FilterChainMatch {
            // `*`: any server name, and none.
            server_names: if vhost.fqdn == "*" {
                Vec::new()
            } else {
                vec![vhost.fqdn.clone()]
            },
            ..Default::default()
        }),
        transport_socket: vhost.tls.as_ref().map(|t| TransportSocket {
            name: "envoy.transport_sockets.tls".to_string(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(
                downstream_context(t, settings),
            ))),
        }),
        filters: vec![filter],
        ..Default::default()
    }
}

pub(in crate::xds) fn fallback_chain(
    on: &ir::Listener,
    sds: &str,
    settings: &EnvoySettings,
) -> FilterChain {
    let tls = ir::DownstreamTls {
        secret: sds.to_string(),
        min_version: None,
        max_version: None,
        alpn_http: true,
        client_validation: None,
    };
    FilterChain {
        name: FALLBACK_CHAIN.to_string(),
        filter_chain_match: Some(FilterChainMatch {
            transport_protocol: "tls".to_string(),
            ..Default::default()
        }),
        transport_socket: Some(TransportSocket {
            name: "envoy.transport_sockets.tls".to_string(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(
                downstream_context(&tls, settings),
            ))),
        }),
        filters: vec![hcm_filter(connection_manager(
            on,
            settings,
            &fallback_routes(on),
            true,
            None,
        ))],
        ..Default::default()
    }
}

/// An HTTPS listener without its filter chains: TLS inspection and the address. The
/// chains (one per secure vhost by SNI, then the fallback chain) are appended as encoded
/// bytes, so a change re-encodes only its own vhost's chain.
pub(in crate::xds) fn https_listener_shell(on: &ir::Listener, settings: &EnvoySettings) -> Vec<u8> {
    let mut filters = proxy_protocol(settings);
    filters.push(ListenerFilter {
        name: "envoy.filters.listener.tls_inspector".to_string(),
        config_type: Some(listener::listener_filter::ConfigType::TypedConfig(
            pack_any(TlsInspector {
                enable_ja3_fingerprinting: settings.tls.ja3.then_some(BoolValue { value: true }),
                enable_ja4_fingerprinting: settings.tls.ja4.then_some(BoolValue { value: true }),
                ..Default::default()
            }),
        )),
        ..Default::default()
    });
    Listener {
        name: on.name.clone(),
        address: Some(socket_address(&on.address, on.port)),
        listener_filters: filters,
        ..traffic_listener(on, settings)
    }
    .encode_to_vec()
}

/// `Listener.filter_chains`.
pub const LISTENER_FILTER_CHAINS: u32 = 3;

/// One secure vhost's filter chain on listener `on`, encoded at the end of `buf`.
pub(in crate::xds) fn encode_vhost_chain(
    on: &ir::Listener,
    vhost: &ir::SecureVirtualHost,
    settings: &EnvoySettings,
    buf: &mut Vec<u8>,
) {
    filter_chain(on, vhost, settings).encode_raw(buf);
}

/// The fallback certificate's filter chain on listener `on`, encoded.
pub(in crate::xds) fn fallback_chain_bytes(
    on: &ir::Listener,
    sds: &str,
    settings: &EnvoySettings,
) -> Vec<u8> {
    fallback_chain(on, sds, settings).encode_to_vec()
}

/// The RouteConfiguration of an HTTPS listener's fallback chain.
pub(in crate::xds) fn fallback_routes(on: &ir::Listener) -> String {
    match &on.routes {
        Some(names) => names.fallback.clone(),
        None => format!("{}/fallback", on.name),
    }
}

/// A file access log at `path`, as `log` says: Envoy's default format, a format
/// string, or JSON fields (written in their order: a protobuf `Struct` is a hash map,
/// whose order would change the bytes from build to build), for responses with at
/// least `log.min_status`.
pub(in crate::xds) fn file_access_log(path: &str, log: &AccessLogSettings) -> AccessLog {
    /// `FileAccessLog` with `log_format` (a `SubstitutionFormatString`) as Envoy reads
    /// it, its JSON fields in order.
    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderedFileAccessLog {
        #[prost(string, tag = "1")]
        path: String,
        #[prost(message, optional, tag = "5")]
        log_format: Option<OrderedFormat>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderedFormat {
        #[prost(message, optional, tag = "2")]
        json_format: Option<OrderedStruct>,
        #[prost(message, optional, tag = "5")]
        text_format_source: Option<core::DataSource>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderedStruct {
        #[prost(message, repeated, tag = "1")]
        fields: Vec<StructEntry>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct StructEntry {
        #[prost(string, tag = "1")]
        key: String,
        #[prost(message, optional, tag = "2")]
        value: Option<pb::Value>,
    }
    let format = if !log.json.is_empty() {
        Some(OrderedFormat {
            json_format: Some(OrderedStruct {
                fields: log
                    .json
                    .iter()
                    .map(|(key, format)| StructEntry {
                        key: key.clone(),
                        value: Some(pb::Value {
                            kind: Some(pb::value::Kind::StringValue(format.clone())),
                        }),
                    })
                    .collect(),
            }),
            text_format_source: None,
        })
    } else {
        log.text.as_ref().map(|text| OrderedFormat {
            json_format: None,
            text_format_source: Some(inline(text)),
        })
    };
    let config = pb::Any {
        type_url: <FileAccessLog as prost::Name>::type_url(),
        value: OrderedFileAccessLog {
            path: path.to_string(),
            log_format: format,
        }
        .encode_to_vec(),
    };
    let filter = (log.min_status > 0).then(|| accesslog::AccessLogFilter {
        filter_specifier: Some(
            accesslog::access_log_filter::FilterSpecifier::StatusCodeFilter(
                accesslog::StatusCodeFilter {
                    comparison: Some(accesslog::ComparisonFilter {
                        op: accesslog::comparison_filter::Op::Ge as i32,
                        value: Some(core::RuntimeUInt32 {
                            default_value: log.min_status,
                            runtime_key: "isobar.access_log.min_status".to_string(),
                        }),
                    }),
                },
            ),
        ),
    });
    AccessLog {
        name: "envoy.access_loggers.file".to_string(),
        filter,
        config_type: Some(accesslog::access_log::ConfigType::TypedConfig(config)),
    }
}

pub(in crate::xds) fn hcm_filter(manager: HttpConnectionManager) -> listener::Filter {
    listener::Filter {
        name: "envoy.filters.network.http_connection_manager".to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(manager))),
    }
}

/// Whether any route of `vhost` rewrites `Set-Cookie` (needs the Lua filter).
pub(in crate::xds) fn rewrites_cookies(vhost: &ir::VirtualHost) -> bool {
    vhost.routes.values().any(|r| {
        !r.policy().cookie_rewrites.is_empty()
            || matches!(&r.action, ir::RouteAction::Forward(clusters)
                if clusters.iter().any(|w| !w.cookie_rewrites.is_empty()))
    })
}

/// The HTTP connection manager of an HTTP listener and of each chain of an HTTPS one,
/// with the listener's HTTP filters. The cookie-rewriting Lua filter (2.5 KB of script)
/// is only in managers whose routes may use it (`cookies`): an HTTP listener's and the
/// fallback chain's always carry it, an HTTPS vhost's chain only when one of its routes
/// rewrites cookies, so 10,000 HTTPS vhosts do not repeat the script 10,000 times in
/// the listener. A secure vhost's own manager has `vhost`'s authorization and JWT
/// providers; the others have the listener's global authorization.
pub(in crate::xds) fn connection_manager(
    on: &ir::Listener,
    settings: &EnvoySettings,
    rds_name: &str,
    cookies: bool,
    vhost: Option<&ir::VhostExtensions>,
) -> HttpConnectionManager {
    let http = &settings.http;
    let manager = crate::xds::filter::Manager {
        http,
        extensions: &on.extensions,
        vhost,
    };
    HttpConnectionManager {
        stat_prefix: on.name.clone(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: rds_name.to_string(),
        })),
        http_filters: on
            .http_filters
            .iter()
            .filter(|f| cookies || **f != ir::HttpFilter::CookieRewrite)
            .filter_map(|f| http_filter(*f, &manager))
            .collect(),
        tracing: on
            .extensions
            .tracing
            .as_deref()
            .map(crate::xds::extension::tracing),
        use_remote_address: Some(pb::BoolValue { value: true }),
        normalize_path: Some(pb::BoolValue { value: true }),
        merge_slashes: http.merge_slashes,
        preserve_external_request_id: true,
        xff_num_trusted_hops: http.num_trusted_hops,
        strip_trailing_host_dot: http.strip_trailing_host_dot,
        server_header_transformation: http.server_header,
        request_timeout: http.request_timeout.map(duration),
        stream_idle_timeout: http.stream_idle_timeout.map(duration),
        delayed_close_timeout: http.delayed_close_timeout.map(duration),
        drain_timeout: http.drain_timeout.map(duration),
        codec_type: match (http.http1, http.http2) {
            (true, false) => hcm::http_connection_manager::CodecType::Http1,
            (false, true) => hcm::http_connection_manager::CodecType::Http2,
            _ => hcm::http_connection_manager::CodecType::Auto,
        } as i32,
        http_protocol_options: Some(core::Http1ProtocolOptions {
            accept_http_10: true,
            allow_chunked_length: http.allow_chunked_length,
            ..Default::default()
        }),
        http2_protocol_options: http.http2_max_concurrent_streams.map(|value| {
            core::Http2ProtocolOptions {
                max_concurrent_streams: Some(UInt32Value { value }),
                ..Default::default()
            }
        }),
        common_http_protocol_options: Some(core::HttpProtocolOptions {
            idle_timeout: http.idle_timeout.map(duration),
            max_connection_duration: http.max_connection_duration.map(duration),
            max_requests_per_connection: http
                .max_requests_per_connection
                .map(|value| UInt32Value { value }),
            ..Default::default()
        }),
        access_log: if settings.access_log_path.is_empty() || http.access_log.disabled {
            Vec::new()
        } else {
            vec![file_access_log(&settings.access_log_path, &http.access_log)]
        },
        ..Default::default()
    }
}

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
