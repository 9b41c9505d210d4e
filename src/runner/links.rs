//! How routing objects reach each other: one includes another (an HTTPProxy's
//! `includes`) or uses it (an ExtensionService its authorization calls), or two objects
//! claim the same host, as their sources say
//! (`Source::claim`). A build's output for an object depends only on the objects
//! linked to it, directly or not (with local plugins, see `Processor::local`), so a
//! change needs only those rebuilt; the admission webhook judges over the same set. A
//! change that leaves what its users read of an object as it was (`Claim::face`)
//! does not reach them.

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::{ObjectKey, Objects, SmallSet};

use super::pipeline::Pipeline;

/// What the index keeps of one routing object's claim: the hosts, includes and objects
/// used, and the Services it names when its kind may name other namespaces' (those of
/// its own namespace are read again when a Service changes, not kept).
#[derive(Debug, Default, Clone, PartialEq)]
struct Claim {
    hosts: Vec<String>,
    includes: Vec<ObjectKey>,
    uses: Vec<ObjectKey>,
    services: Vec<(String, String)>,
    face: Option<u64>,
}

fn claim_of(objects: &Objects, pipeline: &Pipeline, key: &ObjectKey) -> Claim {
    let claim = pipeline.claim(objects, key);
    Claim {
        hosts: claim.hosts,
        includes: claim.includes,
        uses: claim.uses,
        face: claim.face,
        services: if pipeline.names_other_namespaces(key.kind) {
            claim.services
        } else {
            Vec::new()
        },
    }
}

/// The routing objects that name the Service `namespace/name` (as their source says,
/// see `Source::claim`): what a change to that Service can change. Read from the
/// objects as they are for the routing objects of the Service's namespace; objects of
/// kinds that may name other namespaces' Services are found in `links` (the last
/// build's), or, without one, among all of them.
pub fn service_referrers(
    objects: &Objects,
    pipeline: &Pipeline,
    links: Option<&Links>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectKey> {
    let from = (namespace.to_string(), String::new());
    let mut out = Vec::new();
    let service = (namespace.to_string(), name.to_string());
    for kind in pipeline.routing_kinds() {
        let all = objects.of_kind(kind);
        let elsewhere = pipeline.names_other_namespaces(kind);
        if elsewhere && let Some(links) = links {
            let named = links.by_service.get(&service).into_iter().flatten();
            out.extend(named.filter(|k| k.kind == kind).cloned());
        }
        let candidates: Box<dyn Iterator<Item = (&(String, String), _)>> =
            if elsewhere && links.is_none() {
                Box::new(all.iter())
            } else {
                let in_namespace = all.range(from.clone()..);
                Box::new(in_namespace.take_while(|((ns, _), _)| ns == namespace))
            };
        for ((ns, object), _) in candidates {
            let key = ObjectKey::new(kind, ns, object);
            let claim = pipeline.claim(objects, &key);
            if claim.services.contains(&service) {
                out.push(key);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The links between every routing object, kept up to date one object at a time.
#[derive(Debug, Default)]
pub struct Links {
    claims: BTreeMap<ObjectKey, Claim>,
    by_host: BTreeMap<String, SmallSet<ObjectKey>>,
    included_by: BTreeMap<ObjectKey, SmallSet<ObjectKey>>,
    /// Objects by the objects using them (a change to one reaches its users).
    used_by: BTreeMap<ObjectKey, SmallSet<ObjectKey>>,
    /// Services (namespace, name) by the objects naming them, for kinds that may name
    /// other namespaces' Services.
    by_service: BTreeMap<(String, String), SmallSet<ObjectKey>>,
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
    pub fn of(objects: &Objects, pipeline: &Pipeline) -> Links {
        let mut links = Links::default();
        for kind in pipeline.routing_kinds() {
            for (ns, name) in objects.of_kind(kind).keys() {
                let key = ObjectKey::new(kind, ns, name);
                let claim = claim_of(objects, pipeline, &key);
                links.set(key, claim);
            }
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
            for (index, keys) in [
                (&mut self.included_by, &old.includes),
                (&mut self.used_by, &old.uses),
            ] {
                for other in keys {
                    if let Some(set) = index.get_mut(other) {
                        set.remove(&key);
                        if set.is_empty() {
                            index.remove(other);
                        }
                    }
                }
            }
            for service in &old.services {
                if let Some(set) = self.by_service.get_mut(service) {
                    set.remove(&key);
                    if set.is_empty() {
                        self.by_service.remove(service);
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
        for used in &claim.uses {
            self.used_by
                .entry(used.clone())
                .or_default()
                .insert(key.clone());
        }
        for service in &claim.services {
            self.by_service
                .entry(service.clone())
                .or_default()
                .insert(key.clone());
        }
        self.claims.insert(key, claim);
    }

    /// Brings the links of `changed` up to what `objects` holds now, and returns what the
    /// change reaches: everything linked to the changed objects before or after it.
    pub fn update(
        &mut self,
        objects: &Objects,
        pipeline: &Pipeline,
        changed: &BTreeSet<ObjectKey>,
    ) -> Reach {
        let mut seeds: Vec<ObjectKey> = Vec::new();
        let mut reach = Reach::default();
        // Those whose users read nothing the change changed (see `Claim::face`).
        let mut quiet = BTreeSet::new();
        for key in changed {
            let claim = claim_of(objects, pipeline, key);
            if let Some(old) = self.claims.get(key) {
                if old.face.is_some() && old.face == claim.face {
                    quiet.insert(key.clone());
                }
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
        self.close(seeds, &mut reach, &quiet);
        reach
    }

    /// What `start` reaches as things stand.
    pub fn linked(&self, start: &ObjectKey) -> Reach {
        let mut reach = Reach::default();
        self.close(vec![start.clone()], &mut reach, &BTreeSet::new());
        reach
    }

    /// Adds what `todo` reaches to `reach`; the users of `quiet` objects are left out.
    fn close(&self, mut todo: Vec<ObjectKey>, reach: &mut Reach, quiet: &BTreeSet<ObjectKey>) {
        while let Some(key) = todo.pop() {
            if !reach.objects.insert(key.clone()) {
                continue;
            }
            todo.extend(self.included_by.get(&key).into_iter().flatten().cloned());
            if !quiet.contains(&key) {
                todo.extend(self.used_by.get(&key).into_iter().flatten().cloned());
            }
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

#[cfg(test)]
mod tests;
