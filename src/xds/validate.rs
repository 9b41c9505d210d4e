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
fn annotations(t: XdsType, bytes: &[u8]) -> Result<Vec<Violation>, String> {
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
    let message = DynamicMessage::decode(descriptor, bytes).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    Checker {
        pool,
        out: &mut out,
    }
    .message(&message, &At::Root(&name));
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

/// Whether a change of type `t` may break a rule across resources: any listener put;
/// a vhost put whose domains differ from its served version's (a change inside a vhost
/// leaves the merged table's domains as they were, and spares the walk over them all).
fn needs_across(
    t: XdsType,
    resources: &std::collections::BTreeMap<String, Option<super::resource::Encoded>>,
    old: &super::snapshot::TypeSnapshot,
) -> bool {
    match t {
        XdsType::Listener => resources.values().any(Option::is_some),
        XdsType::VirtualHost => resources.iter().any(|(name, bytes)| {
            let Some(bytes) = bytes else { return false };
            old.resources
                .get(name.as_str())
                .is_none_or(|served| !super::semantic::same_domains(bytes, served))
        }),
        _ => false,
    }
}

/// Whether the checker applies `kind.rule` ([`SUPPORTED`], or a bound of a number).
pub fn supported(rule: &str) -> bool {
    const NUMBERS: [&str; 12] = [
        "float", "double", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
        "fixed64", "sfixed32", "sfixed64",
    ];
    const BOUNDS: [&str; 8] = [
        "const",
        "lt",
        "lte",
        "gt",
        "gte",
        "in",
        "not_in",
        "ignore_empty",
    ];
    SUPPORTED.contains(&rule)
        || rule
            .split_once('.')
            .is_some_and(|(kind, r)| NUMBERS.contains(&kind) && BOUNDS.contains(&r))
}

/// Every rule this checker applies, as `kind.rule` (`kind` the member of protoc-gen-validate's
/// `FieldRules.type`, `rule` a field of its rules message).
pub const SUPPORTED: &[&str] = &[
    "message.required",
    "message.skip",
    "repeated.min_items",
    "repeated.max_items",
    "repeated.unique",
    "repeated.items",
    "repeated.ignore_empty",
    "map.min_pairs",
    "map.max_pairs",
    "map.keys",
    "map.values",
    "map.ignore_empty",
    "map.no_sparse",
    "any.required",
    "any.in",
    "any.not_in",
    "duration.required",
    "duration.const",
    "duration.lt",
    "duration.lte",
    "duration.gt",
    "duration.gte",
    "timestamp.required",
    "timestamp.const",
    "timestamp.lt",
    "timestamp.lte",
    "timestamp.gt",
    "timestamp.gte",
    "timestamp.lt_now",
    "timestamp.gt_now",
    "timestamp.within",
    "string.len",
    "string.min_len",
    "string.max_len",
    "string.len_bytes",
    "string.min_bytes",
    "string.max_bytes",
    "string.const",
    "string.prefix",
    "string.suffix",
    "string.contains",
    "string.not_contains",
    "string.pattern",
    "string.in",
    "string.not_in",
    "string.well_known_regex",
    "string.strict",
    "string.ignore_empty",
    "string.email",
    "string.hostname",
    "string.ip",
    "string.ipv4",
    "string.ipv6",
    "string.uri",
    "string.uri_ref",
    "string.address",
    "string.uuid",
    "bytes.len",
    "bytes.min_len",
    "bytes.max_len",
    "bytes.const",
    "bytes.prefix",
    "bytes.suffix",
    "bytes.contains",
    "bytes.pattern",
    "bytes.in",
    "bytes.not_in",
    "bytes.ip",
    "bytes.ipv4",
    "bytes.ipv6",
    "bytes.ignore_empty",
    "enum.const",
    "enum.defined_only",
    "enum.in",
    "enum.not_in",
    "bool.const",
];

/// Every `kind.rule` Envoy's API declares, over every message of its descriptors (those
/// Isobar emits among them), with a field declaring it.
pub fn declared_rules() -> Result<std::collections::BTreeMap<String, String>, String> {
    let pool = pool()?;
    let rules = Rules::of(pool);
    let mut out = std::collections::BTreeMap::new();
    let mut note = |found: &DynamicMessage, field: &FieldDescriptor| {
        if let Some(Value::Message(message)) = raw_rule(found, "message").map(|v| v.into_owned()) {
            for (rule_field, _) in message.fields() {
                out.entry(format!("message.{}", rule_field.name()))
                    .or_insert_with(|| field.full_name().to_string());
            }
        }
        let Some((kind, Value::Message(typed))) = typed_rules(found) else {
            return;
        };
        for (rule_field, _) in typed.fields() {
            let name = format!("{kind}.{}", rule_field.name());
            out.entry(name)
                .or_insert_with(|| field.full_name().to_string());
        }
    };
    for message in pool.all_messages() {
        for field in message.fields() {
            let Some(found) = field_rules(&rules, &field) else {
                continue;
            };
            note(&found, &field);
            // The rules of repeated items and map keys and values.
            if let Some((_, Value::Message(typed))) = typed_rules(&found) {
                for inner in ["items", "keys", "values"] {
                    if let Some(Value::Message(each)) =
                        raw_rule(&typed, inner).map(|v| v.into_owned())
                    {
                        note(&each, &field);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The extensions carrying the rules.
struct Rules {
    field: Option<ExtensionDescriptor>,
    oneof: Option<ExtensionDescriptor>,
    disabled: Option<ExtensionDescriptor>,
    ignored: Option<ExtensionDescriptor>,
}

impl Rules {
    fn of(pool: &DescriptorPool) -> Rules {
        Rules {
            field: pool.get_extension_by_name("validate.rules"),
            oneof: pool.get_extension_by_name("validate.required"),
            disabled: pool.get_extension_by_name("validate.disabled"),
            ignored: pool.get_extension_by_name("validate.ignored"),
        }
    }
}

/// The rules of each field, decoded once.
fn field_rules(rules: &Rules, field: &FieldDescriptor) -> Option<DynamicMessage> {
    let ext = rules.field.as_ref()?;
    let options = field.options();
    options
        .has_extension(ext)
        .then(|| options.get_extension(ext).as_message().cloned())
        .flatten()
}

/// One field's rules, taken apart once: `message.required` (beside the typed oneof) and
/// the typed rules (`string`, `repeated`, …) with their kind.
struct FieldRules {
    required: bool,
    typed: Option<(String, RuleSet)>,
}

impl FieldRules {
    fn of(rules: &DynamicMessage) -> FieldRules {
        let required = raw_rule(rules, "message")
            .and_then(|m| {
                m.as_message()
                    .and_then(|m| raw_rule(m, "required"))
                    .map(|r| r.as_bool() == Some(true))
            })
            .unwrap_or(false);
        let typed = typed_rules(rules).and_then(|(kind, typed)| match typed {
            Value::Message(typed) => Some((kind, RuleSet::of(&typed))),
            _ => None,
        });
        FieldRules { required, typed }
    }
}

/// What checking one message type takes, worked out once per type.
struct Plan {
    /// `validate.disabled` or `validate.ignored`.
    off: bool,
    any: bool,
    /// Oneofs one member of which must be set.
    required_oneofs: Vec<prost_reflect::OneofDescriptor>,
    /// In the order the type declares them.
    fields: Vec<FieldPlan>,
    /// Each field's place in `fields`, by number.
    by_number: HashMap<u32, usize>,
    /// The fields whose rules an unset field breaks (a required one, a string with a
    /// minimum length): their places in `fields`.
    failing_unset: Vec<usize>,
}

struct FieldPlan {
    field: FieldDescriptor,
    rules: Option<FieldRules>,
    /// `message.skip`: its contents are not checked.
    skip: bool,
    /// It holds messages (single, repeated or map values) to descend into.
    nested: bool,
    /// The rules it breaks when unset: an unset field reads as its default, always the
    /// same, so they are worked out once.
    unset: Vec<String>,
}

/// The plan of `descriptor`'s type (worked out on first use).
fn plan(pool: &DescriptorPool, descriptor: &prost_reflect::MessageDescriptor) -> Arc<Plan> {
    type Plans = std::sync::RwLock<HashMap<String, Arc<Plan>>>;
    static PLANS: OnceLock<Plans> = OnceLock::new();
    let plans = PLANS.get_or_init(Plans::default);
    if let Ok(plans) = plans.read()
        && let Some(found) = plans.get(descriptor.full_name())
    {
        return found.clone();
    }
    let rules = Rules::of(pool);
    let options = descriptor.options();
    let fields: Vec<FieldPlan> = descriptor
        .fields()
        .map(|field| {
            let found = field_rules(&rules, &field);
            let skip = found
                .as_ref()
                .and_then(|r| raw_rule(r, "message"))
                .and_then(|m| {
                    m.as_message()
                        .and_then(|m| raw_rule(m, "skip"))
                        .map(|s| s.as_bool() == Some(true))
                })
                .unwrap_or(false);
            let nested = matches!(field.kind(), Kind::Message(_));
            let rules = found.as_ref().map(FieldRules::of);
            // Rules of a oneof member apply only to the member that is set.
            let mut unset = Vec::new();
            if let Some(rules) = rules
                .as_ref()
                .filter(|_| field.containing_oneof().is_none())
            {
                let mut found = Vec::new();
                let default = field.default_value();
                Checker {
                    pool,
                    out: &mut found,
                }
                .field(&field, &default, false, rules, &At::Root(""));
                unset = found.into_iter().map(|v| v.rule).collect();
            }
            FieldPlan {
                field,
                rules,
                skip,
                nested,
                unset,
            }
        })
        .collect();
    let made = Arc::new(Plan {
        off: flag(&options, rules.disabled.as_ref()) || flag(&options, rules.ignored.as_ref()),
        any: descriptor.full_name() == "google.protobuf.Any",
        required_oneofs: descriptor
            .oneofs()
            .filter(|o| flag(&o.options(), rules.oneof.as_ref()))
            .collect(),
        by_number: fields
            .iter()
            .enumerate()
            .map(|(at, f)| (f.field.number(), at))
            .collect(),
        failing_unset: (0..fields.len())
            .filter(|at| !fields[*at].unset.is_empty())
            .collect(),
        fields,
    });
    if let Ok(mut plans) = plans.write() {
        plans.insert(descriptor.full_name().to_string(), made.clone());
    }
    made
}

fn flag(message: &DynamicMessage, ext: Option<&ExtensionDescriptor>) -> bool {
    ext.is_some_and(|e| {
        message.has_extension(e) && message.get_extension(e).as_bool() == Some(true)
    })
}

/// A set field of a rules message by name (as the plans are worked out).
fn raw_rule<'a>(rules: &'a DynamicMessage, name: &str) -> Option<std::borrow::Cow<'a, Value>> {
    let field = rules.descriptor().get_field_by_name(name)?;
    rules.has_field(&field).then(|| rules.get_field(&field))
}

/// One rules message (`StringRules`, `RepeatedRules`, …) as the few fields it sets, taken
/// apart once: a string's checks ask for some thirty rules by name, and looking each
/// up in the message's descriptor was most of the time a check took.
struct RuleSet(Vec<(String, Value)>);

impl RuleSet {
    fn of(rules: &DynamicMessage) -> RuleSet {
        RuleSet(
            rules
                .fields()
                .map(|(field, value)| (field.name().to_string(), value.clone()))
                .collect(),
        )
    }

    /// Whether it has an `in` or `not_in` list.
    fn lists(&self) -> bool {
        self.0
            .iter()
            .any(|(name, _)| name == "in" || name == "not_in")
    }
}

/// A set rule of `rules` by name.
fn rule<'a>(rules: &'a RuleSet, name: &str) -> Option<std::borrow::Cow<'a, Value>> {
    rules
        .0
        .iter()
        .find(|(set, _)| set == name)
        .map(|(_, value)| std::borrow::Cow::Borrowed(value))
}

/// A rule's name and the comparison it makes of a value with its bound.
type Bound<T> = (&'static str, fn(T, T) -> bool);

/// A length rule: its name, the length it measures, the comparison with its bound.
type Limit = (&'static str, u64, fn(u64, u64) -> bool);

/// Where a value sits in a resource (`Cluster.load_assignment.endpoints[0]`), put into
/// words only when it breaks a rule: a walk meets far more places than violations.
#[derive(Clone, Copy)]
enum At<'a> {
    Root(&'a str),
    Field(&'a At<'a>, &'a str),
    Item(&'a At<'a>, usize),
    Key(&'a At<'a>, &'a MapKey),
    /// The contents of an `Any`, by the type they decode as.
    Any(&'a At<'a>, &'a str),
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Root(name) => f.write_str(name),
            At::Field(up, name) => write!(f, "{up}.{name}"),
            At::Item(up, i) => write!(f, "{up}[{i}]"),
            At::Key(up, key) => write!(f, "{up}[{}]", map_key(key)),
            At::Any(up, name) => write!(f, "{up}<{name}>"),
        }
    }
}

struct Checker<'a> {
    pool: &'a DescriptorPool,
    out: &'a mut Vec<Violation>,
}

impl Checker<'_> {
    fn fail(&mut self, path: &At<'_>, rule: impl Into<String>) {
        self.out.push(Violation {
            path: path.to_string(),
            rule: rule.into(),
        });
    }

    fn message(&mut self, message: &DynamicMessage, path: &At<'_>) {
        let plan = plan(self.pool, &message.descriptor());
        if plan.off {
            return;
        }
        if plan.any {
            self.any_contents(message, path);
            return;
        }
        for oneof in &plan.required_oneofs {
            if !oneof.fields().any(|f| message.has_field(&f)) {
                self.fail(path, format!("one of {} is required", oneof.name()));
            }
        }
        // The fields set, and those whose rules an unset field breaks, in the order the
        // type declares them (the order violations are reported in).
        let mut visit: Vec<(usize, Option<&Value>)> = message
            .fields()
            .filter_map(|(field, value)| {
                let at = *plan.by_number.get(&field.number())?;
                let f = &plan.fields[at];
                (f.rules.is_some() || f.nested).then_some((at, Some(value)))
            })
            .collect();
        for at in &plan.failing_unset {
            if !message.has_field(&plan.fields[*at].field) {
                visit.push((*at, None));
            }
        }
        visit.sort_by_key(|(at, _)| *at);
        for (at, value) in visit {
            let f = &plan.fields[at];
            let here = At::Field(path, f.field.name());
            let Some(value) = value else {
                for rule in &f.unset {
                    self.fail(&here, rule.clone());
                }
                continue;
            };
            if let Some(rules) = &f.rules {
                self.field(&f.field, value, true, rules, &here);
            }
            if f.nested && !f.skip {
                self.descend(value, &here);
            }
        }
    }

    /// Nested messages (single, repeated, map values) are checked with their own rules.
    fn descend(&mut self, value: &Value, path: &At<'_>) {
        match value {
            Value::Message(m) => self.message(m, path),
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Message(m) = item {
                        self.message(m, &At::Item(path, i));
                    }
                }
            }
            Value::Map(entries) => {
                for (key, item) in entries {
                    if let Value::Message(m) = item {
                        self.message(m, &At::Key(path, key));
                    }
                }
            }
            _ => {}
        }
    }

    /// An `Any`: its contents, decoded as the type it names, checked in turn.
    fn any_contents(&mut self, any: &DynamicMessage, path: &At<'_>) {
        let text = |name: &str| {
            any.get_field_by_name(name)
                .map(|v| v.into_owned())
                .unwrap_or(Value::Bool(false))
        };
        let (Value::String(url), Value::Bytes(bytes)) = (text("type_url"), text("value")) else {
            return;
        };
        let name = url.rsplit('/').next().unwrap_or_default();
        let Some(descriptor) = self.pool.get_message_by_name(name) else {
            self.fail(path, format!("an Any of unknown type {url}"));
            return;
        };
        match DynamicMessage::decode(descriptor, bytes.as_ref()) {
            Ok(inner) => self.message(&inner, &At::Any(path, name)),
            Err(e) => self.fail(path, format!("an Any that does not decode as {name}: {e}")),
        }
    }

    fn field(
        &mut self,
        field: &FieldDescriptor,
        value: &Value,
        set: bool,
        rules: &FieldRules,
        path: &At<'_>,
    ) {
        if rules.required && !set {
            self.fail(path, "required");
        }
        let Some((kind, typed)) = &rules.typed else {
            return;
        };
        match kind.as_str() {
            "repeated" => self.repeated(field, value, typed, path),
            "map" => self.map(field, value, typed, path),
            "any" => {
                if rule(typed, "required").is_some_and(|r| r.as_bool() == Some(true)) && !set {
                    self.fail(path, "required");
                }
                if set && let Value::Message(any) = value {
                    self.any_rules(any, typed, path);
                }
            }
            "duration" => {
                if rule(typed, "required").is_some_and(|r| r.as_bool() == Some(true)) && !set {
                    self.fail(path, "required");
                }
                if set && let Value::Message(d) = value {
                    self.duration(d, typed, path);
                }
            }
            "timestamp" => {
                if rule(typed, "required").is_some_and(|r| r.as_bool() == Some(true)) && !set {
                    self.fail(path, "required");
                }
                if set && let Value::Message(t) = value {
                    self.timestamp(t, typed, path);
                }
            }
            _ => match value {
                // A wrapper (UInt32Value & co.): the rules apply to its value, when set.
                Value::Message(wrapper) => {
                    if set && let Some(inner) = wrapper.get_field_by_name("value") {
                        self.scalar(kind, &inner, typed, path, enum_of(field));
                    }
                }
                _ => self.scalar(kind, value, typed, path, enum_of(field)),
            },
        }
    }

    /// A repeated field's or map's `min_*`/`max_*` rules on its `count` of `what`.
    fn count_bounds(
        &mut self,
        path: &At<'_>,
        count: usize,
        rules: &RuleSet,
        (min_rule, max_rule): (&str, &str),
        what: &str,
    ) {
        let count = count as u64;
        if let Some(min) = rule(rules, min_rule).and_then(|v| v.as_u64())
            && count < min
        {
            self.fail(path, format!("at least {min} {what} (has {count})"));
        }
        if let Some(max) = rule(rules, max_rule).and_then(|v| v.as_u64())
            && count > max
        {
            self.fail(path, format!("at most {max} {what} (has {count})"));
        }
    }

    fn repeated(&mut self, field: &FieldDescriptor, value: &Value, rules: &RuleSet, path: &At<'_>) {
        let Value::List(items) = value else { return };
        if items.is_empty() && ignore_empty(rules) {
            return;
        }
        self.count_bounds(
            path,
            items.len(),
            rules,
            ("min_items", "max_items"),
            "items",
        );
        if rule(rules, "unique").is_some_and(|v| v.as_bool() == Some(true)) {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    self.fail(&At::Item(path, i), "unique items");
                }
            }
        }
        if let Some(Value::Message(each)) = rule(rules, "items").map(|v| v.into_owned()) {
            let each = FieldRules::of(&each);
            for (i, item) in items.iter().enumerate() {
                self.field(field, item, true, &each, &At::Item(path, i));
            }
        }
    }

    fn map(&mut self, field: &FieldDescriptor, value: &Value, rules: &RuleSet, path: &At<'_>) {
        let value_field = match field.kind() {
            Kind::Message(entry) => Some(entry.map_entry_value_field()),
            _ => None,
        };
        let Value::Map(entries) = value else { return };
        if entries.is_empty() && ignore_empty(rules) {
            return;
        }
        self.count_bounds(
            path,
            entries.len(),
            rules,
            ("min_pairs", "max_pairs"),
            "pairs",
        );
        // The keys' and values' rules, taken apart once for every entry.
        let typed = |name: &str| match rule(rules, name).as_deref() {
            Some(Value::Message(each)) => match typed_rules(each) {
                Some((kind, Value::Message(typed))) => Some((kind, RuleSet::of(&typed))),
                _ => None,
            },
            _ => None,
        };
        let keys = typed("keys");
        let values = typed("values").filter(|(kind, _)| {
            !matches!(
                kind.as_str(),
                "message" | "any" | "duration" | "repeated" | "map" | "timestamp"
            )
        });
        let value_enum = value_field.as_ref().and_then(enum_of);
        for (key, item) in entries {
            let at = At::Key(path, key);
            if let Some((kind, typed)) = &keys {
                self.scalar(kind, &map_key_value(key), typed, &at, None);
            }
            if let Some((kind, typed)) = &values {
                self.scalar(kind, item, typed, &at, value_enum.clone());
            }
        }
    }

    fn any_rules(&mut self, any: &DynamicMessage, rules: &RuleSet, path: &At<'_>) {
        let url = any
            .get_field_by_name("type_url")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        if let Some(Value::List(allowed)) = rule(rules, "in").map(|v| v.into_owned())
            && !allowed.iter().any(|a| a.as_str() == Some(url.as_str()))
        {
            self.fail(
                path,
                format!("an Any of one of the allowed types, not {url}"),
            );
        }
        if let Some(Value::List(refused)) = rule(rules, "not_in").map(|v| v.into_owned())
            && refused.iter().any(|a| a.as_str() == Some(url.as_str()))
        {
            self.fail(path, format!("an Any not of type {url}"));
        }
    }

    fn timestamp(&mut self, t: &DynamicMessage, rules: &RuleSet, path: &At<'_>) {
        let value = nanos_of(t);
        self.time_bounds("timestamp", value, rules, path);
        let bound = |name: &str| rule(rules, name).and_then(|v| v.as_message().map(nanos_of));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let flag = |name: &str| rule(rules, name).is_some_and(|v| v.as_bool() == Some(true));
        if flag("lt_now") && value >= now {
            self.fail(path, "timestamp lt_now (it is not in the past)");
        }
        if flag("gt_now") && value <= now {
            self.fail(path, "timestamp gt_now (it is not in the future)");
        }
        if let Some(within) = bound("within")
            && (value - now).abs() > within
        {
            self.fail(path, format!("timestamp within {within} ns of now"));
        }
    }

    fn duration(&mut self, d: &DynamicMessage, rules: &RuleSet, path: &At<'_>) {
        let value = nanos_of(d);
        // Protobuf's own range: ±10,000 years.
        if value.abs() > 315_576_000_000 * 1_000_000_000 {
            self.fail(path, "a duration within protobuf's ±315,576,000,000 s");
        }
        self.time_bounds("duration", value, rules, path);
    }

    /// A duration's or timestamp's `const`, `lt`, `lte`, `gt` and `gte`, in nanoseconds.
    fn time_bounds(&mut self, what: &str, value: i128, rules: &RuleSet, path: &At<'_>) {
        let checks: [Bound<i128>; 5] = [
            ("const", |v, b| v == b),
            ("lt", |v, b| v < b),
            ("lte", |v, b| v <= b),
            ("gt", |v, b| v > b),
            ("gte", |v, b| v >= b),
        ];
        for (name, holds) in checks {
            if let Some(b) = rule(rules, name).and_then(|v| v.as_message().map(nanos_of))
                && !holds(value, b)
            {
                self.fail(path, format!("{what} {name} {b} ns (is {value} ns)"));
            }
        }
    }

    fn scalar(
        &mut self,
        kind: &str,
        value: &Value,
        rules: &RuleSet,
        path: &At<'_>,
        enumeration: Option<EnumDescriptor>,
    ) {
        match kind {
            "string" => self.string(value.as_str().unwrap_or_default(), rules, path),
            "bytes" => self.bytes(
                value.as_bytes().map(|b| b.as_ref()).unwrap_or_default(),
                rules,
                path,
            ),
            "enum" => {
                let number = value.as_enum_number().unwrap_or(0);
                if rule(rules, "defined_only").is_some_and(|v| v.as_bool() == Some(true))
                    && let Some(e) = &enumeration
                    && e.get_value(number).is_none()
                {
                    self.fail(path, format!("a value {} defines (not {number})", e.name()));
                }
                self.listed(path, &Value::I32(number), rules);
            }
            "bool" => {
                if let Some(c) = rule(rules, "const")
                    && c.as_ref() != value
                {
                    self.fail(path, format!("const {c:?}"));
                }
            }
            _ => self.number(value, rules, path),
        }
    }

    /// `in` and `not_in` of any scalar.
    fn listed(&mut self, path: &At<'_>, value: &Value, rules: &RuleSet) {
        let same = |a: &Value| {
            number_of(a)
                .zip(number_of(value))
                .map_or(a == value, |(x, y)| x == y)
        };
        if let Some(Value::List(allowed)) = rule(rules, "in").map(|v| v.into_owned())
            && !allowed.is_empty()
            && !allowed.iter().any(same)
        {
            self.fail(path, format!("one of {allowed:?}"));
        }
        if let Some(Value::List(refused)) = rule(rules, "not_in").map(|v| v.into_owned())
            && refused.iter().any(same)
        {
            self.fail(path, format!("none of {refused:?}"));
        }
    }

    fn number(&mut self, value: &Value, rules: &RuleSet, path: &At<'_>) {
        let Some(v) = number_of(value) else { return };
        if v == 0.0 && ignore_empty(rules) {
            return;
        }
        let checks: [Bound<f64>; 5] = [
            ("const", |v, b| v == b),
            ("lt", |v, b| v < b),
            ("lte", |v, b| v <= b),
            ("gt", |v, b| v > b),
            ("gte", |v, b| v >= b),
        ];
        for (name, holds) in checks {
            if let Some(b) = rule(rules, name).and_then(|b| number_of(&b))
                && !holds(v, b)
            {
                self.fail(path, format!("{name} {b} (is {v})"));
            }
        }
        self.listed(path, value, rules);
    }

    fn bytes(&mut self, data: &[u8], rules: &RuleSet, path: &At<'_>) {
        if data.is_empty() && ignore_empty(rules) {
            return;
        }
        let len = data.len() as u64;
        let limits: [Limit; 3] = [
            ("len", len, |v, b| v == b),
            ("min_len", len, |v, b| v >= b),
            ("max_len", len, |v, b| v <= b),
        ];
        for (name, measured, holds) in limits {
            if let Some(b) = rule(rules, name).and_then(|v| v.as_u64())
                && !holds(measured, b)
            {
                self.fail(path, format!("bytes {name} {b} (is {measured})"));
            }
        }
        let bytes_rule =
            |name: &str| rule(rules, name).and_then(|v| v.as_bytes().map(|b| b.to_vec()));
        if let Some(c) = bytes_rule("const")
            && c != data
        {
            self.fail(path, "bytes const");
        }
        if let Some(p) = bytes_rule("prefix")
            && !data.starts_with(&p)
        {
            self.fail(path, "bytes prefix");
        }
        if let Some(p) = bytes_rule("suffix")
            && !data.ends_with(&p)
        {
            self.fail(path, "bytes suffix");
        }
        if let Some(c) = bytes_rule("contains")
            && !c.is_empty()
            && !data.windows(c.len()).any(|w| w == c.as_slice())
        {
            self.fail(path, "bytes contains");
        }
        if let Some(pattern) = rule(rules, "pattern").and_then(|v| v.as_str().map(str::to_string))
            && !matches_bytes_pattern(&pattern, data)
        {
            self.fail(path, format!("bytes pattern {pattern:?}"));
        }
        let flag = |name: &str| rule(rules, name).is_some_and(|v| v.as_bool() == Some(true));
        let (ip, v4, v6) = (flag("ip"), flag("ipv4"), flag("ipv6"));
        if (ip && !matches!(data.len(), 4 | 16))
            || (v4 && data.len() != 4)
            || (v6 && data.len() != 16)
        {
            self.fail(path, "bytes an IP address (4 or 16 bytes)");
        }
        if rules.lists() {
            self.listed(path, &Value::Bytes(data.to_vec().into()), rules);
        }
    }

    fn string(&mut self, text: &str, rules: &RuleSet, path: &At<'_>) {
        if text.is_empty() && ignore_empty(rules) {
            return;
        }
        let chars = text.chars().count() as u64;
        let bytes = text.len() as u64;
        let limits: [Limit; 6] = [
            ("len", chars, |v, b| v == b),
            ("min_len", chars, |v, b| v >= b),
            ("max_len", chars, |v, b| v <= b),
            ("len_bytes", bytes, |v, b| v == b),
            ("min_bytes", bytes, |v, b| v >= b),
            ("max_bytes", bytes, |v, b| v <= b),
        ];
        for (name, measured, holds) in limits {
            if let Some(b) = rule(rules, name).and_then(|v| v.as_u64())
                && !holds(measured, b)
            {
                self.fail(path, format!("{name} {b} (is {measured})"));
            }
        }
        let text_rule = |name: &str| rule(rules, name).and_then(|v| v.as_str().map(str::to_string));
        if let Some(c) = text_rule("const")
            && c != text
        {
            self.fail(path, format!("const {c:?}"));
        }
        if let Some(p) = text_rule("prefix")
            && !text.starts_with(&p)
        {
            self.fail(path, format!("prefix {p:?}"));
        }
        if let Some(s) = text_rule("suffix")
            && !text.ends_with(&s)
        {
            self.fail(path, format!("suffix {s:?}"));
        }
        if let Some(c) = text_rule("contains")
            && !text.contains(&c)
        {
            self.fail(path, format!("contains {c:?}"));
        }
        if let Some(c) = text_rule("not_contains")
            && text.contains(&c)
        {
            self.fail(path, format!("not_contains {c:?}"));
        }
        if let Some(pattern) = text_rule("pattern")
            && !matches_pattern(&pattern, text)
        {
            self.fail(path, format!("pattern {pattern:?}"));
        }
        if let Some(known) = rule(rules, "well_known_regex").and_then(|v| v.as_enum_number()) {
            // Strict unless `strict: false` (protoc-gen-validate's default).
            let strict = rule(rules, "strict").is_none_or(|v| v.as_bool() != Some(false));
            let bad = match (known, strict) {
                // HTTP_HEADER_NAME
                (1, true) => {
                    let name = text.strip_prefix(':').unwrap_or(text);
                    name.is_empty()
                        || !name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_|~`".contains(&b))
                }
                // HTTP_HEADER_VALUE
                (2, true) => text
                    .chars()
                    .any(|c| (c < ' ' && c != '\t') || c == '\u{7f}'),
                (1 | 2, false) => text.contains(['\0', '\n', '\r']),
                _ => false,
            };
            if bad {
                self.fail(path, format!("well_known_regex {known} (strict: {strict})"));
            }
        }
        let flag = |name: &str| rule(rules, name).is_some_and(|v| v.as_bool() == Some(true));
        for (name, holds) in FORMATS {
            if flag(name) && !holds(text) {
                self.fail(path, format!("string {name} (is {text:?})"));
            }
        }
        if rules.lists() {
            self.listed(path, &Value::String(text.to_string()), rules);
        }
    }
}

/// protoc-gen-validate's well-known string formats, as its C++ validators read them.
type Format = (&'static str, fn(&str) -> bool);

const FORMATS: [Format; 9] = [
    ("email", is_email),
    ("hostname", is_hostname),
    ("ip", |t| t.parse::<std::net::IpAddr>().is_ok()),
    ("ipv4", |t| t.parse::<std::net::Ipv4Addr>().is_ok()),
    ("ipv6", |t| t.parse::<std::net::Ipv6Addr>().is_ok()),
    ("uri", is_uri),
    ("uri_ref", |t| {
        !t.chars().any(|c| c.is_whitespace() || c.is_control())
    }),
    ("address", |t| {
        t.parse::<std::net::IpAddr>().is_ok() || is_hostname(t)
    }),
    ("uuid", is_uuid),
];

/// A host name: at most 253 characters (one trailing dot allowed), labels of 1 to 63
/// letters, digits and hyphens, not starting or ending with a hyphen.
fn is_hostname(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `local@host`: a local part of 1 to 64 characters and a host name.
fn is_email(text: &str) -> bool {
    let text = text
        .rsplit_once('<')
        .and_then(|(_, rest)| rest.strip_suffix('>'))
        .unwrap_or(text);
    match text.rsplit_once('@') {
        Some((local, host)) => {
            !local.is_empty()
                && local.len() <= 64
                && !local.chars().any(|c| c.is_whitespace() || c.is_control())
                && is_hostname(host)
        }
        None => false,
    }
}

/// An absolute URI: a scheme (a letter, then letters, digits, `+`, `-`, `.`), `:`, and
/// no white space or control characters.
fn is_uri(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// 8-4-4-4-12 hexadecimal digits.
fn is_uuid(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A `Duration`'s or `Timestamp`'s nanoseconds.
fn nanos_of(m: &DynamicMessage) -> i128 {
    let seconds = m
        .get_field_by_name("seconds")
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let nanos = m
        .get_field_by_name("nanos")
        .and_then(|v| v.as_i32())
        .unwrap_or(0);
    i128::from(seconds) * 1_000_000_000 + i128::from(nanos)
}

fn enum_of(field: &FieldDescriptor) -> Option<EnumDescriptor> {
    match field.kind() {
        Kind::Enum(e) => Some(e),
        _ => None,
    }
}

fn ignore_empty(rules: &RuleSet) -> bool {
    rule(rules, "ignore_empty").is_some_and(|v| v.as_bool() == Some(true))
}

/// The set member of a `FieldRules`' `type` oneof: its name and rules.
fn typed_rules(rules: &DynamicMessage) -> Option<(String, Value)> {
    rules
        .descriptor()
        .oneofs()
        .next()
        .and_then(|o| o.fields().find(|f| rules.has_field(f)))
        .map(|f| (f.name().to_string(), rules.get_field(&f).into_owned()))
}

fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::I32(v) => Some(f64::from(*v)),
        Value::I64(v) => Some(*v as f64),
        Value::U32(v) => Some(f64::from(*v)),
        Value::U64(v) => Some(*v as f64),
        Value::F32(v) => Some(f64::from(*v)),
        Value::F64(v) => Some(*v),
        Value::EnumNumber(v) => Some(f64::from(*v)),
        _ => None,
    }
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}

fn map_key_value(key: &MapKey) -> Value {
    match key {
        MapKey::Bool(b) => Value::Bool(*b),
        MapKey::I32(v) => Value::I32(*v),
        MapKey::I64(v) => Value::I64(*v),
        MapKey::U32(v) => Value::U32(*v),
        MapKey::U64(v) => Value::U64(*v),
        MapKey::String(s) => Value::String(s.clone()),
    }
}

/// A protoc-gen-validate `pattern` matched against `text` with RE2's meaning (Envoy's
/// validators run RE2): see [`re2_meaning`]; compiled once each.
fn matches_pattern(pattern: &str, text: &str) -> bool {
    matches_bytes_pattern(pattern, text.as_bytes())
}

fn matches_bytes_pattern(pattern: &str, data: &[u8]) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::bytes::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let Ok(mut cache) = cache.lock() else {
        return true;
    };
    let compiled = cache
        .entry(pattern.to_string())
        .or_insert_with(|| regex::bytes::Regex::new(&re2_meaning(pattern)).ok());
    compiled.as_ref().is_none_or(|r| r.is_match(data))
}

/// `pattern` rewritten so that Rust's regex gives it RE2's meaning: RE2's Perl classes
/// (`\d`, `\w`, `\s` and their negations) are ASCII-only where Rust's are Unicode, and
/// `\s` leaves out the vertical tab. Everything else means the same in both.
pub fn re2_meaning(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push(c);
                    break;
                };
                let (inner, negated) = match next {
                    'd' => ("0-9", false),
                    'w' => ("0-9A-Za-z_", false),
                    's' => ("\\t\\n\\x0C\\r ", false),
                    'D' => ("0-9", true),
                    'W' => ("0-9A-Za-z_", true),
                    'S' => ("\\t\\n\\x0C\\r ", true),
                    _ => {
                        out.push(c);
                        out.push(next);
                        continue;
                    }
                };
                match (in_class, negated) {
                    (false, false) => out.push_str(&format!("[{inner}]")),
                    (false, true) => out.push_str(&format!("[^{inner}]")),
                    (true, false) => out.push_str(inner),
                    // A negated class inside a class: Rust's nested class keeps it.
                    (true, true) => out.push_str(&format!("[^{inner}]")),
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A leading `]` (or `^]`) is a literal, not the end.
                let rest = chars.as_str();
                let skip = if rest.starts_with("^]") {
                    2
                } else if rest.starts_with(']') {
                    1
                } else {
                    0
                };
                for _ in 0..skip {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
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
        use envoy_types::pb::envoy::config::listener::v3::{
            FilterChain, FilterChainMatch, Listener,
        };
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
}
