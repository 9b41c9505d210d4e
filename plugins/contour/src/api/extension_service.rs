//! `ExtensionService` (`projectcontour.io/v1alpha1`): a gRPC service Envoy calls on its
//! own (an authorization server, a rate limit service, a trace collector), made into an
//! extension cluster that filters, not routes, send to.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LoadBalancerPolicy, TimeoutPolicy, Unsupported, UpstreamValidation};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionService {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ExtensionServiceSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionServiceSpec {
    /// The Services (of the ExtensionService's namespace) behind it, by port number.
    #[serde(default)]
    pub services: Vec<ExtensionServiceTarget>,
    /// Verify the services' certificates (TLS, `h2`).
    #[serde(
        default,
        rename = "validation",
        skip_serializing_if = "Option::is_none"
    )]
    pub upstream_validation: Option<UpstreamValidation>,
    /// `h2` (HTTP/2 over TLS, the default), `h2c` (clear text) or `http/1.1` (clear text; an
    /// HTTP authorization server, Contour's main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_policy: Option<LoadBalancerPolicy>,
    /// `response`: the default timeout of calls to it; `idle`: its connections' idle
    /// timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_policy: Option<TimeoutPolicy>,
    /// The gRPC API version Envoy speaks to it: `v3` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker_policy: Option<ExtensionCircuitBreakers>,
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// One Service port behind an ExtensionService.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionServiceTarget {
    pub name: String,
    pub port: i64,
    /// Its share of calls, relative to the others' (all unset: equal shares).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// Limits of the extension cluster (Envoy's circuit breaker thresholds).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionCircuitBreakers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_host_max_connections: Option<i64>,
}
