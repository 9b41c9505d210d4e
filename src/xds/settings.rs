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
    /// Contour's switches and timeouts of every HTTP connection manager, and what its
    /// access log writes.
    pub http: HttpSettings,
    /// Every listener but `stats-health` reads a PROXY protocol header first
    /// (`--use-proxy-protocol`).
    pub proxy_protocol: bool,
    /// `xds-server.vhds`: the vhosts of HTTP listeners are `VirtualHost` resources of
    /// their own (VHDS), not fields of the RouteConfiguration.
    pub vhds: bool,
}

/// What every HTTP connection manager does beyond routing (Contour's top-level keys,
/// `timeouts`, `network`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    pub merge_slashes: bool,
    pub allow_chunked_length: bool,
    pub num_trusted_hops: u32,
    pub strip_trailing_host_dot: bool,
    /// Envoy's `ServerHeaderTransformation`: 0 overwrite, 1 append if absent, 2 pass.
    pub server_header: i32,
    /// `None`: Envoy's default; zero: none.
    pub request_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub stream_idle_timeout: Option<Duration>,
    pub max_connection_duration: Option<Duration>,
    pub delayed_close_timeout: Option<Duration>,
    pub drain_timeout: Option<Duration>,
    pub access_log: AccessLogSettings,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            merge_slashes: true,
            allow_chunked_length: true,
            num_trusted_hops: 0,
            strip_trailing_host_dot: false,
            server_header: 0,
            request_timeout: None,
            idle_timeout: Some(Duration::from_secs(60)),
            stream_idle_timeout: None,
            max_connection_duration: None,
            delayed_close_timeout: None,
            drain_timeout: None,
            access_log: AccessLogSettings::default(),
        }
    }
}

/// What the access log of a connection manager writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessLogSettings {
    /// An Envoy format string (`None`: Envoy's default format).
    pub text: Option<String>,
    /// JSON fields and their Envoy formats, in order (instead of text).
    pub json: Vec<(String, String)>,
    /// Only responses with at least this status are logged (0: every one).
    pub min_status: u32,
    /// Nothing is logged (`accesslog-level: disabled`).
    pub disabled: bool,
}

/// Bounds and parameters of every downstream TLS context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub min_version: ir::TlsVersion,
    pub max_version: ir::TlsVersion,
    pub cipher_suites: Vec<String>,
    pub ecdh_curves: Vec<String>,
}
