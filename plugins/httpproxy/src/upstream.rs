//! Upstream policies: HTTPProxy service fields that shape the Envoy cluster (load
//! balancing, health checks, protocol, upstream TLS validation, slow start), validated
//! with Contour's rules.

use isobar_sdk::headers::{is_header_name, is_header_value};
use isobar_sdk::policy::timeout;

use isobar_contour::api;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::ir;

use crate::policy::PolicyError;

/// `loadBalancerPolicy`: the clusters' balancing and, for hashing strategies, the route's
/// hash policies. An unknown strategy, or `RequestHash` without a usable hash policy,
/// falls back to round robin, as in Contour (with a warning here).
pub(crate) fn load_balancer(
    policy: &api::LoadBalancerPolicy,
) -> (ir::LbPolicy, Vec<ir::HashPolicy>, Option<String>) {
    match policy.strategy.as_str() {
        "" | "RoundRobin" => (ir::LbPolicy::RoundRobin, Vec::new(), None),
        "WeightedLeastRequest" => (ir::LbPolicy::LeastRequest, Vec::new(), None),
        "Random" => (ir::LbPolicy::Random, Vec::new(), None),
        "Cookie" => (ir::LbPolicy::RingHash, vec![ir::HashPolicy::Cookie], None),
        "RequestHash" => {
            let mut hashes = Vec::new();
            for p in &policy.request_hash_policies {
                let terminal = p.terminal;
                if let Some(h) = &p.header_hash_options
                    && is_header_name(&h.header_name.to_ascii_lowercase())
                {
                    hashes.push(ir::HashPolicy::Header {
                        name: h.header_name.to_ascii_lowercase(),
                        terminal,
                    });
                } else if let Some(q) = &p.query_parameter_hash_options
                    && !q.parameter_name.is_empty()
                {
                    hashes.push(ir::HashPolicy::QueryParameter {
                        name: q.parameter_name.clone(),
                        terminal,
                    });
                } else if p.hash_source_ip {
                    hashes.push(ir::HashPolicy::SourceIp { terminal });
                }
            }
            if hashes.is_empty() {
                (
                    ir::LbPolicy::RoundRobin,
                    Vec::new(),
                    Some("loadBalancerPolicy RequestHash has no valid requestHashPolicies; using RoundRobin".to_string()),
                )
            } else {
                (ir::LbPolicy::RingHash, hashes, None)
            }
        }
        other => (
            ir::LbPolicy::RoundRobin,
            Vec::new(),
            Some(format!(
                "loadBalancerPolicy strategy {other:?} is unknown; using RoundRobin"
            )),
        ),
    }
}

/// Interval, timeout and thresholds of a health check, Contour's defaults (5 s, 2 s,
/// 3 unhealthy, 2 healthy) where unset; every value set must be positive.
struct Timing {
    interval_seconds: u64,
    timeout_seconds: u64,
    unhealthy_threshold: u32,
    healthy_threshold: u32,
}

fn timing(
    values: [Option<i64>; 4],
    invalid: impl Fn(String) -> PolicyError,
) -> Result<Timing, PolicyError> {
    let [interval, timeout, unhealthy, healthy] = values;
    let positive = |value: Option<i64>, default: u64, field: &str| match value {
        None => Ok(default),
        Some(v) => u64::try_from(v)
            .ok()
            .filter(|v| *v > 0 && *v <= isobar_sdk::policy::MAX_DURATION.as_secs())
            .ok_or_else(|| {
                invalid(format!(
                    "{field} must be positive and at most {}",
                    isobar_sdk::policy::MAX_DURATION.as_secs()
                ))
            }),
    };
    let count = |value, default, field: &str| {
        positive(value, default, field).map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    };
    Ok(Timing {
        interval_seconds: positive(interval, 5, "intervalSeconds")?,
        timeout_seconds: positive(timeout, 2, "timeoutSeconds")?,
        unhealthy_threshold: count(unhealthy, 3, "unhealthyThresholdCount")?,
        healthy_threshold: count(healthy, 2, "healthyThresholdCount")?,
    })
}

/// `tcpproxy.healthCheckPolicy`: a TCP connect check with Contour's defaults.
pub(crate) fn tcp_health_check(
    policy: &api::TcpHealthCheckPolicy,
) -> Result<ir::TcpHealthCheck, PolicyError> {
    let t = timing(
        [
            policy.interval_seconds,
            policy.timeout_seconds,
            policy.unhealthy_threshold_count,
            policy.healthy_threshold_count,
        ],
        |m| {
            (
                ConditionType::TCPProxyError,
                Reason::HealthCheckPolicyNotValid,
                format!("spec.tcpproxy.healthCheckPolicy: {m}"),
            )
        },
    )?;
    Ok(ir::TcpHealthCheck {
        interval_seconds: t.interval_seconds,
        timeout_seconds: t.timeout_seconds,
        unhealthy_threshold: t.unhealthy_threshold,
        healthy_threshold: t.healthy_threshold,
    })
}

