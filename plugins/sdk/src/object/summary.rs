//! What the store keeps of Services and EndpointSlices: only what moves traffic.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The Service an EndpointSlice belongs to (its `kubernetes.io/service-name` label).
pub fn slice_service(slice: &EndpointSlice) -> Option<&String> {
    slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)
}

/// What Isobar keeps of a Service: its ports, the `projectcontour.io/` annotations that
/// set upstream protocols and circuit breakers, and `status.loadBalancer` (read for
/// Envoy's own Service). Selectors, cluster IPs, labels and the rest never move traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSummary {
    pub ports: Box<[ServicePortSummary]>,
    /// The `projectcontour.io/` annotations, in key order.
    pub annotations: Box<[(Box<str>, Box<str>)]>,
    pub load_balancer: Option<Box<k8s_openapi::api::core::v1::LoadBalancerStatus>>,
    /// `spec.externalName` of an `ExternalName` Service (a DNS name, no endpoints).
    pub external_name: Option<Box<str>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServicePortSummary {
    pub name: Option<Box<str>>,
    pub port: i32,
    pub app_protocol: Option<Box<str>>,
    /// The port's protocol when it is not TCP (`UDP`, `SCTP`): Envoy cannot send HTTP
    /// to it. `None` for TCP, which is also what an unset protocol means.
    pub not_tcp: Option<Box<str>>,
}

const READ_SERVICE_ANNOTATIONS: &str = "projectcontour.io/";

impl ServiceSummary {
    pub fn of(service: &Service) -> ServiceSummary {
        let ports = service.spec.as_ref().and_then(|s| s.ports.as_deref());
        let annotations = service.metadata.annotations.iter().flatten();
        ServiceSummary {
            ports: ports
                .unwrap_or_default()
                .iter()
                .map(|p| ServicePortSummary {
                    name: p.name.as_deref().map(Into::into),
                    port: p.port,
                    app_protocol: p.app_protocol.as_deref().map(Into::into),
                    not_tcp: p
                        .protocol
                        .as_deref()
                        .filter(|p| *p != "TCP")
                        .map(Into::into),
                })
                .collect(),
            annotations: annotations
                .filter(|(key, _)| key.starts_with(READ_SERVICE_ANNOTATIONS))
                .map(|(key, value)| (key.as_str().into(), value.as_str().into()))
                .collect(),
            external_name: service
                .spec
                .as_ref()
                .filter(|s| s.type_.as_deref() == Some("ExternalName"))
                .map(|s| s.external_name.as_deref().unwrap_or_default().into()),
            load_balancer: service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.clone())
                .map(Box::new),
        }
    }

    /// The value of a `projectcontour.io/` annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let found = self.annotations.binary_search_by(|(k, _)| (**k).cmp(key));
        found.ok().map(|i| &*self.annotations[i].1)
    }
}

/// A port of an EndpointSlice: its name (`""` when unnamed), number (`None` when unset or
/// not a port number) and whether it is UDP's.
pub type SlicePort = (Box<str>, Option<u16>, bool);

/// What Isobar keeps of an EndpointSlice: the Service it belongs to, its TCP and UDP
/// ports and the addresses of its ready endpoints. A decoded slice (pods, nodes, zones,
/// conditions and Kubernetes' object model around them) is about ten times larger, and
/// none of the rest moves traffic: two slices with equal `SliceEndpoints` route the
/// same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceEndpoints {
    /// The `kubernetes.io/service-name` label.
    pub service: Option<Box<str>>,
    /// TCP and UDP ports in the slice's order: name (`""` when unnamed), number (`None`
    /// when unset or not a port number) and whether it is UDP's.
    pub ports: Box<[SlicePort]>,
    /// The first address of each ready endpoint (`ready` unset counts as ready, as
    /// Kubernetes documents), in the slice's order, written canonically; an address
    /// that is not an IP (`0x7f.0.0.1`, `2130706433`, a name) is left out, as Envoy would
    /// refuse the whole ClusterLoadAssignment holding it.
    pub ready: Box<[Box<str>]>,
}

impl SliceEndpoints {
    pub fn of(slice: &EndpointSlice) -> SliceEndpoints {
        // FQDN slices name hosts, which an EDS endpoint cannot be: Envoy would reject
        // the whole ClusterLoadAssignment.
        let addresses = slice.address_type != "FQDN";
        let ports = slice
            .ports
            .iter()
            .flatten()
            .filter(|p| matches!(p.protocol.as_deref().unwrap_or("TCP"), "TCP" | "UDP"));
        let ready = slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
        SliceEndpoints {
            service: slice_service(slice).map(|s| s.as_str().into()),
            ports: ports
                .map(|p| {
                    let number = p.port.and_then(|n| u16::try_from(n).ok());
                    let udp = p.protocol.as_deref() == Some("UDP");
                    (p.name.as_deref().unwrap_or_default().into(), number, udp)
                })
                .collect(),
            ready: ready
                .filter(|_| addresses)
                .filter_map(|e| e.addresses.first())
                .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
                .map(|a| a.to_string().into())
                .collect(),
        }
    }
}
