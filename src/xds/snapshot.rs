//! A complete, versioned set of Envoy resources: what every Envoy is served.
//!
//! A type's version is a hash of its resources' bytes: equal content has equal versions
//! (so a relist that changes nothing sends nothing, and a restarted Isobar does not make
//! Envoy reload), and different content never shares a version, across restarts too.

use std::collections::BTreeMap;

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

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeSnapshot {
    pub version: String,
    pub resources: BTreeMap<String, Any>,
    /// A hash of each resource's bytes: what a stream compares to send only the
    /// resources that changed (EDS, SDS and RDS may be sent in part).
    pub digests: BTreeMap<String, u64>,
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
            let digests: BTreeMap<String, u64> = map
                .iter()
                .map(|(name, any)| (name.clone(), digest(&any.value)))
                .collect();
            snapshot.types[t.index()] = TypeSnapshot {
                version: version_of(digests.iter()),
                resources: map,
                digests,
            };
        }
        snapshot
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

/// 16 hex digits of a hash over every resource's name and digest.
pub fn version_of<'a>(digests: impl IntoIterator<Item = (&'a String, &'a u64)>) -> String {
    let mut hasher = Sha1::new();
    for (name, digest) in digests {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(digest.to_le_bytes());
    }
    hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
