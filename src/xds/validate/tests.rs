use super::*;
use envoy_types::pb::envoy::config::route::v3::{
    QueryParameterMatcher, Route, RouteConfiguration, RouteMatch, VirtualHost,
    query_parameter_matcher, route_match,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use prost::Message;

/// A route's action: a direct 200.
fn answer_200() -> Option<envoy_types::pb::envoy::config::route::v3::route::Action> {
    Some(
        envoy_types::pb::envoy::config::route::v3::route::Action::DirectResponse(
            envoy_types::pb::envoy::config::route::v3::DirectResponseAction {
                status: 200,
                ..Default::default()
            },
        ),
    )
}

fn table(name: &str, prefix: &str) -> Vec<u8> {
    RouteConfiguration {
        name: "t".to_string(),
        virtual_hosts: vec![VirtualHost {
            name: "v".to_string(),
            domains: vec!["*".to_string()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                    query_parameters: vec![QueryParameterMatcher {
                        name: name.to_string(),
                        query_parameter_match_specifier: Some(
                            query_parameter_matcher::QueryParameterMatchSpecifier::StringMatch(
                                StringMatcher {
                                    match_pattern: Some(string_matcher::MatchPattern::Prefix(
                                        prefix.to_string(),
                                    )),
                                    ..Default::default()
                                },
                            ),
                        ),
                    }],
                    ..Default::default()
                }),
                action: answer_200(),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec()
}

/// Every rule Envoy's API declares, over all its messages, is one the checker
/// applies.
#[test]
fn every_rule_envoys_api_declares_is_checked() {
    let declared = declared_rules().unwrap_or_else(|e| panic!("{e}"));
    // The walk reaches the rules Isobar's resources meet most.
    for seen in [
        "string.well_known_regex",
        "string.min_len",
        "uint32.gte",
        "duration.gt",
        "repeated.min_items",
        "enum.defined_only",
        "message.required",
        "map.keys",
    ] {
        assert!(
            declared.contains_key(seen),
            "{seen} not found: {declared:#?}"
        );
    }
    let missing: Vec<(&String, &String)> = declared
        .iter()
        .filter(|(rule, _)| !supported(rule))
        .collect();
    assert!(missing.is_empty(), "rules not checked: {missing:#?}");
}

/// A message field Envoy requires, left unset, is a violation (message rules sit
/// beside the typed ones); a wrapper's rules apply to its value when it is set.
#[test]
fn required_messages_and_wrapped_numbers_are_checked() {
    use envoy_types::pb::envoy::config::endpoint::v3::{
        ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
    };
    let declared = declared_rules().unwrap_or_else(|e| panic!("{e}"));
    let field = &declared["message.required"];
    let (message, name) = field.rsplit_once('.').unwrap_or_default();
    let descriptor = pool()
        .unwrap_or_else(|e| panic!("{e}"))
        .get_message_by_name(message)
        .unwrap_or_else(|| panic!("{message}"));
    let empty = DynamicMessage::new(descriptor);
    let mut out = Vec::new();
    let pool = pool().unwrap_or_else(|e| panic!("{e}"));
    Checker {
        pool,
        out: &mut out,
    }
    .message(&empty, &At::Root("m"));
    assert!(
        out.iter()
            .any(|v| v.path == format!("m.{name}") && v.rule == "required"),
        "{field}: {out:?}"
    );

    let cla = |weight: Option<u32>| {
        ClusterLoadAssignment {
            cluster_name: "c".into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![LbEndpoint {
                    load_balancing_weight: weight
                        .map(|value| envoy_types::pb::google::protobuf::UInt32Value { value }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec()
    };
    let zero = check(XdsType::Endpoint, &cla(Some(0))).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        zero.iter()
            .any(|v| v.path.ends_with("load_balancing_weight") && v.rule.starts_with("gte 1")),
        "{zero:?}"
    );
    for fine in [Some(1), None] {
        let said = check(XdsType::Endpoint, &cla(fine)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !said
                .iter()
                .any(|v| v.path.ends_with("load_balancing_weight")),
            "{said:?}"
        );
    }
}

/// A table whose served version holds some vhosts as they are: only the others are
/// checked one by one, the rules across vhosts still see them all; a listener's
/// filter chains likewise.
#[test]
fn entries_served_as_they_are_are_not_checked_again_but_still_count_across() {
    use envoy_types::pb::envoy::config::listener::v3::{FilterChain, FilterChainMatch, Listener};
    let vhost = |name: &str, domain: &str, prefix: &str| VirtualHost {
        name: name.into(),
        domains: vec![domain.into()],
        routes: vec![Route {
            r#match: Some(RouteMatch {
                path_specifier: Some(route_match::PathSpecifier::Prefix(prefix.into())),
                ..Default::default()
            }),
            action: answer_200(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let table = |vhosts: Vec<VirtualHost>| {
        RouteConfiguration {
            name: "t".into(),
            virtual_hosts: vhosts,
            ..Default::default()
        }
        .encode_to_vec()
    };
    let a = vhost("a", "a.example.com", "/");
    let old = table(vec![a.clone(), vhost("b", "b.example.com", "/")]);
    let fine = table(vec![a.clone(), vhost("b", "b.example.com", "/x")]);
    assert!(changed_entries(XdsType::Route, &fine, &old).is_some());
    assert!(refused(XdsType::Route, "t", &fine, Some(&old)).is_none());
    // A new vhost claiming a held vhost's domain.
    let clash = table(vec![a.clone(), vhost("c", "A.example.com", "/")]);
    let said = refused(XdsType::Route, "t", &clash, Some(&old))
        .map(|w| w.to_string())
        .unwrap_or_default();
    assert!(said.contains("route.unique-domains"), "{said}");
    // A changed vhost breaking a rule of its own.
    let bad = table(vec![a, vhost("", "b.example.com", "/")]);
    let said = refused(XdsType::Route, "t", &bad, Some(&old))
        .map(|w| w.to_string())
        .unwrap_or_default();
    assert!(said.contains(".name: min_len 1"), "{said}");

    let chain = |sni: &str| FilterChain {
        filter_chain_match: Some(FilterChainMatch {
            server_names: vec![sni.into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let listener = |port: u32, chains: Vec<FilterChain>| {
        Listener {
            name: "l".into(),
            address: Some(envoy_types::pb::envoy::config::core::v3::Address {
                address: Some(
                    envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(
                        envoy_types::pb::envoy::config::core::v3::SocketAddress {
                            address: "0.0.0.0".into(),
                            port_specifier: Some(
                                envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(port),
                            ),
                            ..Default::default()
                        },
                    ),
                ),
            }),
            filter_chains: chains,
            ..Default::default()
        }
        .encode_to_vec()
    };
    let old = listener(443, vec![chain("a.example.com"), chain("b.example.com")]);
    // Every chain held, the port changed: no chain is missing.
    let moved = listener(8443, vec![chain("a.example.com"), chain("b.example.com")]);
    assert!(refused(XdsType::Listener, "l", &moved, Some(&old)).is_none());
    let twice = listener(
        443,
        vec![
            chain("a.example.com"),
            chain("b.example.com"),
            chain("A.example.com"),
        ],
    );
    let said = refused(XdsType::Listener, "l", &twice, Some(&old))
        .map(|w| w.to_string())
        .unwrap_or_default();
    assert!(
        said.contains("listener.duplicate-filter-chain-match"),
        "{said}"
    );
}

/// Patterns mean what RE2 makes of them: Perl classes are ASCII.
#[test]
fn patterns_have_re2s_meaning() {
    assert!(matches_pattern("^\\d+$", "123"));
    assert!(
        !matches_pattern("^\\d+$", "١٢٣"),
        "Arabic-Indic digits are not RE2's \\d"
    );
    assert!(!matches_pattern("^\\w+$", "é"));
    assert!(matches_pattern("^[\\w.-]+$", "a.b-c_d"));
    assert!(
        !matches_pattern("^\\s$", "\u{b}"),
        "RE2's \\s has no vertical tab"
    );
    assert!(matches_pattern("^\\S+$", "é"));
    assert!(matches_pattern("^[]a]+$", "]a"));
}

#[test]
fn well_known_string_formats() {
    assert!(is_hostname("a.example.com") && is_hostname("a-b.c."));
    assert!(!is_hostname("-a.com") && !is_hostname("a..com") && !is_hostname(&"a".repeat(64)));
    assert!(is_email("a@example.com") && !is_email("a@") && !is_email("example.com"));
    assert!(is_uri("https://a/b") && !is_uri("/relative") && !is_uri("a b:c"));
    assert!(is_uuid("123e4567-e89b-12d3-a456-426614174000") && !is_uuid("123"));
}

#[test]
fn envoys_rules_are_read_from_the_descriptors() {
    let fine = check(XdsType::Route, &table("q", "a")).unwrap_or_else(|e| panic!("{e}"));
    assert!(fine.is_empty(), "{fine:?}");
    let long = "q".repeat(1100);
    let broken = check(XdsType::Route, &table(&long, "")).unwrap_or_else(|e| panic!("{e}"));
    let said: Vec<String> = broken.iter().map(ToString::to_string).collect();
    assert!(
        said.iter()
            .any(|v| v.ends_with("query_parameters[0].name: max_bytes 1024 (is 1100)")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|v| v.contains("string_match.prefix: min_len 1")),
        "{said:?}"
    );
}

/// A build's resource that breaks a rule is not served: the served version stays
/// (a new one is left out), the others go out, and what was withheld names the
/// resource and the rule; a resource already served as it is is not checked again.
#[test]
fn resources_envoy_would_refuse_are_withheld() {
    use crate::xds::resource::{Changes, Encoded, Resources};
    use crate::xds::snapshot::Snapshot;
    let good: Encoded = table("q", "a").into();
    let bad: Encoded = table("q", "").into();
    let mut first = Resources::default();
    first.routes.insert("kept".into(), good.clone());
    first.routes.insert("new-bad".into(), bad.clone());
    let withheld = vet_resources(&mut first, None);
    assert_eq!(withheld.len(), 1, "{withheld:?}");
    assert_eq!(
        (withheld[0].xds_type, withheld[0].name.as_str()),
        (XdsType::Route, "new-bad")
    );
    assert!(
        withheld[0]
            .to_string()
            .contains("string_match.prefix: min_len 1"),
        "{}",
        withheld[0]
    );
    assert!(
        !first.routes.contains_key("new-bad"),
        "a new bad resource is left out"
    );
    let served = Snapshot::new(first.clone());

    // A full build changing `kept` for the worse keeps the served version.
    let mut second = first.clone();
    second.routes.insert("kept".into(), bad.clone());
    second.routes.insert("other".into(), good.clone());
    let withheld = vet_resources(&mut second, Some(&served));
    assert_eq!(withheld.len(), 1, "{withheld:?}");
    assert_eq!(second.routes.get("kept"), Some(&good));
    assert_eq!(second.routes.get("other"), Some(&good));

    // A spliced change does the same.
    let mut changes = Changes::default();
    changes.put(XdsType::Route, "kept".into(), Some(bad.clone()));
    changes.put(XdsType::Route, "fresh".into(), Some(bad));
    changes.put(XdsType::Route, "gone".into(), None);
    let withheld = vet_changes(&mut changes, &served);
    assert_eq!(withheld.len(), 2, "{withheld:?}");
    let routes = &changes.by_type[&XdsType::Route];
    assert_eq!(routes["kept"], Some(good), "the served version stays");
    assert_eq!(routes["fresh"], None, "a new bad resource is left out");
    assert_eq!(routes["gone"], None);
}

/// VHDS merges a RouteConfiguration's vhosts into one table: a vhost repeating a
/// domain another of the same table holds is withheld (the one Envoy holds stays),
/// in a full build and in a spliced change; other tables and changes inside a vhost
/// are not concerned.
#[test]
fn a_vhost_repeating_another_vhosts_domain_is_withheld() {
    use crate::xds::resource::{Changes, Encoded, Resources};
    use crate::xds::snapshot::Snapshot;
    use envoy_types::pb::envoy::config::route::v3::VirtualHost;
    let vhost = |name: &str, domains: &[&str]| -> Encoded {
        crate::xds::resource::encoded(&VirtualHost {
            name: name.into(),
            domains: domains.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        })
    };
    let mut first = Resources::default();
    let a = vhost("a", &["a.example.com"]);
    first.virtual_hosts.insert("http/a".into(), a.clone());
    first
        .virtual_hosts
        .insert("other/a".into(), vhost("a", &["a.example.com"]));
    let withheld = vet_resources(&mut first, None);
    assert!(withheld.is_empty(), "{withheld:?}");
    let served = Snapshot::new(first.clone());

    // A new vhost claiming a held domain (in another case) is left out.
    let mut second = first.clone();
    second.virtual_hosts.insert(
        "http/b".into(),
        vhost("b", &["b.example.com", "A.example.com"]),
    );
    let withheld = vet_resources(&mut second, Some(&served));
    assert_eq!(withheld.len(), 1, "{withheld:?}");
    assert_eq!(withheld[0].name, "http/b");
    assert!(
        withheld[0].to_string().contains("vhds.unique-domains"),
        "{}",
        withheld[0]
    );
    assert!(!second.virtual_hosts.contains_key("http/b"));
    assert_eq!(second.virtual_hosts.get("http/a"), Some(&a));

    // As a spliced change: the same; a change inside a vhost and a vhost taking a
    // domain another gives up in the same change go through.
    let mut changes = Changes::default();
    changes.put(
        XdsType::VirtualHost,
        "http/b".into(),
        Some(vhost("b", &["a.example.com"])),
    );
    let withheld = vet_changes(&mut changes, &served);
    assert_eq!(withheld.len(), 1, "{withheld:?}");
    assert_eq!(changes.by_type[&XdsType::VirtualHost]["http/b"], None);
    let mut changes = Changes::default();
    changes.put(XdsType::VirtualHost, "http/a".into(), None);
    changes.put(
        XdsType::VirtualHost,
        "http/b".into(),
        Some(vhost("b", &["a.example.com"])),
    );
    assert!(vet_changes(&mut changes, &served).is_empty());
    let mut changes = Changes::default();
    changes.put(
        XdsType::VirtualHost,
        "http/a".into(),
        Some(vhost("a2", &["a.example.com"])),
    );
    assert!(!needs_across(
        XdsType::VirtualHost,
        &changes.by_type[&XdsType::VirtualHost],
        served.get(XdsType::VirtualHost)
    ));
    assert!(vet_changes(&mut changes, &served).is_empty());
}

/// A listener on an address another listener holds is withheld; the held one stays.
#[test]
fn a_listener_on_a_held_address_is_withheld() {
    use crate::xds::resource::{Changes, Resources};
    use crate::xds::snapshot::Snapshot;
    use envoy_types::pb::envoy::config::listener::v3::{FilterChain, Listener};
    let listener = |name: &str, port: u16| {
        crate::xds::resource::encoded(&Listener {
            name: name.into(),
            address: Some(crate::xds::proto::socket_address("0.0.0.0", port)),
            filter_chains: vec![FilterChain::default()],
            ..Default::default()
        })
    };
    let mut first = Resources::default();
    first
        .listeners
        .insert("http".into(), listener("http", 8080));
    let served = Snapshot::new(first.clone());
    let mut changes = Changes::default();
    changes.put(
        XdsType::Listener,
        "stats".into(),
        Some(listener("stats", 8080)),
    );
    let withheld = vet_changes(&mut changes, &served);
    assert_eq!(withheld.len(), 1, "{withheld:?}");
    assert_eq!(withheld[0].name, "stats");
    assert!(
        withheld[0]
            .to_string()
            .contains("listener.duplicate-address"),
        "{}",
        withheld[0]
    );
    let mut changes = Changes::default();
    changes.put(
        XdsType::Listener,
        "stats".into(),
        Some(listener("stats", 8002)),
    );
    assert!(vet_changes(&mut changes, &served).is_empty());
}
