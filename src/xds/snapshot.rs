//! A complete, versioned set of Envoy resources: what every Envoy is served.
//!
//! A type's version is a hash of its resources' bytes: equal content has equal versions
//! (so a relist that changes nothing sends nothing, and a restarted Isobar does not make
//! Envoy reload), and different content never shares a version, across restarts too.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::resource::{Changes, Encoded, Name, Resources, XdsType};
use super::wire::{self, Named};

/// Resources by name. A persistent map: a snapshot that changes a few resources shares
/// everything else with the one before (an endpoint change copies a few tree nodes, not
/// 10,000 resources). Only lookups, inserts, removals and iteration are used: `imbl`'s
/// `diff` (and so its `==`) misses changes (`probe` below), so snapshots are compared by
/// version and changes are tracked by a log instead.
/// Keys are shared strings: a change copies the tree nodes on its path (a few dozen
/// entries each), and copying a shared name is a count, not an allocation.
pub type ResourceMap<V> = imbl::OrdMap<Name, V>;

/// How many change sets a type keeps before it starts a new epoch (streams then compare
/// every name once).
const LOG_MAX: usize = 4096;

static EPOCHS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_epoch() -> u64 {
    EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Where a type's change log stands: what a stream remembers to later ask for only the
/// names changed since.
pub type LogPosition = (u64, usize);

#[derive(Debug, Clone, Default)]
pub struct TypeSnapshot {
    pub version: String,
    /// Values from 4 KB up are shared with the responses that carry them, not copied
    /// (see `wire.rs`).
    pub resources: ResourceMap<Encoded>,
    /// A hash of each resource's bytes: what a stream compares to send only the
    /// resources that changed (EDS, SDS and RDS may be sent in part).
    pub digests: ResourceMap<u64>,
    /// The combined hash `version` is the hex of (see [`version_of`]).
    combined: u64,
    /// A full build starts a new epoch; each later change appends the names it touched.
    epoch: u64,
    log: imbl::Vector<Arc<[Name]>>,
    /// Every resource encoded for a response that carries them all (see [`Self::all`]).
    all: AllEncoded,
}

/// The resources part of a state-of-the-world and of a delta response carrying every
/// resource of a type, while some stream still sends it.
#[derive(Debug, Clone, Default)]
struct AllEncoded(Arc<Mutex<[Weak<wire::Resources>; 2]>>);

/// Equal content has equal versions (a hash of every name and digest).
impl PartialEq for TypeSnapshot {
    fn eq(&self, other: &Self) -> bool {
        self.combined == other.combined && self.digests.len() == other.digests.len()
    }
}

impl TypeSnapshot {
    fn of(map: std::collections::BTreeMap<String, Encoded>) -> TypeSnapshot {
        let mut out = TypeSnapshot {
            epoch: next_epoch(),
            ..TypeSnapshot::default()
        };
        for (name, any) in map {
            out.insert(name.into(), digest(&any), any);
        }
        out.version = hex(out.combined);
        out
    }

    /// The same resources, as a type of their own: a new epoch, nothing logged yet.
    fn fork(&self) -> TypeSnapshot {
        TypeSnapshot {
            epoch: next_epoch(),
            log: imbl::Vector::new(),
            all: AllEncoded::default(),
            ..self.clone()
        }
    }

    /// Adds or replaces a resource (the version, and taking a replaced resource's
    /// share out of `combined`, are left to the caller).
    fn insert(&mut self, name: Name, digest: u64, resource: Encoded) {
        self.combined ^= entry_hash(&name, digest);
        self.digests.insert(name.clone(), digest);
        self.resources.insert(name, resource);
    }

    /// Replaces (`Some`) or removes (`None`) resources; the version follows.
    fn change(&mut self, changes: impl IntoIterator<Item = (String, Option<Encoded>)>) {
        let mut names = Vec::new();
        for (name, any) in changes {
            let digest = any.as_deref().map(digest);
            let old = self.digests.get(name.as_str()).copied();
            if old == digest {
                continue;
            }
            if let Some(old) = old {
                self.combined ^= entry_hash(&name, old);
            }
            let name = Name::from(name);
            match (any, digest) {
                // Replaced in place: one copy of each map's path, not a removal and an
                // insertion.
                (Some(any), Some(digest)) => self.insert(name.clone(), digest, any),
                _ => {
                    self.digests.remove(&*name);
                    self.resources.remove(&*name);
                }
            }
            names.push(name);
        }
        if names.is_empty() {
            return;
        }
        self.all = AllEncoded::default();
        self.version = hex(self.combined);
        if self.log.len() >= LOG_MAX {
            self.epoch = next_epoch();
            self.log = imbl::Vector::new();
        } else {
            self.log.push_back(names.into());
        }
    }

    /// Every resource of the type (`t`, this snapshot's) as a state-of-the-world
    /// (`delta: false`) or delta response carries it: encoded once and shared by the streams sending it at the
    /// same time (a fleet connecting at once costs one copy, not one per Envoy), and
    /// not held once they are done.
    pub fn all(&self, t: XdsType, delta: bool) -> Arc<wire::Resources> {
        let mut slots = self.all.0.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut slots[usize::from(delta)];
        if let Some(part) = slot.upgrade() {
            return part;
        }
        let part = Arc::new(if delta {
            let named = self.resources.iter().zip(self.digests.values());
            let named = named.map(|((name, value), digest)| Named {
                name,
                version: hex(*digest),
                resource: value,
            });
            wire::delta_resources(t.type_url(), named)
        } else {
            wire::sotw_resources(t.type_url(), self.resources.values())
        });
        *slot = Arc::downgrade(&part);
        part
    }

    /// Where the change log stands now.
    pub fn position(&self) -> LogPosition {
        (self.epoch, self.log.len())
    }

    /// The names changed (or removed) since `position`, when the log still reaches
    /// back that far; `None`: every name must be compared.
    pub fn changed_since(&self, position: LogPosition) -> Option<BTreeSet<&Name>> {
        let (epoch, at) = position;
        if epoch != self.epoch || at > self.log.len() {
            return None;
        }
        // By index: skipping an `imbl` iterator steps through every entry before `at`.
        Some(
            (at..self.log.len())
                .filter_map(|i| self.log.get(i))
                .flat_map(|names| names.iter())
                .collect(),
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    types: [TypeSnapshot; 9],
    /// `xds-server.vhds`: the RouteConfigurations of [`XdsType::VhdsRoute`] that are not
    /// [`XdsType::Route`]'s (HTTP listeners' shells); `None` when delta streams get
    /// `Route` as it is.
    shells: Option<Arc<BTreeSet<Name>>>,
    /// When the earliest change this snapshot reflects arrived (for the event → xDS
    /// latency metric); not part of the content.
    pub changed_at: Option<std::time::Instant>,
    /// Which snapshot this is: every snapshot made gets a higher one (in this process),
    /// so a stream can say which builds Envoy took and which it refused.
    pub seq: u64,
}

static SEQS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_seq() -> u64 {
    SEQS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        self.types == other.types
    }
}

impl Snapshot {
    pub fn new(resources: Resources) -> Snapshot {
        let mut snapshot = Snapshot {
            seq: next_seq(),
            ..Snapshot::default()
        };
        if !resources.vhds_routes.is_empty() {
            let mut routes = resources.routes.clone();
            let shells = resources.vhds_routes.keys().map(|n| Name::from(n.as_str()));
            snapshot.shells = Some(Arc::new(shells.collect()));
            routes.extend(resources.vhds_routes);
            snapshot.types[XdsType::VhdsRoute.index()] = TypeSnapshot::of(routes);
        }
        for (t, map) in [
            (XdsType::Cluster, resources.clusters),
            (XdsType::Endpoint, resources.endpoints),
            (XdsType::Secret, resources.secrets),
            (XdsType::Listener, resources.listeners),
            (XdsType::Route, resources.routes),
            (XdsType::VirtualHost, resources.virtual_hosts),
            (XdsType::ScopedRoute, resources.scoped_routes),
            (XdsType::Runtime, resources.runtimes),
        ] {
            snapshot.types[t.index()] = TypeSnapshot::of(map);
        }
        snapshot
    }

    /// This snapshot with some resources of one type replaced (`Some`) or removed
    /// (`None`); everything else is shared with it.
    pub fn with_changes(
        &self,
        t: XdsType,
        changes: impl IntoIterator<Item = (String, Option<Encoded>)>,
    ) -> Snapshot {
        if matches!(t, XdsType::Route | XdsType::VhdsRoute) {
            let mut all = Changes::default();
            all.by_type.insert(t, changes.into_iter().collect());
            return self.with_all_changes(all);
        }
        let mut out = self.clone();
        out.seq = next_seq();
        out.types[t.index()].change(changes);
        out
    }

    /// This snapshot with the resources of several types replaced or removed. A
    /// RouteConfiguration changed is changed for delta streams too, unless they get a
    /// shell of their own for it ([`XdsType::VhdsRoute`]).
    pub fn with_all_changes(&self, mut changes: Changes) -> Snapshot {
        let mut out = self.clone();
        out.seq = next_seq();
        let shells = changes.by_type.remove(&XdsType::VhdsRoute);
        let mirror: Vec<(String, Option<Encoded>)> = match (&out.shells, &shells) {
            (None, None) => Vec::new(),
            _ => changes
                .by_type
                .get(&XdsType::Route)
                .map(|m| m.iter().map(|(n, v)| (n.clone(), v.clone())).collect())
                .unwrap_or_default(),
        };
        for (t, resources) in changes.by_type {
            out.types[t.index()].change(resources);
        }
        match &out.shells {
            // The first shells: delta streams' routes start as everyone's.
            None if shells.is_some() => {
                out.types[XdsType::VhdsRoute.index()] = out.types[XdsType::Route.index()].fork();
                out.shells = Some(Arc::default());
            }
            None => return out,
            Some(own) => {
                let own = own.clone();
                let mirrored = mirror
                    .into_iter()
                    .filter(|(name, _)| !own.contains(name.as_str()));
                out.types[XdsType::VhdsRoute.index()].change(mirrored);
            }
        }
        if let Some(shells) = shells {
            let mut own: BTreeSet<Name> = out.shells.as_deref().cloned().unwrap_or_default();
            for (name, shell) in &shells {
                match shell {
                    Some(_) => own.insert(Name::from(name.as_str())),
                    None => own.remove(name.as_str()),
                };
            }
            out.shells = Some(Arc::new(own));
            out.types[XdsType::VhdsRoute.index()].change(shells);
        }
        out
    }

    pub fn get(&self, t: XdsType) -> &TypeSnapshot {
        &self.types[t.index()]
    }

    /// Type `t` as a delta stream is served it: RDS under `xds-server.vhds` is
    /// [`XdsType::VhdsRoute`].
    pub fn for_delta(&self, t: XdsType) -> &TypeSnapshot {
        match t {
            XdsType::Route if self.shells.is_some() => self.get(XdsType::VhdsRoute),
            _ => self.get(t),
        }
    }
}

/// The first 8 bytes of the BLAKE3 hash of a resource's bytes (a cryptographic hash, so
/// no tenant can make a change look like no change; several GB/s, so the 4 MB
/// `ingress_http` of 10,000 vhosts hashes in about a millisecond).
pub fn digest(bytes: &[u8]) -> u64 {
    first_u64(blake3::hash(bytes).as_bytes())
}

/// One resource's share of a version: a hash of its name and digest.
fn entry_hash(name: &str, digest: u64) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&(name.len() as u64).to_le_bytes());
    hasher.update(name.as_bytes());
    hasher.update(&digest.to_le_bytes());
    first_u64(hasher.finalize().as_bytes())
}

fn first_u64(hash: &[u8; 32]) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_le_bytes(first)
}

/// 16 hex digits: a type's version, and each resource's version in delta responses.
pub(super) fn hex(value: u64) -> String {
    format!("{value:016x}")
}

/// 16 hex digits of a hash over every resource's name and digest: the XOR of each
/// resource's [`entry_hash`], so a change to a few resources updates it without
/// visiting the rest. Equal sets give equal versions, across restarts too.
pub fn version_of<'a>(digests: impl IntoIterator<Item = (&'a Name, &'a u64)>) -> String {
    hex(digests
        .into_iter()
        .fold(0, |acc, (name, digest)| acc ^ entry_hash(name, *digest)))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod probe;
