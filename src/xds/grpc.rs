//! The ADS service on the wire, with Isobar's own response framing: each response goes
//! out as the pieces `wire.rs` encoded it into (large resources shared with the
//! snapshot, the rest in exact-size chunks), each released once sent. tonic's encoder
//! writes every message of a stream into one buffer that keeps the capacity of the
//! largest (up to twice it) until the stream ends: at 10,000 vhosts about 8 MB per
//! connected Envoy, for as long as it stays connected. Requests are decoded by tonic,
//! with prost; a state-of-the-world request's list of names only when it changed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use http_body::Frame;
use prost::Message;
use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint};
use tonic::Status;
use tonic::codec::{DecodeBuf, Decoder, Streaming};
use tonic::codegen::{Bytes, Service, http};
use tonic::server::NamedService;

use super::server::{AdsService, ResponseStream};
use super::wire::Wire;

/// Requests larger than this are refused (a state-of-the-world ACK names every resource
/// it holds: 10,000 names are ≈ 300 KB).
const MAX_REQUEST: usize = 16 * 1024 * 1024;

/// [`AdsService`] as a gRPC service for tonic's router.
#[derive(Clone)]
pub struct AdsServer {
    service: Arc<AdsService>,
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
                let taken = NamesTaken::default();
                let requests = Streaming::new_request(
                    SotwDecoder(taken.clone()),
                    request.into_body(),
                    None,
                    Some(MAX_REQUEST),
                );
                framed(self.service.sotw(requests, taken))
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

/// A state-of-the-world request as the stream takes it.
#[derive(Debug, Default)]
pub struct SotwRequest {
    pub request: DiscoveryRequest,
    /// Length and BLAKE3 hash of the bytes of its names (`None`: not known).
    pub names_digest: Option<NamesDigest>,
    /// Its names are the ones the stream last took for its type, so they were not
    /// decoded: `request.resource_names` is empty.
    pub same_names: bool,
}

pub type NamesDigest = (usize, [u8; 32]);

/// Per type URL, the digest of the names a stream last took (set by the stream once it
/// has taken a request's names; a stale request's are not taken), read by its decoder.
#[derive(Clone, Default)]
pub struct NamesTaken(Arc<Mutex<HashMap<String, NamesDigest>>>);

impl NamesTaken {
    pub fn set(&self, type_url: &str, digest: Option<NamesDigest>) {
        let mut taken = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match digest {
            Some(digest) => taken.insert(type_url.to_string(), digest),
            None => taken.remove(type_url),
        };
    }

    fn is(&self, type_url: &str, digest: &NamesDigest) -> bool {
        let taken = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        taken.get(type_url) == Some(digest)
    }
}

/// Envoy repeats every name it subscribes to with each ACK: at 10,000 endpoint sets,
/// 10,000 strings per EDS ACK, ≈ 0.4 ms to decode and free again (most of a
/// state-of-the-world stream's work under endpoint churn). The names' bytes are hashed
/// instead, and decoded only when they differ from the names the stream took last for
/// that type.
struct SotwDecoder(NamesTaken);

impl Decoder for SotwDecoder {
    type Item = SotwRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<SotwRequest>, Status> {
        let undecodable =
            |e: prost::DecodeError| Status::internal(format!("undecodable request: {e}"));
        let bytes = buf.copy_to_bytes(buf.remaining());
        let layout = names_layout(&bytes);
        let names_digest = layout.as_ref().map(|layout| {
            let names = &bytes[layout.names.clone()];
            (names.len(), *blake3::hash(names).as_bytes())
        });
        if let (Some(layout), Some(digest)) = (&layout, &names_digest)
            && !layout.names.is_empty()
            && self.0.is(layout.type_url, digest)
        {
            let mut rest = Vec::with_capacity(bytes.len() - layout.names.len());
            rest.extend_from_slice(&bytes[..layout.names.start]);
            rest.extend_from_slice(&bytes[layout.names.end..]);
            let request = DiscoveryRequest::decode(rest.as_slice()).map_err(undecodable)?;
            return Ok(Some(SotwRequest {
                request,
                names_digest,
                same_names: true,
            }));
        }
        let request = DiscoveryRequest::decode(bytes).map_err(undecodable)?;
        Ok(Some(SotwRequest {
            request,
            names_digest,
            same_names: false,
        }))
    }
}

/// Where a `DiscoveryRequest`'s names (field 3, every entry one after the other, as
/// Envoy writes them) lie in its bytes, and its type URL (field 4). `None` when the
/// names are not in one run or the bytes do not parse: the request is then decoded in
/// full, and prost reports what is wrong with it.
struct NamesLayout<'a> {
    names: std::ops::Range<usize>,
    type_url: &'a str,
}

fn names_layout(bytes: &[u8]) -> Option<NamesLayout<'_>> {
    const RESOURCE_NAMES: u32 = 3;
    const TYPE_URL: u32 = 4;
    let mut rest = bytes;
    let mut names: Option<std::ops::Range<usize>> = None;
    let mut type_url = "";
    while rest.has_remaining() {
        let start = bytes.len() - rest.len();
        let (tag, wire_type) = decode_key(&mut rest).ok()?;
        let value = match wire_type {
            WireType::Varint => {
                decode_varint(&mut rest).ok()?;
                None
            }
            WireType::SixtyFourBit => Some(8),
            WireType::ThirtyTwoBit => Some(4),
            WireType::LengthDelimited => {
                Some(usize::try_from(decode_varint(&mut rest).ok()?).ok()?)
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        };
        if let Some(len) = value {
            if len > rest.len() {
                return None;
            }
            if tag == TYPE_URL {
                type_url = std::str::from_utf8(&rest[..len]).ok()?;
            }
            rest.advance(len);
        }
        let end = bytes.len() - rest.len();
        if tag == RESOURCE_NAMES {
            names = match names {
                None => Some(start..end),
                Some(run) if run.end == start => Some(run.start..end),
                Some(_) => return None,
            };
        }
    }
    Some(NamesLayout {
        names: names.unwrap_or(0..0),
        type_url,
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(names: &[&str]) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: "v1".into(),
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment".into(),
            response_nonce: "7".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_names_run_is_found_and_the_rest_decodes_without_it() {
        let bytes = request(&["a", "bb", "ccc"]).encode_to_vec();
        let Some(layout) = names_layout(&bytes) else {
            panic!("a request as prost writes it has one run of names");
        };
        assert_eq!(layout.type_url, request(&[]).type_url);
        let names = DiscoveryRequest::decode(&bytes[layout.names.clone()])
            .unwrap_or_else(|e| panic!("{e}"))
            .resource_names;
        assert_eq!(names, ["a", "bb", "ccc"]);
        let mut rest = bytes[..layout.names.start].to_vec();
        rest.extend_from_slice(&bytes[layout.names.end..]);
        let rest = DiscoveryRequest::decode(rest.as_slice()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rest, request(&[]));
    }

    #[test]
    fn names_split_by_another_field_or_cut_bytes_are_decoded_in_full() {
        let mut bytes = request(&["a"]).encode_to_vec();
        // One more name after the type URL and nonce: legal protobuf, not one run.
        bytes.extend_from_slice(&[0x1a, 1, b'z']);
        assert!(names_layout(&bytes).is_none());
        let whole = DiscoveryRequest::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(whole.resource_names, ["a", "z"]);
        let cut = request(&["a", "b"]).encode_to_vec();
        assert!(names_layout(&cut[..cut.len() - 1]).is_none());
    }
}
