//! Internal redirects and cookie rewrites.

use isobar_contour::api;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::headers::is_header_name;
use isobar_sdk::ir;

use super::PolicyError;

/// `internalRedirectPolicy`: Envoy follows the upstream's redirect itself.
pub(crate) fn internal_redirect(
    policy: &api::InternalRedirectPolicy,
) -> Result<ir::InternalRedirect, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::RouteError,
            Reason::InternalRedirectPolicyNotValid,
            format!("route.internalRedirectPolicy: {m}"),
        )
    };
    let max_internal_redirects = match policy.max_internal_redirects {
        None => 1,
        Some(n) => u32::try_from(n).map_err(|_| {
            invalid("maxInternalRedirects must be from 0 to 4294967295".to_string())
        })?,
    };
    if let Some(code) = policy
        .redirect_response_codes
        .iter()
        .find(|c| ![301, 302, 303, 307, 308].contains(*c))
    {
        return Err(invalid(format!(
            "redirectResponseCodes {code} must be 301, 302, 303, 307 or 308"
        )));
    }
    let (allow_cross_scheme, safe_cross_scheme_only) =
        match policy.allow_cross_scheme_redirect.as_deref() {
            None | Some("Never") => (false, false),
            Some("Always") => (true, false),
            Some("SafeOnly") => (true, true),
            Some(other) => {
                return Err(invalid(format!(
                    "allowCrossSchemeRedirect {other:?} must be Always, Never or SafeOnly"
                )));
            }
        };
    Ok(ir::InternalRedirect {
        max_internal_redirects,
        response_codes: policy.redirect_response_codes.clone(),
        allow_cross_scheme,
        safe_cross_scheme_only,
        deny_repeated_route: policy.deny_repeated_route_redirect,
    })
}

/// A cookie domain as the CRD's pattern allows it: dot-separated labels of lower-case
/// letters, digits and inner hyphens (no wildcard, no trailing dot).
fn is_cookie_domain(domain: &str) -> bool {
    domain.split('.').all(|label| {
        let bytes = label.as_bytes();
        let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        bytes.first().is_some_and(inner)
            && bytes.last().is_some_and(inner)
            && bytes.iter().all(|b| inner(b) || *b == b'-')
    })
}

/// `cookieRewritePolicies` of a route. Every value is checked to be a plain cookie
/// attribute; the rewrite itself runs in a fixed Lua script that reads them as data.
pub(crate) fn cookie_rewrites(
    policies: &[api::CookieRewritePolicy],
) -> Result<Vec<ir::CookieRewrite>, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::RouteError,
            Reason::CookieRewritePolicyNotValid,
            format!("route.cookieRewritePolicies: {m}"),
        )
    };
    let attribute = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
    };
    let mut out = Vec::with_capacity(policies.len());
    for p in policies {
        if !is_header_name(&p.name) || p.name.contains(['=', ';']) {
            return Err(invalid(format!("{:?} is not a cookie name", p.name)));
        }
        if out.iter().any(|c: &ir::CookieRewrite| c.name == p.name) {
            return Err(invalid(format!("cookie {:?} is rewritten twice", p.name)));
        }
        // The CRD's pattern: no `;`, no control character. The value is data to the
        // rewriting script, never code.
        let path = p.path_rewrite.as_ref().map(|v| v.value.clone());
        if let Some(path) = &path
            && (path.is_empty() || path.chars().any(|c| c == ';' || c.is_ascii_control()))
        {
            return Err(invalid(format!(
                "path {path:?} must not be empty nor hold ; or a control character"
            )));
        }
        let domain = p.domain_rewrite.as_ref().map(|v| v.value.clone());
        if let Some(domain) = &domain
            && (!attribute(domain) || !is_cookie_domain(domain))
        {
            return Err(invalid(format!("domain {domain:?} is not a host name")));
        }
        let same_site = match p.same_site.as_deref() {
            None => None,
            Some(v @ ("Strict" | "Lax" | "None")) => Some(v.to_string()),
            Some(other) => {
                return Err(invalid(format!(
                    "sameSite {other:?} must be Strict, Lax or None"
                )));
            }
        };
        if path.is_none() && domain.is_none() && p.secure.is_none() && same_site.is_none() {
            return Err(invalid(format!(
                "cookie {:?} has nothing to rewrite",
                p.name
            )));
        }
        out.push(ir::CookieRewrite {
            name: p.name.clone(),
            path,
            domain,
            secure: p.secure,
            same_site,
        });
    }
    Ok(out)
}
