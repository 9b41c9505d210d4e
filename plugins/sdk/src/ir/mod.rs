//! The intermediate representation: what Envoy should do, with no Kubernetes or Envoy
//! types inside. Ordered maps keep it deterministic: the same objects give the same IR.
//!
//! The IR is keyed by listener. Each listener has an address, a port and a protocol:
//! an HTTP listener holds virtual hosts, an HTTPS listener one SNI filter chain per
//! virtual host (TLS terminated with a certificate, or passed through), a TCP listener
//! forwards every connection to its proxy's clusters. Every HTTP
//! connection manager of a listener runs its `http_filters`, in order. Contour's
//! `ingress_http`, `ingress_https` and `stats-health` are listeners made from the
//! configuration before the sources run; a source writes to a listener by name and may
//! add listeners of its own. Clusters and secrets sit beside the listeners, shared by
//! every listener that uses them.

mod cluster;
mod extension;
mod health;
mod jwt;
mod route;
mod route_policy;
mod tls;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

pub use cluster::*;
pub use extension::*;
pub use health::*;
pub use jwt::*;
pub use route::*;
pub use route_policy::*;
pub use tls::*;

/// Contour's plain HTTP listener; also its RouteConfiguration's name.
pub const HTTP_LISTENER: &str = "ingress_http";
/// Contour's HTTPS listener.
pub const HTTPS_LISTENER: &str = "ingress_https";
/// Contour's listener for Envoy's own readiness and stats.
pub const STATS_LISTENER: &str = "stats-health";

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ir {
    /// Listeners by name.
    pub listeners: BTreeMap<String, Listener>,
    /// Upstream clusters by name: those routes send to (dropped when no route does).
    pub clusters: BTreeMap<String, Cluster>,
    /// Clusters of extension services, by name: those a listener's HTTP filters send to
    /// (an authorization or rate limit service, a trace collector), not routes. Part of
    /// the listeners' shape: served while the IR holds them, never pruned.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extension_clusters: BTreeMap<String, Cluster>,
    /// Certificates (with their keys) served over SDS, by SDS name; only what a served
    /// vhost uses. Serialized as names and fingerprints, never as key material.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, ServedSecret>,
    /// The filters every HTTP connection manager runs beyond routing: global
    /// authorization, rate limits and tracing.
    #[serde(skip_serializing_if = "HttpExtensions::is_empty")]
    pub extensions: HttpExtensions,
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Plain HTTP: virtual hosts, routed by `Host`, served over RDS.
    Http,
    /// TLS, one filter chain per server name (SNI): terminated and routed as HTTP,
    /// forwarded over TCP, or passed through.
    Https,
    /// Plain TCP: every connection forwarded to the listener's `tcp_proxy`.
    Tcp,
    /// UDP: every datagram forwarded, by session (source address and port), to the
    /// listener's `tcp_proxy` (its one cluster: Envoy's UDP proxy takes no weights, so
    /// several weighted backends are one cluster of weighted localities).
    Udp,
    /// Envoy's readiness and stats (`GET /ready`, `/stats`, `/stats/prometheus` of its
    /// admin) and nothing else of the admin, as Contour's `stats-health`.
    Stats,
}

/// An HTTP filter of a listener's connection managers. Those before the router act only
/// where a virtual host or route configures them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpFilter {
    /// Response compression (`compression.algorithm` says which, or none).
    Compressor,
    /// gRPC-Web to gRPC.
    GrpcWeb,
    /// gRPC call statistics.
    GrpcStats,
    /// Cross-origin requests (a vhost's [`Cors`]).
    Cors,
    /// Token buckets ([`LocalRateLimit`] of a vhost or route).
    LocalRateLimit,
    /// `Set-Cookie` rewriting ([`CookieRewrite`]), a fixed Lua script. A connection
    /// manager of one HTTPS vhost carries it only when a route of the vhost uses it.
    CookieRewrite,
    /// Client address filters ([`IpFilter`] of a vhost or route).
    Rbac,
    /// JWT verification, in a secure vhost's connection manager with JWT providers.
    JwtAuthn,
    /// External authorization: a secure vhost's, or the global one.
    ExtAuthz,
    /// The global rate limit service, when one is configured.
    RateLimit,
    /// Routing; always last.
    Router,
}

