//! Looking up Services, their ports and their ready endpoints.

use crate::ir::{CircuitBreakers, Cluster, ClusterOptions, UpstreamProtocol};
use crate::names;
use crate::object::{Objects, ServicePortSummary, ServiceSummary};

/// How an object names a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRef<'a> {
    Number(i32),
    Name(&'a str),
}

/// Why a backend could not be resolved; the message is user-facing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    ServiceNotFound {
        namespace: String,
        name: String,
    },
    PortNotFound {
        namespace: String,
        name: String,
        port: String,
    },
    /// The port matched is not TCP (a Service may also have a TCP port of the same
    /// number, which is taken instead when it does).
    NotTcp {
        namespace: String,
        name: String,
        port: String,
        protocol: String,
    },
    /// An `ExternalName` Service: not routed to (Contour's default,
    /// `enableExternalNameService: false`, after CVE-2021-32783).
    ExternalName {
        namespace: String,
        name: String,
        external_name: String,
    },
    /// An `ExternalName` Service naming this host itself (a localhost name, a loopback,
    /// link-local or unspecified address): never routed to, whatever the setting.
    ExternalNameLocal {
        namespace: String,
        name: String,
        external_name: String,
    },
    /// The Service asks for something this version cannot do.
    Unsupported {
        namespace: String,
        name: String,
        what: String,
    },
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::ServiceNotFound { namespace, name } => {
                write!(f, "Service \"{namespace}/{name}\" not found")
            }
            Unresolved::PortNotFound {
                namespace,
                name,
                port,
            } => {
                write!(
                    f,
                    "port \"{port}\" on Service \"{namespace}/{name}\" not matched"
                )
            }
            Unresolved::NotTcp {
                namespace,
                name,
                port,
                protocol,
            } if protocol == "TCP" => write!(
                f,
                "port \"{port}\" on Service \"{namespace}/{name}\" is TCP; datagrams need a UDP port"
            ),
            Unresolved::NotTcp {
                namespace,
                name,
                port,
                protocol,
            } => write!(
                f,
                "port \"{port}\" on Service \"{namespace}/{name}\" is {protocol}; only TCP ports carry HTTP"
            ),
            Unresolved::ExternalName {
                namespace,
                name,
                external_name,
            } => write!(
                f,
                "Service \"{namespace}/{name}\" is an ExternalName Service (\"{external_name}\"), which Isobar does not route to (Contour's enableExternalNameService, off by default)"
            ),
            Unresolved::ExternalNameLocal {
                namespace,
                name,
                external_name,
            } => write!(
                f,
                "Service \"{namespace}/{name}\" is an ExternalName service that points to localhost or a link-local address (\"{external_name}\"), this is not allowed"
            ),
            Unresolved::Unsupported {
                namespace,
                name,
                what,
            } => write!(
                f,
                "Service \"{namespace}/{name}\" needs {what}, which this version of Isobar does not support"
            ),
        }
    }
}

/// The cluster for one port of a Service in `namespace`, with the route's `options`
/// plus what the Service itself asks for: an upstream protocol (its port's `appProtocol`
/// or a `projectcontour.io/upstream-protocol.{h2,h2c}` annotation naming the port) and
/// circuit breakers (`projectcontour.io/max-connections`, `max-pending-requests`,
/// `max-requests`, `max-retries`, `per-host-max-connections`).
///
/// An ExternalName Service resolves to a cluster of its DNS name when `external_names`
/// (`enableExternalNameService`) allows it, never when the name is this host's.
pub fn service_cluster(
    objects: &Objects,
    namespace: &str,
    name: &str,
    port: PortRef<'_>,
    mut options: ClusterOptions,
    external_names: bool,
) -> Result<Cluster, Unresolved> {
    let service = objects
        .service(namespace, name)
        .ok_or_else(|| Unresolved::ServiceNotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    if let Some(external_name) = &service.external_name {
        options.external_name = Some(external_name_allowed(
            namespace,
            name,
            external_name,
            external_names,
        )?);
    }
    let udp = options.protocol == Some(UpstreamProtocol::Udp);
    let found = find_port(service, namespace, name, port, udp)?;
    let port_name = found.name.as_deref().unwrap_or_default().to_string();
    if options.protocol.is_none() {
        options.protocol = annotated_protocol(service, found, &port_name);
    }
    let tls = options.protocol.is_some_and(UpstreamProtocol::is_tls);
    if !tls {
        // SNI only means something over TLS; keep plain clusters shared.
        options.sni = None;
        if options.upstream_validation.is_some() {
            return Err(Unresolved::Unsupported {
                namespace: namespace.to_string(),
                name: name.to_string(),
                what: "certificate validation, which needs protocol tls or h2".to_string(),
            });
        }
    }
    let breakers = annotated_breakers(service);
    if breakers != CircuitBreakers::default() {
        options.circuit_breakers = Some(Box::new(breakers));
    }
    let hashed = if options.is_default() {
        String::new()
    } else {
        serde_json::to_string(&options).unwrap_or_default()
    };
    let external = options.external_name.is_some();
    Ok(Cluster {
        options,
        name: names::cluster_name(namespace, name, found.port, &hashed),
        namespace: namespace.to_string(),
        service: name.to_string(),
        port: found.port,
        // An ExternalName cluster resolves its name; it has no endpoint set.
        eds_name: if external {
            String::new()
        } else {
            names::eds_name(namespace, name, &port_name)
        },
        alt_stat_name: names::alt_stat_name(namespace, name, found.port),
        port_name,
        localities: Vec::new(),
    })
}

/// The DNS name an ExternalName Service resolves to, lowercased; refused unless
/// `external_names` allows such Services, and when it names this host.
fn external_name_allowed(
    namespace: &str,
    name: &str,
    external_name: &str,
    external_names: bool,
) -> Result<String, Unresolved> {
    let refused = |local: bool| {
        let (namespace, name, external_name) = (
            namespace.to_string(),
            name.to_string(),
            external_name.to_string(),
        );
        if local {
            Unresolved::ExternalNameLocal {
                namespace,
                name,
                external_name,
            }
        } else {
            Unresolved::ExternalName {
                namespace,
                name,
                external_name,
            }
        }
    };
    if !external_names {
        return Err(refused(false));
    }
    if is_local(external_name) {
        return Err(refused(true));
    }
    Ok(external_name.to_ascii_lowercase())
}

/// The Service's port `port` (its UDP one when `udp`, else its TCP one): a number may
/// name a UDP port and a TCP one (DNS's 53), the TCP one carrying HTTP, the UDP one
/// datagrams.
fn find_port<'s>(
    service: &'s ServiceSummary,
    namespace: &str,
    name: &str,
    port: PortRef<'_>,
    udp: bool,
) -> Result<&'s ServicePortSummary, Unresolved> {
    let matches = |p: &&ServicePortSummary| match port {
        PortRef::Number(n) => p.port == n,
        PortRef::Name(want) => p.name.as_deref() == Some(want),
    };
    let port_text = || match port {
        PortRef::Number(n) => n.to_string(),
        PortRef::Name(s) => s.to_string(),
    };
    let tcp = service
        .ports
        .iter()
        .filter(|p| match &p.not_tcp {
            None => !udp,
            Some(protocol) => udp && &**protocol == "UDP",
        })
        .find(matches);
    tcp.ok_or_else(|| match service.ports.iter().find(matches) {
        Some(other) => Unresolved::NotTcp {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port: port_text(),
            protocol: other.not_tcp.as_deref().unwrap_or("TCP").to_string(),
        },
        None => Unresolved::PortNotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port: port_text(),
        },
    })
}

