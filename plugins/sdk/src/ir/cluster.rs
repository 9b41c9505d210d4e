//! Upstream clusters: one port of one Service, and the options that shape the Envoy
//! cluster made for it.

use serde::Serialize;

use super::{CircuitBreakers, HealthCheck, PemBundle, SlowStart, TcpHealthCheck};

/// An upstream: one port of one Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cluster {
    pub name: String,
    pub namespace: String,
    pub service: String,
    pub port: i32,
    /// The Service port's name (`""` when unnamed): endpoints are matched by it.
    pub port_name: String,
    /// The ClusterLoadAssignment name (`ns/svc/portname`).
    pub eds_name: String,
    /// `ns_svc_port`, Envoy's stat name for the cluster.
    pub alt_stat_name: String,
    /// Settings that change the Envoy cluster; they are part of its name's hash.
    #[serde(skip_serializing_if = "ClusterOptions::is_default")]
    pub options: ClusterOptions,
    /// Several Services (of `namespace`, unless a locality names another) sharing the
    /// endpoint set `eds_name`, each a locality with its weight: an ExtensionService's
    /// `services`, a UDPRoute's backends. Empty: the cluster's own Service and port
    /// alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub localities: Vec<Locality>,
}

/// One Service's ready endpoints in a cluster of several (see [`Cluster::localities`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Locality {
    /// The Service's namespace; `""`: the cluster's.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub service: String,
    /// The Service port's name (`""` when unnamed): endpoints are matched by it.
    pub port_name: String,
    /// Its share of requests, relative to the others'.
    pub weight: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterOptions {
    /// An ExternalName Service's DNS name: the cluster resolves it instead of taking
    /// endpoints (`enableExternalNameService`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_name: Option<String>,
    pub lb_policy: LbPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<UpstreamProtocol>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<Box<HealthCheck>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuit_breakers: Option<Box<CircuitBreakers>>,
    /// New endpoints get traffic gradually (round robin and least request only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<Box<SlowStart>>,
    /// Upstream connections idle this long are closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_connection_timeout: Option<std::time::Duration>,
    /// A TCP connect health check (`tcpproxy.healthCheckPolicy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_health_check: Option<Box<TcpHealthCheck>>,
    /// Server name sent upstream over TLS (a route's literal Host rewrite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_validation: Option<Box<UpstreamValidation>>,
    /// The SDS name of the certificate Envoy presents to the upstream over TLS (a
    /// Gateway's `tls.backend.clientCertificateRef`), instead of the configured
    /// `tls.envoy-client-certificate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    /// How a DNS cluster (`external_name`) looks its name up; `None`: the configured
    /// `cluster.dns-lookup-family`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_lookup_family: Option<DnsLookupFamily>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DnsLookupFamily {
    /// IPv6 first, then IPv4.
    Auto,
    V4,
    V6,
    /// Every address of both families.
    All,
}

impl ClusterOptions {
    pub fn is_default(&self) -> bool {
        *self == ClusterOptions::default()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LbPolicy {
    #[default]
    RoundRobin,
    LeastRequest,
    Random,
    /// Consistent hashing on the route's hash policies (Cookie, RequestHash).
    RingHash,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/2 over TLS (Contour's `h2`).
    H2,
    /// HTTP/2 in clear text.
    H2c,
    /// HTTP/1.1 over TLS.
    Tls,
    /// Datagrams: the Service's UDP port (a UDPRoute's backends).
    Udp,
}

impl Locality {
    /// The namespace of its Service, in cluster `c`.
    pub fn namespace_in<'a>(&'a self, c: &'a Cluster) -> &'a str {
        if self.namespace.is_empty() {
            &c.namespace
        } else {
            &self.namespace
        }
    }
}

impl UpstreamProtocol {
    pub fn is_tls(self) -> bool {
        matches!(self, UpstreamProtocol::H2 | UpstreamProtocol::Tls)
    }

    pub fn is_http2(self) -> bool {
        matches!(self, UpstreamProtocol::H2 | UpstreamProtocol::H2c)
    }
}

/// How Envoy checks an upstream's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamValidation {
    pub ca: PemBundle,
    /// The certificate must carry one of these DNS SANs, or one of `subject_uris`.
    pub subject_names: Vec<String>,
    /// URI SANs (`spiffe://…`) the certificate may carry instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_uris: Vec<String>,
}
