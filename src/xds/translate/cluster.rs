//! IR clusters → Envoy `Cluster`s (EDS), with their load balancing, health checks,
//! circuit breakers, upstream HTTP/2 and upstream TLS.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::{self as cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{self as core, TransportSocket};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    self as tls, CertificateValidationContext, CommonTlsContext, SdsSecretConfig, TlsParameters,
};
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::{Any, UInt32Value};
use envoy_types::util::pack_any;

use isobar_sdk::ir;

use crate::xds::proto::{ads, duration, inline, tls_version};
use crate::xds::settings::EnvoySettings;

pub(in crate::xds) fn cluster_for(
    c: &ir::Cluster,
    settings: &EnvoySettings,
    client_certificate: Option<&str>,
) -> Cluster {
    let dns_family = match c.options.dns_lookup_family {
        Some(ir::DnsLookupFamily::Auto) => 0,
        Some(ir::DnsLookupFamily::V4) => 1,
        Some(ir::DnsLookupFamily::V6) => 2,
        Some(ir::DnsLookupFamily::All) => 4,
        None => settings.cluster.dns_lookup_family,
    };
    let (discovery, eds, load_assignment) = match &c.options.external_name {
        // An ExternalName Service (or a JWKS host): its DNS name, resolved by Envoy
        // (every address when the lookup family is `all`, as Contour).
        Some(host) => (
            if dns_family == 4 {
                cluster::cluster::DiscoveryType::LogicalDns
            } else {
                cluster::cluster::DiscoveryType::StrictDns
            },
            None,
            Some(external_name_endpoints(&c.name, host, c.port)),
        ),
        None => (
            cluster::cluster::DiscoveryType::Eds,
            Some(cluster::cluster::EdsClusterConfig {
                eds_config: Some(ads()),
                service_name: c.eds_name.clone(),
            }),
            None,
        ),
    };
    Cluster {
        name: c.name.clone(),
        alt_stat_name: c.alt_stat_name.clone(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            discovery as i32,
        )),
        eds_cluster_config: eds,
        load_assignment,
        dns_lookup_family: if c.options.external_name.is_some() {
            dns_family
        } else {
            0
        },
        connect_timeout: Some(duration(settings.connect_timeout)),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(Percent { value: 0.0 }),
            // Several Services, each a locality with its weight (Contour sends the
            // weights without this, and Envoy then ignores them).
            locality_config_specifier: (c.localities.len() > 1).then_some(
                cluster::cluster::common_lb_config::LocalityConfigSpecifier::LocalityWeightedLbConfig(
                    Default::default(),
                ),
            ),
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
        circuit_breakers: breakers_with_defaults(
            c.options.circuit_breakers.as_deref(),
            settings.cluster.circuit_breakers.as_ref(),
        )
        .as_ref()
        .map(circuit_breakers),
        typed_extension_protocol_options: upstream_http_options(
            &c.options,
            settings.cluster.max_requests_per_connection,
        ),
        per_connection_buffer_limit_bytes: settings
            .cluster
            .per_connection_buffer_limit
            .map(|value| UInt32Value { value }),
        lb_config: c
            .options
            .slow_start
            .as_ref()
            .map(|s| slow_start(s, c.options.lb_policy)),
        transport_socket: upstream_transport_socket(&c.options, settings, client_certificate),
        ..Default::default()
    }
}

