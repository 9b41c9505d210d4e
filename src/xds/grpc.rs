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

/// A state-of-the-world request as the stream takes it: everything but its names
/// decoded; the names as their bytes and a hash of them, for the stream to decode only
/// when they differ from the last ones it took for the type.
#[derive(Debug, Default)]
pub struct SotwRequest {
    /// `resource_names` is empty when `names` is set.
    pub request: DiscoveryRequest,
    pub names: Option<EncodedNames>,
}

/// A request's names as they came: each a field-3 record, one after the other.
#[derive(Debug, Default)]
pub struct EncodedNames {
    bytes: Bytes,
    /// Length and BLAKE3 hash of `bytes`.
    pub digest: NamesDigest,
}

pub type NamesDigest = (usize, [u8; 32]);

impl EncodedNames {
    pub fn decode(&self) -> Result<Vec<String>, prost::DecodeError> {
        DiscoveryRequest::decode(self.bytes.clone()).map(|r| r.resource_names)
    }
}

/// Envoy repeats every name it subscribes to with each ACK: at 10,000 endpoint sets,
/// 10,000 strings per EDS ACK, ≈ 0.4 ms to decode and free again (most of a
/// state-of-the-world stream's work under endpoint churn). The names' bytes are set
/// apart and hashed here; the stream decodes them only when the hash differs.
struct SotwDecoder;

impl Decoder for SotwDecoder {
    type Item = SotwRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<SotwRequest>, Status> {
        sotw_request(buf.copy_to_bytes(buf.remaining()))
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable request: {e}")))
    }
}

fn sotw_request(bytes: Bytes) -> Result<SotwRequest, prost::DecodeError> {
    let Some(run) = names_run(&bytes).filter(|run| !run.is_empty()) else {
        return Ok(SotwRequest {
            request: DiscoveryRequest::decode(bytes)?,
            names: None,
        });
    };
    let mut rest = Vec::with_capacity(bytes.len() - run.len());
    rest.extend_from_slice(&bytes[..run.start]);
    rest.extend_from_slice(&bytes[run.end..]);
    let request = DiscoveryRequest::decode(rest.as_slice())?;
    let names = bytes.slice(run);
    let digest = (names.len(), *blake3::hash(&names).as_bytes());
    Ok(SotwRequest {
        request,
        names: Some(EncodedNames {
            bytes: names,
            digest,
        }),
    })
}

/// Where a `DiscoveryRequest`'s names (field 3, every entry one after the other, as
/// Envoy and prost write them) lie in its bytes (an empty range when it has none).
/// `None` when the names are not in one run, or the bytes hold a group or do not
/// parse: the request is then decoded in full, and prost reports what is wrong with it.
fn names_run(bytes: &[u8]) -> Option<std::ops::Range<usize>> {
    const RESOURCE_NAMES: u32 = 3;
    let mut rest = bytes;
    let mut names: Option<std::ops::Range<usize>> = None;
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
    Some(names.unwrap_or(0..0))
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

    /// What the decoder makes of `bytes`, as one gRPC message.
    fn decoded(bytes: &[u8]) -> SotwRequest {
        sotw_request(Bytes::copy_from_slice(bytes)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_are_set_apart_and_the_rest_decodes_without_them() {
        let mut nack = request(&["a", "bb", "ccc"]);
        nack.error_detail = Some(Default::default());
        let first = decoded(&nack.encode_to_vec());
        let Some(names) = &first.names else {
            panic!("a request as prost writes it has one run of names");
        };
        assert_eq!(names.decode().ok(), Some(nack.resource_names.clone()));
        nack.resource_names.clear();
        assert_eq!(first.request, nack);
        // The same names, another request: the same digest; other names: another one.
        let again = decoded(&request(&["a", "bb", "ccc"]).encode_to_vec());
        let other = decoded(&request(&["a", "bb", "cc"]).encode_to_vec());
        let digest = |r: &SotwRequest| r.names.as_ref().map(|n| n.digest);
        assert_eq!(digest(&again), Some(names.digest));
        assert_ne!(digest(&other), Some(names.digest));
    }

    #[test]
    fn names_split_by_another_field_are_decoded_in_full() {
        let mut bytes = request(&["a"]).encode_to_vec();
        // One more name after the type URL and nonce: legal protobuf, not one run.
        bytes.extend_from_slice(&[0x1a, 1, b'z']);
        assert!(names_run(&bytes).is_none());
        let whole = decoded(&bytes);
        assert!(whole.names.is_none());
        assert_eq!(whole.request.resource_names, ["a", "z"]);
    }

    #[test]
    fn unknown_fields_are_stepped_over_and_groups_or_cut_bytes_decode_in_full() {
        let plain = request(&["a", "b"]).encode_to_vec();
        let run = names_run(&plain).unwrap_or_else(|| panic!("no run"));
        // Unknown fields 20 (varint), 21 (fixed64), 22 (fixed32) before everything.
        let mut unknown = vec![0xa0, 0x01, 0x96, 0x01];
        unknown.extend_from_slice(&[0xa9, 0x01, 1, 2, 3, 4, 5, 6, 7, 8]);
        unknown.extend_from_slice(&[0xb5, 0x01, 1, 2, 3, 4]);
        let shift = unknown.len();
        unknown.extend_from_slice(&plain);
        assert_eq!(
            names_run(&unknown),
            Some(run.start + shift..run.end + shift)
        );
        // A group (field 23, start and end) is not parsed here.
        let mut group = vec![0xbb, 0x01, 0xbc, 0x01];
        group.extend_from_slice(&plain);
        assert!(names_run(&group).is_none());
        assert!(names_run(&plain[..plain.len() - 1]).is_none());
    }
}
