//! HTTP filters: the IR's filters as Envoy's, and the per-vhost and per-route
//! configurations that switch them on (CORS, local rate limits, cookie rewriting, RBAC).

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, HttpFilter,
};
use envoy_types::pb::google::protobuf::{self as pb, Any, UInt32Value};
use envoy_types::util::pack_any;

use isobar_sdk::ir;

use crate::xds::proto::{
    PbValue, append_field, duration, inline, overwrite_headers, string_matcher, struct_bytes,
};

pub(in crate::xds) const CORS_FILTER: &str = "envoy.filters.http.cors";
pub(in crate::xds) const LUA_FILTER: &str = "envoy.filters.http.lua";
pub(in crate::xds) const RATE_LIMIT_FILTER: &str = "envoy.filters.http.local_ratelimit";
pub(in crate::xds) const RBAC_FILTER: &str = "envoy.filters.http.rbac";

/// The fixed cookie-rewriting script; rules reach it as the route's filter context.
pub(in crate::xds) const COOKIE_REWRITE_LUA: &str = include_str!("cookie_rewrite.lua");

/// The Lua filter answering 421 on a wildcard vhost's chain when the Host is not the
/// SNI name (named apart from [`LUA_FILTER`], whose per-route settings are the cookie
/// rewriter's).
pub(in crate::xds) fn misdirected_filter() -> HttpFilter {
    use envoy_types::pb::envoy::extensions::filters::http::lua;
    empty_filter(
        "envoy.filters.http.lua.misdirected",
        pack_any(lua::v3::Lua {
            default_source_code: Some(inline(include_str!("misdirected.lua"))),
            ..Default::default()
        }),
    )
}

pub(in crate::xds) fn cookie_rewrite_context(rewrites: &[ir::CookieRewrite]) -> Any {
    use envoy_types::pb::envoy::extensions::filters::http::lua::v3::LuaPerRoute;
    let rules = rewrites
        .iter()
        .map(|c| {
            let mut fields = Vec::new();
            if let Some(domain) = &c.domain {
                fields.push(("domain", PbValue::Str(domain)));
            }
            fields.push(("name", PbValue::Str(&c.name)));
            if let Some(path) = &c.path {
                fields.push(("path", PbValue::Str(path)));
            }
            if let Some(same_site) = &c.same_site {
                fields.push(("same_site", PbValue::Str(same_site)));
            }
            if let Some(secure) = c.secure {
                fields.push(("secure", PbValue::Bool(secure)));
            }
            PbValue::Struct(fields)
        })
        .collect();
    let context = struct_bytes(&[("cookies", PbValue::List(rules))]);
    // LuaPerRoute.filter_context is field 4.
    let mut value = Vec::new();
    append_field(&mut value, 4, &context);
    Any {
        type_url: <LuaPerRoute as prost::Name>::type_url(),
        value,
    }
}

pub(in crate::xds) fn cors_policy(c: &ir::Cors) -> Any {
    use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy;
    pack_any(CorsPolicy {
        allow_origin_string_match: c
            .allow_origin
            .iter()
            .map(|m| string_matcher(m, false))
            .collect(),
        allow_methods: c.allow_methods.clone(),
        allow_headers: c.allow_headers.clone(),
        expose_headers: c.expose_headers.clone(),
        max_age: c.max_age_seconds.map(|s| s.to_string()).unwrap_or_default(),
        allow_credentials: Some(pb::BoolValue {
            value: c.allow_credentials,
        }),
        allow_private_network_access: Some(pb::BoolValue {
            value: c.allow_private_network,
        }),
        forward_not_matching_preflights: c
            .answer_unmatched_preflights
            .then_some(pb::BoolValue { value: false }),
        ..Default::default()
    })
}

