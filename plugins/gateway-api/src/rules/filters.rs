//! An HTTPRoute rule's filters as IR route policy: header changes, redirects, rewrites,
//! mirrors, CORS and the rest.

use gateway_api::apis::experimental::httproutes::{
    HttpRouteRulesFiltersRequestRedirect, HttpRouteRulesFiltersUrlRewrite,
};

use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) fn apply_filter(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    filter: &HttpRouteRulesFilters,
    matches: &[RouteMatch],
    policy: &mut RoutePolicy,
    redirect: &mut Option<Redirect>,
    out: &mut Rules,
    h2c: bool,
    tls: &Upstream<'_>,
) -> Result<(), String> {
    let missing = || format!("filter {:?} has no configuration", filter.r#type);
    match filter.r#type {
        HttpRouteRulesFiltersType::RequestHeaderModifier => {
            let m = filter
                .request_header_modifier
                .as_ref()
                .ok_or_else(missing)?;
            modify!(&mut policy.request_headers, m)?;
            if let Some(host) = host_of!(m)? {
                policy.host_rewrite = Some(host);
            }
            Ok(())
        }
        HttpRouteRulesFiltersType::ResponseHeaderModifier => {
            let m = filter
                .response_header_modifier
                .as_ref()
                .ok_or_else(missing)?;
            modify!(&mut policy.response_headers, m)
        }
        HttpRouteRulesFiltersType::RequestRedirect => {
            let r = filter.request_redirect.as_ref().ok_or_else(missing)?;
            *redirect = Some(request_redirect(r, matches)?);
            Ok(())
        }
        HttpRouteRulesFiltersType::UrlRewrite => {
            let r = filter.url_rewrite.as_ref().ok_or_else(missing)?;
            url_rewrite(r, matches, policy)
        }
        HttpRouteRulesFiltersType::RequestMirror => {
            let m = filter.request_mirror.as_ref().ok_or_else(missing)?;
            let reference = backend_ref!(&m.backend_ref);
            out.policies
                .extend(reference.policies(key, tls, tls.traffic));
            let base = ClusterOptions {
                protocol: h2c.then_some(UpstreamProtocol::H2c),
                ..ClusterOptions::default()
            };
            let cluster =
                resolve(ctx, grants, key, &reference, base, Some(tls)).map_err(|(_, m)| m)?;
            // A percent, or a fraction (of 100 unless said), in millionths.
            let per_million = match (&m.percent, &m.fraction) {
                (Some(p), _) => i64::from(*p) * 10_000,
                (None, Some(f)) => {
                    let d = i64::from(f.denominator.unwrap_or(100));
                    if d <= 0 || f.numerator < 0 || i64::from(f.numerator) > d {
                        return Err(format!(
                            "mirror fraction {}/{d} is not between 0 and 1",
                            f.numerator
                        ));
                    }
                    i64::from(f.numerator) * 1_000_000 / d
                }
                (None, None) => 1_000_000,
            };
            policy.mirrors.push(Mirror {
                cluster: cluster.name.clone(),
                per_million: u32::try_from(per_million.clamp(0, 1_000_000)).unwrap_or(0),
            });
            // The mirror's cluster is served with the route's.
            out.clusters.push(cluster);
            Ok(())
        }
        HttpRouteRulesFiltersType::Cors => {
            let c = filter.cors.as_ref().ok_or_else(missing)?;
            policy.cors = Some(Box::new(cors(c)?));
            Ok(())
        }
        HttpRouteRulesFiltersType::ExtensionRef | HttpRouteRulesFiltersType::ExternalAuth => {
            Err(format!("filter {:?} is not supported yet", filter.r#type))
        }
    }
}

/// A `RequestRedirect` filter (`matches`: its rule's) as Envoy's redirect.
fn request_redirect(
    r: &HttpRouteRulesFiltersRequestRedirect,
    matches: &[RouteMatch],
) -> Result<Redirect, String> {
    let status = match r.status_code.unwrap_or(302) {
        s @ (301 | 302 | 303 | 307 | 308) => s as u32,
        other => return Err(format!("redirect statusCode {other} is not supported")),
    };
    let mut out = Redirect {
        scheme: r.scheme.as_ref().map(|s| match s {
            HttpRouteRulesFiltersRequestRedirectScheme::Http => "http".to_string(),
            HttpRouteRulesFiltersRequestRedirectScheme::Https => "https".to_string(),
        }),
        host: r.hostname.clone(),
        port: r.port.and_then(|p| u32::try_from(p).ok()),
        path: None,
        prefix: None,
        regex: None,
        status,
    };
    if let Some(host) = &out.host
        && !crate::hosts::valid(host)
    {
        return Err(format!("redirect hostname {host:?} is not valid"));
    }
    if let Some(p) = &r.path {
        match p.r#type {
            HttpRouteRulesFiltersRequestRedirectPathType::ReplaceFullPath => {
                out.path = Some(rewrite_path(p.replace_full_path.as_deref())?);
            }
            HttpRouteRulesFiltersRequestRedirectPathType::ReplacePrefixMatch => {
                prefix_only(matches)?;
                out.prefix = Some(prefix_replacement(p.replace_prefix_match.as_deref())?);
            }
        }
    }
    Ok(out)
}

/// A `URLRewrite` filter (`matches`: its rule's) as the route's host and path rewrites.
fn url_rewrite(
    r: &HttpRouteRulesFiltersUrlRewrite,
    matches: &[RouteMatch],
    policy: &mut RoutePolicy,
) -> Result<(), String> {
    if let Some(host) = &r.hostname {
        if !crate::hosts::valid(host) {
            return Err(format!("rewrite hostname {host:?} is not valid"));
        }
        policy.host_rewrite = Some(host.clone());
    }
    if let Some(p) = &r.path {
        match p.r#type {
            HttpRouteRulesFiltersUrlRewritePathType::ReplaceFullPath => {
                policy.regex_rewrite = Some(RegexRewrite {
                    pattern: "^/.*$".to_string(),
                    substitution: rewrite_path(p.replace_full_path.as_deref())?,
                });
            }
            HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch => {
                prefix_only(matches)?;
                policy.prefix_rewrite =
                    Some(prefix_replacement(p.replace_prefix_match.as_deref())?);
            }
        }
    }
    Ok(())
}

