//! What an HTTPRoute claims, for building a change alone: the hosts it can have (on
//! every listener its parents name, whether or not it attaches there) and the
//! Services it names. More than it gets is harmless (more is rebuilt); a host it gets
//! but does not claim makes the change build in full.

use isobar_sdk::{Claim, ObjectKey, Objects};

use crate::hosts::intersect;
use crate::kinds::{GROUP, Gateway, HttpRoute};

pub fn route(objects: &Objects, key: &ObjectKey, route: &HttpRoute) -> Claim {
    let spec = &route.spec;
    let hostnames = spec.hostnames.clone().unwrap_or_default();
    let mut hosts = Vec::new();
    for p in spec.parent_refs.iter().flatten() {
        if p.group.as_deref().unwrap_or(GROUP) != GROUP
            || p.kind.as_deref().unwrap_or("Gateway") != "Gateway"
        {
            continue;
        }
        let namespace = p.namespace.as_deref().unwrap_or(&key.namespace);
        let Some(gateway) = objects.get::<Gateway>(namespace, &p.name) else {
            continue;
        };
        for listener in &gateway.spec.listeners {
            if p.section_name.as_ref().is_some_and(|s| *s != listener.name)
                || p.port.is_some_and(|port| port != listener.port)
            {
                continue;
            }
            hosts.extend(intersect(listener.hostname.as_deref(), &hostnames));
        }
    }
    hosts.sort();
    hosts.dedup();
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
