//! The HTTP connection manager of a listener or filter chain, and its access log.

use envoy_types::pb::envoy::config::accesslog::v3::{self as accesslog, AccessLog};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::FileAccessLog;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    self as hcm, HttpConnectionManager, Rds,
};
use envoy_types::pb::google::protobuf::{self as pb, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;

use isobar_sdk::ir;

use crate::xds::filter::http_filter;
use crate::xds::proto::{ads, duration, inline};
use crate::xds::settings::{AccessLogSettings, EnvoySettings};

/// A file access log at `path`, as `log` says: Envoy's default format, a format
/// string, or JSON fields (written in their order: a protobuf `Struct` is a hash map,
/// whose order would change the bytes from build to build), for responses with at
/// least `log.min_status`.
pub(in crate::xds) fn file_access_log(path: &str, log: &AccessLogSettings) -> AccessLog {
    /// `FileAccessLog` with `log_format` (a `SubstitutionFormatString`) as Envoy reads
    /// it, its JSON fields in order.
    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderedFileAccessLog {
        #[prost(string, tag = "1")]
        path: String,
        #[prost(message, optional, tag = "5")]
        log_format: Option<OrderedFormat>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderedFormat {
        #[prost(message, optional, tag = "2")]
        json_format: Option<OrderedStruct>,
        #[prost(message, optional, tag = "5")]
        text_format_source: Option<core::DataSource>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct OrderedStruct {
        #[prost(message, repeated, tag = "1")]
        fields: Vec<StructEntry>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct StructEntry {
        #[prost(string, tag = "1")]
        key: String,
        #[prost(message, optional, tag = "2")]
        value: Option<pb::Value>,
    }
    let format = if !log.json.is_empty() {
        Some(OrderedFormat {
            json_format: Some(OrderedStruct {
                fields: log
                    .json
                    .iter()
                    .map(|(key, format)| StructEntry {
                        key: key.clone(),
                        value: Some(pb::Value {
                            kind: Some(pb::value::Kind::StringValue(format.clone())),
                        }),
                    })
                    .collect(),
            }),
            text_format_source: None,
        })
    } else {
        log.text.as_ref().map(|text| OrderedFormat {
            json_format: None,
            text_format_source: Some(inline(text)),
        })
    };
    let config = pb::Any {
        type_url: <FileAccessLog as prost::Name>::type_url(),
        value: OrderedFileAccessLog {
            path: path.to_string(),
            log_format: format,
        }
        .encode_to_vec(),
    };
    let filter = (log.min_status > 0).then(|| accesslog::AccessLogFilter {
        filter_specifier: Some(
            accesslog::access_log_filter::FilterSpecifier::StatusCodeFilter(
                accesslog::StatusCodeFilter {
                    comparison: Some(accesslog::ComparisonFilter {
                        op: accesslog::comparison_filter::Op::Ge as i32,
                        value: Some(core::RuntimeUInt32 {
                            default_value: log.min_status,
                            runtime_key: "isobar.access_log.min_status".to_string(),
                        }),
                    }),
                },
            ),
        ),
    });
    AccessLog {
        name: "envoy.access_loggers.file".to_string(),
        filter,
        config_type: Some(accesslog::access_log::ConfigType::TypedConfig(config)),
    }
}

pub(in crate::xds) fn hcm_filter(manager: HttpConnectionManager) -> listener::Filter {
    listener::Filter {
        name: "envoy.filters.network.http_connection_manager".to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(manager))),
    }
}

/// Whether any route of `vhost` rewrites `Set-Cookie` (needs the Lua filter).
pub(in crate::xds) fn rewrites_cookies(vhost: &ir::VirtualHost) -> bool {
    vhost.routes.values().any(|r| {
        !r.policy().cookie_rewrites.is_empty()
            || matches!(&r.action, ir::RouteAction::Forward(clusters)
                if clusters.iter().any(|w| !w.cookie_rewrites.is_empty()))
    })
}

/// The HTTP connection manager of an HTTP listener and of each chain of an HTTPS one,
/// with the listener's HTTP filters. The cookie-rewriting Lua filter (2.5 KB of script)
/// is only in managers whose routes may use it (`cookies`): an HTTP listener's and the
/// fallback chain's always carry it, an HTTPS vhost's chain only when one of its routes
/// rewrites cookies, so 10,000 HTTPS vhosts do not repeat the script 10,000 times in
/// the listener. A secure vhost's own manager has `vhost`'s authorization and JWT
/// providers; the others have the listener's global authorization.
pub(in crate::xds) fn connection_manager(
    on: &ir::Listener,
    settings: &EnvoySettings,
    rds_name: &str,
    cookies: bool,
    vhost: Option<&ir::VhostExtensions>,
) -> HttpConnectionManager {
    let http = &settings.http;
    let manager = crate::xds::filter::Manager {
        http,
        extensions: &on.extensions,
        vhost,
    };
    HttpConnectionManager {
        stat_prefix: on.name.clone(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: rds_name.to_string(),
        })),
        http_filters: on
            .http_filters
            .iter()
            .filter(|f| cookies || **f != ir::HttpFilter::CookieRewrite)
            .filter_map(|f| http_filter(*f, &manager))
            .collect(),
        tracing: on
            .extensions
            .tracing
            .as_deref()
            .map(crate::xds::extension::tracing),
        use_remote_address: Some(pb::BoolValue { value: true }),
        normalize_path: Some(pb::BoolValue { value: true }),
        merge_slashes: http.merge_slashes,
        preserve_external_request_id: true,
        xff_num_trusted_hops: http.num_trusted_hops,
        strip_trailing_host_dot: http.strip_trailing_host_dot,
        server_header_transformation: http.server_header,
        request_timeout: http.request_timeout.map(duration),
        stream_idle_timeout: http.stream_idle_timeout.map(duration),
        delayed_close_timeout: http.delayed_close_timeout.map(duration),
        drain_timeout: http.drain_timeout.map(duration),
        codec_type: match (http.http1, http.http2) {
            (true, false) => hcm::http_connection_manager::CodecType::Http1,
            (false, true) => hcm::http_connection_manager::CodecType::Http2,
            _ => hcm::http_connection_manager::CodecType::Auto,
        } as i32,
        http_protocol_options: Some(core::Http1ProtocolOptions {
            accept_http_10: true,
            allow_chunked_length: http.allow_chunked_length,
            ..Default::default()
        }),
        http2_protocol_options: http.http2_max_concurrent_streams.map(|value| {
            core::Http2ProtocolOptions {
                max_concurrent_streams: Some(UInt32Value { value }),
                ..Default::default()
            }
        }),
        common_http_protocol_options: Some(core::HttpProtocolOptions {
            idle_timeout: http.idle_timeout.map(duration),
            max_connection_duration: http.max_connection_duration.map(duration),
            max_requests_per_connection: http
                .max_requests_per_connection
                .map(|value| UInt32Value { value }),
            ..Default::default()
        }),
        access_log: if settings.access_log_path.is_empty() || http.access_log.disabled {
            Vec::new()
        } else {
            vec![file_access_log(&settings.access_log_path, &http.access_log)]
        },
        ..Default::default()
    }
}
