//! The IR's extension filters as Envoy's: external authorization (`ext_authz`), the
//! global rate limit filter, JWT verification (`jwt_authn`) and OpenTelemetry tracing,
//! with the per-route configurations that switch them off or name what a route needs.
//! Maps (`context_extensions`, providers) are written entry by entry in key order, so
//! the bytes of a vhost or listener stay the same from build to build.

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::route::v3 as route;
use envoy_types::pb::envoy::extensions::filters::http::{ext_authz, jwt_authn, ratelimit};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, HttpFilter,
};
use envoy_types::pb::google::protobuf::{Any, BoolValue, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;

use isobar_sdk::ir;

use crate::xds::proto::{MAP_KEY, MAP_VALUE, append_field, duration, header_matcher};

pub(in crate::xds) const EXT_AUTHZ_FILTER: &str = "envoy.filters.http.ext_authz";
pub(in crate::xds) const JWT_AUTHN_FILTER: &str = "envoy.filters.http.jwt_authn";
pub(in crate::xds) const GLOBAL_RATE_LIMIT_FILTER: &str = "envoy.filters.http.ratelimit";

fn grpc_service(s: &ir::GrpcService) -> core::GrpcService {
    core::GrpcService {
        target_specifier: Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(
            core::grpc_service::EnvoyGrpc {
                cluster_name: s.cluster.clone(),
                authority: s.authority.clone(),
                ..Default::default()
            },
        )),
        timeout: s.timeout.map(duration),
        ..Default::default()
    }
}

/// An HTTP authorization server: asked at `http://dummy/` through its cluster (the
/// authority is the request's), `path_prefix` before each path, the answer's allowed
/// headers going upstream.
fn http_service(s: &ir::GrpcService, h: &ir::HttpAuthz) -> ext_authz::v3::HttpService {
    ext_authz::v3::HttpService {
        server_uri: Some(core::HttpUri {
            uri: "http://dummy/".to_string(),
            http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster(s.cluster.clone())),
            timeout: Some(duration(s.timeout.unwrap_or_default())),
        }),
        path_prefix: h.path_prefix.clone(),
        authorization_response: list_matcher(&h.allowed_upstream_headers).map(|allowed| {
            ext_authz::v3::AuthorizationResponse {
                allowed_upstream_headers: Some(allowed),
                ..Default::default()
            }
        }),
        ..Default::default()
    }
}

/// Header name matchers as Envoy's list; `None` for none.
fn list_matcher(
    matchers: &[(ir::StringMatch, bool)],
) -> Option<envoy_types::pb::envoy::r#type::matcher::v3::ListStringMatcher> {
    (!matchers.is_empty()).then(
        || envoy_types::pb::envoy::r#type::matcher::v3::ListStringMatcher {
            patterns: matchers
                .iter()
                .map(|(m, ignore_case)| crate::xds::proto::string_matcher(m, *ignore_case))
                .collect(),
        },
    )
}

fn filter(name: &str, config: Any) -> HttpFilter {
    HttpFilter {
        name: name.to_string(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(config)),
        ..Default::default()
    }
}

/// Envoy's `ext_authz` filter calling `a`'s service: a failed check answers 403,
/// the route is chosen again after the check (the server may change headers), and the
/// client's certificate goes with each check.
pub(in crate::xds) fn ext_authz_filter(a: &ir::ExtAuthz) -> HttpFilter {
    filter(
        EXT_AUTHZ_FILTER,
        pack_any(ext_authz::v3::ExtAuthz {
            services: Some(match &a.http {
                None => ext_authz::v3::ext_authz::Services::GrpcService(grpc_service(&a.service)),
                Some(h) => {
                    ext_authz::v3::ext_authz::Services::HttpService(http_service(&a.service, h))
                }
            }),
            allowed_headers: a
                .http
                .as_deref()
                .and_then(|h| list_matcher(&h.allowed_headers)),
            transport_api_version: core::ApiVersion::V3 as i32,
            failure_mode_allow: a.fail_open,
            status_on_error: Some(envoy_types::pb::envoy::r#type::v3::HttpStatus {
                code: envoy_types::pb::envoy::r#type::v3::StatusCode::Forbidden as i32,
            }),
            clear_route_cache: true,
            include_peer_certificate: true,
            with_request_body: a.with_request_body.map(|b| ext_authz::v3::BufferSettings {
                max_request_bytes: b.max_request_bytes,
                allow_partial_message: b.allow_partial_message,
                pack_as_bytes: b.pack_as_bytes,
            }),
            ..Default::default()
        }),
    )
}

