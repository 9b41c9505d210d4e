//! IR virtual hosts → Envoy `RouteConfiguration`s and `VirtualHost`s (and VHDS
//! resources), encoded canonically so equal input gives equal bytes.

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::config::route::v3::{
    self as route, DirectResponseAction, RouteConfiguration, Vhds, VirtualHost,
};
use prost::Message;

use isobar_sdk::ir;

use crate::xds::extension::{
    EXT_AUTHZ_FILTER, GLOBAL_RATE_LIMIT_FILTER, JWT_AUTHN_FILTER, ext_authz_per_route,
    ignore_vhost_rate_limits, jwt_requirement,
};
use crate::xds::filter::{
    CORS_FILTER, LUA_FILTER, RATE_LIMIT_FILTER, RBAC_FILTER, cookie_rewrite_context, cors_policy,
    local_rate_limit, rbac_per_route,
};
use crate::xds::proto::{
    MAP_FIELD, MAP_KEY, MAP_VALUE, PbValue, ads, append_field, append_map_entry, struct_bytes,
};
use crate::xds::resource::{Encoded, encoded};
use crate::xds::route_rule::{envoy_route, route_order};

/// An HTTP listener's RouteConfiguration under `xds-server.vhds`: no vhosts of its own,
/// Envoy subscribes to them over the same (delta) ADS stream.
pub(in crate::xds) fn vhds_route_configuration(name: &str) -> Encoded {
    let shell = RouteConfiguration {
        vhds: Some(Vhds {
            config_source: Some(ads()),
        }),
        ..route_configuration_shell(name)
    };
    encoded(&shell)
}

/// A plain vhost's VHDS resource name in RouteConfiguration `routes`, which is also its
/// `VirtualHost` name: Envoy files a vhost under the RouteConfiguration its name starts
/// with (up to the last `/`).
pub(in crate::xds) fn vhds_name(routes: &str, fqdn: &str) -> String {
    format!(
        "{routes}/{}",
        isobar_sdk::names::hashname(60, &[fqdn]).replace('/', "_")
    )
}

/// A vhost's `VirtualHost` as [`virtual_host`] encodes it for RDS, named instead as its
/// VHDS resource of RouteConfiguration `routes` (the same bytes but the name, which
/// prost writes first: fields go in number order).
pub(in crate::xds) fn vhds_virtual_host(routes: &str, fqdn: &str, bytes: &[u8]) -> Vec<u8> {
    let mut rest = bytes;
    if rest.first() == Some(&0x0a) {
        rest = &rest[1..];
        let len = prost::encoding::decode_varint(&mut rest).unwrap_or_default();
        let len = usize::try_from(len).unwrap_or(usize::MAX).min(rest.len());
        rest = &rest[len..];
    }
    let name = vhds_name(routes, fqdn);
    let mut out = Vec::with_capacity(bytes.len() + name.len());
    prost::encoding::string::encode(1, &name, &mut out);
    out.extend_from_slice(rest);
    out
}

/// A RouteConfiguration with the given encoded vhosts, encoded canonically.
///
/// prost encodes protobuf map fields (the `Struct` of route metadata) in `HashMap` order,
/// which differs run to run; identical input must give identical bytes (versions are
/// content hashes). So routes are encoded one by one with their metadata appended in key
/// order; protobuf parsers accept fields in any order and merge them.
pub(in crate::xds) fn route_configuration<'a>(
    name: &str,
    vhosts: impl Iterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let vhosts: Vec<&[u8]> = vhosts.collect();
    let shell = route_configuration_shell(name);
    // Allocated at its exact size (the caller makes it the snapshot's block, or the
    // shell of a spliced table).
    let len = shell.encoded_len()
        + vhosts
            .iter()
            .map(|v| crate::xds::proto::field_len(ROUTE_CONFIGURATION_VIRTUAL_HOSTS, v.len()))
            .sum::<usize>();
    let mut bytes = Vec::with_capacity(len);
    shell.encode_raw(&mut bytes);
    for vhost in vhosts {
        append_field(&mut bytes, ROUTE_CONFIGURATION_VIRTUAL_HOSTS, vhost);
    }
    bytes
}

