//! Translation that remembers: each vhost's share of the xDS, on each listener it is on,
//! is encoded once and kept, so a change re-encodes only the vhosts it touches and names
//! only the resources whose bytes may have changed. A full build is the same code run
//! from empty over every vhost, so both paths give byte-identical resources.
//!
//! Per listener: an HTTP listener's table is its RouteConfiguration (one `VirtualHost`
//! per vhost; with VHDS each vhost is a resource of its own); an HTTPS listener's table
//! is the listener itself (one filter chain per vhost, then the fallback chain), and
//! each routed vhost has a RouteConfiguration of its own. Clusters, endpoints and
//! secrets are counted by the vhosts using them and sent while any does.

mod table;
mod usage;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use isobar_sdk::ir::{self, Protocol};
use isobar_sdk::{Ir, Objects, SmallSet};

use super::listener::{
    LISTENER_FILTER_CHAINS, encode_vhost_chain, fallback_chain_bytes, fallback_routes,
    http_listener, https_listener_shell, stats_listener, tcp_listener, udp_listener,
};
use super::resource::{Changes, Encoded, Resources, XdsType, encoded};
use super::route::{
    ROUTE_CONFIGURATION_VIRTUAL_HOSTS, route_configuration, secure_route_configuration, vhds_name,
    vhds_route_configuration, vhds_virtual_host, virtual_host,
};
use super::secret::secret;
use super::settings::EnvoySettings;
use super::snapshot::Snapshot;
use table::{Arena, Fresh, FreshEntry, Share, Table};

/// One vhost's share on one listener. Its bytes are not kept: they are in the published
/// resources, where a later change copies them from (each vhost's bytes are held once,
/// not twice).
struct Placed {
    /// The listener, by its index in [`Encoder::listeners`].
    listener: usize,
    /// HTTP: its `VirtualHost` in the listener's RouteConfiguration. HTTPS: its filter
    /// chain.
    share: Share,
    /// HTTPS: its `VirtualHost` (its own RouteConfiguration, and the fallback one).
    routes: Option<Share>,
    /// HTTPS: the `VirtualHost`'s bytes, kept while it serves the fallback certificate
    /// (the fallback RouteConfiguration is assembled from them): `Some` for exactly the
    /// vhosts that do.
    fallback_routes: Option<Box<[u8]>>,
    /// HTTPS: whether it has its own RouteConfiguration (not TCP proxying).
    rds: bool,
    /// HTTPS: the certificate it serves.
    secret: Option<String>,
}

impl Placed {
    /// Whether it serves the fallback certificate.
    fn fallback(&self) -> bool {
        self.fallback_routes.is_some()
    }
}

/// One vhost's shares, on every listener it is on (in listener order), and the clusters
/// its routes use.
#[derive(Default)]
struct Parts {
    on: Box<[Placed]>,
    clusters: SmallSet<String>,
    /// Its shard on a listener whose routes are split ([`EVERY_SHARD`]: a wildcard or
    /// default vhost, in all of them).
    shard: u8,
}

/// [`Parts::shard`] of a vhost in every shard.
const EVERY_SHARD: u8 = u8::MAX;

impl Parts {
    fn on(&self, listener: usize) -> Option<&Placed> {
        self.on.iter().find(|p| p.listener == listener)
    }

    fn in_shard(&self, k: usize) -> bool {
        self.shard == EVERY_SHARD || usize::from(self.shard) == k
    }
}

/// Whether an HTTP listener with `vhosts` vhosts has its routes split into shards
/// (`were`: it had), by `xds-server.route-shards-from`: from that many, and down to half
/// as many once split.
fn splits(settings: &EnvoySettings, vhosts: usize, were: bool) -> bool {
    let from = settings.route_shards_from;
    from > 0 && (vhosts >= from || (were && vhosts * 2 >= from))
}

/// The shards a vhost's change touches, as a mask.
fn shard_mask(shard: u8) -> u64 {
    if shard == EVERY_SHARD {
        u64::MAX
    } else {
        1 << shard
    }
}

/// The published resources disagree with what the encoder remembers of them: the
/// encoder must be rebuilt from everything.
#[derive(Debug)]
pub struct Stale;

/// A cluster in use, by how many vhosts.
struct Used {
    vhosts: usize,
    /// Its own client certificate (SDS name), counted in use while it is.
    secret: Option<String>,
    eds_name: String,
    service: (String, String),
    port_name: String,
}

/// A listener as the encoder knows it: its shape (no vhosts) and what is counted on it.
struct ListenerState {
    shape: ir::Listener,
    /// Vhosts placed on it.
    vhosts: usize,
    /// Of those, how many serve the fallback certificate.
    fallbacks: usize,
    /// The fallback certificate, once a build named it, and whether it is counted in use.
    fallback_secret: Option<String>,
    fallback_counted: bool,
    /// TCP and UDP: the proxy last sent and its clusters, counted in use like a vhost's.
    /// A change of the route that made it is spliced in (the listener sent again); a
    /// change of which route holds the listener, or of a cluster's definition, is a
    /// change of shape.
    proxy: Option<ir::TcpProxy>,
    proxy_clusters: BTreeMap<String, ir::Cluster>,
    /// HTTP: its routes are split into shards (see `xds::shard`), decided by a full
    /// build from how many vhosts it has.
    sharded: bool,
}

