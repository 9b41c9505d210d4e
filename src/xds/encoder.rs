//! Translation that remembers: each vhost's share of the xDS is encoded once and kept,
//! so a change re-encodes only the vhosts it touches and names only the resources whose
//! bytes may have changed. A full build is the same code run from empty over every vhost,
//! so both paths give byte-identical resources.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::util::pack_any;

use isobar_sdk::{Ir, Objects};

use super::snapshot::XdsType;
use super::tls;
use super::translate::{
    EnvoySettings, HTTP_LISTENER, STATS_LISTENER, append_field, cluster_for, http_listener,
    load_assignment, route_configuration, stats_listener, virtual_host,
};

/// One vhost's encoded share (plain and secure listeners share an FQDN).
#[derive(Default)]
struct Parts {
    /// Its `VirtualHost` in `ingress_http`.
    plain: Option<Box<[u8]>>,
    /// Its filter chain on `ingress_https`.
    chain: Option<Box<[u8]>>,
    /// Its secure `VirtualHost` (its own RouteConfiguration, and the fallback one).
    secure_routes: Option<Box<[u8]>>,
    /// Whether it has its own RouteConfiguration (not TCP proxying).
    rds: bool,
    fallback: bool,
    clusters: BTreeSet<String>,
    secret: Option<String>,
}

/// A cluster in use, by how many vhosts.
struct Used {
    vhosts: usize,
    eds_name: String,
    service: (String, String),
    port_name: String,
}

/// Resources to put (`Some`) or remove (`None`), by type.
#[derive(Default)]
pub struct Changes {
    pub by_type: BTreeMap<XdsType, BTreeMap<String, Option<Any>>>,
}

impl Changes {
    fn put(&mut self, t: XdsType, name: String, any: Option<Any>) {
        self.by_type.entry(t).or_default().insert(name, any);
    }
}

/// What translation keeps between builds.
#[derive(Default)]
pub struct Encoder {
    /// The SDS name of Envoy's upstream client certificate, when one is served.
    client_certificate: Option<String>,
    vhosts: BTreeMap<String, Parts>,
    clusters: HashMap<String, Used>,
    /// EDS names by how many clusters use them.
    endpoints: HashMap<String, usize>,
    /// Endpoint sets (EDS name, port name) by Service: what an endpoint change recomputes.
    by_service: BTreeMap<(String, String), BTreeSet<(String, String)>>,
    /// SDS names by how many vhosts (and the fallback chain) use them.
    secrets: HashMap<String, usize>,
    /// The fallback certificate, once a build named it, and whether it is counted in use.
    fallback_secret: Option<String>,
    fallback_counted: bool,
    plains: usize,
    chains: usize,
    fallbacks: usize,
    started: bool,
}

impl Encoder {
    pub fn new(client_certificate: Option<String>) -> Encoder {
        Encoder {
            client_certificate,
            ..Encoder::default()
        }
    }

    /// Whether builds may be spliced in: the upstream client certificate is served only
    /// while some cluster uses TLS, a whole-IR question.
    pub fn splices(&self) -> bool {
        self.client_certificate.is_none()
    }

