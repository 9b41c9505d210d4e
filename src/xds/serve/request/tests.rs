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

/// Found by fuzzing: a name that is not UTF-8 was set apart and the request taken,
/// where prost refuses the request.
#[test]
fn a_name_that_is_not_utf8_refuses_the_request() {
    // One run of names, the first not UTF-8.
    let mut bytes = vec![0x1a, 1, 0x80];
    bytes.extend(request(&[]).encode_to_vec());
    assert!(names_run(&bytes).is_none());
    assert!(sotw_request(Bytes::from(bytes)).is_err());
}

/// Found by coverage-guided fuzzing (`tests/fuzz`, target `xds_request`): a
/// resource name of wire type varint was set apart as a name and the request taken,
/// where prost refuses it.
#[test]
fn a_name_of_another_wire_type_refuses_the_request() {
    // Field 3 as a varint (34).
    let bytes: &'static [u8] = &[0x18, 0x22];
    assert!(names_run(bytes).is_none());
    assert!(sotw_request(Bytes::from_static(bytes)).is_err());
    assert_eq!(agrees_with_prost(bytes), Ok(()));
}

/// Fuzzing the parser against prost: requests of random fields (names, version,
/// nonce, type, error detail, node) whose records come in any order, and random
/// bytes. The parser never panics; whatever prost decodes, it decodes alike (names
/// included), and what prost refuses, it refuses.
#[test]
fn random_requests_decode_as_prost_decodes_them() {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::google::rpc::Status as RpcStatus;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let cases = std::env::var("XDS_REQUEST_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let field = prop_oneof![
        "\\PC{0,12}".prop_map(|v| DiscoveryRequest {
            version_info: v,
            ..Default::default()
        }),
        prop::collection::vec("\\PC{0,8}", 0..4).prop_map(|n| DiscoveryRequest {
            resource_names: n,
            ..Default::default()
        }),
        "\\PC{0,20}".prop_map(|t| DiscoveryRequest {
            type_url: t,
            ..Default::default()
        }),
        "[0-9]{0,4}".prop_map(|n| DiscoveryRequest {
            response_nonce: n,
            ..Default::default()
        }),
        (any::<i32>(), "\\PC{0,10}").prop_map(|(code, message)| DiscoveryRequest {
            error_detail: Some(RpcStatus {
                code,
                message,
                details: vec![]
            }),
            ..Default::default()
        }),
        "\\PC{0,8}".prop_map(|id| DiscoveryRequest {
            node: Some(Node {
                id,
                ..Default::default()
            }),
            ..Default::default()
        }),
    ];
    // Records in any order, each encoded alone (protobuf merges them), and names of
    // any bytes (not always UTF-8).
    let raw_name = prop::collection::vec(any::<u8>(), 0..4).prop_map(|b| {
        let mut record = vec![0x1a, b.len() as u8];
        record.extend(b);
        record
    });
    let record = prop_oneof![
        4 => field.prop_map(|r| r.encode_to_vec()),
        1 => raw_name,
    ];
    let records = prop::collection::vec(record, 0..8);
    let check = |bytes: Vec<u8>| {
        agrees_with_prost(&bytes).map_err(TestCaseError::fail)?;
        Ok(())
    };
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let outcome = runner.run(&records, |records| check(records.concat()));
    assert!(outcome.is_ok(), "{outcome:?}");
    let noise = prop::collection::vec(any::<u8>(), 0..64);
    let outcome = runner.run(&noise, check);
    assert!(outcome.is_ok(), "{outcome:?}");
}
