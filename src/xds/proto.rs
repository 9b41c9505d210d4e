//! Protobuf helpers every resource type uses: durations, addresses, ADS config
//! sources, and fields written by hand where prost would not be deterministic (maps).

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{
    self as core, Address, AggregatedConfigSource, ConfigSource, DataSource, HeaderValue,
    HeaderValueOption, SocketAddress,
};
use envoy_types::pb::envoy::config::route::v3 as route;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatcher, StringMatcher, string_matcher};
use envoy_types::pb::google::protobuf::{self as pb, Any};
use prost::Message;

use isobar_sdk::ir;

/// The longest duration protobuf (and so Envoy) takes: 10,000 years.
const MAX_PROTO_SECONDS: u64 = 315_576_000_000;

/// `d` as protobuf's Duration, at most protobuf's longest (sources refuse longer ones;
/// this keeps a value that slipped past them from being refused by Envoy).
pub(super) fn duration(d: Duration) -> pb::Duration {
    if d.as_secs() >= MAX_PROTO_SECONDS {
        return pb::Duration {
            seconds: MAX_PROTO_SECONDS as i64,
            nanos: 0,
        };
    }
    pb::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

pub(super) fn ads() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

pub(super) fn socket_address(address: &str, port: u16) -> Address {
    Address {
        address: Some(core::address::Address::SocketAddress(SocketAddress {
            address: address.to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(
                port,
            ))),
            ..Default::default()
        })),
    }
}

pub(super) fn inline(text: &str) -> DataSource {
    DataSource {
        specifier: Some(core::data_source::Specifier::InlineString(text.to_string())),
        ..Default::default()
    }
}

pub(super) fn tls_version(v: ir::TlsVersion) -> i32 {
    match v {
        ir::TlsVersion::V1_2 => tls::tls_parameters::TlsProtocol::TlSv12 as i32,
        ir::TlsVersion::V1_3 => tls::tls_parameters::TlsProtocol::TlSv13 as i32,
    }
}

pub(super) const MAP_FIELD: u32 = 1;
pub(super) const MAP_KEY: u32 = 1;
pub(super) const MAP_VALUE: u32 = 2;

pub(super) fn append_field(buf: &mut impl prost::bytes::BufMut, tag: u32, bytes: &[u8]) {
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, buf);
    prost::encoding::encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

/// One entry of a `map<string, Any>` field (`typed_per_filter_config`), written by hand:
/// callers write entries in key order so the bytes stay deterministic.
pub(super) fn append_map_entry(buf: &mut Vec<u8>, tag: u32, key: &str, value: &Any) {
    let mut entry = Vec::new();
    append_field(&mut entry, MAP_KEY, key.as_bytes());
    append_field(&mut entry, MAP_VALUE, &value.encode_to_vec());
    append_field(buf, tag, &entry);
}

/// A `google.protobuf.Value` built by hand, so maps are written in key order.
pub(super) enum PbValue<'a> {
    Number(f64),
    Str(&'a str),
    Bool(bool),
    List(Vec<PbValue<'a>>),
    Struct(Vec<(&'a str, PbValue<'a>)>),
}

impl PbValue<'_> {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            PbValue::Number(n) => prost::encoding::double::encode(2, n, &mut out),
            PbValue::Str(s) => append_field(&mut out, 3, s.as_bytes()),
            PbValue::Bool(b) => {
                prost::encoding::bool::encode(4, b, &mut out);
            }
            PbValue::List(items) => {
                let mut list = Vec::new();
                for item in items {
                    append_field(&mut list, 1, &item.encode());
                }
                append_field(&mut out, 6, &list);
            }
            PbValue::Struct(fields) => append_field(&mut out, 5, &struct_bytes(fields)),
        }
        out
    }
}

/// A `google.protobuf.Struct` with its fields in the given (sorted) order.
pub(super) fn struct_bytes(fields: &[(&str, PbValue<'_>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in fields {
        let mut entry = Vec::new();
        append_field(&mut entry, MAP_KEY, key.as_bytes());
        append_field(&mut entry, MAP_VALUE, &value.encode());
        append_field(&mut out, MAP_FIELD, &entry);
    }
    out
}

pub(super) fn headers_to_add(policy: &ir::HeadersPolicy) -> Vec<HeaderValueOption> {
    let mut out = overwrite_headers(&policy.set);
    out.extend(policy.add.iter().map(|(key, value)| HeaderValueOption {
        header: Some(HeaderValue {
            key: key.clone(),
            value: value.clone(),
            ..Default::default()
        }),
        append_action: core::header_value_option::HeaderAppendAction::AppendIfExistsOrAdd as i32,
        ..Default::default()
    }));
    out
}

/// Headers set with Envoy's overwrite-or-add, in name order.
pub(super) fn overwrite_headers(headers: &BTreeMap<String, String>) -> Vec<HeaderValueOption> {
    headers
        .iter()
        .map(|(key, value)| HeaderValueOption {
            header: Some(HeaderValue {
                key: key.clone(),
                value: value.clone(),
                ..Default::default()
            }),
            append_action: core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd
                as i32,
            ..Default::default()
        })
        .collect()
}

/// A length-delimited field's size: its key, its length, its bytes.
pub(super) fn field_len(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + prost::encoding::encoded_len_varint(len as u64) + len
}

pub(super) fn string_matcher(m: &ir::StringMatch, ignore_case: bool) -> StringMatcher {
    use string_matcher::MatchPattern;
    let pattern = match m {
        ir::StringMatch::Exact(v) => MatchPattern::Exact(v.clone()),
        ir::StringMatch::Prefix(v) => MatchPattern::Prefix(v.clone()),
        ir::StringMatch::Suffix(v) => MatchPattern::Suffix(v.clone()),
        ir::StringMatch::Contains(v) => MatchPattern::Contains(v.clone()),
        ir::StringMatch::Regex(v) => MatchPattern::SafeRegex(RegexMatcher {
            regex: v.clone(),
            ..Default::default()
        }),
    };
    StringMatcher {
        match_pattern: Some(pattern),
        // Envoy rejects ignore_case on a regex matcher.
        ignore_case: ignore_case && !matches!(m, ir::StringMatch::Regex(_)),
    }
}

/// An IR header match as Envoy's matcher (routes, and rate limit descriptors).
pub(super) fn header_matcher(h: &ir::HeaderMatch) -> route::HeaderMatcher {
    use route::header_matcher::HeaderMatchSpecifier;
    let specifier = match &h.value {
        None => HeaderMatchSpecifier::PresentMatch(true),
        Some(m) => HeaderMatchSpecifier::StringMatch(string_matcher(m, h.ignore_case)),
    };
    route::HeaderMatcher {
        name: h.name.clone(),
        header_match_specifier: Some(specifier),
        invert_match: h.invert,
        treat_missing_header_as_empty: h.treat_missing_as_empty,
    }
}

/// An IR query parameter match as Envoy's matcher.
pub(super) fn query_matcher(q: &ir::QueryMatch) -> route::QueryParameterMatcher {
    use route::query_parameter_matcher::QueryParameterMatchSpecifier;
    let specifier = match &q.value {
        None => QueryParameterMatchSpecifier::PresentMatch(true),
        Some(m) => QueryParameterMatchSpecifier::StringMatch(string_matcher(m, q.ignore_case)),
    };
    route::QueryParameterMatcher {
        name: q.name.clone(),
        query_parameter_match_specifier: Some(specifier),
    }
}
