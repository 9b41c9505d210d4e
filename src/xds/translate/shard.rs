//! An HTTP listener's routes split into shards: 64 RouteConfigurations instead of one,
//! so that a change to one vhost makes Envoy rebuild a table of about 1/64th of the
//! vhosts, not all of them (at 10,000 vhosts Envoy's own rebuild of one table takes
//! 100–200 ms).
//!
//! Envoy picks a request's shard with scoped routes (SRDS): the connection manager's
//! early header mutation writes the shard number into `x-isobar-scope` with a CEL
//! expression over the request's host, and the scope whose key is that number names
//! the RouteConfiguration. The number is computed from characters of the host alone, so
//! every host — known, matching a wildcard, or unknown — has a shard: each shard's table
//! holds its exact-host vhosts and every wildcard and default (`*`) vhost, and Envoy's
//! domain matching within it (exact before wildcard before `*`, ignoring case and port)
//! answers as the one table would.
//!
//! The number: for the host's first label and for the label before its last, the last
//! three characters each give two bits (whether they are in [`BIT0`], whether in
//! [`BIT1`], either case); the two six-bit values are added modulo 64. Isobar computes
//! the same number for each vhost's FQDN ([`shard_of`]); the CEL expression
//! ([`shard_expression`]) tests the same characters with regular expressions, which
//! ignore case, a port and a trailing dot. A test holds the two to the same answers.

use envoy_types::pb::envoy::config::common::mutation_rules::v3::{
    HeaderMutation as Mutation, header_mutation,
};
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{
    HeaderValue, HeaderValueOption, TypedExtensionConfig,
};
use envoy_types::pb::envoy::config::route::v3::{
    ScopedRouteConfiguration, scoped_route_configuration,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    ScopedRds, ScopedRoutes, scoped_routes,
};
use envoy_types::pb::envoy::extensions::http::early_header_mutation::header_mutation::v3::HeaderMutation;
use envoy_types::util::pack_any;

use crate::xds::proto::ads;
use crate::xds::resource::{Encoded, encoded};

/// How many shards a split listener has.
pub const SHARDS: usize = 64;

/// The request header the shard number is written to (and removed from again before the
/// request goes upstream).
pub const SCOPE_HEADER: &str = "x-isobar-scope";

/// Characters giving a position's first bit (lower case; upper case letters too).
pub const BIT0: &str = "acegikmoqsuwy02468";
/// Characters giving its second bit.
pub const BIT1: &str = "abefijmnqruvyz014589";

/// How many characters from the end of each label count.
const POSITIONS: usize = 3;

fn in_class(c: char, class: &str) -> bool {
    class.contains(c.to_ascii_lowercase())
}

/// The two-bit value of each of the last characters of `label` (the last first),
/// combined: position `p` from the end weighs `4^p`.
fn label_value(label: &[char]) -> usize {
    (0..POSITIONS)
        .filter_map(|p| label.len().checked_sub(p + 1).map(|i| (p, label[i])))
        .map(|(p, c)| char_bits(c) << (2 * p))
        .sum()
}

/// A character's two bits: in [`BIT0`], in [`BIT1`].
fn char_bits(c: char) -> usize {
    usize::from(in_class(c, BIT0)) + 2 * usize::from(in_class(c, BIT1))
}

/// The shard of a host as Envoy computes it for a request (see the module's docs): the
/// host may carry a port and a trailing dot and be in any case.
pub fn shard_of(host: &str) -> usize {
    let chars: Vec<char> = host.chars().collect();
    let stop = |c: &char| *c == '.' || *c == ':';
    // The first label: up to the first '.' or ':'.
    let first_end = chars.iter().position(stop).unwrap_or(chars.len());
    let first = label_value(&chars[..first_end]);
    (first + second_to_last_value(&chars)) % SHARDS
}

/// The value of the label before the last one: the host without a port (`:` and
/// digits at its end) and one trailing dot must end in `.` and a label of at least one
/// character; the characters before that dot count (as many as are not `.` or `:`).
fn second_to_last_value(chars: &[char]) -> usize {
    let mut end = chars.len();
    if let Some(colon) = chars.iter().rposition(|c| *c == ':')
        && chars[colon + 1..].iter().all(char::is_ascii_digit)
    {
        end = colon;
    }
    if end > 0 && chars[end - 1] == '.' {
        end -= 1;
    }
    let host = &chars[..end];
    let Some(dot) = host.iter().rposition(|c| *c == '.') else {
        return 0;
    };
    let last = &host[dot + 1..];
    if last.is_empty() || last.contains(&':') {
        return 0;
    }
    // The characters before the dot: the one at p from it counts while the p after it
    // (up to the dot) are neither '.' nor ':'.
    let mut value = 0;
    for p in 0..POSITIONS {
        let Some(i) = dot.checked_sub(p + 1) else {
            break;
        };
        if host[i + 1..dot].iter().any(|c| *c == '.' || *c == ':') {
            break;
        }
        value += char_bits(host[i]) << (2 * p);
    }
    value
}

