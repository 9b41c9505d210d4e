//! What keeps traffic off unhealthy or overloaded upstreams: active health checks,
//! slow start and circuit breakers.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TcpHealthCheck {
    pub interval_seconds: u64,
    pub timeout_seconds: u64,
    pub unhealthy_threshold: u32,
    pub healthy_threshold: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlowStart {
    pub window: std::time::Duration,
    /// A positive decimal, kept as written (validated) so options stay `Eq`.
    pub aggression: String,
    pub min_weight_percent: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthCheck {
    pub path: String,
    pub host: String,
    pub interval_seconds: u64,
    pub timeout_seconds: u64,
    pub unhealthy_threshold: u32,
    pub healthy_threshold: u32,
    /// `[start, end)` ranges of healthy statuses; empty: 200 only.
    pub expected_statuses: Vec<(i64, i64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CircuitBreakers {
    pub max_connections: Option<u32>,
    pub max_pending_requests: Option<u32>,
    pub max_requests: Option<u32>,
    pub max_retries: Option<u32>,
    pub per_host_max_connections: Option<u32>,
    /// Retries in flight bounded by a share of the requests in flight (instead of
    /// `max_retries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<RetryBudget>,
}

/// Envoy's retry budget: retries in flight may be at most `percent` % of the requests
/// started within the last `interval` (zero: of those in flight), and `min_concurrency`
/// retries in flight are always allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetryBudget {
    pub percent: u32,
    pub interval: std::time::Duration,
    pub min_concurrency: u32,
}