impl ListenerState {
    /// A TCP or UDP listener with a proxy to some cluster, encoded; `None` for any other
    /// (such a listener is not served).
    fn proxy_listener(&self, settings: &EnvoySettings) -> Option<Encoded> {
        match (self.shape.protocol, &self.proxy) {
            (Protocol::Tcp, Some(proxy)) if !proxy.clusters.is_empty() => {
                Some(encoded(&tcp_listener(&self.shape, proxy, settings)))
            }
            (Protocol::Udp, Some(proxy)) if !proxy.clusters.is_empty() => {
                Some(encoded(&udp_listener(&self.shape, proxy)))
            }
            _ => None,
        }
    }
}

/// What a change does to one listener's tables.
#[derive(Default, Clone, Copy)]
struct Touched {
    /// Its table (RouteConfiguration or filter chains) must be assembled again.
    table: bool,
    /// A split HTTP listener: the shards to assemble again, as a mask.
    shards: u64,
    /// Its fallback RouteConfiguration must be assembled again.
    fallback: bool,
}

/// What translation keeps between builds.
#[derive(Default)]
pub struct Encoder {
    /// The SDS name of Envoy's upstream client certificate, when one is served.
    client_certificate: Option<String>,
    /// Every listener of the first build, in name order.
    listeners: Vec<ListenerState>,
    /// The extension clusters of the first build, each counted in use once for good.
    extension_clusters: BTreeMap<String, ir::Cluster>,
    vhosts: BTreeMap<String, Parts>,
    clusters: HashMap<String, Used>,
    /// EDS names by how many clusters use them.
    endpoints: HashMap<String, usize>,
    /// Endpoint sets (EDS name, port name) by Service: what an endpoint change recomputes.
    by_service: BTreeMap<(String, String), SmallSet<(String, String)>>,
    /// Clusters of several Services (extension clusters) by EDS name: what an endpoint
    /// change to one of their Services recomputes.
    multi_service: BTreeMap<String, ir::Cluster>,
    /// SDS names by how many vhosts (and fallback chains) use them.
    secrets: HashMap<String, usize>,
    started: bool,
    /// The HTTP listeners the last full build split into shards (they stay split down to
    /// half the threshold, so a listener near it does not flip back and forth).
    were_sharded: BTreeSet<String>,
}

pub fn translate(ir: &Ir, objects: &Objects, settings: &EnvoySettings) -> Resources {
    translate_keeping(ir, objects, settings).0
}

/// [`translate`], and what it keeps to later re-encode only what a change touches.
pub fn translate_keeping(
    ir: &Ir,
    objects: &Objects,
    settings: &EnvoySettings,
) -> (Resources, Encoder) {
    translate_after(ir, objects, settings, None)
}

/// [`translate_keeping`] after a build that split the HTTP listeners `sharded` into
/// shards (they stay split down to half the threshold).
pub fn translate_after(
    ir: &Ir,
    objects: &Objects,
    settings: &EnvoySettings,
    sharded: Option<&BTreeSet<String>>,
) -> (Resources, Encoder) {
    let mut out = Resources::default();
    // Envoy's client certificate for upstream TLS, served over SDS when it is valid.
    let client_certificate = settings.client_certificate.as_ref().and_then(|(ns, name)| {
        let check = objects.secret_check(ns, name)?;
        match &check.certificate {
            Ok(certificate) => {
                let sds = isobar_sdk::secret::sds_name(ns, name);
                let served = ir::ServedSecret {
                    namespace: ns.clone(),
                    name: name.clone(),
                    certificate: certificate.clone(),
                };
                out.secrets.insert(sds.clone(), secret(&sds, &served));
                Some(sds)
            }
            Err(e) => {
                tracing::error!(secret = %format!("{ns}/{name}"), error = %e, "tls.envoy-client-certificate is not usable; upstream TLS goes without a client certificate");
                None
            }
        }
    });
    let uses_tls = ir
        .clusters
        .values()
        .chain(ir.extension_clusters.values())
        .any(|c| c.options.protocol.is_some_and(ir::UpstreamProtocol::is_tls));
    if !uses_tls && let Some(name) = &client_certificate {
        out.secrets.remove(name);
    }
    if let Some(files) = &settings.metrics_tls {
        for (name, bytes) in super::secret::metrics_secrets(files) {
            out.secrets.insert(name, bytes);
        }
    }
    out.runtimes.insert(
        super::runtime::DYNAMIC_LAYER.to_string(),
        super::runtime::dynamic_layer(ir, &settings.runtime),
    );
    let mut encoder = Encoder::new(client_certificate);
    if let Some(sharded) = sharded {
        encoder.were_sharded.clone_from(sharded);
    }
    let every: BTreeSet<String> = ir
        .listeners
        .values()
        .flat_map(|l| l.fqdns())
        .cloned()
        .collect();
    // Every vhost is fresh: nothing is copied from a published snapshot, so nothing
    // can be stale.
    let changes = encoder
        .replace(ir, objects, settings, &every, None)
        .unwrap_or_default();
    for (t, resources) in changes.by_type {
        let map = out.of_mut(t);
        map.extend(resources.into_iter().filter_map(|(k, v)| Some((k, v?))));
    }
    (out, encoder)
}

