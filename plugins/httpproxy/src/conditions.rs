//! Match conditions: validation of one `conditions` block and their accumulation down an
//! include chain (prefixes concatenated with `//` collapsed; header and query matches
//! added up), as Contour does.

use isobar_contour::api::{HeaderMatchCondition, MatchCondition, QueryParameterMatchCondition};
use isobar_sdk::Reason;
use isobar_sdk::ir::{HeaderMatch, PathMatch, QueryMatch, RouteMatch, StringMatch};
use isobar_sdk::regex::check_re2;

/// What a chain of condition blocks has narrowed a route down to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Matches {
    /// The concatenated path: a prefix unless the last path condition was exact or regex.
    path: String,
    kind: PathKind,
    headers: Vec<HeaderMatch>,
    query: Vec<QueryMatch>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum PathKind {
    #[default]
    Prefix,
    Exact,
    Regex,
}

/// A condition block that cannot be used, with Contour's reason.
pub(crate) type Invalid = (Reason, String);

impl Matches {
    /// Adds one block of conditions (a route's or an include's) to what is already
    /// accumulated. Include blocks may only hold prefix, header and query conditions.
    pub(crate) fn and(&self, block: &[MatchCondition], include: bool) -> Result<Matches, Invalid> {
        let mut out = self.clone();
        let mut path_conditions = 0;
        for cond in block {
            let path = [
                cond.prefix.as_deref().map(|p| (PathKind::Prefix, p)),
                cond.exact.as_deref().map(|p| (PathKind::Exact, p)),
                cond.regex.as_deref().map(|p| (PathKind::Regex, p)),
            ];
            for (kind, value) in path.into_iter().flatten() {
                path_conditions += 1;
                if path_conditions > 1 {
                    return Err(path_error(
                        "more than one prefix, exact or regex is not allowed in a condition block",
                    ));
                }
                if include && kind != PathKind::Prefix {
                    return Err(path_error(
                        "exact and regex conditions are not allowed in includes",
                    ));
                }
                if kind != PathKind::Regex && !value.starts_with('/') {
                    return Err(path_error(format!(
                        "{} conditions must start with /, {value} was supplied",
                        if kind == PathKind::Prefix {
                            "prefix"
                        } else {
                            "exact"
                        }
                    )));
                }
                out.path.push_str(value);
                out.kind = kind;
            }
            if let Some(header) = &cond.header {
                out.headers.push(header_match(header)?);
            }
            if let Some(query) = &cond.query_parameter {
                out.query.push(query_match(query)?);
            }
        }
        check_header_contradictions(&out.headers)?;
        Ok(out)
    }

    /// The IR match for these conditions on a host.
    pub(crate) fn route_match(
        &self,
        authority_regex: Option<String>,
    ) -> Result<RouteMatch, Invalid> {
        let path = collapse_slashes(&self.path);
        let path = match self.kind {
            PathKind::Prefix if path.is_empty() => PathMatch::Prefix("/".to_string()),
            PathKind::Prefix => PathMatch::Prefix(path),
            PathKind::Exact => PathMatch::Exact(path),
            PathKind::Regex => {
                check_re2(&path).map_err(path_error)?;
                PathMatch::Regex(path)
            }
        };
        Ok(RouteMatch {
            path,
            authority_regex,
            headers: self.headers.clone(),
            query: self.query.clone(),
        })
    }
}

fn path_error(message: impl Into<String>) -> Invalid {
    (Reason::PathMatchConditionsNotValid, message.into())
}

fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

