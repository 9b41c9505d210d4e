//! ADS responses encoded straight into gRPC frames. Every resource is encoded once, into
//! the snapshot; a response shares the larger ones (a route table, a listener, a
//! certificate) with the snapshot instead of copying them for each stream, and copies
//! the small ones, and the fields around them, into chunks of a few tens of KB. 200
//! Envoys fetching a 4 MB route table cost the table once, not 200 times, and no stream
//! allocates a buffer the size of its largest response.
//!
//! The bytes are exactly what prost would encode for the same `DiscoveryResponse` or
//! `DeltaDiscoveryResponse`, fields in tag order (a test below compares them).

use std::sync::Arc;

use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use tonic::Status;
use tonic::codegen::Bytes;

use crate::xds::proto::field_len;
use crate::xds::resource::Encoded;

/// A resource value from this size up is shared with the snapshot, not copied.
const SHARE_FROM: usize = 4096;
/// Copied bytes are gathered into pieces of at most this size.
const CHUNK: usize = 32 * 1024;

/// One response as a gRPC length-prefixed message (uncompressed, its length, its
/// bytes), in pieces to be sent in order.
#[derive(Debug)]
pub struct Wire {
    pieces: std::vec::IntoIter<Bytes>,
    /// The protobuf message's length (without the 5-byte prefix).
    pub message_len: usize,
    /// How many resources it carries.
    pub resources: usize,
    /// Its resources part, kept while it is sent so that streams sending the same
    /// one at the same time share it (see [`Resources`]).
    _resources: Arc<Resources>,
}

impl Wire {
    /// The next piece to send; `None` once all are.
    pub fn next_piece(&mut self) -> Option<Bytes> {
        self.pieces.next()
    }
}

/// The resources field of a response, encoded: what responses of one type differ in
/// besides nonce and version. A response carrying every resource of a type (a new
/// Envoy's first sync) uses one the snapshot shares between streams (see
/// `TypeSnapshot::all`), so 200 Envoys connecting at once cost one copy.
#[derive(Debug, Default)]
pub struct Resources {
    pieces: Vec<Bytes>,
    len: usize,
    count: usize,
}

impl Resources {
    /// Its bytes in one piece (for tests).
    #[cfg(test)]
    pub fn bytes(&self) -> Vec<u8> {
        self.pieces.concat()
    }
}

/// The resources field of a state-of-the-world response: each resource as an `Any` of
/// `type_url`.
pub fn sotw_resources<'a>(
    type_url: &str,
    resources: impl IntoIterator<Item = &'a Encoded>,
) -> Resources {
    let mut w = Writer::bare();
    let mut count = 0;
    for value in resources {
        w.any(2, type_url, value);
        count += 1;
    }
    w.resources(count)
}

/// One resource of a delta response: its name, its version and the resource.
pub struct Named<'a> {
    pub name: &'a str,
    pub version: String,
    pub resource: &'a Encoded,
}

impl Named<'_> {
    fn encoded_len(&self, type_url: &str) -> usize {
        string_len(3, self.name)
            + string_len(1, &self.version)
            + field_len(2, any_len(type_url, self.resource))
    }
}

/// The resources field of a delta response: each resource, as an `Any` of `type_url`,
/// with its name and version.
pub fn delta_resources<'a>(
    type_url: &str,
    resources: impl IntoIterator<Item = Named<'a>>,
) -> Resources {
    let mut w = Writer::bare();
    let mut count = 0;
    for r in resources {
        w.header(2, r.encoded_len(type_url));
        w.string(1, &r.version);
        w.any(2, type_url, r.resource);
        w.string(3, r.name);
        count += 1;
    }
    w.resources(count)
}

/// A state-of-the-world `DiscoveryResponse`.
pub fn sotw(
    version: &str,
    type_url: &str,
    nonce: &str,
    resources: Arc<Resources>,
) -> Result<Wire, Status> {
    let len =
        string_len(1, version) + resources.len + string_len(4, type_url) + string_len(5, nonce);
    let mut w = Writer::new(len)?;
    w.string(1, version);
    w.share(&resources);
    w.string(4, type_url);
    w.string(5, nonce);
    Ok(w.finish(resources))
}

