//! An HTTPRoute's rules as IR routes: matches, filters and backends. Each rule is
//! checked alone: a rule Isobar cannot serve as written is left out (and reported),
//! the others are served.

use gateway_api::apis::experimental::httproutes::{
    HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesBackendRefsFiltersType,
    HttpRouteRulesFilters, HttpRouteRulesFiltersCors, HttpRouteRulesFiltersRequestRedirectPathType,
    HttpRouteRulesFiltersRequestRedirectScheme, HttpRouteRulesFiltersType,
    HttpRouteRulesFiltersUrlRewritePathType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesMethod, HttpRouteRulesMatchesPathType,
    HttpRouteRulesMatchesQueryParamsType, HttpRouteRulesRetry, HttpRouteRulesSessionPersistence,
    HttpRouteRulesSessionPersistenceCookieConfigLifetimeType, HttpRouteRulesSessionPersistenceType,
};
use isobar_sdk::headers::{escape_header_value, is_header_name, is_header_value};
use isobar_sdk::ir::{
    CircuitBreakers, Cluster, ClusterOptions, Cors, HashPolicy, HeaderMatch, HeadersPolicy,
    LbPolicy, Mirror, PathMatch, QueryMatch, Redirect, RegexRewrite, Retry, RouteAction,
    RouteMatch, RoutePolicy, StringMatch, UpstreamProtocol, WeightedCluster,
};
use isobar_sdk::regex::check_re2;
use isobar_sdk::resolve::{PortRef, service_cluster};
use isobar_sdk::{BuildContext, ObjectKey};

use std::collections::BTreeSet;

use crate::backend_tls::{BackendTls, Upstream};
use crate::backend_traffic::BackendTraffic;
use crate::grants::Grants;

use filters::apply_filter;
pub use filters::{policy_for, redirect_for};
use matches::{headers, route_match};

/// Applies a generated `…HeaderModifier` (its `set`, `add` and `remove`) to a
/// [`HeadersPolicy`], checked (see [`headers`]).
macro_rules! modify {
    ($policy:expr, $m:expr) => {
        headers(
            $policy,
            $m.set
                .iter()
                .flatten()
                .filter(|h| !h.name.eq_ignore_ascii_case("host"))
                .map(|h| (h.name.clone(), h.value.clone())),
            $m.add
                .iter()
                .flatten()
                .filter(|h| !h.name.eq_ignore_ascii_case("host"))
                .map(|h| (h.name.clone(), h.value.clone())),
            $m.remove.as_deref().unwrap_or_default(),
        )
    };
}

/// The `Host` a request header modifier sets or adds (Envoy rewrites the authority to
/// it, as Contour does), checked to be a host name (with an optional port).
macro_rules! host_of {
    ($m:expr) => {{
        let m = $m;
        let host = |name: &str| name.eq_ignore_ascii_case("host");
        let set = m
            .set
            .iter()
            .flatten()
            .filter(|h| host(&h.name))
            .map(|h| &h.value);
        let add = m
            .add
            .iter()
            .flatten()
            .filter(|h| host(&h.name))
            .map(|h| &h.value);
        let value = set.chain(add).map(|v| v.to_ascii_lowercase()).last();
        match value {
            Some(v) if !rewritten_host(&v) => Err(format!("Host {v:?} is not a host name")),
            other => Ok(other),
        }
    }};
}

/// Whether a `Host` value is a host name, with an optional port.
fn rewritten_host(value: &str) -> bool {
    let (host, port) = match value.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (value, None),
    };
    crate::hosts::valid(host)
        && !host.starts_with('*')
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

/// The name of a cluster no backend has: the share of weight of an invalid backend
/// goes there and is answered 500.
pub const INVALID_BACKEND: &str = "gateway-api/invalid-backend";

/// One rule, ready to be placed on the route's hosts.
#[derive(Debug, Clone)]
pub struct Rule {
    /// One IR route per match (with the same action and policy).
    pub matches: Vec<RouteMatch>,
    pub action: RouteAction,
    pub policy: Option<Box<RoutePolicy>>,
}

