//! Routes of one root HTTPProxy.

use isobar_sdk::api::{HTTPProxy, Route as ProxyRoute};
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::Host;
use isobar_sdk::ir::{PathMatch, Route, RouteAction, RouteMatch, WeightedCluster};
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, Ir, ObjectKey, StatusReport};

use crate::check_unsupported;

/// Adds the proxy's routes to its vhost, unless an error invalidates the proxy.
/// Missing Services do not: their route answers 503, as Contour's does.
pub(crate) fn build_root(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    proxy: &HTTPProxy,
    host: &Host,
) {
    let spec = &proxy.spec;
    let mut valid = check_unsupported(status, key, "spec", &spec.unsupported);
    if let Some(vhost) = &spec.virtualhost {
        valid &= check_unsupported(status, key, "spec.virtualhost", &vhost.unsupported);
    }
    if !spec.includes.is_empty() {
        status.warning(
            key,
            ConditionType::IncludeError,
            Reason::IgnoredField,
            "spec.includes is not supported by this version of Isobar and is ignored",
        );
    }
    if spec.routes.is_empty() && spec.includes.is_empty() {
        status.error(
            key,
            ConditionType::SpecError,
            Reason::NothingDefined,
            "HTTPProxy.Spec.Routes unspecified",
        );
        return;
    }

    let mut built = Vec::with_capacity(spec.routes.len());
    for (index, route) in spec.routes.iter().enumerate() {
        match build_route(ctx, ir, status, key, index, route) {
            Some(action_and_path) => built.push(action_and_path),
            None => valid = false,
        }
    }
    if !valid {
        return;
    }
    for (path, action) in built {
        ir.add_route(
            &host.fqdn,
            Route {
                matcher: RouteMatch {
                    path,
                    authority_regex: host.authority_regex.clone(),
                },
                action,
                source: key.clone(),
            },
        );
    }
}

/// One route's match and action; `None` when the route makes the proxy invalid.
fn build_route(
    ctx: &BuildContext<'_>,
    ir: &mut Ir,
    status: &mut StatusReport,
    key: &ObjectKey,
    index: usize,
    route: &ProxyRoute,
) -> Option<(PathMatch, RouteAction)> {
    let at = format!("spec.routes[{index}]");
    let mut ok = check_unsupported(status, key, &at, &route.unsupported);
    let mut prefix: Option<&str> = None;
    for (i, cond) in route.conditions.iter().enumerate() {
        ok &= check_unsupported(
            status,
            key,
            &format!("{at}.conditions[{i}]"),
            &cond.unsupported,
        );
        let Some(p) = cond.prefix.as_deref() else {
            continue;
        };
        if prefix.is_some() {
            status.error(
                key,
                ConditionType::RouteError,
                Reason::PathMatchConditionsNotValid,
                format!("{at}: more than one prefix is not allowed in a condition block"),
            );
            ok = false;
        } else if !p.starts_with('/') {
            status.error(
                key,
                ConditionType::RouteError,
                Reason::PathMatchConditionsNotValid,
                format!("{at}: prefix conditions must start with /, {p} was supplied"),
            );
            ok = false;
        }
        prefix = Some(p);
    }
    if route.services.is_empty() {
        status.error(
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
        ok &= check_unsupported(status, key, &sat, &service.unsupported);
        let port = match i32::try_from(service.port) {
            Ok(p) if (1..=65535).contains(&p) => p,
            _ => {
                status.error(
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
                status.error(
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
            ctx.objects,
            &key.namespace,
            &service.name,
            PortRef::Number(port),
        ) {
            Ok(cluster) => {
                weighted.push(WeightedCluster {
                    cluster: cluster.name.clone(),
                    weight,
                });
                ir.add_cluster(cluster);
            }
            Err(e) => status.error(
                key,
                ConditionType::ServiceError,
                Reason::ServiceUnresolvedReference,
                format!("{sat}: {e}"),
            ),
        }
    }
    if !ok {
        return None;
    }
    let path = PathMatch::Prefix(prefix.unwrap_or("/").to_string());
    Some((path, forward_or_503(weighted)))
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