/// A character class of the regular expressions: the class's characters, and the
/// upper case of its letters.
fn regex_class(class: &str) -> String {
    let upper: String = class
        .chars()
        .filter(char::is_ascii_lowercase)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    format!("[{class}{upper}]")
}

/// The CEL expression giving a request's shard number (Envoy's CEL has no conversion
/// to a string: the header's value puts the listener's prefix before it).
pub fn shard_expression() -> String {
    let mut terms = Vec::new();
    for p in 0..POSITIONS {
        for (bit, class) in [(0, BIT0), (1, BIT1)] {
            let weight = 1usize << (2 * p + bit);
            let c = regex_class(class);
            terms.push(format!(
                "(request.host.matches('^[^.:]*{c}[^.:]{{{p}}}([.:]|$)') ? {weight} : 0)"
            ));
            terms.push(format!(
                "(request.host.matches('{c}[^.:]{{{p}}}[.][^.:]+[.]?(:[0-9]*)?$') ? {weight} : 0)"
            ));
        }
    }
    format!("({}) % {SHARDS}", terms.join(" + "))
}

/// The scope-key prefix of listener `listener`'s shards: its name with only characters
/// a header value's formatter writes as they are (no `%`).
fn key_prefix(listener: &str) -> String {
    let safe: String = listener
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}/")
}

/// The name of shard `k` of listener `listener`: its RouteConfiguration's and its
/// scope's.
pub fn shard_name(listener: &str, k: usize) -> String {
    format!("{listener}/shard-{k:02}")
}

/// Shard `k`'s scope: its key, and the RouteConfiguration it names (over RDS).
pub fn scope(listener: &str, k: usize) -> Encoded {
    encoded(&ScopedRouteConfiguration {
        name: shard_name(listener, k),
        route_configuration_name: shard_name(listener, k),
        key: Some(scoped_route_configuration::Key {
            fragments: vec![scoped_route_configuration::key::Fragment {
                r#type: Some(scoped_route_configuration::key::fragment::Type::StringKey(
                    format!("{}{k}", key_prefix(listener)),
                )),
            }],
        }),
        ..Default::default()
    })
}

/// The connection manager's routing for a split listener: scopes over SRDS keyed on
/// [`SCOPE_HEADER`], their RouteConfigurations over RDS.
pub fn scoped_routes(listener: &str) -> ScopedRoutes {
    ScopedRoutes {
        name: listener.to_string(),
        scope_key_builder: Some(scoped_routes::ScopeKeyBuilder {
            fragments: vec![scoped_routes::scope_key_builder::FragmentBuilder {
                r#type: Some(
                    scoped_routes::scope_key_builder::fragment_builder::Type::HeaderValueExtractor(
                        scoped_routes::scope_key_builder::fragment_builder::HeaderValueExtractor {
                            name: SCOPE_HEADER.to_string(),
                            extract_type: Some(
                                scoped_routes::scope_key_builder::fragment_builder::header_value_extractor::ExtractType::Index(0),
                            ),
                            ..Default::default()
                        },
                    ),
                ),
            }],
        }),
        rds_config_source: Some(ads()),
        config_specifier: Some(scoped_routes::ConfigSpecifier::ScopedRds(ScopedRds {
            scoped_rds_config_source: Some(ads()),
            ..Default::default()
        })),
    }
}

/// The early header mutation writing a request's scope key (any value the client sent
/// is overwritten).
pub fn scope_header_mutation(listener: &str) -> TypedExtensionConfig {
    let value = format!("{}%CEL({})%", key_prefix(listener), shard_expression());
    TypedExtensionConfig {
        name: "isobar.route-shard".to_string(),
        typed_config: Some(pack_any(HeaderMutation {
            mutations: vec![Mutation {
                action: Some(header_mutation::Action::Append(HeaderValueOption {
                    header: Some(HeaderValue {
                        key: SCOPE_HEADER.to_string(),
                        value,
                        ..Default::default()
                    }),
                    append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                    ..Default::default()
                })),
            }],
        })),
    }
}

