//! One IR route → one Envoy `Route`: its match, its action (forward, redirect, direct
//! response) and the policies on the way; and the order routes are tried in.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::route::v3::{
    self as route, DirectResponseAction, HeaderMatcher, RouteMatch, WeightedCluster,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatchAndSubstitute, RegexMatcher};
use envoy_types::pb::envoy::r#type::v3::FractionalPercent;
use envoy_types::pb::google::protobuf::UInt32Value;
use envoy_types::util::pack_any;

use isobar_sdk::ir::{self, PathMatch, RouteAction};

use crate::xds::filter::{LUA_FILTER, cookie_rewrite_context};
use crate::xds::proto::{duration, header_matcher, headers_to_add, query_matcher, string_matcher};

pub(in crate::xds) fn hash_policy(h: &ir::HashPolicy) -> route::route_action::HashPolicy {
    use route::route_action::hash_policy::{self, PolicySpecifier};
    let (specifier, terminal) = match h {
        ir::HashPolicy::Cookie => (
            PolicySpecifier::Cookie(hash_policy::Cookie {
                name: "X-Contour-Session-Affinity".to_string(),
                ttl: Some(duration(Duration::ZERO)),
                path: "/".to_string(),
                ..Default::default()
            }),
            false,
        ),
        ir::HashPolicy::NamedCookie { name, ttl } => (
            PolicySpecifier::Cookie(hash_policy::Cookie {
                name: name.clone(),
                ttl: Some(duration(*ttl)),
                path: "/".to_string(),
                ..Default::default()
            }),
            true,
        ),
        ir::HashPolicy::Header { name, terminal } => (
            PolicySpecifier::Header(hash_policy::Header {
                header_name: name.clone(),
                ..Default::default()
            }),
            *terminal,
        ),
        ir::HashPolicy::QueryParameter { name, terminal } => (
            PolicySpecifier::QueryParameter(hash_policy::QueryParameter { name: name.clone() }),
            *terminal,
        ),
        ir::HashPolicy::SourceIp { terminal } => (
            PolicySpecifier::ConnectionProperties(hash_policy::ConnectionProperties {
                source_ip: true,
            }),
            *terminal,
        ),
    };
    route::route_action::HashPolicy {
        policy_specifier: Some(specifier),
        terminal,
    }
}

/// Contour's route order: exact, then regex, then prefixes; longer values first, equal
/// lengths in descending byte order; a segment prefix before a string prefix of the same
/// value; then routes matching `:method` first, then more header matches, then more query
/// matches; equally specific routes that carry a tie-break (Gateway API's) by it: older
/// first, then by source, then by rule.
/// The sort key [`route_order`] builds: smaller sorts first.
pub(in crate::xds) type RouteOrder<'a> = (
    u8,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<&'a str>,
    u8,
    std::cmp::Reverse<bool>,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<usize>,
    Option<(Option<i64>, &'a isobar_sdk::ObjectKey, u32)>,
);

pub(in crate::xds) fn route_order(r: &ir::Route) -> RouteOrder<'_> {
    let (class, value, tie) = match &r.matcher.path {
        PathMatch::Exact(v) => (0, v.as_str(), 0),
        PathMatch::Regex(v) => (1, v.as_str(), 0),
        PathMatch::SegmentPrefix(v) => (2, v.as_str(), 0),
        PathMatch::Prefix(v) => (2, v.as_str(), 1),
    };
    let method = r.matcher.headers.iter().any(|h| h.name == ":method");
    let headers = usize::from(r.matcher.authority_regex.is_some()) + r.matcher.headers.len();
    (
        class,
        std::cmp::Reverse(value.len()),
        std::cmp::Reverse(value),
        tie,
        std::cmp::Reverse(method),
        std::cmp::Reverse(headers),
        std::cmp::Reverse(r.matcher.query.len()),
        r.tie.as_deref().map(|t| (t.created, &r.source, t.rule)),
    )
}