/// A CORS filter as Envoy's CORS policy: origins exact, or (with `*` in the host, or
/// `*` alone) an RE2 regex of the whole origin; `*` methods and headers as Envoy's `*`
/// (it echoes the request's); `maxAge` 5 s unless said. A preflight from another origin
/// is answered without CORS headers, not forwarded.
pub(super) fn cors(c: &HttpRouteRulesFiltersCors) -> Result<Cors, String> {
    let mut allow_origin = Vec::new();
    for origin in c.allow_origins.iter().flatten() {
        if origin == "*" {
            allow_origin.push(StringMatch::Regex(".*".to_string()));
            continue;
        }
        let (scheme, rest) = origin
            .split_once("://")
            .ok_or_else(|| format!("CORS origin {origin:?} is not scheme://host[:port]"))?;
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p)),
            _ => (rest, None),
        };
        let host_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.*".contains(&b));
        if !matches!(scheme, "http" | "https") || !host_ok || port.is_some_and(|p| p.len() > 5) {
            return Err(format!(
                "CORS origin {origin:?} is not http(s)://host[:port]"
            ));
        }
        if host.contains('*') {
            let pattern = origin
                .split('*')
                .map(escape_re2)
                .collect::<Vec<_>>()
                .join(".*");
            allow_origin.push(StringMatch::Regex(pattern));
        } else {
            allow_origin.push(StringMatch::Exact(origin.clone()));
        }
    }
    let list = |items: &Option<Vec<String>>, what: &str| -> Result<String, String> {
        let items = items.as_deref().unwrap_or_default();
        if items.iter().any(|i| i == "*") {
            return Ok("*".to_string());
        }
        if let Some(bad) = items
            .iter()
            .find(|i| !is_header_name(&i.to_ascii_lowercase()))
        {
            return Err(format!("CORS {what} entry {bad:?} is not a token"));
        }
        Ok(items.join(","))
    };
    let max_age = c.max_age.unwrap_or(5);
    Ok(Cors {
        allow_origin,
        allow_methods: list(&c.allow_methods, "allowMethods")?,
        allow_headers: list(&c.allow_headers, "allowHeaders")?,
        expose_headers: list(&c.expose_headers, "exposeHeaders")?,
        max_age_seconds: Some(u64::try_from(max_age.max(1)).unwrap_or(5)),
        allow_credentials: c.allow_credentials.unwrap_or(false),
        allow_private_network: false,
        answer_unmatched_preflights: true,
    })
}