/// Why a backend reference does not resolve: ResolvedRefs' reason and message.
pub type Unresolved = (&'static str, String);

/// What the rules of a route came to.
#[derive(Debug, Default)]
pub struct Rules {
    pub rules: Vec<Rule>,
    pub clusters: Vec<Cluster>,
    /// The first unresolved backend reference.
    pub unresolved: Option<Unresolved>,
    /// Rules left out, with why.
    pub invalid: Vec<String>,
    /// The policies (BackendTLS, XBackendTraffic) naming the Services the rules send to.
    pub policies: BTreeSet<ObjectKey>,
}

/// Why a backend is not sent to although it resolves: its BackendTLSPolicy cannot be
/// served (the policy's status says why; the route's references are fine).
const TLS_NOT_SERVED: &str = "BackendTLSPolicyNotServed";

/// Translates the rules of the route `key` (an HTTPRoute, or a GRPCRoute as one: then
/// `h2c`, its backends speak HTTP/2 in clear text).
pub fn rules(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    rules: &[HttpRouteRules],
    h2c: bool,
    tls: &Upstream<'_>,
) -> Rules {
    let mut out = Rules::default();
    for (i, rule) in rules.iter().enumerate() {
        match one_rule(ctx, grants, key, rule, h2c, tls, &mut out) {
            Ok(r) => out.rules.push(r),
            Err(e) => out.invalid.push(format!("rule {i}: {e}")),
        }
    }
    out
}

fn one_rule(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    rule: &HttpRouteRules,
    h2c: bool,
    tls: &Upstream<'_>,
    out: &mut Rules,
) -> Result<Rule, String> {
    let default_match = [HttpRouteRulesMatches::default()];
    let matches = match rule.matches.as_deref() {
        None | Some([]) => &default_match[..],
        Some(m) => m,
    };
    let matches = matches
        .iter()
        .map(route_match)
        .collect::<Result<Vec<_>, _>>()?;
    let mut policy = RoutePolicy::default();
    let mut redirect = None;
    for filter in rule.filters.iter().flatten() {
        apply_filter(
            ctx,
            grants,
            key,
            filter,
            &matches,
            &mut policy,
            &mut redirect,
            out,
            h2c,
            tls,
        )?;
    }
    let mut per_try = None;
    if let Some(timeouts) = &rule.timeouts {
        if let Some(t) = &timeouts.request {
            policy.timeout = Some(duration(t)?);
        }
        if let Some(t) = &timeouts.backend_request {
            let backend = duration(t)?;
            if policy.timeout.is_some_and(|r| !r.is_zero() && backend > r) {
                return Err("timeouts.backendRequest must not exceed timeouts.request".into());
            }
            if rule.retry.is_some() {
                // Each attempt is a backend request.
                per_try = Some(backend);
            } else {
                // Without retries a backend request is the request: its timeout bounds it.
                policy.timeout = Some(policy.timeout.map_or(backend, |r| r.min(backend)));
            }
        }
    }
    if let Some(r) = &rule.retry {
        policy.retry = retry(r, per_try)?;
    }
    if let Some(s) = &rule.session_persistence {
        policy.hash_policies = vec![session(s)?];
    }
    let action = match redirect {
        Some(r) => RouteAction::Redirect(Box::new(r)),
        None => forward(
            ctx,
            grants,
            key,
            rule.backend_refs.as_deref().unwrap_or_default(),
            &mut policy,
            h2c,
            tls,
            out,
        )?,
    };
    let policy = (policy != RoutePolicy::default()).then(|| Box::new(policy));
    Ok(Rule {
        matches,
        action,
        policy,
    })
}

/// The clusters of `backends`, by weight; an invalid backend's share answers 500, and
/// no weight at all answers 500.
#[allow(clippy::too_many_arguments)]
fn forward(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    backends: &[HttpRouteRulesBackendRefs],
    policy: &mut RoutePolicy,
    h2c: bool,
    tls: &Upstream<'_>,
    out: &mut Rules,
) -> Result<RouteAction, String> {
    let mut weighted = Vec::new();
    // Without a session of its own, the rule keeps the one its first backend's
    // XBackendTrafficPolicy asks for.
    if policy.hash_policies.is_empty()
        && let Some(traffic) = tls.traffic
    {
        let session = backends.iter().find_map(|b| {
            let namespace = b.namespace.as_deref().unwrap_or(&key.namespace);
            traffic.lookup(namespace, &b.name)?.1.session.clone()
        });
        policy.hash_policies.extend(session);
    }
    for backend in backends {
        let weight = u32::try_from(backend.weight.unwrap_or(1)).unwrap_or(0);
        let reference = backend_ref!(backend);
        out.policies
            .extend(reference.policies(key, tls, tls.traffic));
        // Sessions kept by hashing need clusters that hash.
        let base = ClusterOptions {
            protocol: h2c.then_some(UpstreamProtocol::H2c),
            lb_policy: if policy.hash_policies.is_empty() {
                LbPolicy::default()
            } else {
                LbPolicy::RingHash
            },
            ..ClusterOptions::default()
        };
        match resolve(ctx, grants, key, &reference, base, Some(tls)) {
            Ok(cluster) => {
                // A Service port of appProtocol `kubernetes.io/ws(s)` takes WebSocket
                // upgrades.
                policy.websockets |= speaks_websocket(ctx, &cluster, backend.port);
                if weight > 0 {
                    let mut w = WeightedCluster {
                        cluster: cluster.name.clone(),
                        weight,
                        ..Default::default()
                    };
                    backend_filters(backend, &mut w)?;
                    weighted.push(w);
                }
                out.clusters.push(cluster);
            }
            Err(e) => {
                if weight > 0 {
                    policy.missing_cluster_500 = true;
                    weighted.push(WeightedCluster {
                        cluster: INVALID_BACKEND.to_string(),
                        weight,
                        ..Default::default()
                    });
                }
                if e.0 != TLS_NOT_SERVED {
                    out.unresolved.get_or_insert(e);
                }
            }
        }
    }
    WeightedCluster::fit_weights(&mut weighted);
    if weighted.iter().all(|w| w.cluster == INVALID_BACKEND) {
        policy.missing_cluster_500 = false;
        return Ok(RouteAction::DirectResponse {
            status: 500,
            body: None,
        });
    }
    Ok(RouteAction::Forward(weighted))
}

/// Whether the Service port a backend names says it speaks WebSocket.
fn speaks_websocket(ctx: &BuildContext<'_>, cluster: &Cluster, port: Option<i32>) -> bool {
    let Some(service) = ctx.store().service(&cluster.namespace, &cluster.service) else {
        return false;
    };
    service.ports.iter().any(|p| {
        Some(p.port) == port
            && matches!(
                p.app_protocol.as_deref(),
                Some("kubernetes.io/ws" | "kubernetes.io/wss")
            )
    })
}

/// A backend's own filters: header modifications of the requests sent to it and of
/// its responses. Any other filter type on a backend is not served (the rule is left
/// out).
fn backend_filters(
    backend: &HttpRouteRulesBackendRefs,
    weighted: &mut WeightedCluster,
) -> Result<(), String> {
    for filter in backend.filters.iter().flatten() {
        let missing = || format!("backend filter {:?} has no configuration", filter.r#type);
        match filter.r#type {
            HttpRouteRulesBackendRefsFiltersType::RequestHeaderModifier => {
                let m = filter
                    .request_header_modifier
                    .as_ref()
                    .ok_or_else(missing)?;
                modify!(&mut weighted.request_headers, m)?;
                if let Some(host) = host_of!(m)? {
                    weighted.host_rewrite = Some(host);
                }
            }
            HttpRouteRulesBackendRefsFiltersType::ResponseHeaderModifier => {
                let m = filter
                    .response_header_modifier
                    .as_ref()
                    .ok_or_else(missing)?;
                modify!(&mut weighted.response_headers, m)?;
            }
            ref other => {
                return Err(format!("backend filter {other:?} is not supported yet"));
            }
        }
    }
    Ok(())
}

/// A reference to a backend, as backendRefs and mirror filters spell it.
pub struct BackendRef<'a> {
    pub group: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub port: Option<i32>,
}

