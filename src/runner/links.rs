//! How routing objects reach each other: an HTTPProxy includes another, or two objects
//! claim the same host. A build's output for an object depends only on the objects
//! linked to it, directly or not (with local plugins, see `Processor::local`), so a
//! change needs only those rebuilt; the admission webhook judges over the same set.

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::host::parse_host;
use isobar_sdk::{Kind, ObjectKey, Objects, SmallSet};

/// What one routing object claims and names.
#[derive(Debug, Default, Clone, PartialEq)]
struct Claim {
    /// The vhost FQDNs it adds routes to, as the sources spell them.
    hosts: Vec<String>,
    /// The HTTPProxies it includes.
    includes: Vec<ObjectKey>,
}

fn claim_of(objects: &Objects, key: &ObjectKey) -> Claim {
    let id = (key.namespace.clone(), key.name.clone());
    let mut claim = Claim::default();
    match key.kind {
        Kind::HTTPProxy => {
            let Some(proxy) = objects.httpproxies.get(&id) else {
                return claim;
            };
            let tcp = proxy.spec.tcpproxy.as_ref();
            let tcp_include = tcp.and_then(|t| t.include.as_ref().or(t.includes.as_ref()));
            let includes = proxy
                .spec
                .includes
                .iter()
                .map(|i| (i.namespace.as_deref(), i.name.as_str()))
                .chain(tcp_include.map(|i| (i.namespace.as_deref(), i.name.as_str())));
            for (child_ns, child) in includes {
                let ns = child_ns.unwrap_or(&key.namespace);
                claim
                    .includes
                    .push(ObjectKey::new(Kind::HTTPProxy, ns, child));
            }
            if let Some(vhost) = &proxy.spec.virtualhost
                && let Ok(host) = parse_host(&vhost.fqdn)
            {
                claim.hosts.push(host.fqdn);
            }
        }
        Kind::Ingress => {
            let Some(spec) = objects.ingresses.get(&id).and_then(|i| i.spec.as_ref()) else {
                return claim;
            };
            // As the Ingress source reads it: no host is `*`, and so is the default backend.
            let default = spec.default_backend.as_ref().map(|_| "");
            let rules = spec
                .rules
                .iter()
                .flatten()
                .map(|r| r.host.as_deref().unwrap_or_default());
            for host in default.into_iter().chain(rules) {
                if let Ok(host) = parse_host(host)
                    && !claim.hosts.contains(&host.fqdn)
                {
                    claim.hosts.push(host.fqdn);
                }
            }
        }
        _ => {}
    }
    claim
}

/// The routing objects that name the Service `namespace/name` as a backend (HTTPProxy
/// route and TCP proxy services, Ingress backends): what a change to that Service can
/// change. Read from the objects as they are (a namespace's proxies and Ingresses, no
/// index kept).
pub fn service_referrers(objects: &Objects, namespace: &str, name: &str) -> Vec<ObjectKey> {
    let from = (namespace.to_string(), String::new());
    let proxies = objects
        .httpproxies
        .range(from.clone()..)
        .take_while(|((ns, _), _)| ns == namespace)
        .filter(|(_, proxy)| {
            let tcp = proxy.spec.tcpproxy.iter().flat_map(|t| &t.services);
            let routes = proxy.spec.routes.iter().flat_map(|r| &r.services);
            routes.chain(tcp).any(|s| s.name == name)
        })
        .map(|((ns, proxy), _)| ObjectKey::new(Kind::HTTPProxy, ns, proxy));
    let ingresses = objects
        .ingresses
        .range(from..)
        .take_while(|((ns, _), _)| ns == namespace)
        .filter(|(_, ingress)| {
            let Some(spec) = ingress.spec.as_ref() else {
                return false;
            };
            let paths = spec.rules.iter().flatten().filter_map(|r| r.http.as_ref());
            let backends = paths.flat_map(|h| &h.paths).map(|p| &p.backend);
            spec.default_backend
                .iter()
                .chain(backends)
                .any(|b| b.service.as_ref().is_some_and(|s| s.name == name))
        })
        .map(|((ns, ingress), _)| ObjectKey::new(Kind::Ingress, ns, ingress));
    proxies.chain(ingresses).collect()
}

