//! Contour's `contour.yaml` sections that shape what Envoy gets beyond the routes —
//! `cluster`, `listener`, `policy`, `compression` — and those of the extension
//! services (`rateLimitService`, `globalExtAuth`, `tracing`), typed and checked as
//! Contour checks them (`pkg/config/parameters.go`): an unknown key or a value Contour
//! refuses stops start-up with the key named.

use serde::{Deserialize, Serialize};

/// How the DNS names of ExternalName Services are looked up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DnsLookupFamily {
    /// IPv6 first, then IPv4.
    #[default]
    Auto,
    V4,
    V6,
    /// Both, every address (Happy Eyeballs).
    All,
}

/// Contour's `cluster` section: what every upstream cluster gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Cluster {
    /// ExternalName Services' DNS lookups (with `enableExternalNameService`).
    pub dns_lookup_family: DnsLookupFamily,
    /// Requests per upstream connection before it is closed; unset: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests_per_connection: Option<u32>,
    /// Soft limit of each upstream connection's read and write buffers; unset: Envoy's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_connection_buffer_limit_bytes: Option<u32>,
    /// Circuit breaker thresholds of clusters whose Service does not set its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuit_breakers: Option<CircuitBreakers>,
    /// TLS to upstreams (`protocol: tls`/`h2`, BackendTLSPolicy): its own bounds and
    /// ciphers, apart from `tls` (downstream).
    pub upstream_tls: ProtocolParameters,
}

/// Circuit breaker thresholds; 0: not set (Envoy's default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct CircuitBreakers {
    pub max_connections: u32,
    pub max_pending_requests: u32,
    pub max_requests: u32,
    pub max_retries: u32,
    pub per_host_max_connections: u32,
}

/// TLS bounds and TLS 1.2 ciphers; empty: TLS 1.2 to 1.3 and Contour's ciphers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ProtocolParameters {
    pub minimum_protocol_version: String,
    pub maximum_protocol_version: String,
    pub cipher_suites: Vec<String>,
    /// Key exchange groups, in preference order; empty: Envoy's (Contour's main).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ecdh_curves: Vec<String>,
}

/// Contour's `listener` section: what every listener and connection manager gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Listener {
    /// `exact`: a new connection goes to the least busy worker thread; "": the kernel's.
    pub connection_balancer: String,
    /// Requests per downstream connection before it is closed; unset: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests_per_connection: Option<u32>,
    /// Soft limit of each downstream connection's buffers; unset: 32768 (Contour's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_connection_buffer_limit_bytes: Option<u32>,
    /// IP TOS / IPv6 traffic class of the listeners' packets; 0: not set.
    pub socket_options: SocketOptions,
    /// Requests handled per I/O cycle of a connection (Envoy runtime
    /// `http.max_requests_per_io_cycle`); unset: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests_per_io_cycle: Option<u32>,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` Envoy advertises; unset: Envoy's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http2_max_concurrent_streams: Option<u32>,
    /// Active connections per listener (Envoy runtime
    /// `envoy.resource_limits.listener.<name>.connection_limit`); unset: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_listener: Option<u32>,
    /// Connections accepted per socket event (Envoy's
    /// `max_connections_to_accept_per_socket_event`; Contour's main); unset: all pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_to_accept_per_socket_event: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct SocketOptions {
    pub tos: i32,
    pub traffic_class: i32,
}

/// Header changes applied to every service's requests or responses, under the
/// service's own.
pub use isobar_sdk::headers::HeaderChanges as HeadersPolicy;

/// Contour's `policy` section: default header policies of every HTTPProxy service (and
/// of Ingresses' with `applyToIngress`); the sources read it (the SDK's type).
pub use isobar_sdk::headers::ContourPolicy as Policy;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompressionAlgorithm {
    #[default]
    Gzip,
    Brotli,
    Zstd,
    Disabled,
}

/// Contour's `compression` section: the compressor of every HTTP connection manager.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Compression {
    pub algorithm: CompressionAlgorithm,
}