impl HttpFilter {
    /// Contour's filters, in its order.
    pub const CONTOUR: [HttpFilter; 11] = [
        HttpFilter::Compressor,
        HttpFilter::GrpcWeb,
        HttpFilter::GrpcStats,
        HttpFilter::Cors,
        HttpFilter::LocalRateLimit,
        HttpFilter::CookieRewrite,
        HttpFilter::Rbac,
        HttpFilter::JwtAuthn,
        HttpFilter::ExtAuthz,
        HttpFilter::RateLimit,
        HttpFilter::Router,
    ];
}

/// Where Envoy accepts connections, and what it does with them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listener {
    pub name: String,
    pub address: String,
    pub port: u16,
    pub protocol: Protocol,
    /// HTTP: virtual hosts by lower-cased FQDN (`*` for any).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub virtual_hosts: BTreeMap<String, VirtualHost>,
    /// HTTPS: one SNI filter chain per virtual host, by FQDN.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secure_virtual_hosts: BTreeMap<String, SecureVirtualHost>,
    /// HTTPS: the SDS name of the fallback certificate (for clients without SNI), when a
    /// virtual host enables it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_secret: Option<String>,
    /// TCP and UDP: where connections (datagrams) go; the listener is not served
    /// without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_proxy: Option<TcpProxy>,
    /// The HTTP filters of every connection manager on this listener, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_filters: Vec<HttpFilter>,
    /// HTTPS: how the RouteConfigurations of this listener are named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routes: Option<RouteNames>,
    /// Stats: the paths of Envoy's admin it answers (`GET` only), nothing else of it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub admin_paths: Vec<String>,
    /// Stats: counted against Envoy's global downstream connection limit (the
    /// overload manager's), which the other stats listeners ignore.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub connection_limited: bool,
    /// Stats: served over TLS with the metrics certificate (Contour's `metrics.envoy`
    /// certificate files, over SDS).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub metrics_tls: bool,
    /// HTTP and HTTPS: the global authorization, rate limit service and tracing its
    /// connection managers use (the IR's [`Ir::extensions`], given to every listener of
    /// HTTP once the sources have run).
    #[serde(skip_serializing_if = "HttpExtensions::is_empty")]
    pub extensions: HttpExtensions,
}

/// The names of an HTTPS listener's RouteConfigurations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteNames {
    /// A virtual host's own is `<prefix>/<fqdn>` (Contour: `https`).
    pub prefix: String,
    /// The one clients without SNI are routed by (Contour: `ingress_fallbackcert`).
    pub fallback: String,
}

impl Listener {
    fn new(name: &str, address: &str, port: u16, protocol: Protocol) -> Listener {
        Listener {
            name: name.to_string(),
            address: address.to_string(),
            port,
            protocol,
            virtual_hosts: BTreeMap::new(),
            secure_virtual_hosts: BTreeMap::new(),
            fallback_secret: None,
            tcp_proxy: None,
            http_filters: Vec::new(),
            routes: None,
            admin_paths: Vec::new(),
            connection_limited: false,
            metrics_tls: false,
            extensions: HttpExtensions::default(),
        }
    }

    /// A plain TCP listener; a source sets its `tcp_proxy`.
    pub fn tcp(name: &str, address: &str, port: u16) -> Listener {
        Listener::new(name, address, port, Protocol::Tcp)
    }

    /// A UDP listener; a source sets its `tcp_proxy` (where datagrams go).
    pub fn udp(name: &str, address: &str, port: u16) -> Listener {
        Listener::new(name, address, port, Protocol::Udp)
    }

    /// A plain HTTP listener with Contour's filters.
    pub fn http(name: &str, address: &str, port: u16) -> Listener {
        Listener {
            http_filters: HttpFilter::CONTOUR.to_vec(),
            ..Listener::new(name, address, port, Protocol::Http)
        }
    }

    /// An HTTPS listener with Contour's filters.
    pub fn https(name: &str, address: &str, port: u16, routes: RouteNames) -> Listener {
        Listener {
            http_filters: HttpFilter::CONTOUR.to_vec(),
            routes: Some(routes),
            ..Listener::new(name, address, port, Protocol::Https)
        }
    }

    /// Envoy's readiness and stats (Contour's `stats-health`).
    pub fn stats(name: &str, address: &str, port: u16) -> Listener {
        Listener::admin_view(
            name,
            address,
            port,
            &["/ready", "/stats", "/stats/prometheus"],
        )
    }

    /// Envoy's stats only (Contour's `stats`, beside a `health` listener), over TLS
    /// with `metrics_tls`.
    pub fn stats_only(name: &str, address: &str, port: u16, metrics_tls: bool) -> Listener {
        Listener {
            metrics_tls,
            ..Listener::admin_view(name, address, port, &["/stats", "/stats/prometheus"])
        }
    }