impl Encoder {
    pub fn new(client_certificate: Option<String>) -> Encoder {
        Encoder {
            client_certificate,
            ..Encoder::default()
        }
    }

    /// The HTTP listeners whose routes are split into shards.
    pub fn sharded_listeners(&self) -> BTreeSet<String> {
        self.listeners
            .iter()
            .filter(|l| l.sharded)
            .map(|l| l.shape.name.clone())
            .collect()
    }

    /// Whether replacing the vhosts `touched` with those of `ir` leaves every HTTP
    /// listener split into shards or not as it is: a change that would split or join a
    /// listener's routes is a full build's (the listener and every shard change).
    pub fn keeps_shards(
        &self,
        ir: &Ir,
        touched: &BTreeSet<String>,
        settings: &EnvoySettings,
    ) -> bool {
        self.listeners
            .iter()
            .zip(ir.listeners.values())
            .enumerate()
            .all(|(li, (state, l))| {
                if state.shape.protocol != Protocol::Http {
                    return true;
                }
                let gone = touched
                    .iter()
                    .filter(|f| self.vhosts.get(*f).is_some_and(|p| p.on(li).is_some()))
                    .count();
                let now = (state.vhosts + l.virtual_hosts.len()).saturating_sub(gone);
                splits(settings, now, state.sharded) == state.sharded
            })
    }

    /// Whether builds may be spliced in: the upstream client certificate is served only
    /// while some cluster uses TLS, a whole-IR question.
    pub fn splices(&self) -> bool {
        self.client_certificate.is_none()
    }

    /// Whether `ir` has the listeners this encoder has, in the same shape (a change
    /// spliced in cannot add, remove or reshape a listener).
    /// A TCP or UDP listener's proxy may change when the route that made it still makes
    /// it (its backends changed): the listener is then sent again.
    pub fn same_listeners(&self, ir: &Ir) -> bool {
        self.listeners.len() == ir.listeners.len()
            && self
                .listeners
                .iter()
                .zip(ir.listeners.values())
                .all(|(known, l)| {
                    let same_proxy =
                        known.proxy == l.tcp_proxy && known.proxy_clusters == proxy_clusters(ir, l);
                    let same_source = match (&known.proxy, &l.tcp_proxy) {
                        (Some(was), Some(now)) => was.source == now.source,
                        _ => false,
                    };
                    known.shape.same_shape(l) && (same_proxy || same_source)
                })
    }

    /// Serves the extension clusters `ir` has: a new one is put, one gone removed, one
    /// that changed replaced (its endpoints put again if they moved).
    fn replace_extension_clusters(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) {
        if self.extension_clusters == ir.extension_clusters {
            return;
        }
        let known = std::mem::take(&mut self.extension_clusters);
        for (name, was) in &known {
            if ir.extension_clusters.get(name) != Some(was) {
                self.release_cluster(name, changes);
            }
        }
        for (name, now) in &ir.extension_clusters {
            if known.get(name) != Some(now) {
                self.use_cluster(ir, objects, settings, name, changes);
            }
        }
        self.extension_clusters.clone_from(&ir.extension_clusters);
    }

    /// Sends again each TCP or UDP listener whose proxy changed (see
    /// [`Encoder::same_listeners`]), its new clusters counted in use before its old
    /// ones are released.
    fn replace_proxies(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) {
        for (li, l) in ir.listeners.values().enumerate() {
            let now = proxy_clusters(ir, l);
            let state = &self.listeners[li];
            if state.proxy == l.tcp_proxy && state.proxy_clusters == now {
                continue;
            }
            for name in now.keys() {
                self.use_cluster(ir, objects, settings, name, changes);
            }
            let old = std::mem::replace(&mut self.listeners[li].proxy_clusters, now);
            for name in old.keys() {
                self.release_cluster(name, changes);
            }
            let state = &mut self.listeners[li];
            state.proxy.clone_from(&l.tcp_proxy);
            changes.put(
                XdsType::Listener,
                state.shape.name.clone(),
                state.proxy_listener(settings),
            );
        }
    }

    /// Gives the TCP and UDP listeners of `ir` that a scoped build left without a proxy
    /// the proxy (and clusters) last sent, unless the object that made it is among
    /// `rebuilt` (then it is gone or changed, and the listener changed shape).
    pub fn carry_tcp_proxies(&self, ir: &mut Ir, rebuilt: &BTreeSet<isobar_sdk::ObjectKey>) {
        for known in &self.listeners {
            let Some(proxy) = &known.proxy else {
                continue;
            };
            if rebuilt.contains(&proxy.source) {
                continue;
            }
            let Some(l) = ir.listeners.get_mut(&known.shape.name) else {
                continue;
            };
            if l.tcp_proxy.is_none() {
                l.tcp_proxy = Some(proxy.clone());
                for (name, c) in &known.proxy_clusters {
                    ir.clusters.entry(name.clone()).or_insert_with(|| c.clone());
                }
            }
        }
    }