pub(in crate::xds) fn envoy_route(r: &ir::Route) -> route::Route {
    let path_specifier = match &r.matcher.path {
        PathMatch::Prefix(p) => route::route_match::PathSpecifier::Prefix(p.clone()),
        PathMatch::SegmentPrefix(p) => {
            route::route_match::PathSpecifier::PathSeparatedPrefix(p.clone())
        }
        PathMatch::Exact(p) => route::route_match::PathSpecifier::Path(p.clone()),
        PathMatch::Regex(p) => route::route_match::PathSpecifier::SafeRegex(RegexMatcher {
            regex: p.clone(),
            ..Default::default()
        }),
    };
    let authority = r.matcher.authority_regex.iter().map(|regex| HeaderMatcher {
        name: ":authority".to_string(),
        header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(
            string_matcher(&ir::StringMatch::Regex(regex.clone()), false),
        )),
        ..Default::default()
    });
    let headers = authority
        .chain(r.matcher.headers.iter().map(header_matcher))
        .collect();
    let query_parameters = r.matcher.query.iter().map(query_matcher).collect();
    let action = match &r.action {
        RouteAction::Forward(clusters) => {
            route::route::Action::Route(forward(clusters, r.policy()))
        }
        RouteAction::DirectResponse { status, body } => {
            route::route::Action::DirectResponse(DirectResponseAction {
                status: *status,
                body: body.as_ref().map(|b| core::DataSource {
                    specifier: Some(core::data_source::Specifier::InlineString(b.clone())),
                    ..Default::default()
                }),
                ..Default::default()
            })
        }
        RouteAction::Redirect(redirect) => {
            route::route::Action::Redirect(redirect_action(redirect))
        }
    };
    let policy = r.policy();
    route::Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(path_specifier),
            headers,
            query_parameters,
            ..Default::default()
        }),
        action: Some(action),
        request_headers_to_add: headers_to_add(&policy.request_headers),
        request_headers_to_remove: policy.request_headers.remove.clone(),
        response_headers_to_add: headers_to_add(&policy.response_headers),
        response_headers_to_remove: policy.response_headers.remove.clone(),
        ..Default::default()
    }
}

pub(in crate::xds) fn redirect_action(r: &ir::Redirect) -> route::RedirectAction {
    use route::redirect_action::{
        PathRewriteSpecifier, RedirectResponseCode, SchemeRewriteSpecifier,
    };
    let path = match (&r.path, &r.prefix, &r.regex) {
        (Some(path), _, _) => Some(PathRewriteSpecifier::PathRedirect(path.clone())),
        (None, Some(prefix), _) => Some(PathRewriteSpecifier::PrefixRewrite(prefix.clone())),
        (None, None, Some(regex)) => Some(PathRewriteSpecifier::RegexRewrite(regex_rewrite(regex))),
        (None, None, None) => None,
    };
    let code = match r.status {
        302 => RedirectResponseCode::Found,
        303 => RedirectResponseCode::SeeOther,
        307 => RedirectResponseCode::TemporaryRedirect,
        308 => RedirectResponseCode::PermanentRedirect,
        _ => RedirectResponseCode::MovedPermanently,
    };
    route::RedirectAction {
        host_redirect: r.host.clone().unwrap_or_default(),
        port_redirect: r.port.unwrap_or_default(),
        response_code: code as i32,
        scheme_rewrite_specifier: r.scheme.clone().map(SchemeRewriteSpecifier::SchemeRedirect),
        path_rewrite_specifier: path,
        ..Default::default()
    }
}

/// A Service's cookie rewrites over its route's (as Contour has them): a cookie both
/// name gets each attribute the Service's rule sets, else the route's; cookies only one
/// names keep that rule.
fn service_over_route(
    route: &[ir::CookieRewrite],
    service: &[ir::CookieRewrite],
) -> Vec<ir::CookieRewrite> {
    let mut out: Vec<ir::CookieRewrite> = route
        .iter()
        .filter(|r| !service.iter().any(|s| s.name == r.name))
        .cloned()
        .collect();
    for s in service {
        let mut merged = s.clone();
        if let Some(r) = route.iter().find(|r| r.name == s.name) {
            merged.path = s.path.clone().or_else(|| r.path.clone());
            merged.domain = s.domain.clone().or_else(|| r.domain.clone());
            merged.secure = s.secure.or(r.secure);
            merged.same_site = s.same_site.clone().or_else(|| r.same_site.clone());
        }
        out.push(merged);
    }
    out
}

