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

mod encode;
mod replace;
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
    /// Its host's shard among the most a listener has (`xds::shard::host_hash`; its
    /// shard among `n` is this modulo `n`), when some listener's routes are split
    /// ([`EVERY_SHARD`]: a wildcard or default vhost, in all of them).
    shard: u16,
}

/// [`Parts::shard`] of a vhost in every shard.
const EVERY_SHARD: u16 = u16::MAX;

impl Parts {
    fn on(&self, listener: usize) -> Option<&Placed> {
        self.on.iter().find(|p| p.listener == listener)
    }

    /// Whether it is in shard `k` of `shards`.
    fn in_shard(&self, k: usize, shards: usize) -> bool {
        self.shard == EVERY_SHARD || usize::from(self.shard) % shards == k
    }
}

/// How many shards an HTTP listener with `vhosts` vhosts has its routes split into (`0`:
/// none), when it had `were`: by `xds-server.route-shards-from`, split from that many
/// vhosts, and down to half as many once split; as many shards as
/// `xds::shard::shard_count` says.
fn shards(settings: &EnvoySettings, vhosts: usize, were: usize) -> usize {
    let from = settings.route_shards_from;
    if from > 0 && (vhosts >= from || (were > 0 && vhosts * 2 >= from)) {
        crate::xds::shard::shard_count(vhosts, were)
    } else {
        0
    }
}

/// Shards of a split listener, as a set.
#[derive(Default, Clone, Copy)]
struct ShardSet([u64; crate::xds::shard::MAX_SHARDS / 64]);

impl ShardSet {
    /// Every shard.
    fn all() -> ShardSet {
        ShardSet([u64::MAX; crate::xds::shard::MAX_SHARDS / 64])
    }

    /// The shards a change to a vhost of [`Parts::shard`] `shard` touches on a listener
    /// of `shards` shards.
    fn add(&mut self, shard: u16, shards: usize) {
        if shard == EVERY_SHARD {
            *self = ShardSet::all();
        } else {
            let k = usize::from(shard) % shards;
            self.0[k / 64] |= 1 << (k % 64);
        }
    }

    fn contains(&self, k: usize) -> bool {
        self.0[k / 64] & (1 << (k % 64)) != 0
    }

    /// How many shards it holds.
    fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
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
    /// HTTP: how many shards its routes are split into (see `xds::shard`; `0`: none),
    /// decided by a full build from how many vhosts it has.
    shards: usize,
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
    /// A split HTTP listener: the shards to assemble again.
    shards: ShardSet,
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
    /// While some listener's routes are split: the vhosts by [`Parts::shard`] (the last
    /// set: those in every shard), so that a change to one shard assembles it from its
    /// own vhosts instead of walking all of them.
    by_shard: Vec<BTreeSet<String>>,
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
    /// The HTTP listeners the last full build split into shards, with their shard
    /// counts (they stay split down to half the threshold, and keep their count near a
    /// boundary, so a listener near one does not flip back and forth).
    were_sharded: BTreeMap<String, usize>,
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
/// shards, as many as each names (they stay split down to half the threshold).
pub fn translate_after(
    ir: &Ir,
    objects: &Objects,
    settings: &EnvoySettings,
    sharded: Option<&BTreeMap<String, usize>>,
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

    /// The HTTP listeners whose routes are split into shards, with their shard counts.
    pub fn sharded_listeners(&self) -> BTreeMap<String, usize> {
        self.listeners
            .iter()
            .filter(|l| l.shards > 0)
            .map(|l| (l.shape.name.clone(), l.shards))
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
                shards(settings, now, state.shards) == state.shards
            })
    }

    /// The vhosts of shard `k` of `shards` (those in every shard too), in name order:
    /// from the index kept while routes are split.
    fn shard_members(&self, k: usize, shards: usize) -> Vec<(&String, &Parts)> {
        let mut names: Vec<&String> = (k..crate::xds::shard::MAX_SHARDS)
            .step_by(shards)
            .chain([crate::xds::shard::MAX_SHARDS])
            .filter_map(|h| self.by_shard.get(h))
            .flatten()
            .collect();
        names.sort_unstable();
        names
            .into_iter()
            .filter_map(|name| self.vhosts.get_key_value(name))
            .collect()
    }

    /// Keeps [`Encoder::by_shard`]: vhost `fqdn` of shard `shard` is added (`now`) or
    /// removed.
    fn index_shard(&mut self, fqdn: &str, shard: u16, now: bool) {
        if !self.listeners.iter().any(|l| l.shards > 0) {
            return;
        }
        let at = if shard == EVERY_SHARD {
            crate::xds::shard::MAX_SHARDS
        } else {
            usize::from(shard)
        };
        if self.by_shard.len() <= at {
            self.by_shard
                .resize_with(crate::xds::shard::MAX_SHARDS + 1, BTreeSet::new);
        }
        if now {
            self.by_shard[at].insert(fqdn.to_string());
        } else {
            self.by_shard[at].remove(fqdn);
        }
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
    shard: u16,
}

/// A vhost of some listener, plain or secure.
enum Vhost<'a> {
    Plain(&'a ir::VirtualHost),
    Secure(&'a ir::SecureVirtualHost),
}

#[cfg(test)]
mod tests;
