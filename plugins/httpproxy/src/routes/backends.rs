//! Where a route sends: its services as weighted clusters with their options, mirrors,
//! and a 503 when none is left.

use isobar_contour::api::Route as ProxyRoute;
use isobar_contour::api::RouteService;
use isobar_sdk::ObjectKey;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir::{ClusterOptions, Mirror, RouteAction, RoutePolicy, WeightedCluster};
use isobar_sdk::resolve::{PortRef, service_cluster};

use crate::check_unsupported;
use crate::policy::{self, PolicyError};

use super::Walk;

impl Walk<'_, '_> {
    /// The options of the clusters a route sends to (load balancing, idle connection
    /// timeout, health check); the route's hash policies go to `policy`.
    pub(super) fn cluster_options(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        policy: &mut RoutePolicy,
        errors: &mut Vec<PolicyError>,
    ) -> ClusterOptions {
        let at = || format!("spec.routes[{index}]");
        let mut cluster_options = ClusterOptions::default();
        if let Some(lb) = &route.load_balancer_policy {
            let (lb_policy, hashes, warning) = policy::load_balancer(lb);
            cluster_options.lb_policy = lb_policy;
            policy.hash_policies = hashes;
            if let Some(message) = warning {
                self.status.warning(
                    key,
                    ConditionType::RouteError,
                    Reason::IgnoredField,
                    format!("{}: {message}", at()),
                );
            }
        }
        if let Some(idle) = route
            .timeout_policy
            .as_ref()
            .and_then(|t| t.idle_connection.as_ref())
        {
            match isobar_sdk::policy::timeout(idle) {
                Ok(d) => cluster_options.idle_connection_timeout = Some(d),
                Err(e) => errors.push((
                    ConditionType::RouteError,
                    Reason::TimeoutPolicyNotValid,
                    format!("route.timeoutPolicy.idleConnection failed to parse: {e}"),
                )),
            }
        }
        if let Some(h) = &route.health_check_policy {
            match policy::health_check(h) {
                Ok(h) => cluster_options.health_check = Some(Box::new(h)),
                Err(e) => errors.push(e),
            }
        }
        cluster_options
    }

