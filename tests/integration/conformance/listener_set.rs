//! The suite's ListenerSet tests: which ListenerSets a Gateway allows, their listeners'
//! conflicts with the Gateway's and each other's, routes attached through them (and not
//! through the Gateway), references granted to them, and their status.

use std::net::SocketAddr;

use serde_json::Value;

use crate::conformance::client::get;
use crate::conformance::suite::{GW, INFRA, Listener, Suite, fresh, has, parent_of};

/// A Gateway of the infra namespace: `allowedListeners` (`from`, or "" for none written)
/// and listeners (YAML list items).
fn gateway(name: &str, allowed: &str, listeners: &str) -> String {
    let allowed = if allowed.is_empty() {
        String::new()
    } else {
        format!("  allowedListeners: {{namespaces: {allowed}}}\n")
    };
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: gateway-conformance\n{allowed}  listeners:\n{listeners}---\n"
    )
}

/// An HTTP listener on port 80 (YAML list item) for routes from `from`.
fn http(name: &str, hostname: &str, from: &str) -> String {
    format!(
        "    - {{name: {name}, port: 80, protocol: HTTP, hostname: {hostname}, allowedRoutes: {{namespaces: {{from: {from}}}}}}}\n"
    )
}

/// A ListenerSet `ns/name` of Gateway `gw` (of the infra namespace).
fn listener_set(ns: &str, name: &str, gw: &str, listeners: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRef: {{group: gateway.networking.k8s.io, kind: Gateway, name: {gw}, namespace: gateway-conformance-infra}}\n  listeners:\n{listeners}---\n"
    )
}

fn namespace(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n---\n"
    )
}

/// An HTTPRoute `ns/name` with these parentRefs (YAML flow list), one PathPrefix rule to
/// the infra backend `backend`.
fn route(ns: &str, name: &str, parents: &str, path: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: {parents}\n  rules: [{{matches: [{{path: {{type: PathPrefix, value: {path}}}}}], backendRefs: [{{name: {backend}, namespace: gateway-conformance-infra, port: 8080}}]}}]\n---\n"
    )
}

fn ls_parent(ns: &str, name: &str, section: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!(
        "{{group: gateway.networking.k8s.io, kind: ListenerSet, name: {name}, namespace: {ns}{section}}}"
    )
}

fn gw_parent(name: &str, section: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!("{{name: {name}, namespace: gateway-conformance-infra{section}}}")
}

const READY: &[(&str, &str, &str)] = &[
    ("ResolvedRefs", "True", ""),
    ("Accepted", "True", ""),
    ("Programmed", "True", ""),
];

fn conflicted(reason: &'static str) -> [(&'static str, &'static str, &'static str); 3] {
    [
        ("Accepted", "False", reason),
        ("Programmed", "False", reason),
        ("Conflicted", "True", reason),
    ]
}

/// The suite's `ListenerSetMustHaveCondition`.
async fn ls_condition(
    suite: &Suite,
    (ns, name): (&str, &str),
    (type_, status, reason): (&str, &str, &str),
) {
    suite
        .wait_for(
            (GW, "ListenerSet", ns, name),
            &format!("{type_}={status} ({reason})"),
            |l| fresh(l) && has(&l["status"]["conditions"], type_, status, reason),
        )
        .await;
}

/// Both of a ListenerSet's conditions, with one reason.
async fn ls_conditions(
    suite: &Suite,
    ls: (&str, &str),
    status: &str,
    accepted: &str,
    programmed: &str,
) {
    ls_condition(suite, ls, ("Accepted", status, accepted)).await;
    ls_condition(suite, ls, ("Programmed", status, programmed)).await;
}

fn listener_has(object: &Value, listener: &str, conditions: &[(&str, &str, &str)]) -> bool {
    object["status"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["name"] == listener)
        .is_some_and(|l| {
            conditions
                .iter()
                .all(|(t, s, r)| has(&l["conditions"], t, s, r))
        })
}

/// The suite's `ListenerSetListenersMustHaveConditions` for one listener.
async fn ls_listener(
    suite: &Suite,
    (ns, name): (&str, &str),
    listener: &str,
    conditions: &[(&str, &str, &str)],
) {
    suite
        .wait_for(
            (GW, "ListenerSet", ns, name),
            &format!("listener {listener}: {conditions:?}"),
            |l| fresh(l) && listener_has(l, listener, conditions),
        )
        .await;
}

/// The suite's `ListenerSetStatusMustHaveListeners`: exactly these listeners, each with
/// HTTPRoute among its kinds, this many routes and ready.
async fn ls_listeners_exactly(suite: &Suite, (ns, name): (&str, &str), expected: &[(&str, u32)]) {
    let expected: Vec<Listener<'_>> = expected
        .iter()
        .map(|(listener, attached)| Listener {
            name: listener,
            kinds: &["HTTPRoute"],
            attached: *attached,
            conditions: READY,
        })
        .collect();
    suite
        .listeners_exactly_of("ListenerSet", (ns, name), &expected)
        .await;
}

