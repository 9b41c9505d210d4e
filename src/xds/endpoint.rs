//! Ready endpoints → Envoy `ClusterLoadAssignment`s.

use envoy_types::pb::envoy::config::endpoint::v3::{
    self as endpoint, ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
};

use isobar_sdk::Objects;
use isobar_sdk::resolve::ready_endpoints;

use super::proto::socket_address;

/// The endpoint set of cluster `c`: its Service's ready endpoints, or, for a cluster of
/// several Services (an ExtensionService's), one weighted locality per Service that has
/// ready endpoints.
pub(super) fn load_assignment_of(
    c: &isobar_sdk::ir::Cluster,
    objects: &Objects,
) -> ClusterLoadAssignment {
    if c.localities.is_empty() {
        return load_assignment(&c.eds_name, objects, &c.namespace, &c.service, &c.port_name);
    }
    let endpoints = c
        .localities
        .iter()
        .filter_map(|l| {
            let found = load_assignment(
                &c.eds_name,
                objects,
                l.namespace_in(c),
                &l.service,
                &l.port_name,
            );
            let lb_endpoints = found.endpoints.into_iter().next()?.lb_endpoints;
            Some(LocalityLbEndpoints {
                // Localities must differ: each is named after its Service.
                locality: Some(envoy_types::pb::envoy::config::core::v3::Locality {
                    zone: l.namespace.clone(),
                    sub_zone: l.service.clone(),
                    ..Default::default()
                }),
                lb_endpoints,
                load_balancing_weight: Some(envoy_types::pb::google::protobuf::UInt32Value {
                    value: l.weight.max(1),
                }),
                ..Default::default()
            })
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: c.eds_name.clone(),
        endpoints,
        ..Default::default()
    }
}

pub(super) fn load_assignment(
    eds_name: &str,
    objects: &Objects,
    namespace: &str,
    service: &str,
    port_name: &str,
) -> ClusterLoadAssignment {
    let lb_endpoints: Vec<LbEndpoint> = ready_endpoints(objects, namespace, service, port_name)
        .into_iter()
        .map(|(address, port)| LbEndpoint {
            host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                endpoint::Endpoint {
                    address: Some(socket_address(&address, port)),
                    ..Default::default()
                },
            )),
            ..Default::default()
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: eds_name.to_string(),
        endpoints: if lb_endpoints.is_empty() {
            Vec::new()
        } else {
            vec![LocalityLbEndpoints {
                lb_endpoints,
                ..Default::default()
            }]
        },
        ..Default::default()
    }
}