    /// Envoy's readiness only (Contour's `health`).
    pub fn health(name: &str, address: &str, port: u16) -> Listener {
        Listener::admin_view(name, address, port, &["/ready"])
    }

    /// Envoy admin's read-only pages (Contour's `envoy-admin`, on `network.admin-port`).
    pub fn admin(name: &str, address: &str, port: u16) -> Listener {
        Listener::admin_view(
            name,
            address,
            port,
            &[
                "/certs",
                "/clusters",
                "/listeners",
                "/config_dump",
                "/memory",
                "/ready",
                "/runtime",
                "/server_info",
                "/stats",
                "/stats/prometheus",
                "/stats/recentlookups",
            ],
        )
    }

    /// Envoy's readiness under the global connection limit (Contour's
    /// `omEnforcedHealthListener`).
    pub fn om_enforced_health(name: &str, address: &str, port: u16) -> Listener {
        Listener {
            connection_limited: true,
            ..Listener::admin_view(name, address, port, &["/ready"])
        }
    }

    fn admin_view(name: &str, address: &str, port: u16, paths: &[&str]) -> Listener {
        Listener {
            http_filters: vec![HttpFilter::Router],
            admin_paths: paths.iter().map(|p| p.to_string()).collect(),
            ..Listener::new(name, address, port, Protocol::Stats)
        }
    }

    /// The listener as it is before any source writes to it: the same name, address,
    /// protocol and filters, and no virtual hosts.
    pub fn empty(&self) -> Listener {
        Listener {
            name: self.name.clone(),
            address: self.address.clone(),
            port: self.port,
            protocol: self.protocol,
            virtual_hosts: BTreeMap::new(),
            secure_virtual_hosts: BTreeMap::new(),
            fallback_secret: None,
            tcp_proxy: None,
            http_filters: self.http_filters.clone(),
            routes: self.routes.clone(),
            admin_paths: self.admin_paths.clone(),
            connection_limited: self.connection_limited,
            metrics_tls: self.metrics_tls,
            extensions: self.extensions.clone(),
        }
    }

    /// Whether two listeners differ only in what sources wrote to them.
    pub fn same_shape(&self, other: &Listener) -> bool {
        self.name == other.name
            && self.address == other.address
            && self.port == other.port
            && self.protocol == other.protocol
            && self.http_filters == other.http_filters
            && self.routes == other.routes
            && self.admin_paths == other.admin_paths
            && self.connection_limited == other.connection_limited
            && self.metrics_tls == other.metrics_tls
            && self.extensions == other.extensions
    }

    /// The name of a secure virtual host's RouteConfiguration.
    pub fn route_config_name(&self, fqdn: &str) -> String {
        let prefix = self
            .routes
            .as_ref()
            .map_or(self.name.as_str(), |r| &r.prefix);
        format!("{prefix}/{fqdn}")
    }

    /// The clusters this listener's virtual hosts (or its TCP proxy) send to.
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        let plain = self
            .virtual_hosts
            .values()
            .flat_map(VirtualHost::cluster_names);
        let secure = self
            .secure_virtual_hosts
            .values()
            .flat_map(SecureVirtualHost::cluster_names);
        let tcp = self
            .tcp_proxy
            .iter()
            .flat_map(|t| t.clusters.iter().map(|c| c.cluster.as_str()));
        plain.chain(secure).chain(tcp)
    }

    /// The FQDNs of its virtual hosts, plain and secure.
    pub fn fqdns(&self) -> impl Iterator<Item = &String> {
        self.virtual_hosts
            .keys()
            .chain(self.secure_virtual_hosts.keys())
    }
}

static NO_VHOSTS: BTreeMap<String, VirtualHost> = BTreeMap::new();
static NO_SECURE_VHOSTS: BTreeMap<String, SecureVirtualHost> = BTreeMap::new();

impl Ir {
    /// An IR with these listeners, as yet without virtual hosts.
    pub fn with_listeners(listeners: impl IntoIterator<Item = Listener>) -> Ir {
        Ir {
            listeners: listeners.into_iter().map(|l| (l.name.clone(), l)).collect(),
            ..Ir::default()
        }
    }

    /// The plain virtual hosts of `listener` (none when there is no such listener).
    pub fn virtual_hosts(&self, listener: &str) -> &BTreeMap<String, VirtualHost> {
        self.listeners
            .get(listener)
            .map_or(&NO_VHOSTS, |l| &l.virtual_hosts)
    }