/// A route's `ExtAuthzPerRoute`: checks off, or the route's context sent with each
/// check; `None` when the route takes the filter as it is.
pub(in crate::xds) fn ext_authz_per_route(auth: &ir::RouteAuth) -> Option<Any> {
    // ExtAuthzPerRoute: disabled = 1, check_settings = 2; CheckSettings:
    // context_extensions = 1 (a map, written in key order).
    let mut value = Vec::new();
    if auth.disabled {
        prost::encoding::bool::encode(1, &true, &mut value);
    } else if !auth.context.is_empty() {
        let mut settings = Vec::new();
        for (key, text) in &auth.context {
            let mut entry = Vec::new();
            append_field(&mut entry, MAP_KEY, key.as_bytes());
            append_field(&mut entry, MAP_VALUE, text.as_bytes());
            append_field(&mut settings, 1, &entry);
        }
        append_field(&mut value, 2, &settings);
    } else {
        return None;
    }
    Some(Any {
        type_url: <ext_authz::v3::ExtAuthzPerRoute as prost::Name>::type_url(),
        value,
    })
}

/// Envoy's global rate limit filter asking `r`'s service; the service's response timeout
/// is the filter's (Contour's).
pub(in crate::xds) fn rate_limit_filter(r: &ir::RateLimitService) -> HttpFilter {
    use envoy_types::pb::envoy::config::ratelimit::v3::RateLimitServiceConfig;
    let call = ir::GrpcService {
        timeout: None,
        ..r.service.clone()
    };
    filter(
        GLOBAL_RATE_LIMIT_FILTER,
        pack_any(ratelimit::v3::RateLimit {
            domain: r.domain.clone(),
            timeout: r.service.timeout.map(duration),
            failure_mode_deny: !r.fail_open,
            rate_limited_as_resource_exhausted: r.resource_exhausted,
            rate_limit_service: Some(RateLimitServiceConfig {
                grpc_service: Some(grpc_service(&call)),
                transport_api_version: core::ApiVersion::V3 as i32,
            }),
            enable_x_ratelimit_headers: if r.x_rate_limit_headers {
                ratelimit::v3::rate_limit::XRateLimitHeadersRfcVersion::DraftVersion03 as i32
            } else {
                0
            },
            ..Default::default()
        }),
    )
}

/// A route that takes none of its vhost's global rate limits.
pub(in crate::xds) fn ignore_vhost_rate_limits() -> Any {
    pack_any(ratelimit::v3::RateLimitPerRoute {
        vh_rate_limits: ratelimit::v3::rate_limit_per_route::VhRateLimitsOptions::Ignore as i32,
        ..Default::default()
    })
}

