//! The suite's gRPC echo service (`gateway_api_conformance.echo_basic.grpcecho.GrpcEcho`)
//! as pods of our own, served by tonic over h2c, and the suite's gRPC client: a call
//! passes when its gRPC code is the one expected and, for OK, the echo names the method
//! called, the namespace and a pod of the backend expected.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::codegen::http;
use tonic::transport::Endpoint;

use crate::conformance::echo::PodInfo;

/// The echo service's full name.
pub const SERVICE: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Context {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub ingress: String,
    #[prost(string, tag = "3")]
    pub service_name: String,
    #[prost(string, tag = "4")]
    pub pod: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Assertions {
    #[prost(string, tag = "1")]
    pub fully_qualified_method: String,
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<Header>,
    #[prost(string, tag = "3")]
    pub authority: String,
    #[prost(message, optional, tag = "4")]
    pub context: Option<Context>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoResponse {
    #[prost(message, optional, tag = "1")]
    pub assertions: Option<Assertions>,
    #[prost(message, optional, tag = "2")]
    pub request: Option<EchoRequest>,
}

/// yages' `Content` (the gRPC server of Contour's e2e suite): `yages.Echo/Ping` answers
/// `pong`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Content {
    #[prost(string, tag = "1")]
    pub text: String,
}

/// yages' ping request.
pub const YAGES_PING: &str = "/yages.Echo/Ping";

/// A gRPC echo pod on `ip:3000` (h2c): `Echo` and `EchoTwo` answer with what they saw
/// and who the pod is, yages' `Ping` answers `pong`, `EchoThree` and anything else is
/// `Unimplemented`.
pub async fn grpc_pod(ip: IpAddr, info: PodInfo) {
    let addr = SocketAddr::new(ip, 3000);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let info = Arc::new(info);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let info = info.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let info = info.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(request, &info).await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
}

async fn answer(
    request: http::Request<Incoming>,
    info: &PodInfo,
) -> http::Response<tonic::body::Body> {
    if request.uri().path() == YAGES_PING {
        let pong = tower::service_fn(|_: tonic::Request<EchoRequest>| async {
            Ok::<_, tonic::Status>(tonic::Response::new(Content {
                text: "pong".to_string(),
            }))
        });
        return tonic::server::Grpc::new(tonic_prost::ProstCodec::<Content, EchoRequest>::default())
            .unary(pong, request)
            .await;
    }
    let method = request
        .uri()
        .path()
        .strip_prefix(&format!("/{SERVICE}/"))
        .unwrap_or_default()
        .to_string();
    if method != "Echo" && method != "EchoTwo" {
        return tonic::Status::unimplemented(format!("method {method} not implemented"))
            .into_http();
    }
    let authority = request
        .uri()
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let info = info.clone();
    let echo = tower::service_fn(move |call: tonic::Request<EchoRequest>| {
        let headers = call
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .map(|(key, value)| Header {
                key: key.to_string(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
            .collect();
        let response = EchoResponse {
            assertions: Some(Assertions {
                fully_qualified_method: format!("/{SERVICE}/{method}"),
                headers,
                authority: authority.clone(),
                context: Some(Context {
                    namespace: info.namespace.clone(),
                    pod: info.pod.clone(),
                    ..Context::default()
                }),
            }),
            request: None,
        };
        async move { Ok::<_, tonic::Status>(tonic::Response::new(response)) }
    });
    tonic::server::Grpc::new(tonic_prost::ProstCodec::<EchoResponse, EchoRequest>::default())
        .unary(echo, request)
        .await
}

/// One of the suite's gRPC cases: the method called, the `:authority` (the address
/// when none), metadata, and what must come back.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub authority: Option<String>,
    pub metadata: Vec<(String, String)>,
    pub expect: Outcome,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    /// OK, from a pod of this backend (any when "") of the infra namespace.
    Backend(&'static str),
    /// This gRPC code.
    Code(tonic::Code),
}

/// Calls `method` on `EchoRequest` through `addr`.
pub fn call(method: &'static str) -> Call {
    Call {
        method,
        authority: None,
        metadata: Vec::new(),
        expect: Outcome::Backend(""),
    }
}

impl Call {
    pub fn authority(mut self, authority: &str) -> Call {
        self.authority = Some(authority.to_string());
        self
    }

    pub fn metadata(mut self, pairs: &[(&str, &str)]) -> Call {
        self.metadata = pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        self
    }

    pub fn backend(mut self, backend: &'static str) -> Call {
        self.expect = Outcome::Backend(backend);
        self
    }

    pub fn code(mut self, code: tonic::Code) -> Call {
        self.expect = Outcome::Code(code);
        self
    }
}

/// One call on a fresh connection: its code, and the echo when OK.
pub async fn send(
    addr: SocketAddr,
    call: &Call,
) -> Result<(tonic::Code, Option<EchoResponse>), String> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .timeout(Duration::from_secs(10));
    if let Some(authority) = &call.authority {
        let origin: http::Uri = format!("http://{authority}")
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        endpoint = endpoint.origin(origin);
    }
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| e.to_string())?;
    let mut request = tonic::Request::new(EchoRequest {});
    for (key, value) in &call.metadata {
        let key: tonic::metadata::MetadataKey<tonic::metadata::Ascii> =
            key.parse().map_err(|e| format!("{key}: {e}"))?;
        let value = value.parse().map_err(|e| format!("{value}: {e}"))?;
        request.metadata_mut().insert(key, value);
    }
    let path: http::uri::PathAndQuery = format!("/{SERVICE}/{}", call.method)
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    match grpc
        .unary(
            request,
            path,
            tonic_prost::ProstCodec::<EchoRequest, EchoResponse>::default(),
        )
        .await
    {
        Ok(response) => Ok((tonic::Code::Ok, Some(response.into_inner()))),
        Err(status) => Ok((status.code(), None)),
    }
}

/// Whether an answer is what `call` expects; the backend (pod name without its last two
/// parts) when OK.
pub fn compare(
    call: &Call,
    (code, echo): &(tonic::Code, Option<EchoResponse>),
) -> Result<String, String> {
    let want = match &call.expect {
        Outcome::Backend(_) => tonic::Code::Ok,
        Outcome::Code(code) => *code,
    };
    if *code != want {
        return Err(format!("gRPC code {code:?}, expected {want:?}"));
    }
    let Outcome::Backend(backend) = &call.expect else {
        return Ok(String::new());
    };
    let assertions = echo
        .as_ref()
        .and_then(|e| e.assertions.clone())
        .ok_or("no assertions in the echo")?;
    let wanted_method = format!("/{SERVICE}/{}", call.method);
    if assertions.fully_qualified_method != wanted_method {
        return Err(format!(
            "method {:?}, expected {wanted_method}",
            assertions.fully_qualified_method
        ));
    }
    let context = assertions.context.unwrap_or_default();
    if context.namespace != crate::conformance::suite::INFRA {
        return Err(format!("namespace {:?}", context.namespace));
    }
    if !context.pod.starts_with(backend) {
        return Err(format!("pod {:?}, expected one of {backend}", context.pod));
    }
    let parts: Vec<&str> = context.pod.split('-').collect();
    Ok(parts[..parts.len().saturating_sub(2)].join("-"))
}

/// The suite's `MakeRequestAndExpectEventuallyConsistentResponse` for gRPC: `call`
/// answered as expected three times in a row within 30 s.
pub async fn eventually(addr: SocketAddr, call: &Call) -> Result<(), String> {
    let start = Instant::now();
    let mut in_a_row = 0;
    loop {
        match send(addr, call)
            .await
            .and_then(|answer| compare(call, &answer))
        {
            Ok(_) => {
                in_a_row += 1;
                if in_a_row >= 3 {
                    return Ok(());
                }
            }
            Err(e) => {
                in_a_row = 0;
                if start.elapsed() > crate::conformance::client::CONSISTENCY {
                    return Err(format!(
                        "{} (authority {:?}, metadata {:?}) to {addr}: {e}",
                        call.method, call.authority, call.metadata
                    ));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// How many of `n` calls (ten at a time, half with an `x-jitter` header, each on a
/// connection of its own) each backend answered; every call must be OK.
pub async fn distribution(
    addr: SocketAddr,
    call: &Call,
    n: usize,
) -> Result<BTreeMap<String, usize>, String> {
    let mut counts = BTreeMap::new();
    for batch in 0..n.div_ceil(10) {
        let calls = (0..10.min(n - batch * 10)).map(|i| {
            let mut call = call.clone();
            if (batch + i) % 2 == 0 {
                call.metadata
                    .push(("x-jitter".to_string(), format!("{}", batch * 10 + i)));
            }
            async move {
                let answer = send(addr, &call).await?;
                compare(&call, &answer)
            }
        });
        for backend in futures::future::join_all(calls).await {
            *counts.entry(backend?).or_insert(0) += 1;
        }
    }
    Ok(counts)
}