    /// Replaces the vhosts named in `touched` (the ones they had, if any) with the ones
    /// `ir` has; every vhost of `ir` must be named in `touched`. `ir` must also hold
    /// every cluster and secret its vhosts use. Returns the resources that changed.
    pub fn replace(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        touched: &BTreeSet<String>,
    ) -> Changes {
        let mut changes = Changes::default();
        let mut fresh: BTreeMap<&String, Parts> = BTreeMap::new();
        for (fqdn, vhost) in &ir.virtual_hosts {
            let parts = fresh.entry(fqdn).or_default();
            parts.plain = Some(virtual_host(vhost).into());
            parts
                .clusters
                .extend(vhost.cluster_names().map(str::to_string));
        }
        for (fqdn, vhost) in &ir.secure_virtual_hosts {
            let parts = fresh.entry(fqdn).or_default();
            parts.chain = Some(tls::vhost_chain(vhost, settings).into());
            parts.secure_routes = Some(virtual_host(&vhost.http).into());
            parts.rds = vhost.tcp_proxy.is_none();
            parts.fallback = vhost.fallback;
            parts
                .clusters
                .extend(vhost.cluster_names().map(str::to_string));
            parts.secret = vhost
                .tls
                .as_ref()
                .map(|t| t.secret.clone())
                .filter(|s| ir.secrets.contains_key(s));
        }
        if ir.fallback_secret.is_some() {
            self.fallback_secret.clone_from(&ir.fallback_secret);
        }
        // What stays in use is counted again before the old shares are released, so it
        // is neither removed nor sent again.
        for parts in fresh.values_mut() {
            parts.clusters.retain(|c| ir.clusters.contains_key(c));
            for name in &parts.clusters {
                self.use_cluster(ir, objects, settings, name, &mut changes);
            }
            if let Some(sds) = &parts.secret {
                self.use_secret(ir, sds, &mut changes);
            }
        }
        let mut plain_changed = !self.started;
        let mut chains_changed = false;
        let mut fallback_changed = false;
        // The old shares: released now, compared with the new ones below so that only
        // what differs is assembled and sent again.
        let mut olds: BTreeMap<&String, Parts> = BTreeMap::new();
        for fqdn in touched {
            let Some(old) = self.vhosts.remove(fqdn) else {
                continue;
            };
            self.plains -= usize::from(old.plain.is_some());
            self.chains -= usize::from(old.chain.is_some());
            self.fallbacks -= usize::from(old.fallback);
            for name in &old.clusters {
                self.release_cluster(name, &mut changes);
            }
            if let Some(sds) = &old.secret {
                self.release_secret(sds, &mut changes);
            }
            olds.insert(fqdn, old);
        }
        for (fqdn, parts) in fresh {
            let old = olds.remove(fqdn).unwrap_or_default();
            plain_changed |= old.plain != parts.plain;
            chains_changed |= old.chain != parts.chain;
            fallback_changed |= (old.fallback || parts.fallback)
                && (old.fallback != parts.fallback || old.secure_routes != parts.secure_routes);
            self.plains += usize::from(parts.plain.is_some());
            self.chains += usize::from(parts.chain.is_some());
            self.fallbacks += usize::from(parts.fallback);
            let name = tls::route_config_name(fqdn);
            match (&parts.secure_routes, parts.rds) {
                (Some(routes), true) if !old.rds || old.secure_routes != parts.secure_routes => {
                    let any = route_configuration(&name, std::iter::once(&**routes), true);
                    changes.put(XdsType::Route, name, Some(any));
                }
                (_, false) if old.rds => changes.put(XdsType::Route, name, None),
                _ => {}
            }
            self.vhosts.insert(fqdn.clone(), parts);
        }
        for (fqdn, old) in olds {
            plain_changed |= old.plain.is_some();
            chains_changed |= old.chain.is_some();
            fallback_changed |= old.fallback;
            if old.rds {
                changes.put(XdsType::Route, tls::route_config_name(fqdn), None);
            }
        }
        // The fallback certificate is in use while a vhost enables it.
        let fallback = self.fallback_secret.clone().filter(|_| self.fallbacks > 0);
        match (&fallback, self.fallback_counted) {
            (Some(sds), false)
                if self.secrets.contains_key(sds) || ir.secrets.contains_key(sds) =>
            {
                self.use_secret(ir, sds, &mut changes);
                self.fallback_counted = true;
                chains_changed = true;
                fallback_changed = true;
            }
            (None, true) => {
                if let Some(sds) = self.fallback_secret.clone() {
                    self.release_secret(&sds, &mut changes);
                }
                self.fallback_counted = false;
                chains_changed = true;
                fallback_changed = true;
            }
            _ => {}
        }
        if fallback_changed {
            let routes = self
                .vhosts
                .values()
                .filter(|p| p.fallback)
                .filter_map(|p| p.secure_routes.as_deref());
            let any = self
                .fallback_counted
                .then(|| route_configuration(tls::FALLBACK_ROUTES, routes, false));
            changes.put(XdsType::Route, tls::FALLBACK_ROUTES.to_string(), any);
        }
        if plain_changed {
            // RDS is always published, even empty, so a listener never waits on it.
            let routes = self.vhosts.values().filter_map(|p| p.plain.as_deref());
            let any = route_configuration(HTTP_LISTENER, routes, false);
            changes.put(XdsType::Route, HTTP_LISTENER.to_string(), Some(any));
            let listener = (self.plains > 0).then(|| pack_any(http_listener(settings)));
            changes.put(XdsType::Listener, HTTP_LISTENER.to_string(), listener);
        }
        if chains_changed {
            let listener = (self.chains > 0).then(|| self.https_listener(settings));
            changes.put(XdsType::Listener, tls::HTTPS_LISTENER.to_string(), listener);
        }
        if !self.started {
            let stats = pack_any(stats_listener(settings));
            changes.put(XdsType::Listener, STATS_LISTENER.to_string(), Some(stats));
            self.started = true;
        }
        changes
    }

