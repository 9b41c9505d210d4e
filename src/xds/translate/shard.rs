//! An HTTP listener's routes split into shards: 64 or more RouteConfigurations instead
//! of one, so that a change to one vhost makes Envoy rebuild a table of a few hundred
//! vhosts at most, not all of them (at 10,000 vhosts Envoy's own rebuild of one table
//! takes 100–200 ms). How many shards a listener has follows how many vhosts it has
//! ([`shard_count`]): the fewest shards, a power of two from 64 to 1,024, holding about
//! 200 vhosts each at most (64 up to 12,800 vhosts, 512 at 100,000).
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
//! characters each give two bits (whether they are in [`BIT0`], whether in [`BIT1`],
//! either case); the two values are added modulo the number of shards. Three characters
//! count for 64 shards, four for 128 and 256, five for 512 and 1,024, so a host's shard
//! among `n` is its shard among 1,024 modulo `n` ([`host_hash`]). Isobar computes the
//! same number for each vhost's FQDN ([`shard_of`]); the CEL expression
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

/// The fewest shards a split listener has.
pub const MIN_SHARDS: usize = 64;
/// The most shards a split listener has.
pub const MAX_SHARDS: usize = 1024;
/// How many vhosts a shard holds on average when a listener's shard count is chosen.
const PER_SHARD: usize = 200;

/// The request header the shard number is written to (and removed from again before the
/// request goes upstream).
pub const SCOPE_HEADER: &str = "x-isobar-scope";

/// Characters giving a position's first bit (lower case; upper case letters too).
pub const BIT0: &str = "acegikmoqsuwy02468";
/// Characters giving its second bit.
pub const BIT1: &str = "abefijmnqruvyz014589";

/// How many characters from the end of each label count for `shards` shards (a power
/// of two from [`MIN_SHARDS`] to [`MAX_SHARDS`]): two bits each, enough for the sum
/// of the two labels' values to reach every shard.
fn positions(shards: usize) -> usize {
    (shards.trailing_zeros() as usize).div_ceil(2)
}

/// How many shards a split listener with `vhosts` vhosts has, when it had `was` (`0`:
/// it was not split): the fewest, as a power of two from [`MIN_SHARDS`] to
/// [`MAX_SHARDS`], holding [`PER_SHARD`] vhosts each at most on average. A count is kept
/// while its shards hold a quarter to twice that on average, so a listener near a
/// boundary does not flip back and forth (a new count is a full build: every shard and
/// the listener change).
pub fn shard_count(vhosts: usize, was: usize) -> usize {
    let target = (vhosts / PER_SHARD)
        .next_power_of_two()
        .clamp(MIN_SHARDS, MAX_SHARDS);
    let keeps = was.is_power_of_two()
        && (MIN_SHARDS..=MAX_SHARDS).contains(&was)
        && (was == MIN_SHARDS || vhosts * 4 >= was * PER_SHARD)
        && (was == MAX_SHARDS || vhosts <= was * PER_SHARD * 2);
    if keeps { was } else { target }
}

fn in_class(c: char, class: &str) -> bool {
    class.contains(c.to_ascii_lowercase())
}

/// The two-bit value of each of the last `positions` characters of `label` (the last
/// first), combined: position `p` from the end weighs `4^p`.
fn label_value(label: &[char], positions: usize) -> usize {
    (0..positions)
        .filter_map(|p| label.len().checked_sub(p + 1).map(|i| (p, label[i])))
        .map(|(p, c)| char_bits(c) << (2 * p))
        .sum()
}

/// A character's two bits: in [`BIT0`], in [`BIT1`].
fn char_bits(c: char) -> usize {
    usize::from(in_class(c, BIT0)) + 2 * usize::from(in_class(c, BIT1))
}

/// The shard of a host among `shards` as Envoy computes it for a request (see the
/// module's docs): the host may carry a port and a trailing dot and be in any case.
pub fn shard_of(host: &str, shards: usize) -> usize {
    let positions = positions(shards);
    let chars: Vec<char> = host.chars().collect();
    let stop = |c: &char| *c == '.' || *c == ':';
    // The first label: up to the first '.' or ':'.
    let first_end = chars.iter().position(stop).unwrap_or(chars.len());
    let first = label_value(&chars[..first_end], positions);
    (first + second_to_last_value(&chars, positions)) % shards
}

/// A host's shard among [`MAX_SHARDS`]: its shard among any split listener's `n`
/// shards is this modulo `n`.
pub fn host_hash(host: &str) -> usize {
    shard_of(host, MAX_SHARDS)
}

/// The value of the label before the last one: the host without a port (`:` and
/// digits at its end) and one trailing dot must end in `.` and a label of at least one
/// character; the characters before that dot count (as many as are not `.` or `:`).
fn second_to_last_value(chars: &[char], positions: usize) -> usize {
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
    for p in 0..positions {
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

/// The CEL expression giving a request's shard number among `shards` (Envoy's CEL has
/// no conversion to a string: the header's value puts the listener's prefix before it).
pub fn shard_expression(shards: usize) -> String {
    let mut terms = Vec::new();
    for p in 0..positions(shards) {
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
    format!("({}) % {shards}", terms.join(" + "))
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

/// The early header mutation writing a request's scope key among `shards` (any value
/// the client sent is overwritten).
pub fn scope_header_mutation(listener: &str, shards: usize) -> TypedExtensionConfig {
    let value = format!(
        "{}%CEL({})%",
        key_prefix(listener),
        shard_expression(shards)
    );
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
mod tests;
