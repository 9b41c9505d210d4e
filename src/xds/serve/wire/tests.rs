use super::*;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

const TYPE_URL: &str = "type.googleapis.com/x";

/// A resource as prost would carry it.
fn any(value: &Encoded) -> Any {
    Any {
        type_url: TYPE_URL.into(),
        value: value.to_vec(),
    }
}

fn joined(mut wire: Wire) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(piece) = wire.next_piece() {
        out.extend_from_slice(&piece);
    }
    out
}

fn framed(message: &impl Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn ok(wire: Result<Wire, Status>) -> Wire {
    wire.unwrap_or_else(|e| panic!("{e}"))
}

/// `wire` is `expected` as a gRPC message, and says how long it is.
fn assert_frames(wire: Wire, expected: &impl Message) {
    assert_eq!(wire.message_len, expected.encoded_len());
    assert_eq!(joined(wire), framed(expected));
}

/// Small values, values around the sharing size, a value larger than a chunk, and
/// enough small ones to fill several chunks.
fn resources() -> Vec<Encoded> {
    let sizes = [
        0,
        1,
        300,
        SHARE_FROM - 1,
        SHARE_FROM,
        CHUNK + 7,
        5 * 1024 * 1024,
    ];
    sizes
        .into_iter()
        .chain(std::iter::repeat_n(1000, 100))
        .enumerate()
        .map(|(i, len)| (0..len).map(|b| (b * 7 + i) as u8).collect())
        .collect()
}

#[test]
fn a_sotw_response_is_what_prost_encodes() {
    let resources = resources();
    let part = Arc::new(sotw_resources(TYPE_URL, &resources));
    let wire = ok(sotw("v1", TYPE_URL, "7", part));
    assert!(
        wire.pieces.len() > 3,
        "large values are pieces of their own"
    );
    assert_eq!(wire.resources, resources.len());
    let expected = DiscoveryResponse {
        version_info: "v1".into(),
        resources: resources.iter().map(any).collect(),
        type_url: TYPE_URL.into(),
        nonce: "7".into(),
        ..Default::default()
    };
    assert_frames(wire, &expected);
}

#[test]
fn a_delta_response_is_what_prost_encodes() {
    let resources = resources();
    let named = || {
        resources.iter().enumerate().map(|(i, any)| Named {
            name: if i == 2 { "" } else { "ns/name" },
            version: format!("{i:016x}"),
            resource: any,
        })
    };
    let removed: Vec<crate::xds::resource::Name> = vec!["gone".into(), "also/gone".into()];
    let part = Arc::new(delta_resources(TYPE_URL, named()));
    let wire = ok(delta("sys", TYPE_URL, "8", part, &removed));
    let expected = DeltaDiscoveryResponse {
        system_version_info: "sys".into(),
        resources: named()
            .map(|r| Resource {
                name: r.name.to_string(),
                version: r.version,
                resource: Some(any(r.resource)),
                ..Default::default()
            })
            .collect(),
        type_url: TYPE_URL.into(),
        removed_resources: removed.iter().map(|n| n.to_string()).collect(),
        nonce: "8".into(),
        ..Default::default()
    };
    assert_frames(wire, &expected);
}

#[test]
fn an_empty_response_is_the_prefix_and_its_fields() {
    let part = Arc::new(Resources::default());
    let wire = ok(sotw("", "type.googleapis.com/x", "1", part));
    let expected = DiscoveryResponse {
        type_url: "type.googleapis.com/x".into(),
        nonce: "1".into(),
        ..Default::default()
    };
    assert_frames(wire, &expected);
}

#[test]
fn a_large_value_and_a_shared_part_are_not_copied() {
    let resources = resources();
    let part = Arc::new(sotw_resources(TYPE_URL, &resources));
    let first = ok(sotw("v", "t", "1", part.clone()));
    let second = ok(sotw("v", "t", "2", part));
    let big = &resources[6];
    let points_at =
        |wire: &Wire, at: *const u8| wire.pieces.as_slice().iter().any(|p| p.as_ptr() == at);
    assert!(points_at(&first, big.as_ptr()));
    // The two responses' resource bytes are the same memory.
    let small = first.pieces.as_slice()[1].as_ptr();
    assert!(points_at(&second, small));
}