/// The suite's `GatewayMustHaveAttachedListeners` (ListenerSets, in fact).
async fn attached_sets(suite: &Suite, gw: &str, n: u64) {
    suite
        .wait_for(
            (GW, "Gateway", INFRA, gw),
            &format!("{n} attached ListenerSets"),
            |g| fresh(g) && g["status"]["attachedListenerSets"].as_u64().unwrap_or(0) == n,
        )
        .await;
}

async fn gateway_accepted(suite: &Suite, gw: &str) {
    suite
        .gateway_condition((INFRA, gw), ("Accepted", "True", ""))
        .await;
}

/// The suite's `RoutesAndParentMustBeAccepted` for a ListenerSet parent: each route has
/// an `Accepted` parent entry of kind ListenerSet naming it, and every listener of the
/// ListenerSet is ready.
async fn ls_routes_accepted(suite: &Suite, (ns, name): (&str, &str), routes: &[(&str, &str)]) {
    for (route_ns, route) in routes {
        suite
            .wait_for(
                (GW, "HTTPRoute", route_ns, route),
                &format!("Accepted by ListenerSet {ns}/{name}"),
                |r| {
                    parent_of(r, ns, name, "ListenerSet")
                        .is_some_and(|p| has(&p["conditions"], "Accepted", "True", "Accepted"))
                },
            )
            .await;
    }
    suite
        .wait_for((GW, "ListenerSet", ns, name), "every listener ready", |l| {
            l["status"]["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|x| READY.iter().all(|(t, s, r)| has(&x["conditions"], t, s, r)))
        })
        .await;
}

/// Requests to `addr` with these hosts and paths: to a backend (200) or 404 ("").
async fn matrix(suite: &Suite, addr: SocketAddr, cases: &[(&str, &str, &str)]) {
    for (host, path, backend) in cases {
        let expect = if backend.is_empty() {
            get(path).host(host).status(404)
        } else {
            get(path).host(host).backend(backend).namespace(INFRA)
        };
        suite.expect(addr, &expect).await;
    }
}

/// ListenerSetAllowedNamespaceNone: a Gateway allowing no ListenerSets leaves one
/// `NotAllowed` and counts none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_namespace_none() {
    let suite = Suite::start().await;
    let gw = "gateway-does-not-allow-listenerset";
    suite.apply(&format!(
        "{}{}",
        gateway(
            gw,
            "{from: None}",
            &http("gateway-listener", "gateway-listener.com", "All")
        ),
        listener_set(
            INFRA,
            "listenerset-not-allowed",
            gw,
            &http("listener-set-listener", "listener-set-listener.com", "All")
        ),
    ));
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 0).await;
    ls_conditions(
        &suite,
        (INFRA, "listenerset-not-allowed"),
        "False",
        "NotAllowed",
        "NotAllowed",
    )
    .await;
}

/// ListenerSetAllowedNamespaceSame: `Same` allows the Gateway's namespace only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_namespace_same() {
    let suite = Suite::start().await;
    let gw = "gateway-allows-listenerset-in-same-namespace";
    let other = "gateway-api-listenerset-not-allowed-ns";
    suite.apply(&format!(
        "{}{}{}{}",
        gateway(
            gw,
            "{from: Same}",
            &http("gateway-listener", "gateway-listener.com", "All")
        ),
        listener_set(
            INFRA,
            "listenerset-in-same-namespace",
            gw,
            &http(
                "listenerset-in-same-namespace-listener",
                "listenerset-in-same-namespace-listener.com",
                "All"
            )
        ),
        namespace(other, ""),
        listener_set(
            other,
            "listenerset-in-different-namespace",
            gw,
            &http(
                "listenerset-in-different-namespace-listener",
                "listenerset-in-different-namespace-listener",
                "All"
            )
        ),
    ));
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 1).await;
    let same = (INFRA, "listenerset-in-same-namespace");
    ls_conditions(&suite, same, "True", "Accepted", "Programmed").await;
    ls_listener(
        &suite,
        same,
        "listenerset-in-same-namespace-listener",
        READY,
    )
    .await;
    ls_conditions(
        &suite,
        (other, "listenerset-in-different-namespace"),
        "False",
        "NotAllowed",
        "NotAllowed",
    )
    .await;
}

