//! A state-of-the-world request as the stream takes it: everything but its names
//! decoded; the names as their bytes and a hash of them, for the stream to decode only
//! when they differ from the last ones it took for the type.

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use prost::Message;
use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint};
use tonic::Status;
use tonic::codec::{DecodeBuf, Decoder};
use tonic::codegen::Bytes;

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
pub(in crate::xds) struct SotwDecoder;

impl Decoder for SotwDecoder {
    type Item = SotwRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<SotwRequest>, Status> {
        sotw_request(buf.copy_to_bytes(buf.remaining()))
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable request: {e}")))
    }
}

pub(in crate::xds) fn sotw_request(bytes: Bytes) -> Result<SotwRequest, prost::DecodeError> {
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
/// `None` when the names are not in one run, not all UTF-8 or not all length-delimited, or
/// the bytes hold a group or do not parse: the request is then decoded in full, and prost reports what is wrong with it.
pub(in crate::xds) fn names_run(bytes: &[u8]) -> Option<std::ops::Range<usize>> {
    const RESOURCE_NAMES: u32 = 3;
    let mut rest = bytes;
    let mut names: Option<std::ops::Range<usize>> = None;
    while rest.has_remaining() {
        let start = bytes.len() - rest.len();
        let (tag, wire_type) = decode_key(&mut rest).ok()?;
        // Names are length-delimited; one of another wire type is for prost to refuse.
        if tag == RESOURCE_NAMES && wire_type != WireType::LengthDelimited {
            return None;
        }
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
            // A name that is not UTF-8: prost decodes the request in full, and refuses it.
            if tag == RESOURCE_NAMES && std::str::from_utf8(&rest[..len]).is_err() {
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

/// Whether the parser reads `bytes` as prost reads them: whatever prost decodes, the
/// parser decodes alike (names included), and what prost refuses, it refuses. The
/// property test below and the coverage-guided fuzz target (`tests/fuzz`) both ask it.
#[doc(hidden)]
pub fn agrees_with_prost(bytes: &[u8]) -> Result<(), String> {
    let parsed = sotw_request(Bytes::copy_from_slice(bytes));
    match (DiscoveryRequest::decode(bytes), parsed) {
        (Ok(expected), Ok(got)) => {
            let mut request = got.request;
            if let Some(names) = got.names {
                request.resource_names = names
                    .decode()
                    .map_err(|e| format!("the names set apart do not decode: {e}"))?;
            }
            if request == expected {
                Ok(())
            } else {
                Err(format!(
                    "prost decodes {expected:?}, the parser {request:?}"
                ))
            }
        }
        (Err(_), Err(_)) => Ok(()),
        (Ok(_), Err(e)) => Err(format!("prost decodes it, the parser says {e}")),
        (Err(e), Ok(_)) => Err(format!("prost refuses it ({e}), the parser takes it")),
    }
}

#[cfg(test)]
mod tests;