/// The one endpoint of an ExternalName cluster: its DNS name at the Service's port.
fn external_name_endpoints(
    cluster: &str,
    host: &str,
    port: i32,
) -> envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
    use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
    endpoint::ClusterLoadAssignment {
        cluster_name: cluster.to_string(),
        endpoints: vec![endpoint::LocalityLbEndpoints {
            lb_endpoints: vec![endpoint::LbEndpoint {
                host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                    endpoint::Endpoint {
                        address: Some(crate::xds::proto::socket_address(
                            host,
                            u16::try_from(port).unwrap_or(0),
                        )),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub(in crate::xds) fn slow_start(
    s: &ir::SlowStart,
    lb: ir::LbPolicy,
) -> cluster::cluster::LbConfig {
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
pub(in crate::xds) fn timed_check(
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

pub(in crate::xds) fn tcp_health_check(h: &ir::TcpHealthCheck) -> core::HealthCheck {
    use core::health_check::{HealthChecker, TcpHealthCheck};
    timed_check(
        h.timeout_seconds,
        h.interval_seconds,
        h.unhealthy_threshold,
        h.healthy_threshold,
        HealthChecker::TcpHealthCheck(TcpHealthCheck::default()),
    )
}

pub(in crate::xds) fn health_check(h: &ir::HealthCheck) -> core::HealthCheck {
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

/// A cluster's circuit breakers: its Service's own thresholds, each one it leaves unset
/// taken from `cluster.circuit-breakers` (as Contour fills them in).
pub(in crate::xds) fn breakers_with_defaults(
    own: Option<&ir::CircuitBreakers>,
    defaults: Option<&ir::CircuitBreakers>,
) -> Option<ir::CircuitBreakers> {
    match (own, defaults) {
        (None, None) => None,
        (Some(b), None) | (None, Some(b)) => Some(b.clone()),
        (Some(own), Some(d)) => Some(ir::CircuitBreakers {
            max_connections: own.max_connections.or(d.max_connections),
            max_pending_requests: own.max_pending_requests.or(d.max_pending_requests),
            max_requests: own.max_requests.or(d.max_requests),
            max_retries: own.max_retries.or(d.max_retries),
            per_host_max_connections: own.per_host_max_connections.or(d.per_host_max_connections),
            retry_budget: own.retry_budget.or(d.retry_budget),
        }),
    }
}

pub(in crate::xds) fn circuit_breakers(b: &ir::CircuitBreakers) -> cluster::CircuitBreakers {
    let limit = |v: Option<u32>| v.map(|value| UInt32Value { value });
    cluster::CircuitBreakers {
        thresholds: vec![cluster::circuit_breakers::Thresholds {
            max_connections: limit(b.max_connections),
            max_pending_requests: limit(b.max_pending_requests),
            max_requests: limit(b.max_requests),
            max_retries: limit(b.max_retries),
            retry_budget: b.retry_budget.map(|r| {
                cluster::circuit_breakers::thresholds::RetryBudget {
                    budget_percent: Some(Percent {
                        value: f64::from(r.percent),
                    }),
                    budget_interval: (!r.interval.is_zero()).then(|| duration(r.interval)),
                    min_retry_concurrency: Some(UInt32Value {
                        value: r.min_concurrency,
                    }),
                }
            }),
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

/// Upstream HTTP/2 (`h2`, `h2c`), the idle timeout of upstream connections and the
/// requests each may carry (`cluster.max-requests-per-connection`), as Envoy's
/// `HttpProtocolOptions` (one entry, so the map encodes deterministically).
pub(in crate::xds) fn upstream_http_options(
    options: &ir::ClusterOptions,
    max_requests_per_connection: Option<u32>,
) -> HashMap<String, Any> {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
        HttpProtocolOptions, http_protocol_options,
    };
    use http_protocol_options::explicit_http_config::ProtocolConfig;
    let http2 = options.protocol.is_some_and(ir::UpstreamProtocol::is_http2);
    if !http2 && options.idle_connection_timeout.is_none() && max_requests_per_connection.is_none()
    {
        return HashMap::new();
    }
    let protocol = if http2 {
        ProtocolConfig::Http2ProtocolOptions(core::Http2ProtocolOptions::default())
    } else {
        ProtocolConfig::HttpProtocolOptions(core::Http1ProtocolOptions::default())
    };
    let common = (options.idle_connection_timeout.is_some()
        || max_requests_per_connection.is_some())
    .then(|| core::HttpProtocolOptions {
        idle_timeout: options.idle_connection_timeout.map(duration),
        max_requests_per_connection: max_requests_per_connection.map(|value| UInt32Value { value }),
        ..Default::default()
    });
    let value = pack_any(HttpProtocolOptions {
        common_http_protocol_options: common,
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

/// The transport socket of a cluster spoken to over TLS (`tls` and `h2`): ALPN `h2` for
/// HTTP/2, the route's Host as SNI, the CA and names to verify the upstream against, and
/// Envoy's own client certificate when one is configured.
pub fn upstream_transport_socket(
    options: &ir::ClusterOptions,
    settings: &EnvoySettings,
    client_certificate: Option<&str>,
) -> Option<TransportSocket> {
    let protocol = options.protocol.filter(|p| p.is_tls())?;
    let validation = options.upstream_validation.as_ref().map(|v| {
        tls::common_tls_context::ValidationContextType::ValidationContext(
            CertificateValidationContext {
                trusted_ca: Some(inline(&v.ca.pem)),
                match_typed_subject_alt_names: v
                    .subject_names
                    .iter()
                    .map(|name| (tls::subject_alt_name_matcher::SanType::Dns, name))
                    .chain(
                        v.subject_uris
                            .iter()
                            .map(|uri| (tls::subject_alt_name_matcher::SanType::Uri, uri)),
                    )
                    .map(|(san_type, name)| tls::SubjectAltNameMatcher {
                        san_type: san_type as i32,
                        matcher: Some(envoy_types::pb::envoy::r#type::matcher::v3::StringMatcher {
                            match_pattern: Some(
                                envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern::Exact(
                                    name.clone(),
                                ),
                            ),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        )
    });
    let context = tls::UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: Some(TlsParameters {
                tls_minimum_protocol_version: tls_version(
                    settings.cluster.upstream_tls.min_version,
                ),
                tls_maximum_protocol_version: tls_version(
                    settings.cluster.upstream_tls.max_version,
                ),
                cipher_suites: settings.cluster.upstream_tls.cipher_suites.clone(),
                ecdh_curves: settings.cluster.upstream_tls.ecdh_curves.clone(),
                ..Default::default()
            }),
            alpn_protocols: if protocol.is_http2() {
                vec!["h2".to_string()]
            } else {
                Vec::new()
            },
            validation_context_type: validation,
            tls_certificate_sds_secret_configs: options
                .client_certificate
                .as_deref()
                .or(client_certificate)
                .map(|name| SdsSecretConfig {
                    name: name.to_string(),
                    sds_config: Some(ads()),
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }),
        sni: options.sni.clone().unwrap_or_default(),
        ..Default::default()
    };
    Some(TransportSocket {
        name: "envoy.transport_sockets.tls".to_string(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(
            context,
        ))),
    })
}