/// ListenerSetAllowedNamespaceSelector: `Selector` allows the namespaces it selects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_namespace_selector() {
    let suite = Suite::start().await;
    let gw = "gateway-allows-listenerset-in-selected-namespace";
    let allowed = "gateway-api-listenerset-selector-allowed-ns";
    let not_allowed = "gateway-api-listenerset-selector-not-allowed-ns";
    suite.apply(&format!(
        "{}{}{}{}{}",
        gateway(
            gw,
            "{from: Selector, selector: {matchLabels: {allowed: ns}}}",
            &http("gateway-listener", "gateway-listener.com", "All")
        ),
        namespace(allowed, "allowed: ns"),
        listener_set(
            allowed,
            "listenerset-in-selected-namespace",
            gw,
            &http(
                "listenerset-in-selected-namespace-listener",
                "listenerset-in-selected-namespace-listener.com",
                "All"
            )
        ),
        namespace(not_allowed, ""),
        listener_set(
            not_allowed,
            "listenerset-not-in-selected-namespace",
            gw,
            &http(
                "listenerset-not-in-selected-namespace-listener",
                "listenerset-not-in-selected-namespace-listener.com",
                "All"
            )
        ),
    ));
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 1).await;
    let selected = (allowed, "listenerset-in-selected-namespace");
    ls_conditions(&suite, selected, "True", "Accepted", "Programmed").await;
    ls_listener(
        &suite,
        selected,
        "listenerset-in-selected-namespace-listener",
        READY,
    )
    .await;
    ls_conditions(
        &suite,
        (not_allowed, "listenerset-not-in-selected-namespace"),
        "False",
        "NotAllowed",
        "NotAllowed",
    )
    .await;
}