    /// Replaces the vhosts named in `touched` (the ones they had, if any) with the ones
    /// `ir` has; every vhost of `ir` must be named in `touched`. `ir` must also hold
    /// every cluster and secret its vhosts use, and the listeners this encoder was made
    /// with (see [`Encoder::same_listeners`]). `published` is the snapshot holding what
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
        if !self.started {
            self.listeners = ir
                .listeners
                .values()
                .map(|l| ListenerState {
                    shape: l.empty(),
                    vhosts: 0,
                    fallbacks: 0,
                    fallback_secret: None,
                    fallback_counted: false,
                    proxy: l.tcp_proxy.clone(),
                    proxy_clusters: proxy_clusters(ir, l),
                    sharded: l.protocol == Protocol::Http
                        && splits(
                            settings,
                            l.virtual_hosts.len(),
                            self.were_sharded.contains(&l.name),
                        ),
                })
                .collect();
        } else if !self.same_listeners(ir) {
            return Err(Stale);
        }
        let mut changes = Changes::default();
        if self.started {
            self.replace_proxies(ir, objects, settings, &mut changes);
            self.replace_extension_clusters(ir, objects, settings, &mut changes);
        }
        if !self.started {
            self.extension_clusters.clone_from(&ir.extension_clusters);
            for name in ir.extension_clusters.keys() {
                self.use_cluster(ir, objects, settings, name, &mut changes);
            }
            let pinned: Vec<String> = self
                .listeners
                .iter()
                .flat_map(|l| l.proxy_clusters.keys().cloned())
                .collect();
            for name in &pinned {
                self.use_cluster(ir, objects, settings, name, &mut changes);
            }
        }
        let mut arena = Arena::default();
        let mut entries = Vec::new();
        let mut fresh = self.encode(ir, settings, &mut arena, &mut entries);
        // What stays in use is counted again before the old shares are released, so it
        // is neither removed nor sent again.
        for (_, parts, _) in &mut fresh {
            parts.clusters.retain(|c| ir.clusters.contains_key(c));
            for name in &parts.clusters {
                self.use_cluster(ir, objects, settings, name, &mut changes);
            }
            for sds in parts.on.iter().filter_map(|p| p.secret.as_deref()) {
                self.use_secret(ir, sds, &mut changes);
            }
        }
        let mut touches = vec![Touched::default(); self.listeners.len()];
        if !self.started {
            // RDS is always published, even empty, so a listener never waits on it.
            for (touch, state) in touches.iter_mut().zip(&self.listeners) {
                touch.table = state.shape.protocol == Protocol::Http;
                if state.sharded {
                    touch.shards = u64::MAX;
                }
            }
        }
        // The old shares: released now, compared with the new ones below so that only
        // what differs is assembled and sent again.
        let mut olds: BTreeMap<&String, Parts> = BTreeMap::new();
        for fqdn in touched {
            let Some(old) = self.vhosts.remove(fqdn) else {
                continue;
            };
            for placed in &old.on {
                let state = &mut self.listeners[placed.listener];
                state.vhosts -= 1;
                state.fallbacks -= usize::from(placed.fallback());
            }
            for name in &old.clusters {
                self.release_cluster(name, &mut changes);
            }
            for sds in old.on.iter().filter_map(|p| p.secret.clone()) {
                self.release_secret(&sds, &mut changes);
            }
            olds.insert(fqdn, old);
        }
        let mut assembling: Vec<(&String, Fresh)> = Vec::with_capacity(fresh.len());
        for (fqdn, parts, bytes) in fresh {
            let old = olds.get(fqdn);
            for (li, touch) in touches.iter_mut().enumerate() {
                let entry = entries[bytes.0.clone()]
                    .iter_mut()
                    .find(|e| e.listener == li);
                let (range, rds) = match entry {
                    Some(e) => (Some(e.bytes.clone()), e.rds.take()),
                    None => (None, None),
                };
                let share = Compared {
                    was: old.and_then(|o| o.on(li)),
                    now: parts.on(li),
                    bytes: arena.get(range.as_ref()),
                    rds,
                    shard: parts.shard,
                };
                self.compare(fqdn, li, share, settings.vhds, touch, &mut changes);
            }
            for placed in &parts.on {
                let state = &mut self.listeners[placed.listener];
                state.vhosts += 1;
                state.fallbacks += usize::from(placed.fallback());
            }
            self.vhosts.insert(fqdn.clone(), parts);
            assembling.push((fqdn, bytes));
        }
        // In FQDN order already: built in bulk.
        let assembling: BTreeMap<&String, Fresh> = assembling.into_iter().collect();
        for (fqdn, old) in &olds {
            if self.vhosts.contains_key(*fqdn) {
                continue;
            }
            for placed in &old.on {
                let li = placed.listener;
                let share = Compared {
                    was: Some(placed),
                    now: None,
                    bytes: None,
                    rds: None,
                    shard: old.shard,
                };
                self.compare(
                    fqdn,
                    li,
                    share,
                    settings.vhds,
                    &mut touches[li],
                    &mut changes,
                );
            }
        }
        // A change that would split a listener's routes, or join them, is a full build's
        // (the listener and every shard change).
        if self.started
            && self.listeners.iter().any(|l| {
                l.shape.protocol == Protocol::Http
                    && l.sharded != splits(settings, l.vhosts, l.sharded)
            })
        {
            return Err(Stale);
        }
        for (li, touch) in touches.iter_mut().enumerate() {
            self.count_fallback(ir, li, touch, &mut changes);
        }
        let table = Table {
            vhosts: &self.vhosts,
            olds: &olds,
            fresh: &assembling,
            entries: &entries,
            arena: &arena,
            published,
        };
        for (li, touch) in touches.iter().enumerate() {
            self.assemble(li, *touch, &table, settings, &mut changes)?;
        }
        if !self.started {
            for state in &self.listeners {
                if state.shape.protocol == Protocol::Stats {
                    let stats = encoded(&stats_listener(&state.shape, settings));
                    changes.put(XdsType::Listener, state.shape.name.clone(), Some(stats));
                } else if let Some(proxied) = state.proxy_listener(settings) {
                    changes.put(XdsType::Listener, state.shape.name.clone(), Some(proxied));
                }
            }
            self.started = true;
        }
        Ok(changes)
    }

    /// Every vhost of `ir`, encoded, in FQDN order: its shares on each listener (and
    /// the clusters it uses), and where its fresh bytes are among `entries` (in `arena`).
    /// Each listener's vhosts are in FQDN order already: merged, every FQDN comes once
    /// with all of its vhosts, and nothing is sorted or looked up.
    fn encode<'a>(
        &self,
        ir: &'a Ir,
        settings: &EnvoySettings,
        arena: &mut Arena,
        entries: &mut Vec<FreshEntry>,
    ) -> Vec<(&'a String, Parts, Fresh)> {
        type Heads<'a> = Vec<(
            usize,
            std::iter::Peekable<Box<dyn Iterator<Item = (&'a String, Vhost<'a>)> + 'a>>,
        )>;
        let mut heads: Heads<'a> = Vec::new();
        for (li, listener) in ir.listeners.values().enumerate() {
            let plain = listener
                .virtual_hosts
                .iter()
                .map(|(f, v)| (f, Vhost::Plain(v)));
            let secure = listener
                .secure_virtual_hosts
                .iter()
                .map(|(f, v)| (f, Vhost::Secure(v)));
            let plain: Box<dyn Iterator<Item = (&'a String, Vhost<'a>)> + 'a> = Box::new(plain);
            let secure: Box<dyn Iterator<Item = (&'a String, Vhost<'a>)> + 'a> = Box::new(secure);
            heads.push((li, plain.peekable()));
            heads.push((li, secure.peekable()));
        }
        let listeners: Vec<&ir::Listener> = ir.listeners.values().collect();
        let sharding = self.listeners.iter().any(|l| l.sharded);
        let mut out = Vec::new();
        loop {
            let next = heads
                .iter_mut()
                .filter_map(|(_, it)| it.peek().map(|(fqdn, _)| *fqdn))
                .min();
            let Some(fqdn) = next else {
                break;
            };
            let count = heads
                .iter_mut()
                .filter_map(|(_, it)| it.peek())
                .filter(|(f, _)| *f == fqdn)
                .count();
            let mut on = Vec::with_capacity(count);
            let mut clusters = SmallSet::default();
            let start = entries.len();
            for (li, it) in &mut heads {
                let Some((_, vhost)) = it.next_if(|(f, _)| *f == fqdn) else {
                    continue;
                };
                let listener = listeners[*li];
                let (placed, entry) = match vhost {
                    Vhost::Plain(vhost) => {
                        clusters.extend(vhost.cluster_names().map(str::to_string));
                        let range = arena.push(|b| b.extend_from_slice(&virtual_host(vhost, None)));
                        let placed = Placed {
                            listener: *li,
                            share: arena.get(Some(&range)).map_or(Share::of(&[]), Share::of),
                            routes: None,
                            fallback_routes: None,
                            rds: false,
                            secret: None,
                        };
                        (
                            placed,
                            FreshEntry {
                                listener: *li,
                                bytes: range,
                                rds: None,
                            },
                        )
                    }
                    Vhost::Secure(vhost) => {
                        clusters.extend(vhost.cluster_names().map(str::to_string));
                        self.encode_secure(ir, listener, *li, fqdn, vhost, settings, arena)
                    }
                };
                on.push(placed);
                entries.push(entry);
            }
            let shard = if !sharding {
                0
            } else if crate::xds::shard::in_every_shard(fqdn) {
                EVERY_SHARD
            } else {
                u8::try_from(crate::xds::shard::shard_of(fqdn)).unwrap_or(EVERY_SHARD)
            };
            let parts = Parts {
                on: on.into_boxed_slice(),
                clusters,
                shard,
            };
            out.push((fqdn, parts, Fresh(start..entries.len())));
        }
        out
    }

    /// A secure vhost's share on listener `on` (index `li`): its filter chain in
    /// `arena`, and its own RouteConfiguration, made at once.
    #[allow(clippy::too_many_arguments)]
    fn encode_secure(
        &self,
        ir: &Ir,
        on: &ir::Listener,
        li: usize,
        fqdn: &str,
        vhost: &ir::SecureVirtualHost,
        settings: &EnvoySettings,
        arena: &mut Arena,
    ) -> (Placed, FreshEntry) {
        let chain = arena.push(|b| encode_vhost_chain(on, vhost, settings, b));
        let routes = virtual_host(&vhost.http, None);
        let rds = vhost.tcp_proxy.is_none();
        // Its own RouteConfiguration: its vhost, its other hosts' and the 421 answers.
        let own = rds.then(|| {
            let name = on.route_config_name(fqdn);
            secure_route_configuration(&name, vhost, &routes)
        });
        let placed = Placed {
            listener: li,
            share: arena.get(Some(&chain)).map_or(Share::of(&[]), Share::of),
            routes: Some(Share::of(own.as_deref().unwrap_or(&routes))),
            fallback_routes: vhost.fallback.then(|| routes.as_slice().into()),
            rds,
            secret: vhost
                .tls
                .as_ref()
                .map(|t| t.secret.clone())
                .filter(|s| ir.secrets.contains_key(s)),
        };
        let own = own.map(Encoded::from);
        let entry = FreshEntry {
            listener: li,
            bytes: chain,
            rds: own,
        };
        (placed, entry)
    }

    /// Compares a vhost's share on listener `li` before and after a change: records
    /// what of the listener must be assembled again, and puts or removes the vhost's own
    /// resources (its VHDS vhost, its RouteConfiguration).
    fn compare(
        &self,
        fqdn: &str,
        li: usize,
        share: Compared<'_>,
        vhds: bool,
        touch: &mut Touched,
        changes: &mut Changes,
    ) {
        let Compared {
            was,
            now,
            bytes,
            rds,
            shard,
        } = share;
        if was.is_none() && now.is_none() {
            return;
        }
        let listener = &self.listeners[li].shape;
        let same = was.map(|p| p.share) == now.map(|p| p.share);
        touch.table |= !same;
        let sharded = self.listeners[li].sharded;
        match listener.protocol {
            Protocol::Http if sharded && !same => touch.shards |= shard_mask(shard),
            Protocol::Http if vhds && !sharded && !same => {
                let vhost = bytes
                    .filter(|_| now.is_some())
                    .map(|b| Encoded::from(vhds_virtual_host(&listener.name, fqdn, b)));
                changes.put(XdsType::VirtualHost, vhds_name(&listener.name, fqdn), vhost);
            }
            Protocol::Https => {
                let fallback = |p: Option<&Placed>| p.is_some_and(Placed::fallback);
                let routes = |p: Option<&Placed>| p.and_then(|p| p.routes);
                touch.fallback |= (fallback(was) || fallback(now))
                    && (fallback(was) != fallback(now) || routes(was) != routes(now));
                let had_rds = was.is_some_and(|p| p.rds);
                let name = || listener.route_config_name(fqdn);
                match (rds, now.is_some_and(|p| p.rds)) {
                    (Some(any), true) if !had_rds || routes(was) != routes(now) => {
                        changes.put(XdsType::Route, name(), Some(any));
                    }
                    (_, false) if had_rds => changes.put(XdsType::Route, name(), None),
                    _ => {}
                }
            }
            Protocol::Http | Protocol::Tcp | Protocol::Udp | Protocol::Stats => {}
        }
    }

    /// Counts listener `li`'s fallback certificate in use while a vhost on it enables it.
    fn count_fallback(&mut self, ir: &Ir, li: usize, touch: &mut Touched, changes: &mut Changes) {
        let named = ir
            .listeners
            .get(&self.listeners[li].shape.name)
            .and_then(|l| l.fallback_secret.clone());
        let state = &mut self.listeners[li];
        if named.is_some() {
            state.fallback_secret = named;
        }
        let fallback = state
            .fallback_secret
            .clone()
            .filter(|_| state.fallbacks > 0);
        match (&fallback, state.fallback_counted) {
            (Some(sds), false)
                if self.secrets.contains_key(sds) || ir.secrets.contains_key(sds) =>
            {
                self.listeners[li].fallback_counted = true;
                self.use_secret(ir, sds, changes);
                touch.table = true;
                touch.fallback = true;
            }
            (None, true) => {
                self.listeners[li].fallback_counted = false;
                if let Some(sds) = self.listeners[li].fallback_secret.clone() {
                    self.release_secret(&sds, changes);
                }
                touch.table = true;
                touch.fallback = true;
            }
            _ => {}
        }
    }

    /// Assembles what `touch` says of listener `li` again: its table, its listener, its
    /// fallback RouteConfiguration.
    fn assemble(
        &self,
        li: usize,
        touch: Touched,
        table: &Table<'_>,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) -> Result<(), Stale> {
        let state = &self.listeners[li];
        let listener = &state.shape;
        let name = &listener.name;
        if touch.fallback {
            let routes = self
                .vhosts
                .values()
                .filter_map(|p| p.on(li)?.fallback_routes.as_deref());
            let routes_name = fallback_routes(listener);
            let any = state
                .fallback_counted
                .then(|| Encoded::from(route_configuration(&routes_name, routes)));
            changes.put(XdsType::Route, routes_name, any);
        }
        if !touch.table {
            return Ok(());
        }
        match listener.protocol {
            Protocol::Http if state.sharded => {
                // Each touched shard's RouteConfiguration, and its scope.
                for k in 0..crate::xds::shard::SHARDS {
                    if touch.shards & (1 << k) == 0 {
                        continue;
                    }
                    let routes = crate::xds::shard::shard_name(name, k);
                    let shell = crate::xds::shard::route_shell(&routes);
                    let any = table.splice(
                        &shell,
                        (XdsType::Route, &routes),
                        ROUTE_CONFIGURATION_VIRTUAL_HOSTS,
                        li,
                        None,
                        Some(&|parts: &Parts| parts.in_shard(k)),
                    )?;
                    changes.put(XdsType::Route, routes.clone(), Some(any));
                    changes.put(
                        XdsType::ScopedRoute,
                        routes,
                        Some(crate::xds::shard::scope(name, k)),
                    );
                }
                let served =
                    (state.vhosts > 0).then(|| encoded(&http_listener(listener, settings, true)));
                changes.put(XdsType::Listener, name.clone(), served);
            }
            Protocol::Http => {
                // Every vhost in one RouteConfiguration (state-of-the-world streams);
                // under VHDS delta streams get a shell instead, and the vhosts apart.
                let shell = route_configuration(name, std::iter::empty());
                let any = table.splice(
                    &shell,
                    (XdsType::Route, name),
                    ROUTE_CONFIGURATION_VIRTUAL_HOSTS,
                    li,
                    None,
                    None,
                )?;
                changes.put(XdsType::Route, name.clone(), Some(any));
                if settings.vhds {
                    changes.put(
                        XdsType::VhdsRoute,
                        name.clone(),
                        Some(vhds_route_configuration(name)),
                    );
                }
                let served =
                    (state.vhosts > 0).then(|| encoded(&http_listener(listener, settings, false)));
                changes.put(XdsType::Listener, name.clone(), served);
            }
            Protocol::Https => {
                let served = if state.vhosts > 0 {
                    let fallback = match (state.fallback_counted, &state.fallback_secret) {
                        (true, Some(sds)) => Some(fallback_chain_bytes(listener, sds, settings)),
                        _ => None,
                    };
                    Some(table.splice(
                        &https_listener_shell(listener, settings),
                        (XdsType::Listener, name),
                        LISTENER_FILTER_CHAINS,
                        li,
                        fallback.as_deref(),
                        None,
                    )?)
                } else {
                    None
                };
                changes.put(XdsType::Listener, name.clone(), served);
            }
            Protocol::Tcp | Protocol::Udp | Protocol::Stats => {}
        }
        Ok(())
    }
}

