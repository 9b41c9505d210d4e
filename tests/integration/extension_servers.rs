//! Real protocol servers the extension service tests start on loopback: an external
//! authorization server (Envoy's `envoy.service.auth.v3.Authorization` over gRPC), a rate
//! limit service (`envoy.service.ratelimit.v3.RateLimitService`), an OpenTelemetry trace
//! collector (OTLP over gRPC) and a JWKS endpoint whose key signs the tokens tests send.
//! Each records what it was asked, for the tests to check what Envoy sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine;

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit::Unit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::{HttpStatus, StatusCode};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// A server running on a loopback port, on a runtime of its own, until stopped or
/// dropped; with what it has seen.
pub struct Running<T> {
    pub port: u16,
    seen: Arc<Mutex<Vec<T>>>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl<T: Clone> Running<T> {
    /// Everything seen so far, in order.
    pub fn seen(&self) -> Vec<T> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl<T> Running<T> {
    /// Stops the server now: its port refuses connections and the open ones are closed.
    pub fn stop(&self) {
        let runtime = self.runtime.lock().ok().and_then(|mut r| r.take());
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `serve` on a listener bound to a free loopback port, on a runtime of its own
/// (stopping it closes every connection the server holds).
fn run<T, F>(seen: Arc<Mutex<Vec<T>>>, serve: impl FnOnce(TcpListener) -> F) -> Running<T>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    run_at(0, seen, serve)
}

/// [`run`] on loopback port `port` (0: a free one).
fn run_at<T, F>(
    port: u16,
    seen: Arc<Mutex<Vec<T>>>,
    serve: impl FnOnce(TcpListener) -> F,
) -> Running<T>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let std_listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("bind 127.0.0.1:{port}: {e}"));
    std_listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| panic!("{e}"));
    let port = std_listener
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let listener = {
        let _inside = runtime.enter();
        TcpListener::from_std(std_listener).unwrap_or_else(|e| panic!("{e}"))
    };
    runtime.spawn(serve(listener));
    Running {
        port,
        seen,
        runtime: Mutex::new(Some(runtime)),
    }
}

/// Serves one gRPC service (clear-text HTTP/2) on the listener it is given.
macro_rules! grpc {
    ($service:expr) => {{
        let service = $service;
        move |listener: TcpListener| async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        }
    }};
}

/// One authorization check as the server saw it.
#[derive(Debug, Clone)]
pub struct Check {
    pub path: String,
    pub host: String,
    /// The route's context (Contour's `authPolicy.context`).
    pub context: BTreeMap<String, String>,
    /// The request body, when Envoy buffered it (`withRequestBody`).
    pub body: String,
}

#[derive(Clone)]
struct Authorizer {
    seen: Arc<Mutex<Vec<Check>>>,
    /// Answers as contour-authserver's `testserver` (Contour's e2e suite's): requests
    /// whose path holds `/allow` are allowed, and gain `Auth-Context-<key>` headers of the
    /// check's context on their way upstream.
    by_path: bool,
}

/// The answer: requests carrying `x-allow: yes` are allowed (and gain `x-authorized-by`
/// on their way upstream), every other one is denied with 401 and a body saying so.
#[tonic::async_trait]
impl Authorization for Authorizer {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let attributes = request.into_inner().attributes.unwrap_or_default();
        let http = attributes.request.and_then(|r| r.http).unwrap_or_default();
        let allowed = if self.by_path {
            http.path.contains("/allow")
        } else {
            http.headers.get("x-allow").map(String::as_str) == Some("yes")
        };
        let context: Vec<(String, String)> = attributes
            .context_extensions
            .iter()
            .map(|(k, v)| (format!("Auth-Context-{k}"), v.clone()))
            .collect();
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(Check {
                path: http.path.clone(),
                host: http.host.clone(),
                context: attributes.context_extensions.into_iter().collect(),
                body: http.body.clone(),
            });
        }
        let header = |key: &str, value: &str| HeaderValueOption {
            header: Some(HeaderValue {
                key: key.to_string(),
                value: value.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let response = if allowed {
            CheckResponse {
                status: Some(RpcStatus::default()),
                http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                    headers: std::iter::once(header("x-authorized-by", "test-authz"))
                        .chain(
                            context
                                .iter()
                                .filter(|_| self.by_path)
                                .map(|(k, v)| header(k, v)),
                        )
                        .collect(),
                    ..Default::default()
                })),
                ..Default::default()
            }
        } else {
            CheckResponse {
                status: Some(RpcStatus {
                    code: 7, // PERMISSION_DENIED
                    ..Default::default()
                }),
                http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                    status: Some(HttpStatus {
                        code: StatusCode::Unauthorized as i32,
                    }),
                    body: "denied by the test authorization server".to_string(),
                    headers: vec![header("x-denied-by", "test-authz")],
                })),
                ..Default::default()
            }
        };
        Ok(tonic::Response::new(response))
    }
}