/// ListenerSetAllowedRoutesNamespaces: a ListenerSet listener's `allowedRoutes` judged
/// from the ListenerSet's namespace (All, Same, Selector), its routes' counts and
/// traffic by hostname.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_routes_namespaces() {
    let suite = Suite::start().await;
    let gw = "gateway-with-listener-sets-test-allowed-routes";
    let ls = "listenerset-test-allowed-routes-namespaces";
    let allowed_ns = "gateway-api-routes-allowed-ns";
    let not_allowed_ns = "gateway-api-routes-not-allowed-ns";
    let cross_ns = "gateway-api-ls-cross-ns";
    let cross = "listenerset-test-allowed-routes-cross-ns";
    let all = "listener-set-listener-allowed-routes-all";
    let same = "listener-set-listener-allowed-routes-same";
    let selector = "listener-set-listener-allowed-routes-selector";
    let cross_listener = "listener-set-listener-allowed-routes-cross-ns-same";
    let listeners = format!(
        "{}{}    - {{name: {selector}, port: 80, protocol: HTTP, hostname: {selector}.com, allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{allowed: ns}}}}}}}}}}\n",
        http(all, &format!("{all}.com"), "All"),
        http(same, &format!("{same}.com"), "Same"),
    );
    let to_ls = format!("[{}]", ls_parent(INFRA, ls, None));
    let to_cross = format!("[{}]", ls_parent(cross_ns, cross, None));
    let grant = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: listenerset-test-allowed-routes-namespaces-reference-grant, namespace: gateway-conformance-infra}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {allowed_ns}}}, {{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {not_allowed_ns}}}, {{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {cross_ns}}}]\n  to: [{{group: '', kind: Service}}]\n"
    );
    suite.apply(&format!(
        "{}{}{}{}{}{}{}{}{}{}{}{}",
        gateway(
            gw,
            "{from: All}",
            &http("gateway-listener", "gateway-listener.com", "All")
        ),
        listener_set(INFRA, ls, gw, &listeners),
        namespace(allowed_ns, "allowed: ns"),
        namespace(not_allowed_ns, ""),
        namespace(cross_ns, ""),
        listener_set(
            cross_ns,
            cross,
            gw,
            &http(cross_listener, &format!("{cross_listener}.com"), "Same")
        ),
        route(
            INFRA,
            "route-in-same-namespace",
            &to_ls,
            "/route-in-same-namespace",
            "infra-backend-v1"
        ),
        route(
            allowed_ns,
            "route-in-selected-namespace",
            &to_ls,
            "/route-in-selected-namespace",
            "infra-backend-v2"
        ),
        route(
            not_allowed_ns,
            "route-not-in-selected-namespace",
            &to_ls,
            "/route-not-in-selected-namespace",
            "infra-backend-v3"
        ),
        route(
            cross_ns,
            "route-in-listenerset-namespace",
            &to_cross,
            "/route-in-listenerset-namespace",
            "infra-backend-v1"
        ),
        route(
            INFRA,
            "route-in-gateway-namespace",
            &to_cross,
            "/route-in-gateway-namespace",
            "infra-backend-v2"
        ),
        grant,
    ));
    let addr = suite
        .gateway_address(INFRA, gw, Some("gateway-listener"))
        .await;
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 2).await;

    ls_routes_accepted(
        &suite,
        (INFRA, ls),
        &[
            (INFRA, "route-in-same-namespace"),
            (allowed_ns, "route-in-selected-namespace"),
            (not_allowed_ns, "route-not-in-selected-namespace"),
        ],
    )
    .await;
    ls_listeners_exactly(&suite, (INFRA, ls), &[(all, 3), (same, 1), (selector, 1)]).await;
    let host = |l: &str| format!("{l}.com");
    let (h_all, h_same, h_selector) = (host(all), host(same), host(selector));
    let (h_all, h_same, h_selector) = (h_all.as_str(), h_same.as_str(), h_selector.as_str());
    matrix(
        &suite,
        addr,
        &[
            (h_all, "/route-in-same-namespace", "infra-backend-v1"),
            (h_all, "/route-in-selected-namespace", "infra-backend-v2"),
            (
                h_all,
                "/route-not-in-selected-namespace",
                "infra-backend-v3",
            ),
            (h_same, "/route-in-same-namespace", "infra-backend-v1"),
            (h_same, "/route-in-selected-namespace", ""),
            (h_same, "/route-not-in-selected-namespace", ""),
            (h_selector, "/route-in-same-namespace", ""),
            (
                h_selector,
                "/route-in-selected-namespace",
                "infra-backend-v2",
            ),
            (h_selector, "/route-not-in-selected-namespace", ""),
        ],
    )
    .await;

    ls_routes_accepted(
        &suite,
        (cross_ns, cross),
        &[(cross_ns, "route-in-listenerset-namespace")],
    )
    .await;
    suite
        .route_condition(
            ("HTTPRoute", INFRA, "route-in-gateway-namespace"),
            (cross_ns, cross),
            ("Accepted", "False", "NotAllowedByListeners"),
        )
        .await;
    ls_listeners_exactly(&suite, (cross_ns, cross), &[(cross_listener, 1)]).await;
    let h_cross = host(cross_listener);
    let h_cross = h_cross.as_str();
    matrix(
        &suite,
        addr,
        &[
            (
                h_cross,
                "/route-in-listenerset-namespace",
                "infra-backend-v1",
            ),
            (h_cross, "/route-in-gateway-namespace", ""),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// ListenerSetAllowedRoutesSupportedKinds: HTTPRoute asked of a TLS listener of a
/// ListenerSet is `ResolvedRefs` False, `InvalidRouteKinds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_routes_supported_kinds() {
    let suite = Suite::start().await;
    let gw = "gateway-with-listener-sets-test-supported-route-kinds";
    let ls = "listenerset-test-allowed-routes-supported-kinds";
    let listener = "listener-set-listener-allowed-routes-tls-only";
    suite.apply(&format!(
        "{}{}",
        gateway(gw, "{from: All}", &http("gateway-listener", "gateway-listener.com", "All")),
        listener_set(
            INFRA,
            ls,
            gw,
            &format!("    - {{name: {listener}, port: 443, protocol: TLS, hostname: {listener}.com, tls: {{mode: Passthrough}}, allowedRoutes: {{namespaces: {{from: All}}, kinds: [{{kind: HTTPRoute}}]}}}}\n")
        ),
    ));
    gateway_accepted(&suite, gw).await;
    ls_listener(
        &suite,
        (INFRA, ls),
        listener,
        &[("ResolvedRefs", "False", "InvalidRouteKinds")],
    )
    .await;
}

/// ListenerSetDefaultNotAllowed: a Gateway that says nothing allows no ListenerSet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_default_not_allowed() {
    let suite = Suite::start().await;
    let gw = "gateway-default-does-not-allow-listenerset";
    suite.apply(&format!(
        "{}{}",
        gateway(
            gw,
            "",
            &http("gateway-listener", "gateway-listener.com", "All")
        ),
        listener_set(
            INFRA,
            "listenerset-default-not-allowed",
            gw,
            &http(
                "listenerset-default-not-allowed-listener",
                "listenerset-default-not-allowed-listener.com",
                "All"
            )
        ),
    ));
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 0).await;
    ls_conditions(
        &suite,
        (INFRA, "listenerset-default-not-allowed"),
        "False",
        "NotAllowed",
        "NotAllowed",
    )
    .await;
}

