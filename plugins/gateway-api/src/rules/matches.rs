//! An HTTPRoute rule's matches as IR route matches: path, method, headers, query.

use super::*;

pub(super) fn route_match(m: &HttpRouteRulesMatches) -> Result<RouteMatch, String> {
    let path = m.path.as_ref();
    let value = path
        .and_then(|p| p.value.clone())
        .unwrap_or_else(|| "/".to_string());
    let regex = matches!(
        path.and_then(|p| p.r#type.as_ref()),
        Some(HttpRouteRulesMatchesPathType::RegularExpression)
    );
    let bad = |c: char| c.is_control() || c == '?' || c == '#';
    if !regex && (!value.starts_with('/') || value.chars().any(bad)) {
        return Err(format!(
            "path {value:?} must start with / and have no ? or #"
        ));
    }
    let path = match path.and_then(|p| p.r#type.clone()) {
        Some(HttpRouteRulesMatchesPathType::Exact) => PathMatch::Exact(value),
        Some(HttpRouteRulesMatchesPathType::RegularExpression) => {
            check_re2(&value).map_err(|e| format!("path regex {value:?}: {e}"))?;
            PathMatch::Regex(value)
        }
        Some(HttpRouteRulesMatchesPathType::PathPrefix) | None => {
            let trimmed = value.trim_end_matches('/');
            if trimmed.is_empty() {
                PathMatch::Prefix("/".to_string())
            } else {
                PathMatch::SegmentPrefix(trimmed.to_string())
            }
        }
    };
    let mut matcher = RouteMatch::path(path);
    let mut seen = Vec::new();
    for h in m.headers.iter().flatten() {
        let name = h.name.to_ascii_lowercase();
        if !is_header_name(&name) {
            return Err(format!("header name {:?} is not valid", h.name));
        }
        // The first match of a name counts; later ones are ignored (the spec's rule).
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        let value = match h.r#type {
            Some(HttpRouteRulesMatchesHeadersType::RegularExpression) => {
                check_re2(&h.value).map_err(|e| format!("header regex {:?}: {e}", h.value))?;
                StringMatch::Regex(h.value.clone())
            }
            _ => StringMatch::Exact(h.value.clone()),
        };
        matcher.headers.push(HeaderMatch {
            name,
            value: Some(value),
            ignore_case: false,
            invert: false,
            treat_missing_as_empty: false,
        });
    }
    if let Some(method) = &m.method {
        matcher.headers.push(HeaderMatch {
            name: ":method".to_string(),
            value: Some(StringMatch::Exact(method_name(method).to_string())),
            ignore_case: false,
            invert: false,
            treat_missing_as_empty: false,
        });
    }
    let mut seen = Vec::new();
    for q in m.query_params.iter().flatten() {
        if q.name.is_empty() || q.name.len() > 1024 {
            return Err(format!("query parameter name {:?} is not valid", q.name));
        }
        if seen.contains(&q.name) {
            continue;
        }
        seen.push(q.name.clone());
        let value = match q.r#type {
            Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression) => {
                check_re2(&q.value).map_err(|e| format!("query regex {:?}: {e}", q.value))?;
                StringMatch::Regex(q.value.clone())
            }
            _ => StringMatch::Exact(q.value.clone()),
        };
        matcher.query.push(QueryMatch {
            name: q.name.clone(),
            value: Some(value),
            ignore_case: false,
        });
    }
    Ok(matcher)
}

pub(super) fn method_name(method: &HttpRouteRulesMatchesMethod) -> &'static str {
    match method {
        HttpRouteRulesMatchesMethod::Get => "GET",
        HttpRouteRulesMatchesMethod::Head => "HEAD",
        HttpRouteRulesMatchesMethod::Post => "POST",
        HttpRouteRulesMatchesMethod::Put => "PUT",
        HttpRouteRulesMatchesMethod::Delete => "DELETE",
        HttpRouteRulesMatchesMethod::Connect => "CONNECT",
        HttpRouteRulesMatchesMethod::Options => "OPTIONS",
        HttpRouteRulesMatchesMethod::Trace => "TRACE",
        HttpRouteRulesMatchesMethod::Patch => "PATCH",
    }
}

/// Header modifications, checked: names Envoy accepts, values without CR/LF/NUL.
pub(super) fn headers(
    policy: &mut HeadersPolicy,
    set: impl Iterator<Item = (String, String)>,
    add: impl Iterator<Item = (String, String)>,
    remove: &[String],
) -> Result<(), String> {
    let checked = |(name, value): (String, String)| {
        let name = name.to_ascii_lowercase();
        if !is_header_name(&name) || name.starts_with(':') || name == "host" {
            return Err(format!("header {name:?} cannot be modified"));
        }
        if !is_header_value(&value) {
            return Err(format!("header {name:?}: value is not valid"));
        }
        Ok((name, escape_header_value(&value)))
    };
    for pair in set {
        let (name, value) = checked(pair)?;
        policy.set.insert(name, value);
    }
    for pair in add {
        let (name, value) = checked(pair)?;
        policy.add.insert(name, value);
    }
    for name in remove {
        let name = name.to_ascii_lowercase();
        if !is_header_name(&name) {
            return Err(format!("header {name:?} cannot be removed"));
        }
        policy.remove.push(name);
    }
    Ok(())
}
