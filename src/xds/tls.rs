//! The HTTPS side: the `ingress_https` listener (one SNI filter chain per secure vhost),
//! certificates over SDS, and the `https/<fqdn>` route configurations.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{self as core, DataSource, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{
    self as listener, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::config::route::v3::{self as route, DirectResponseAction, VirtualHost};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, http_connection_manager::ForwardClientCertDetails,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    self as tls, CertificateValidationContext, CommonTlsContext, DownstreamTlsContext,
    SdsSecretConfig, TlsParameters,
};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;

use isobar_sdk::ir;

use super::snapshot::Encoded;
use super::translate::{
    EnvoySettings, TlsSettings, ads, connection_manager, duration, encoded, hcm_filter,
    rewrites_cookies, socket_address,
};

/// Contour's HTTPS listener name; also the stat prefix of every filter on it.
pub const HTTPS_LISTENER: &str = "ingress_https";

/// The fallback certificate's filter chain and RouteConfiguration (Contour's names).
pub const FALLBACK_CHAIN: &str = "fallback-certificate";
pub const FALLBACK_ROUTES: &str = "ingress_fallbackcert";

/// The RouteConfiguration of one secure vhost.
pub fn route_config_name(fqdn: &str) -> String {
    format!("https/{fqdn}")
}

fn inline(text: &str) -> DataSource {
    DataSource {
        specifier: Some(core::data_source::Specifier::InlineString(text.to_string())),
        ..Default::default()
    }
}

/// The SDS resource of a certificate and its key, named `name`: the bytes made when
/// its Secret was checked, shared, when the name is the one they carry (the SDS name
/// of that Secret, as every source names it); renamed otherwise.
pub fn secret(name: &str, secret: &ir::ServedSecret) -> Encoded {
    let certificate = &secret.certificate;
    if certificate.sds_name() == name {
        return Encoded::clone(certificate.sds_resource());
    }
    match tls::Secret::decode(&certificate.sds_resource()[..]) {
        Ok(mut renamed) => {
            renamed.name = name.to_string();
            encoded(&renamed)
        }
        // Bytes the SDK encoded always decode; were they not to, nothing is served
        // under this name rather than an empty certificate.
        Err(e) => {
            tracing::error!(sds = %name, error = %e, "a checked certificate's SDS resource does not decode");
            Encoded::from(Vec::new())
        }
    }
}

/// Answers 421 Misdirected Request to any Host no other vhost of the configuration has.
pub fn misdirected_vhost() -> VirtualHost {
    VirtualHost {
        name: "misdirected".to_string(),
        domains: vec!["*".to_string()],
        routes: vec![route::Route {
            r#match: Some(route::RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".to_string())),
                ..Default::default()
            }),
            action: Some(route::route::Action::DirectResponse(DirectResponseAction {
                status: 421,
                ..Default::default()
            })),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn protocol_version(v: ir::TlsVersion) -> i32 {
    match v {
        ir::TlsVersion::V1_2 => tls::tls_parameters::TlsProtocol::TlSv12 as i32,
        ir::TlsVersion::V1_3 => tls::tls_parameters::TlsProtocol::TlSv13 as i32,
    }
}

/// The vhost's versions within the global bounds: it may narrow them, never widen them.
fn versions(t: &ir::DownstreamTls, global: &TlsSettings) -> (ir::TlsVersion, ir::TlsVersion) {
    let min = t
        .min_version
        .map_or(global.min_version, |v| v.max(global.min_version));
    let max = t
        .max_version
        .map_or(global.max_version, |v| v.min(global.max_version));
    (min, max.max(min))
}

fn downstream_context(t: &ir::DownstreamTls, settings: &EnvoySettings) -> DownstreamTlsContext {
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
                tls_minimum_protocol_version: protocol_version(min),
                tls_maximum_protocol_version: protocol_version(max),
                cipher_suites: settings.tls.cipher_suites.clone(),
                ecdh_curves: settings.tls.ecdh_curves.clone(),
                ..Default::default()
            }),
            tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
                name: t.secret.clone(),
                sds_config: Some(ads()),
            }],
            alpn_protocols: if t.alpn_http {
                vec!["h2".to_string(), "http/1.1".to_string()]
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

fn tcp_proxy_filter(t: &ir::TcpProxy) -> listener::Filter {
    let cluster = match t.clusters.as_slice() {
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
                stat_prefix: HTTPS_LISTENER.to_string(),
                cluster_specifier: Some(cluster),
                idle_timeout: Some(duration(Duration::from_secs(9001))),
                ..Default::default()
            },
        ))),
    }
}

