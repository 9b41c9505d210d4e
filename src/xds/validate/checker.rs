//! A value against its rules, and the walk of one decoded resource, field by field,
//! against its plan (what the walk on the bytes, `wire.rs`, is held to).

use super::*;

/// Where a value sits in a resource (`Cluster.load_assignment.endpoints[0]`), put into
/// words only when it breaks a rule: a walk meets far more places than violations.
#[derive(Clone, Copy)]
pub(super) enum At<'a> {
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

pub(super) struct Checker<'a> {
    pub(super) pool: &'a DescriptorPool,
    pub(super) out: &'a mut Vec<Violation>,
}

impl Checker<'_> {
    pub(super) fn fail(&mut self, path: &At<'_>, rule: impl Into<String>) {
        self.out.push(Violation {
            path: path.to_string(),
            rule: rule.into(),
        });
    }

    pub(super) fn message(&mut self, message: &DynamicMessage, path: &At<'_>) {
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
    pub(super) fn descend(&mut self, value: &Value, path: &At<'_>) {
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
    pub(super) fn any_contents(&mut self, any: &DynamicMessage, path: &At<'_>) {
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

    pub(super) fn field(
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
    pub(super) fn count_bounds(
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

    pub(super) fn repeated(
        &mut self,
        field: &FieldDescriptor,
        value: &Value,
        rules: &RuleSet,
        path: &At<'_>,
    ) {
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

    pub(super) fn map(
        &mut self,
        field: &FieldDescriptor,
        value: &Value,
        rules: &RuleSet,
        path: &At<'_>,
    ) {
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

    pub(super) fn any_rules(&mut self, any: &DynamicMessage, rules: &RuleSet, path: &At<'_>) {
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

    pub(super) fn timestamp(&mut self, t: &DynamicMessage, rules: &RuleSet, path: &At<'_>) {
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

    pub(super) fn duration(&mut self, d: &DynamicMessage, rules: &RuleSet, path: &At<'_>) {
        let value = nanos_of(d);
        // Protobuf's own range: ±10,000 years.
        if value.abs() > 315_576_000_000 * 1_000_000_000 {
            self.fail(path, "a duration within protobuf's ±315,576,000,000 s");
        }
        self.time_bounds("duration", value, rules, path);
    }

    /// A duration's or timestamp's `const`, `lt`, `lte`, `gt` and `gte`, in nanoseconds.
    pub(super) fn time_bounds(&mut self, what: &str, value: i128, rules: &RuleSet, path: &At<'_>) {
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

    pub(super) fn scalar(
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
    pub(super) fn listed(&mut self, path: &At<'_>, value: &Value, rules: &RuleSet) {
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

    pub(super) fn number(&mut self, value: &Value, rules: &RuleSet, path: &At<'_>) {
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

    /// Length rules: each of `limits` whose rule is set and does not hold, named after
    /// `prefix`.
    fn limits(&mut self, prefix: &str, limits: &[Limit], rules: &RuleSet, path: &At<'_>) {
        for (name, measured, holds) in limits {
            if let Some(b) = rule(rules, name).and_then(|v| v.as_u64())
                && !holds(*measured, b)
            {
                self.fail(path, format!("{prefix}{name} {b} (is {measured})"));
            }
        }
    }

    pub(super) fn bytes(&mut self, data: &[u8], rules: &RuleSet, path: &At<'_>) {
        if data.is_empty() && ignore_empty(rules) {
            return;
        }
        let len = data.len() as u64;
        let limits: [Limit; 3] = [
            ("len", len, |v, b| v == b),
            ("min_len", len, |v, b| v >= b),
            ("max_len", len, |v, b| v <= b),
        ];
        self.limits("bytes ", &limits, rules, path);
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

    pub(super) fn string(&mut self, text: &str, rules: &RuleSet, path: &At<'_>) {
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
        self.limits("", &limits, rules, path);
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
