//! Contour's `ContourConfiguration` (`projectcontour.io/v1alpha1`, `serve
//! --contour-config-name`): its `spec` read as the same settings as `contour.yaml`, each
//! field put at the key of `contour.yaml` that means the same. A field with no such key
//! is an error naming it.

use serde_json::{Map, Value, json};

/// Reads ContourConfiguration `name` of `namespace` from the API: its `spec`, as
/// `contour.yaml` keys.
pub async fn fetch(client: kube::Client, namespace: &str, name: &str) -> anyhow::Result<Value> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("projectcontour.io", "v1alpha1", "ContourConfiguration");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "contourconfigurations");
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(client, namespace, &resource);
    let object = api
        .get(name)
        .await
        .map_err(|e| anyhow::anyhow!("ContourConfiguration {namespace}/{name}: {e}"))?;
    let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
    as_contour_yaml(&spec)
        .map_err(|e| anyhow::anyhow!("ContourConfiguration {namespace}/{name}: {e}"))
}

/// `spec` of a ContourConfiguration as a `contour.yaml` document.
pub fn as_contour_yaml(spec: &Value) -> Result<Value, String> {
    let mut out = Map::new();
    let Some(spec) = spec.as_object() else {
        return Ok(Value::Object(out));
    };
    for (key, value) in spec {
        let at = |path: &str| format!("spec.{key}{path}");
        match key.as_str() {
            "xdsServer" => each(value, &at(""), |k, v| match k {
                "address" | "port" => put(&mut out, &format!("xds-server.{k}"), v),
                "type" => Ok(()),
                "tls" => renamed(
                    &mut out,
                    v,
                    &at(".tls"),
                    &[
                        ("caFile", "xds-server.ca-file"),
                        ("certFile", "xds-server.cert-file"),
                        ("keyFile", "xds-server.key-file"),
                        ("insecure", "xds-server.insecure"),
                    ],
                ),
                _ => unknown(&at(""), k),
            })?,
            "ingress" => each(value, &at(""), |k, v| match k {
                "classNames" => put(&mut out, "plugins.ingress-class.names", v),
                "statusAddress" => put(&mut out, "ingress-status-address", v),
                _ => unknown(&at(""), k),
            })?,
            "debug" => endpoint(&mut out, value, &at(""), "debug-http")?,
            "health" => endpoint(&mut out, value, &at(""), "health")?,
            "metrics" => each(value, &at(""), |k, v| match k {
                "address" | "port" => put(&mut out, &format!("metrics.{k}"), v),
                "tls" => metrics_tls(&mut out, v, &at(".tls"), "metrics.contour"),
                _ => unknown(&at(""), k),
            })?,
            "envoy" => envoy(&mut out, value, &at(""))?,
            "gateway" => put(&mut out, "gateway", value)?,
            "httpproxy" => each(value, &at(""), |k, v| match k {
                "disablePermitInsecure" => put(&mut out, "disablePermitInsecure", v),
                "rootNamespaces" => put(&mut out, "plugins.root-namespaces.namespaces", v),
                "fallbackCertificate" => put(&mut out, "tls.fallback-certificate", v),
                _ => unknown(&at(""), k),
            })?,
            "enableExternalNameService" | "featureFlags" => put(&mut out, key, value)?,
            "policy" => each(value, &at(""), |k, v| match k {
                "requestHeaders" => put(&mut out, "policy.request-headers", v),
                "responseHeaders" => put(&mut out, "policy.response-headers", v),
                "applyToIngress" => put(&mut out, "policy.applyToIngress", v),
                _ => unknown(&at(""), k),
            })?,
            "rateLimitService" | "tracing" => {
                let mut section = value.clone();
                if let Some(fields) = section.as_object_mut()
                    && let Some(reference) = fields.remove("extensionService")
                {
                    fields.insert(
                        "extensionService".into(),
                        json!(namespaced(&reference, &at(".extensionService"))?),
                    );
                }
                put(&mut out, key, &section)?;
            }
            "globalExtAuth" => {
                let mut section = value.clone();
                if let Some(fields) = section.as_object_mut()
                    && let Some(reference) = fields.remove("extensionRef")
                {
                    fields.insert(
                        "extensionService".into(),
                        json!(namespaced(&reference, &at(".extensionRef"))?),
                    );
                }
                put(&mut out, key, &section)?;
            }
            other => unknown("spec", other)?,
        }
    }
    Ok(Value::Object(out))
}

