//! The intermediate representation: what Envoy should do, with no Kubernetes or Envoy
//! types inside. Ordered maps keep it deterministic: the same objects give the same IR.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::object::ObjectKey;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ir {
    /// Virtual hosts served on the plain HTTP listener, by lower-cased FQDN (`*` for any).
    pub virtual_hosts: BTreeMap<String, VirtualHost>,
    /// Virtual hosts served on the HTTPS listener (one SNI filter chain each), by FQDN.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secure_virtual_hosts: BTreeMap<String, SecureVirtualHost>,
    /// Upstream clusters by name.
    pub clusters: BTreeMap<String, Cluster>,
    /// Certificates (with their keys) served over SDS, by SDS name; only what a served
    /// vhost uses. Serialized as names and fingerprints, never as key material.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, ServedSecret>,
    /// The SDS name of the fallback certificate, when a served vhost enables it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_secret: Option<String>,
}

/// A vhost on the HTTPS listener: TLS terminated with a certificate, or passed through.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecureVirtualHost {
    pub fqdn: String,
    /// `None`: TLS passthrough; Envoy only reads the SNI and forwards the bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<DownstreamTls>,
    /// TCP forwarding instead of HTTP routing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_proxy: Option<TcpProxy>,
    /// The HTTP routes and vhost policies (unused with `tcp_proxy`).
    pub http: VirtualHost,
    /// Also served to clients without SNI, with the fallback certificate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
}

impl SecureVirtualHost {
    /// The clusters this vhost sends to: its routes', or its TCP proxy's.
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        self.http.cluster_names().chain(
            self.tcp_proxy
                .iter()
                .flat_map(|t| t.clusters.iter().map(|c| c.cluster.as_str())),
        )
    }

    pub fn new(fqdn: &str, tls: Option<DownstreamTls>) -> SecureVirtualHost {
        SecureVirtualHost {
            fqdn: fqdn.to_string(),
            tls,
            tcp_proxy: None,
            http: VirtualHost::new(fqdn),
            fallback: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl TlsVersion {
    /// `"1.2"` or `"1.3"`; anything else is `None`.
    pub fn parse(s: &str) -> Option<TlsVersion> {
        match s.trim() {
            "1.2" => Some(TlsVersion::V1_2),
            "1.3" => Some(TlsVersion::V1_3),
            _ => None,
        }
    }
}

/// How the HTTPS listener terminates TLS for one vhost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownstreamTls {
    /// The SDS name of the certificate (a key of `Ir::secrets`).
    pub secret: String,
    /// Versions the vhost asks for; the global settings bound them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_version: Option<TlsVersion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_version: Option<TlsVersion>,
    /// HTTP/2 and HTTP/1.1 are offered over ALPN (not for TCP proxying).
    pub alpn_http: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_validation: Option<Box<ClientValidation>>,
}

/// Downstream client certificates (mTLS).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientValidation {
    /// Trusted CAs; `None` only when verification is skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PemBundle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crl: Option<PemBundle>,
    pub crl_only_verify_leaf: bool,
    /// Ask for a certificate but accept any (or none, with `optional`).
    pub skip_verification: bool,
    /// Accept clients without a certificate.
    pub optional: bool,
    /// Parts of the client certificate forwarded in `X-Forwarded-Client-Cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardClientCertificate>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ForwardClientCertificate {
    pub subject: bool,
    pub cert: bool,
    pub chain: bool,
    pub dns: bool,
    pub uri: bool,
}

/// Public PEM (CA certificates, CRLs); serialized as its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBundle {
    pub pem: String,
    pub fingerprint: String,
}

impl Serialize for PemBundle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("sha256:{}", self.fingerprint))
    }
}

impl From<crate::secret::PemBundle> for PemBundle {
    fn from(b: crate::secret::PemBundle) -> PemBundle {
        PemBundle {
            pem: b.pem,
            fingerprint: b.fingerprint,
        }
    }
}

/// TCP forwarding of a secure vhost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TcpProxy {
    pub clusters: Vec<WeightedCluster>,
    pub source: ObjectKey,
}

/// A certificate and key Envoy gets over SDS.
#[derive(Clone, PartialEq, Eq)]
pub struct ServedSecret {
    pub namespace: String,
    pub name: String,
    pub certificate: std::sync::Arc<crate::secret::TlsCertificate>,
}

impl std::fmt::Debug for ServedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("certificate", &self.certificate)
            .finish()
    }
}

impl Serialize for ServedSecret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ServedSecret", 4)?;
        st.serialize_field("namespace", &self.namespace)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field(
            "fingerprint",
            &format!("sha256:{}", self.certificate.fingerprint),
        )?;
        st.serialize_field("names", &self.certificate.names)?;
        st.end()
    }
}

impl Ir {
    /// Adds a route to a vhost; a route with an identical match replaces the earlier one,
    /// as Contour does (later sources win).
    pub fn add_route(&mut self, fqdn: &str, route: Route) {
        if !self.virtual_hosts.contains_key(fqdn) {
            self.virtual_hosts
                .insert(fqdn.to_string(), VirtualHost::new(fqdn));
        }
        if let Some(vhost) = self.virtual_hosts.get_mut(fqdn) {
            vhost.routes.insert(route);
        }
    }

