//! What an HTTPRoute claims, for building a change alone: the hosts it can have (on
//! every listener its parents name, whether or not it attaches there) and the
//! Services it names. More than it gets is harmless (more is rebuilt); a host it gets
//! but does not claim makes the change build in full.

use isobar_sdk::{Claim, ObjectKey, Objects};

use crate::hosts::intersect;
use gateway_api::apis::standard::httproutes::HttpRouteSpec;

use crate::kinds::{GROUP, Gateway, GrpcRoute, HttpRoute, TcpRoute, TlsRoute};

/// A parent reference as every route kind spells it.
type Parent<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    &'a str,
    Option<&'a str>,
    Option<i32>,
);

/// The hosts a route with `hostnames` can get on the listeners `parents` name.
fn hosts<'a>(
    objects: &Objects,
    key: &ObjectKey,
    parents: impl Iterator<Item = Parent<'a>>,
    hostnames: &[String],
) -> Vec<String> {
    let mut hosts = Vec::new();
    for (group, kind, namespace, name, section, port) in parents {
        if group.unwrap_or(GROUP) != GROUP || kind.unwrap_or("Gateway") != "Gateway" {
            continue;
        }
        let namespace = namespace.unwrap_or(&key.namespace);
        let Some(gateway) = objects.get::<Gateway>(namespace, name) else {
            continue;
        };
        for listener in &gateway.spec.listeners {
            if section.is_some_and(|s| s != listener.name)
                || port.is_some_and(|port| port != listener.port)
            {
                continue;
            }
            hosts.extend(intersect(listener.hostname.as_deref(), hostnames));
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The Services of backend references (group, kind, namespace, name) from `key`.
fn services<'a>(
    key: &ObjectKey,
    backends: impl Iterator<Item = (Option<&'a str>, Option<&'a str>, Option<&'a str>, &'a str)>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = backends
        .filter(|(group, kind, _, _)| {
            group.unwrap_or("").is_empty() && kind.unwrap_or("Service") == "Service"
        })
        .map(|(_, _, ns, name)| (ns.unwrap_or(&key.namespace).to_string(), name.to_string()))
        .collect();
    out.sort();
    out.dedup();
    out
}

pub fn tls_route(objects: &Objects, key: &ObjectKey, route: &TlsRoute) -> Claim {
    let spec = &route.spec;
    let parents = spec.parent_refs.iter().flatten().map(|p| {
        (
            p.group.as_deref(),
            p.kind.as_deref(),
            p.namespace.as_deref(),
            p.name.as_str(),
            p.section_name.as_deref(),
            p.port,
        )
    });
    let backends = spec.rules.iter().flat_map(|r| &r.backend_refs).map(|b| {
        (
            b.group.as_deref(),
            b.kind.as_deref(),
            b.namespace.as_deref(),
            b.name.as_str(),
        )
    });
    Claim {
        hosts: hosts(objects, key, parents, &spec.hostnames),
        includes: Vec::new(),
        services: services(key, backends),
    }
}

pub fn tcp_route(key: &ObjectKey, route: &TcpRoute) -> Claim {
    let backends = route
        .spec
        .rules
        .iter()
        .flat_map(|r| &r.backend_refs)
        .map(|b| {
            (
                b.group.as_deref(),
                b.kind.as_deref(),
                b.namespace.as_deref(),
                b.name.as_str(),
            )
        });
    Claim {
        hosts: Vec::new(),
        includes: Vec::new(),
        services: services(key, backends),
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
    let parents = spec.parent_refs.iter().flatten().map(|p| {
        (
            p.group.as_deref(),
            p.kind.as_deref(),
            p.namespace.as_deref(),
            p.name.as_str(),
            p.section_name.as_deref(),
            p.port,
        )
    });
    let hosts = hosts(objects, key, parents, &hostnames);
    let mut services = Vec::new();
    let mut service = |group: Option<&str>, kind: Option<&str>, ns: Option<&str>, name: &str| {
        if group.unwrap_or("").is_empty() && kind.unwrap_or("Service") == "Service" {
            services.push((ns.unwrap_or(&key.namespace).to_string(), name.to_string()));
        }
    };
    for rule in spec.rules.iter().flatten() {
        for b in rule.backend_refs.iter().flatten() {
            service(
                b.group.as_deref(),
                b.kind.as_deref(),
                b.namespace.as_deref(),
                &b.name,
            );
        }
        for f in rule.filters.iter().flatten() {
            if let Some(m) = &f.request_mirror {
                let b = &m.backend_ref;
                service(
                    b.group.as_deref(),
                    b.kind.as_deref(),
                    b.namespace.as_deref(),
                    &b.name,
                );
            }
        }
    }
    services.sort();
    services.dedup();
    Claim {
        hosts,
        includes: Vec::new(),
        services,
    }
}
