//! The routes of one root HTTPProxy and of every proxy it includes, down the chain.

use std::collections::BTreeSet;

use isobar_sdk::api::{HTTPProxy, Include, Route as ProxyRoute};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::Host;
use isobar_sdk::ir::{Route, RouteAction, WeightedCluster};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, Ir, Kind, ObjectKey, StatusReport};

use crate::check_unsupported;
use crate::conditions::Matches;

/// One root's walk: adds routes to the root's vhost and records which proxies it reached.
pub(crate) struct Walk<'c, 'a> {
    pub ctx: &'c BuildContext<'a>,
    pub ir: &'c mut Ir,
    pub status: &'c mut StatusReport,
    pub host: &'c Host,
    /// Non-root proxies reached through an include (the others are orphans).
    pub reached: &'c mut BTreeSet<ObjectKey>,
}

impl Walk<'_, '_> {
    /// Adds `proxy`'s routes, narrowed by `matches`, and walks its includes. An error in
    /// the proxy itself drops everything it would add; errors of included proxies stay
    /// with them. Missing Services do not invalidate: their route answers 503.
    pub(crate) fn visit(
        &mut self,
        key: &ObjectKey,
        proxy: &HTTPProxy,
        matches: &Matches,
        chain: &mut Vec<ObjectKey>,
    ) {
        let spec = &proxy.spec;
        let mut valid = check_unsupported(self.status, key, "spec", &spec.unsupported);
        if let Some(vhost) = &spec.virtualhost {
            valid &= check_unsupported(self.status, key, "spec.virtualhost", &vhost.unsupported);
        }
        if spec.routes.is_empty() && spec.includes.is_empty() {
            self.status.error(
                key,
                ConditionType::SpecError,
                Reason::NothingDefined,
                "HTTPProxy.Spec.Routes unspecified",
            );
            return;
        }
        let mut routes = Vec::with_capacity(spec.routes.len());
        for (index, route) in spec.routes.iter().enumerate() {
            match self.route(key, index, route, matches) {
                Some(route) => routes.push(route),
                None => valid = false,
            }
        }
        let mut includes = Vec::with_capacity(spec.includes.len());
        for (index, include) in spec.includes.iter().enumerate() {
            if spec.includes[..index]
                .iter()
                .any(|earlier| earlier.conditions == include.conditions)
            {
                self.status.error(
                    key,
                    ConditionType::IncludeError,
                    Reason::DuplicateMatchConditions,
                    format!("spec.includes[{index}]: duplicate conditions defined on an include"),
                );
                continue;
            }
            match matches.and(&include.conditions, true) {
                Ok(narrowed) => includes.push((include, narrowed)),
                Err((reason, message)) => {
                    self.status.error(
                        key,
                        ConditionType::IncludeError,
                        reason,
                        format!("spec.includes[{index}]: {message}"),
                    );
                    valid = false;
                }
            }
        }
        if !valid {
            return;
        }
        for route in routes {
            self.ir.add_route(&self.host.fqdn, route);
        }
        chain.push(key.clone());
        for (include, narrowed) in includes {
            self.include(key, include, &narrowed, chain);
        }
        chain.pop();
    }

