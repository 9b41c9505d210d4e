//! Virtual hosts and their routes: what requests match and what happens to them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::object::ObjectKey;

use super::{CookieRewrite, Cors, HeadersPolicy, IpFilter, LocalRateLimit, Redirect, RoutePolicy};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VirtualHost {
    pub fqdn: String,
    /// Client address filter of the whole vhost; a route's own filter overrides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_filter: Option<IpFilter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<Box<Cors>>,
    /// A route's own rate limit overrides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Box<LocalRateLimit>>,
    /// Authorization, JWT providers and global rate limits; `None` for most vhosts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<super::VhostExtensions>>,
    /// Routes keyed by their match; Envoy order is applied when translating.
    pub routes: Routes,
}

/// A vhost's routes, one per match, in the order of their matches. Most vhosts have a
/// few routes: they are a sorted vector of boxed routes (a B-tree node, eleven slots of
/// match and route, costs more than a kilobyte). A vhost with many routes keeps them in
/// a B-tree, so that adding routes out of order stays O(log n) each.
#[derive(Debug, Clone)]
pub struct Routes(Table);

#[derive(Debug, Clone)]
#[expect(
    clippy::vec_box,
    reason = "a route is 200 bytes and a vector starts with four slots: boxed, two routes take 450 bytes instead of 800, and an insert moves pointers"
)]
enum Table {
    Few(Vec<Box<Route>>),
    Many(BTreeMap<RouteMatch, Box<Route>>),
}

/// Above this many routes a vhost's routes go into a B-tree.
const FEW_ROUTES: usize = 32;

impl Default for Routes {
    fn default() -> Self {
        Routes(Table::Few(Vec::new()))
    }
}

impl PartialEq for Routes {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.values().eq(other.values())
    }
}

impl Serialize for Routes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.values())
    }
}