impl BackendRef<'_> {
    /// The policies naming the Service this refers to (in the namespace of the route
    /// `key`, unless it names one): BackendTLSPolicies and, with `traffic`,
    /// XBackendTrafficPolicies.
    pub fn policies(
        &self,
        key: &ObjectKey,
        tls: &BackendTls,
        traffic: Option<&BackendTraffic>,
    ) -> Vec<ObjectKey> {
        let namespace = self.namespace.unwrap_or(&key.namespace);
        let traffic = traffic
            .into_iter()
            .flat_map(|t| t.naming(namespace, self.name));
        tls.naming(namespace, self.name)
            .chain(traffic)
            .cloned()
            .collect()
    }
}

/// The cluster of a Service backend the route `key` may use (over h2c for `h2c`), over
/// TLS as the BackendTLSPolicy of its port says (with `tls`).
pub fn resolve(
    ctx: &BuildContext<'_>,
    grants: &Grants<'_>,
    key: &ObjectKey,
    backend: &BackendRef<'_>,
    base: ClusterOptions,
    tls: Option<&Upstream<'_>>,
) -> Result<Cluster, Unresolved> {
    let h2c = base.protocol == Some(UpstreamProtocol::H2c);
    let group = backend.group.unwrap_or("");
    let kind = backend.kind.unwrap_or("Service");
    if !group.is_empty() || kind != "Service" {
        return Err((
            "InvalidKind",
            format!("backendRef {kind} of group {group:?} is not a Service"),
        ));
    }
    let namespace = backend.namespace.unwrap_or(&key.namespace);
    if namespace != key.namespace
        && !grants.permits(
            &key.namespace,
            key.kind,
            namespace,
            "",
            "Service",
            backend.name,
        )
    {
        return Err((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {namespace} lets {}s of {} use Service {}",
                key.kind, key.namespace, backend.name
            ),
        ));
    }
    let Some(port) = backend.port else {
        return Err((
            "BackendNotFound",
            format!(
                "backendRef Service {namespace}/{} needs a port",
                backend.name
            ),
        ));
    };
    let mut options = base;
    if let Some(tls) = tls.filter(|t| !t.is_empty()) {
        let port_name = ctx.objects.service(namespace, backend.name).and_then(|s| {
            let found = s
                .ports
                .iter()
                .find(|p| p.port == port && p.not_tcp.is_none());
            found.and_then(|p| p.name.clone())
        });
        match tls.lookup(namespace, backend.name, port_name.as_deref()) {
            None => {}
            Some((_, Some(t))) => {
                options.protocol = Some(if h2c {
                    UpstreamProtocol::H2
                } else {
                    UpstreamProtocol::Tls
                });
                options.sni = Some(t.hostname.clone());
                options.upstream_validation = Some(Box::new(t.validation.clone()));
                options.client_certificate = tls.client_certificate.map(str::to_string);
            }
            Some((policy, None)) => {
                return Err((
                    TLS_NOT_SERVED,
                    format!("BackendTLSPolicy {} cannot be served", policy.name),
                ));
            }
        }
    }
    if let Some((_, traffic)) = tls
        .and_then(|t| t.traffic)
        .and_then(|t| t.lookup(namespace, backend.name))
        && let Some(budget) = traffic.retry_budget
    {
        options.circuit_breakers = Some(Box::new(CircuitBreakers {
            retry_budget: Some(budget),
            ..CircuitBreakers::default()
        }));
    }
    service_cluster(
        ctx.objects,
        namespace,
        backend.name,
        PortRef::Number(port),
        options,
        ctx.external_names(),
    )
    .map_err(|e| ("BackendNotFound", e.to_string()))
}

