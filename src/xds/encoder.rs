//! Translation that remembers: each vhost's share of the xDS is encoded once and kept,
//! so a change re-encodes only the vhosts it touches and names only the resources whose
//! bytes may have changed. A full build is the same code run from empty over every vhost,
//! so both paths give byte-identical resources.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

use isobar_sdk::{Ir, Objects, SmallSet};
use prost::bytes::BufMut;

use super::snapshot::{Encoded, Snapshot, XdsType};
use super::tls;
use super::translate::{
    EnvoySettings, HTTP_LISTENER, ROUTE_CONFIGURATION_VIRTUAL_HOSTS, STATS_LISTENER, append_field,
    cluster_for, encoded, http_listener, load_assignment, route_configuration, stats_listener,
    vhds_name, vhds_route_configuration, virtual_host,
};
use super::wire::field_len;

/// One vhost's encoded share (plain and secure listeners share an FQDN). Its bytes are
/// not kept: they are in the published resources, where a later change copies them from
/// (each vhost's bytes are held once, not twice).
#[derive(Default)]
struct Parts {
    /// Its `VirtualHost` in `ingress_http`.
    plain: Option<Share>,
    /// Its filter chain on `ingress_https`.
    chain: Option<Share>,
    /// Its secure `VirtualHost` (its own RouteConfiguration, and the fallback one).
    secure_routes: Option<Share>,
    /// The secure `VirtualHost`'s bytes, kept while it serves the fallback certificate
    /// (the fallback RouteConfiguration is assembled from them): `Some` for exactly the
    /// vhosts that do.
    fallback_routes: Option<Box<[u8]>>,
    /// Whether it has its own RouteConfiguration (not TCP proxying).
    rds: bool,
    clusters: SmallSet<String>,
    secret: Option<String>,
}

impl Parts {
    /// Whether it serves the fallback certificate.
    fn fallback(&self) -> bool {
        self.fallback_routes.is_some()
    }
}

/// What is remembered of an encoded share: its length (where it sits in an assembled
/// table) and a digest of its bytes (whether it changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Share {
    len: usize,
    digest: u64,
}

impl Share {
    fn of(bytes: &[u8]) -> Share {
        Share {
            len: bytes.len(),
            digest: super::snapshot::digest(bytes),
        }
    }

    /// Its length as a field of an assembled table: tag, length, bytes.
    fn field_len(self, tag: u32) -> usize {
        field_len(tag, self.len)
    }
}

/// A vhost's freshly encoded bytes, until they are assembled: where its `VirtualHost`
/// and filter chain sit in the build's [`Arena`].
#[derive(Default)]
struct Fresh {
    plain: Option<Range<usize>>,
    chain: Option<Range<usize>>,
    /// The vhost's own RouteConfiguration, made as soon as its routes are encoded so that
    /// the routes' bytes are not held until every vhost is.
    rds: Option<Encoded>,
}

/// The fresh vhosts' bytes of one build, end to end in one buffer until the tables are
/// assembled. A full build of 10,000 TLS vhosts holds about 16 MB here: as one large
/// block the allocator hands it back whole when the build is done, where 20,000 small
/// ones would leave holes in pages that also hold long-lived data (so the resident size
/// would stay at the build's peak).
#[derive(Default)]
struct Arena(Vec<u8>);

impl Arena {
    /// Appends what `write` writes; returns where it sits.
    fn push(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Range<usize> {
        let start = self.0.len();
        write(&mut self.0);
        start..self.0.len()
    }

    fn get(&self, at: Option<&Range<usize>>) -> Option<&[u8]> {
        at.and_then(|r| self.0.get(r.clone()))
    }
}

/// The published resources disagree with what the encoder remembers of them: the
/// encoder must be rebuilt from everything.
#[derive(Debug)]
pub struct Stale;

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
    pub by_type: BTreeMap<XdsType, BTreeMap<String, Option<Encoded>>>,
}

