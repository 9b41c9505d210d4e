//! What translation needs beyond the IR: settings from `contour.yaml` that shape every
//! resource of a type.

use std::time::Duration;

use isobar_sdk::ir;

/// Cluster defaults, TLS bounds and what every HTTP connection manager logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoySettings {
    /// `tls.envoy-client-certificate`: (namespace, name) of the secret Envoy presents
    /// to TLS upstreams.
    pub client_certificate: Option<(String, String)>,
    pub tls: TlsSettings,
    pub connect_timeout: Duration,
    pub access_log_path: String,
    /// `xds-server.vhds`: the vhosts of HTTP listeners are `VirtualHost` resources of
    /// their own (VHDS), not fields of the RouteConfiguration.
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
