//! What an HTTPRoute claims, for building a change alone: the hosts it can have (on
//! every listener its parents name, whether or not it attaches there) and the
//! Services it names. More than it gets is harmless (more is rebuilt); a host it gets
//! but does not claim makes the change build in full.

use isobar_sdk::{Claim, ObjectKey, Objects, ParentRef};

use crate::hosts::intersect;
use crate::rules::BackendRef;
use gateway_api::apis::experimental::httproutes::HttpRouteSpec;

use crate::kinds::{
    GROUP, Gateway, GrpcRoute, HttpRoute, ListenerSet, TcpRoute, TlsRoute, UdpRoute,
};

/// The hosts a route with `hostnames` can get on the listeners `parents` name.
fn hosts(
    objects: &Objects,
    key: &ObjectKey,
    parents: impl Iterator<Item = ParentRef>,
    hostnames: &[String],
) -> Vec<String> {
    let mut hosts = Vec::new();
    for p in parents {
        if p.group.as_deref().unwrap_or(GROUP) != GROUP {
            continue;
        }
        let namespace = p.namespace.as_deref().unwrap_or(&key.namespace);
        // (name, port, hostname, protocol) of the parent's listeners.
        let listeners: Vec<(&str, i32, Option<&str>, &str)> =
            match p.kind.as_deref().unwrap_or("Gateway") {
                "Gateway" => objects
                    .get::<Gateway>(namespace, &p.name)
                    .into_iter()
                    .flat_map(|g| &g.spec.listeners)
                    .map(|l| (l.name.as_str(), l.port, l.hostname.as_deref(), &*l.protocol))
                    .collect(),
                "ListenerSet" => objects
                    .get::<ListenerSet>(namespace, &p.name)
                    .into_iter()
                    .flat_map(|s| &s.spec.listeners)
                    .map(|l| (l.name.as_str(), l.port, l.hostname.as_deref(), &*l.protocol))
                    .collect(),
                _ => continue,
            };
        for (name, port, hostname, protocol) in listeners {
            if p.section_name.as_ref().is_some_and(|s| s != name)
                || p.port.is_some_and(|p| p != port)
            {
                continue;
            }
            // On an HTTPS listener routes go to the filter chain of its hostname.
            if protocol == "HTTPS" {
                hosts.push(hostname.map_or_else(|| "*".to_string(), str::to_ascii_lowercase));
            }
            hosts.extend(intersect(hostname, hostnames));
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The Services of backend references from `key`.
fn services<'a>(
    key: &ObjectKey,
    backends: impl Iterator<Item = BackendRef<'a>>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = backends
        .filter(|b| b.group.unwrap_or("").is_empty() && b.kind.unwrap_or("Service") == "Service")
        .map(|b| {
            (
                b.namespace.unwrap_or(&key.namespace).to_string(),
                b.name.to_string(),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

pub fn tls_route(objects: &Objects, key: &ObjectKey, route: &TlsRoute) -> Claim {
    let spec = &route.spec;
    let own = spec.parent_refs.iter().flatten().map(|p| parent_ref!(p));
    let wants = crate::defaults::is_all(spec.use_default_gateways.as_ref());
    let parents = crate::defaults::parents(objects, own.collect(), wants).into_iter();
    let backends = spec
        .rules
        .iter()
        .flat_map(|r| &r.backend_refs)
        .map(|b| backend_ref!(b));
    Claim {
        hosts: hosts(objects, key, parents, &spec.hostnames),
        services: services(key, backends),
        ..Claim::default()
    }
}

pub fn tcp_route(key: &ObjectKey, route: &TcpRoute) -> Claim {
    let rules = route.spec.rules.iter();
    let backends = rules.flat_map(|r| &r.backend_refs).map(|b| backend_ref!(b));
    Claim {
        services: services(key, backends),
        ..Claim::default()
    }
}

pub fn udp_route(key: &ObjectKey, route: &UdpRoute) -> Claim {
    let rules = route.spec.rules.iter();
    let backends = rules.flat_map(|r| &r.backend_refs).map(|b| backend_ref!(b));
    Claim {
        services: services(key, backends),
        ..Claim::default()
    }
}

pub fn route(objects: &Objects, key: &ObjectKey, route: &HttpRoute) -> Claim {
    http_spec(objects, key, &route.spec)
}

/// A GRPCRoute claims what the HTTPRoute it amounts to would.
pub fn grpc_route(objects: &Objects, key: &ObjectKey, route: &GrpcRoute) -> Claim {
    match crate::grpc::as_http(&route.spec) {
        Ok(spec) => http_spec(objects, key, &spec),
        Err(_) => Claim::default(),
    }
}

fn http_spec(objects: &Objects, key: &ObjectKey, spec: &HttpRouteSpec) -> Claim {
    let hostnames = spec.hostnames.clone().unwrap_or_default();
    let own = spec.parent_refs.iter().flatten().map(|p| parent_ref!(p));
    let wants = crate::defaults::is_all(spec.use_default_gateways.as_ref());
    let parents = crate::defaults::parents(objects, own.collect(), wants).into_iter();
    let hosts = hosts(objects, key, parents, &hostnames);
    let rules = spec.rules.iter().flatten();
    let backends = rules.clone().flat_map(|r| r.backend_refs.iter().flatten());
    let mirrors = rules
        .flat_map(|r| r.filters.iter().flatten())
        .filter_map(|f| f.request_mirror.as_ref());
    let backends = backends
        .map(|b| backend_ref!(b))
        .chain(mirrors.map(|m| backend_ref!(&m.backend_ref)));
    Claim {
        hosts,
        services: services(key, backends),
        ..Claim::default()
    }
}
