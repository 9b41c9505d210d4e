//! GRPCRoutes, served as the HTTPRoutes they amount to: a method match is a path match
//! (`/service/method`), filters, backends and `sessionPersistence` (experimental) are
//! spelt the same, and the backends speak HTTP/2 in clear text (h2c).

use gateway_api::apis::experimental::grpcroutes::{
    GrpcRouteRulesMatches, GrpcRouteRulesMatchesMethodType, GrpcRouteSpec,
};
use gateway_api::apis::experimental::httproutes::HttpRouteSpec;
use serde_json::{Value, json};

/// A gRPC service name as the CRD allows it (`package.Service`).
fn service_name(s: &str) -> bool {
    let s = s.strip_prefix('.').unwrap_or(s);
    !s.is_empty()
        && s.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// A gRPC method name as the CRD allows it.
fn method_name(m: &str) -> bool {
    m.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The HTTPRoute match of a GRPCRoute match.
fn http_match(m: &GrpcRouteRulesMatches) -> Result<Value, String> {
    let mut out = json!({});
    if let Some(method) = &m.method {
        let (service, name) = (method.service.as_deref(), method.method.as_deref());
        let path = match method.r#type {
            Some(GrpcRouteRulesMatchesMethodType::RegularExpression) => json!({
                "type": "RegularExpression",
                "value": format!("/{}/{}", service.unwrap_or("[^/]+"), name.unwrap_or("[^/]+")),
            }),
            _ => {
                if let Some(s) = service.filter(|s| !service_name(s)) {
                    return Err(format!("method.service {s:?} is not a gRPC service name"));
                }
                if let Some(m) = name.filter(|m| !method_name(m)) {
                    return Err(format!("method.method {m:?} is not a gRPC method name"));
                }
                match (service, name) {
                    (Some(s), Some(m)) => json!({"type": "Exact", "value": format!("/{s}/{m}")}),
                    (Some(s), None) => json!({"type": "PathPrefix", "value": format!("/{s}")}),
                    (None, Some(m)) => json!({
                        "type": "RegularExpression",
                        "value": format!("/[^/]+/{m}"),
                    }),
                    (None, None) => {
                        return Err("method needs a service or a method".to_string());
                    }
                }
            }
        };
        out["path"] = path;
    }
    if let Some(headers) = &m.headers {
        out["headers"] = serde_json::to_value(headers).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The HTTPRoute a GRPCRoute amounts to; `Err` when a match is not one the GRPCRoute
/// CRD would accept (an API server refuses it; from a manifest it is unreadable).
pub fn as_http(spec: &GrpcRouteSpec) -> Result<HttpRouteSpec, String> {
    let mut rules = Vec::new();
    for rule in spec.rules.iter().flatten() {
        let matches = rule
            .matches
            .iter()
            .flatten()
            .map(http_match)
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = json!({});
        if !matches.is_empty() {
            out["matches"] = Value::Array(matches);
        }
        if let Some(filters) = &rule.filters {
            out["filters"] = serde_json::to_value(filters).map_err(|e| e.to_string())?;
        }
        if let Some(backends) = &rule.backend_refs {
            out["backendRefs"] = serde_json::to_value(backends).map_err(|e| e.to_string())?;
        }
        if let Some(session) = &rule.session_persistence {
            out["sessionPersistence"] = serde_json::to_value(session).map_err(|e| e.to_string())?;
        }
        rules.push(out);
    }
    let value = json!({
        "hostnames": spec.hostnames,
        "parentRefs": spec.parent_refs,
        "useDefaultGateways": spec.use_default_gateways,
        "rules": rules,
    });
    serde_json::from_value(value).map_err(|e| format!("not an HTTPRoute: {e}"))
}

#[cfg(test)]
mod tests;