/// A Gateway API duration (`1h2m3s4ms`, at most one of each unit).
pub fn duration(value: &str) -> Result<std::time::Duration, String> {
    let d: gateway_api::Duration = value
        .parse()
        .map_err(|e| format!("invalid duration {value:?}: {e}"))?;
    u64::try_from(d.as_nanos())
        .map(std::time::Duration::from_nanos)
        .map_err(|_| format!("duration {value:?} is too long"))
}

/// A rule's `sessionPersistence` as a hash policy on its clusters (which then hash):
/// a cookie (made by Envoy when a request has none; Permanent lives `absoluteTimeout`,
/// Session, the default, the browser's session) or a header, named `sessionName`.
pub fn session(s: &HttpRouteRulesSessionPersistence) -> Result<HashPolicy, String> {
    let name = s
        .session_name
        .clone()
        .unwrap_or_else(|| "Session-Persistence".to_string());
    if !is_header_name(&name) {
        return Err(format!(
            "sessionName {name:?} is not a cookie or header name"
        ));
    }
    if s.r#type == Some(HttpRouteRulesSessionPersistenceType::Header) {
        return Ok(HashPolicy::Header {
            name,
            terminal: true,
        });
    }
    let permanent = s
        .cookie_config
        .as_ref()
        .and_then(|c| c.lifetime_type.as_ref())
        == Some(&HttpRouteRulesSessionPersistenceCookieConfigLifetimeType::Permanent);
    let ttl = match (&s.absolute_timeout, permanent) {
        (Some(t), true) => duration(t)?,
        (None, true) => {
            return Err("a Permanent session cookie needs an absoluteTimeout".into());
        }
        (_, false) => std::time::Duration::ZERO,
    };
    Ok(HashPolicy::NamedCookie { name, ttl })
}

/// A rule's `retry` as Envoy's retry policy: connection failures and resets (which a
/// per-try timeout is) are retried, and the listed status codes; `attempts` retries (one
/// when unset, as Envoy; none for 0), `backoff` as the base interval.
fn retry(
    r: &HttpRouteRulesRetry,
    per_try_timeout: Option<std::time::Duration>,
) -> Result<Option<Retry>, String> {
    let mut codes = Vec::new();
    for code in r.codes.iter().flatten() {
        match u32::try_from(*code) {
            Ok(c @ 400..=599) => codes.push(c),
            _ => return Err(format!("retry code {code} is not within 400-599")),
        }
    }
    let attempts = match r.attempts {
        None => 1,
        Some(n) => u32::try_from(n).map_err(|_| format!("retry attempts {n} is negative"))?,
    };
    if attempts == 0 {
        return Ok(None);
    }
    let backoff = r.backoff.as_deref().map(duration).transpose()?;
    if backoff.is_some_and(|b| b < std::time::Duration::from_millis(1)) {
        return Err("retry backoff must be at least 1ms".into());
    }
    let mut on = vec!["connect-failure", "refused-stream", "reset"];
    if !codes.is_empty() {
        on.push("retriable-status-codes");
    }
    Ok(Some(Retry {
        retry_on: on.join(","),
        num_retries: attempts,
        per_try_timeout,
        retriable_status_codes: codes,
        backoff,
    }))
}

// After the macros above: they are in scope in these modules.
mod filters;
mod matches;
