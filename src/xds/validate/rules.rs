//! Which of protoc-gen-validate's rules the checker applies, and each message type's
//! plan: its fields' rules, read from the descriptors once.

use super::*;

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
pub(super) struct Rules {
    pub(super) field: Option<ExtensionDescriptor>,
    pub(super) oneof: Option<ExtensionDescriptor>,
    pub(super) disabled: Option<ExtensionDescriptor>,
    pub(super) ignored: Option<ExtensionDescriptor>,
}

impl Rules {
    pub(super) fn of(pool: &DescriptorPool) -> Rules {
        Rules {
            field: pool.get_extension_by_name("validate.rules"),
            oneof: pool.get_extension_by_name("validate.required"),
            disabled: pool.get_extension_by_name("validate.disabled"),
            ignored: pool.get_extension_by_name("validate.ignored"),
        }
    }
}

/// The rules of each field, decoded once.
pub(super) fn field_rules(rules: &Rules, field: &FieldDescriptor) -> Option<DynamicMessage> {
    let ext = rules.field.as_ref()?;
    let options = field.options();
    options
        .has_extension(ext)
        .then(|| options.get_extension(ext).as_message().cloned())
        .flatten()
}

/// One field's rules, taken apart once: `message.required` (beside the typed oneof) and
/// the typed rules (`string`, `repeated`, …) with their kind.
pub(super) struct FieldRules {
    pub(super) required: bool,
    pub(super) typed: Option<(String, RuleSet)>,
}

impl FieldRules {
    pub(super) fn of(rules: &DynamicMessage) -> FieldRules {
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
pub(super) struct Plan {
    pub(super) descriptor: prost_reflect::MessageDescriptor,
    /// `validate.disabled` or `validate.ignored`.
    pub(super) off: bool,
    pub(super) any: bool,
    /// Oneofs one member of which must be set.
    pub(super) required_oneofs: Vec<prost_reflect::OneofDescriptor>,
    /// In the order the type declares them.
    pub(super) fields: Vec<FieldPlan>,
    /// Each field's place in `fields`, by number.
    pub(super) by_number: HashMap<u32, usize>,
    /// The fields whose rules an unset field breaks (a required one, a string with a
    /// minimum length): their places in `fields`.
    pub(super) failing_unset: Vec<usize>,
    /// The field numbers of each oneof, by the oneof's place among the type's.
    pub(super) oneof_members: Vec<Vec<u32>>,
}

pub(super) struct FieldPlan {
    pub(super) field: FieldDescriptor,
    pub(super) rules: Option<FieldRules>,
    /// `message.skip`: its contents are not checked.
    pub(super) skip: bool,
    /// It holds messages (single, repeated or map values) to descend into.
    pub(super) nested: bool,
    /// The rules it breaks when unset: an unset field reads as its default, always the
    /// same, so they are worked out once.
    pub(super) unset: Vec<String>,
    /// What the walk on the bytes asks of the field, looked up once.
    pub(super) shape: Shape,
}

/// A field's shape, as the walk on the bytes needs it.
pub(super) struct Shape {
    pub(super) list: bool,
    pub(super) map: bool,
    /// It has presence (else, set to its default, it reads as unset).
    pub(super) presence: bool,
    /// Its oneof's place among the type's oneofs.
    pub(super) oneof: Option<usize>,
    /// The type of the messages it holds (itself, its items, a map's values).
    pub(super) holds: Option<prost_reflect::MessageDescriptor>,
    /// A map's entry type.
    pub(super) entry: Option<prost_reflect::MessageDescriptor>,
    /// The plan of `holds`, once it is first needed.
    pub(super) inner: OnceLock<Arc<Plan>>,
}

impl Shape {
    fn of(field: &FieldDescriptor, oneofs: &[prost_reflect::OneofDescriptor]) -> Shape {
        let entry = match field.kind() {
            Kind::Message(m) if field.is_map() => Some(m),
            _ => None,
        };
        let holds = match (&entry, field.kind()) {
            (Some(entry), _) => match entry.map_entry_value_field().kind() {
                Kind::Message(m) => Some(m),
                _ => None,
            },
            (None, Kind::Message(m)) => Some(m),
            _ => None,
        };
        Shape {
            list: field.is_list(),
            map: field.is_map(),
            presence: field.supports_presence(),
            oneof: field
                .containing_oneof()
                .and_then(|o| oneofs.iter().position(|x| x.full_name() == o.full_name())),
            holds,
            entry,
            inner: OnceLock::new(),
        }
    }

    /// The plan of the messages the field holds.
    pub(super) fn inner(&self, pool: &DescriptorPool) -> Option<&Arc<Plan>> {
        let holds = self.holds.as_ref()?;
        Some(self.inner.get_or_init(|| plan(pool, holds)))
    }
}

/// The plan of `descriptor`'s type (worked out on first use).
pub(super) fn plan(
    pool: &DescriptorPool,
    descriptor: &prost_reflect::MessageDescriptor,
) -> Arc<Plan> {
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
    let oneofs: Vec<prost_reflect::OneofDescriptor> = descriptor.oneofs().collect();
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
                shape: Shape::of(&field, &oneofs),
                field,
                rules,
                skip,
                nested,
                unset,
            }
        })
        .collect();
    let made = Arc::new(Plan {
        descriptor: descriptor.clone(),
        oneof_members: oneofs
            .iter()
            .map(|o| o.fields().map(|f| f.number()).collect())
            .collect(),
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

pub(super) fn flag(message: &DynamicMessage, ext: Option<&ExtensionDescriptor>) -> bool {
    ext.is_some_and(|e| {
        message.has_extension(e) && message.get_extension(e).as_bool() == Some(true)
    })
}

/// A set field of a rules message by name (as the plans are worked out).
pub(super) fn raw_rule<'a>(
    rules: &'a DynamicMessage,
    name: &str,
) -> Option<std::borrow::Cow<'a, Value>> {
    let field = rules.descriptor().get_field_by_name(name)?;
    rules.has_field(&field).then(|| rules.get_field(&field))
}

/// One rules message (`StringRules`, `RepeatedRules`, …) as the few fields it sets, taken
/// apart once: a string's checks ask for some thirty rules by name, and looking each
/// up in the message's descriptor was most of the time a check took.
pub(super) struct RuleSet(pub(super) Vec<(String, Value)>);

impl RuleSet {
    pub(super) fn of(rules: &DynamicMessage) -> RuleSet {
        RuleSet(
            rules
                .fields()
                .map(|(field, value)| (field.name().to_string(), value.clone()))
                .collect(),
        )
    }

    /// Whether it has an `in` or `not_in` list.
    pub(super) fn lists(&self) -> bool {
        self.0
            .iter()
            .any(|(name, _)| name == "in" || name == "not_in")
    }
}

/// A set rule of `rules` by name.
pub(super) fn rule<'a>(rules: &'a RuleSet, name: &str) -> Option<std::borrow::Cow<'a, Value>> {
    rules
        .0
        .iter()
        .find(|(set, _)| set == name)
        .map(|(_, value)| std::borrow::Cow::Borrowed(value))
}

/// A rule's name and the comparison it makes of a value with its bound.
pub(super) type Bound<T> = (&'static str, fn(T, T) -> bool);

/// A length rule: its name, the length it measures, the comparison with its bound.
pub(super) type Limit = (&'static str, u64, fn(u64, u64) -> bool);