/// ListenerSetDualParentRefIndependence: a route's Gateway and ListenerSet parents are
/// judged apart; a Gateway parent's sectionName naming a ListenerSet listener matches
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_dual_parent_ref_independence() {
    let suite = Suite::start().await;
    let gw = "gateway-dual-parentref";
    let ls = "ls-dual-parentref";
    let ls_listener_name = "ls-dual-parentref-listener";
    suite.apply(&format!(
        "{}{}{}{}",
        gateway(
            gw,
            "{from: Same}",
            &http("gw-dual-parentref-listener", "gw-dual.com", "Same")
        ),
        listener_set(
            INFRA,
            ls,
            gw,
            &http(ls_listener_name, "ls-dual.com", "Same")
        ),
        route(
            INFRA,
            "route-dual-parentref-both",
            &format!("[{}, {}]", gw_parent(gw, None), ls_parent(INFRA, ls, None)),
            "/dualboth",
            "infra-backend-v1"
        ),
        route(
            INFRA,
            "route-dual-parentref-one",
            &format!(
                "[{}, {}]",
                gw_parent(gw, Some(ls_listener_name)),
                ls_parent(INFRA, ls, Some(ls_listener_name))
            ),
            "/dualone",
            "infra-backend-v2"
        ),
    ));
    let addr = suite
        .gateway_address(INFRA, gw, Some("gw-dual-parentref-listener"))
        .await;
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 1).await;
    ls_listeners_exactly(&suite, (INFRA, ls), &[(ls_listener_name, 2)]).await;

    let both = ("HTTPRoute", INFRA, "route-dual-parentref-both");
    suite
        .route_condition(both, (INFRA, gw), ("Accepted", "True", ""))
        .await;
    suite
        .route_condition(both, (INFRA, ls), ("Accepted", "True", ""))
        .await;
    matrix(
        &suite,
        addr,
        &[
            ("gw-dual.com", "/dualboth", "infra-backend-v1"),
            ("ls-dual.com", "/dualboth", "infra-backend-v1"),
        ],
    )
    .await;

    let one = ("HTTPRoute", INFRA, "route-dual-parentref-one");
    suite
        .route_condition(one, (INFRA, gw), ("Accepted", "False", "NoMatchingParent"))
        .await;
    suite
        .route_condition(one, (INFRA, ls), ("Accepted", "True", ""))
        .await;
    ls_routes_accepted(&suite, (INFRA, ls), &[(INFRA, "route-dual-parentref-one")]).await;
    matrix(
        &suite,
        addr,
        &[
            ("ls-dual.com", "/dualone", "infra-backend-v2"),
            ("gw-dual.com", "/dualone", ""),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// ListenerSetGatewayParentSectionNameNotFound: a Gateway parent whose sectionName is a
/// ListenerSet's listener is `NoMatchingParent`; through the ListenerSet it attaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_gateway_parent_section_name_not_found() {
    let suite = Suite::start().await;
    let gw = "gateway-section-name";
    let ls = "listenerset-section-name";
    suite.apply(&format!(
        "{}{}{}{}",
        gateway(
            gw,
            "{from: Same}",
            &http("gw-listener", "gw-section.com", "Same")
        ),
        listener_set(
            INFRA,
            ls,
            gw,
            &http("ls-only-listener", "ls-section-name.com", "Same")
        ),
        route(
            INFRA,
            "route-via-listenerset",
            &format!("[{}]", ls_parent(INFRA, ls, Some("ls-only-listener"))),
            "/goodsection",
            "infra-backend-v1"
        ),
        route(
            INFRA,
            "route-via-gateway",
            &format!("[{}]", gw_parent(gw, Some("ls-only-listener"))),
            "/badsection",
            "infra-backend-v2"
        ),
    ));
    let addr = suite.gateway_address(INFRA, gw, Some("gw-listener")).await;
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 1).await;
    ls_routes_accepted(&suite, (INFRA, ls), &[(INFRA, "route-via-listenerset")]).await;
    suite
        .route_condition(
            ("HTTPRoute", INFRA, "route-via-gateway"),
            (INFRA, gw),
            ("Accepted", "False", "NoMatchingParent"),
        )
        .await;
    matrix(
        &suite,
        addr,
        &[
            ("ls-section-name.com", "/goodsection", "infra-backend-v1"),
            ("gw-section.com", "/badsection", ""),
        ],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// The conflict tests' objects: a Gateway with two listeners and four ListenerSets, the
/// conflicting listener of each made by `conflicting(name, hostname)`.
fn conflict_objects(gw: &str, word: &str, conflicting: impl Fn(&str, &str) -> String) -> String {
    let with_gw = format!("{word}-conflict-with-gateway-listener");
    let with_ls = format!("{word}-conflict-with-listener-set-listener");
    let mut yaml = gateway(
        gw,
        "{from: Same}",
        &format!(
            "{}{}",
            http("gateway-listener", "gateway-listener.com", "All"),
            http(&with_gw, &format!("{with_gw}.com"), "All")
        ),
    );
    let sets = [
        (
            format!("listenerset-with-{word}-conflict-with-gateway-1"),
            format!(
                "{}{}{}",
                http(
                    "listener-set-1-listener",
                    "listener-set-1-listener.com",
                    "All"
                ),
                conflicting(&with_gw, &format!("{with_gw}.com")),
                http(&with_ls, &format!("{with_ls}.com"), "All"),
            ),
        ),
        (
            format!("listenerset-with-{word}-conflict-with-gateway-2"),
            conflicting(&with_gw, &format!("{with_gw}.com")),
        ),
        (
            format!("listenerset-with-{word}-conflict-with-listener-set-1"),
            format!(
                "{}{}",
                http(
                    "listener-set-2-listener",
                    "listener-set-2-listener.com",
                    "All"
                ),
                conflicting(&with_ls, &format!("{with_ls}.com")),
            ),
        ),
        (
            format!("listenerset-with-{word}-conflict-with-listener-set-2"),
            conflicting(&with_ls, &format!("{with_ls}.com")),
        ),
    ];
    for (name, listeners) in sets {
        yaml.push_str(&listener_set(INFRA, &name, gw, &listeners));
    }
    yaml
}

/// The conflict tests' assertions, for conflicts of `reason`.
async fn conflict_assertions(suite: &Suite, gw: &str, word: &str, reason: &'static str) {
    let with_gw = format!("{word}-conflict-with-gateway-listener");
    let with_ls = format!("{word}-conflict-with-listener-set-listener");
    let lost = conflicted(reason);
    gateway_accepted(suite, gw).await;
    suite
        .listener_conditions((INFRA, gw), "gateway-listener", READY)
        .await;
    suite
        .listener_conditions((INFRA, gw), &with_gw, READY)
        .await;
    attached_sets(suite, gw, 2).await;

    let gw1 = format!("listenerset-with-{word}-conflict-with-gateway-1");
    ls_condition(suite, (INFRA, &gw1), ("Accepted", "True", "")).await;
    ls_condition(suite, (INFRA, &gw1), ("Programmed", "True", "Programmed")).await;
    ls_listener(suite, (INFRA, &gw1), "listener-set-1-listener", READY).await;
    ls_listener(suite, (INFRA, &gw1), &with_gw, &lost).await;
    ls_listener(suite, (INFRA, &gw1), &with_ls, READY).await;

    let gw2 = format!("listenerset-with-{word}-conflict-with-gateway-2");
    ls_conditions(
        suite,
        (INFRA, &gw2),
        "False",
        "ListenersNotValid",
        "ListenersNotValid",
    )
    .await;
    ls_listener(suite, (INFRA, &gw2), &with_gw, &lost).await;

    let ls1 = format!("listenerset-with-{word}-conflict-with-listener-set-1");
    ls_condition(suite, (INFRA, &ls1), ("Accepted", "True", "")).await;
    ls_condition(suite, (INFRA, &ls1), ("Programmed", "True", "Programmed")).await;
    ls_listener(suite, (INFRA, &ls1), "listener-set-2-listener", READY).await;
    ls_listener(suite, (INFRA, &ls1), &with_ls, &lost).await;

    let ls2 = format!("listenerset-with-{word}-conflict-with-listener-set-2");
    ls_conditions(
        suite,
        (INFRA, &ls2),
        "False",
        "ListenersNotValid",
        "ListenersNotValid",
    )
    .await;
    ls_listener(suite, (INFRA, &ls2), &with_ls, &lost).await;
}

/// Applies the documents of `yaml` one second apart (creation order decides
/// precedence, and creation times count seconds).
async fn apply_in_order(suite: &Suite, yaml: &str) {
    for document in yaml.split("\n---\n") {
        if !document.trim().is_empty() {
            suite.apply(document);
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        }
    }
}

/// ListenerSetHostnameConflict: a ListenerSet listener with a hostname (and port) the
/// Gateway or an older ListenerSet already serves is `HostnameConflict`; a ListenerSet
/// with no listener left is `ListenersNotValid` and not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_hostname_conflict() {
    let suite = Suite::start().await;
    let gw = "gateway-with-listenerset-hostname-conflict";
    apply_in_order(
        &suite,
        &conflict_objects(gw, "hostname", |name, host| http(name, host, "All")),
    )
    .await;
    conflict_assertions(&suite, gw, "hostname", "HostnameConflict").await;
}

/// ListenerSetProtocolConflict: a TCP listener on the port of the Gateway's (or an older
/// ListenerSet's) HTTP listeners is `ProtocolConflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_protocol_conflict() {
    let suite = Suite::start().await;
    let gw = "gateway-with-listenerset-protocol-conflict";
    apply_in_order(
        &suite,
        &conflict_objects(gw, "protocol", |name, _| {
            format!("    - {{name: {name}, port: 80, protocol: TCP, allowedRoutes: {{namespaces: {{from: All}}}}}}\n")
        }),
    )
    .await;
    conflict_assertions(&suite, gw, "protocol", "ProtocolConflict").await;
}