// Contour's `rateLimitService`, `globalExtAuth` and `tracing`: the SDK's types, since
// the sources that act on them read the same settings.
pub use isobar_contour::extension::{
    AuthPolicy, CustomTag, GlobalExtAuth, RateLimitService, RequestBody, Tracing,
};

/// Contour's `omEnforcedHealthListener`: `/ready` on a listener the overload manager's
/// connection limit applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthListener {
    pub address: String,
    pub port: u16,
}

/// Contour's `server` section: it has no keys (the xDS server is always Contour's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {}

/// Checks the sections as Contour does; the error names the key.
pub fn validate(config: &super::Config) -> Result<(), String> {
    cluster_and_listener(config)?;
    policy(config)?;
    extension_services(config)?;
    listen_addresses(config)?;
    process(config)
}

/// The `cluster` and `listener` sections' limits, TLS parameters and socket options.
fn cluster_and_listener(config: &super::Config) -> Result<(), String> {
    let c = &config.cluster;
    at_least_one(
        "cluster.max-requests-per-connection",
        c.max_requests_per_connection,
    )?;
    at_least_one(
        "cluster.per-connection-buffer-limit-bytes",
        c.per_connection_buffer_limit_bytes,
    )?;
    protocol_parameters("cluster.upstream-tls", &c.upstream_tls)?;
    super::check_curves(
        "cluster.upstream-tls.ecdh-curves",
        &c.upstream_tls.ecdh_curves,
    )?;
    at_least_one(
        "listener.max-connections-to-accept-per-socket-event",
        config.listener.max_connections_to_accept_per_socket_event,
    )?;
    let l = &config.listener;
    if !l.connection_balancer.is_empty() && l.connection_balancer != "exact" {
        return Err(format!(
            "listener.connection-balancer: {:?} is not \"exact\" (or empty)",
            l.connection_balancer
        ));
    }
    for (key, value) in [
        (
            "listener.max-requests-per-connection",
            l.max_requests_per_connection,
        ),
        (
            "listener.per-connection-buffer-limit-bytes",
            l.per_connection_buffer_limit_bytes,
        ),
        (
            "listener.max-requests-per-io-cycle",
            l.max_requests_per_io_cycle,
        ),
        (
            "listener.http2-max-concurrent-streams",
            l.http2_max_concurrent_streams,
        ),
        (
            "listener.max-connections-per-listener",
            l.max_connections_per_listener,
        ),
    ] {
        at_least_one(key, value)?;
    }
    for (key, value) in [
        ("listener.socket-options.tos", l.socket_options.tos),
        (
            "listener.socket-options.traffic-class",
            l.socket_options.traffic_class,
        ),
    ] {
        if !(0..=255).contains(&value) {
            return Err(format!("{key}: {value} is not within 0-255"));
        }
    }
    Ok(())
}

/// The `policy` section's header changes.
fn policy(config: &super::Config) -> Result<(), String> {
    for (key, policy) in [
        ("policy.request-headers", &config.policy.request_headers),
        ("policy.response-headers", &config.policy.response_headers),
    ] {
        for name in policy.set.keys().chain(&policy.remove) {
            if !isobar_sdk::headers::is_header_name(&name.to_ascii_lowercase()) {
                return Err(format!("{key}: {name:?} is not a header name"));
            }
        }
        for (name, value) in &policy.set {
            if !isobar_sdk::headers::is_header_value(value) {
                return Err(format!("{key}.set.{name}: the value is not a header value"));
            }
        }
    }
    let host = |p: &HeadersPolicy| {
        p.set
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.clone())
    };
    if host(&config.policy.response_headers).is_some() {
        return Err("policy.response-headers: the Host header is not set on responses".into());
    }
    if let Some(v) = host(&config.policy.request_headers)
        && v.contains('%')
    {
        return Err("policy.request-headers: Host must be a literal host name".into());
    }
    Ok(())
}