/// The RouteConfiguration of a secure vhost's filter chain: its own virtual host, those
/// of the other hosts it routes, and a virtual host answering 421 for a Host another
/// chain serves (the domains `misdirected` names, and with `rest` every Host none of its
/// vhosts has), without any code: Contour's Lua filter does the same.
pub(in crate::xds) fn secure_route_configuration(
    name: &str,
    vhost: &ir::SecureVirtualHost,
    own: &[u8],
) -> Vec<u8> {
    let hosts: Vec<Vec<u8>> = vhost
        .hosts
        .values()
        .map(|v| virtual_host(v, None))
        .collect();
    let served: std::collections::BTreeSet<&str> =
        vhost.http_hosts().map(|v| v.fqdn.as_str()).collect();
    let mut domains: Vec<String> = vhost
        .misdirected
        .domains
        .iter()
        .filter(|d| !served.contains(d.as_str()))
        .cloned()
        .collect();
    if vhost.misdirected.rest && !served.contains("*") {
        domains.push("*".to_string());
    }
    domains.sort();
    domains.dedup();
    let misdirected = (!domains.is_empty()).then(|| misdirected_vhost(domains).encode_to_vec());
    let all = std::iter::once(own)
        .chain(hosts.iter().map(Vec::as_slice))
        .chain(misdirected.as_deref());
    route_configuration(name, all)
}