    /// The secure virtual hosts of `listener` (none when there is no such listener).
    pub fn secure_virtual_hosts(&self, listener: &str) -> &BTreeMap<String, SecureVirtualHost> {
        self.listeners
            .get(listener)
            .map_or(&NO_SECURE_VHOSTS, |l| &l.secure_virtual_hosts)
    }

    /// The plain virtual hosts of `listener`, to change; `None` when there is no such
    /// listener.
    pub fn virtual_hosts_mut(
        &mut self,
        listener: &str,
    ) -> Option<&mut BTreeMap<String, VirtualHost>> {
        self.listeners
            .get_mut(listener)
            .map(|l| &mut l.virtual_hosts)
    }

    /// The secure virtual hosts of `listener`, to change; `None` when there is no such
    /// listener.
    pub fn secure_virtual_hosts_mut(
        &mut self,
        listener: &str,
    ) -> Option<&mut BTreeMap<String, SecureVirtualHost>> {
        self.listeners
            .get_mut(listener)
            .map(|l| &mut l.secure_virtual_hosts)
    }

    /// The virtual hosts of `fqdn` on every listener, plain and secure (a secure one's
    /// HTTP side), to change what they do.
    pub fn virtual_hosts_of_mut<'a>(
        &'a mut self,
        fqdn: &'a str,
    ) -> impl Iterator<Item = &'a mut VirtualHost> + 'a {
        self.listeners.values_mut().flat_map(move |l| {
            let secure = l.secure_virtual_hosts.get_mut(fqdn).map(|s| &mut s.http);
            l.virtual_hosts.get_mut(fqdn).into_iter().chain(secure)
        })
    }

    /// How many virtual hosts the listeners hold, plain and secure.
    pub fn vhost_count(&self) -> usize {
        self.listeners
            .values()
            .map(|l| l.virtual_hosts.len() + l.secure_virtual_hosts.len())
            .sum()
    }

    /// Every FQDN any listener serves.
    pub fn fqdns(&self) -> BTreeSet<&String> {
        self.listeners.values().flat_map(Listener::fqdns).collect()
    }

    /// Adds a route to a vhost of an HTTP listener (made on first use); a route with an
    /// identical match replaces the earlier one, as Contour does (later sources win).
    /// Returns false when there is no such listener.
    pub fn add_route(&mut self, listener: &str, fqdn: &str, route: Route) -> bool {
        let Some(vhosts) = self.virtual_hosts_mut(listener) else {
            return false;
        };
        if !vhosts.contains_key(fqdn) {
            vhosts.insert(fqdn.to_string(), VirtualHost::new(fqdn));
        }
        if let Some(vhost) = vhosts.get_mut(fqdn) {
            vhost.routes.insert(route);
        }
        true
    }

    /// Adds a route to a secure vhost, which must exist (`false` when it does not).
    pub fn add_secure_route(&mut self, listener: &str, fqdn: &str, route: Route) -> bool {
        let vhost = self
            .secure_virtual_hosts_mut(listener)
            .and_then(|v| v.get_mut(fqdn));
        match vhost {
            Some(vhost) => {
                vhost.http.routes.insert(route);
                true
            }
            None => false,
        }
    }

    /// Serves a certificate over SDS under its SDS name (once, however many vhosts use it).
    pub fn add_secret(&mut self, sds_name: &str, secret: ServedSecret) {
        if !self.secrets.contains_key(sds_name) {
            self.secrets.insert(sds_name.to_string(), secret);
        }
    }

    /// Adds the cluster of an extension service (see [`Ir::extension_clusters`]).
    pub fn add_extension_cluster(&mut self, cluster: Cluster) {
        self.extension_clusters
            .entry(cluster.name.clone())
            .or_insert(cluster);
    }

    pub fn add_cluster(&mut self, cluster: Cluster) {
        self.clusters.entry(cluster.name.clone()).or_insert(cluster);
    }

    /// Gives every listener of HTTP (plain and HTTPS) the IR's [`Ir::extensions`].
    pub fn spread_extensions(&mut self) {
        for listener in self.listeners.values_mut() {
            if matches!(listener.protocol, Protocol::Http | Protocol::Https) {
                listener.extensions.clone_from(&self.extensions);
            }
        }
    }

    /// Drops clusters no route forwards to.
    pub fn prune_clusters(&mut self) {
        let used: BTreeSet<&str> = self
            .listeners
            .values()
            .flat_map(Listener::cluster_names)
            .collect();
        let keep: BTreeSet<String> = used.into_iter().map(str::to_string).collect();
        self.clusters.retain(|name, _| keep.contains(name));
    }
}