/// The upstream protocol the Service asks for on `found` (named `port_name`): a
/// `projectcontour.io/upstream-protocol.{h2,h2c,tls}` annotation naming the port, else
/// the port's `appProtocol`.
fn annotated_protocol(
    service: &ServiceSummary,
    found: &ServicePortSummary,
    port_name: &str,
) -> Option<UpstreamProtocol> {
    let names_port = |list: &str| {
        list.split(',')
            .map(str::trim)
            .any(|p| p == found.port.to_string() || (!port_name.is_empty() && p == port_name))
    };
    let app = found.app_protocol.as_deref();
    let annotated = |p: &str| {
        service
            .annotation(&format!("projectcontour.io/upstream-protocol.{p}"))
            .is_some_and(names_port)
    };
    if annotated("h2") {
        Some(UpstreamProtocol::H2)
    } else if annotated("h2c") || app == Some("kubernetes.io/h2c") {
        Some(UpstreamProtocol::H2c)
    } else if annotated("tls") || app == Some("https") {
        Some(UpstreamProtocol::Tls)
    } else {
        None
    }
}

/// The circuit breakers the Service's `projectcontour.io/` annotations set.
fn annotated_breakers(service: &ServiceSummary) -> CircuitBreakers {
    let limit = |key: &str| {
        service
            .annotation(key)
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    CircuitBreakers {
        max_connections: limit("projectcontour.io/max-connections"),
        max_pending_requests: limit("projectcontour.io/max-pending-requests"),
        max_requests: limit("projectcontour.io/max-requests"),
        max_retries: limit("projectcontour.io/max-retries"),
        per_host_max_connections: limit("projectcontour.io/per-host-max-connections"),
        retry_budget: None,
    }
}

/// Whether an ExternalName names this host: a localhost name (Contour's list, and any
/// `*.localhost`), or a loopback, link-local (cloud metadata's 169.254.169.254) or
/// unspecified address.
fn is_local(external_name: &str) -> bool {
    let name = external_name.trim_end_matches('.').to_ascii_lowercase();
    if matches!(
        name.as_str(),
        "localhost" | "localhost.localdomain" | "local.projectcontour.io"
    ) || name.ends_with(".localhost")
    {
        return true;
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => a.is_loopback() || a.is_link_local() || a.is_unspecified(),
        Ok(std::net::IpAddr::V6(a)) => {
            a.is_loopback()
                || a.is_unspecified()
                || (a.segments()[0] & 0xffc0) == 0xfe80
                || a.to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_link_local())
        }
        Err(_) => false,
    }
}

/// Ready endpoints (address, port) of a Service port, matched by port name across all
/// of its EndpointSlices: TCP only, the first address of each endpoint, no duplicates.
/// An endpoint whose `ready` is unset counts as ready, as Kubernetes documents.
pub fn ready_endpoints(
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: &str,
) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for slice in objects.slices_for_service(namespace, service) {
        // A Service's port names are its own: the one named is TCP's, or UDP's (a
        // TCP port of the name first, should a slice list both).
        let named = |udp: bool| {
            slice
                .ports
                .iter()
                .find(move |(name, _, u)| **name == *port_name && *u == udp)
        };
        let Some((_, Some(port), _)) = named(false).or_else(|| named(true)) else {
            continue;
        };
        out.extend(
            slice
                .ready
                .iter()
                .map(|address| (address.to_string(), *port)),
        );
    }
    out.sort();
    out.dedup();
    out
}
