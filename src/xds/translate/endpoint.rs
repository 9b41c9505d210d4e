//! Ready endpoints → Envoy `ClusterLoadAssignment`s.

use envoy_types::pb::envoy::config::endpoint::v3::{
    self as endpoint, ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
};

use isobar_sdk::Objects;
use isobar_sdk::resolve::ready_endpoints;

use crate::xds::proto::socket_address;

/// The endpoint set of cluster `c`: its Service's ready endpoints, or, for a cluster of
/// several Services (an ExtensionService's), one weighted locality per Service that has
/// ready endpoints.
pub(in crate::xds) fn load_assignment_of(
    c: &isobar_sdk::ir::Cluster,
    objects: &Objects,
) -> ClusterLoadAssignment {
    if c.localities.is_empty() {
        return load_assignment(&c.eds_name, objects, &c.namespace, &c.service, &c.port_name);
    }
    let weigh = locality_weights(c.localities.iter().map(|l| l.weight));
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
                    value: weigh(l.weight),
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

pub(in crate::xds) fn load_assignment(
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

/// Each locality's weight as sent: at least 1, and scaled down in proportion when they
/// sum past `u32::MAX` (Envoy's ring hash and Maglev balancers refuse such a sum).
fn locality_weights(weights: impl Iterator<Item = u32> + Clone) -> impl Fn(u32) -> u32 {
    let count = weights.clone().count() as u64;
    let total: u64 = weights.map(|w| u64::from(w.max(1))).sum();
    let room = u64::from(u32::MAX).saturating_sub(count);
    move |w| {
        let w = u64::from(w.max(1));
        if total <= u64::from(u32::MAX) {
            return w as u32;
        }
        u32::try_from((w * room / total).max(1)).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::locality_weights;

    #[test]
    fn locality_weights_past_u32_are_scaled_to_fit_in_proportion() {
        let weights = [u32::MAX, u32::MAX, 0];
        let weigh = locality_weights(weights.iter().copied());
        let sent: Vec<u32> = weights.iter().map(|w| weigh(*w)).collect();
        let sum: u64 = sent.iter().map(|w| u64::from(*w)).sum();
        assert!(sum <= u64::from(u32::MAX), "{sent:?}");
        assert_eq!(sent[0], sent[1]);
        assert_eq!(sent[2], 1);
        let weigh = locality_weights([3, 0, 7].into_iter());
        assert_eq!([weigh(3), weigh(0), weigh(7)], [3, 1, 7]);
    }
}