/// ListenerSetHTTPRouting: routes attach to the Gateway's listeners, a ListenerSet's, or
/// one listener of either, and answer only on those listeners' hostnames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_http_routing() {
    let suite = Suite::start().await;
    let gw = "gateway-with-listener-sets-http-routing";
    let ls1 = "listener-set-http-routing-1";
    let ls2 = "listener-set-http-routing-2";
    let listeners = |prefix: &str| {
        format!(
            "{}{}",
            http(
                &format!("{prefix}-listener-1"),
                &format!("{prefix}-listener-1.com"),
                "All"
            ),
            http(
                &format!("{prefix}-listener-2"),
                &format!("{prefix}-listener-2.com"),
                "All"
            ),
        )
    };
    let gw_listeners = format!(
        "{}{}",
        http("gateway-listener-1", "gateway-listener-1.com", "All"),
        http("gateway-listener-2", "gateway-listener-2.com", "All")
    );
    suite.apply(&format!(
        "{}{}{}{}{}{}{}{}{}",
        gateway(gw, "{from: All}", &gw_listeners),
        listener_set(INFRA, ls1, gw, &listeners(ls1)),
        listener_set(INFRA, ls2, gw, &listeners(ls2)),
        route(
            INFRA,
            "attaches-to-all-listeners",
            &format!(
                "[{}, {}, {}]",
                gw_parent(gw, None),
                ls_parent(INFRA, ls1, None),
                ls_parent(INFRA, ls2, None)
            ),
            "/route",
            "infra-backend-v1"
        ),
        route(
            INFRA,
            "gateway-route",
            &format!("[{}]", gw_parent(gw, None)),
            "/gateway-route",
            "infra-backend-v2"
        ),
        route(
            INFRA,
            "gateway-section-route",
            &format!("[{}]", gw_parent(gw, Some("gateway-listener-1"))),
            "/gateway-section-route",
            "infra-backend-v3"
        ),
        route(
            INFRA,
            "listener-set-http-routing-1-route",
            &format!("[{}]", ls_parent(INFRA, ls1, None)),
            "/listener-set-http-routing-1-route",
            "infra-backend-v2"
        ),
        route(
            INFRA,
            "listener-set-http-routing-1-section-route",
            &format!(
                "[{}]",
                ls_parent(INFRA, ls1, Some("listener-set-http-routing-1-listener-1"))
            ),
            "/listener-set-http-routing-1-section-route",
            "infra-backend-v3"
        ),
        route(
            INFRA,
            "listener-set-http-routing-2-route",
            &format!("[{}]", ls_parent(INFRA, ls2, None)),
            "/listener-set-http-routing-2-route",
            "infra-backend-v2"
        ),
    ));
    let addr = suite
        .routes_accepted(
            (INFRA, gw),
            "HTTPRoute",
            &[
                (INFRA, "attaches-to-all-listeners"),
                (INFRA, "gateway-route"),
                (INFRA, "gateway-section-route"),
            ],
        )
        .await;
    attached_sets(&suite, gw, 2).await;
    ls_routes_accepted(
        &suite,
        (INFRA, ls1),
        &[
            (INFRA, "attaches-to-all-listeners"),
            (INFRA, "listener-set-http-routing-1-route"),
            (INFRA, "listener-set-http-routing-1-section-route"),
        ],
    )
    .await;
    ls_listeners_exactly(
        &suite,
        (INFRA, ls1),
        &[
            ("listener-set-http-routing-1-listener-1", 3),
            ("listener-set-http-routing-1-listener-2", 2),
        ],
    )
    .await;
    ls_routes_accepted(
        &suite,
        (INFRA, ls2),
        &[
            (INFRA, "attaches-to-all-listeners"),
            (INFRA, "listener-set-http-routing-2-route"),
        ],
    )
    .await;
    ls_listeners_exactly(
        &suite,
        (INFRA, ls2),
        &[
            ("listener-set-http-routing-2-listener-1", 2),
            ("listener-set-http-routing-2-listener-2", 2),
        ],
    )
    .await;
    let hosts = [
        "gateway-listener-1.com",
        "gateway-listener-2.com",
        "listener-set-http-routing-1-listener-1.com",
        "listener-set-http-routing-1-listener-2.com",
        "listener-set-http-routing-2-listener-1.com",
        "listener-set-http-routing-2-listener-2.com",
    ];
    let (v1, v2, v3) = ("infra-backend-v1", "infra-backend-v2", "infra-backend-v3");
    let table: [(&str, [&str; 6]); 6] = [
        ("/route", [v1, v1, v1, v1, v1, v1]),
        ("/gateway-route", [v2, v2, "", "", "", ""]),
        ("/gateway-section-route", [v3, "", "", "", "", ""]),
        (
            "/listener-set-http-routing-1-route",
            ["", "", v2, v2, "", ""],
        ),
        (
            "/listener-set-http-routing-1-section-route",
            ["", "", v3, "", "", ""],
        ),
        (
            "/listener-set-http-routing-2-route",
            ["", "", "", "", v2, v2],
        ),
    ];
    let mut cases = Vec::new();
    for (path, backends) in &table {
        for (host, backend) in hosts.iter().zip(backends) {
            cases.push((*host, *path, *backend));
        }
    }
    matrix(&suite, addr, &cases).await;
    suite.assert_nothing_rejected().await;
}

