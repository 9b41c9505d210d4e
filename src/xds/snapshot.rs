//! A complete, versioned set of Envoy resources: what every Envoy is served.
//!
//! A type's version is a hash of its resources' bytes: equal content has equal versions
//! (so a relist that changes nothing sends nothing, and a restarted Isobar does not make
//! Envoy reload), and different content never shares a version, across restarts too.

use envoy_types::pb::google::protobuf::Any;
use sha1::{Digest, Sha1};

use super::translate::Resources;

/// The xDS resource types Isobar serves, in the order a change is pushed: clusters before
/// their endpoints, both (and certificates) before the listeners and routes that use them
/// (make before break).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XdsType {
    Cluster,
    Endpoint,
    Secret,
    Listener,
    Route,
}

impl XdsType {
    pub const ORDER: [XdsType; 5] = [
        XdsType::Cluster,
        XdsType::Endpoint,
        XdsType::Secret,
        XdsType::Listener,
        XdsType::Route,
    ];

    pub fn type_url(self) -> &'static str {
        match self {
            XdsType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            XdsType::Endpoint => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
            XdsType::Secret => {
                "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
            }
            XdsType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            XdsType::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
        }
    }

    pub fn from_type_url(url: &str) -> Option<XdsType> {
        XdsType::ORDER.into_iter().find(|t| t.type_url() == url)
    }

    /// LDS and CDS are subscribed to as a whole; EDS and RDS by name.
    pub fn is_wildcard(self) -> bool {
        matches!(self, XdsType::Cluster | XdsType::Listener)
    }

    pub fn short(self) -> &'static str {
        match self {
            XdsType::Cluster => "cds",
            XdsType::Endpoint => "eds",
            XdsType::Secret => "sds",
            XdsType::Listener => "lds",
            XdsType::Route => "rds",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Resources by name. A persistent map: a snapshot that changes a few resources shares
/// everything else with the one before (an endpoint change copies a few tree nodes, not
/// 10,000 resources).
pub type ResourceMap<V> = imbl::OrdMap<String, V>;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeSnapshot {
    pub version: String,
    pub resources: ResourceMap<Any>,
    /// A hash of each resource's bytes: what a stream compares to send only the
    /// resources that changed (EDS, SDS and RDS may be sent in part).
    pub digests: ResourceMap<u64>,
    /// The combined hash `version` is the hex of (see [`version_of`]).
    combined: u64,
}

impl TypeSnapshot {
    fn of(map: std::collections::BTreeMap<String, Any>) -> TypeSnapshot {
        let mut out = TypeSnapshot::default();
        for (name, any) in map {
            let digest = digest(&any.value);
            out.combined ^= entry_hash(&name, digest);
            out.digests.insert(name.clone(), digest);
            out.resources.insert(name, any);
        }
        out.version = hex(out.combined);
        out
    }

    /// Replaces (`Some`) or removes (`None`) resources; the version follows.
    fn change(&mut self, changes: impl IntoIterator<Item = (String, Option<Any>)>) {
        for (name, any) in changes {
            if let Some(old) = self.digests.remove(&name) {
                self.combined ^= entry_hash(&name, old);
                self.resources.remove(&name);
            }
            if let Some(any) = any {
                let digest = digest(&any.value);
                self.combined ^= entry_hash(&name, digest);
                self.digests.insert(name.clone(), digest);
                self.resources.insert(name, any);
            }
        }
        self.version = hex(self.combined);
    }
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    types: [TypeSnapshot; 5],
    /// When the earliest change this snapshot reflects arrived (for the event → xDS
    /// latency metric); not part of the content.
    pub changed_at: Option<std::time::Instant>,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        self.types == other.types
    }
}

impl Snapshot {
    pub fn new(resources: Resources) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for (t, map) in [
            (XdsType::Cluster, resources.clusters),
            (XdsType::Endpoint, resources.endpoints),
            (XdsType::Secret, resources.secrets),
            (XdsType::Listener, resources.listeners),
            (XdsType::Route, resources.routes),
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
        changes: impl IntoIterator<Item = (String, Option<Any>)>,
    ) -> Snapshot {
        let mut out = self.clone();
        out.types[t.index()].change(changes);
        out
    }

    pub fn get(&self, t: XdsType) -> &TypeSnapshot {
        &self.types[t.index()]
    }
}

/// The first 8 bytes of the SHA-1 of a resource's bytes.
pub fn digest(bytes: &[u8]) -> u64 {
    let hash = Sha1::digest(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_le_bytes(first)
}

/// One resource's share of a version: a hash of its name and digest.
fn entry_hash(name: &str, digest: u64) -> u64 {
    let mut hasher = Sha1::new();
    hasher.update((name.len() as u64).to_le_bytes());
    hasher.update(name.as_bytes());
    hasher.update(digest.to_le_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hasher.finalize()[..8]);
    u64::from_le_bytes(first)
}

fn hex(value: u64) -> String {
    format!("{value:016x}")
}

/// 16 hex digits of a hash over every resource's name and digest: the XOR of each
/// resource's [`entry_hash`], so a change to a few resources updates it without
/// visiting the rest. Equal sets give equal versions, across restarts too.
pub fn version_of<'a>(digests: impl IntoIterator<Item = (&'a String, &'a u64)>) -> String {
    hex(digests
        .into_iter()
        .fold(0, |acc, (name, digest)| acc ^ entry_hash(name, *digest)))
}