/// Starts the authorization server (gRPC, clear text).
pub async fn authorization_server() -> Running<Check> {
    authorization_server_at(0)
}

/// [`authorization_server`] on loopback port `port`.
pub fn authorization_server_at(port: u16) -> Running<Check> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = AuthorizationServer::new(Authorizer {
        seen: seen.clone(),
        by_path: false,
    });
    run_at(port, seen, grpc!(service))
}

/// An authorization server answering as contour-authserver's `testserver` (gRPC, clear
/// text): paths holding `/allow` are allowed, with the check's context as
/// `Auth-Context-<key>` headers upstream; everything else is 401.
pub async fn contour_testserver() -> Running<Check> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = AuthorizationServer::new(Authorizer {
        seen: seen.clone(),
        by_path: true,
    });
    run_at(0, seen, grpc!(service))
}

/// One rate limit request: its domain and descriptors (each a list of key/value).
#[derive(Debug, Clone)]
pub struct Limited {
    pub domain: String,
    pub descriptors: Vec<Vec<(String, String)>>,
}

#[derive(Clone)]
struct Limiter {
    seen: Arc<Mutex<Vec<Limited>>>,
    /// Requests allowed per descriptor (as a whole) before it is over the limit.
    limit: u32,
    /// The counts start again every `window` when set; else they last while it runs.
    window: Option<std::time::Duration>,
    started: std::time::Instant,
    counts: Arc<Mutex<BTreeMap<String, u32>>>,
}

/// Each distinct descriptor may be hit `limit` times (per window, or while the server
/// runs; announced to clients as per minute); past that the request is over the limit.
#[tonic::async_trait]
impl RateLimitService for Limiter {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.into_inner();
        let descriptors: Vec<Vec<(String, String)>> = request
            .descriptors
            .iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.clone()))
                    .collect()
            })
            .collect();
        let mut statuses = Vec::new();
        let mut over = false;
        let elapsed = self.started.elapsed();
        let (round, reset) = match self.window {
            Some(window) if !window.is_zero() => (
                elapsed.as_nanos() / window.as_nanos(),
                window.as_secs() - elapsed.as_secs() % window.as_secs().max(1),
            ),
            _ => (0, 60),
        };
        for descriptor in &descriptors {
            let key = format!("{round}:{}:{descriptor:?}", request.domain);
            let count = {
                let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                let count = counts.entry(key).or_default();
                *count += 1;
                *count
            };
            let ok = count <= self.limit;
            over |= !ok;
            statuses.push(DescriptorStatus {
                code: if ok { Code::Ok } else { Code::OverLimit } as i32,
                current_limit: Some(RateLimit {
                    name: String::new(),
                    requests_per_unit: self.limit,
                    unit: Unit::Minute as i32,
                }),
                limit_remaining: self.limit.saturating_sub(count),
                duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
                    seconds: i64::try_from(reset).unwrap_or(60),
                    nanos: 0,
                }),
                ..Default::default()
            });
        }
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(Limited {
                domain: request.domain.clone(),
                descriptors,
            });
        }
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..Default::default()
        }))
    }
}

/// Starts the rate limit service: every descriptor may be hit `limit` times.
pub async fn rate_limit_server(limit: u32) -> Running<Limited> {
    rate_limit_server_at(0, limit, None)
}

/// [`rate_limit_server`] on loopback port `port`, its counts starting again every
/// `window` when set.
pub fn rate_limit_server_at(
    port: u16,
    limit: u32,
    window: Option<std::time::Duration>,
) -> Running<Limited> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = RateLimitServiceServer::new(Limiter {
        seen: seen.clone(),
        limit,
        window,
        started: std::time::Instant::now(),
        counts: Arc::default(),
    });
    run_at(port, seen, grpc!(service))
}

/// One span as the collector received it.
#[derive(Debug, Clone)]
pub struct Span {
    /// The resource's `service.name`.
    pub service: String,
    pub name: String,
    /// Its string attributes (tags).
    pub tags: BTreeMap<String, String>,
}

