//! Envoy's own validation rules, checked in process: the protoc-gen-validate annotations
//! (`(validate.rules)`, `(validate.required)`) that Envoy enforces on every resource it
//! is sent, read from the descriptors envoy-types carries. A resource breaking one is
//! refused by Envoy together with every resource of its update (a NACK). So every build
//! `serve` publishes is checked first ([`vet_resources`], [`vet_changes`]: each resource
//! not already served as it is): one breaking a rule is withheld (Envoy keeps the version
//! it was sent, or gets none when it is new), and the runner traces it to the objects
//! whose changes made it, which go back to their previous version with a condition
//! naming the rule. `translate`, the tests and the fuzz targets check everything.
//!
//! Covered: every rule Envoy's API declares ([`SUPPORTED`]; a test walks every message
//! of the descriptors and fails on one not covered): message `required`/`skip`, oneof
//! `required`, strings (lengths in characters and bytes, `const`, `prefix`, `suffix`,
//! `contains`, `in`/`not_in`, `pattern` with RE2's meaning, the header well-known regexes,
//! and the email, hostname, IP, URI, address and UUID formats), bytes, numbers (also
//! inside `UInt32Value` and the other wrappers, when set), enums, repeated fields, maps,
//! durations and timestamps (their bounds and protobuf's own), `Any` (contents checked as
//! their own type). Beside the annotations, [`check`] applies the rules Envoy keeps in its
//! code ([`super::semantic`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use prost_reflect::{
    DescriptorPool, DynamicMessage, EnumDescriptor, ExtensionDescriptor, FieldDescriptor, Kind,
    MapKey, ReflectMessage, Value,
};

use super::XdsType;

mod checker;
mod formats;
mod rules;
#[cfg(test)]
mod tests;
mod wire;

use checker::*;
pub use formats::re2_meaning;
use formats::*;
use rules::*;
pub use rules::{declared_rules, supported};

/// Envoy's descriptors, from the envoy-types crate (found by `build.rs`).
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptors.bin"));

/// The descriptor pool of Envoy's API (with protoc-gen-validate's options).
pub fn pool() -> Result<&'static DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

pub use super::semantic::Violation;

/// Every rule of Envoy's that one encoded resource of type `t` breaks: its
/// protoc-gen-validate annotations and the rules Envoy keeps in code ([`super::semantic`]).
pub fn check(t: XdsType, bytes: &[u8]) -> Result<Vec<Violation>, String> {
    check_named(t, "", bytes)
}

/// [`check`] of the resource named `name` (rules about the name apply too).
pub fn check_named(t: XdsType, name: &str, bytes: &[u8]) -> Result<Vec<Violation>, String> {
    let mut out = annotations(t, bytes)?;
    out.extend(super::semantic::check(t, name, bytes));
    Ok(out)
}

/// Every protoc-gen-validate annotation one encoded resource of type `t` breaks.
pub fn annotations(t: XdsType, bytes: &[u8]) -> Result<Vec<Violation>, String> {
    let pool = pool()?;
    let name = t
        .type_url()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let descriptor = pool
        .get_message_by_name(&name)
        .ok_or_else(|| format!("no descriptor for {name}"))?;
    let mut out = Vec::new();
    Checker {
        pool,
        out: &mut out,
    }
    .encoded(&descriptor, bytes, &At::Root(&name))?;
    Ok(out)
}

/// The protoc-gen-validate annotations one encoded resource of type `t` breaks, found
/// by way of the whole resource decoded first: what the walk on its bytes ([`check`])
/// must report too, slower (the tests hold one to the other).
pub fn annotations_decoded(t: XdsType, bytes: &[u8]) -> Result<Vec<Violation>, String> {
    let pool = pool()?;
    let name = t.type_url().rsplit('/').next().unwrap_or_default();
    let descriptor = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("no descriptor for {name}"))?;
    let message = DynamicMessage::decode(descriptor, bytes).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    Checker {
        pool,
        out: &mut out,
    }
    .message(&message, &At::Root(name));
    Ok(out)
}