/// The clusters of listener `l`'s TCP proxy, as `ir` has them.
fn proxy_clusters(ir: &Ir, l: &ir::Listener) -> BTreeMap<String, ir::Cluster> {
    l.tcp_proxy
        .iter()
        .flat_map(|t| &t.clusters)
        .filter_map(|c| Some((c.cluster.clone(), ir.clusters.get(&c.cluster)?.clone())))
        .collect()
}

/// A vhost's share on one listener before (`was`) and after (`now`) a change, with its
/// fresh bytes and, for a secure vhost, its fresh RouteConfiguration.
struct Compared<'a> {
    was: Option<&'a Placed>,
    now: Option<&'a Placed>,
    bytes: Option<&'a [u8]>,
    rds: Option<Encoded>,
    /// The vhost's [`Parts::shard`].
    shard: u8,
}

/// A vhost of some listener, plain or secure.
enum Vhost<'a> {
    Plain(&'a ir::VirtualHost),
    Secure(&'a ir::SecureVirtualHost),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use isobar_sdk::ir::{Listener, PathMatch, Route, RouteAction, RouteMatch, WeightedCluster};
    use isobar_sdk::{Kind, Object, ObjectKey};

    use super::*;
    use crate::xds::TlsSettings;

    fn settings() -> EnvoySettings {
        EnvoySettings {
            client_certificate: None,
            tls: TlsSettings {
                min_version: ir::TlsVersion::V1_2,
                max_version: ir::TlsVersion::V1_3,
                cipher_suites: Vec::new(),
                ecdh_curves: Vec::new(),
                ja3: false,
                ja4: false,
            },
            connect_timeout: std::time::Duration::from_secs(2),
            access_log_path: String::new(),
            http: crate::xds::HttpSettings::default(),
            proxy_protocol: false,
            vhds: false,
            route_shards_from: 0,
            cluster: crate::xds::ClusterSettings::default(),
            listener: crate::xds::ListenerSettings::default(),
            runtime: crate::xds::RuntimeSettings::default(),
            metrics_tls: None,
        }
    }

    fn cluster(service: &str) -> ir::Cluster {
        ir::Cluster {
            name: format!("ns/{service}/80/da39a3ee5e"),
            namespace: "ns".to_string(),
            service: service.to_string(),
            port: 80,
            port_name: "http".to_string(),
            eds_name: format!("ns/{service}/http"),
            alt_stat_name: format!("ns_{service}_80"),
            options: ir::ClusterOptions::default(),
            localities: Vec::new(),
        }
    }

    fn objects() -> Objects {
        let mut objects = Objects::default();
        for service in ["auth", "app"] {
            let mut s = isobar_sdk::api::Service::default();
            s.metadata.namespace = Some("ns".to_string());
            s.metadata.name = Some(service.to_string());
            s.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
                ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                    name: Some("http".to_string()),
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            });
            objects.apply(Object::new(Arc::new(s)));
        }
        objects
    }

    /// An IR of one HTTP listener with a route to `app` on `a.example.com`, and the
    /// extension cluster of `auth`.
    fn ir(with_route: bool) -> Ir {
        let mut ir = Ir::with_listeners([Listener::http("l", "127.0.0.1", 10000)]);
        ir.add_extension_cluster(cluster("auth"));
        if with_route {
            let app = cluster("app");
            let route = Route {
                matcher: RouteMatch::path(PathMatch::Prefix("/".to_string())),
                action: RouteAction::Forward(vec![WeightedCluster {
                    cluster: app.name.clone(),
                    weight: 1,
                    ..Default::default()
                }]),
                source: ObjectKey::new(Kind::HTTPProxy, "ns", "p"),
                tie: None,
                policy: None,
            };
            ir.add_cluster(app);
            ir.add_route("l", "a.example.com", route);
        }
        ir
    }

    /// An extension cluster is served with its endpoints whether or not a route sends to
    /// it, stays when the vhosts change, is replaced when it changes (its endpoints kept)
    /// and goes when the IR no longer holds it.
    #[test]
    fn extension_clusters_are_served_for_as_long_as_the_ir_holds_them() {
        let objects = objects();
        let (resources, mut encoder) = translate_keeping(&ir(true), &objects, &settings());
        let auth = cluster("auth");
        assert!(
            resources.clusters.contains_key(&auth.name),
            "{:?}",
            resources.clusters.keys()
        );
        assert!(resources.endpoints.contains_key(&auth.eds_name));
        assert!(resources.clusters.contains_key(&cluster("app").name));
        let original = resources.clusters[&auth.name].clone();
        // The vhost goes: its cluster goes, the extension cluster stays.
        let mut snapshot = Snapshot::new(resources);
        let touched = BTreeSet::from(["a.example.com".to_string()]);
        let changes = encoder
            .replace(&ir(false), &objects, &settings(), &touched, Some(&snapshot))
            .unwrap_or_else(|_| panic!("stale"));
        let clusters = &changes.by_type[&XdsType::Cluster];
        assert_eq!(clusters.get(&cluster("app").name), Some(&None));
        assert!(!clusters.contains_key(&auth.name), "{:?}", clusters.keys());
        snapshot = snapshot.with_all_changes(changes);
        // Its options change: the cluster is sent again, its endpoints stay.
        let mut edited = ir(false);
        let balanced = edited
            .extension_clusters
            .get_mut(&auth.name)
            .unwrap_or_else(|| panic!("no extension cluster"));
        balanced.options.lb_policy = ir::LbPolicy::Random;
        assert!(encoder.same_listeners(&edited));
        let none = BTreeSet::new();
        let changes = encoder
            .replace(&edited, &objects, &settings(), &none, Some(&snapshot))
            .unwrap_or_else(|_| panic!("stale"));
        let sent = changes.by_type[&XdsType::Cluster][&auth.name]
            .clone()
            .unwrap_or_else(|| panic!("the edited extension cluster is removed"));
        assert_ne!(sent, original);
        let endpoints = changes.by_type.get(&XdsType::Endpoint);
        assert!(
            endpoints.is_none_or(|e| e.get(&auth.eds_name).is_none_or(Option::is_some)),
            "the edited extension cluster's endpoints are removed"
        );
        snapshot = snapshot.with_all_changes(changes);
        // The IR no longer holds it: it goes, with its endpoints.
        let mut without = ir(false);
        without.extension_clusters.clear();
        let changes = encoder
            .replace(&without, &objects, &settings(), &none, Some(&snapshot))
            .unwrap_or_else(|_| panic!("stale"));
        assert_eq!(
            changes.by_type[&XdsType::Cluster].get(&auth.name),
            Some(&None)
        );
        assert_eq!(
            changes.by_type[&XdsType::Endpoint].get(&auth.eds_name),
            Some(&None)
        );
    }
}
