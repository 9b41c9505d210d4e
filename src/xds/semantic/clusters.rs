//! Envoy's rules for clusters, endpoints and secrets.

use super::*;

impl Rules {
    // Clusters (source/common/upstream/upstream_impl.cc, eds.cc, dns_cluster.cc).

    pub(super) fn cluster(&mut self, c: &Cluster) {
        let path = format!("Cluster({})", c.name);
        let kind = match c.cluster_discovery_type {
            Some(cluster::ClusterDiscoveryType::Type(t)) => Some(t),
            None => Some(0),
            Some(cluster::ClusterDiscoveryType::ClusterType(_)) => None,
        };
        let (static_, logical_dns, eds) = (
            cluster::DiscoveryType::Static as i32,
            cluster::DiscoveryType::LogicalDns as i32,
            cluster::DiscoveryType::Eds as i32,
        );
        if c.eds_cluster_config.is_some() && kind != Some(eds) {
            self.fail(
                &path,
                "cluster.eds-config",
                "eds_cluster_config set in a non-EDS cluster",
            );
        }
        if kind == Some(eds) && c.eds_cluster_config.is_none() {
            self.fail(
                &path,
                "cluster.eds-config",
                "cannot create an EDS cluster without an EDS config",
            );
        }
        if kind == Some(static_)
            && let Some(cla) = &c.load_assignment
        {
            self.endpoint_addresses(
                &format!("{path}.load_assignment"),
                cla,
                "cluster.ip-endpoints",
            );
        }
        if kind == Some(logical_dns) {
            let single = c.load_assignment.as_ref().is_none_or(|cla| {
                cla.endpoints.len() == 1 && cla.endpoints[0].lb_endpoints.len() == 1
            });
            if !single || c.load_assignment.is_none() {
                self.fail(
                    &path,
                    "cluster.logical-dns-single-host",
                    "LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint",
                );
            }
        }
        // The ring hash and Maglev balancers (thread_aware_lb_impl.cc) sum the weights
        // in 64 bits and refuse a sum past 32.
        let hashing = [
            cluster::LbPolicy::RingHash as i32,
            cluster::LbPolicy::Maglev as i32,
        ];
        if hashing.contains(&c.lb_policy)
            && let Some(cla) = &c.load_assignment
        {
            self.hash_weight_sums(&format!("{path}.load_assignment"), cla);
        }
        if c.health_checks.len() > 1 {
            self.fail(
                &path,
                "cluster.health-checks",
                "all health checks must have a name when multiple health checks are configured (a field this API version does not carry)",
            );
        }
        for (i, t) in c
            .circuit_breakers
            .iter()
            .flat_map(|b| &b.per_host_thresholds)
            .enumerate()
        {
            let only_connections = t.max_pending_requests.is_none()
                && t.max_requests.is_none()
                && t.max_retries.is_none()
                && t.retry_budget.is_none()
                && t.max_connection_pools.is_none();
            if !only_connections {
                self.fail(
                    &format!("{path}.circuit_breakers.per_host_thresholds[{i}]"),
                    "cluster.per-host-thresholds",
                    "unsupported field in per_host_thresholds (only max_connections)",
                );
            }
        }
    }

    // EDS (source/common/upstream/upstream_impl.cc).

    pub(super) fn endpoints(&mut self, cla: &ClusterLoadAssignment, name: &str) {
        let path = format!("ClusterLoadAssignment({})", cla.cluster_name);
        if !name.is_empty() && cla.cluster_name != name {
            self.fail(
                &path,
                "endpoints.cluster-name",
                format!(
                    "unexpected EDS cluster (expecting {name}): {}",
                    cla.cluster_name
                ),
            );
        }
        self.endpoint_addresses(&path, cla, "endpoints.ip-addresses");
        if let Some(policy) = &cla.policy {
            if policy.drop_overloads.len() > 1 {
                self.fail(
                    &format!("{path}.policy.drop_overloads"),
                    "endpoints.drop-overloads",
                    format!(
                        "{} categories; Envoy only supports one",
                        policy.drop_overloads.len()
                    ),
                );
            }
            for (i, d) in policy.drop_overloads.iter().enumerate() {
                if let Some(p) = &d.drop_percentage {
                    let denominator: u64 = match p.denominator {
                        1 => 10_000,
                        2 => 1_000_000,
                        _ => 100,
                    };
                    if u64::from(p.numerator) > denominator {
                        self.fail(
                            &format!("{path}.policy.drop_overloads[{i}]"),
                            "endpoints.drop-overloads",
                            "drop_ratio past 1",
                        );
                    }
                }
            }
        }
    }