#[derive(Clone)]
struct Collector {
    seen: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let text = |v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match v
            .as_ref()
            .and_then(|v| v.value.as_ref())
        {
            Some(AnyValue::StringValue(s)) => s.clone(),
            Some(other) => format!("{other:?}"),
            None => String::new(),
        };
        let mut spans = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(&kv.value))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(Span {
                        service: service.clone(),
                        name: span.name.clone(),
                        tags: span
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), text(&kv.value)))
                            .collect(),
                    });
                }
            }
        }
        if let Ok(mut seen) = self.seen.lock() {
            seen.extend(spans);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Starts the OTLP trace collector (gRPC, clear text).
pub async fn trace_collector() -> Running<Span> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = TraceServiceServer::new(Collector { seen: seen.clone() });
    run(seen, grpc!(service))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key (ES256) for JWTs, and its public half as a JWKS.
pub struct JwtKey {
    key: ring::signature::EcdsaKeyPair,
    pub kid: String,
}

impl Default for JwtKey {
    fn default() -> JwtKey {
        JwtKey::new()
    }
}

impl JwtKey {
    /// A fresh key.
    pub fn new() -> JwtKey {
        let rng = ring::rand::SystemRandom::new();
        let algorithm = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(algorithm, &rng)
            .unwrap_or_else(|e| panic!("generate: {e}"));
        let key = ring::signature::EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng)
            .unwrap_or_else(|e| panic!("key: {e}"));
        JwtKey {
            key,
            kid: "test-key".to_string(),
        }
    }

    /// A signed token (ES256) carrying `claims`.
    pub fn token(&self, claims: &serde_json::Value) -> String {
        let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let signing_input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = ring::rand::SystemRandom::new();
        let signature = self
            .key
            .sign(&rng, signing_input.as_bytes())
            .unwrap_or_else(|e| panic!("sign: {e}"));
        format!("{signing_input}.{}", b64(signature.as_ref()))
    }

    /// The JWKS holding this key's public half.
    pub fn jwks(&self) -> String {
        use ring::signature::KeyPair;
        // An uncompressed P-256 point: 0x04, X (32 bytes), Y (32 bytes).
        let point = self.key.public_key().as_ref().to_vec();
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": self.kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        }]})
        .to_string()
    }
}

/// A JWKS endpoint (`GET /jwks.json`, plain HTTP) serving one ES256 key, and that key
/// to sign tokens with. Records the paths fetched.
pub struct Jwks {
    pub server: Running<String>,
    key: JwtKey,
    /// What the endpoint serves; replaced to rotate keys.
    document: Arc<Mutex<String>>,
}

impl Jwks {
    /// A signed token (ES256) carrying `claims`.
    pub fn token(&self, claims: &serde_json::Value) -> String {
        self.key.token(claims)
    }

    /// A token signed by another key than the one served (its signature cannot verify).
    pub fn forged(&self, claims: &serde_json::Value) -> String {
        let token = self.token(claims);
        let (signing_input, _) = token.rsplit_once('.').unwrap_or_default();
        let other = JwtKey::new().token(claims);
        let (_, signature) = other.rsplit_once('.').unwrap_or_default();
        format!("{signing_input}.{signature}")
    }

    /// The key the endpoint serves.
    pub fn key(&self) -> &JwtKey {
        &self.key
    }

    /// Serves `key`'s JWKS from now on; tokens are signed with it.
    pub fn rotate(&mut self, key: JwtKey) {
        if let Ok(mut document) = self.document.lock() {
            *document = key.jwks();
        }
        self.key = key;
    }
}

/// Starts the JWKS endpoint with a fresh key.
pub async fn jwks() -> Jwks {
    let key = JwtKey::new();
    let document = Arc::new(Mutex::new(key.jwks()));
    let served = document.clone();
    let seen: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let fetched = seen.clone();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move |uri: axum::http::Uri| {
            let document = served.lock().map(|d| d.clone()).unwrap_or_default();
            let fetched = fetched.clone();
            async move {
                if let Ok(mut f) = fetched.lock() {
                    f.push(uri.path().to_string());
                }
                ([("content-type", "application/json")], document)
            }
        }),
    );
    let server = run(seen, move |listener| async move {
        let _ = axum::serve(listener, app).await;
    });
    Jwks {
        server,
        key,
        document,
    }
}