pub(in crate::xds) fn local_rate_limit(l: &ir::LocalRateLimit) -> Any {
    use envoy_types::pb::envoy::extensions::filters::http::local_ratelimit::v3::LocalRateLimit;
    use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, HttpStatus, TokenBucket};
    let always = || {
        Some(core::RuntimeFractionalPercent {
            default_value: Some(FractionalPercent {
                numerator: 100,
                denominator: 0,
            }),
            ..Default::default()
        })
    };
    pack_any(LocalRateLimit {
        stat_prefix: "http_local_rate_limiter".to_string(),
        status: Some(HttpStatus {
            code: i32::try_from(l.status).unwrap_or(429),
        }),
        token_bucket: Some(TokenBucket {
            max_tokens: l.requests.saturating_add(l.burst),
            tokens_per_fill: Some(UInt32Value { value: l.requests }),
            fill_interval: Some(duration(Duration::from_secs(l.fill_interval_seconds))),
        }),
        filter_enabled: always(),
        filter_enforced: always(),
        response_headers_to_add: overwrite_headers(&l.response_headers),
        ..Default::default()
    })
}

pub(in crate::xds) fn empty_filter(name: &str, config: Any) -> HttpFilter {
    HttpFilter {
        name: name.to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(config)),
        ..Default::default()
    }
}

/// An IP allow or deny list as Envoy's per-route RBAC: any request from a listed range
/// (peer or `X-Forwarded-For` address) is allowed, or denied.
pub(in crate::xds) fn rbac_per_route(filter: &ir::IpFilter) -> Any {
    use envoy_types::pb::envoy::config::rbac::v3 as rbac;
    use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as rbac_filter;
    let principals = filter
        .rules
        .iter()
        .map(|r| {
            let range = core::CidrRange {
                address_prefix: r.address.clone(),
                prefix_len: Some(UInt32Value {
                    value: r.prefix_len,
                }),
            };
            rbac::Principal {
                identifier: Some(if r.remote {
                    rbac::principal::Identifier::RemoteIp(range)
                } else {
                    rbac::principal::Identifier::DirectRemoteIp(range)
                }),
            }
        })
        .collect();
    let action = if filter.allow {
        rbac::rbac::Action::Allow
    } else {
        rbac::rbac::Action::Deny
    };
    pack_any(rbac_filter::RbacPerRoute {
        rbac: Some(rbac_filter::Rbac {
            rules: Some(rbac::Rbac {
                action: action as i32,
                policies: HashMap::from([(
                    "ip-rules".to_string(),
                    rbac::Policy {
                        permissions: vec![rbac::Permission {
                            rule: Some(rbac::permission::Rule::Any(true)),
                        }],
                        principals,
                        ..Default::default()
                    },
                )]),
                ..Default::default()
            }),
            ..Default::default()
        }),
    })
}

/// The RBAC filter with no rules of its own: it enforces only the per-route configs.
pub(in crate::xds) fn rbac_filter() -> HttpFilter {
    empty_filter(
        RBAC_FILTER,
        pack_any(envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac::default()),
    )
}

pub(in crate::xds) fn router_filter() -> HttpFilter {
    HttpFilter {
        name: "envoy.filters.http.router".to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(pack_any(
            Router::default(),
        ))),
        ..Default::default()
    }
}