    fn include(
        &mut self,
        parent: &ObjectKey,
        include: &Include,
        matches: &Matches,
        chain: &mut Vec<ObjectKey>,
    ) {
        let namespace = include.namespace.as_deref().unwrap_or(&parent.namespace);
        let target = ObjectKey::new(Kind::HTTPProxy, namespace, &include.name);
        let Some(child) = self.ctx.httpproxy(namespace, &include.name) else {
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::IncludeNotFound,
                format!("include {namespace}/{} not found", include.name),
            );
            self.bad_gateway(parent, matches);
            return;
        };
        if child.spec.virtualhost.is_some() {
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::RootIncludesRoot,
                format!(
                    "root httpproxy cannot include another root httpproxy: {namespace}/{}",
                    include.name
                ),
            );
            self.bad_gateway(parent, matches);
            return;
        }
        if let Some(start) = chain.iter().position(|k| *k == target) {
            let path: Vec<String> = chain[start..]
                .iter()
                .chain(std::iter::once(&target))
                .map(|k| format!("{}/{}", k.namespace, k.name))
                .collect();
            self.status.error(
                parent,
                ConditionType::IncludeError,
                Reason::IncludeCreatesCycle,
                format!("include creates an include cycle: {}", path.join(" -> ")),
            );
            return;
        }
        self.reached.insert(target.clone());
        self.visit(&target, child, matches, chain);
    }

    /// Contour answers 502 for the conditions of an include that cannot be followed.
    fn bad_gateway(&mut self, source: &ObjectKey, matches: &Matches) {
        if let Ok(matcher) = matches.route_match(self.host.authority_regex.clone()) {
            self.ir.add_route(
                &self.host.fqdn,
                Route {
                    matcher,
                    action: RouteAction::DirectResponse {
                        status: 502,
                        body: None,
                    },
                    source: source.clone(),
                },
            );
        }
    }

    /// One route, or `None` when it makes the proxy invalid.
    fn route(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        matches: &Matches,
    ) -> Option<Route> {
        let at = format!("spec.routes[{index}]");
        let mut ok = check_unsupported(self.status, key, &at, &route.unsupported);
        for (i, cond) in route.conditions.iter().enumerate() {
            ok &= check_unsupported(
                self.status,
                key,
                &format!("{at}.conditions[{i}]"),
                &cond.unsupported,
            );
        }
        let matcher = matches
            .and(&route.conditions, false)
            .and_then(|m| m.route_match(self.host.authority_regex.clone()));
        let matcher = match matcher {
            Ok(m) => Some(m),
            Err((reason, message)) => {
                self.status.error(
                    key,
                    ConditionType::RouteError,
                    reason,
                    format!("{at}: {message}"),
                );
                None
            }
        };
        if route.services.is_empty() {
            self.status.error(
                key,
                ConditionType::RouteError,
                Reason::NothingDefined,
                format!("{at}: route.services must have at least one entry"),
            );
            ok = false;
        }
        let mut weighted = Vec::new();
        for (i, service) in route.services.iter().enumerate() {
            let sat = format!("{at}.services[{i}]");
            ok &= check_unsupported(self.status, key, &sat, &service.unsupported);
            let port = match i32::try_from(service.port) {
                Ok(p) if (1..=65535).contains(&p) => p,
                _ => {
                    self.status.error(
                        key,
                        ConditionType::ServiceError,
                        Reason::ServiceUnresolvedReference,
                        format!(
                            "{sat}: service port must be in the range 1-65535, {} was supplied",
                            service.port
                        ),
                    );
                    ok = false;
                    continue;
                }
            };
            let weight = match service.weight.map(u32::try_from) {
                None => 0,
                Some(Ok(w)) => w,
                Some(Err(_)) => {
                    self.status.error(
                        key,
                        ConditionType::ServiceError,
                        Reason::RouteNotValid,
                        format!("{sat}: weight must not be negative"),
                    );
                    ok = false;
                    continue;
                }
            };
            match service_cluster(
                self.ctx.objects,
                &key.namespace,
                &service.name,
                PortRef::Number(port),
            ) {
                Ok(cluster) => {
                    weighted.push(WeightedCluster {
                        cluster: cluster.name.clone(),
                        weight,
                    });
                    self.ir.add_cluster(cluster);
                }
                Err(e) => self.status.error(
                    key,
                    ConditionType::ServiceError,
                    Reason::ServiceUnresolvedReference,
                    format!("{sat}: {e}"),
                ),
            }
        }
        let matcher = matcher?;
        if !ok {
            return None;
        }
        Some(Route {
            matcher,
            action: forward_or_503(weighted),
            source: key.clone(),
        })
    }
}

/// Contour's weights: all zero (or unset) means an even split; otherwise zero-weight
/// services get no traffic. No resolvable service at all answers 503.
fn forward_or_503(mut weighted: Vec<WeightedCluster>) -> RouteAction {
    if weighted.is_empty() {
        return RouteAction::DirectResponse {
            status: 503,
            body: None,
        };
    }
    if weighted.iter().all(|w| w.weight == 0) {
        weighted.iter_mut().for_each(|w| w.weight = 1);
    } else {
        weighted.retain(|w| w.weight > 0);
    }
    RouteAction::Forward(weighted)
}
