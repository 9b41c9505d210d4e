//! What HTTP filters other than routing do with a request, as data: external
//! authorization (`ext_authz`), global rate limits, JWT verification and tracing, each
//! calling a service of its own over gRPC (an extension cluster) or HTTP (a JWKS).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{HeaderMatch, JwtProvider};

/// A gRPC service a filter calls: an extension cluster, the `:authority` of the calls,
/// and their timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrpcService {
    pub cluster: String,
    pub authority: String,
    /// `None`: Envoy's default; zero: no timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
}

/// External authorization: every request is checked with the service first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtAuthz {
    pub service: GrpcService,
    /// Let requests through while the service cannot answer.
    pub fail_open: bool,
    /// Send (part of) the request body with the check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with_request_body: Option<RequestBody>,
    /// Asked over HTTP (the service's cluster, `service.timeout`) instead of gRPC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<Box<HttpAuthz>>,
}

/// An HTTP authorization server: the prefix of the paths it is asked, the request
/// headers it sees (beside Host, Method, Path, Content-Length, Authorization) and the
/// headers of its answer that go upstream, each a name matcher and whether case counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpAuthz {
    pub path_prefix: String,
    pub allowed_headers: Vec<(super::StringMatch, bool)>,
    pub allowed_upstream_headers: Vec<(super::StringMatch, bool)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RequestBody {
    pub max_request_bytes: u32,
    pub allow_partial_message: bool,
    pub pack_as_bytes: bool,
}

/// The global rate limit service every HTTP connection manager asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateLimitService {
    pub service: GrpcService,
    pub domain: String,
    /// Let requests through while the service cannot answer.
    pub fail_open: bool,
    /// `X-RateLimit-*` response headers (IETF draft 03).
    pub x_rate_limit_headers: bool,
    /// Limited gRPC requests fail with RESOURCE_EXHAUSTED instead of UNAVAILABLE.
    pub resource_exhausted: bool,
}

/// Spans of every HTTP connection manager, sent to an OpenTelemetry collector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tracing {
    pub service: GrpcService,
    /// The `service.name` spans carry.
    pub service_name: String,
    /// Percentage of requests traced (0–100).
    pub sampling: f64,
    /// Percentage of requests with `x-client-trace-id` traced.
    pub client_sampling: f64,
    /// Percentage of requests traced at random.
    pub random_sampling: f64,
    pub max_path_tag_length: u32,
    pub tags: Vec<TraceTag>,
}

/// A tag every span carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceTag {
    pub name: String,
    pub value: TagValue,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TagValue {
    Literal(String),
    /// An environment variable of Envoy's process.
    Environment(String),
    RequestHeader(String),
}

/// What applies to every HTTP connection manager of every listener: set from the
/// configuration (`globalExtAuth`, `rateLimitService`, `tracing`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HttpExtensions {
    /// Global external authorization: the plain listeners' (and the fallback
    /// certificate chain's) authorization; secure vhosts carry their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Arc<ExtAuthz>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Arc<RateLimitService>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<Arc<Tracing>>,
}

impl HttpExtensions {
    pub fn is_empty(&self) -> bool {
        *self == HttpExtensions::default()
    }
}

/// A vhost's filters beyond routing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VhostExtensions {
    /// A secure vhost's external authorization (its own, or the global one it uses);
    /// its connection manager checks every request with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Arc<ExtAuthz>>,
    /// A secure vhost's JWT providers; routes name the one they require.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jwt_providers: Vec<JwtProvider>,
    /// Global rate limit descriptors of requests to routes without their own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimitDescriptor>,
}

/// One descriptor sent to the rate limit service: its entries, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateLimitDescriptor {
    pub entries: Vec<RateLimitEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitEntry {
    /// A fixed key (Envoy's `generic_key` when `None`) and value.
    GenericKey { key: Option<String>, value: String },
    /// The value of a request header, under `key` (absent header: no descriptor).
    RequestHeader { header: String, key: String },
    /// `value` when the headers match (or, with `expect_match` false, do not).
    HeaderValueMatch {
        headers: Vec<HeaderMatch>,
        expect_match: bool,
        value: String,
    },
    /// The client's address.
    RemoteAddress,
}

/// How a route is authorized (with an `ext_authz` filter in its connection manager).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RouteAuth {
    /// Not checked at all.
    pub disabled: bool,
    /// Sent with each check (`context_extensions`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
}