    /// Adds a route to a secure vhost, which must exist (`false` when it does not).
    pub fn add_secure_route(&mut self, fqdn: &str, route: Route) -> bool {
        match self.secure_virtual_hosts.get_mut(fqdn) {
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

    pub fn add_cluster(&mut self, cluster: Cluster) {
        self.clusters.entry(cluster.name.clone()).or_insert(cluster);
    }

    /// Drops clusters no route forwards to.
    pub fn prune_clusters(&mut self) {
        let used: std::collections::BTreeSet<&str> = self
            .virtual_hosts
            .values()
            .flat_map(VirtualHost::cluster_names)
            .chain(
                self.secure_virtual_hosts
                    .values()
                    .flat_map(SecureVirtualHost::cluster_names),
            )
            .collect();
        let keep: std::collections::BTreeSet<String> =
            used.into_iter().map(str::to_string).collect();
        self.clusters.retain(|name, _| keep.contains(name));
    }
}

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
    /// The clusters this vhost's routes send to (forwarded and mirrored traffic).
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        self.routes.values().flat_map(|r| {
            let forwarded: &[WeightedCluster] = match &r.action {
                RouteAction::Forward(w) => w,
                RouteAction::DirectResponse { .. } | RouteAction::Redirect(_) => &[],
            };
            let mirrored = r
                .policy()
                .mirror
                .iter()
                .filter(move |_| !forwarded.is_empty());
            forwarded
                .iter()
                .map(|c| c.cluster.as_str())
                .chain(mirrored.map(|m| m.cluster.as_str()))
        })
    }

    pub fn new(fqdn: &str) -> VirtualHost {
        VirtualHost {
            fqdn: fqdn.to_string(),
            ip_filter: None,
            cors: None,
            rate_limit: None,
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

/// Headers to set (overwriting) and to remove. Values are already escaped for Envoy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeadersPolicy {
    pub set: BTreeMap<String, String>,
    pub remove: Vec<String>,
}

impl HeadersPolicy {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoutePolicy {
    #[serde(skip_serializing_if = "HeadersPolicy::is_empty")]
    pub request_headers: HeadersPolicy,
    #[serde(skip_serializing_if = "HeadersPolicy::is_empty")]
    pub response_headers: HeadersPolicy,
    /// A literal `Host` for upstream requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_rewrite: Option<String>,
    /// Replaces the matched path prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_rewrite: Option<String>,
    /// Whole-response timeout; zero disables it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<std::time::Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<std::time::Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    pub websockets: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Mirror>,
    /// Overrides the vhost's IP filter for this route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_filter: Option<IpFilter>,
    /// Hash policies of a RingHash route.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hash_policies: Vec<HashPolicy>,
    /// Overrides the vhost's local rate limit for this route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<LocalRateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_redirect: Option<InternalRedirect>,
    /// `Set-Cookie` attributes rewritten in responses, by cookie name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cookie_rewrites: Vec<CookieRewrite>,
}

/// Validated cookie attribute values; they reach Envoy as data, never as code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CookieRewrite {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
}

/// A token bucket shared by every request to a vhost or route, per Envoy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalRateLimit {
    pub requests: u32,
    pub burst: u32,
    pub fill_interval_seconds: u64,
    pub status: u32,
    /// Headers added to limited responses, already escaped.
    pub response_headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InternalRedirect {
    pub max_internal_redirects: u32,
    pub response_codes: Vec<u32>,
    pub allow_cross_scheme: bool,
    /// Only redirects from http to https (Contour's `SafeOnly`).
    pub safe_cross_scheme_only: bool,
    pub deny_repeated_route: bool,
}

/// Cross-origin requests a vhost answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cors {
    /// Exact origins, or RE2 regexes (already checked).
    pub allow_origin: Vec<StringMatch>,
    pub allow_methods: String,
    pub allow_headers: String,
    pub expose_headers: String,
    pub max_age_seconds: Option<u64>,
    pub allow_credentials: bool,
    pub allow_private_network: bool,
}

/// Who may reach a vhost or route, by client address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpFilter {
    /// Allow only the listed ranges (else: deny the listed ranges).
    pub allow: bool,
    pub rules: Vec<IpRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpRule {
    pub address: String,
    pub prefix_len: u32,
    /// Match the client address from `X-Forwarded-For` rather than the peer's.
    pub remote: bool,
}

impl RoutePolicy {
    pub fn is_default(&self) -> bool {
        *self == RoutePolicy::default()
    }