impl Changes {
    fn put(&mut self, t: XdsType, name: String, resource: Option<Encoded>) {
        self.by_type.entry(t).or_default().insert(name, resource);
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
    by_service: BTreeMap<(String, String), SmallSet<(String, String)>>,
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
    /// every cluster and secret its vhosts use. `published` is the snapshot holding what
    /// this encoder produced last (the bytes of the vhosts not touched are copied from
    /// it). Returns the resources that changed; `Stale` when `published` does not hold
    /// what was produced (then this encoder is of no further use).
    pub fn replace(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        touched: &BTreeSet<String>,
        published: Option<&Snapshot>,
    ) -> Result<Changes, Stale> {
        let mut changes = Changes::default();
        let mut fresh: BTreeMap<&String, (Parts, Fresh)> = BTreeMap::new();
        let mut arena = Arena::default();
        for (fqdn, vhost) in &ir.virtual_hosts {
            let (parts, bytes) = fresh.entry(fqdn).or_default();
            let plain = arena.push(|b| b.extend_from_slice(&virtual_host(vhost, settings.vhds)));
            parts.plain = arena.get(Some(&plain)).map(Share::of);
            bytes.plain = Some(plain);
            parts
                .clusters
                .extend(vhost.cluster_names().map(str::to_string));
        }
        for (fqdn, vhost) in &ir.secure_virtual_hosts {
            let (parts, bytes) = fresh.entry(fqdn).or_default();
            let chain = arena.push(|b| tls::encode_vhost_chain(vhost, settings, b));
            let routes = virtual_host(&vhost.http, false);
            parts.chain = arena.get(Some(&chain)).map(Share::of);
            parts.secure_routes = Some(Share::of(&routes));
            parts.fallback_routes = vhost.fallback.then(|| routes.as_slice().into());
            bytes.chain = Some(chain);
            parts.rds = vhost.tcp_proxy.is_none();
            bytes.rds = parts.rds.then(|| {
                let name = tls::route_config_name(fqdn);
                Encoded::from(route_configuration(
                    &name,
                    std::iter::once(&routes[..]),
                    true,
                ))
            });
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
        for (parts, _) in fresh.values_mut() {
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
            self.fallbacks -= usize::from(old.fallback());
            for name in &old.clusters {
                self.release_cluster(name, &mut changes);
            }
            if let Some(sds) = &old.secret {
                self.release_secret(sds, &mut changes);
            }
            olds.insert(fqdn, old);
        }
        let mut assembling: BTreeMap<&String, Fresh> = BTreeMap::new();
        for (fqdn, (parts, mut bytes)) in fresh {
            let no_old = Parts::default();
            let old = olds.get(fqdn).unwrap_or(&no_old);
            plain_changed |= old.plain != parts.plain;
            if settings.vhds && old.plain != parts.plain {
                let vhost = arena.get(bytes.plain.as_ref()).map(Encoded::from);
                changes.put(XdsType::VirtualHost, vhds_name(fqdn), vhost);
            }
            chains_changed |= old.chain != parts.chain;
            fallback_changed |= (old.fallback() || parts.fallback())
                && (old.fallback() != parts.fallback() || old.secure_routes != parts.secure_routes);
            self.plains += usize::from(parts.plain.is_some());
            self.chains += usize::from(parts.chain.is_some());
            self.fallbacks += usize::from(parts.fallback());
            let name = tls::route_config_name(fqdn);
            match (bytes.rds.take(), parts.rds) {
                (Some(any), true) if !old.rds || old.secure_routes != parts.secure_routes => {
                    changes.put(XdsType::Route, name, Some(any));
                }
                (_, false) if old.rds => changes.put(XdsType::Route, name, None),
                _ => {}
            }
            self.vhosts.insert(fqdn.clone(), parts);
            assembling.insert(fqdn, bytes);
        }
        for (fqdn, old) in &olds {
            if self.vhosts.contains_key(*fqdn) {
                continue;
            }
            plain_changed |= old.plain.is_some();
            if settings.vhds && old.plain.is_some() {
                changes.put(XdsType::VirtualHost, vhds_name(fqdn), None);
            }
            chains_changed |= old.chain.is_some();
            fallback_changed |= old.fallback();
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
                .filter_map(|p| p.fallback_routes.as_deref());
            let any = self
                .fallback_counted
                .then(|| Encoded::from(route_configuration(tls::FALLBACK_ROUTES, routes, false)));
            changes.put(XdsType::Route, tls::FALLBACK_ROUTES.to_string(), any);
        }
        let table = Table {
            vhosts: &self.vhosts,
            olds: &olds,
            fresh: &assembling,
            arena: &arena,
            published,
        };
        if plain_changed {
            // RDS is always published, even empty, so a listener never waits on it.
            let any = if settings.vhds {
                vhds_route_configuration()
            } else {
                let shell = route_configuration(HTTP_LISTENER, std::iter::empty(), false);
                table.splice(
                    &shell,
                    (XdsType::Route, HTTP_LISTENER),
                    ROUTE_CONFIGURATION_VIRTUAL_HOSTS,
                    (|p| p.plain, |f| f.plain.as_ref()),
                    None,
                )?
            };
            changes.put(XdsType::Route, HTTP_LISTENER.to_string(), Some(any));
            let listener = (self.plains > 0).then(|| encoded(&http_listener(settings)));
            changes.put(XdsType::Listener, HTTP_LISTENER.to_string(), listener);
        }
        if chains_changed {
            let listener = if self.chains > 0 {
                let fallback = match (self.fallback_counted, &self.fallback_secret) {
                    (true, Some(sds)) => Some(tls::fallback_chain_bytes(sds, settings)),
                    _ => None,
                };
                Some(table.splice(
                    &tls::https_listener_shell(settings),
                    (XdsType::Listener, tls::HTTPS_LISTENER),
                    tls::LISTENER_FILTER_CHAINS,
                    (|p| p.chain, |f| f.chain.as_ref()),
                    fallback.as_deref(),
                )?)
            } else {
                None
            };
            changes.put(XdsType::Listener, tls::HTTPS_LISTENER.to_string(), listener);
        }
        if !self.started {
            let stats = encoded(&stats_listener(settings));
            changes.put(XdsType::Listener, STATS_LISTENER.to_string(), Some(stats));
            self.started = true;
        }
        Ok(changes)
    }

    fn use_cluster(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        name: &str,
        changes: &mut Changes,
    ) {
        let c = ir.clusters.get(name);
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
        self.clusters.insert(
            name.to_string(),
            Used {
                vhosts: 1,
                eds_name: c.eds_name.clone(),
                service: (c.namespace.clone(), c.service.clone()),
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
        self.release_endpoints(used, changes);
    }

    /// One more cluster on `c`'s endpoint set: its first puts it.
    fn use_endpoints(
        &mut self,
        c: &isobar_sdk::ir::Cluster,
        objects: &Objects,
        changes: &mut Changes,
    ) {
        let users = self.endpoints.entry(c.eds_name.clone()).or_default();
        *users += 1;
        if *users == 1 {
            let cla = load_assignment(&c.eds_name, objects, &c.namespace, &c.service, &c.port_name);
            changes.put(XdsType::Endpoint, c.eds_name.clone(), Some(encoded(&cla)));
            self.by_service
                .entry((c.namespace.clone(), c.service.clone()))
                .or_default()
                .insert((c.eds_name.clone(), c.port_name.clone()));
        }
    }

    /// One cluster fewer on `used`'s endpoint set: its last removes it.
    fn release_endpoints(&mut self, used: Used, changes: &mut Changes) {
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
            changes.put(
                XdsType::Secret,
                sds.to_string(),
                Some(tls::secret(sds, secret)),
            );
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
    ) -> BTreeMap<String, Encoded> {
        let mut out = BTreeMap::new();
        for service in services {
            for (eds_name, port_name) in self.by_service.get(service).into_iter().flatten() {
                let (namespace, name) = service;
                let cla = load_assignment(eds_name, objects, namespace, name, port_name);
                out.insert(eds_name.clone(), encoded(&cla));
            }
        }
        out
    }
}

/// Which field of a vhost a table holds: its share as published, its fresh bytes.
type FieldOf = (
    fn(&Parts) -> Option<Share>,
    fn(&Fresh) -> Option<&Range<usize>>,
);

/// A table being assembled: a shell, then one field per vhost in name order.
struct Table<'a> {
    /// The vhosts now.
    vhosts: &'a BTreeMap<String, Parts>,
    /// The vhosts replaced or removed, as they were.
    olds: &'a BTreeMap<&'a String, Parts>,
    /// The bytes of the vhosts replaced or added.
    fresh: &'a BTreeMap<&'a String, Fresh>,
    /// Where the fresh bytes are.
    arena: &'a Arena,
    published: Option<&'a Snapshot>,
}

impl Table<'_> {
    /// `shell`, then each vhost's `tag` field: a fresh vhost's new bytes, every other
    /// one's copied from the table as published (`resource`), where the same vhosts
    /// sat in the same order with the lengths their shares recorded, between the
    /// removed and replaced ones; then `tail` as one more `tag` field, if any (what the
    /// published table has after its vhosts is not copied). The bytes are written
    /// straight into the block the snapshot keeps, made at their exact size: no copy of
    /// a 12 MB listener, and no spare capacity kept with it.
    fn splice(
        &self,
        shell: &[u8],
        resource: (XdsType, &str),
        tag: u32,
        (share, fresh): FieldOf,
        tail: Option<&[u8]>,
    ) -> Result<Encoded, Stale> {
        let len = shell.len()
            + tail.map_or(0, |t| field_len(tag, t.len()))
            + self
                .vhosts
                .iter()
                .map(|(fqdn, parts)| match self.fresh.get(fqdn) {
                    Some(new) => self
                        .arena
                        .get(fresh(new))
                        .map_or(0, |b| field_len(tag, b.len())),
                    None => share(parts).map_or(0, |s| s.field_len(tag)),
                })
                .sum::<usize>();
        let mut table: Encoded = std::iter::repeat_n(0, len).collect();
        // A block just made has no other owner.
        let mut bytes: &mut [u8] = Encoded::get_mut(&mut table).ok_or(Stale)?;
        let (t, name) = resource;
        let old = self
            .published
            .and_then(|s| s.get(t).resources.get(name))
            .map_or(&[][..], |value| &value[..]);
        let shell_len = shell.len();
        put(&mut bytes, shell)?;
        let mut cursor = shell_len;
        let mut shell_checked = false;
        // What each copied field must start with: its tag and remembered length.
        let mut header = Vec::with_capacity(16);
        let mut gone = self
            .olds
            .iter()
            .filter(|(fqdn, _)| !self.vhosts.contains_key(**fqdn))
            .peekable();
        let was = |parts: Option<&Parts>| parts.and_then(share).map_or(0, |s| s.field_len(tag));
        for (fqdn, parts) in self.vhosts {
            while let Some((_, old)) = gone.next_if(|(g, _)| **g < fqdn) {
                cursor += was(Some(old));
            }
            if let Some(new) = self.fresh.get(fqdn) {
                if let Some(b) = self.arena.get(fresh(new)) {
                    put_field(&mut bytes, tag, b)?;
                }
                cursor += was(self.olds.get(fqdn));
                continue;
            }
            let Some(kept) = share(parts) else {
                continue;
            };
            if !shell_checked {
                // Settings shape the shell; a different one means a different encoder.
                if old.get(..shell_len) != Some(shell) {
                    return Err(Stale);
                }
                shell_checked = true;
            }
            let end = cursor + kept.field_len(tag);
            let field = old.get(cursor..end).ok_or(Stale)?;
            header.clear();
            prost::encoding::encode_key(
                tag,
                prost::encoding::WireType::LengthDelimited,
                &mut header,
            );
            prost::encoding::encode_varint(kept.len as u64, &mut header);
            if !field.starts_with(&header) {
                return Err(Stale);
            }
            put(&mut bytes, field)?;
            cursor = end;
        }
        if let Some(tail) = tail {
            put_field(&mut bytes, tag, tail)?;
        }
        // Counted exactly, or rebuilt whole: neither written past nor left part-zero.
        if !bytes.is_empty() {
            return Err(Stale);
        }
        Ok(table)
    }
}

/// Writes `value` into `out` and moves past it, when it fits (see [`Table::splice`]).
fn put(out: &mut &mut [u8], value: &[u8]) -> Result<(), Stale> {
    if value.len() > out.len() {
        return Err(Stale);
    }
    out.put_slice(value);
    Ok(())
}

/// Writes `value` into `out` as a `tag` field, when it fits.
fn put_field(out: &mut &mut [u8], tag: u32, value: &[u8]) -> Result<(), Stale> {
    if field_len(tag, value.len()) > out.len() {
        return Err(Stale);
    }
    append_field(out, tag, value);
    Ok(())
}