/// A resource Envoy would refuse, withheld from what is served: Envoy keeps the version
/// it was last sent (or none, when the resource is new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    pub xds_type: XdsType,
    pub name: String,
    pub violations: Vec<Violation>,
}

impl std::fmt::Display for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rules: Vec<String> = self.violations.iter().map(ToString::to_string).collect();
        write!(
            f,
            "{} {:?} breaks Envoy's rules and was not sent: {}",
            self.xds_type.short(),
            self.name,
            rules.join("; ")
        )
    }
}

/// The field of a route table (its vhosts) or a listener (its filter chains) whose
/// entries are checked one by one: an entry the served version holds byte for byte is
/// not checked again (a change to one vhost of a 4 MB table checks that vhost).
fn entry_field(t: XdsType) -> Option<u64> {
    match t {
        XdsType::Route | XdsType::VhdsRoute => Some(2),
        XdsType::Listener => Some(3),
        _ => None,
    }
}

/// A message's top-level fields: each field's number and the bytes it spans (tag
/// included). `None` when the bytes are not a well-formed message.
fn top_fields(bytes: &[u8]) -> Option<Vec<(u64, std::ops::Range<usize>)>> {
    use prost::encoding::decode_varint;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let mut buf = &bytes[pos..];
        let key = decode_varint(&mut buf).ok()?;
        let len = match key & 7 {
            0 => {
                decode_varint(&mut buf).ok()?;
                0
            }
            1 => 8,
            2 => usize::try_from(decode_varint(&mut buf).ok()?).ok()?,
            5 => 4,
            _ => return None,
        };
        let header = bytes.len() - pos - buf.len();
        let end = pos.checked_add(header)?.checked_add(len)?;
        if end > bytes.len() {
            return None;
        }
        out.push((key >> 3, pos..end));
        pos = end;
    }
    Some(out)
}

/// `bytes` less the entries (of [`entry_field`]) that `old` holds byte for byte; `None`
/// when nothing is left out.
fn changed_entries(t: XdsType, bytes: &[u8], old: &[u8]) -> Option<Vec<u8>> {
    let field = entry_field(t)?;
    let old_fields = top_fields(old)?;
    let held: std::collections::HashSet<&[u8]> = old_fields
        .iter()
        .filter(|(f, _)| *f == field)
        .map(|(_, r)| &old[r.clone()])
        .collect();
    let mut reduced = Vec::with_capacity(bytes.len() / 8);
    let mut left_out = false;
    for (f, range) in top_fields(bytes)? {
        let part = &bytes[range];
        if f == field && held.contains(part) {
            left_out = true;
        } else {
            reduced.extend_from_slice(part);
        }
    }
    left_out.then_some(reduced)
}

/// Why `bytes` of type `t` must not be sent, if it must not; `old`, the version served,
/// spares the entries it holds as they are.
fn refused(t: XdsType, name: &str, bytes: &[u8], old: Option<&[u8]>) -> Option<Withheld> {
    if old == Some(bytes) {
        // Served as it is: checked then.
        return None;
    }
    if let Some(reduced) = old.and_then(|old| changed_entries(t, bytes, old)) {
        let mut found = match annotations(t, &reduced) {
            Ok(v) => v,
            Err(e) => vec![Violation {
                path: String::new(),
                rule: format!("does not decode: {e}"),
            }],
        };
        found.extend(super::semantic::check_scoped(t, name, &reduced, true));
        found.extend(super::semantic::check_across(t, bytes));
        return (!found.is_empty()).then(|| Withheld {
            xds_type: t,
            name: name.to_string(),
            violations: found,
        });
    }
    let violations = match check_named(t, name, bytes) {
        Ok(v) if v.is_empty() => return None,
        Ok(v) => v,
        Err(e) => vec![Violation {
            path: String::new(),
            rule: format!("does not decode: {e}"),
        }],
    };
    Some(Withheld {
        xds_type: t,
        name: name.to_string(),
        violations,
    })
}

/// How many resources of a type to check before a second thread helps.
const PARALLEL_FROM: usize = 256;
/// How many bytes of resources of a type to check before a second thread helps.
const PARALLEL_BYTES: usize = 256 << 10;

