use super::*;

#[test]
fn a_spec_reads_as_contour_yaml() {
    let spec = json!({
        "xdsServer": {"address": "0.0.0.0", "port": 8001, "tls": {"insecure": true}},
        "ingress": {"classNames": ["contour"]},
        "envoy": {
            "http": {"port": 9080},
            "listener": {"serverHeaderTransformation": "PassThroughServerHeader", "useProxyProtocol": true},
            "logging": {"accessLogFormat": "json"},
            "timeouts": {"connectionIdleTimeout": "90s"},
            "network": {"numTrustedHops": 1}
        },
        "httpproxy": {"disablePermitInsecure": true},
    });
    let out = as_contour_yaml(&spec).unwrap_or_default();
    assert_eq!(out["xds-server"]["insecure"], true);
    assert_eq!(out["plugins"]["ingress-class"]["names"], json!(["contour"]));
    assert_eq!(out["envoy"]["http"]["port"], 9080);
    assert_eq!(out["envoy"]["use-proxy-protocol"], true);
    assert_eq!(out["serverHeaderTransformation"], "pass_through");
    assert_eq!(out["accesslog-format"], "json");
    assert_eq!(out["timeouts"]["connection-idle-timeout"], "90s");
    assert_eq!(out["network"]["num-trusted-hops"], 1);
    assert_eq!(out["disablePermitInsecure"], true);
    // Every section Contour's CRD has reads as keys the configuration takes.
    let spec = json!({
        "envoy": {
            "listener": {
                "connectionBalancer": "exact",
                "maxRequestsPerConnection": 10,
                "per-connection-buffer-limit-bytes": 65536,
                "socketOptions": {"tos": 64, "trafficClass": 64},
                "maxRequestsPerIOCycle": 5,
                "httpMaxConcurrentStreams": 100,
                "maxConnectionsPerListener": 1000,
                "compression": {"algorithm": "brotli"}
            },
            "cluster": {
                "dnsLookupFamily": "v4",
                "maxRequestsPerConnection": 1,
                "circuitBreakers": {"maxConnections": 10, "perHostMaxConnections": 2},
                "upstreamTLS": {"minimumProtocolVersion": "1.3"}
            },
            "metrics": {"address": "0.0.0.0", "port": 8004, "tls": {"certFile": "/c", "keyFile": "/k"}},
            "health": {"address": "0.0.0.0", "port": 8002},
            "omEnforcedHealth": {"address": "0.0.0.0", "port": 8003}
        },
        "metrics": {"tls": {"certFile": "/c", "keyFile": "/k", "caFile": "/ca"}},
        "policy": {"requestHeaders": {"set": {"x-a": "b"}}, "applyToIngress": true},
        "rateLimitService": {"extensionService": {"namespace": "rl", "name": "svc"}, "domain": "d"},
        "tracing": {"extensionService": {"namespace": "t", "name": "otel"}},
        "globalExtAuth": {"extensionRef": {"namespace": "a", "name": "authz"}, "failOpen": true},
    });
    let out = as_contour_yaml(&spec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out["listener"]["http2-max-concurrent-streams"], 100);
    assert_eq!(
        out["cluster"]["circuit-breakers"]["per-host-max-connections"],
        2
    );
    assert_eq!(out["rateLimitService"]["extensionService"], "rl/svc");
    assert_eq!(out["globalExtAuth"]["extensionService"], "a/authz");
    let config =
        crate::config::load_with(None, Some(out), json!({})).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.listener.socket_options.tos, 64);
    assert_eq!(config.cluster.upstream_tls.minimum_protocol_version, "1.3");
    assert!(config.policy.apply_to_ingress);
    assert_eq!(
        config.om_enforced_health_listener.map(|h| h.port),
        Some(8003)
    );
    let bad = as_contour_yaml(&json!({"envoy": {"nonsense": 1}}));
    assert_eq!(
        bad,
        Err("spec.envoy.nonsense: not a field of ContourConfiguration Isobar reads".to_string())
    );
}