/// Envoy's compressor filter with `algorithm`'s library, for the content types Envoy
/// compresses by default (HTML, plain text, CSS, JavaScript, JSON, XHTML, SVG, XML);
/// Contour lists gRPC-Web's too, a kilobyte more in every HTTPS vhost's filter chain.
fn compressor_filter(algorithm: crate::xds::settings::Compressor) -> HttpFilter {
    use crate::xds::settings::Compressor as Algorithm;
    use envoy_types::pb::envoy::extensions::compression::{brotli, gzip, zstd};
    use envoy_types::pb::envoy::extensions::filters::http::compressor::v3::Compressor;
    let (name, library) = match algorithm {
        Algorithm::Gzip => ("gzip", pack_any(gzip::compressor::v3::Gzip::default())),
        Algorithm::Brotli => (
            "brotli",
            pack_any(brotli::compressor::v3::Brotli::default()),
        ),
        Algorithm::Zstd => ("zstd", pack_any(zstd::compressor::v3::Zstd::default())),
    };
    use envoy_types::pb::envoy::extensions::filters::http::compressor::v3::compressor;
    use envoy_types::pb::envoy::r#type::matcher::v3::StringMatcher;
    use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
    empty_filter(
        "envoy.filters.http.compressor",
        pack_any(Compressor {
            compressor_library: Some(core::TypedExtensionConfig {
                name: name.to_string(),
                typed_config: Some(library),
            }),
            response_direction_config: Some(compressor::ResponseDirectionConfig {
                common_config: Some(compressor::CommonDirectionConfig {
                    content_type_matcher: COMPRESSED_TYPES
                        .iter()
                        .map(|t| StringMatcher {
                            match_pattern: Some(MatchPattern::Exact(t.to_string())),
                            ignore_case: true,
                        })
                        .collect(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    )
}

/// The response content types compressed: Envoy's defaults and gRPC-Web's (Contour's
/// list).
const COMPRESSED_TYPES: &[&str] = &[
    "text/html",
    "text/plain",
    "text/css",
    "application/javascript",
    "application/x-javascript",
    "text/javascript",
    "text/x-javascript",
    "text/ecmascript",
    "text/js",
    "text/jscript",
    "text/x-js",
    "application/ecmascript",
    "application/x-json",
    "application/xml",
    "application/json",
    "image/svg+xml",
    "text/xml",
    "application/xhtml+xml",
    "application/grpc-web",
    "application/grpc-web+proto",
    "application/grpc-web+json",
    "application/grpc-web+thrift",
    "application/grpc-web-text",
    "application/grpc-web-text+proto",
    "application/grpc-web-text+thrift",
];

/// What one connection manager's filters are made for: the HTTP settings, the
/// listener's extensions (global authorization, rate limits, tracing) and, in a secure
/// vhost's own manager, that vhost's (its authorization and JWT providers).
pub(in crate::xds) struct Manager<'a> {
    pub http: &'a crate::xds::settings::HttpSettings,
    pub extensions: &'a ir::HttpExtensions,
    pub vhost: Option<&'a ir::VhostExtensions>,
}

/// One of a listener's HTTP filters as Envoy's; `None` for one the manager has nothing
/// for (the compressor with compression disabled, JWT verification without providers,
/// authorization or global rate limits not configured).
pub(in crate::xds) fn http_filter(
    filter: ir::HttpFilter,
    manager: &Manager<'_>,
) -> Option<HttpFilter> {
    let http = manager.http;
    use envoy_types::pb::envoy::extensions::filters::http::{
        cors, grpc_stats, grpc_web, local_ratelimit, lua,
    };
    Some(match filter {
        ir::HttpFilter::Compressor => compressor_filter(http.compression?),
        ir::HttpFilter::GrpcWeb => empty_filter(
            "envoy.filters.http.grpc_web",
            pack_any(grpc_web::v3::GrpcWeb::default()),
        ),
        ir::HttpFilter::GrpcStats => empty_filter(
            "envoy.filters.http.grpc_stats",
            pack_any(grpc_stats::v3::FilterConfig {
                emit_filter_state: true,
                enable_upstream_stats: true,
                ..Default::default()
            }),
        ),
        ir::HttpFilter::Cors => empty_filter(CORS_FILTER, pack_any(cors::v3::Cors::default())),
        ir::HttpFilter::LocalRateLimit => empty_filter(
            RATE_LIMIT_FILTER,
            pack_any(local_ratelimit::v3::LocalRateLimit {
                stat_prefix: "http_local_rate_limiter".to_string(),
                ..Default::default()
            }),
        ),
        ir::HttpFilter::CookieRewrite => empty_filter(
            LUA_FILTER,
            pack_any(lua::v3::Lua {
                default_source_code: Some(inline(COOKIE_REWRITE_LUA)),
                ..Default::default()
            }),
        ),
        ir::HttpFilter::Rbac => rbac_filter(),
        ir::HttpFilter::JwtAuthn => {
            let providers = &manager.vhost?.jwt_providers;
            if providers.is_empty() {
                return None;
            }
            crate::xds::extension::jwt_authn_filter(providers)
        }
        ir::HttpFilter::ExtAuthz => {
            let authorization = match manager.vhost {
                Some(vhost) => vhost.authorization.as_deref(),
                None => manager.extensions.authorization.as_deref(),
            };
            crate::xds::extension::ext_authz_filter(authorization?)
        }
        ir::HttpFilter::RateLimit => {
            crate::xds::extension::rate_limit_filter(manager.extensions.rate_limit.as_deref()?)
        }
        ir::HttpFilter::Router => router_filter(),
    })
}