/// Checks every resource of `resources` that `served` does not already hold, byte for
/// byte, against Envoy's rules; each that breaks one is put back to its served version
/// (or left out when new). What was withheld.
pub fn vet_resources(
    resources: &mut super::resource::Resources,
    served: Option<&super::snapshot::Snapshot>,
) -> Vec<Withheld> {
    let mut out = Vec::new();
    // The listeners and vhosts Envoy does not hold yet, for the rules across them.
    let mut coming: HashMap<XdsType, std::collections::BTreeSet<String>> = HashMap::new();
    for t in XdsType::ORDER.into_iter().chain([XdsType::VhdsRoute]) {
        let old = served.map(|s| s.get(t));
        let new: Vec<(&String, &super::resource::Encoded)> = resources
            .of_mut(t)
            .iter()
            .filter(|(name, bytes)| {
                let held = old.and_then(|o| o.digests.get(name.as_str()));
                held != Some(&super::snapshot::digest(bytes))
            })
            .collect();
        if matches!(t, XdsType::Listener | XdsType::VirtualHost) {
            coming.insert(t, new.iter().map(|(n, _)| (*n).clone()).collect());
        }
        let vet = |part: &[(&String, &super::resource::Encoded)]| -> Vec<Withheld> {
            part.iter()
                .filter_map(|(name, bytes)| {
                    let served = old.and_then(|o| o.resources.get(name.as_str()));
                    refused(t, name, bytes, served.map(|b| &b[..]))
                })
                .collect()
        };
        // A cold start checks every resource: on two threads when there are many.
        // A few big ones (the shards of a large listener's routes) count as many.
        let bytes: usize = new.iter().map(|(_, b)| b.len()).sum();
        let from = if bytes >= PARALLEL_BYTES {
            2
        } else {
            PARALLEL_FROM
        };
        let found: Vec<Withheld> = crate::parallel::in_halves(&new, from, vet);
        let mut put_back = Vec::new();
        for withheld in found {
            let previous = old.and_then(|o| o.resources.get(withheld.name.as_str()).cloned());
            put_back.push((withheld.name.clone(), previous));
            out.push(withheld);
        }
        let map = resources.of_mut(t);
        for (name, previous) in put_back {
            match previous {
                Some(previous) => map.insert(name, previous),
                None => map.remove(&name),
            };
        }
    }
    for t in [XdsType::Listener, XdsType::VirtualHost] {
        let old = served.map(|s| s.get(t));
        let map = resources.of(t);
        let all: Vec<(&str, &[u8])> = map.iter().map(|(n, b)| (n.as_str(), &b[..])).collect();
        let changed: std::collections::BTreeSet<&str> = coming
            .get(&t)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(
                |n| match (map.get(*n), old.and_then(|o| o.resources.get(*n))) {
                    (None, _) => false,
                    // A vhost whose domains stay cannot break the rule across vhosts.
                    (Some(new), Some(served)) if t == XdsType::VirtualHost => {
                        !super::semantic::same_domains(new, served)
                    }
                    _ => true,
                },
            )
            .collect();
        let flagged = across(t, &all, &changed);
        let map = resources.of_mut(t);
        for (name, violation) in flagged {
            match old.and_then(|o| o.resources.get(name.as_str()).cloned()) {
                Some(previous) => map.insert(name.clone(), previous),
                None => map.remove(&name),
            };
            out.push(Withheld {
                xds_type: t,
                name,
                violations: vec![violation],
            });
        }
    }
    out
}

