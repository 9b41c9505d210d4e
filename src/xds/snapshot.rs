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
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    types: [TypeSnapshot; 5],
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
            snapshot.types[t.index()] = TypeSnapshot {
                version: version_of(&map),
                resources: map,
            };
        }
        snapshot
    }

    pub fn get(&self, t: XdsType) -> &TypeSnapshot {
        &self.types[t.index()]
    }
}

/// 16 hex digits of a hash over every resource's name and bytes.
pub fn version_of(resources: &BTreeMap<String, Any>) -> String {
    let mut hasher = Sha1::new();
    for (name, any) in resources {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((any.value.len() as u64).to_le_bytes());
        hasher.update(&any.value);
    }
    hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
