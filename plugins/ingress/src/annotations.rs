//! Contour's Ingress annotations: timeouts, retries, websocket routes, HTTPS redirect and
//! `allow-http`. A value that cannot be used is ignored with a warning on the Ingress
//! (Contour only logs it).

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir::{Retry, RoutePolicy};
use isobar_sdk::policy::{RETRY_ON, timeout};
use isobar_sdk::{ObjectKey, StatusReport};

#[derive(Debug, Clone)]
pub(crate) struct Annotations {
    /// Timeout and retry policy of every route.
    pub policy: RoutePolicy,
    /// Paths (as written in the Ingress) whose routes allow websocket upgrades.
    pub websocket_routes: BTreeSet<String>,
    /// `ingress.kubernetes.io/force-ssl-redirect: "true"`: answer 301 to https.
    pub force_ssl_redirect: bool,
    /// `kubernetes.io/ingress.allow-http: "false"` turns the HTTP listener off.
    pub allow_http: bool,
    /// `projectcontour.io/tls-minimum-protocol-version` / `-maximum-`.
    pub tls_min: Option<isobar_sdk::ir::TlsVersion>,
    pub tls_max: Option<isobar_sdk::ir::TlsVersion>,
    /// `projectcontour.io/tls-cert-namespace`: where `tls[].secretName` lives.
    pub tls_cert_namespace: Option<String>,
}

pub(crate) fn read(meta: &ObjectMeta, key: &ObjectKey, status: &mut StatusReport) -> Annotations {
    let get = |names: &[&str]| {
        names.iter().find_map(|n| {
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(*n))
                .map(|v| v.trim().to_string())
        })
    };
    let mut warn = |reason: Reason, message: String| {
        status.warning(key, ConditionType::SpecError, reason, message);
    };
    let mut policy = RoutePolicy::default();

    if let Some(value) = get(&[
        "projectcontour.io/response-timeout",
        "contour.heptio.com/request-timeout",
    ]) {
        match timeout(&value) {
            Ok(t) => policy.timeout = Some(t),
            Err(e) => warn(
                Reason::TimeoutPolicyNotValid,
                format!("projectcontour.io/response-timeout ignored: {e}"),
            ),
        }
    }

    policy.retry = retry(&get, &mut warn);

    let websocket_routes = get(&[
        "projectcontour.io/websocket-routes",
        "contour.heptio.com/websocket-routes",
    ])
    .map(|v| {
        v.split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    })
    .unwrap_or_default();

    let mut version = |name: &str| {
        let value = get(&[name])?;
        let parsed = isobar_sdk::ir::TlsVersion::parse(&value);
        if parsed.is_none() {
            warn(
                Reason::TLSConfigNotValid,
                format!("{name} ignored: {value:?} is not \"1.2\" or \"1.3\""),
            );
        }
        parsed
    };
    let tls_min = version("projectcontour.io/tls-minimum-protocol-version");
    let tls_max = version("projectcontour.io/tls-maximum-protocol-version");
    let tls_cert_namespace =
        get(&["projectcontour.io/tls-cert-namespace"]).filter(|n| !n.is_empty());

    Annotations {
        tls_min,
        tls_max,
        tls_cert_namespace,
        policy,
        websocket_routes,
        force_ssl_redirect: get(&["ingress.kubernetes.io/force-ssl-redirect"]).as_deref()
            == Some("true"),
        allow_http: get(&["kubernetes.io/ingress.allow-http"]).as_deref() != Some("false"),
    }
}

/// The retry policy of `projectcontour.io/retry-on` (with `num-retries` and
/// `per-try-timeout`); an invalid one is warned about and left out.
fn retry(
    get: &dyn Fn(&[&str]) -> Option<String>,
    warn: &mut dyn FnMut(Reason, String),
) -> Option<Retry> {
    let retry_on = get(&["projectcontour.io/retry-on", "contour.heptio.com/retry-on"])?;
    let conditions: Vec<&str> = retry_on
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let unknown: Vec<&&str> = conditions
        .iter()
        .filter(|c| !RETRY_ON.contains(c))
        .collect();
    let num_retries = match get(&[
        "projectcontour.io/num-retries",
        "contour.heptio.com/num-retries",
    ])
    .as_deref()
    {
        None => Some(1),
        Some(n) => match n.parse::<i64>() {
            Ok(-1) => Some(0),
            Ok(0) => Some(1),
            Ok(n) => u32::try_from(n).ok(),
            Err(_) => None,
        },
    };
    let per_try = get(&[
        "projectcontour.io/per-try-timeout",
        "contour.heptio.com/per-try-timeout",
    ])
    .map(|t| timeout(&t));
    match (
        unknown.is_empty() && !conditions.is_empty(),
        num_retries,
        per_try,
    ) {
        (false, _, _) => warn(
            Reason::RetryPolicyNotValid,
            format!(
                "projectcontour.io/retry-on ignored: {retry_on:?} is not a list of {}",
                RETRY_ON.join(", ")
            ),
        ),
        (_, None, _) => warn(
            Reason::RetryPolicyNotValid,
            "projectcontour.io/num-retries ignored: not an integer of -1 or more".to_string(),
        ),
        (_, _, Some(Err(e))) => warn(
            Reason::RetryPolicyNotValid,
            format!("projectcontour.io/per-try-timeout ignored: {e}"),
        ),
        (true, Some(num_retries), per_try) => {
            return Some(Retry {
                retry_on: conditions.join(","),
                num_retries,
                per_try_timeout: per_try.and_then(Result::ok).filter(|d| !d.is_zero()),
                retriable_status_codes: Vec::new(),
                backoff: None,
            });
        }
    }
    None
}
