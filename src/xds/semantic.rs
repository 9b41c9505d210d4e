//! The rules Envoy enforces in its code rather than through protoc-gen-validate
//! annotations, for the resources Isobar emits: a resource breaking one is refused (a
//! NACK) as surely as one breaking an annotation. Collected from Envoy's sources (route
//! table and header parser, listener and filter chain manager, HTTP connection manager,
//! cluster factories, EDS, SDS and TLS contexts); each rule says where Envoy keeps it.
//!
//! Only rules whose breach Envoy refuses are checked, and each as narrowly as Envoy
//! checks it: a false alarm here withholds a resource Envoy would have taken. What Envoy
//! accepts (duplicate route or vhost names, STRICT_DNS clusters without endpoints, gaps in
//! EDS priorities) is left alone.

use std::collections::{BTreeMap, BTreeSet};

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{Address, HeaderValueOption, address, data_source};
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
use envoy_types::pb::envoy::config::listener::v3::{
    AdditionalAddress, FilterChainMatch, Listener, filter,
};
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, VirtualHost, route, route_action,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager, http_filter,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{Secret, secret};
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatcher, StringMatcher, string_matcher};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::XdsType;

/// One broken rule: where (field path from the resource) and which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub rule: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.rule)
    }
}

/// Every rule family checked here, by the name each violation carries (the test walks
/// them: each has a resource breaking it).
pub const FAMILIES: &[&str] = &[
    "route.single-wildcard-domain",
    "route.unique-domains",
    "headers.not-modifiable",
    "headers.append-and-append-action",
    "headers.substitution-format",
    "route.one-rewrite",
    "route.weighted-cluster-name",
    "route.weighted-cluster-weights",
    "route.mirror-cluster",
    "route.duplicate-upgrade",
    "route.retry-back-off",
    "route.direct-response-size",
    "regex.re2",
    "regex.ignore-case",
    "listener.address",
    "listener.filter-chains",
    "listener.duplicate-filter-chain-match",
    "listener.partial-wildcard-server-name",
    "listener.unimplemented-match-fields",
    "listener.terminal-filter",
    "hcm.terminal-http-filter",
    "hcm.strip-port",
    "hcm.duplicate-upgrade",
    "cluster.eds-config",
    "cluster.ip-endpoints",
    "cluster.logical-dns-single-host",
    "cluster.health-checks",
    "cluster.per-host-thresholds",
    "cluster.hash-weight-sums",
    "endpoints.cluster-name",
    "endpoints.ip-addresses",
    "endpoints.drop-overloads",
    "secret.certificate",
    "secret.session-ticket-keys",
    "secret.validation-context",
];

/// The rules across the resources of one type (the listener manager's duplicate
/// addresses, the merged route table of VHDS), checked by [`listeners_across`] and
/// [`vhosts_across`].
pub const FAMILIES_ACROSS: &[&str] = &["listener.duplicate-address", "vhds.unique-domains"];

/// Envoy's default cap on a direct response body (`max_direct_response_body_size_bytes`).
const DIRECT_RESPONSE_MAX: usize = 4096;

/// RE2's largest counted repetition (`{n,m}` past it does not compile).
const RE2_REPEAT_MAX: u32 = 1000;

/// The rules `bytes` of type `t` (named `name`) breaks.
pub fn check(t: XdsType, name: &str, bytes: &[u8]) -> Vec<Violation> {
    check_scoped(t, name, bytes, false)
}

/// [`check`] without the rules across a route table's vhosts or a listener's filter
/// chains (`entries_only`): for a resource holding only the vhosts or chains that
/// changed, beside [`check_across`] of the whole.
pub fn check_scoped(t: XdsType, name: &str, bytes: &[u8], entries_only: bool) -> Vec<Violation> {
    let mut out = Rules {
        entries_only,
        ..Rules::default()
    };
    match t {
        XdsType::Route | XdsType::VhdsRoute => {
            if let Ok(table) = RouteConfiguration::decode(bytes) {
                out.route_table(&table, "");
            }
        }
        XdsType::VirtualHost => {
            if let Ok(vhost) = VirtualHost::decode(bytes) {
                out.virtual_host(&vhost, "", DIRECT_RESPONSE_MAX);
            }
        }
        XdsType::Listener => {
            if let Ok(listener) = Listener::decode(bytes) {
                out.listener(&listener);
            }
        }
        XdsType::Cluster => {
            if let Ok(cluster) = Cluster::decode(bytes) {
                out.cluster(&cluster);
            }
        }
        XdsType::Endpoint => {
            if let Ok(cla) = ClusterLoadAssignment::decode(bytes) {
                out.endpoints(&cla, name);
            }
        }
        XdsType::Secret => {
            if let Ok(secret) = Secret::decode(bytes) {
                out.secret(&secret);
            }
        }
        // A scope's own rules are its proto's; the keys of an HTTP listener's scopes
        // are its shard numbers, unique by construction.
        XdsType::Runtime | XdsType::ScopedRoute => {}
    }
    out.found
}

#[derive(Default)]
struct Rules {
    found: Vec<Violation>,
    /// Leave out the rules across vhosts and filter chains.
    entries_only: bool,
}