/// The routes of a vhost, in the order of their matches.
pub enum RouteValues<'a> {
    Few(std::slice::Iter<'a, Box<Route>>),
    Many(std::collections::btree_map::Values<'a, RouteMatch, Box<Route>>),
}

impl<'a> Iterator for RouteValues<'a> {
    type Item = &'a Route;

    fn next(&mut self) -> Option<&'a Route> {
        match self {
            RouteValues::Few(it) => it.next().map(|r| &**r),
            RouteValues::Many(it) => it.next().map(|r| &**r),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            RouteValues::Few(it) => it.size_hint(),
            RouteValues::Many(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for RouteValues<'_> {}

/// The routes of a vhost, to change what they do.
pub enum RouteValuesMut<'a> {
    Few(std::slice::IterMut<'a, Box<Route>>),
    Many(std::collections::btree_map::ValuesMut<'a, RouteMatch, Box<Route>>),
}

impl<'a> Iterator for RouteValuesMut<'a> {
    type Item = &'a mut Route;

    fn next(&mut self) -> Option<&'a mut Route> {
        match self {
            RouteValuesMut::Few(it) => it.next().map(|r| &mut **r),
            RouteValuesMut::Many(it) => it.next().map(|r| &mut **r),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            RouteValuesMut::Few(it) => it.size_hint(),
            RouteValuesMut::Many(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for RouteValuesMut<'_> {}

impl Routes {
    /// Adds a route; one with an equal match is replaced and returned.
    pub fn insert(&mut self, route: Route) -> Option<Box<Route>> {
        let few = match &mut self.0 {
            Table::Many(map) => return map.insert(route.matcher.clone(), Box::new(route)),
            Table::Few(few) => few,
        };
        match few.binary_search_by(|r| r.matcher.cmp(&route.matcher)) {
            Ok(i) => Some(std::mem::replace(&mut few[i], Box::new(route))),
            Err(i) if few.len() < FEW_ROUTES => {
                few.insert(i, Box::new(route));
                None
            }
            Err(_) => {
                let mut map: BTreeMap<RouteMatch, Box<Route>> = std::mem::take(few)
                    .into_iter()
                    .map(|r| (r.matcher.clone(), r))
                    .collect();
                map.insert(route.matcher.clone(), Box::new(route));
                self.0 = Table::Many(map);
                None
            }
        }
    }

    pub fn get(&self, matcher: &RouteMatch) -> Option<&Route> {
        match &self.0 {
            Table::Few(few) => few
                .binary_search_by(|r| r.matcher.cmp(matcher))
                .ok()
                .map(|i| &*few[i]),
            Table::Many(map) => map.get(matcher).map(|r| &**r),
        }
    }

    /// The routes in the order of their matches.
    pub fn values(&self) -> RouteValues<'_> {
        match &self.0 {
            Table::Few(few) => RouteValues::Few(few.iter()),
            Table::Many(map) => RouteValues::Many(map.values()),
        }
    }

    /// The routes, to change what they do; a route's `matcher` must stay as it is (it
    /// orders them).
    pub fn values_mut(&mut self) -> RouteValuesMut<'_> {
        match &mut self.0 {
            Table::Few(few) => RouteValuesMut::Few(few.iter_mut()),
            Table::Many(map) => RouteValuesMut::Many(map.values_mut()),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &RouteMatch> {
        self.values().map(|r| &r.matcher)
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Table::Few(few) => few.len(),
            Table::Many(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl VirtualHost {
    /// The clusters this vhost's routes send to (forwarded and mirrored traffic), and
    /// those its JWT providers fetch keys from.
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        let jwks = self.extensions.iter().flat_map(|e| {
            e.jwt_providers
                .iter()
                .filter_map(super::JwtProvider::cluster)
        });
        self.routes
            .values()
            .flat_map(|r| {
                let forwarded: &[WeightedCluster] = match &r.action {
                    RouteAction::Forward(w) => w,
                    RouteAction::DirectResponse { .. } | RouteAction::Redirect(_) => &[],
                };
                let mirrored = r
                    .policy()
                    .mirrors
                    .iter()
                    .filter(move |_| !forwarded.is_empty());
                forwarded
                    .iter()
                    .map(|c| c.cluster.as_str())
                    .chain(mirrored.map(|m| m.cluster.as_str()))
            })
            .chain(jwks)
    }

    /// Its authorization, JWT providers and rate limits (the defaults when none).
    pub fn extensions(&self) -> &super::VhostExtensions {
        static DEFAULT: std::sync::LazyLock<super::VhostExtensions> =
            std::sync::LazyLock::new(super::VhostExtensions::default);
        self.extensions.as_deref().unwrap_or(&DEFAULT)
    }

    pub fn new(fqdn: &str) -> VirtualHost {
        VirtualHost {
            fqdn: fqdn.to_string(),
            ip_filter: None,
            cors: None,
            rate_limit: None,
            extensions: None,
            routes: Routes::default(),
        }
    }
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
    /// What happens to a request on its way (only meaningful for `Forward`); `None`
    /// for the default, which most routes have (a policy is large).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Box<RoutePolicy>>,
    /// Among routes whose matches are equally specific, which goes first (older first,
    /// then by source, then by rule): Gateway API's order across routes. `None` (every
    /// HTTPProxy and Ingress route) leaves ties to the order of the matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tie: Option<Box<RouteTie>>,
}

/// A route's place among equally specific ones (see [`Route::tie`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RouteTie {
    /// The source's creation time (seconds since the epoch; `None`, unknown, first).
    pub created: Option<i64>,
    /// The position of its rule in the source.
    pub rule: u32,
}

impl Route {
    /// The route's policy (the default when it has none of its own).
    pub fn policy(&self) -> &RoutePolicy {
        static DEFAULT: std::sync::LazyLock<RoutePolicy> =
            std::sync::LazyLock::new(RoutePolicy::default);
        self.policy.as_deref().unwrap_or(&DEFAULT)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteAction {
    /// Forward to clusters, split by weight.
    Forward(Vec<WeightedCluster>),
    /// Answer directly (503 when every backend is missing).
    DirectResponse { status: u32, body: Option<String> },
    /// Answer with a redirect.
    Redirect(Box<Redirect>),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WeightedCluster {
    pub cluster: String,
    pub weight: u32,
    /// Header changes for requests sent to this cluster.
    #[serde(skip_serializing_if = "HeadersPolicy::is_empty")]
    pub request_headers: HeadersPolicy,
    #[serde(skip_serializing_if = "HeadersPolicy::is_empty")]
    pub response_headers: HeadersPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_rewrite: Option<String>,
    /// Cookie rewrites for responses from this cluster (override the route's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cookie_rewrites: Vec<CookieRewrite>,
}

impl WeightedCluster {
    /// Divides weights adding up to more than `u32::MAX`, which Envoy refuses (the whole
    /// response with them), down to the same split; each share stays at least 1.
    pub fn fit_weights(weighted: &mut [WeightedCluster]) {
        let total: u64 = weighted.iter().map(|w| u64::from(w.weight)).sum();
        // Each share rounds down but stays at least 1: room for one more per cluster.
        let room = u64::from(u32::MAX)
            .saturating_sub(weighted.len() as u64)
            .max(1);
        if total > u64::from(u32::MAX) {
            let divisor = total.div_ceil(room);
            for w in weighted.iter_mut() {
                w.weight = u32::try_from((u64::from(w.weight) / divisor).max(1)).unwrap_or(1);
            }
        }
    }
}

#[cfg(test)]
mod tests;