/// A path a rewrite or redirect puts in place: absolute, without CR, LF or NUL.
pub(super) fn rewrite_path(path: Option<&str>) -> Result<String, String> {
    let path = path.unwrap_or("/");
    if !path.starts_with('/') || path.chars().any(|c| c.is_control()) {
        return Err(format!(
            "path {path:?} must start with / and have no control characters"
        ));
    }
    Ok(path.to_string())
}

/// ReplacePrefixMatch needs every match to be a path prefix.
pub(super) fn prefix_only(matches: &[RouteMatch]) -> Result<(), String> {
    if matches
        .iter()
        .all(|m| matches!(m.path, PathMatch::Prefix(_) | PathMatch::SegmentPrefix(_)))
    {
        Ok(())
    } else {
        Err("ReplacePrefixMatch needs PathPrefix matches".into())
    }
}

/// What replaces a matched prefix: as written, or `/` for an empty replacement (the
/// spec's table: prefix `/foo` replaced by "" turns `/foo/bar` into `/bar`).
pub(super) fn prefix_replacement(path: Option<&str>) -> Result<String, String> {
    match path {
        Some("") | None => Ok("/".to_string()),
        Some(p) => rewrite_path(Some(p)),
    }
}

/// The policy of a rule for one of its matches: a prefix replacement Envoy's
/// `prefix_rewrite` would get wrong becomes a regex rewrite of that match's prefix
/// (see [`prefix_regex`]).
pub fn policy_for(policy: &RoutePolicy, matcher: &RouteMatch) -> Option<RoutePolicy> {
    let regex = prefix_regex(matcher, policy.prefix_rewrite.as_deref()?)?;
    Some(RoutePolicy {
        prefix_rewrite: None,
        regex_rewrite: Some(regex),
        ..policy.clone()
    })
}

/// A redirect for one of a rule's matches, its prefix replacement made a regex where
/// Envoy's `prefix_rewrite` would get it wrong.
pub fn redirect_for(redirect: &Redirect, matcher: &RouteMatch) -> Option<Redirect> {
    let regex = prefix_regex(matcher, redirect.prefix.as_deref()?)?;
    Some(Redirect {
        prefix: None,
        regex: Some(regex),
        ..redirect.clone()
    })
}

/// The regex rewrite replacing `matcher`'s path prefix by `replacement`, where Envoy's
/// `prefix_rewrite` would get it wrong: after the prefix `/`, or with a replacement
/// ending in `/` (the request's path goes on after the prefix: `/foo/bar` with `/foo`
/// replaced by `/` is `/bar`, not `//bar`).
pub(super) fn prefix_regex(matcher: &RouteMatch, replacement: &str) -> Option<RegexRewrite> {
    let pattern = match &matcher.path {
        PathMatch::Prefix(p) if p == "/" => "^/".to_string(),
        PathMatch::SegmentPrefix(p) | PathMatch::Prefix(p) if replacement.ends_with('/') => {
            format!("^{}/*", escape_re2(p))
        }
        _ => return None,
    };
    let substitution = if replacement.ends_with('/') {
        replacement.to_string()
    } else {
        format!("{replacement}/")
    };
    Some(RegexRewrite {
        pattern,
        substitution,
    })
}

/// `text` as an RE2 literal: its ASCII punctuation escaped.
pub(super) fn escape_re2(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
