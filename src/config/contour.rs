//! Contour's configuration keys that are not sections of Isobar's own: access logs, the
//! HTTP connection manager's switches and timeouts, `network`, `metrics.contour` /
//! `metrics.envoy`, and the sections accepted before they are honoured.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Config;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    #[default]
    Envoy,
    Json,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogLevel {
    /// Every request.
    #[default]
    Info,
    /// Responses with status 300 and above.
    Error,
    /// Responses with status 500 and above.
    Critical,
    Disabled,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerHeader {
    #[default]
    Overwrite,
    AppendIfAbsent,
    PassThrough,
}

/// Contour's `network` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Network {
    /// Trusted proxies in front of Envoy, counted from the right of `X-Forwarded-For`.
    pub num_trusted_hops: u32,
    /// Contour's `envoy-admin` listener's port (on 127.0.0.1; 0: none).
    pub admin_port: u32,
    /// Strip a trailing dot from the Host header before routing.
    pub strip_trailing_host_dot: bool,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            num_trusted_hops: 0,
            admin_port: 9001,
            strip_trailing_host_dot: false,
        }
    }
}

/// Contour's `metrics.contour` / `metrics.envoy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct MetricsServer {
    pub address: String,
    pub port: u16,
    pub server_certificate_path: String,
    pub server_key_path: String,
    pub ca_certificate_path: String,
}

/// A Contour timeout: `Ok(None)` for `""` (Envoy's default), `Ok(Some(ZERO))` for
/// `infinity`/`infinite` (none), else the duration.
pub fn timeout(text: &str) -> Result<Option<Duration>, String> {
    match text {
        "" => Ok(None),
        "infinity" | "infinite" => Ok(Some(Duration::ZERO)),
        other => humantime::parse_duration(other)
            .map(Some)
            .map_err(|e| format!("{other:?} is not a duration (or infinity): {e}")),
    }
}