fn envoy(out: &mut Map<String, Value>, value: &Value, at: &str) -> Result<(), String> {
    each(value, at, |k, v| {
        let at = format!("{at}.{k}");
        match k {
            "listener" => envoy_listener(out, v, &at),
            "service" => renamed(
                out,
                v,
                &at,
                &[
                    ("name", "envoy-service-name"),
                    ("namespace", "envoy-service-namespace"),
                ],
            ),
            "http" | "https" => each(v, &at, |key, value| match key {
                "address" | "port" => put(out, &format!("envoy.{k}.{key}"), value),
                "accessLog" => put(out, "envoy.access-log", value),
                _ => unknown(&at, key),
            }),
            "metrics" => each(v, &at, |key, value| match key {
                "address" | "port" => put(out, &format!("envoy.metrics.{key}"), value),
                "tls" => metrics_tls(out, value, &format!("{at}.tls"), "metrics.envoy"),
                _ => unknown(&at, key),
            }),
            "health" => endpoint(out, v, &at, "envoy.health"),
            "omEnforcedHealth" => endpoint(out, v, &at, "omEnforcedHealthListener"),
            "clientCertificate" => put(out, "tls.envoy-client-certificate", v),
            "runtimeSettings" => put(out, "runtime-settings", v),
            "logging" => renamed(
                out,
                v,
                &at,
                &[
                    ("accessLogFormat", "accesslog-format"),
                    ("accessLogFormatString", "accesslog-format-string"),
                    ("accessLogJSONFields", "json-fields"),
                    ("accessLogLevel", "accesslog-level"),
                ],
            ),
            "defaultHTTPVersions" => put(out, "default-http-versions", v),
            "timeouts" => renamed(
                out,
                v,
                &at,
                &[
                    ("requestTimeout", "timeouts.request-timeout"),
                    ("connectionIdleTimeout", "timeouts.connection-idle-timeout"),
                    ("streamIdleTimeout", "timeouts.stream-idle-timeout"),
                    ("maxConnectionDuration", "timeouts.max-connection-duration"),
                    ("delayedCloseTimeout", "timeouts.delayed-close-timeout"),
                    (
                        "connectionShutdownGracePeriod",
                        "timeouts.connection-shutdown-grace-period",
                    ),
                    ("connectTimeout", "timeouts.connect-timeout"),
                ],
            ),
            "network" => renamed(
                out,
                v,
                &at,
                &[
                    ("numTrustedHops", "network.num-trusted-hops"),
                    ("adminPort", "network.admin-port"),
                    ("stripTrailingHostDot", "network.strip-trailing-host-dot"),
                ],
            ),
            "cluster" => envoy_cluster(out, v, &at),
            _ => Err(format!(
                "{at}: not a field of ContourConfiguration Isobar reads"
            )),
        }
    })
}

/// `spec.envoy.listener`.
fn envoy_listener(out: &mut Map<String, Value>, v: &Value, at: &str) -> Result<(), String> {
    each(v, at, |k, v| match k {
        "useProxyProtocol" => put(out, "envoy.use-proxy-protocol", v),
        "disableAllowChunkedLength" | "disableMergeSlashes" => put(out, k, v),
        "serverHeaderTransformation" => {
            let mode = match v.as_str().unwrap_or_default() {
                "OverwriteServerHeader" => "overwrite",
                "AppendIfAbsentServerHeader" => "append_if_absent",
                "PassThroughServerHeader" => "pass_through",
                other => return Err(format!("{at}.{k}: {other:?} is not a known value")),
            };
            put(out, "serverHeaderTransformation", &json!(mode))
        }
        "tls" => renamed(
            out,
            v,
            &format!("{at}.tls"),
            &[
                ("minimumProtocolVersion", "tls.minimum-protocol-version"),
                ("maximumProtocolVersion", "tls.maximum-protocol-version"),
                ("cipherSuites", "tls.cipher-suites"),
                ("ecdhCurves", "tls.ecdh-curves"),
                ("fingerprint", "tls.fingerprint"),
            ],
        ),
        "compression" => renamed(
            out,
            v,
            &format!("{at}.compression"),
            &[("algorithm", "compression.algorithm")],
        ),
        "socketOptions" => renamed(
            out,
            v,
            &format!("{at}.socketOptions"),
            &[
                ("tos", "listener.socket-options.tos"),
                ("trafficClass", "listener.socket-options.traffic-class"),
            ],
        ),
        _ => match LISTENER.iter().find(|(from, _)| *from == k) {
            Some((_, to)) => put(out, to, v),
            None => unknown(at, k),
        },
    })
}

