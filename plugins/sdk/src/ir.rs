//! The intermediate representation: what Envoy should do, with no Kubernetes or Envoy
//! types inside. Ordered maps keep it deterministic: the same objects give the same IR.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::object::ObjectKey;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ir {
    /// Virtual hosts served on the plain HTTP listener, by lower-cased FQDN (`*` for any).
    pub virtual_hosts: BTreeMap<String, VirtualHost>,
    /// Upstream clusters by name.
    pub clusters: BTreeMap<String, Cluster>,
}

impl Ir {
    /// Adds a route to a vhost; a route with an identical match replaces the earlier one,
    /// as Contour does (later sources win).
    pub fn add_route(&mut self, fqdn: &str, route: Route) {
        let vhost = self
            .virtual_hosts
            .entry(fqdn.to_string())
            .or_insert_with(|| VirtualHost {
                fqdn: fqdn.to_string(),
                routes: BTreeMap::new(),
            });
        vhost.routes.insert(route.matcher.clone(), route);
    }

    pub fn add_cluster(&mut self, cluster: Cluster) {
        self.clusters.entry(cluster.name.clone()).or_insert(cluster);
    }

    /// Drops clusters no route forwards to.
    pub fn prune_clusters(&mut self) {
        let used: std::collections::BTreeSet<&str> = self
            .virtual_hosts
            .values()
            .flat_map(|v| v.routes.values())
            .flat_map(|r| match &r.action {
                RouteAction::Forward(w) => w.iter().map(|c| c.cluster.as_str()).collect(),
                RouteAction::DirectResponse { .. } => Vec::new(),
            })
            .collect();
        let keep: std::collections::BTreeSet<String> =
            used.into_iter().map(str::to_string).collect();
        self.clusters.retain(|name, _| keep.contains(name));
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VirtualHost {
    pub fqdn: String,
    /// Routes keyed by their match; Envoy order is applied when translating.
    #[serde(serialize_with = "routes_as_list")]
    pub routes: BTreeMap<RouteMatch, Route>,
}

fn routes_as_list<S: serde::Serializer>(
    routes: &BTreeMap<RouteMatch, Route>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(routes.values())
}

/// What a request must look like to take a route.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RouteMatch {
    pub path: PathMatch,
    /// A regex the `:authority` must match (wildcard hosts match exactly one label).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority_regex: Option<String>,
    /// Header conditions, all of which must hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
    /// Query parameter conditions, all of which must hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<QueryMatch>,
}

impl RouteMatch {
    /// A match on the path alone.
    pub fn path(path: PathMatch) -> RouteMatch {
        RouteMatch {
            path,
            authority_regex: None,
            headers: Vec::new(),
            query: Vec::new(),
        }
    }
}

/// How a string is compared.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StringMatch {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    /// An RE2 regex, already checked.
    Regex(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct HeaderMatch {
    /// Lower-cased header name.
    pub name: String,
    /// `None`: the header must be present (or, inverted, absent).
    pub value: Option<StringMatch>,
    pub ignore_case: bool,
    /// Negates the whole match (`notpresent`, `notexact`, `notcontains`).
    pub invert: bool,
    /// A missing header is compared as the empty string.
    pub treat_missing_as_empty: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct QueryMatch {
    pub name: String,
    /// `None`: the parameter must be present.
    pub value: Option<StringMatch>,
    pub ignore_case: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathMatch {
    /// String prefix: `/foo` matches `/foobar` (HTTPProxy, Ingress ImplementationSpecific).
    Prefix(String),
    /// Segment prefix: `/foo` matches `/foo` and `/foo/bar`, not `/foobar` (Ingress Prefix).
    SegmentPrefix(String),
    Exact(String),
    /// An RE2 regex over the whole path.
    Regex(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    pub matcher: RouteMatch,
    pub action: RouteAction,
    /// The object this route came from.
    pub source: ObjectKey,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteAction {
    /// Forward to clusters, split by weight.
    Forward(Vec<WeightedCluster>),
    /// Answer directly (503 when every backend is missing).
    DirectResponse { status: u32, body: Option<String> },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightedCluster {
    pub cluster: String,
    pub weight: u32,
}

/// An upstream: one port of one Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cluster {
    pub name: String,
    pub namespace: String,
    pub service: String,
    pub port: i32,
    /// The Service port's name (`""` when unnamed): endpoints are matched by it.
    pub port_name: String,
    /// The ClusterLoadAssignment name (`ns/svc/portname`).
    pub eds_name: String,
    /// `ns_svc_port`, Envoy's stat name for the cluster.
    pub alt_stat_name: String,
}