/// `healthCheckPolicy` with Contour's defaults (see [`timing`]) and Host
/// `contour-envoy-healthcheck`.
pub(crate) fn health_check(
    policy: &api::HealthCheckPolicy,
) -> Result<ir::HealthCheck, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::RouteError,
            Reason::HealthCheckPolicyNotValid,
            format!("route.healthCheckPolicy: {m}"),
        )
    };
    if !policy.path.starts_with('/') || !is_header_value(&policy.path) {
        return Err(invalid("path must start with /".to_string()));
    }
    let host = policy
        .host
        .clone()
        .unwrap_or_else(|| "contour-envoy-healthcheck".to_string());
    if host.is_empty() || !is_header_value(&host) {
        return Err(invalid("host must be a host name".to_string()));
    }
    let mut expected = Vec::new();
    for range in &policy.expected_statuses {
        if !(100..=599).contains(&range.start)
            || !(101..=600).contains(&range.end)
            || range.start >= range.end
        {
            return Err(invalid(format!(
                "expectedStatuses {}-{} is not a range of HTTP statuses",
                range.start, range.end
            )));
        }
        expected.push((range.start, range.end));
    }
    let t = timing(
        [
            policy.interval_seconds,
            policy.timeout_seconds,
            policy.unhealthy_threshold_count,
            policy.healthy_threshold_count,
        ],
        invalid,
    )?;
    Ok(ir::HealthCheck {
        path: policy.path.clone(),
        host,
        interval_seconds: t.interval_seconds,
        timeout_seconds: t.timeout_seconds,
        unhealthy_threshold: t.unhealthy_threshold,
        healthy_threshold: t.healthy_threshold,
        expected_statuses: expected,
    })
}

/// A service's `protocol`: `h2` and `h2c` speak HTTP/2 upstream; `tls` needs upstream TLS,
/// which this version does not have.
/// `services[].validation`: the CA (a secret with `ca.crt`, delegation rules apply) and
/// the names the upstream certificate must carry.
pub(crate) fn upstream_validation(
    ctx: &isobar_sdk::BuildContext<'_>,
    namespace: &str,
    v: &api::UpstreamValidation,
) -> Result<ir::UpstreamValidation, PolicyError> {
    // The CRD's CEL rule.
    if !v.subject_name.is_empty()
        && v.subject_names
            .first()
            .is_some_and(|first| *first != v.subject_name)
    {
        return Err((
            ConditionType::ServiceError,
            Reason::TLSConfigNotValid,
            "subjectNames[0] must equal subjectName if set".to_string(),
        ));
    }
    let mut names: Vec<String> = v.subject_names.clone();
    if !v.subject_name.is_empty() && !names.contains(&v.subject_name) {
        names.insert(0, v.subject_name.clone());
    }
    if names.is_empty() || names.iter().any(|n| n.is_empty() || !is_header_value(n)) {
        return Err((
            ConditionType::ServiceError,
            Reason::TLSConfigNotValid,
            "validation needs subjectName (or subjectNames) of host names".to_string(),
        ));
    }
    let ca = ctx
        .ca_bundle(namespace, &v.ca_secret)
        .map_err(|(reason, message)| {
            (
                ConditionType::ServiceError,
                reason,
                format!("validation.caSecret: {message}"),
            )
        })?;
    Ok(ir::UpstreamValidation {
        ca,
        subject_names: names,
        subject_uris: Vec::new(),
    })
}

pub(crate) fn protocol(value: &str) -> Result<ir::UpstreamProtocol, PolicyError> {
    match value {
        "h2" => Ok(ir::UpstreamProtocol::H2),
        "h2c" => Ok(ir::UpstreamProtocol::H2c),
        "tls" => Ok(ir::UpstreamProtocol::Tls),
        other => Err((
            ConditionType::ServiceError,
            Reason::UnsupportedProtocol,
            format!("protocol {other:?} is not one of h2, h2c, tls"),
        )),
    }
}

/// A service's `slowStartPolicy` (Contour: only with RoundRobin or WeightedLeastRequest).
pub(crate) fn slow_start(
    policy: &api::SlowStartPolicy,
    lb: ir::LbPolicy,
) -> Result<ir::SlowStart, PolicyError> {
    let invalid = |m: String| {
        (
            ConditionType::ServiceError,
            Reason::SlowStartInvalid,
            format!("slowStartPolicy: {m}"),
        )
    };
    if !matches!(lb, ir::LbPolicy::RoundRobin | ir::LbPolicy::LeastRequest) {
        return Err(invalid(
            "only RoundRobin and WeightedLeastRequest balancing support slow start".to_string(),
        ));
    }
    let window = timeout(&policy.window).map_err(|e| invalid(format!("window: {e}")))?;
    let aggression = policy
        .aggression
        .clone()
        .unwrap_or_else(|| "1.0".to_string());
    if !aggression
        .parse::<f64>()
        .is_ok_and(|a| a.is_finite() && a > 0.0)
    {
        return Err(invalid(format!(
            "aggression {aggression:?} must be a positive number"
        )));
    }
    let min_weight_percent = match policy.min_weight_percent {
        None => 10,
        Some(p) => u32::try_from(p)
            .ok()
            .filter(|p| *p <= 100)
            .ok_or_else(|| invalid("minWeightPercent must be 0-100".to_string()))?,
    };
    Ok(ir::SlowStart {
        window,
        aggression,
        min_weight_percent,
    })
}