/// The settings that call an ExtensionService: `rateLimitService`, `globalExtAuth`,
/// `tracing`.
fn extension_services(config: &super::Config) -> Result<(), String> {
    if let Some(r) = &config.rate_limit_service {
        extension_service("rateLimitService.extensionService", &r.extension_service)?;
    }
    if let Some(a) = &config.global_ext_auth {
        extension_service("globalExtAuth.extensionService", &a.extension_service)?;
        if !a.response_timeout.is_empty() {
            super::contour::timeout(&a.response_timeout)
                .map_err(|e| format!("globalExtAuth.responseTimeout: {e}"))?;
        }
        // As Contour's main refuses at start: an unknown type, HTTP settings for gRPC, a
        // context for HTTP.
        match a.service_type.as_str() {
            "" | "grpc" if a.http_settings.is_some() => {
                return Err(
                    "globalExtAuth.httpSettings can only be set when serviceType is http".into(),
                );
            }
            "" | "grpc" => {}
            "http"
                if a.auth_policy
                    .as_ref()
                    .is_some_and(|p| !p.context.is_empty()) =>
            {
                return Err(
                    "globalExtAuth.authPolicy.context is only applied to the grpc service type"
                        .into(),
                );
            }
            "http" => {}
            other => {
                return Err(format!(
                    "globalExtAuth.serviceType: {other:?} is not grpc or http"
                ));
            }
        }
    }
    if let Some(t) = &config.tracing {
        extension_service("tracing.extensionService", &t.extension_service)?;
        let mut names = std::collections::BTreeSet::new();
        for tag in &t.custom_tags {
            if tag.tag_name.is_empty() {
                return Err("tracing.customTags: tagName must be set".into());
            }
            if !names.insert(&tag.tag_name) {
                return Err(format!(
                    "tracing.customTags: tagName {:?} is there twice",
                    tag.tag_name
                ));
            }
            if tag.literal.is_empty() == tag.request_header_name.is_empty() {
                return Err(format!(
                    "tracing.customTags {:?}: set exactly one of literal and requestHeaderName",
                    tag.tag_name
                ));
            }
            if !tag.request_header_name.is_empty()
                && !isobar_sdk::headers::is_header_name(
                    &tag.request_header_name.to_ascii_lowercase(),
                )
            {
                return Err(format!(
                    "tracing.customTags {:?}: requestHeaderName {:?} is not a header name",
                    tag.tag_name, tag.request_header_name
                ));
            }
        }
        for (key, value) in [
            ("overallSampling", &t.overall_sampling),
            ("clientSampling", &t.client_sampling),
            ("randomSampling", &t.random_sampling),
        ] {
            if let Some(s) = value
                && !s.parse::<f64>().is_ok_and(|v| (0.0..=100.0).contains(&v))
            {
                return Err(format!(
                    "tracing.{key}: {s:?} is not a percentage from 0 to 100"
                ));
            }
        }
    }
    Ok(())
}