/// Global rate limit descriptors as Envoy's `rate_limits` (of a route or a vhost).
pub(in crate::xds) fn rate_limits(
    descriptors: &[ir::RateLimitDescriptor],
) -> Vec<route::RateLimit> {
    use route::rate_limit::Action;
    use route::rate_limit::action::{self, ActionSpecifier};
    descriptors
        .iter()
        .map(|d| route::RateLimit {
            actions: d
                .entries
                .iter()
                .map(|e| Action {
                    action_specifier: Some(match e {
                        ir::RateLimitEntry::GenericKey { key, value } => {
                            ActionSpecifier::GenericKey(action::GenericKey {
                                descriptor_value: value.clone(),
                                descriptor_key: key.clone().unwrap_or_default(),
                                ..Default::default()
                            })
                        }
                        ir::RateLimitEntry::RequestHeader { header, key } => {
                            ActionSpecifier::RequestHeaders(action::RequestHeaders {
                                header_name: header.clone(),
                                descriptor_key: key.clone(),
                                ..Default::default()
                            })
                        }
                        ir::RateLimitEntry::HeaderValueMatch {
                            headers,
                            expect_match,
                            value,
                        } => ActionSpecifier::HeaderValueMatch(action::HeaderValueMatch {
                            descriptor_value: value.clone(),
                            expect_match: Some(BoolValue {
                                value: *expect_match,
                            }),
                            headers: headers.iter().map(header_matcher).collect(),
                            ..Default::default()
                        }),
                        ir::RateLimitEntry::RemoteAddress => {
                            ActionSpecifier::RemoteAddress(action::RemoteAddress::default())
                        }
                    }),
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// Envoy's `jwt_authn` filter with `providers`, each a requirement of its own name that
/// routes name; a route naming none is not verified.
pub(in crate::xds) fn jwt_authn_filter(providers: &[ir::JwtProvider]) -> HttpFilter {
    let mut sorted: Vec<&ir::JwtProvider> = providers.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    // JwtAuthentication: providers = 1, requirement_map = 5 (maps, in key order).
    let mut value = Vec::new();
    for p in &sorted {
        let provider = jwt_authn::v3::JwtProvider {
            issuer: p.issuer.clone(),
            audiences: p.audiences.clone(),
            forward: p.forward,
            jwks_source_specifier: Some(jwks_source(&p.keys)),
            ..Default::default()
        };
        let mut entry = Vec::new();
        append_field(&mut entry, MAP_KEY, p.name.as_bytes());
        append_field(&mut entry, MAP_VALUE, &provider.encode_to_vec());
        append_field(&mut value, 1, &entry);
    }
    for p in &sorted {
        let requirement = jwt_authn::v3::JwtRequirement {
            requires_type: Some(jwt_authn::v3::jwt_requirement::RequiresType::ProviderName(
                p.name.clone(),
            )),
        };
        let mut entry = Vec::new();
        append_field(&mut entry, MAP_KEY, p.name.as_bytes());
        append_field(&mut entry, MAP_VALUE, &requirement.encode_to_vec());
        append_field(&mut value, 5, &entry);
    }
    filter(
        JWT_AUTHN_FILTER,
        Any {
            type_url: <jwt_authn::v3::JwtAuthentication as prost::Name>::type_url(),
            value,
        },
    )
}

/// Where Envoy takes a provider's keys from: a URI through a cluster, or inline.
fn jwks_source(keys: &ir::Jwks) -> jwt_authn::v3::jwt_provider::JwksSourceSpecifier {
    use jwt_authn::v3::jwt_provider::JwksSourceSpecifier;
    match keys {
        ir::Jwks::Remote {
            uri,
            cluster,
            timeout,
            cache_duration,
        } => JwksSourceSpecifier::RemoteJwks(jwt_authn::v3::RemoteJwks {
            http_uri: Some(core::HttpUri {
                uri: uri.clone(),
                timeout: Some(duration(*timeout)),
                http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster(
                    cluster.clone(),
                )),
            }),
            cache_duration: cache_duration.map(duration),
            ..Default::default()
        }),
        ir::Jwks::Local { jwks } => JwksSourceSpecifier::LocalJwks(core::DataSource {
            specifier: Some(core::data_source::Specifier::InlineString(jwks.clone())),
            ..Default::default()
        }),
    }
}

/// A route requiring a token of provider `name`.
pub(in crate::xds) fn jwt_requirement(name: &str) -> Any {
    pack_any(jwt_authn::v3::PerRouteConfig {
        requirement_specifier: Some(
            jwt_authn::v3::per_route_config::RequirementSpecifier::RequirementName(
                name.to_string(),
            ),
        ),
    })
}

/// A connection manager's tracing: OpenTelemetry spans to the collector, with a span
/// of its own for each upstream request.
pub(in crate::xds) fn tracing(t: &ir::Tracing) -> hcm::http_connection_manager::Tracing {
    use envoy_types::pb::envoy::config::trace::v3::{OpenTelemetryConfig, tracing};
    use envoy_types::pb::envoy::r#type::tracing::v3::{CustomTag, custom_tag};
    use envoy_types::pb::envoy::r#type::v3::Percent;
    let tags = t
        .tags
        .iter()
        .map(|tag| CustomTag {
            tag: tag.name.clone(),
            r#type: Some(match &tag.value {
                ir::TagValue::Literal(value) => custom_tag::Type::Literal(custom_tag::Literal {
                    value: value.clone(),
                }),
                ir::TagValue::Environment(name) => {
                    custom_tag::Type::Environment(custom_tag::Environment {
                        name: name.clone(),
                        ..Default::default()
                    })
                }
                ir::TagValue::RequestHeader(name) => {
                    custom_tag::Type::RequestHeader(custom_tag::Header {
                        name: name.clone(),
                        ..Default::default()
                    })
                }
            }),
        })
        .collect();
    hcm::http_connection_manager::Tracing {
        overall_sampling: Some(Percent { value: t.sampling }),
        client_sampling: Some(Percent {
            value: t.client_sampling,
        }),
        random_sampling: Some(Percent {
            value: t.random_sampling,
        }),
        max_path_tag_length: Some(UInt32Value {
            value: t.max_path_tag_length,
        }),
        custom_tags: tags,
        provider: Some(tracing::Http {
            name: "envoy.tracers.opentelemetry".to_string(),
            config_type: Some(tracing::http::ConfigType::TypedConfig(pack_any(
                OpenTelemetryConfig {
                    grpc_service: Some(grpc_service(&t.service)),
                    service_name: t.service_name.clone(),
                    ..Default::default()
                },
            ))),
        }),
        spawn_upstream_span: Some(BoolValue { value: true }),
        ..Default::default()
    }
}