/// ListenerSetReferenceGrant: a ListenerSet's certificate in another namespace needs a
/// grant from ListenerSets of its own namespace (the Gateway's does not carry over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_reference_grant() {
    let suite = Suite::start().await;
    let gw = "gateway-with-listener-sets-test-reference-grant";
    let other = "gateway-api-listener-sets-test-reference-grant-ns";
    let https = |name: &str, host: &str| {
        format!(
            "    - {{name: {name}, port: 443, protocol: HTTPS, hostname: {host}, allowedRoutes: {{namespaces: {{from: All}}}}, tls: {{certificateRefs: [{{kind: Secret, group: '', name: certificate, namespace: gateway-conformance-web-backend}}]}}}}\n"
        )
    };
    let grant = |name: &str, kind: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: gateway-conformance-web-backend}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: {kind}, namespace: gateway-conformance-infra}}]\n  to: [{{group: '', kind: Secret}}]\n---\n"
        )
    };
    suite.apply(&format!(
        "{}{}{}{}{}{}",
        gateway(
            gw,
            "{from: All}",
            &https("gateway-listener", "gateway-listener.com")
        ),
        grant("reference-grant-for-gateway", "Gateway"),
        listener_set(
            INFRA,
            "listenerset-with-reference-grant",
            gw,
            &https(
                "listenerset-with-reference-grant-listener",
                "listenerset-with-reference-grant-listener.com"
            )
        ),
        grant("reference-grant-for-listener-set", "ListenerSet"),
        namespace(other, ""),
        listener_set(
            other,
            "listenerset-without-reference-grant",
            gw,
            &https(
                "listenerset-without-reference-grant-listener",
                "listenerset-without-reference-grant-listener-1.com"
            )
        ),
    ));
    gateway_accepted(&suite, gw).await;
    let with = (INFRA, "listenerset-with-reference-grant");
    ls_conditions(&suite, with, "True", "", "").await;
    ls_listener(
        &suite,
        with,
        "listenerset-with-reference-grant-listener",
        &[("ResolvedRefs", "True", "")],
    )
    .await;
    let without = (other, "listenerset-without-reference-grant");
    ls_conditions(
        &suite,
        without,
        "False",
        "ListenersNotValid",
        "ListenersNotValid",
    )
    .await;
    ls_listener(
        &suite,
        without,
        "listenerset-without-reference-grant-listener",
        &[("ResolvedRefs", "False", "RefNotPermitted")],
    )
    .await;
    suite.assert_nothing_rejected().await;
}

