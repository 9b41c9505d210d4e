//! What the encoder counts: each cluster and endpoint set by how many vhosts use it,
//! each certificate by how many vhosts and fallback chains serve it. The first user
//! puts a resource, the last one removes it; an endpoint change recomputes only the
//! endpoint sets of the Services it touches.

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::{Ir, Objects};

use super::{Encoder, Used};
use crate::xds::cluster::cluster_for;
use crate::xds::endpoint::{load_assignment, load_assignment_of};
use crate::xds::resource::{Changes, Encoded, XdsType, encoded};
use crate::xds::secret::secret;
use crate::xds::settings::EnvoySettings;

impl Encoder {
    pub(super) fn use_cluster(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        name: &str,
        changes: &mut Changes,
    ) {
        let c = ir
            .clusters
            .get(name)
            .or_else(|| ir.extension_clusters.get(name));
        if let Some(used) = self.clusters.get_mut(name) {
            used.vhosts += 1;
            // A cluster's name holds its Service, port number and options, not the
            // port's name: a renamed port keeps the name but moves the cluster (for
            // every vhost using it) to another endpoint set.
            let Some(c) =
                c.filter(|c| c.eds_name != used.eds_name || c.port_name != used.port_name)
            else {
                return;
            };
            let moved = Used {
                vhosts: used.vhosts,
                secret: used.secret.clone(),
                eds_name: c.eds_name.clone(),
                service: (c.namespace.clone(), c.service.clone()),
                port_name: c.port_name.clone(),
            };
            let old = std::mem::replace(used, moved);
            self.release_endpoints(old, changes);
            self.use_endpoints(c, objects, changes);
            let cluster = cluster_for(c, settings, self.client_certificate.as_deref());
            changes.put(XdsType::Cluster, name.to_string(), Some(encoded(&cluster)));
            return;
        }
        let Some(c) = c else {
            return;
        };
        let cluster = encoded(&cluster_for(
            c,
            settings,
            self.client_certificate.as_deref(),
        ));
        changes.put(XdsType::Cluster, name.to_string(), Some(cluster));
        self.use_endpoints(c, objects, changes);
        let secret = c.options.client_certificate.clone();
        if let Some(sds) = &secret {
            self.use_secret(ir, sds, changes);
        }
        self.clusters.insert(
            name.to_string(),
            Used {
                vhosts: 1,
                secret,
                eds_name: c.eds_name.clone(),
                service: (c.namespace.clone(), c.service.clone()),
                port_name: c.port_name.clone(),
            },
        );
    }

    pub(super) fn release_cluster(&mut self, name: &str, changes: &mut Changes) {
        let Some(used) = self.clusters.get_mut(name) else {
            return;
        };
        used.vhosts -= 1;
        if used.vhosts > 0 {
            return;
        }
        let Some(used) = self.clusters.remove(name) else {
            return;
        };
        changes.put(XdsType::Cluster, name.to_string(), None);
        if let Some(sds) = &used.secret {
            self.release_secret(sds, changes);
        }
        self.release_endpoints(used, changes);
    }

    /// One more cluster on `c`'s endpoint set: its first puts it.
    fn use_endpoints(
        &mut self,
        c: &isobar_sdk::ir::Cluster,
        objects: &Objects,
        changes: &mut Changes,
    ) {
        // An ExternalName cluster resolves its name: no endpoint set.
        if c.eds_name.is_empty() {
            return;
        }
        let users = self.endpoints.entry(c.eds_name.clone()).or_default();
        *users += 1;
        if *users == 1 {
            let cla = load_assignment_of(c, objects);
            changes.put(XdsType::Endpoint, c.eds_name.clone(), Some(encoded(&cla)));
            if c.localities.is_empty() {
                self.by_service
                    .entry((c.namespace.clone(), c.service.clone()))
                    .or_default()
                    .insert((c.eds_name.clone(), c.port_name.clone()));
            }
            // A cluster of several Services (an extension cluster, in use for as long
            // as this encoder lives): recomputed whole when any of them changes.
            for l in &c.localities {
                self.by_service
                    .entry((l.namespace_in(c).to_string(), l.service.clone()))
                    .or_default()
                    .insert((c.eds_name.clone(), l.port_name.clone()));
                self.multi_service.insert(c.eds_name.clone(), c.clone());
            }
        }
    }

    /// One cluster fewer on `used`'s endpoint set: its last removes it.
    fn release_endpoints(&mut self, used: Used, changes: &mut Changes) {
        if used.eds_name.is_empty() {
            return;
        }
        let users = self.endpoints.entry(used.eds_name.clone()).or_default();
        *users = users.saturating_sub(1);
        if *users == 0 {
            self.endpoints.remove(&used.eds_name);
            changes.put(XdsType::Endpoint, used.eds_name.clone(), None);
            // A cluster of several Services: each of them leads to it no more.
            let mut services = vec![(used.service.clone(), used.port_name.clone())];
            if let Some(c) = self.multi_service.remove(&used.eds_name) {
                services = c
                    .localities
                    .iter()
                    .map(|l| {
                        let service = (l.namespace_in(&c).to_string(), l.service.clone());
                        (service, l.port_name.clone())
                    })
                    .collect();
            }
            for (service, port_name) in services {
                if let Some(sets) = self.by_service.get_mut(&service) {
                    sets.remove(&(used.eds_name.clone(), port_name));
                    if sets.is_empty() {
                        self.by_service.remove(&service);
                    }
                }
            }
        }
    }

    pub(super) fn use_secret(&mut self, ir: &Ir, sds: &str, changes: &mut Changes) {
        let users = self.secrets.entry(sds.to_string()).or_default();
        *users += 1;
        if *users == 1
            && let Some(served) = ir.secrets.get(sds)
        {
            changes.put(XdsType::Secret, sds.to_string(), Some(secret(sds, served)));
        }
    }

    pub(super) fn release_secret(&mut self, sds: &str, changes: &mut Changes) {
        let Some(users) = self.secrets.get_mut(sds) else {
            return;
        };
        *users -= 1;
        if *users == 0 {
            self.secrets.remove(sds);
            changes.put(XdsType::Secret, sds.to_string(), None);
        }
    }

    /// The ClusterLoadAssignments of the clusters of `services`, for an endpoint change:
    /// only EDS changes, nothing else is built.
    pub fn endpoints_of(
        &self,
        objects: &Objects,
        services: &BTreeSet<(String, String)>,
    ) -> BTreeMap<String, Encoded> {
        let mut out = BTreeMap::new();
        for service in services {
            for (eds_name, port_name) in self.by_service.get(service).into_iter().flatten() {
                let (namespace, name) = service;
                let cla = match self.multi_service.get(eds_name) {
                    Some(c) => load_assignment_of(c, objects),
                    None => load_assignment(eds_name, objects, namespace, name, port_name),
                };
                out.insert(eds_name.clone(), encoded(&cla));
            }
        }
        out
    }
}
