//! The suite's GRPCRoute tests: method and header matches, listener hostnames, named
//! rules and weights, with gRPC calls through Envoy to the gRPC echo pods.

use std::net::SocketAddr;

use tonic::Code;

use crate::conformance::grpc::{self, Call, SERVICE, call};
use crate::conformance::suite::{INFRA, Suite};

/// A GRPCRoute of the infra namespace with these parentRefs and rules (YAML flow lists).
fn grpc_route(name: &str, parents: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: {parents}\n  rules: {rules}\n"
    )
}

fn backend(version: &str) -> String {
    format!("{{name: grpc-infra-backend-{version}, port: 8080}}")
}

fn method(name: &str) -> String {
    format!("{{method: {{service: {SERVICE}, method: {name}}}}}")
}

async fn expect(suite: &Suite, addr: SocketAddr, calls: &[Call]) {
    for call in calls {
        if let Err(e) = grpc::eventually(addr, call).await {
            panic!("{e}\n{}", suite.logs());
        }
    }
}

/// GRPCExactMethodMatching: a method match sends each method to its backend; a method
/// no rule names is Unimplemented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_exact_method_matching() {
    let suite = Suite::start().await;
    suite.apply(&grpc_route(
        "exact-matching",
        "[{name: same-namespace}]",
        &format!(
            "[{{matches: [{}], backendRefs: [{}]}}, {{matches: [{}], backendRefs: [{}]}}]",
            method("Echo"),
            backend("v1"),
            method("EchoTwo"),
            backend("v2")
        ),
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "GRPCRoute",
            &[(INFRA, "exact-matching")],
        )
        .await;
    expect(
        &suite,
        addr,
        &[
            call("Echo").backend("grpc-infra-backend-v1"),
            call("EchoTwo").backend("grpc-infra-backend-v2"),
            call("EchoThree").code(Code::Unimplemented),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// GRPCRouteHeaderMatching: header matches, the rule with more header matches first,
/// ties to the earlier rule, ORed matches; unmatched calls are Unimplemented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_header_matching() {
    let suite = Suite::start().await;
    let headers = |pairs: &[(&str, &str)]| {
        let list: Vec<String> = pairs
            .iter()
            .map(|(n, v)| format!("{{name: {n}, value: {v}}}"))
            .collect();
        format!("{{headers: [{}]}}", list.join(", "))
    };
    let rules = format!(
        "[{{matches: [{}], backendRefs: [{v1}]}}, {{matches: [{}], backendRefs: [{v2}]}}, {{matches: [{}], backendRefs: [{v1}]}}, {{matches: [{}, {}], backendRefs: [{v1}]}}, {{matches: [{}, {}], backendRefs: [{v2}]}}]",
        headers(&[("version", "one")]),
        headers(&[("version", "two")]),
        headers(&[("version", "two"), ("color", "orange")]),
        headers(&[("color", "blue")]),
        headers(&[("color", "green")]),
        headers(&[("color", "red")]),
        headers(&[("color", "yellow")]),
        v1 = backend("v1"),
        v2 = backend("v2"),
    );
    suite.apply(&grpc_route(
        "grpc-header-matching",
        "[{name: same-namespace}]",
        &rules,
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "GRPCRoute",
            &[(INFRA, "grpc-header-matching")],
        )
        .await;
    let v1 = "grpc-infra-backend-v1";
    let v2 = "grpc-infra-backend-v2";
    let echo = |pairs: &[(&str, &str)]| call("Echo").metadata(pairs);
    expect(
        &suite,
        addr,
        &[
            echo(&[("Version", "one")]).backend(v1),
            echo(&[("Version", "two")]).backend(v2),
            echo(&[("Version", "two"), ("Color", "orange")]).backend(v1),
            echo(&[("Version", "two"), ("Color", "blue")]).backend(v2),
            echo(&[("Color", "orange")]).code(Code::Unimplemented),
            echo(&[("Some-Other-Header", "one")]).code(Code::Unimplemented),
            echo(&[("Color", "blue")]).backend(v1),
            echo(&[("Color", "green")]).backend(v1),
            echo(&[("Color", "red")]).backend(v2),
            echo(&[("Color", "yellow")]).backend(v2),
            echo(&[("Color", "purple")]).code(Code::Unimplemented),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// GRPCRouteListenerHostnameMatching: routes bound to listeners by section name answer
/// only the listeners' hostnames; an exact listener hostname beats a wildcard one, a
/// wildcard matches several labels but not the bare domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_listener_hostname_matching() {
    let suite = Suite::start().await;
    let gw = "grpcroute-listener-hostname-matching";
    let listener = |name: &str, host: &str| {
        format!(
            "    - {{name: {name}, port: 80, protocol: HTTP, hostname: '{host}', allowedRoutes: {{namespaces: {{from: Same}}}}}}\n"
        )
    };
    suite.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gw}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n  listeners:\n{}{}{}{}",
        listener("listener-1", "bar.com"),
        listener("listener-2", "foo.bar.com"),
        listener("listener-3", "*.bar.com"),
        listener("listener-4", "*.foo.com"),
    ));
    let parent = |section: &str| {
        format!("{{name: {gw}, namespace: gateway-conformance-infra, sectionName: {section}}}")
    };
    for (route, parents, version) in [
        ("backend-v1", format!("[{}]", parent("listener-1")), "v1"),
        ("backend-v2", format!("[{}]", parent("listener-2")), "v2"),
        (
            "backend-v3",
            format!("[{}, {}]", parent("listener-3"), parent("listener-4")),
            "v3",
        ),
    ] {
        suite.apply(&grpc_route(
            route,
            &parents,
            &format!("[{{backendRefs: [{}]}}]", backend(version)),
        ));
    }
    let mut addr = None;
    for route in ["backend-v1", "backend-v2", "backend-v3"] {
        addr = Some(
            suite
                .routes_accepted((INFRA, gw), "GRPCRoute", &[(INFRA, route)])
                .await,
        );
    }
    let addr = addr.unwrap_or_else(|| unreachable!());
    let echo = |authority: &str| call("Echo").authority(authority);
    expect(
        &suite,
        addr,
        &[
            echo("bar.com").backend("grpc-infra-backend-v1"),
            echo("foo.bar.com").backend("grpc-infra-backend-v2"),
            echo("baz.bar.com").backend("grpc-infra-backend-v3"),
            echo("boo.bar.com").backend("grpc-infra-backend-v3"),
            echo("multiple.prefixes.bar.com").backend("grpc-infra-backend-v3"),
            echo("multiple.prefixes.foo.com").backend("grpc-infra-backend-v3"),
            echo("foo.com").code(Code::Unimplemented),
            echo("no.matching.host").code(Code::Unimplemented),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// GRPCRouteNamedRule: a named rule routes as an unnamed one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_named_rule() {
    let suite = Suite::start().await;
    suite.apply(&grpc_route(
        "grpc-named-rules",
        "[{name: same-namespace}]",
        &format!(
            "[{{name: named-rule, matches: [{}], backendRefs: [{}]}}, {{matches: [{}], backendRefs: [{}]}}]",
            method("Echo"),
            backend("v1"),
            method("EchoTwo"),
            backend("v2")
        ),
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "GRPCRoute",
            &[(INFRA, "grpc-named-rules")],
        )
        .await;
    expect(
        &suite,
        addr,
        &[
            call("Echo").backend("grpc-infra-backend-v1"),
            call("EchoTwo").backend("grpc-infra-backend-v2"),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// GRPCRouteWeight: 500 calls split 70/30/0 between three backends, each share within
/// 0.05 of its weight and none to the backend of weight 0 (ten attempts, as the suite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_route_weight() {
    let suite = Suite::start().await;
    suite.apply(&grpc_route(
        "weighted-backends",
        "[{name: same-namespace}]",
        "[{backendRefs: [{name: grpc-infra-backend-v1, port: 8080, weight: 70}, {name: grpc-infra-backend-v2, port: 8080, weight: 30}, {name: grpc-infra-backend-v3, port: 8080, weight: 0}]}]",
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, "same-namespace"),
            "GRPCRoute",
            &[(INFRA, "weighted-backends")],
        )
        .await;
    expect(&suite, addr, &[call("Echo")]).await;
    let weights = [
        ("grpc-infra-backend-v1", 0.7),
        ("grpc-infra-backend-v2", 0.3),
        ("grpc-infra-backend-v3", 0.0),
    ];
    let echo = call("Echo");
    suite
        .weights_hold(&weights, || grpc::distribution(addr, &echo, 500))
        .await;
    suite.assert_nothing_rejected().await;
}
