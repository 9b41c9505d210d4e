//! The ADS service on the wire, with Isobar's own response framing: each response goes
//! out as the pieces `wire.rs` encoded it into (large resources shared with the
//! snapshot, the rest in exact-size chunks), each released once sent. tonic's encoder
//! writes every message of a stream into one buffer that keeps the capacity of the
//! largest (up to twice it) until the stream ends: at 10,000 vhosts about 8 MB per
//! connected Envoy, for as long as it stays connected. Requests are decoded by tonic,
//! with prost; a state-of-the-world request's names are set apart, for the stream to
//! decode only when they changed.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::Frame;
use prost::Message;
use tonic::Status;
use tonic::codec::{DecodeBuf, Decoder, Streaming};
use tonic::codegen::{Bytes, Service, http};
use tonic::server::NamedService;

use crate::xds::request::SotwDecoder;
use crate::xds::server::AdsService;
use crate::xds::stream::ResponseStream;
use crate::xds::wire::Wire;

/// Requests larger than this are refused (a state-of-the-world ACK names every resource
/// it holds: 10,000 names are ≈ 300 KB).
const MAX_REQUEST: usize = 16 * 1024 * 1024;

/// [`AdsService`] as a gRPC service for tonic's router.
#[derive(Clone)]
pub struct AdsServer {
    service: Arc<AdsService>,
}

impl AdsService {
    /// The service for tonic's router.
    pub fn into_server(self) -> AdsServer {
        AdsServer::new(self)
    }
}

impl AdsServer {
    pub fn new(service: AdsService) -> AdsServer {
        AdsServer {
            service: Arc::new(service),
        }
    }
}

impl NamedService for AdsServer {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

impl Service<http::Request<tonic::body::Body>> for AdsServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let method = request.uri().path().rsplit('/').next().unwrap_or_default();
        let response = match method {
            "StreamAggregatedResources" => {
                let requests = Streaming::new_request(
                    SotwDecoder,
                    request.into_body(),
                    None,
                    Some(MAX_REQUEST),
                );
                framed(self.service.sotw(requests))
            }
            "DeltaAggregatedResources" => framed(self.service.delta(decode(request.into_body()))),
            _ => Status::unimplemented(format!("{} has no method {method:?}", AdsServer::NAME))
                .into_http(),
        };
        std::future::ready(Ok(response))
    }
}

fn decode<T: Message + Default + Send + 'static>(body: tonic::body::Body) -> Streaming<T> {
    Streaming::new_request(ProstDecoder(PhantomData), body, None, Some(MAX_REQUEST))
}

/// A protobuf message per gRPC message.
struct ProstDecoder<T>(PhantomData<fn() -> T>);

impl<T: Message + Default> Decoder for ProstDecoder<T> {
    type Item = T;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<T>, Status> {
        T::decode(buf)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable request: {e}")))
    }
}

fn framed(responses: ResponseStream<Wire>) -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::new(Framed {
        responses,
        sending: None,
        done: false,
    }));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The response body: each response's pieces as data frames, then the status as
/// trailers.
struct Framed {
    responses: ResponseStream<Wire>,
    /// The response being sent, what is left of it.
    sending: Option<Wire>,
    done: bool,
}

impl http_body::Body for Framed {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        loop {
            if let Some(piece) = self.sending.as_mut().and_then(Wire::next_piece) {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            self.sending = None;
            if self.done {
                return Poll::Ready(None);
            }
            let status = match self.responses.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(wire))) => {
                    self.sending = Some(wire);
                    continue;
                }
                Poll::Ready(Some(Err(status))) => status,
                Poll::Ready(None) => Status::ok(""),
            };
            self.done = true;
            let mut trailers = http::HeaderMap::new();
            return Poll::Ready(Some(match status.add_header(&mut trailers) {
                Ok(()) => Ok(Frame::trailers(trailers)),
                Err(status) => Err(status),
            }));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.sending.is_none()
    }
}