    /// The clusters a route's services send to, with their weights and service-level
    /// policies (a mirror goes to `policy`); `ok` turns false on unsupported fields.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backends(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        cluster_options: &ClusterOptions,
        policy: &mut RoutePolicy,
        errors: &mut Vec<PolicyError>,
        ok: &mut bool,
    ) -> Vec<WeightedCluster> {
        let at = || format!("spec.routes[{index}]");
        let mut weighted = Vec::with_capacity(route.services.len());
        for (i, service) in route.services.iter().enumerate() {
            let sat = || format!("{}.services[{i}]", at());
            *ok &= check_unsupported(self.status, key, sat, &service.unsupported, || {
                crate::fields_of(service)
            });
            let port = match i32::try_from(service.port) {
                Ok(p) if (1..=65535).contains(&p) => p,
                _ => {
                    errors.push((
                        ConditionType::ServiceError,
                        Reason::ServicePortInvalid,
                        format!(
                            "{}: service {:?}: port must be in the range 1-65535, {} was supplied",
                            sat(),
                            service.name,
                            service.port
                        ),
                    ));
                    continue;
                }
            };
            let weight = match service.weight.map(u32::try_from) {
                None => 0,
                Some(Ok(w)) => w,
                Some(Err(_)) => {
                    errors.push((
                        ConditionType::ServiceError,
                        Reason::RouteNotValid,
                        format!(
                            "{}: weight {} must be from 0 to 4294967295",
                            sat(),
                            service.weight.unwrap_or_default()
                        ),
                    ));
                    continue;
                }
            };
            let mut target = WeightedCluster {
                weight,
                ..Default::default()
            };
            self.service_headers(key, service, port, &mut target, errors);
            let Some(mut options) = self.service_options(key, i, service, cluster_options, errors)
            else {
                continue;
            };
            // Contour's SNI: the Host the upstream is sent (service-level rewrite first).
            options.sni = target
                .host_rewrite
                .as_ref()
                .or(policy.host_rewrite.as_ref())
                .filter(|h| !h.starts_with('%'))
                .cloned();
            match service_cluster(
                self.ctx.objects,
                &key.namespace,
                &service.name,
                PortRef::Number(port),
                options,
                self.ctx.external_names(),
            ) {
                Ok(cluster) => {
                    target.cluster = cluster.name.clone();
                    self.ir.add_cluster(cluster);
                    if service.mirror {
                        let percent = match weight {
                            0 => 100,
                            w => w.min(100),
                        };
                        policy.mirrors = vec![Mirror {
                            cluster: target.cluster,
                            per_million: percent * 10_000,
                        }];
                    } else {
                        weighted.push(target);
                    }
                }
                Err(e) => self.status.error(
                    key,
                    ConditionType::ServiceError,
                    Reason::ServiceUnresolvedReference,
                    format!("{}: {e}", sat()),
                ),
            }
        }
        weighted
    }

    /// A service's own header policies, cookie rewrites and the default headers, set
    /// on `target`.
    fn service_headers(
        &self,
        key: &ObjectKey,
        service: &RouteService,
        port: i32,
        target: &mut WeightedCluster,
        errors: &mut Vec<PolicyError>,
    ) {
        let service_scope = |field: &'static str, response: bool| policy::HeaderScope {
            field,
            namespace: &key.namespace,
            service: Some((&service.name, service.port)),
            response,
        };
        if let Some(h) = &service.request_headers_policy {
            match policy::headers(h, &service_scope("service.requestHeadersPolicy", false)) {
                Ok(h) => {
                    target.request_headers = h.policy;
                    target.host_rewrite = h.host;
                }
                Err(e) => errors.push(e),
            }
        }
        if !service.cookie_rewrite_policies.is_empty() {
            match policy::cookie_rewrites(&service.cookie_rewrite_policies) {
                Ok(c) => target.cookie_rewrites = c,
                Err(e) => errors.push(e),
            }
        }
        if let Some(h) = &service.response_headers_policy {
            match policy::headers(h, &service_scope("service.responseHeadersPolicy", true)) {
                Ok(h) => target.response_headers = h.policy,
                Err(e) => errors.push(e),
            }
        }
        self.default_headers
            .apply(target, (&key.namespace, &service.name, port));
    }

    /// The route's cluster options with service `i`'s slow start, protocol and upstream
    /// validation; `None` (the error pushed) when one of them is not valid.
    fn service_options(
        &self,
        key: &ObjectKey,
        i: usize,
        service: &RouteService,
        cluster_options: &ClusterOptions,
        errors: &mut Vec<PolicyError>,
    ) -> Option<ClusterOptions> {
        let mut options = cluster_options.clone();
        if let Some(slow) = &service.slow_start_policy {
            match policy::slow_start(slow, options.lb_policy) {
                Ok(slow) => options.slow_start = Some(Box::new(slow)),
                Err(e) => {
                    errors.push(e);
                    return None;
                }
            }
        }
        if let Some(p) = &service.protocol {
            match policy::protocol(p) {
                Ok(p) => options.protocol = Some(p),
                Err(e) => {
                    errors.push(e);
                    return None;
                }
            }
        }
        if let Some(v) = &service.validation {
            match policy::upstream_validation(self.ctx, &key.namespace, v) {
                Ok(v) => options.upstream_validation = Some(Box::new(v)),
                Err((type_, reason, message)) => {
                    errors.push((type_, reason, format!("services[{i}]: {message}")));
                    return None;
                }
            }
        }
        Some(options)
    }
}

/// Contour's weights: all zero (or unset) means an even split; otherwise zero-weight
/// services get no traffic. Weights adding up to more than `u32::MAX`, which Envoy
/// refuses (the whole response with them), are divided down to the same split.
pub(crate) fn settle_weights(weighted: &mut Vec<WeightedCluster>) {
    if weighted.iter().all(|w| w.weight == 0) {
        weighted.iter_mut().for_each(|w| w.weight = 1);
    } else {
        weighted.retain(|w| w.weight > 0);
    }
    WeightedCluster::fit_weights(weighted);
}

/// No resolvable service at all answers 503; see [`settle_weights`] for the rest.
pub(super) fn forward_or_503(mut weighted: Vec<WeightedCluster>) -> RouteAction {
    if weighted.is_empty() {
        return RouteAction::DirectResponse {
            status: 503,
            body: None,
        };
    }
    settle_weights(&mut weighted);
    // Held until the build's IR is dropped, for every route at once.
    weighted.shrink_to_fit();
    RouteAction::Forward(weighted)
}
