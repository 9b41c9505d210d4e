//! Header names and values from users, made safe for Envoy.
//!
//! Envoy treats `%` in a header value as the start of a formatter command and rejects
//! the whole RouteConfiguration when the command is unknown. A user's `%` is therefore
//! escaped as `%%`, except in the Envoy variables Contour lets users write (`%REQ(X-Foo)%`,
//! `%DOWNSTREAM_REMOTE_ADDRESS%`, …), which are kept as they are.

/// Envoy command operators kept verbatim, without arguments.
const PLAIN_VARIABLES: &[&str] = &[
    "DOWNSTREAM_REMOTE_ADDRESS",
    "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_REMOTE_PORT",
    "DOWNSTREAM_DIRECT_REMOTE_ADDRESS",
    "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_LOCAL_ADDRESS",
    "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_LOCAL_PORT",
    "DOWNSTREAM_LOCAL_URI_SAN",
    "DOWNSTREAM_PEER_URI_SAN",
    "DOWNSTREAM_LOCAL_SUBJECT",
    "DOWNSTREAM_PEER_SUBJECT",
    "DOWNSTREAM_PEER_ISSUER",
    "DOWNSTREAM_TLS_SESSION_ID",
    "DOWNSTREAM_TLS_CIPHER",
    "DOWNSTREAM_TLS_VERSION",
    "DOWNSTREAM_PEER_FINGERPRINT_256",
    "DOWNSTREAM_PEER_FINGERPRINT_1",
    "DOWNSTREAM_PEER_SERIAL",
    "DOWNSTREAM_PEER_CERT",
    "DOWNSTREAM_PEER_CERT_V_START",
    "DOWNSTREAM_PEER_CERT_V_END",
    "HOSTNAME",
    "PROTOCOL",
    "REQUESTED_SERVER_NAME",
    "UPSTREAM_REMOTE_ADDRESS",
    "UPSTREAM_LOCAL_ADDRESS",
    "RESPONSE_FLAGS",
    "RESPONSE_CODE_DETAILS",
    "TLS_JA3_FINGERPRINT",
    "TLS_JA4_FINGERPRINT",
    "START_TIME",
];

/// Escapes `value` for an Envoy header value: `%` becomes `%%` unless it starts an
/// allowed variable (`%NAME%` from the list, `%REQ(header-name)%`).
pub fn escape_header_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match allowed_variable(tail) {
            Some(len) => {
                out.push_str(&tail[..len]);
                rest = &tail[len..];
            }
            None => {
                out.push_str("%%");
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of the allowed variable `text` starts with, if it does.
fn allowed_variable(text: &str) -> Option<usize> {
    let body = text.strip_prefix('%')?;
    let end = body.find('%')?;
    let inner = &body[..end];
    let allowed = if let Some(args) = inner.strip_prefix("REQ(").and_then(|a| a.strip_suffix(')')) {
        let (name, len) = args.split_once(':').unwrap_or((args, ""));
        is_header_name(name) && len.chars().all(|c| c.is_ascii_digit())
    } else {
        PLAIN_VARIABLES.contains(&inner)
    };
    allowed.then_some(end + 2)
}

/// The longest header name Isobar passes on.
pub const MAX_HEADER_NAME_BYTES: usize = 1024;

/// The longest header value Isobar passes on: escaping (`%` → `%%`) at most doubles it,
/// within the 16,384 bytes Envoy takes in a `HeaderValue`.
pub const MAX_HEADER_VALUE_BYTES: usize = 8192;

/// An HTTP header name (RFC 7230 token) that Envoy lets a route add or remove: not a
/// pseudo-header (`:path`) and not `host` (which is rewritten, not set).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_HEADER_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b))
}

/// A header value Envoy accepts: no control characters other than tab, at most
/// [`MAX_HEADER_VALUE_BYTES`].
pub fn is_header_value(value: &str) -> bool {
    value.len() <= MAX_HEADER_VALUE_BYTES && value.chars().all(|c| c == '\t' || !c.is_control())
}

/// Header changes a source applies to every service's requests or responses, under the
/// service's own (Contour's `policy.request-headers` / `response-headers`).
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderChanges {
    /// Headers set (overwritten or added), by name; `%CONTOUR_NAMESPACE%`,
    /// `%CONTOUR_SERVICE_NAME%` and `%CONTOUR_SERVICE_PORT%` stand for the service's.
    pub set: std::collections::BTreeMap<String, String>,
    /// Headers removed.
    pub remove: Vec<String>,
}

/// Contour's `policy` section as a source applies it: default header changes of every
/// service, requests and responses.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields, default)]
pub struct DefaultHeaders {
    pub request: HeaderChanges,
    pub response: HeaderChanges,
}

/// Contour's `policy` section of `contour.yaml`: the default header changes of every
/// HTTPProxy service and, with `applyToIngress`, of every Ingress backend.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ContourPolicy {
    pub request_headers: HeaderChanges,
    pub response_headers: HeaderChanges,
    #[serde(rename = "applyToIngress")]
    pub apply_to_ingress: bool,
}

impl ContourPolicy {
    /// The `policy` section of `contour.yaml` read whole (as JSON); unset or unreadable
    /// (the configuration refused it already): no defaults.
    pub fn of(contour: &serde_json::Value) -> ContourPolicy {
        contour
            .get("policy")
            .and_then(|p| serde_json::from_value(p.clone()).ok())
            .unwrap_or_default()
    }

    /// The default header changes it gives sources.
    pub fn defaults(&self) -> DefaultHeaders {
        DefaultHeaders {
            request: self.request_headers.clone(),
            response: self.response_headers.clone(),
        }
    }
}

impl DefaultHeaders {
    /// Gives the service `(namespace, name, port)` sent to by `target` every default it
    /// does not set itself: a header it sets keeps its value, one it removes stays
    /// removed; a default `Host` rewrites the Host unless the service does.
    pub fn apply(&self, target: &mut crate::ir::WeightedCluster, service: (&str, &str, i32)) {
        let (namespace, name, port) = service;
        let value = |v: &str| {
            escape_header_value(
                &v.replace("%CONTOUR_NAMESPACE%", namespace)
                    .replace("%CONTOUR_SERVICE_NAME%", name)
                    .replace("%CONTOUR_SERVICE_PORT%", &port.to_string()),
            )
        };
        for (changes, headers, request) in [
            (&self.request, &mut target.request_headers, true),
            (&self.response, &mut target.response_headers, false),
        ] {
            for (header, v) in &changes.set {
                let header = header.to_ascii_lowercase();
                if header == "host" {
                    if request && target.host_rewrite.is_none() {
                        target.host_rewrite = Some(v.clone());
                    }
                    continue;
                }
                if !headers.remove.contains(&header) {
                    headers.set.entry(header).or_insert_with(|| value(v));
                }
            }
            for header in &changes.remove {
                let header = header.to_ascii_lowercase();
                if !headers.set.contains_key(&header) && !headers.remove.contains(&header) {
                    headers.remove.push(header);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.request.set.is_empty()
            && self.request.remove.is_empty()
            && self.response.set.is_empty()
            && self.response.remove.is_empty()
    }
}

#[cfg(test)]
mod tests;