pub(in crate::xds) fn forward(
    clusters: &[ir::WeightedCluster],
    policy: &ir::RoutePolicy,
) -> route::RouteAction {
    use route::weighted_cluster::cluster_weight;
    let specifier = match clusters {
        [single]
            if single.request_headers.is_empty()
                && single.response_headers.is_empty()
                && single.host_rewrite.is_none()
                && single.cookie_rewrites.is_empty() =>
        {
            route::route_action::ClusterSpecifier::Cluster(single.cluster.clone())
        }
        many => route::route_action::ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters: many
                .iter()
                .map(|w| route::weighted_cluster::ClusterWeight {
                    name: w.cluster.clone(),
                    weight: Some(UInt32Value { value: w.weight }),
                    request_headers_to_add: headers_to_add(&w.request_headers),
                    request_headers_to_remove: w.request_headers.remove.clone(),
                    response_headers_to_add: headers_to_add(&w.response_headers),
                    response_headers_to_remove: w.response_headers.remove.clone(),
                    host_rewrite_specifier: w
                        .host_rewrite
                        .clone()
                        .map(cluster_weight::HostRewriteSpecifier::HostRewriteLiteral),
                    // One entry at most, so the map encodes deterministically. It
                    // replaces the route's, so it carries the route's rules too.
                    typed_per_filter_config: if w.cookie_rewrites.is_empty() {
                        HashMap::new()
                    } else {
                        HashMap::from([(
                            LUA_FILTER.to_string(),
                            cookie_rewrite_context(&service_over_route(
                                &policy.cookie_rewrites,
                                &w.cookie_rewrites,
                            )),
                        )])
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
    };
    route::RouteAction {
        cluster_specifier: Some(specifier),
        prefix_rewrite: policy.prefix_rewrite.clone().unwrap_or_default(),
        regex_rewrite: policy.regex_rewrite.as_ref().map(regex_rewrite),
        cluster_not_found_response_code: if policy.missing_cluster_500 {
            route::route_action::ClusterNotFoundResponseCode::InternalServerError as i32
        } else {
            0
        },
        host_rewrite_specifier: match (&policy.host_rewrite, &policy.host_rewrite_header) {
            (Some(host), _) => {
                Some(route::route_action::HostRewriteSpecifier::HostRewriteLiteral(host.clone()))
            }
            (None, Some(header)) => {
                Some(route::route_action::HostRewriteSpecifier::HostRewriteHeader(header.clone()))
            }
            (None, None) => None,
        },
        timeout: policy.timeout.map(duration),
        idle_timeout: policy.idle_timeout.map(duration),
        retry_policy: policy.retry.as_ref().map(|r| route::RetryPolicy {
            retry_on: r.retry_on.clone(),
            num_retries: Some(UInt32Value {
                value: r.num_retries,
            }),
            per_try_timeout: r.per_try_timeout.map(duration),
            retriable_status_codes: r.retriable_status_codes.clone(),
            retry_back_off: r.backoff.map(|base| route::retry_policy::RetryBackOff {
                base_interval: Some(duration(base)),
                max_interval: None,
            }),
            ..Default::default()
        }),
        upgrade_configs: if policy.websockets {
            vec![route::route_action::UpgradeConfig {
                upgrade_type: "websocket".to_string(),
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        hash_policy: policy.hash_policies.iter().map(hash_policy).collect(),
        internal_redirect_policy: policy
            .internal_redirect
            .as_ref()
            .map(internal_redirect_policy),
        request_mirror_policies: policy
            .mirrors
            .iter()
            .map(|m| route::route_action::RequestMirrorPolicy {
                cluster: m.cluster.clone(),
                runtime_fraction: Some(core::RuntimeFractionalPercent {
                    // In percent when it is whole (HUNDRED), else in millionths.
                    default_value: Some(if m.per_million % 10_000 == 0 {
                        FractionalPercent {
                            numerator: m.per_million / 10_000,
                            denominator: 0,
                        }
                    } else {
                        FractionalPercent {
                            numerator: m.per_million,
                            denominator: 2,
                        }
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        rate_limits: crate::xds::extension::rate_limits(&policy.rate_limits),
        ..Default::default()
    }
}

pub(in crate::xds) fn internal_redirect_policy(
    r: &ir::InternalRedirect,
) -> route::InternalRedirectPolicy {
    use envoy_types::pb::envoy::extensions::internal_redirect::previous_routes::v3::PreviousRoutesConfig;
    use envoy_types::pb::envoy::extensions::internal_redirect::safe_cross_scheme::v3::SafeCrossSchemeConfig;
    let mut predicates = Vec::new();
    if r.safe_cross_scheme_only {
        predicates.push(core::TypedExtensionConfig {
            name: "envoy.internal_redirect_predicates.safe_cross_scheme".to_string(),
            typed_config: Some(pack_any(SafeCrossSchemeConfig {})),
        });
    }
    if r.deny_repeated_route {
        predicates.push(core::TypedExtensionConfig {
            name: "envoy.internal_redirect_predicates.previous_routes".to_string(),
            typed_config: Some(pack_any(PreviousRoutesConfig {})),
        });
    }
    route::InternalRedirectPolicy {
        max_internal_redirects: Some(UInt32Value {
            value: r.max_internal_redirects,
        }),
        redirect_response_codes: r.response_codes.clone(),
        predicates,
        allow_cross_scheme_redirect: r.allow_cross_scheme,
        ..Default::default()
    }
}

/// A path rewrite by regex, as Envoy spells it.
fn regex_rewrite(r: &isobar_sdk::ir::RegexRewrite) -> RegexMatchAndSubstitute {
    RegexMatchAndSubstitute {
        pattern: Some(RegexMatcher {
            regex: r.pattern.clone(),
            ..Default::default()
        }),
        substitution: r.substitution.clone(),
    }
}