    /// The policy as a route holds it: `None` when it is the default.
    pub fn boxed(self) -> Option<Box<RoutePolicy>> {
        (!self.is_default()).then(|| Box::new(self))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retry {
    /// Envoy `retry_on` conditions, comma-joined.
    pub retry_on: String,
    pub num_retries: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<std::time::Duration>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retriable_status_codes: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mirror {
    pub cluster: String,
    /// Share of requests mirrored, 1–100.
    pub percent: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Redirect {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// 301 or 302.
    pub status: u32,
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
    /// Settings that change the Envoy cluster; they are part of its name's hash.
    #[serde(skip_serializing_if = "ClusterOptions::is_default")]
    pub options: ClusterOptions,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterOptions {
    pub lb_policy: LbPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<UpstreamProtocol>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<Box<HealthCheck>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuit_breakers: Option<Box<CircuitBreakers>>,
    /// New endpoints get traffic gradually (round robin and least request only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<Box<SlowStart>>,
    /// Upstream connections idle this long are closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_connection_timeout: Option<std::time::Duration>,
    /// A TCP connect health check (`tcpproxy.healthCheckPolicy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_health_check: Option<Box<TcpHealthCheck>>,
    /// Server name sent upstream over TLS (a route's literal Host rewrite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_validation: Option<Box<UpstreamValidation>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TcpHealthCheck {
    pub interval_seconds: u64,
    pub timeout_seconds: u64,
    pub unhealthy_threshold: u32,
    pub healthy_threshold: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlowStart {
    pub window: std::time::Duration,
    /// A positive decimal, kept as written (validated) so options stay `Eq`.
    pub aggression: String,
    pub min_weight_percent: u32,
}

impl ClusterOptions {
    pub fn is_default(&self) -> bool {
        *self == ClusterOptions::default()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LbPolicy {
    #[default]
    RoundRobin,
    LeastRequest,
    Random,
    /// Consistent hashing on the route's hash policies (Cookie, RequestHash).
    RingHash,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/2 over TLS (Contour's `h2`).
    H2,
    /// HTTP/2 in clear text.
    H2c,
    /// HTTP/1.1 over TLS.
    Tls,
}

impl UpstreamProtocol {
    pub fn is_tls(self) -> bool {
        matches!(self, UpstreamProtocol::H2 | UpstreamProtocol::Tls)
    }

    pub fn is_http2(self) -> bool {
        matches!(self, UpstreamProtocol::H2 | UpstreamProtocol::H2c)
    }
}

/// How Envoy checks an upstream's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamValidation {
    pub ca: PemBundle,
    /// The certificate must carry one of these DNS SANs.
    pub subject_names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthCheck {
    pub path: String,
    pub host: String,
    pub interval_seconds: u64,
    pub timeout_seconds: u64,
    pub unhealthy_threshold: u32,
    pub healthy_threshold: u32,
    /// `[start, end)` ranges of healthy statuses; empty: 200 only.
    pub expected_statuses: Vec<(i64, i64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CircuitBreakers {
    pub max_connections: Option<u32>,
    pub max_pending_requests: Option<u32>,
    pub max_requests: Option<u32>,
    pub max_retries: Option<u32>,
    pub per_host_max_connections: Option<u32>,
}

/// How a RingHash route picks the hash of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HashPolicy {
    /// Contour's session affinity cookie `X-Contour-Session-Affinity`.
    Cookie,
    Header {
        name: String,
        terminal: bool,
    },
    QueryParameter {
        name: String,
        terminal: bool,
    },
    SourceIp {
        terminal: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    fn route(path: &str, status: u32) -> Route {
        Route {
            matcher: RouteMatch::path(PathMatch::Prefix(path.to_string())),
            action: RouteAction::DirectResponse { status, body: None },
            source: ObjectKey::new(Kind::HTTPProxy, "ns", "p"),
            policy: None,
        }
    }

    /// Routes added in any order read back in the order of their matches, one per match
    /// (the later replaces the earlier), whether a vhost has a few or many.
    #[test]
    fn routes_are_ordered_by_match_and_replaced_by_an_equal_one() {
        for count in [3, FEW_ROUTES, FEW_ROUTES + 1, 200] {
            let mut routes = Routes::default();
            let mut reference = BTreeMap::new();
            for i in (0..count).rev().chain([1, 0]) {
                let replaced = routes.insert(route(&format!("/{i:03}"), 200 + i as u32));
                let previous = reference.insert(format!("/{i:03}"), 200 + i as u32);
                assert_eq!(replaced.is_some(), previous.is_some(), "{count} routes");
            }
            let read: Vec<(String, u32)> = routes
                .values()
                .map(|r| match (&r.matcher.path, &r.action) {
                    (PathMatch::Prefix(p), RouteAction::DirectResponse { status, .. }) => {
                        (p.clone(), *status)
                    }
                    _ => unreachable!(),
                })
                .collect();
            let expected: Vec<(String, u32)> = reference.into_iter().collect();
            assert_eq!(read, expected, "{count} routes");
            assert_eq!(routes.len(), count);
            let probe = RouteMatch::path(PathMatch::Prefix("/001".to_string()));
            assert!(routes.get(&probe).is_some());
            // The same routes added in order compare equal, however they are held.
            let mut sorted = Routes::default();
            for i in 0..count {
                sorted.insert(route(&format!("/{i:03}"), 200 + i as u32));
            }
            assert_eq!(sorted, routes);
        }
    }
}