/// Where Envoy and Isobar listen: the listeners' addresses, the health listener, the
/// metrics servers.
fn listen_addresses(config: &super::Config) -> Result<(), String> {
    // Envoy listens on what these say: an address it cannot parse as an IP is refused
    // in Envoy's code (a NACK of every listener), so it is refused here, at start.
    let envoy = &config.envoy;
    let health = config.om_enforced_health_listener.as_ref();
    for (key, address) in [
        ("envoy.http.address", Some(&envoy.http.address)),
        ("envoy.https.address", Some(&envoy.https.address)),
        ("envoy.metrics.address", Some(&envoy.metrics.address)),
        ("envoy.health.address", Some(&envoy.health.address)),
        (
            "omEnforcedHealthListener.address",
            health.map(|h| &h.address),
        ),
    ] {
        if let Some(address) = address.filter(|a| !a.is_empty() || key.starts_with("envoy."))
            && address.parse::<std::net::IpAddr>().is_err()
        {
            return Err(format!(
                "{key}: {address:?} is not an IP address (Envoy listens on an address, not a name)"
            ));
        }
    }
    if let Some(h) = &config.om_enforced_health_listener {
        if h.address.is_empty() || h.port == 0 {
            return Err("omEnforcedHealthListener: address and port must be set".into());
        }
        let metrics = &config.envoy.metrics;
        if h.address == metrics.address && h.port == metrics.port {
            return Err(
                "omEnforcedHealthListener: the same address and port as Envoy's stats listener"
                    .into(),
            );
        }
    }
    for (key, server) in [
        ("metrics.contour", &config.metrics.contour),
        ("metrics.envoy", &config.metrics.envoy),
    ] {
        if let Some(m) = server
            && !m.ca_certificate_path.is_empty()
            && m.server_certificate_path.is_empty()
        {
            return Err(format!(
                "{key}: ca-certificate-path needs server-certificate-path and server-key-path"
            ));
        }
    }
    if config.envoy_metrics_tls().is_some() && config.envoy.metrics == config.envoy.health {
        return Err(
            "metrics.envoy: with a certificate, Envoy's stats are served over TLS and its /ready in plain HTTP: put envoy.health on another port".into(),
        );
    }
    Ok(())
}

/// The admin port, the Kubernetes client's rate and the hold-off.
fn process(config: &super::Config) -> Result<(), String> {
    if config.network.admin_port > 65535 {
        return Err(format!(
            "network.admin-port: {} is not a port",
            config.network.admin_port
        ));
    }
    if let Some(qps) = config.kubernetes_client_qps
        && !(qps.is_finite() && qps > 0.0)
    {
        return Err(format!("kubernetesClientQPS: {qps} is not above 0"));
    }
    for (key, delay) in [
        ("pipeline.holdoff-delay", config.pipeline.holdoff_delay.0),
        (
            "pipeline.holdoff-max-delay",
            config.pipeline.holdoff_max_delay.0,
        ),
    ] {
        if delay > MAX_HOLDOFF {
            return Err(format!(
                "{key}: {} is longer than the {} s a change may be held back",
                humantime::format_duration(delay),
                MAX_HOLDOFF.as_secs()
            ));
        }
    }
    let rate = crate::provider::kube::RequestRate {
        qps: config.kubernetes_client_qps,
        burst: config.kubernetes_client_burst,
    };
    rate.window().map_err(|e| e.to_string())?;
    Ok(())
}

/// The longest a change may be held back for more to come.
const MAX_HOLDOFF: std::time::Duration = std::time::Duration::from_secs(3600);

fn at_least_one(key: &str, value: Option<u32>) -> Result<(), String> {
    match value {
        Some(0) => Err(format!("{key}: the minimum is 1")),
        _ => Ok(()),
    }
}

fn protocol_parameters(key: &str, p: &ProtocolParameters) -> Result<(), String> {
    for (k, v) in [
        ("minimum-protocol-version", &p.minimum_protocol_version),
        ("maximum-protocol-version", &p.maximum_protocol_version),
    ] {
        if !v.is_empty() && isobar_sdk::ir::TlsVersion::parse(v).is_none() {
            return Err(format!("{key}.{k}: {v:?} is not \"1.2\" or \"1.3\""));
        }
    }
    let min = isobar_sdk::ir::TlsVersion::parse(&p.minimum_protocol_version);
    let max = isobar_sdk::ir::TlsVersion::parse(&p.maximum_protocol_version);
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        return Err(format!(
            "{key}: minimum-protocol-version is above maximum-protocol-version"
        ));
    }
    super::check_ciphers(&format!("{key}.cipher-suites"), &p.cipher_suites)
}

/// `namespace/name`, both parts set.
fn extension_service(key: &str, value: &str) -> Result<(), String> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Ok(()),
        _ => Err(format!(
            "{key}: {value:?} is not namespace/name of an ExtensionService"
        )),
    }
}