    fn https_listener(&self, settings: &EnvoySettings) -> Any {
        let mut bytes = tls::https_listener_shell(settings);
        for chain in self.vhosts.values().filter_map(|p| p.chain.as_deref()) {
            append_field(&mut bytes, tls::LISTENER_FILTER_CHAINS, chain);
        }
        if let (true, Some(sds)) = (self.fallback_counted, &self.fallback_secret) {
            let chain = tls::fallback_chain_bytes(sds, settings);
            append_field(&mut bytes, tls::LISTENER_FILTER_CHAINS, &chain);
        }
        Any {
            type_url: <Listener as prost::Name>::type_url(),
            value: bytes,
        }
    }

    fn use_cluster(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        name: &str,
        changes: &mut Changes,
    ) {
        if let Some(used) = self.clusters.get_mut(name) {
            used.vhosts += 1;
            return;
        }
        let Some(c) = ir.clusters.get(name) else {
            return;
        };
        let any = pack_any(cluster_for(c, settings, self.client_certificate.as_deref()));
        changes.put(XdsType::Cluster, name.to_string(), Some(any));
        let service = (c.namespace.clone(), c.service.clone());
        let users = self.endpoints.entry(c.eds_name.clone()).or_default();
        *users += 1;
        if *users == 1 {
            let cla = load_assignment(&c.eds_name, objects, &c.namespace, &c.service, &c.port_name);
            changes.put(XdsType::Endpoint, c.eds_name.clone(), Some(pack_any(cla)));
            self.by_service
                .entry(service.clone())
                .or_default()
                .insert((c.eds_name.clone(), c.port_name.clone()));
        }
        self.clusters.insert(
            name.to_string(),
            Used {
                vhosts: 1,
                eds_name: c.eds_name.clone(),
                service,
                port_name: c.port_name.clone(),
            },
        );
    }

    fn release_cluster(&mut self, name: &str, changes: &mut Changes) {
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
        let users = self.endpoints.entry(used.eds_name.clone()).or_default();
        *users = users.saturating_sub(1);
        if *users == 0 {
            self.endpoints.remove(&used.eds_name);
            changes.put(XdsType::Endpoint, used.eds_name.clone(), None);
            if let Some(sets) = self.by_service.get_mut(&used.service) {
                sets.remove(&(used.eds_name, used.port_name));
                if sets.is_empty() {
                    self.by_service.remove(&used.service);
                }
            }
        }
    }

    fn use_secret(&mut self, ir: &Ir, sds: &str, changes: &mut Changes) {
        let users = self.secrets.entry(sds.to_string()).or_default();
        *users += 1;
        if *users == 1
            && let Some(secret) = ir.secrets.get(sds)
        {
            let any = pack_any(tls::secret(sds, secret));
            changes.put(XdsType::Secret, sds.to_string(), Some(any));
        }
    }

    fn release_secret(&mut self, sds: &str, changes: &mut Changes) {
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
    ) -> BTreeMap<String, Any> {
        let mut out = BTreeMap::new();
        for service in services {
            for (eds_name, port_name) in self.by_service.get(service).into_iter().flatten() {
                let (namespace, name) = service;
                let cla = load_assignment(eds_name, objects, namespace, name, port_name);
                out.insert(eds_name.clone(), pack_any(cla));
            }
        }
        out
    }
}