fn filter_chain(vhost: &ir::SecureVirtualHost, settings: &EnvoySettings) -> FilterChain {
    let filter = match &vhost.tcp_proxy {
        Some(t) => tcp_proxy_filter(t),
        None => {
            let mut manager = connection_manager(
                settings,
                HTTPS_LISTENER,
                &route_config_name(&vhost.fqdn),
                rewrites_cookies(&vhost.http),
            );
            let forward = vhost
                .tls
                .as_ref()
                .and_then(|t| t.client_validation.as_ref())
                .and_then(|v| v.forward);
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
            server_names: vec![vhost.fqdn.clone()],
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
                    .map(|name| tls::SubjectAltNameMatcher {
                        san_type: tls::subject_alt_name_matcher::SanType::Dns as i32,
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
                tls_minimum_protocol_version: protocol_version(settings.tls.min_version),
                tls_maximum_protocol_version: protocol_version(settings.tls.max_version),
                ..Default::default()
            }),
            alpn_protocols: if protocol.is_http2() {
                vec!["h2".to_string()]
            } else {
                Vec::new()
            },
            validation_context_type: validation,
            tls_certificate_sds_secret_configs: client_certificate
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

/// For TLS clients that send no SNI: the fallback certificate and the routes of the vhosts
/// that enabled it. Chains with server names are more specific and win when SNI is sent.
fn fallback_chain(sds: &str, settings: &EnvoySettings) -> FilterChain {
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
            settings,
            HTTPS_LISTENER,
            FALLBACK_ROUTES,
            true,
        ))],
        ..Default::default()
    }
}

/// `ingress_https` without its filter chains: TLS inspection and the address. The chains
/// (one per secure vhost by SNI, then the fallback chain) are appended as encoded bytes,
/// so a change re-encodes only its own vhost's chain.
pub fn https_listener_shell(settings: &EnvoySettings) -> Vec<u8> {
    Listener {
        name: HTTPS_LISTENER.to_string(),
        address: Some(socket_address(&settings.https_address, settings.https_port)),
        listener_filters: vec![ListenerFilter {
            name: "envoy.filters.listener.tls_inspector".to_string(),
            config_type: Some(listener::listener_filter::ConfigType::TypedConfig(
                pack_any(TlsInspector::default()),
            )),
            ..Default::default()
        }],
        per_connection_buffer_limit_bytes: Some(UInt32Value { value: 32768 }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `Listener.filter_chains`.
pub const LISTENER_FILTER_CHAINS: u32 = 3;

/// One secure vhost's filter chain, encoded at the end of `buf`.
pub fn encode_vhost_chain(
    vhost: &ir::SecureVirtualHost,
    settings: &EnvoySettings,
    buf: &mut Vec<u8>,
) {
    filter_chain(vhost, settings).encode_raw(buf);
}

/// The fallback certificate's filter chain, encoded.
pub fn fallback_chain_bytes(sds: &str, settings: &EnvoySettings) -> Vec<u8> {
    fallback_chain(sds, settings).encode_to_vec()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use isobar_sdk::secret::{SecretCheck, sds_name};

    use super::*;

    fn pem_der(pem_text: &str) -> Vec<u8> {
        pem::parse(pem_text)
            .map(|p| p.contents().to_vec())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The SDS resource made when a Secret is checked is what prost encodes for the same
    /// message, is served without a copy, and keeps its certificate when renamed.
    #[test]
    fn a_checked_certificate_is_served_as_prost_encodes_it() {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = rcgen::CertificateParams::new(vec!["a.example.com".to_string()])
            .and_then(|params| params.self_signed(&key))
            .unwrap_or_else(|e| panic!("{e}"));
        let data = |copies: usize| {
            BTreeMap::from([
                (
                    "tls.crt".to_string(),
                    cert.pem().repeat(copies).into_bytes(),
                ),
                ("tls.key".to_string(), key.serialize_pem().into_bytes()),
            ])
        };
        // Lengths written in one, two and (a chain over 16 KiB) three bytes.
        for (name, copies) in [(sds_name("ns", "cert"), 1), ("n".repeat(300), 40)] {
            let check = SecretCheck::of_data(&name, Some("kubernetes.io/tls"), &data(copies));
            let certificate = check.certificate.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(certificate.sds_name(), name);
            let served = ir::ServedSecret {
                namespace: "ns".to_string(),
                name: "cert".to_string(),
                certificate: certificate.clone(),
            };
            let bytes = secret(&name, &served);
            assert!(Encoded::ptr_eq(&bytes, certificate.sds_resource()));
            let decoded = tls::Secret::decode(&bytes[..]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(encoded(&decoded), bytes, "prost encodes the same bytes");
            assert_eq!(decoded.name, name);
            let Some(tls::secret::Type::TlsCertificate(tls_certificate)) = &decoded.r#type else {
                panic!("not a certificate: {decoded:?}");
            };
            let text = |source: &Option<DataSource>| match source
                .as_ref()
                .and_then(|s| s.specifier.as_ref())
            {
                Some(core::data_source::Specifier::InlineString(text)) => text.clone(),
                other => panic!("not an inline string: {other:?}"),
            };
            let chain = text(&tls_certificate.certificate_chain);
            assert!(chain.len() > 16 * 1024 || copies == 1);
            assert_eq!(pem_der(&chain), cert.der().to_vec());
            assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), copies);
            assert_eq!(
                pem_der(&text(&tls_certificate.private_key)),
                key.serialize_der()
            );

            let renamed = secret("other", &served);
            let renamed = tls::Secret::decode(&renamed[..]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(renamed.name, "other");
            assert_eq!(renamed.r#type, decoded.r#type);
        }
    }
}