/// The links between every routing object, kept up to date one object at a time.
#[derive(Debug, Default)]
pub struct Links {
    claims: BTreeMap<ObjectKey, Claim>,
    by_host: BTreeMap<String, SmallSet<ObjectKey>>,
    included_by: BTreeMap<ObjectKey, SmallSet<ObjectKey>>,
}

/// What a change reaches: the routing objects to rebuild, and the FQDNs whose vhosts
/// they had or may now have.
#[derive(Debug, Default)]
pub struct Reach {
    pub objects: BTreeSet<ObjectKey>,
    pub hosts: BTreeSet<String>,
}

impl Links {
    /// The links between every routing object of `objects`.
    pub fn of(objects: &Objects) -> Links {
        let mut links = Links::default();
        let keys = objects
            .httpproxies
            .keys()
            .map(|(ns, name)| ObjectKey::new(Kind::HTTPProxy, ns, name))
            .chain(
                objects
                    .ingresses
                    .keys()
                    .map(|(ns, name)| ObjectKey::new(Kind::Ingress, ns, name)),
            );
        for key in keys {
            let claim = claim_of(objects, &key);
            links.set(key, claim);
        }
        links
    }

    fn set(&mut self, key: ObjectKey, claim: Claim) {
        if let Some(old) = self.claims.remove(&key) {
            for host in &old.hosts {
                if let Some(set) = self.by_host.get_mut(host) {
                    set.remove(&key);
                    if set.is_empty() {
                        self.by_host.remove(host);
                    }
                }
            }
            for child in &old.includes {
                if let Some(set) = self.included_by.get_mut(child) {
                    set.remove(&key);
                    if set.is_empty() {
                        self.included_by.remove(child);
                    }
                }
            }
        }
        if claim == Claim::default() {
            return;
        }
        for host in &claim.hosts {
            self.by_host
                .entry(host.clone())
                .or_default()
                .insert(key.clone());
        }
        for child in &claim.includes {
            self.included_by
                .entry(child.clone())
                .or_default()
                .insert(key.clone());
        }
        self.claims.insert(key, claim);
    }

    /// Brings the links of `changed` up to what `objects` holds now, and returns what the
    /// change reaches: everything linked to the changed objects before or after it.
    pub fn update(&mut self, objects: &Objects, changed: &BTreeSet<ObjectKey>) -> Reach {
        let mut seeds: Vec<ObjectKey> = Vec::new();
        let mut reach = Reach::default();
        for key in changed {
            let claim = claim_of(objects, key);
            if let Some(old) = self.claims.get(key) {
                // What it used to reach: children it no longer includes, hosts it left.
                seeds.extend(old.includes.iter().cloned());
                for host in &old.hosts {
                    reach.hosts.insert(host.clone());
                    seeds.extend(self.by_host.get(host).into_iter().flatten().cloned());
                }
            }
            self.set(key.clone(), claim);
            seeds.push(key.clone());
        }
        self.close(seeds, &mut reach);
        reach
    }

    /// What `start` reaches as things stand.
    pub fn linked(&self, start: &ObjectKey) -> Reach {
        let mut reach = Reach::default();
        self.close(vec![start.clone()], &mut reach);
        reach
    }

    fn close(&self, mut todo: Vec<ObjectKey>, reach: &mut Reach) {
        while let Some(key) = todo.pop() {
            if !reach.objects.insert(key.clone()) {
                continue;
            }
            todo.extend(self.included_by.get(&key).into_iter().flatten().cloned());
            let Some(claim) = self.claims.get(&key) else {
                continue;
            };
            todo.extend(claim.includes.iter().cloned());
            for host in &claim.hosts {
                reach.hosts.insert(host.clone());
                todo.extend(self.by_host.get(host).into_iter().flatten().cloned());
            }
        }
    }

    /// How many routing objects are linked in.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }
}
