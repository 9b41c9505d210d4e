//! Looking up Services, their ports and their ready endpoints.

use k8s_openapi::api::core::v1::ServicePort;

use crate::ir::Cluster;
use crate::names;
use crate::object::Objects;

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
        }
    }
}

/// The cluster for one port of a Service in `namespace`.
pub fn service_cluster(
    objects: &Objects,
    namespace: &str,
    name: &str,
    port: PortRef<'_>,
) -> Result<Cluster, Unresolved> {
    let service = objects
        .service(namespace, name)
        .ok_or_else(|| Unresolved::ServiceNotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let found: Option<&ServicePort> = ports.iter().find(|p| match port {
        PortRef::Number(n) => p.port == n,
        PortRef::Name(want) => p.name.as_deref() == Some(want),
    });
    let found = found.ok_or_else(|| Unresolved::PortNotFound {
        namespace: namespace.to_string(),
        name: name.to_string(),
        port: match port {
            PortRef::Number(n) => n.to_string(),
            PortRef::Name(s) => s.to_string(),
        },
    })?;
    let port_name = found.name.clone().unwrap_or_default();
    Ok(Cluster {
        name: names::cluster_name(namespace, name, found.port, ""),
        namespace: namespace.to_string(),
        service: name.to_string(),
        port: found.port,
        eds_name: names::eds_name(namespace, name, &port_name),
        alt_stat_name: names::alt_stat_name(namespace, name, found.port),
        port_name,
    })
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
        let port = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or_default() == port_name
                && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
        });
        let Some(port) = port
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            if let Some(address) = endpoint.addresses.first() {
                out.push((address.clone(), port));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
