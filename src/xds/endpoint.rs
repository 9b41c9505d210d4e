//! Ready endpoints → Envoy `ClusterLoadAssignment`s.

use envoy_types::pb::envoy::config::endpoint::v3::{
    self as endpoint, ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
};

use isobar_sdk::Objects;
use isobar_sdk::resolve::ready_endpoints;

use super::proto::socket_address;

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
