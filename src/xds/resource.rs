//! What every part of xds shares: the resource types, a resource's name and encoded
//! bytes, and sets of resources by type.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message;

/// The xDS resource types Isobar serves, in the order a change is pushed: clusters before
/// their endpoints, both (and certificates) before the listeners, routes and vhosts that
/// use them (make before break).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XdsType {
    Cluster,
    Endpoint,
    Secret,
    Listener,
    /// SRDS: the scopes of an HTTP listener whose routes are split into shards
    /// (`xds-server.route-shards-from`), each naming its RouteConfiguration.
    ScopedRoute,
    Route,
    /// VHDS (`xds-server.vhds`, delta streams only): `ingress_http`'s vhosts.
    VirtualHost,
    /// RTDS: Contour's `dynamic` runtime layer (first to be sent: Envoy waits for it
    /// as it starts).
    Runtime,
    /// RDS as delta streams are served it under `xds-server.vhds`: every
    /// RouteConfiguration of [`XdsType::Route`], but an HTTP listener's is a shell whose
    /// vhosts come over VHDS. Not a type of its own on the wire (its URL is RDS's), nor
    /// pushed on its own: a delta stream answers RDS from it.
    VhdsRoute,
}

impl XdsType {
    pub const ORDER: [XdsType; 8] = [
        XdsType::Runtime,
        XdsType::Cluster,
        XdsType::Endpoint,
        XdsType::Secret,
        XdsType::Listener,
        XdsType::ScopedRoute,
        XdsType::Route,
        XdsType::VirtualHost,
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
            XdsType::Route | XdsType::VhdsRoute => {
                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
            }
            XdsType::VirtualHost => "type.googleapis.com/envoy.config.route.v3.VirtualHost",
            XdsType::ScopedRoute => {
                "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
            }
            XdsType::Runtime => "type.googleapis.com/envoy.service.runtime.v3.Runtime",
        }
    }

    pub fn from_type_url(url: &str) -> Option<XdsType> {
        XdsType::ORDER.into_iter().find(|t| t.type_url() == url)
    }

    /// LDS and CDS are subscribed to as a whole; EDS and RDS by name. Envoy subscribes
    /// to VHDS as a whole too (the vhosts' names say which RouteConfiguration they are
    /// of: `ingress_http/...`), and to SRDS.
    pub fn is_wildcard(self) -> bool {
        matches!(
            self,
            XdsType::Cluster | XdsType::Listener | XdsType::VirtualHost | XdsType::ScopedRoute
        )
    }

    /// Listeners, routes and vhosts wait for clusters and endpoints (make before break).
    pub fn is_downstream(self) -> bool {
        matches!(
            self,
            XdsType::Listener
                | XdsType::ScopedRoute
                | XdsType::Route
                | XdsType::VirtualHost
                | XdsType::VhdsRoute
        )
    }

    pub fn short(self) -> &'static str {
        match self {
            XdsType::Cluster => "cds",
            XdsType::Endpoint => "eds",
            XdsType::Secret => "sds",
            XdsType::Listener => "lds",
            XdsType::Route | XdsType::VhdsRoute => "rds",
            XdsType::VirtualHost => "vhds",
            XdsType::ScopedRoute => "srds",
            XdsType::Runtime => "rtds",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// A resource's name as snapshots and streams hold it.
pub type Name = Arc<str>;

/// A resource's encoded bytes as snapshots and streams hold them: one allocation at
/// its exact size, shared. The type URL is the snapshot type's, written as a response
/// is encoded, not repeated beside each of 40,000 resources.
pub type Encoded = Arc<[u8]>;

/// Envoy resources by type, each by name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resources {
    pub clusters: BTreeMap<String, Encoded>,
    pub endpoints: BTreeMap<String, Encoded>,
    pub secrets: BTreeMap<String, Encoded>,
    pub listeners: BTreeMap<String, Encoded>,
    pub routes: BTreeMap<String, Encoded>,
    /// VHDS (`xds-server.vhds`): `ingress_http`'s vhosts.
    pub virtual_hosts: BTreeMap<String, Encoded>,
    /// SRDS: the scopes of HTTP listeners whose routes are split into shards.
    pub scoped_routes: BTreeMap<String, Encoded>,
    /// RTDS: the `dynamic` runtime layer.
    pub runtimes: BTreeMap<String, Encoded>,
    /// `xds-server.vhds`: the RouteConfigurations delta streams get instead of those of
    /// `routes` (an HTTP listener's shell; see [`XdsType::VhdsRoute`]).
    pub vhds_routes: BTreeMap<String, Encoded>,
}

impl Resources {
    /// The resources of type `t`.
    pub fn of(&self, t: XdsType) -> &BTreeMap<String, Encoded> {
        match t {
            XdsType::Cluster => &self.clusters,
            XdsType::Endpoint => &self.endpoints,
            XdsType::Secret => &self.secrets,
            XdsType::Listener => &self.listeners,
            XdsType::Route => &self.routes,
            XdsType::VirtualHost => &self.virtual_hosts,
            XdsType::ScopedRoute => &self.scoped_routes,
            XdsType::Runtime => &self.runtimes,
            XdsType::VhdsRoute => &self.vhds_routes,
        }
    }
}

/// A resource encoded as snapshots hold it.
pub fn encoded(resource: &impl Message) -> Encoded {
    Encoded::from(resource.encode_to_vec())
}

/// Resources to put (`Some`) or remove (`None`), by type.
#[derive(Default)]
pub struct Changes {
    pub by_type: BTreeMap<XdsType, BTreeMap<String, Option<Encoded>>>,
}

impl Changes {
    pub(super) fn put(&mut self, t: XdsType, name: String, resource: Option<Encoded>) {
        self.by_type.entry(t).or_default().insert(name, resource);
    }
}

impl Resources {
    /// The resources of type `t`, to change.
    pub fn of_mut(&mut self, t: XdsType) -> &mut BTreeMap<String, Encoded> {
        match t {
            XdsType::Cluster => &mut self.clusters,
            XdsType::Endpoint => &mut self.endpoints,
            XdsType::Secret => &mut self.secrets,
            XdsType::Listener => &mut self.listeners,
            XdsType::Route => &mut self.routes,
            XdsType::VirtualHost => &mut self.virtual_hosts,
            XdsType::ScopedRoute => &mut self.scoped_routes,
            XdsType::Runtime => &mut self.runtimes,
            XdsType::VhdsRoute => &mut self.vhds_routes,
        }
    }
}
