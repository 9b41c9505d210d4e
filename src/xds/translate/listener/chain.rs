//! The HTTPS listener's filter chains: a vhost's SNI chain (TLS terminated, TCP proxied
//! or passed through), the fallback certificate's, and the TLS contexts they hold.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{self as core, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{
    self as listener, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, http_connection_manager::ForwardClientCertDetails,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    self as tls, CertificateValidationContext, CommonTlsContext, DownstreamTlsContext,
    SdsSecretConfig, TlsParameters,
};
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;
use prost::Message;

use isobar_sdk::ir;

use crate::xds::proto::{ads, duration, inline, socket_address, tls_version};
use crate::xds::settings::{EnvoySettings, TlsSettings};

use super::manager::{connection_manager, hcm_filter, rewrites_cookies};
use super::{FALLBACK_CHAIN, proxy_protocol, traffic_listener};

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