/// Every RouteConfiguration's settings, without vhosts.
pub(in crate::xds) fn route_configuration_shell(name: &str) -> RouteConfiguration {
    RouteConfiguration {
        name: name.to_string(),
        request_headers_to_add: vec![HeaderValueOption {
            header: Some(HeaderValue {
                key: "x-request-start".to_string(),
                value: "t=%START_TIME(%s.%3f)%".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ignore_port_in_host_matching: true,
        ..Default::default()
    }
}

pub(in crate::xds) const ROUTE_CONFIGURATION_VIRTUAL_HOSTS: u32 = 2;
pub(in crate::xds) const VIRTUAL_HOST_ROUTES: u32 = 3;
pub(in crate::xds) const ROUTE_METADATA: u32 = 4;

/// A vhost's `VirtualHost`; with `vhds`, named as a VHDS resource of that
/// RouteConfiguration (see [`vhds_name`]).
pub(in crate::xds) fn virtual_host(vhost: &ir::VirtualHost, vhds: Option<&str>) -> Vec<u8> {
    let mut routes: Vec<&ir::Route> = vhost.routes.values().collect();
    routes.sort_by(|a, b| route_order(a).cmp(&route_order(b)));
    let shell = VirtualHost {
        name: match vhds {
            Some(routes) => vhds_name(routes, &vhost.fqdn),
            None => isobar_sdk::names::hashname(60, &[&vhost.fqdn]),
        },
        domains: vec![vhost.fqdn.clone()],
        rate_limits: crate::xds::extension::rate_limits(&vhost.extensions().rate_limits),
        ..Default::default()
    };
    let mut bytes = shell.encode_to_vec();
    for r in routes {
        let mut route = envoy_route(r).encode_to_vec();
        append_field(&mut route, ROUTE_METADATA, &source_metadata(&r.source));
        // Per-filter configs in filter-name order: cors, ext_authz, jwt_authn,
        // local_ratelimit, lua, ratelimit, rbac.
        let policy = r.policy();
        if let Some(cors) = &policy.cors {
            append_map_entry(
                &mut route,
                ROUTE_FILTER_CONFIG,
                CORS_FILTER,
                &cors_policy(cors),
            );
        }
        if let Some(auth) = policy.auth.as_ref().and_then(ext_authz_per_route) {
            append_map_entry(&mut route, ROUTE_FILTER_CONFIG, EXT_AUTHZ_FILTER, &auth);
        }
        if let Some(provider) = &policy.jwt_requirement {
            append_map_entry(
                &mut route,
                ROUTE_FILTER_CONFIG,
                JWT_AUTHN_FILTER,
                &jwt_requirement(provider),
            );
        }
        if let Some(limit) = &r.policy().rate_limit {
            append_map_entry(
                &mut route,
                ROUTE_FILTER_CONFIG,
                RATE_LIMIT_FILTER,
                &local_rate_limit(limit),
            );
        }
        if !r.policy().cookie_rewrites.is_empty() {
            append_map_entry(
                &mut route,
                ROUTE_FILTER_CONFIG,
                LUA_FILTER,
                &cookie_rewrite_context(&r.policy().cookie_rewrites),
            );
        }
        if policy.ignore_vhost_rate_limits {
            append_map_entry(
                &mut route,
                ROUTE_FILTER_CONFIG,
                GLOBAL_RATE_LIMIT_FILTER,
                &ignore_vhost_rate_limits(),
            );
        }
        if let Some(filter) = &r.policy().ip_filter {
            append_map_entry(
                &mut route,
                ROUTE_FILTER_CONFIG,
                RBAC_FILTER,
                &rbac_per_route(filter),
            );
        }
        append_field(&mut bytes, VIRTUAL_HOST_ROUTES, &route);
    }
    // In filter-name order: cors, local_ratelimit, rbac.
    if let Some(cors) = &vhost.cors {
        append_map_entry(
            &mut bytes,
            VHOST_FILTER_CONFIG,
            CORS_FILTER,
            &cors_policy(cors),
        );
    }
    if let Some(limit) = &vhost.rate_limit {
        append_map_entry(
            &mut bytes,
            VHOST_FILTER_CONFIG,
            RATE_LIMIT_FILTER,
            &local_rate_limit(limit),
        );
    }
    if let Some(filter) = &vhost.ip_filter {
        append_map_entry(
            &mut bytes,
            VHOST_FILTER_CONFIG,
            RBAC_FILTER,
            &rbac_per_route(filter),
        );
    }
    bytes
}

/// `typed_per_filter_config` of a Route and of a VirtualHost: maps, written entry by entry
/// (one filter name per call, callers in name order) so the bytes stay deterministic.
pub(in crate::xds) const ROUTE_FILTER_CONFIG: u32 = 13;
pub(in crate::xds) const VHOST_FILTER_CONFIG: u32 = 15;

/// The source object of a route, for access logs (Contour's keys), as an encoded
/// `Metadata` whose maps are written in key order.
pub(in crate::xds) fn source_metadata(source: &isobar_sdk::ObjectKey) -> Vec<u8> {
    let fields = struct_bytes(&[
        ("io.projectcontour.kind", PbValue::Str(source.kind.as_str())),
        ("io.projectcontour.name", PbValue::Str(&source.name)),
        (
            "io.projectcontour.namespace",
            PbValue::Str(&source.namespace),
        ),
    ]);
    let mut entry = Vec::new();
    append_field(&mut entry, MAP_KEY, b"envoy.access_loggers.file");
    append_field(&mut entry, MAP_VALUE, &fields);
    let mut metadata = Vec::new();
    append_field(&mut metadata, MAP_FIELD, &entry);
    metadata
}

/// A virtual host answering 421 to every request for `domains`.
pub fn misdirected_vhost(domains: Vec<String>) -> VirtualHost {
    VirtualHost {
        name: "misdirected".to_string(),
        domains,
        routes: vec![route::Route {
            r#match: Some(route::RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".to_string())),
                ..Default::default()
            }),
            action: Some(route::route::Action::DirectResponse(DirectResponseAction {
                status: 421,
                ..Default::default()
            })),
            ..Default::default()
        }],
        ..Default::default()
    }
}