/// A shard's RouteConfiguration without vhosts: every RouteConfiguration's settings,
/// and the scope header removed before the request goes upstream.
pub fn route_shell(name: &str) -> Vec<u8> {
    let mut shell = crate::xds::route::route_configuration_shell(name);
    shell
        .request_headers_to_remove
        .push(SCOPE_HEADER.to_string());
    prost::Message::encode_to_vec(&shell)
}

/// Whether a vhost of this FQDN is in every shard (a wildcard or the default vhost).
pub fn in_every_shard(fqdn: &str) -> bool {
    fqdn.starts_with('*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The regular expressions the CEL expression uses, with their weights: (first
    /// label's, label before the last's).
    fn patterns() -> Vec<(usize, regex::Regex, regex::Regex)> {
        let mut out = Vec::new();
        for p in 0..POSITIONS {
            for (bit, class) in [(0, BIT0), (1, BIT1)] {
                let c = regex_class(class);
                let compile = |re: String| regex::Regex::new(&re).unwrap_or_else(|e| panic!("{e}"));
                out.push((
                    1usize << (2 * p + bit),
                    compile(format!("^[^.:]*{c}[^.:]{{{p}}}([.:]|$)")),
                    compile(format!("{c}[^.:]{{{p}}}[.][^.:]+[.]?(:[0-9]*)?$")),
                ));
            }
        }
        out
    }

    /// The shard of a host by those regular expressions.
    fn by_patterns(patterns: &[(usize, regex::Regex, regex::Regex)], host: &str) -> usize {
        let (mut first, mut second) = (0, 0);
        for (weight, one, two) in patterns {
            first += usize::from(one.is_match(host)) * weight;
            second += usize::from(two.is_match(host)) * weight;
        }
        (first + second) % SHARDS
    }

    /// The expression Envoy evaluates is made of those very patterns.
    #[test]
    fn the_cel_expression_holds_the_patterns() {
        let expression = shard_expression();
        for (_, one, two) in patterns() {
            assert!(expression.contains(&format!("matches('{}')", one.as_str())));
            assert!(expression.contains(&format!("matches('{}')", two.as_str())));
        }
    }

    /// Isobar's computation and the patterns Envoy evaluates agree on every host shape:
    /// ports, trailing dots, case, IP literals, one label, empty labels, odd characters.
    #[test]
    fn the_shard_of_a_host_is_the_one_envoy_computes() {
        let mut hosts: Vec<String> = [
            "",
            "a",
            "ab",
            "abc",
            "localhost",
            "localhost:8080",
            "foo.example.com",
            "Foo.Example.COM:8080",
            "foo.example.com.",
            "foo.example.com.:80",
            "a.b",
            "a.b.",
            ".",
            "..",
            "a..b",
            "a..",
            ".a",
            "[::1]:80",
            "[::1]",
            "10.0.0.1",
            "10.0.0.1:443",
            "x:y",
            "a.b:c:80",
            "a.b:",
            "a.b:x",
            "a-b_c.d-e.f",
            "ÿé.ü.com",
            "*.example.com",
            "site-1.example.com",
            "site-22.example.com",
            "www.a.com",
            "www.b.com",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Pseudo-random hosts over an alphabet with the separators.
        let alphabet: Vec<char> = "aZ09.:-_mN5.x:".chars().collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut host = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 14) as usize;
            for i in 0..len {
                let pick = ((state >> (i * 4)) as usize) % alphabet.len();
                host.push(alphabet[pick]);
            }
            hosts.push(host);
        }
        let patterns = patterns();
        for host in &hosts {
            assert_eq!(shard_of(host), by_patterns(&patterns, host), "{host:?}");
        }
    }

    /// A host's shard does not depend on its case, a port or a trailing dot, and the
    /// shards of many tenants' hosts spread over all of them.
    #[test]
    fn a_hosts_shard_ignores_case_port_and_trailing_dot_and_hosts_spread() {
        for host in ["foo.example.com", "site-123.tenants.example.org", "a.b"] {
            let k = shard_of(host);
            assert_eq!(shard_of(&host.to_ascii_uppercase()), k);
            assert_eq!(shard_of(&format!("{host}:8443")), k);
            assert_eq!(shard_of(&format!("{host}.")), k);
            assert_eq!(shard_of(&format!("{host}.:80")), k);
        }
        let mut counts = [0usize; SHARDS];
        for i in 0..10_000 {
            counts[shard_of(&format!("site-{i}.example.com"))] += 1;
        }
        let (min, max) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        assert!(min > 0 && max < 10_000 / SHARDS * 4, "{counts:?}");
    }
}