    /// Per priority, the localities' weights and each locality's hosts' weights sum to
    /// at most `u32::MAX` (hosts weigh 1 unless they say).
    pub(super) fn hash_weight_sums(&mut self, path: &str, cla: &ClusterLoadAssignment) {
        let mut by_priority: BTreeMap<u32, u64> = BTreeMap::new();
        for (l, locality) in cla.endpoints.iter().enumerate() {
            *by_priority.entry(locality.priority).or_default() +=
                u64::from(locality.load_balancing_weight.map_or(0, |w| w.value));
            let hosts: u64 = locality
                .lb_endpoints
                .iter()
                .map(|e| u64::from(e.load_balancing_weight.map_or(1, |w| w.value)))
                .sum();
            if hosts > u64::from(u32::MAX) {
                self.fail(
                    &format!("{path}.endpoints[{l}]"),
                    "cluster.hash-weight-sums",
                    format!(
                        "the sum of weights of all upstream hosts in a locality exceeds {}",
                        u32::MAX
                    ),
                );
            }
        }
        for (priority, sum) in by_priority {
            if sum > u64::from(u32::MAX) {
                self.fail(
                    path,
                    "cluster.hash-weight-sums",
                    format!(
                        "the sum of weights of all localities at priority {priority} exceeds {}",
                        u32::MAX
                    ),
                );
            }
        }
    }

    /// Each endpoint's address an IP (STATIC clusters, EDS).
    pub(super) fn endpoint_addresses(
        &mut self,
        path: &str,
        cla: &ClusterLoadAssignment,
        family: &str,
    ) {
        for (l, locality) in cla.endpoints.iter().enumerate() {
            for (e, endpoint) in locality.lb_endpoints.iter().enumerate() {
                if let Some(lb_endpoint::HostIdentifier::Endpoint(endpoint)) =
                    &endpoint.host_identifier
                    && let Some(address) = &endpoint.address
                {
                    self.ip_address(
                        &format!("{path}.endpoints[{l}].lb_endpoints[{e}]"),
                        address,
                        family,
                        true,
                    );
                }
            }
        }
    }

    /// A socket address Envoy parses as an IP (no resolver named): listener addresses,
    /// STATIC and EDS endpoints.
    pub(super) fn ip_address(
        &mut self,
        path: &str,
        address: &Address,
        family: &str,
        endpoint: bool,
    ) {
        if let Some(address::Address::SocketAddress(s)) = &address.address {
            if endpoint && !s.resolver_name.is_empty() {
                return;
            }
            if s.address.parse::<std::net::IpAddr>().is_err() {
                self.fail(path, family, format!("malformed IP address: {}", s.address));
            }
        }
    }

    // Secrets (source/common/tls/context_impl.cc, ssl/*_config_impl.cc).

    pub(super) fn secret(&mut self, s: &Secret) {
        let path = format!("Secret({})", s.name);
        match &s.r#type {
            Some(secret::Type::TlsCertificate(cert)) => {
                let chain = cert.certificate_chain.as_ref().and_then(inline);
                let key = cert.private_key.as_ref().and_then(inline);
                match (chain, key) {
                    (Some(chain), Some(key)) => {
                        if let Err(e) = isobar_sdk::secret::check_key_pair(&chain, &key) {
                            self.fail(&path, "secret.certificate", e);
                        }
                    }
                    (None, _) if cert.certificate_chain.is_none() => self.fail(
                        &path,
                        "secret.certificate",
                        "failed to load incomplete certificate: certificate chain not set",
                    ),
                    (_, None)
                        if cert.private_key.is_none() && cert.private_key_provider.is_none() =>
                    {
                        self.fail(
                            &path,
                            "secret.certificate",
                            "failed to load incomplete private key",
                        )
                    }
                    _ => {}
                }
            }
            Some(secret::Type::SessionTicketKeys(keys)) => {
                for (i, key) in keys.keys.iter().enumerate() {
                    if let Some(bytes) = inline(key)
                        && bytes.len() != 80
                    {
                        self.fail(
                            &format!("{path}.keys[{i}]"),
                            "secret.session-ticket-keys",
                            format!("incorrect TLS session ticket key length. Length {}, expected length 80", bytes.len()),
                        );
                    }
                }
            }
            Some(secret::Type::ValidationContext(v)) => {
                match v.trusted_ca.as_ref().and_then(inline) {
                    Some(ca) if !isobar_sdk::secret::has_certificate(&ca) => {
                        self.fail(
                            &path,
                            "secret.validation-context",
                            "failed to load trusted CA certificates: no certificate parses",
                        );
                    }
                    Some(_) => {}
                    None if v.trusted_ca.is_none() => {
                        if v.crl.is_some() {
                            self.fail(
                                &path,
                                "secret.validation-context",
                                "failed to load CRL without trusted CA",
                            );
                        }
                        if !v.match_typed_subject_alt_names.is_empty() {
                            self.fail(
                                &path,
                                "secret.validation-context",
                                "SAN-based verification of peer certificates without trusted CA is insecure and not allowed",
                            );
                        }
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }
}
