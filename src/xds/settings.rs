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
    /// `xds-server.route-shards-from`: an HTTP listener with at least this many vhosts
    /// has its routes split into shards (`xds::shard`); 0: never.
    pub route_shards_from: usize,
    /// Contour's `cluster` section.
    pub cluster: ClusterSettings,
    /// Contour's `listener` section (beyond the connection managers').
    pub listener: ListenerSettings,
    /// Contour's Envoy runtime settings, served over RTDS as the `dynamic` layer.
    pub runtime: RuntimeSettings,
    /// `metrics.envoy`'s certificate files as Envoy reads them (chain, key, and a CA
    /// clients must be of): the stats listener serves TLS with them.
    pub metrics_tls: Option<(String, String, Option<String>)>,
}

/// What every upstream cluster gets (Contour's `cluster` section).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSettings {
    pub max_requests_per_connection: Option<u32>,
    pub per_connection_buffer_limit: Option<u32>,
    /// Thresholds of clusters whose Service sets none of its own (field by field).
    pub circuit_breakers: Option<ir::CircuitBreakers>,
    /// TLS to upstreams: its own bounds and TLS 1.2 ciphers (empty: Envoy's).
    pub upstream_tls: UpstreamTlsSettings,
    /// How ExternalName clusters resolve their name: Envoy's `DnsLookupFamily`
    /// (0 AUTO, 1 V4_ONLY, 2 V6_ONLY, 4 ALL).
    pub dns_lookup_family: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTlsSettings {
    pub min_version: ir::TlsVersion,
    pub max_version: ir::TlsVersion,
    pub cipher_suites: Vec<String>,
    pub ecdh_curves: Vec<String>,
}

impl Default for UpstreamTlsSettings {
    fn default() -> Self {
        UpstreamTlsSettings {
            min_version: ir::TlsVersion::V1_2,
            max_version: ir::TlsVersion::V1_3,
            cipher_suites: Vec::new(),
            ecdh_curves: Vec::new(),
        }
    }
}

/// What every listener gets (Contour's `listener` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// Envoy's exact connection balancer across worker threads.
    pub exact_balance: bool,
    /// IP TOS and IPv6 traffic class of the listeners' packets (0: not set).
    pub tos: u8,
    pub traffic_class: u8,
    pub per_connection_buffer_limit: u32,
    /// Connections accepted per socket event; `None`: all pending.
    pub max_accept_per_event: Option<u32>,
}

impl Default for ListenerSettings {
    fn default() -> Self {
        ListenerSettings {
            exact_balance: false,
            tos: 0,
            traffic_class: 0,
            per_connection_buffer_limit: 32768,
            max_accept_per_event: None,
        }
    }
}

/// Envoy runtime keys Contour sets through its `dynamic` RTDS layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// `http.max_requests_per_io_cycle`.
    pub max_requests_per_io_cycle: Option<u32>,
    /// `envoy.resource_limits.listener.<name>.connection_limit`, for every listener but
    /// the stats one.
    pub max_connections_per_listener: Option<u32>,
    /// `runtime-settings`: further keys, as strings (Isobar's own win).
    pub extra: std::collections::BTreeMap<String, String>,
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
    /// Requests per downstream connection before it is closed.
    pub max_requests_per_connection: Option<u32>,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub http2_max_concurrent_streams: Option<u32>,
    /// The HTTP versions spoken to clients (`default-http-versions`): both by default.
    pub http1: bool,
    pub http2: bool,
    /// The compressor of every connection manager; `None`: none.
    pub compression: Option<Compressor>,
}

/// A response compressor (Contour's `compression.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    Gzip,
    Brotli,
    Zstd,
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
            max_requests_per_connection: None,
            http2_max_concurrent_streams: None,
            http1: true,
            http2: true,
            compression: Some(Compressor::Gzip),
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
    /// JA3 and JA4 fingerprints computed by the TLS inspector.
    pub ja3: bool,
    pub ja4: bool,
}