/// Contour's access log JSON fields and the Envoy operator each stands for.
const JSON_FIELDS: [(&str, &str); 32] = [
    ("@timestamp", "%START_TIME%"),
    ("ts", "%START_TIME%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("duration", "%DURATION%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("uber_trace_id", "%REQ(UBER-TRACE-ID)%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    (
        "upstream_service_time",
        "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
    ),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("grpc_status", "%GRPC_STATUS%"),
    ("grpc_status_number", "%GRPC_STATUS_NUMBER%"),
    ("x_trace_id", "%REQ(X-TRACE-ID)%"),
    ("connection_id", "%CONNECTION_ID%"),
    ("route_name", "%ROUTE_NAME%"),
    ("response_code_details", "%RESPONSE_CODE_DETAILS%"),
    (
        "upstream_transport_failure_reason",
        "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    ),
    ("start_time", "%START_TIME%"),
    // Contour's main (with `tls.fingerprint`).
    ("tls_ja3_fingerprint", "%TLS_JA3_FINGERPRINT%"),
    ("tls_ja4_fingerprint", "%TLS_JA4_FINGERPRINT%"),
];

/// Envoy's access log operators that take no argument: a JSON field of one of these
/// names (in lower case) logs it, as Contour accepts them.
const SIMPLE_OPERATORS: [&str; 76] = [
    "BYTES_RECEIVED",
    "BYTES_SENT",
    "CONNECTION_ID",
    "CONNECTION_TERMINATION_DETAILS",
    "DOWNSTREAM_DIRECT_REMOTE_ADDRESS",
    "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_DIRECT_REMOTE_PORT",
    "DOWNSTREAM_HEADER_BYTES_RECEIVED",
    "DOWNSTREAM_HEADER_BYTES_SENT",
    "DOWNSTREAM_LOCAL_ADDRESS",
    "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_LOCAL_PORT",
    "DOWNSTREAM_LOCAL_SUBJECT",
    "DOWNSTREAM_LOCAL_URI_SAN",
    "DOWNSTREAM_PEER_CERT",
    "DOWNSTREAM_PEER_CERT_V_END",
    "DOWNSTREAM_PEER_CERT_V_START",
    "DOWNSTREAM_PEER_FINGERPRINT_1",
    "DOWNSTREAM_PEER_FINGERPRINT_256",
    "DOWNSTREAM_PEER_ISSUER",
    "DOWNSTREAM_PEER_SERIAL",
    "DOWNSTREAM_PEER_SUBJECT",
    "DOWNSTREAM_PEER_URI_SAN",
    "DOWNSTREAM_REMOTE_ADDRESS",
    "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_REMOTE_PORT",
    "DOWNSTREAM_TLS_CIPHER",
    "DOWNSTREAM_TLS_SESSION_ID",
    "DOWNSTREAM_TLS_VERSION",
    "DOWNSTREAM_WIRE_BYTES_RECEIVED",
    "DOWNSTREAM_WIRE_BYTES_SENT",
    "DURATION",
    "FILTER_CHAIN_NAME",
    "GRPC_STATUS",
    "GRPC_STATUS_NUMBER",
    "HOSTNAME",
    "LOCAL_REPLY_BODY",
    "PROTOCOL",
    "REQUEST_HEADERS_BYTES",
    "REQUESTED_SERVER_NAME",
    "REQUEST_DURATION",
    "REQUEST_TX_DURATION",
    "RESPONSE_CODE",
    "RESPONSE_CODE_DETAILS",
    "RESPONSE_DURATION",
    "RESPONSE_FLAGS",
    "RESPONSE_HEADERS_BYTES",
    "RESPONSE_TRAILERS_BYTES",
    "RESPONSE_TX_DURATION",
    "ROUTE_NAME",
    "START_TIME",
    "UPSTREAM_CLUSTER",
    "UPSTREAM_FILTER_STATE",
    "UPSTREAM_HEADER_BYTES_RECEIVED",
    "UPSTREAM_HEADER_BYTES_SENT",
    "UPSTREAM_HOST",
    "UPSTREAM_LOCAL_ADDRESS",
    "UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
    "UPSTREAM_LOCAL_PORT",
    "UPSTREAM_PEER_CERT",
    "UPSTREAM_PEER_CERT_V_END",
    "UPSTREAM_PEER_CERT_V_START",
    "UPSTREAM_PEER_ISSUER",
    "UPSTREAM_PEER_SUBJECT",
    "UPSTREAM_PROTOCOL",
    "UPSTREAM_REMOTE_ADDRESS",
    "UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
    "UPSTREAM_REMOTE_PORT",
    "UPSTREAM_REQUEST_ATTEMPT_COUNT",
    "UPSTREAM_TLS_CIPHER",
    "UPSTREAM_TLS_SESSION_ID",
    "UPSTREAM_TLS_VERSION",
    "UPSTREAM_TRANSPORT_FAILURE_REASON",
    "UPSTREAM_WIRE_BYTES_RECEIVED",
    "UPSTREAM_WIRE_BYTES_SENT",
    "VIRTUAL_CLUSTER_NAME",
];

/// Contour's default JSON fields, in order.
const DEFAULT_FIELDS: [&str; 23] = [
    "@timestamp",
    "authority",
    "bytes_received",
    "bytes_sent",
    "downstream_local_address",
    "downstream_remote_address",
    "duration",
    "method",
    "path",
    "protocol",
    "request_id",
    "requested_server_name",
    "response_code",
    "response_flags",
    "uber_trace_id",
    "upstream_cluster",
    "upstream_host",
    "upstream_local_address",
    "upstream_service_time",
    "user_agent",
    "x_forwarded_for",
    "grpc_status",
    "grpc_status_number",
];

/// Whether every `%…%` operator of an Envoy format string is spelt as one (upper case
/// letters, digits and `_`, then optional `(args)` and `:length`), with no control
/// character but the final newline.
fn valid_format(text: &str) -> bool {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.chars().any(char::is_control) {
        return false;
    }
    let mut parts = body.split('%');
    parts.next();
    let mut inside = true;
    for part in parts {
        if inside {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name.is_empty() && !part.is_empty() {
                return false;
            }
            let rest = &part[name.len()..];
            let rest = match rest.strip_prefix('(') {
                Some(r) => match r.find(')') {
                    Some(end) => &r[end + 1..],
                    None => return false,
                },
                None => rest,
            };
            if !(rest.is_empty()
                || (rest.starts_with(':') && rest[1..].bytes().all(|b| b.is_ascii_digit())))
            {
                return false;
            }
        }
        inside = !inside;
    }
    // After an even number of `%` the next part would be an operator again: balanced.
    inside
}

/// The JSON access log fields: (name, Envoy format) in order.
pub fn json_fields(fields: &[String]) -> Result<Vec<(String, String)>, String> {
    let names: Vec<&str> = if fields.is_empty() {
        DEFAULT_FIELDS.to_vec()
    } else {
        fields.iter().map(String::as_str).collect()
    };
    let mut out = Vec::new();
    for field in names {
        if let Some((name, format)) = field.split_once('=') {
            if name.is_empty() || !valid_format(format) {
                return Err(format!("json-fields: {field:?} is not name=<Envoy format>"));
            }
            out.push((name.to_string(), format.to_string()));
            continue;
        }
        let known = JSON_FIELDS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(field));
        let upper = field.to_ascii_uppercase();
        match known {
            Some((_, format)) => out.push((field.to_string(), (*format).to_string())),
            // Any of Envoy's operators without arguments, by its name in lower case.
            None if SIMPLE_OPERATORS.contains(&upper.as_str()) => {
                out.push((field.to_string(), format!("%{upper}%")));
            }
            None => {
                return Err(format!(
                    "json-fields: {field:?} is not a field Isobar knows (name=<Envoy format> names any)"
                ));
            }
        }
    }
    Ok(out)
}

/// Checks Contour's keys whose values must be of a given form.
pub fn validate(config: &Config) -> Result<(), String> {
    let t = &config.timeouts;
    for (key, value) in [
        ("timeouts.request-timeout", &t.request_timeout),
        (
            "timeouts.connection-idle-timeout",
            &t.connection_idle_timeout,
        ),
        ("timeouts.stream-idle-timeout", &t.stream_idle_timeout),
        (
            "timeouts.max-connection-duration",
            &t.max_connection_duration,
        ),
        ("timeouts.delayed-close-timeout", &t.delayed_close_timeout),
        (
            "timeouts.connection-shutdown-grace-period",
            &t.connection_shutdown_grace_period,
        ),
    ] {
        timeout(value).map_err(|e| format!("{key}: {e}"))?;
    }
    let s = &config.accesslog_format_string;
    if !s.is_empty() && (!s.ends_with('\n') || !valid_format(s)) {
        return Err(format!(
            "accesslog-format-string: {s:?} is not an Envoy format string ending in a newline"
        ));
    }
    json_fields(&config.json_fields)?;
    for version in &config.default_http_versions {
        if !matches!(version.to_ascii_lowercase().as_str(), "http/1.1" | "http/2") {
            return Err(format!(
                "default-http-versions: {version:?} is not HTTP/1.1 or HTTP/2"
            ));
        }
    }
    for (key, server) in [
        ("metrics.contour", &config.metrics.contour),
        ("metrics.envoy", &config.metrics.envoy),
    ] {
        if let Some(m) = server
            && m.server_certificate_path.is_empty() != m.server_key_path.is_empty()
        {
            return Err(format!(
                "{key}: server-certificate-path and server-key-path go together"
            ));
        }
    }
    Ok(())
}

/// `metrics.contour` and `metrics.envoy` in Isobar's places.
pub fn apply_metrics(config: &mut Config) {
    if let Some(m) = config.metrics.contour.clone() {
        if !m.address.is_empty() {
            config.metrics.address = m.address;
        }
        if m.port != 0 {
            config.metrics.port = m.port;
        }
    }
    if let Some(m) = config.metrics.envoy.clone() {
        if !m.address.is_empty() {
            config.envoy.metrics.address = m.address;
        }
        if m.port != 0 {
            config.envoy.metrics.port = m.port;
        }
    }
}

#[cfg(test)]
mod tests;