/// A route table's vhost domains alone (the rest of each vhost skipped undecoded).
#[derive(Clone, PartialEq, prost::Message)]
struct TableDomains {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    virtual_hosts: Vec<VhostDomains>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct VhostDomains {
    #[prost(string, repeated, tag = "2")]
    domains: Vec<String>,
}

/// A listener's filter chain matches alone.
#[derive(Clone, PartialEq, prost::Message)]
struct ListenerChains {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    address: Option<Address>,
    #[prost(message, repeated, tag = "3")]
    filter_chains: Vec<ChainMatch>,
    #[prost(bytes = "vec", optional, tag = "25")]
    default_filter_chain: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ChainMatch {
    #[prost(message, optional, tag = "1")]
    filter_chain_match: Option<FilterChainMatch>,
    #[prost(string, tag = "7")]
    name: String,
}

/// The rules across a route table's vhosts (one `*`, unique domains) or a listener's
/// filter chains (some chain, no two matching alike), from a light decode of the whole.
pub fn check_across(t: XdsType, bytes: &[u8]) -> Vec<Violation> {
    let mut out = Rules::default();
    match t {
        XdsType::Route | XdsType::VhdsRoute => {
            if let Ok(table) = TableDomains::decode(bytes) {
                out.domains(
                    "RouteConfiguration",
                    &table.name,
                    table.virtual_hosts.iter().map(|v| v.domains.as_slice()),
                );
            }
        }
        XdsType::Listener => {
            if let Ok(l) = ListenerChains::decode(bytes) {
                let path = format!("Listener({})", l.name);
                out.some_chain(
                    &path,
                    l.address.as_ref(),
                    l.filter_chains.len(),
                    l.default_filter_chain.is_some(),
                );
                out.distinct_chains(
                    &path,
                    l.filter_chains
                        .iter()
                        .map(|c| (c.name.as_str(), c.filter_chain_match.as_ref())),
                );
            }
        }
        _ => {}
    }
    out.found
}

/// A listener's addresses alone (for the rule across listeners).
#[derive(Clone, PartialEq, prost::Message)]
struct ListenerAddresses {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    address: Option<Address>,
    #[prost(message, optional, tag = "26")]
    bind_to_port: Option<envoy_types::pb::google::protobuf::BoolValue>,
    #[prost(message, repeated, tag = "33")]
    additional_addresses: Vec<AdditionalAddress>,
}

/// The listener manager (listener_manager_impl.cc, `hasDuplicatedAddress`): a listener
/// whose address (of the same socket type) another listener already has is refused,
/// port 0 aside when it binds. `listeners` are `(resource name, bytes)`, those Envoy
/// holds first: each later one sharing an address with an earlier one is flagged.
pub fn listeners_across(listeners: &[(&str, &[u8])]) -> Vec<(String, Violation)> {
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for (resource, bytes) in listeners {
        let Ok(l) = ListenerAddresses::decode(*bytes) else {
            continue;
        };
        let binds = l.bind_to_port.is_none_or(|b| b.value);
        let keys: BTreeSet<String> = l
            .address
            .iter()
            .chain(
                l.additional_addresses
                    .iter()
                    .filter_map(|a| a.address.as_ref()),
            )
            .filter_map(|a| address_key(a, binds))
            .collect();
        let clash = keys.iter().find_map(|k| {
            held.get(k)
                .filter(|other| **other != l.name)
                .map(|o| (k, o))
        });
        if let Some((key, other)) = clash {
            out.push((
                resource.to_string(),
                Violation {
                    path: format!("Listener({}).address", l.name),
                    rule: format!(
                        "listener.duplicate-address: listener {:?} has duplicate address {key} as existing listener {other:?}",
                        l.name
                    ),
                },
            ));
            continue;
        }
        for key in keys {
            held.insert(key, l.name.clone());
        }
    }
    out
}

/// What makes two listener addresses the same to Envoy: socket type, IP and port (a
/// binding listener's port 0 is never the same), or the pipe's path.
fn address_key(a: &Address, binds: bool) -> Option<String> {
    use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
    match a.address.as_ref()? {
        address::Address::SocketAddress(s) => {
            let port = match s.port_specifier {
                Some(PortSpecifier::PortValue(p)) => p,
                _ => return None,
            };
            if port == 0 && binds {
                return None;
            }
            let ip = s
                .address
                .parse::<std::net::IpAddr>()
                .map_or_else(|_| s.address.clone(), |ip| ip.to_string());
            let protocol = if s.protocol == 1 { "udp" } else { "tcp" };
            Some(format!("{protocol}://{ip}:{port}"))
        }
        address::Address::Pipe(p) => Some(format!("pipe:{}", p.path)),
        _ => None,
    }
}

/// Whether two encoded vhosts have the same domains.
pub fn same_domains(a: &[u8], b: &[u8]) -> bool {
    match (VhostDomains::decode(a), VhostDomains::decode(b)) {
        (Ok(a), Ok(b)) => a.domains == b.domains,
        _ => false,
    }
}

/// VHDS (route_config_update_receiver_impl.cc): the vhosts Envoy is sent are merged into
/// their RouteConfiguration, whose table is then built as one, so one `*` and each domain
/// once across all of them. `vhosts` are `(resource name, bytes)` of one
/// RouteConfiguration, those Envoy holds first: each later one repeating an earlier
/// one's domain is flagged.
pub fn vhosts_across(table: &str, vhosts: &[(&str, &[u8])]) -> Vec<(String, Violation)> {
    let mut held: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for (resource, bytes) in vhosts {
        let Ok(v) = VhostDomains::decode(*bytes) else {
            continue;
        };
        let domains: BTreeSet<String> = v.domains.iter().map(|d| d.to_ascii_lowercase()).collect();
        let twice = (domains.len() < v.domains.len()).then(|| {
            let mut seen = BTreeSet::new();
            let d = v.domains.iter().map(|d| d.to_ascii_lowercase());
            (
                d.into_iter()
                    .find(|d| !seen.insert(d.clone()))
                    .unwrap_or_default(),
                *resource,
            )
        });
        if let Some((domain, other)) = twice.or_else(|| {
            domains
                .iter()
                .find_map(|d| held.get(d).map(|o| (d.clone(), *o)))
        }) {
            let rule = if domain == "*" {
                format!(
                    "vhds.unique-domains: only a single wildcard domain is permitted in route {table} (also in {other:?})"
                )
            } else {
                format!(
                    "vhds.unique-domains: duplicate entry of domain {domain} in route {table} (also in {other:?})"
                )
            };
            out.push((
                resource.to_string(),
                Violation {
                    path: format!("VirtualHost({resource}).domains"),
                    rule,
                },
            ));
            continue;
        }
        for d in domains {
            held.insert(d, resource);
        }
    }
    out
}

impl Rules {
    fn fail(&mut self, path: &str, family: &str, why: impl std::fmt::Display) {
        self.found.push(Violation {
            path: path.to_string(),
            rule: format!("{family}: {why}"),
        });
    }