/// An incremental `DeltaDiscoveryResponse`.
pub fn delta(
    system_version: &str,
    type_url: &str,
    nonce: &str,
    resources: Arc<Resources>,
    removed: &[crate::xds::resource::Name],
) -> Result<Wire, Status> {
    let len = string_len(1, system_version)
        + resources.len
        + string_len(4, type_url)
        + string_len(5, nonce)
        + removed
            .iter()
            .map(|name| field_len(6, name.len()))
            .sum::<usize>();
    let mut w = Writer::new(len)?;
    w.string(1, system_version);
    w.share(&resources);
    w.string(4, type_url);
    w.string(5, nonce);
    for name in removed {
        w.header(6, name.len());
        w.copy(name.as_bytes());
    }
    Ok(w.finish(resources))
}

/// A proto3 string field's size (an empty string is not encoded).
fn string_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        field_len(tag, s.len())
    }
}

/// An `Any`'s size: its type URL and its value (an empty value is not encoded).
fn any_len(type_url: &str, value: &[u8]) -> usize {
    string_len(1, type_url)
        + if value.is_empty() {
            0
        } else {
            field_len(2, value.len())
        }
}

#[derive(Default)]
struct Writer {
    pieces: Vec<Bytes>,
    /// Copied bytes not yet a piece; each piece is cut to its exact size.
    chunk: Vec<u8>,
    message_len: usize,
    /// How many bytes were written (with the prefix, if any).
    written: usize,
}

impl Writer {
    /// A message: its gRPC prefix first.
    fn new(message_len: usize) -> Result<Writer, Status> {
        let prefix = u32::try_from(message_len)
            .map_err(|_| Status::resource_exhausted(format!("a {message_len}-byte response")))?;
        let mut w = Writer {
            chunk: Vec::with_capacity(CHUNK.min(5 + message_len)),
            message_len,
            ..Writer::default()
        };
        w.copy(&[0]);
        w.copy(&prefix.to_be_bytes());
        Ok(w)
    }

    /// Part of a message.
    fn bare() -> Writer {
        Writer::default()
    }

    /// Makes room for `n` more copied bytes.
    fn room(&mut self, n: usize) {
        if self.chunk.capacity() - self.chunk.len() < n {
            self.flush();
            self.chunk.reserve_exact(CHUNK.max(n));
        }
    }

    fn flush(&mut self) {
        if !self.chunk.is_empty() {
            self.pieces.push(Bytes::copy_from_slice(&self.chunk));
            self.chunk.clear();
        }
    }

    fn copy(&mut self, bytes: &[u8]) {
        self.room(bytes.len());
        self.chunk.extend_from_slice(bytes);
        self.written += bytes.len();
    }

    /// A length-delimited field's key and length.
    fn header(&mut self, tag: u32, len: usize) {
        let n = key_len(tag) + encoded_len_varint(len as u64);
        self.room(n);
        encode_key(tag, WireType::LengthDelimited, &mut self.chunk);
        encode_varint(len as u64, &mut self.chunk);
        self.written += n;
    }

    fn string(&mut self, tag: u32, s: &str) {
        if !s.is_empty() {
            self.header(tag, s.len());
            self.copy(s.as_bytes());
        }
    }

    /// A resource as an `Any` of `type_url`; a large value is shared, not copied.
    fn any(&mut self, tag: u32, type_url: &str, value: &Encoded) {
        self.header(tag, any_len(type_url, value));
        self.string(1, type_url);
        if value.is_empty() {
            return;
        }
        self.header(2, value.len());
        if value.len() < SHARE_FROM {
            self.copy(value);
        } else {
            self.flush();
            self.pieces.push(Bytes::from_owner(Arc::clone(value)));
            self.written += value.len();
        }
    }

    /// Pieces encoded before, by reference.
    fn share(&mut self, resources: &Resources) {
        self.flush();
        self.pieces.extend(resources.pieces.iter().cloned());
        self.written += resources.len;
    }

    fn resources(mut self, count: usize) -> Resources {
        self.flush();
        Resources {
            pieces: self.pieces,
            len: self.written,
            count,
        }
    }

    fn finish(mut self, resources: Arc<Resources>) -> Wire {
        self.flush();
        debug_assert_eq!(self.written, 5 + self.message_len);
        Wire {
            pieces: self.pieces.into_iter(),
            message_len: self.message_len,
            resources: resources.count,
            _resources: resources,
        }
    }
}

#[cfg(test)]
mod tests;
