//! One HTTPProxy route as IR routes: its matches, policies and prefix rewrites.

use isobar_contour::api::{ReplacePrefix, Route as ProxyRoute};
use isobar_sdk::ObjectKey;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir::{PathMatch, Route, RouteAction, RouteMatch, RoutePolicy};

use crate::check_unsupported;
use crate::conditions::Matches;
use crate::policy::{self, PolicyError};

use super::Walk;
use super::backends::forward_or_503;

impl Walk<'_, '_> {
    /// One route (two when a prefix rewrite needs its trailing-slash twin), or `None`
    /// when it makes the proxy invalid.
    pub(super) fn route(
        &mut self,
        key: &ObjectKey,
        index: usize,
        route: &ProxyRoute,
        matches: &Matches,
    ) -> Option<Vec<Route>> {
        let at = || format!("spec.routes[{index}]");
        let mut ok = self.known_fields(key, &at, route);
        let mut errors: Vec<PolicyError> = Vec::new();
        let matcher = matches
            .and(&route.conditions, false)
            .and_then(|m| m.route_match(self.host.authority_regex.clone()))
            .map_err(|(reason, message)| errors.push((ConditionType::RouteError, reason, message)))
            .ok();

        let actions = usize::from(!route.services.is_empty())
            + usize::from(route.request_redirect_policy.is_some())
            + usize::from(route.direct_response_policy.is_some());
        if actions != 1 {
            errors.push((
                ConditionType::RouteError,
                Reason::RouteActionCountNotValid,
                "must set exactly one of route.services or route.requestRedirectPolicy or route.directResponsePolicy".to_string(),
            ));
        }
        let (mut policy, action) = policy::route_policy(key, route, &mut errors);
        if let Some(defaults) = self.auth {
            policy.auth = defaults.route(route.auth_policy.as_deref());
        }
        match crate::jwt::Providers::route(self.jwt, route.jwt_verification_policy.as_deref()) {
            Ok(requirement) => policy.jwt_requirement = requirement,
            Err((reason, message)) => {
                errors.push((ConditionType::JWTVerificationError, reason, message));
            }
        }

        let mirrors = route.services.iter().filter(|s| s.mirror).count();
        if mirrors > 1 {
            errors.push((
                ConditionType::ServiceError,
                Reason::OnlyOneMirror,
                "only one service per route may be nominated as mirror".to_string(),
            ));
        }
        let cluster_options = self.cluster_options(key, index, route, &mut policy, &mut errors);
        let weighted = self.backends(
            key,
            index,
            route,
            &cluster_options,
            &mut policy,
            &mut errors,
            &mut ok,
        );

        let rewrites = route
            .path_rewrite_policy
            .as_ref()
            .map(|p| p.replace_prefix.as_slice())
            .unwrap_or_default();
        let mut twin = None;
        if let Some(matcher) = &matcher
            && !rewrites.is_empty()
        {
            match prefix_rewrite(&matcher.path, rewrites) {
                Ok(Some((replacement, slash_twin))) => {
                    policy.prefix_rewrite = Some(replacement);
                    twin = slash_twin;
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }

        for (type_, reason, message) in &errors {
            self.status
                .error(key, *type_, *reason, format!("{}: {message}", at()));
        }
        let matcher = matcher?;
        if !ok || !errors.is_empty() {
            return None;
        }
        let action = action.unwrap_or_else(|| forward_or_503(weighted));
        Some(with_twin(key, matcher, action, policy, twin))
    }

    /// Whether the route, its conditions and its timeout policy set only fields
    /// Isobar knows (each unknown one is reported at `at`).
    fn known_fields(
        &mut self,
        key: &ObjectKey,
        at: &dyn Fn() -> String,
        route: &ProxyRoute,
    ) -> bool {
        let mut ok = check_unsupported(self.status, key, at, &route.unsupported, || {
            crate::fields_of(route)
        });
        for (i, cond) in route.conditions.iter().enumerate() {
            ok &= check_unsupported(
                self.status,
                key,
                || format!("{}.conditions[{i}]", at()),
                &cond.unsupported,
                || crate::fields_of(cond),
            );
        }
        if let Some(timeouts) = &route.timeout_policy {
            ok &= check_unsupported(
                self.status,
                key,
                || format!("{}.timeoutPolicy", at()),
                &timeouts.unsupported,
                || crate::fields_of(timeouts),
            );
        }
        ok
    }
}

/// The route, after its trailing-slash twin when it has one (`twin`: the twin's prefix
/// and rewrite).
fn with_twin(
    key: &ObjectKey,
    matcher: RouteMatch,
    action: RouteAction,
    policy: RoutePolicy,
    twin: Option<(String, String)>,
) -> Vec<Route> {
    let mut out = Vec::with_capacity(2);
    if let Some((prefix, replacement)) = twin {
        out.push(Route {
            matcher: RouteMatch {
                path: PathMatch::Prefix(prefix),
                ..matcher.clone()
            },
            action: action.clone(),
            source: key.clone(),
            tie: None,
            policy: RoutePolicy {
                prefix_rewrite: Some(replacement),
                ..policy.clone()
            }
            .boxed(),
        });
    }
    out.push(Route {
        matcher,
        action,
        source: key.clone(),
        tie: None,
        policy: policy.boxed(),
    });
    out
}

/// Contour's `replacePrefix`: the entry whose `prefix` equals the route's prefix wins,
/// else the entry without a prefix. A prefix `/p` (not ending in `/`) rewritten to `R`
/// also gets a twin route `/p/` → `R/`, so `/p/x` does not become `R//x`.
type Rewrite = (String, Option<(String, String)>);

fn prefix_rewrite(
    path: &PathMatch,
    entries: &[ReplacePrefix],
) -> Result<Option<Rewrite>, PolicyError> {
    let PathMatch::Prefix(prefix) = path else {
        return Err((
            ConditionType::PrefixReplaceError,
            Reason::MustHavePrefix,
            "cannot specify prefix replacements without a prefix condition".to_string(),
        ));
    };
    for (i, a) in entries.iter().enumerate() {
        if entries[..i].iter().any(|b| b.prefix == a.prefix) {
            return Err((
                ConditionType::PrefixReplaceError,
                Reason::DuplicateReplacement,
                format!("duplicate replacement prefix {:?}", a.prefix),
            ));
        }
        if !a.replacement.starts_with('/')
            || (!a.prefix.is_empty() && !a.prefix.starts_with('/'))
            || !isobar_sdk::headers::is_header_value(&a.replacement)
            || !isobar_sdk::headers::is_header_value(&a.prefix)
        {
            return Err((
                ConditionType::PrefixReplaceError,
                Reason::MustHavePrefix,
                "prefix and replacement must start with / and hold no control characters"
                    .to_string(),
            ));
        }
    }
    let chosen = entries
        .iter()
        .find(|e| {
            e.prefix.trim_end_matches('/') == prefix.trim_end_matches('/') && !e.prefix.is_empty()
        })
        .or_else(|| entries.iter().find(|e| e.prefix.is_empty()));
    let Some(entry) = chosen else {
        return Ok(None);
    };
    let replacement = entry.replacement.clone();
    if prefix.ends_with('/') {
        return Ok(Some((replacement, None)));
    }
    let twin_replacement = if replacement.ends_with('/') {
        replacement.clone()
    } else {
        format!("{replacement}/")
    };
    Ok(Some((
        replacement,
        Some((format!("{prefix}/"), twin_replacement)),
    )))
}