    // Route tables (source/common/router/config_impl.cc, header_parser.cc).

    fn route_table(&mut self, table: &RouteConfiguration, path: &str) {
        let path = format!("{path}RouteConfiguration");
        if !self.entries_only {
            self.domains(
                &path,
                &table.name,
                table.virtual_hosts.iter().map(|v| v.domains.as_slice()),
            );
        }
        let limit = table
            .max_direct_response_body_size_bytes
            .map_or(DIRECT_RESPONSE_MAX, |m| m.value as usize);
        self.headers(
            &format!("{path}.request_headers_to_add"),
            &table.request_headers_to_add,
            &table.request_headers_to_remove,
        );
        self.headers(
            &format!("{path}.response_headers_to_add"),
            &table.response_headers_to_add,
            &table.response_headers_to_remove,
        );
        for (i, vhost) in table.virtual_hosts.iter().enumerate() {
            self.virtual_host(vhost, &format!("{path}.virtual_hosts[{i}]."), limit);
        }
    }

    /// RouteMatcher: one `*` per table; each domain (lower-cased) in one vhost only.
    fn domains<'a>(&mut self, path: &str, table: &str, vhosts: impl Iterator<Item = &'a [String]>) {
        let mut wildcard = false;
        let mut seen = BTreeSet::new();
        for (i, domains) in vhosts.enumerate() {
            for domain in domains {
                let at = format!("{path}.virtual_hosts[{i}].domains");
                if domain == "*" {
                    if wildcard {
                        self.fail(
                            &at,
                            "route.single-wildcard-domain",
                            format!("only a single wildcard domain is permitted in route {table}"),
                        );
                    }
                    wildcard = true;
                } else if !seen.insert(domain.to_ascii_lowercase()) {
                    self.fail(
                        &at,
                        "route.unique-domains",
                        format!("duplicate entry of domain {domain} in route {table}"),
                    );
                }
            }
        }
    }

    fn virtual_host(&mut self, vhost: &VirtualHost, path: &str, body_limit: usize) {
        let path = format!("{path}VirtualHost({})", vhost.name);
        self.headers(
            &format!("{path}.request_headers_to_add"),
            &vhost.request_headers_to_add,
            &vhost.request_headers_to_remove,
        );
        self.headers(
            &format!("{path}.response_headers_to_add"),
            &vhost.response_headers_to_add,
            &vhost.response_headers_to_remove,
        );
        for (i, route) in vhost.routes.iter().enumerate() {
            self.route(route, &format!("{path}.routes[{i}]"), body_limit);
        }
    }

    fn route(
        &mut self,
        r: &envoy_types::pb::envoy::config::route::v3::Route,
        path: &str,
        limit: usize,
    ) {
        self.headers(
            &format!("{path}.request_headers_to_add"),
            &r.request_headers_to_add,
            &r.request_headers_to_remove,
        );
        self.headers(
            &format!("{path}.response_headers_to_add"),
            &r.response_headers_to_add,
            &r.response_headers_to_remove,
        );
        if let Some(m) = &r.r#match {
            if let Some(
                envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier::SafeRegex(
                    re,
                ),
            ) = &m.path_specifier
            {
                self.regex(&format!("{path}.match.safe_regex"), re);
            }
            for (i, h) in m.headers.iter().enumerate() {
                #[allow(deprecated)] // Envoy still compiles the deprecated safe_regex_match.
                use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
                let at = format!("{path}.match.headers[{i}]");
                #[allow(deprecated)]
                match &h.header_match_specifier {
                    Some(HeaderMatchSpecifier::SafeRegexMatch(re)) => self.regex(&at, re),
                    Some(HeaderMatchSpecifier::StringMatch(s)) => self.string_matcher(&at, s),
                    _ => {}
                }
            }
            for (i, q) in m.query_parameters.iter().enumerate() {
                use envoy_types::pb::envoy::config::route::v3::query_parameter_matcher::QueryParameterMatchSpecifier;
                if let Some(QueryParameterMatchSpecifier::StringMatch(s)) =
                    &q.query_parameter_match_specifier
                {
                    self.string_matcher(&format!("{path}.match.query_parameters[{i}]"), s);
                }
            }
        }
        match &r.action {
            Some(route::Action::Route(action)) => {
                let rewrites = usize::from(!action.prefix_rewrite.is_empty())
                    + usize::from(action.regex_rewrite.is_some())
                    + usize::from(action.path_rewrite_policy.is_some());
                if rewrites > 1 {
                    self.fail(
                        path,
                        "route.one-rewrite",
                        "specify only one of prefix_rewrite, regex_rewrite or path_rewrite_policy",
                    );
                }
                if let Some(rewrite) = &action.regex_rewrite
                    && let Some(re) = &rewrite.pattern
                {
                    self.regex(&format!("{path}.route.regex_rewrite"), re);
                }
                if let Some(route_action::ClusterSpecifier::WeightedClusters(w)) =
                    &action.cluster_specifier
                {
                    let mut sum: u64 = 0;
                    for (i, c) in w.clusters.iter().enumerate() {
                        let at = format!("{path}.route.weighted_clusters.clusters[{i}]");
                        let header = !c.cluster_header.is_empty();
                        match (c.name.is_empty(), header) {
                            (true, false) => self.fail(
                                &at,
                                "route.weighted-cluster-name",
                                "at least one of name or cluster_header need to be specified",
                            ),
                            (false, true) => self.fail(
                                &at,
                                "route.weighted-cluster-name",
                                "only one of name or cluster_header can be specified",
                            ),
                            _ => {}
                        }
                        match &c.weight {
                            Some(weight) => sum += u64::from(weight.value),
                            None => self.fail(
                                &at,
                                "route.weighted-cluster-weights",
                                "weight is required",
                            ),
                        }
                        self.headers(
                            &format!("{at}.request_headers_to_add"),
                            &c.request_headers_to_add,
                            &c.request_headers_to_remove,
                        );
                        self.headers(
                            &format!("{at}.response_headers_to_add"),
                            &c.response_headers_to_add,
                            &c.response_headers_to_remove,
                        );
                    }
                    if sum == 0 {
                        self.fail(
                            &format!("{path}.route.weighted_clusters"),
                            "route.weighted-cluster-weights",
                            "sum of weights in the weighted_cluster must be greater than 0",
                        );
                    } else if sum > u64::from(u32::MAX) {
                        self.fail(
                            &format!("{path}.route.weighted_clusters"),
                            "route.weighted-cluster-weights",
                            format!("the sum of weights exceeds {}", u32::MAX),
                        );
                    }
                }
                for (i, mirror) in action.request_mirror_policies.iter().enumerate() {
                    if mirror.cluster.is_empty() == mirror.cluster_header.is_empty() {
                        self.fail(
                            &format!("{path}.route.request_mirror_policies[{i}]"),
                            "route.mirror-cluster",
                            "exactly one of cluster or cluster_header in request mirror policy need to be specified",
                        );
                    }
                }
                self.duplicate_upgrades(
                    &format!("{path}.route.upgrade_configs"),
                    "route.duplicate-upgrade",
                    action
                        .upgrade_configs
                        .iter()
                        .map(|u| u.upgrade_type.as_str()),
                );
                if let Some(back_off) = action
                    .retry_policy
                    .as_ref()
                    .and_then(|p| p.retry_back_off.as_ref())
                    && let (Some(base), Some(max)) =
                        (&back_off.base_interval, &back_off.max_interval)
                    && (max.seconds, max.nanos) < (base.seconds, base.nanos)
                {
                    self.fail(
                        &format!("{path}.route.retry_policy.retry_back_off"),
                        "route.retry-back-off",
                        "max_interval must be greater than or equal to the base_interval",
                    );
                }
            }
            Some(route::Action::DirectResponse(direct)) => {
                let size = direct.body.as_ref().and_then(|b| match &b.specifier {
                    Some(data_source::Specifier::InlineBytes(b)) => Some(b.len()),
                    Some(data_source::Specifier::InlineString(s)) => Some(s.len()),
                    _ => None,
                });
                if let Some(size) = size
                    && size > limit
                {
                    self.fail(
                        &format!("{path}.direct_response.body"),
                        "route.direct-response-size",
                        format!("response body size is {size} bytes; maximum is {limit}"),
                    );
                }
            }
            _ => {}
        }
    }