pub(crate) fn header_match(h: &HeaderMatchCondition) -> Result<HeaderMatch, Invalid> {
    let invalid = |m: String| (Reason::HeaderMatchConditionsNotValid, m);
    if h.name.trim().is_empty() {
        return Err(invalid("header conditions must name a header".to_string()));
    }
    if !isobar_sdk::headers::is_header_name(&h.name) {
        return Err(invalid(format!(
            "header condition name {:?} is not a header name",
            h.name
        )));
    }
    let options = [
        h.present.then_some((None, false)),
        h.notpresent.then_some((None, true)),
        h.exact
            .clone()
            .map(|v| (Some(StringMatch::Exact(v)), false)),
        h.notexact
            .clone()
            .map(|v| (Some(StringMatch::Exact(v)), true)),
        h.contains
            .clone()
            .map(|v| (Some(StringMatch::Contains(v)), false)),
        h.notcontains
            .clone()
            .map(|v| (Some(StringMatch::Contains(v)), true)),
        h.regex
            .clone()
            .map(|v| (Some(StringMatch::Regex(v)), false)),
    ];
    let mut chosen = options.into_iter().flatten();
    let Some((value, invert)) = chosen.next() else {
        return Err(invalid(format!(
            "header condition {:?} needs one of present, notpresent, exact, notexact, contains, notcontains or regex",
            h.name
        )));
    };
    if chosen.next().is_some() {
        return Err(invalid(format!(
            "header condition {:?} has more than one match type",
            h.name
        )));
    }
    if let Some(StringMatch::Contains(v)) = &value
        && v.is_empty()
    {
        return Err(invalid(format!(
            "header condition {:?}: contains and notcontains need a value",
            h.name
        )));
    }
    if let Some(StringMatch::Regex(r)) = &value {
        check_re2(r).map_err(|e| invalid(format!("header {:?}: {e}", h.name)))?;
    }
    Ok(HeaderMatch {
        name: h.name.to_ascii_lowercase(),
        value,
        ignore_case: h.ignore_case,
        invert,
        treat_missing_as_empty: h.treat_missing_as_empty,
    })
}

/// Contour refuses two `exact` matches on one header, and an `exact` and a `notexact`
/// with the same value: no request could take such a route.
fn check_header_contradictions(headers: &[HeaderMatch]) -> Result<(), Invalid> {
    for (i, a) in headers.iter().enumerate() {
        for b in &headers[i + 1..] {
            if a.name != b.name {
                continue;
            }
            let (Some(StringMatch::Exact(x)), Some(StringMatch::Exact(y))) = (&a.value, &b.value)
            else {
                continue;
            };
            let contradiction = match (a.invert, b.invert) {
                (false, false) => true,
                (false, true) | (true, false) => x == y,
                (true, true) => false,
            };
            if contradiction {
                return Err((
                    Reason::HeaderMatchConditionsNotValid,
                    format!(
                        "cannot specify contradicting or duplicate 'exact' conditions for header {:?}",
                        a.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn query_match(q: &QueryParameterMatchCondition) -> Result<QueryMatch, Invalid> {
    let invalid = |m: String| (Reason::QueryParameterMatchConditionsNotValid, m);
    if q.name.is_empty() {
        return Err(invalid(
            "query parameter conditions must name a parameter".to_string(),
        ));
    }
    if q.name.len() > 1024 {
        return Err(invalid(format!(
            "query parameter name {}… is over 1,024 bytes",
            q.name.chars().take(32).collect::<String>()
        )));
    }
    let options = [
        q.exact.clone().map(|v| Some(StringMatch::Exact(v))),
        q.prefix.clone().map(|v| Some(StringMatch::Prefix(v))),
        q.suffix.clone().map(|v| Some(StringMatch::Suffix(v))),
        q.regex.clone().map(|v| Some(StringMatch::Regex(v))),
        q.contains.clone().map(|v| Some(StringMatch::Contains(v))),
        q.present.then_some(None),
    ];
    let mut chosen = options.into_iter().flatten();
    let Some(value) = chosen.next() else {
        return Err(invalid(format!(
            "query parameter condition {:?} needs one of exact, prefix, suffix, regex, contains or present",
            q.name
        )));
    };
    if chosen.next().is_some() {
        return Err(invalid(format!(
            "query parameter condition {:?} has more than one match type",
            q.name
        )));
    }
    if let Some(StringMatch::Prefix(v) | StringMatch::Suffix(v) | StringMatch::Contains(v)) = &value
        && v.is_empty()
    {
        return Err(invalid(format!(
            "query parameter condition {:?}: prefix, suffix and contains need a value",
            q.name
        )));
    }
    if let Some(StringMatch::Regex(r)) = &value {
        check_re2(r).map_err(|e| invalid(format!("query parameter {:?}: {e}", q.name)))?;
    }
    Ok(QueryMatch {
        name: q.name.clone(),
        value,
        ignore_case: q.ignore_case,
    })
}

#[cfg(test)]
mod tests;
