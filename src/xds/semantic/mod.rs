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

mod clusters;
mod formats;
mod listeners;
mod routes;

pub use formats::{RE2_PROGRAM_MAX, re2, re2_program_size_at_least, substitution_format};

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

fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^' || c == '~'))
        .collect::<Vec<_>>()
        .join(" ")
}
