use super::*;

/// Method matches become the paths gRPC requests have; names the CRD refuses are
/// refused.
#[test]
fn grpc_method_matches_are_path_matches() {
    let spec: GrpcRouteSpec = serde_json::from_value(json!({
        "rules": [{"matches": [
            {"method": {"service": "pkg.Echo", "method": "Say"}},
            {"method": {"service": "pkg.Echo"}},
            {"method": {"method": "Say"}},
        ]}]
    }))
    .unwrap_or_default();
    let http = as_http(&spec).unwrap_or_default();
    let paths: Vec<Value> = http.rules.unwrap_or_default()[0]
        .matches
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|m| serde_json::to_value(&m.path).unwrap_or_default())
        .collect();
    assert_eq!(
        paths,
        vec![
            json!({"type": "Exact", "value": "/pkg.Echo/Say"}),
            json!({"type": "PathPrefix", "value": "/pkg.Echo"}),
            json!({"type": "RegularExpression", "value": "/[^/]+/Say"}),
        ]
    );
    let bad: GrpcRouteSpec = serde_json::from_value(json!({
        "rules": [{"matches": [{"method": {"service": "pkg/../x", "method": "Say"}}]}]
    }))
    .unwrap_or_default();
    assert!(as_http(&bad).is_err());
}