/// The rules across the resources of type `t` ([`super::semantic::FAMILIES_ACROSS`]):
/// `all` is the set Envoy is to hold, `changed` names those it does not hold yet. What
/// is flagged is among `changed` (Envoy refuses the newcomer, not what it holds).
fn across(
    t: XdsType,
    all: &[(&str, &[u8])],
    changed: &std::collections::BTreeSet<&str>,
) -> Vec<(String, Violation)> {
    if changed.is_empty() {
        return Vec::new();
    }
    // What Envoy holds first, then what comes.
    fn ordered<'a>(
        part: &[(&'a str, &'a [u8])],
        changed: &std::collections::BTreeSet<&str>,
    ) -> Vec<(&'a str, &'a [u8])> {
        let (new, held): (Vec<_>, Vec<_>) = part.iter().partition(|(n, _)| changed.contains(n));
        held.into_iter().chain(new).collect()
    }
    match t {
        XdsType::Listener => super::semantic::listeners_across(&ordered(all, changed)),
        XdsType::VirtualHost => {
            let table = |name: &str| name.rsplit_once('/').map_or("", |(t, _)| t).to_string();
            let touched: std::collections::BTreeSet<String> =
                changed.iter().map(|n| table(n)).collect();
            let mut by_table: std::collections::BTreeMap<String, Vec<(&str, &[u8])>> =
                std::collections::BTreeMap::new();
            for (name, bytes) in all {
                let t = table(name);
                if touched.contains(&t) {
                    by_table.entry(t).or_default().push((name, bytes));
                }
            }
            by_table
                .iter()
                .flat_map(|(t, vhosts)| {
                    super::semantic::vhosts_across(t, &ordered(vhosts, changed))
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Checks the resources `changes` puts against Envoy's rules; each that breaks one is
/// put back to its version in `served` (or left out when new). What was withheld.
pub fn vet_changes(
    changes: &mut super::resource::Changes,
    served: &super::snapshot::Snapshot,
) -> Vec<Withheld> {
    let mut out = Vec::new();
    for (t, resources) in &mut changes.by_type {
        let old = served.get(*t);
        for (name, resource) in resources.iter_mut() {
            let Some(bytes) = resource else { continue };
            let served = old.resources.get(name.as_str());
            if let Some(withheld) = refused(*t, name, bytes, served.map(|b| &b[..])) {
                *resource = served.cloned();
                out.push(withheld);
            }
        }
        if matches!(t, XdsType::Listener | XdsType::VirtualHost) && needs_across(*t, resources, old)
        {
            // The set Envoy is to hold: what is served, changed as `resources` says.
            let all: Vec<(&str, &[u8])> = old
                .resources
                .iter()
                .filter(|(name, _)| !resources.contains_key(&***name))
                .map(|(n, b)| (&**n, &b[..]))
                .chain(
                    resources
                        .iter()
                        .filter_map(|(n, b)| b.as_ref().map(|b| (n.as_str(), &b[..]))),
                )
                .collect();
            let changed: std::collections::BTreeSet<&str> = resources
                .iter()
                .filter(|(_, b)| b.is_some())
                .map(|(n, _)| n.as_str())
                .collect();
            let flagged = across(*t, &all, &changed);
            drop(all);
            for (name, violation) in flagged {
                if let Some(resource) = resources.get_mut(&name) {
                    *resource = old.resources.get(name.as_str()).cloned();
                }
                out.push(Withheld {
                    xds_type: *t,
                    name,
                    violations: vec![violation],
                });
            }
        }
    }
    out
}

/// Whether a change of type `t` may break a rule across resources: a listener put that
/// is not the one served (a split listener is put again with each change to its
/// shards, as it was); a vhost put whose domains differ from its served version's (a
/// change inside a vhost leaves the merged table's domains as they were, and spares the
/// walk over them all).
fn needs_across(
    t: XdsType,
    resources: &std::collections::BTreeMap<String, Option<super::resource::Encoded>>,
    old: &super::snapshot::TypeSnapshot,
) -> bool {
    match t {
        XdsType::Listener => resources.iter().any(|(name, bytes)| {
            bytes.as_ref().is_some_and(|bytes| {
                old.resources
                    .get(name.as_str())
                    .is_none_or(|served| served[..] != bytes[..])
            })
        }),
        XdsType::VirtualHost => resources.iter().any(|(name, bytes)| {
            let Some(bytes) = bytes else { return false };
            old.resources
                .get(name.as_str())
                .is_none_or(|served| !super::semantic::same_domains(bytes, served))
        }),
        _ => false,
    }
}