    /// HeaderParser: no `:`-headers or Host added or removed, `append` and a
    /// non-default `append_action` not both, values valid substitution formats.
    fn headers(&mut self, path: &str, add: &[HeaderValueOption], remove: &[String]) {
        let modifiable = |name: &str| !name.starts_with(':') && !name.eq_ignore_ascii_case("host");
        for (i, option) in add.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let Some(header) = &option.header else {
                continue;
            };
            if !modifiable(&header.key) {
                self.fail(
                    &at,
                    "headers.not-modifiable",
                    format!(
                        ":-prefixed or host headers may not be modified ({})",
                        header.key
                    ),
                );
            }
            #[allow(deprecated)] // Envoy refuses the deprecated field beside its successor.
            let both = option.append.is_some() && option.append_action != 0;
            if both {
                self.fail(
                    &at,
                    "headers.append-and-append-action",
                    "both append and append_action are set and it's not allowed",
                );
            }
            if let Err(position) = substitution_format(&header.value) {
                self.fail(
                    &at,
                    "headers.substitution-format",
                    format!(
                        "couldn't find valid command at position {position} in {:?} (a literal % is written %%)",
                        header.value
                    ),
                );
            }
        }
        let removed = path.replace("_to_add", "_to_remove");
        for (i, name) in remove.iter().enumerate() {
            if !modifiable(name) {
                self.fail(
                    &format!("{removed}[{i}]"),
                    "headers.not-modifiable",
                    format!(":-prefixed or host headers may not be removed ({name})"),
                );
            }
        }
    }

    /// Upgrade types named twice (case-insensitively), in a route or a connection manager.
    fn duplicate_upgrades<'a>(
        &mut self,
        path: &str,
        family: &str,
        types: impl Iterator<Item = &'a str>,
    ) {
        let mut seen = BTreeSet::new();
        for (i, t) in types.enumerate() {
            if !seen.insert(t.to_ascii_lowercase()) {
                self.fail(
                    &format!("{path}[{i}]"),
                    family,
                    format!("upgrade {t} twice"),
                );
            }
        }
    }

    fn string_matcher(&mut self, path: &str, matcher: &StringMatcher) {
        if let Some(string_matcher::MatchPattern::SafeRegex(re)) = &matcher.match_pattern {
            if matcher.ignore_case {
                self.fail(
                    path,
                    "regex.ignore-case",
                    "ignore_case has no effect for safe_regex",
                );
            }
            self.regex(&format!("{path}.safe_regex"), re);
        }
    }

    fn regex(&mut self, path: &str, re: &RegexMatcher) {
        if let Err(e) = re2(&re.regex) {
            self.fail(path, "regex.re2", e);
        }
    }

    // Listeners (source/common/listener_manager/listener_impl.cc,
    // filter_chain_manager_impl.cc, config/utility.cc).

    fn listener(&mut self, listener: &Listener) {
        let path = format!("Listener({})", listener.name);
        let internal = listener.listener_specifier.is_some();
        if !internal
            && listener
                .address
                .as_ref()
                .and_then(|a| a.address.as_ref())
                .is_none()
        {
            self.fail(&path, "listener.address", "address is necessary");
        }
        if let Some(address) = &listener.address {
            self.ip_address(
                &format!("{path}.address"),
                address,
                "listener.address",
                false,
            );
        }
        if !self.entries_only {
            self.some_chain(
                &path,
                listener.address.as_ref(),
                listener.filter_chains.len(),
                listener.default_filter_chain.is_some(),
            );
            self.distinct_chains(
                &path,
                listener
                    .filter_chains
                    .iter()
                    .map(|c| (c.name.as_str(), c.filter_chain_match.as_ref())),
            );
        }
        for (i, chain) in listener.filter_chains.iter().enumerate() {
            let at = format!("{path}.filter_chains[{i}]");
            let shown = if chain.name.is_empty() {
                at.clone()
            } else {
                chain.name.clone()
            };
            let m = chain.filter_chain_match.clone().unwrap_or_default();
            if !m.address_suffix.is_empty() || m.suffix_len.is_some() {
                self.fail(
                    &at,
                    "listener.unimplemented-match-fields",
                    format!("filter chain '{shown}' contains unimplemented fields"),
                );
            }
            for name in &m.server_names {
                // Only `*.suffix`: one star, leading, followed by a dot.
                let wildcard = name
                    .strip_prefix("*.")
                    .is_some_and(|rest| !rest.contains('*'));
                let partial = name.contains('*') && !wildcard;
                if partial {
                    self.fail(
                        &at,
                        "listener.partial-wildcard-server-name",
                        format!("partial wildcards are not supported in \"server_names\" ({name})"),
                    );
                }
            }
            self.network_filters(&at, &chain.filters);
        }
        if let Some(chain) = &listener.default_filter_chain {
            self.network_filters(&format!("{path}.default_filter_chain"), &chain.filters);
        }
    }

    /// A TCP listener needs a filter chain (or a default one).
    fn some_chain(&mut self, path: &str, address: Option<&Address>, chains: usize, default: bool) {
        let udp = address
            .and_then(|a| match &a.address {
                Some(address::Address::SocketAddress(s)) => Some(s.protocol == 1),
                _ => None,
            })
            .unwrap_or(false);
        if !udp && chains == 0 && !default {
            self.fail(path, "listener.filter-chains", "no filter chains specified");
        }
    }

    /// No two filter chains with the same match, or matches overlapping once their
    /// repeated conditions are expanded.
    fn distinct_chains<'a>(
        &mut self,
        path: &str,
        chains: impl Iterator<Item = (&'a str, Option<&'a FilterChainMatch>)>,
    ) {
        let mut matches: BTreeMap<Vec<u8>, String> = BTreeMap::new();
        let mut leaves: BTreeMap<String, String> = BTreeMap::new();
        for (i, (name, m)) in chains.enumerate() {
            let at = format!("{path}.filter_chains[{i}]");
            let shown = if name.is_empty() {
                at.clone()
            } else {
                name.to_string()
            };
            let m = m.cloned().unwrap_or_default();
            if let Some(first) = matches.insert(m.encode_to_vec(), shown.clone()) {
                self.fail(
                    &at,
                    "listener.duplicate-filter-chain-match",
                    format!(
                        "filter chain '{shown}' has the same matching rules defined as '{first}'"
                    ),
                );
            } else {
                for leaf in expand(&m) {
                    if let Some(first) = leaves.insert(leaf, shown.clone()) {
                        self.fail(
                            &at,
                            "listener.duplicate-filter-chain-match",
                            format!(
                                "multiple filter chains with overlapping matching rules are defined ('{first}' and '{shown}')"
                            ),
                        );
                        break;
                    }
                }
            }
        }
    }

    /// The last network filter terminal, no terminal filter before it; each HTTP
    /// connection manager checked in turn.
    fn network_filters(
        &mut self,
        path: &str,
        filters: &[envoy_types::pb::envoy::config::listener::v3::Filter],
    ) {
        let typed = |f: &envoy_types::pb::envoy::config::listener::v3::Filter| match &f.config_type
        {
            Some(filter::ConfigType::TypedConfig(any)) => Some(any.clone()),
            _ => None,
        };
        for (i, f) in filters.iter().enumerate() {
            let at = format!("{path}.filters[{i}]");
            let Some(any) = typed(f) else { continue };
            let terminal = TERMINAL_NETWORK.contains(&type_name(&any));
            let last = i + 1 == filters.len();
            if terminal && !last {
                self.fail(
                    &at,
                    "listener.terminal-filter",
                    format!("terminal filter named {} must be the last filter in a network filter chain", f.name),
                );
            }
            if last && NON_TERMINAL_NETWORK.contains(&type_name(&any)) {
                self.fail(
                    &at,
                    "listener.terminal-filter",
                    format!(
                        "non-terminal filter named {} is the last filter in a network filter chain",
                        f.name
                    ),
                );
            }
            if type_name(&any) == HCM
                && let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice())
            {
                self.connection_manager(&at, &hcm);
            }
        }
    }

    fn connection_manager(&mut self, path: &str, hcm: &HttpConnectionManager) {
        let n = hcm.http_filters.len();
        for (i, f) in hcm.http_filters.iter().enumerate() {
            let at = format!("{path}.http_filters[{i}]");
            let router = match &f.config_type {
                Some(http_filter::ConfigType::TypedConfig(any)) => type_name(any) == ROUTER,
                _ => false,
            };
            if router && i + 1 != n {
                self.fail(
                    &at,
                    "hcm.terminal-http-filter",
                    format!(
                        "terminal filter named {} must be the last filter in a http filter chain",
                        f.name
                    ),
                );
            }
            if i + 1 == n {
                if !router && matches!(f.config_type, Some(http_filter::ConfigType::TypedConfig(_)))
                {
                    self.fail(
                        &at,
                        "hcm.terminal-http-filter",
                        format!("non-terminal filter named {} is the last filter in a http filter chain", f.name),
                    );
                }
                if f.disabled {
                    self.fail(
                        &at,
                        "hcm.terminal-http-filter",
                        format!("the last (terminal) filter ({}) in the chain cannot be disabled by default", f.name),
                    );
                }
            }
        }
        if hcm.strip_matching_host_port
            && matches!(
                hcm.strip_port_mode,
                Some(http_connection_manager::StripPortMode::StripAnyHostPort(
                    true
                ))
            )
        {
            self.fail(
                path,
                "hcm.strip-port",
                "only one of strip_matching_host_port or strip_any_host_port can be set",
            );
        }
        self.duplicate_upgrades(
            &format!("{path}.upgrade_configs"),
            "hcm.duplicate-upgrade",
            hcm.upgrade_configs.iter().map(|u| u.upgrade_type.as_str()),
        );
        if let Some(http_connection_manager::RouteSpecifier::RouteConfig(table)) =
            &hcm.route_specifier
        {
            self.route_table(table, &format!("{path}.route_config."));
        }
    }

    // Clusters (source/common/upstream/upstream_impl.cc, eds.cc, dns_cluster.cc).

    fn cluster(&mut self, c: &Cluster) {
        let path = format!("Cluster({})", c.name);
        let kind = match c.cluster_discovery_type {
            Some(cluster::ClusterDiscoveryType::Type(t)) => Some(t),
            None => Some(0),
            Some(cluster::ClusterDiscoveryType::ClusterType(_)) => None,
        };
        let (static_, logical_dns, eds) = (
            cluster::DiscoveryType::Static as i32,
            cluster::DiscoveryType::LogicalDns as i32,
            cluster::DiscoveryType::Eds as i32,
        );
        if c.eds_cluster_config.is_some() && kind != Some(eds) {
            self.fail(
                &path,
                "cluster.eds-config",
                "eds_cluster_config set in a non-EDS cluster",
            );
        }
        if kind == Some(eds) && c.eds_cluster_config.is_none() {
            self.fail(
                &path,
                "cluster.eds-config",
                "cannot create an EDS cluster without an EDS config",
            );
        }
        if kind == Some(static_)
            && let Some(cla) = &c.load_assignment
        {
            self.endpoint_addresses(
                &format!("{path}.load_assignment"),
                cla,
                "cluster.ip-endpoints",
            );
        }
        if kind == Some(logical_dns) {
            let single = c.load_assignment.as_ref().is_none_or(|cla| {
                cla.endpoints.len() == 1 && cla.endpoints[0].lb_endpoints.len() == 1
            });
            if !single || c.load_assignment.is_none() {
                self.fail(
                    &path,
                    "cluster.logical-dns-single-host",
                    "LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint",
                );
            }
        }
        // The ring hash and Maglev balancers (thread_aware_lb_impl.cc) sum the weights
        // in 64 bits and refuse a sum past 32.
        let hashing = [
            cluster::LbPolicy::RingHash as i32,
            cluster::LbPolicy::Maglev as i32,
        ];
        if hashing.contains(&c.lb_policy)
            && let Some(cla) = &c.load_assignment
        {
            self.hash_weight_sums(&format!("{path}.load_assignment"), cla);
        }
        if c.health_checks.len() > 1 {
            self.fail(
                &path,
                "cluster.health-checks",
                "all health checks must have a name when multiple health checks are configured (a field this API version does not carry)",
            );
        }
        for (i, t) in c
            .circuit_breakers
            .iter()
            .flat_map(|b| &b.per_host_thresholds)
            .enumerate()
        {
            let only_connections = t.max_pending_requests.is_none()
                && t.max_requests.is_none()
                && t.max_retries.is_none()
                && t.retry_budget.is_none()
                && t.max_connection_pools.is_none();
            if !only_connections {
                self.fail(
                    &format!("{path}.circuit_breakers.per_host_thresholds[{i}]"),
                    "cluster.per-host-thresholds",
                    "unsupported field in per_host_thresholds (only max_connections)",
                );
            }
        }
    }

    // EDS (source/common/upstream/upstream_impl.cc).

    fn endpoints(&mut self, cla: &ClusterLoadAssignment, name: &str) {
        let path = format!("ClusterLoadAssignment({})", cla.cluster_name);
        if !name.is_empty() && cla.cluster_name != name {
            self.fail(
                &path,
                "endpoints.cluster-name",
                format!(
                    "unexpected EDS cluster (expecting {name}): {}",
                    cla.cluster_name
                ),
            );
        }
        self.endpoint_addresses(&path, cla, "endpoints.ip-addresses");
        if let Some(policy) = &cla.policy {
            if policy.drop_overloads.len() > 1 {
                self.fail(
                    &format!("{path}.policy.drop_overloads"),
                    "endpoints.drop-overloads",
                    format!(
                        "{} categories; Envoy only supports one",
                        policy.drop_overloads.len()
                    ),
                );
            }
            for (i, d) in policy.drop_overloads.iter().enumerate() {
                if let Some(p) = &d.drop_percentage {
                    let denominator: u64 = match p.denominator {
                        1 => 10_000,
                        2 => 1_000_000,
                        _ => 100,
                    };
                    if u64::from(p.numerator) > denominator {
                        self.fail(
                            &format!("{path}.policy.drop_overloads[{i}]"),
                            "endpoints.drop-overloads",
                            "drop_ratio past 1",
                        );
                    }
                }
            }
        }
    }

    /// Per priority, the localities' weights and each locality's hosts' weights sum to
    /// at most `u32::MAX` (hosts weigh 1 unless they say).
    fn hash_weight_sums(&mut self, path: &str, cla: &ClusterLoadAssignment) {
        let mut by_priority: BTreeMap<u32, u64> = BTreeMap::new();
        for (l, locality) in cla.endpoints.iter().enumerate() {
            *by_priority.entry(locality.priority).or_default() +=
                u64::from(locality.load_balancing_weight.map_or(0, |w| w.value));
            let hosts: u64 = locality
                .lb_endpoints
                .iter()
                .map(|e| u64::from(e.load_balancing_weight.map_or(1, |w| w.value)))
                .sum();
            if hosts > u64::from(u32::MAX) {
                self.fail(
                    &format!("{path}.endpoints[{l}]"),
                    "cluster.hash-weight-sums",
                    format!(
                        "the sum of weights of all upstream hosts in a locality exceeds {}",
                        u32::MAX
                    ),
                );
            }
        }
        for (priority, sum) in by_priority {
            if sum > u64::from(u32::MAX) {
                self.fail(
                    path,
                    "cluster.hash-weight-sums",
                    format!(
                        "the sum of weights of all localities at priority {priority} exceeds {}",
                        u32::MAX
                    ),
                );
            }
        }
    }

    /// Each endpoint's address an IP (STATIC clusters, EDS).
    fn endpoint_addresses(&mut self, path: &str, cla: &ClusterLoadAssignment, family: &str) {
        for (l, locality) in cla.endpoints.iter().enumerate() {
            for (e, endpoint) in locality.lb_endpoints.iter().enumerate() {
                if let Some(lb_endpoint::HostIdentifier::Endpoint(endpoint)) =
                    &endpoint.host_identifier
                    && let Some(address) = &endpoint.address
                {
                    self.ip_address(
                        &format!("{path}.endpoints[{l}].lb_endpoints[{e}]"),
                        address,
                        family,
                        true,
                    );
                }
            }
        }
    }

    /// A socket address Envoy parses as an IP (no resolver named): listener addresses,
    /// STATIC and EDS endpoints.
    fn ip_address(&mut self, path: &str, address: &Address, family: &str, endpoint: bool) {
        if let Some(address::Address::SocketAddress(s)) = &address.address {
            if endpoint && !s.resolver_name.is_empty() {
                return;
            }
            if s.address.parse::<std::net::IpAddr>().is_err() {
                self.fail(path, family, format!("malformed IP address: {}", s.address));
            }
        }
    }

    // Secrets (source/common/tls/context_impl.cc, ssl/*_config_impl.cc).

    fn secret(&mut self, s: &Secret) {
        let path = format!("Secret({})", s.name);
        match &s.r#type {
            Some(secret::Type::TlsCertificate(cert)) => {
                let chain = cert.certificate_chain.as_ref().and_then(inline);
                let key = cert.private_key.as_ref().and_then(inline);
                match (chain, key) {
                    (Some(chain), Some(key)) => {
                        if let Err(e) = isobar_sdk::secret::check_key_pair(&chain, &key) {
                            self.fail(&path, "secret.certificate", e);
                        }
                    }
                    (None, _) if cert.certificate_chain.is_none() => self.fail(
                        &path,
                        "secret.certificate",
                        "failed to load incomplete certificate: certificate chain not set",
                    ),
                    (_, None)
                        if cert.private_key.is_none() && cert.private_key_provider.is_none() =>
                    {
                        self.fail(
                            &path,
                            "secret.certificate",
                            "failed to load incomplete private key",
                        )
                    }
                    _ => {}
                }
            }
            Some(secret::Type::SessionTicketKeys(keys)) => {
                for (i, key) in keys.keys.iter().enumerate() {
                    if let Some(bytes) = inline(key)
                        && bytes.len() != 80
                    {
                        self.fail(
                            &format!("{path}.keys[{i}]"),
                            "secret.session-ticket-keys",
                            format!("incorrect TLS session ticket key length. Length {}, expected length 80", bytes.len()),
                        );
                    }
                }
            }
            Some(secret::Type::ValidationContext(v)) => {
                match v.trusted_ca.as_ref().and_then(inline) {
                    Some(ca) if !isobar_sdk::secret::has_certificate(&ca) => {
                        self.fail(
                            &path,
                            "secret.validation-context",
                            "failed to load trusted CA certificates: no certificate parses",
                        );
                    }
                    Some(_) => {}
                    None if v.trusted_ca.is_none() => {
                        if v.crl.is_some() {
                            self.fail(
                                &path,
                                "secret.validation-context",
                                "failed to load CRL without trusted CA",
                            );
                        }
                        if !v.match_typed_subject_alt_names.is_empty() {
                            self.fail(
                                &path,
                                "secret.validation-context",
                                "SAN-based verification of peer certificates without trusted CA is insecure and not allowed",
                            );
                        }
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }
}

/// The bytes of an inline data source (files and environment variables are Envoy's to
/// read).
fn inline(source: &envoy_types::pb::envoy::config::core::v3::DataSource) -> Option<Vec<u8>> {
    match &source.specifier {
        Some(data_source::Specifier::InlineBytes(b)) => Some(b.clone()),
        Some(data_source::Specifier::InlineString(s)) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

const HCM: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "envoy.extensions.filters.http.router.v3.Router";

/// Network filters Envoy's factories declare terminal.
const TERMINAL_NETWORK: &[&str] = &[
    HCM,
    "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    "envoy.extensions.filters.network.direct_response.v3.Config",
    "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
    "envoy.extensions.filters.network.echo.v3.Echo",
];

/// Network filters that are not terminal (a chain may not end with them).
const NON_TERMINAL_NETWORK: &[&str] = &[
    "envoy.extensions.filters.network.rbac.v3.RBAC",
    "envoy.extensions.filters.network.ext_authz.v3.ExtAuthz",
    "envoy.extensions.filters.network.ratelimit.v3.RateLimit",
    "envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit",
    "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
];

fn type_name(any: &Any) -> &str {
    any.type_url.rsplit('/').next().unwrap_or_default()
}

/// The leaves a filter chain match occupies in Envoy's lookup tree: every combination
/// of its repeated conditions, server names lower-cased (an empty list matches any).
fn expand(m: &FilterChainMatch) -> Vec<String> {
    fn or_any<T: ToString>(items: &[T]) -> Vec<String> {
        if items.is_empty() {
            vec![String::new()]
        } else {
            items.iter().map(ToString::to_string).collect()
        }
    }
    let cidr = |ranges: &[envoy_types::pb::envoy::config::core::v3::CidrRange]| -> Vec<String> {
        or_any(
            &ranges
                .iter()
                .map(|r| {
                    format!(
                        "{}/{}",
                        r.address_prefix,
                        r.prefix_len.map_or(0, |p| p.value)
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    let port = m
        .destination_port
        .map_or(String::new(), |p| p.value.to_string());
    let names: Vec<String> = m
        .server_names
        .iter()
        .map(|n| n.to_ascii_lowercase())
        .collect();
    let mut leaves = Vec::new();
    for prefix in cidr(&m.prefix_ranges) {
        for name in or_any(&names) {
            for protocol in or_any(&m.application_protocols) {
                for direct in cidr(&m.direct_source_prefix_ranges) {
                    for source in cidr(&m.source_prefix_ranges) {
                        for source_port in or_any(&m.source_ports) {
                            leaves.push(format!(
                                "{port}|{prefix}|{name}|{}|{protocol}|{direct}|{}|{source}|{source_port}",
                                m.transport_protocol, m.source_type
                            ));
                        }
                    }
                }
            }
        }
    }
    leaves
}

/// Whether a header value is a valid substitution format string for Envoy's parser:
/// each `%` starts `%%` or a command `%NAME(args):len%`. `Err`: the position of the
/// first `%` that does neither.
pub fn substitution_format(value: &str) -> Result<(), usize> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        if bytes.get(i + 1) == Some(&b'%') {
            i += 2;
            continue;
        }
        // A command: [A-Z0-9_]+, then optionally (...) without ')', then :digits, then %.
        let mut j = i + 1;
        while j < bytes.len()
            && (bytes[j].is_ascii_uppercase() || bytes[j].is_ascii_digit() || bytes[j] == b'_')
        {
            j += 1;
        }
        if j == i + 1 {
            return Err(i);
        }
        if bytes.get(j) == Some(&b'(') {
            match bytes[j..].iter().position(|b| *b == b')') {
                Some(close) => j += close + 1,
                None => return Err(i),
            }
        }
        if bytes.get(j) == Some(&b':') {
            let start = j + 1;
            j = start;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
            if j == start {
                return Err(i);
            }
        }
        if bytes.get(j) != Some(&b'%') {
            return Err(i);
        }
        i = j + 1;
    }
    Ok(())
}

/// The cap on a regex's RE2 program size under Isobar's runtime layer.
pub use super::runtime::RE2_PROGRAM_MAX;

/// Whether Envoy compiles `pattern`: RE2's syntax is checked with Rust's regex parser
/// (both refuse look-around and back-references), RE2's own limit on counted
/// repetition (1,000, nested counts multiplied) is applied, and the program RE2 would
/// build is no bigger than Envoy allows ([`RE2_PROGRAM_MAX`]; measured from below by
/// [`re2_program_size_at_least`]).
pub fn re2(pattern: &str) -> Result<(), String> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .map_err(|e| {
            format!(
                "{pattern:?} does not compile as RE2: {}",
                one_line(&e.to_string())
            )
        })?;
    let size = program_size(&hir);
    if size > RE2_PROGRAM_MAX {
        return Err(format!(
            "regex {pattern:?}: its RE2 program size is at least {size}, past Envoy's limit of {RE2_PROGRAM_MAX}"
        ));
    }
    let n = repetition(&hir);
    if n > u64::from(RE2_REPEAT_MAX) {
        return Err(format!(
            "{pattern:?} does not compile as RE2: invalid repetition size (counts multiplying to {n}; RE2's limit is {RE2_REPEAT_MAX})"
        ));
    }
    Ok(())
}

/// The largest product of nested repetition counts (RE2 refuses one past 1,000).
fn repetition(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::HirKind;
    match hir.kind() {
        HirKind::Repetition(r) => {
            let n = u64::from(r.max.unwrap_or(r.min)).max(1);
            n.saturating_mul(repetition(&r.sub))
        }
        HirKind::Capture(c) => repetition(&c.sub),
        HirKind::Concat(items) | HirKind::Alternation(items) => {
            items.iter().map(repetition).max().unwrap_or(1)
        }
        _ => 1,
    }
}

/// A lower bound of the size of the program RE2 compiles `pattern` to (its instruction
/// count, which Envoy caps): never above RE2's own figure, so a pattern it finds too big
/// is too big. `None` when the pattern does not parse.
pub fn re2_program_size_at_least(pattern: &str) -> Option<u64> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .ok()?;
    Some(program_size(&hir))
}

/// The whole program: the regex, a match instruction and the fail instruction RE2
/// starts every program with (the unanchored `.*?` prefix is left out: counted from
/// below).
fn program_size(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::{HirKind, Look};
    // A literal right after a leading `^` is RE2's required prefix, matched outside
    // the program.
    if let HirKind::Concat(items) = hir.kind()
        && matches!(
            items.first().map(|h| h.kind()),
            Some(HirKind::Look(Look::Start))
        )
    {
        let rest = items
            .iter()
            .skip(1)
            .skip_while(|h| matches!(h.kind(), HirKind::Literal(_)));
        return rest
            .map(size_of)
            .fold(0, u64::saturating_add)
            .saturating_add(2);
    }
    size_of(hir).saturating_add(2)
}

fn size_of(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::{Class, HirKind};
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        // One byte-range instruction per ASCII byte (past ASCII, counted from below: 0).
        HirKind::Literal(l) => l.0.iter().filter(|b| b.is_ascii()).count() as u64,
        // At least one instruction per ASCII range (an upper-case range may ride on its
        // lower-case one, which RE2 matches folded; what lies past ASCII may share).
        HirKind::Class(Class::Unicode(c)) => {
            let ascii = c
                .ranges()
                .iter()
                .filter(|r| u32::from(r.start()) < 0x80)
                .filter(|r| !(r.start().is_ascii_uppercase() && r.end().is_ascii_uppercase()))
                .count() as u64;
            ascii.max(1)
        }
        HirKind::Class(Class::Bytes(c)) => (c.ranges().len() as u64).max(1),
        // x{n,m}: n copies, then m-n nested optional copies (one branch each); x{n,}: n
        // copies, the last looping (one branch).
        HirKind::Repetition(r) => {
            let sub = size_of(&r.sub);
            let min = u64::from(r.min);
            match r.max {
                Some(max) => min
                    .saturating_mul(sub)
                    .saturating_add(u64::from(max).saturating_sub(min).saturating_mul(sub + 1)),
                // x* was measured at one instruction over x's own.
                None if min == 0 => sub,
                None => min.saturating_mul(sub).saturating_add(1),
            }
        }
        // Two capture instructions.
        HirKind::Capture(c) => size_of(&c.sub) + 2,
        HirKind::Concat(items) => items.iter().map(size_of).fold(0, u64::saturating_add),
        // RE2 factors common prefixes out of alternations: only the largest branch is
        // sure to be there whole.
        HirKind::Alternation(items) => items.iter().map(size_of).max().unwrap_or(0),
    }
}

fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^' || c == '~'))
        .collect::<Vec<_>>()
        .join(" ")
}