/// `spec.envoy.cluster`.
fn envoy_cluster(out: &mut Map<String, Value>, v: &Value, at: &str) -> Result<(), String> {
    each(v, at, |key, value| match key {
        "dnsLookupFamily" => put(out, "cluster.dns-lookup-family", value),
        "maxRequestsPerConnection" => put(out, "cluster.max-requests-per-connection", value),
        "per-connection-buffer-limit-bytes" => {
            put(out, "cluster.per-connection-buffer-limit-bytes", value)
        }
        "circuitBreakers" => renamed(
            out,
            value,
            &format!("{at}.circuitBreakers"),
            &[
                ("maxConnections", "cluster.circuit-breakers.max-connections"),
                (
                    "maxPendingRequests",
                    "cluster.circuit-breakers.max-pending-requests",
                ),
                ("maxRequests", "cluster.circuit-breakers.max-requests"),
                ("maxRetries", "cluster.circuit-breakers.max-retries"),
                (
                    "perHostMaxConnections",
                    "cluster.circuit-breakers.per-host-max-connections",
                ),
            ],
        ),
        "upstreamTLS" => renamed(
            out,
            value,
            &format!("{at}.upstreamTLS"),
            &[
                (
                    "minimumProtocolVersion",
                    "cluster.upstream-tls.minimum-protocol-version",
                ),
                (
                    "maximumProtocolVersion",
                    "cluster.upstream-tls.maximum-protocol-version",
                ),
                ("cipherSuites", "cluster.upstream-tls.cipher-suites"),
                ("ecdhCurves", "cluster.upstream-tls.ecdh-curves"),
            ],
        ),
        _ => unknown(at, key),
    })
}

/// `spec.envoy.listener` fields and their `contour.yaml` keys.
const LISTENER: &[(&str, &str)] = &[
    ("connectionBalancer", "listener.connection-balancer"),
    (
        "maxRequestsPerConnection",
        "listener.max-requests-per-connection",
    ),
    (
        "per-connection-buffer-limit-bytes",
        "listener.per-connection-buffer-limit-bytes",
    ),
    (
        "maxRequestsPerIOCycle",
        "listener.max-requests-per-io-cycle",
    ),
    (
        "httpMaxConcurrentStreams",
        "listener.http2-max-concurrent-streams",
    ),
    (
        "maxConnectionsPerListener",
        "listener.max-connections-per-listener",
    ),
    (
        "maxConnectionsToAcceptPerSocketEvent",
        "listener.max-connections-to-accept-per-socket-event",
    ),
];

/// A metrics server's `tls` (`caFile`, `certFile`, `keyFile`) at `to` (`metrics.contour`
/// or `metrics.envoy`).
fn metrics_tls(
    out: &mut Map<String, Value>,
    value: &Value,
    at: &str,
    to: &str,
) -> Result<(), String> {
    each(value, at, |k, v| {
        let key = match k {
            "caFile" => "ca-certificate-path",
            "certFile" => "server-certificate-path",
            "keyFile" => "server-key-path",
            _ => return unknown(at, k),
        };
        put(out, &format!("{to}.{key}"), v)
    })
}

/// A `{namespace, name}` reference as `contour.yaml` writes it: `namespace/name`.
fn namespaced(value: &Value, at: &str) -> Result<String, String> {
    let part = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
    let (namespace, name) = (part("namespace"), part("name"));
    if name.is_empty() {
        return Err(format!("{at}: needs a name"));
    }
    Ok(format!("{namespace}/{name}"))
}

/// Each field of `value` at the `contour.yaml` key `table` gives it.
fn renamed(
    out: &mut Map<String, Value>,
    value: &Value,
    at: &str,
    table: &[(&str, &str)],
) -> Result<(), String> {
    each(value, at, |k, v| {
        match table.iter().find(|(from, _)| *from == k) {
            Some((_, to)) => put(out, to, v),
            None => unknown(at, k),
        }
    })
}

/// `{address, port}` at `to`.
fn endpoint(out: &mut Map<String, Value>, value: &Value, at: &str, to: &str) -> Result<(), String> {
    each(value, at, |k, v| match k {
        "address" | "port" => put(out, &format!("{to}.{k}"), v),
        _ => unknown(at, k),
    })
}

fn each(
    value: &Value,
    at: &str,
    mut f: impl FnMut(&str, &Value) -> Result<(), String>,
) -> Result<(), String> {
    let Some(map) = value.as_object() else {
        return Err(format!("{at}: expected an object"));
    };
    map.iter().try_for_each(|(k, v)| f(k, v))
}

fn unknown(at: &str, key: &str) -> Result<(), String> {
    Err(format!(
        "{at}.{key}: not a field of ContourConfiguration Isobar reads"
    ))
}

/// Puts `value` at the dotted `path` (merging objects already there).
fn put(out: &mut Map<String, Value>, path: &str, value: &Value) -> Result<(), String> {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap_or_default();
    let mut node = out;
    for part in parts {
        let next = node.entry(part.to_string()).or_insert_with(|| json!({}));
        node = next
            .as_object_mut()
            .ok_or_else(|| format!("{path}: set twice"))?;
    }
    node.insert(last.to_string(), value.clone());
    Ok(())
}

#[cfg(test)]
mod tests;