/// ListenerSetRouteStatusScopedToParentRef: a route of the Gateway only is not counted by
/// the ListenerSet's listener, and each route's parent entry names its own parent in
/// full (group, kind, namespace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_route_status_scoped_to_parent_ref() {
    let suite = Suite::start().await;
    let gw = "gateway-parentref";
    let ls = "listenerset-parentref";
    suite.apply(&format!(
        "{}{}{}{}",
        gateway(
            gw,
            "{from: Same}",
            &http("gw-parentref-listener", "gw-parentref.com", "Same")
        ),
        listener_set(
            INFRA,
            ls,
            gw,
            &http(
                "listenerset-parentref-listener",
                "listenerset-parentref.com",
                "Same"
            )
        ),
        route(
            INFRA,
            "route-parentref-gwonly",
            &format!("[{}]", gw_parent(gw, None)),
            "/gwonly",
            "infra-backend-v1"
        ),
        route(
            INFRA,
            "route-parentref-lsonly",
            &format!("[{}]", ls_parent(INFRA, ls, None)),
            "/lsonly",
            "infra-backend-v2"
        ),
    ));
    gateway_accepted(&suite, gw).await;
    attached_sets(&suite, gw, 1).await;
    ls_listeners_exactly(
        &suite,
        (INFRA, ls),
        &[("listenerset-parentref-listener", 1)],
    )
    .await;

    suite
        .route_condition(
            ("HTTPRoute", INFRA, "route-parentref-gwonly"),
            (INFRA, gw),
            ("Accepted", "True", ""),
        )
        .await;
    full_parent(&suite, "route-parentref-gwonly", "Gateway", gw).await;
    ls_routes_accepted(&suite, (INFRA, ls), &[(INFRA, "route-parentref-lsonly")]).await;
    full_parent(&suite, "route-parentref-lsonly", "ListenerSet", ls).await;
    suite.assert_nothing_rejected().await;
}

/// The suite's `HTTPRouteMustHaveParents` with the namespace required: a parent entry of
/// this controller naming `kind` `name` with group, kind and namespace written, Accepted.
async fn full_parent(suite: &Suite, route: &str, kind: &str, name: &str) {
    suite
        .wait_for(
            (GW, "HTTPRoute", INFRA, route),
            &format!("a full parent entry for {kind} {name}"),
            |r| {
                r["status"]["parents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| {
                        let parent = &p["parentRef"];
                        p["controllerName"] == crate::conformance::suite::CONTROLLER
                            && parent["group"] == "gateway.networking.k8s.io"
                            && parent["kind"] == kind
                            && parent["name"] == name
                            && parent["namespace"] == INFRA
                            && has(&p["conditions"], "Accepted", "True", "")
                    })
            },
        )
        .await;
}
