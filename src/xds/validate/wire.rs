//! The walk of one encoded resource against its plan, on its bytes: a field is decoded
//! only when one of its rules reads its value, and a nested message is walked where it
//! sits. Decoding a whole resource first (every field, into a dynamic message) was most
//! of the time a check took, and a cold start checks every resource it serves.
//!
//! What is reported is what the walk of the decoded message ([`Checker::message`]) reports
//! for the same bytes, in the same order (a test holds them to it): a field set twice
//! counts as protobuf merges it (a message's occurrences merged, a scalar's last one),
//! a oneof holds its member set last, and a scalar without presence set to its default
//! reads as unset.

use std::ops::Range;

use prost::encoding::decode_varint;
use prost_reflect::MessageDescriptor;

use super::*;

/// One field as it sits in a message's bytes.
struct Occurrence {
    number: u32,
    /// Tag included (what a decoder of this one field is given).
    whole: Range<usize>,
    /// A length-delimited field's contents; the value itself for the others.
    payload: Range<usize>,
    /// Where what follows the tag starts (a length-delimited field's length).
    after_tag: usize,
    delimited: bool,
}

/// The fields of a message's bytes, in the order they sit.
fn occurrences(bytes: &[u8]) -> Result<Vec<Occurrence>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let mut buf = &bytes[pos..];
        let key = decode_varint(&mut buf).map_err(|e| e.to_string())?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("invalid field number {}", key >> 3))?;
        let start = bytes.len() - buf.len();
        let (payload, delimited) = match key & 7 {
            0 => {
                decode_varint(&mut buf).map_err(|e| e.to_string())?;
                (start..bytes.len() - buf.len(), false)
            }
            1 => (start..start + 8, false),
            2 => {
                let len = decode_varint(&mut buf).map_err(|e| e.to_string())?;
                let from = bytes.len() - buf.len();
                let len = usize::try_from(len).map_err(|e| e.to_string())?;
                (from..from.saturating_add(len), true)
            }
            5 => (start..start + 4, false),
            other => return Err(format!("unsupported wire type {other}")),
        };
        if payload.end > bytes.len() {
            return Err("buffer underflow".to_string());
        }
        out.push(Occurrence {
            number,
            whole: pos..payload.end,
            payload: payload.clone(),
            after_tag: start,
            delimited,
        });
        pos = payload.end;
    }
    Ok(out)
}

/// The payloads of `found` as one message: one occurrence as it is, several end to end
/// (protobuf merges a message set twice, as its bytes put together say).
fn merged<'b>(bytes: &'b [u8], found: &[&Occurrence]) -> std::borrow::Cow<'b, [u8]> {
    match found {
        [one] => std::borrow::Cow::Borrowed(&bytes[one.payload.clone()]),
        _ => std::borrow::Cow::Owned(
            found
                .iter()
                .flat_map(|o| bytes[o.payload.clone()].iter().copied())
                .collect(),
        ),
    }
}

impl Checker<'_> {
    /// Checks the message of type `descriptor` encoded as `bytes`. `Err` when the bytes
    /// are not such a message.
    pub(super) fn encoded(
        &mut self,
        descriptor: &MessageDescriptor,
        bytes: &[u8],
        path: &At<'_>,
    ) -> Result<(), String> {
        self.planned(&plan(self.pool, descriptor), bytes, path)
    }

    fn planned(&mut self, plan: &Plan, bytes: &[u8], path: &At<'_>) -> Result<(), String> {
        let all = occurrences(bytes)?;
        if plan.off {
            return Ok(());
        }
        if plan.any {
            return self.encoded_any(bytes, &all, path);
        }
        // Each field the plan knows, with its occurrences in the order they sit.
        let mut fields: Vec<(usize, Vec<&Occurrence>)> = Vec::new();
        for o in &all {
            let Some(at) = plan.by_number.get(&o.number).copied() else {
                continue;
            };
            match fields.iter_mut().find(|(a, _)| *a == at) {
                Some((_, found)) => found.push(o),
                None => fields.push((at, vec![o])),
            }
        }
        drop_replaced_oneof_members(plan, &all, &mut fields);
        for oneof in &plan.required_oneofs {
            let set = fields.iter().any(|(at, _)| {
                let f = &plan.fields[*at];
                f.field
                    .containing_oneof()
                    .is_some_and(|o| o.name() == oneof.name())
            });
            if !set {
                self.fail(path, format!("one of {} is required", oneof.name()));
            }
        }
        // The fields set (in the order the type declares them), and those whose rules an
        // unset field breaks.
        let mut visit: Vec<(usize, Option<Vec<&Occurrence>>)> = fields
            .into_iter()
            .filter(|(at, _)| {
                let f = &plan.fields[*at];
                f.rules.is_some() || f.nested
            })
            .map(|(at, found)| (at, Some(found)))
            .collect();
        for at in &plan.failing_unset {
            if !visit.iter().any(|(a, _)| a == at) {
                visit.push((*at, None));
            }
        }
        visit.sort_by_key(|(at, _)| *at);
        for (at, found) in visit {
            let f = &plan.fields[at];
            let here = At::Field(path, f.field.name());
            let Some(found) = found else {
                for rule in &f.unset {
                    self.fail(&here, rule.clone());
                }
                continue;
            };
            if let Some(rules) = &f.rules
                && !self.encoded_rules(&plan.descriptor, f, rules, bytes, &found, &here)?
            {
                // Set to its default, without presence: it reads as unset.
                for rule in &f.unset {
                    self.fail(&here, rule.clone());
                }
                continue;
            }
            if f.nested && !f.skip {
                self.encoded_nested(f, bytes, &found, &here)?;
            }
        }
        Ok(())
    }

    /// A set field's own rules. `false` when the field turns out unset (a scalar without
    /// presence, or a list, holding its default).
    fn encoded_rules(
        &mut self,
        descriptor: &MessageDescriptor,
        f: &FieldPlan,
        rules: &FieldRules,
        bytes: &[u8],
        found: &[&Occurrence],
        path: &At<'_>,
    ) -> Result<bool, String> {
        let field = &f.field;
        let shape = &f.shape;
        let message = shape.holds.is_some() && !shape.map;
        let kind = rules.typed.as_ref().map(|(kind, _)| kind.as_str());
        // A message set: `required` holds, and a message's own rules read nothing more.
        if message && !shape.list && matches!(kind, None | Some("message")) {
            return Ok(true);
        }
        // Repeated messages whose rules only count them.
        if message
            && shape.list
            && let Some((_, typed)) = rules.typed.as_ref().filter(|(k, _)| k == "repeated")
            && typed.0.iter().all(|(name, _)| {
                matches!(name.as_str(), "min_items" | "max_items" | "ignore_empty")
            })
        {
            self.count_bounds(
                path,
                found.len(),
                typed,
                ("min_items", "max_items"),
                "items",
            );
            return Ok(true);
        }
        // A scalar set once: decoded where it sits.
        if let [one] = found
            && !shape.list
            && !shape.map
            && !message
            && let Some(value) = scalar(&field.kind(), one, bytes)
        {
            let value = value?;
            if !shape.presence && value == field.default_value() {
                return Ok(false);
            }
            self.field(field, &value, true, rules, path);
            return Ok(true);
        }
        // Anything else is decoded: this field alone.
        let alone: Vec<u8> = found
            .iter()
            .flat_map(|o| bytes[o.whole.clone()].iter().copied())
            .collect();
        let decoded = DynamicMessage::decode(descriptor.clone(), alone.as_slice())
            .map_err(|e| e.to_string())?;
        if !decoded.has_field(field) {
            return Ok(false);
        }
        self.field(field, &decoded.get_field(field), true, rules, path);
        Ok(true)
    }

    /// The messages a field holds (single, repeated, map values), each walked in turn.
    fn encoded_nested(
        &mut self,
        f: &FieldPlan,
        bytes: &[u8],
        found: &[&Occurrence],
        path: &At<'_>,
    ) -> Result<(), String> {
        let field = &f.field;
        if found.iter().any(|o| !o.delimited) {
            return Err(format!("invalid wire type for field {}", field.full_name()));
        }
        let Some(inner) = f.shape.inner(self.pool) else {
            return Ok(());
        };
        if let Some(entry) = &f.shape.entry {
            // By key, the entry set last winning (an entry is not merged).
            let key_field = entry.map_entry_key_field();
            let mut entries: Vec<(MapKey, Vec<u8>)> = Vec::new();
            for o in found {
                let bytes = &bytes[o.payload.clone()];
                let parts = occurrences(bytes)?;
                let keys: Vec<&Occurrence> = parts.iter().filter(|p| p.number == 1).collect();
                let key = match keys.last() {
                    Some(last) => match scalar(&key_field.kind(), last, bytes) {
                        Some(key) => key?,
                        None => return Err(format!("a map key of {}", field.full_name())),
                    },
                    None => key_field.default_value(),
                }
                .into_map_key()
                .ok_or_else(|| format!("a map key of {} that is no key", field.full_name()))?;
                let values: Vec<&Occurrence> = parts.iter().filter(|p| p.number == 2).collect();
                if values.iter().any(|p| !p.delimited) {
                    return Err(format!(
                        "invalid wire type for a value of {}",
                        field.full_name()
                    ));
                }
                let value = merged(bytes, &values).into_owned();
                entries.retain(|(k, _)| *k != key);
                entries.push((key, value));
            }
            for (key, value) in &entries {
                self.planned(inner, value, &At::Key(path, key))?;
            }
        } else if f.shape.list {
            for (i, o) in found.iter().enumerate() {
                self.planned(inner, &bytes[o.payload.clone()], &At::Item(path, i))?;
            }
        } else {
            self.planned(inner, &merged(bytes, found), path)?;
        }
        Ok(())
    }

    /// An `Any`: its contents, as the type it names, checked in turn.
    fn encoded_any(
        &mut self,
        bytes: &[u8],
        all: &[Occurrence],
        path: &At<'_>,
    ) -> Result<(), String> {
        // The last occurrence of each (a string and bytes are not merged).
        let last = |number: u32| {
            all.iter()
                .rev()
                .find(|o| o.number == number)
                .map_or(&[][..], |o| &bytes[o.payload.clone()])
        };
        if all
            .iter()
            .any(|o| matches!(o.number, 1 | 2) && !o.delimited)
        {
            return Err("invalid wire type for a field of google.protobuf.Any".to_string());
        }
        let url = std::str::from_utf8(last(1)).map_err(|e| e.to_string())?;
        let name = url.rsplit('/').next().unwrap_or_default();
        let Some(descriptor) = self.pool.get_message_by_name(name) else {
            self.fail(path, format!("an Any of unknown type {url}"));
            return Ok(());
        };
        let before = self.out.len();
        if let Err(e) = self.encoded(&descriptor, last(2), &At::Any(path, name)) {
            // What does not decode is reported as that alone.
            self.out.truncate(before);
            self.fail(path, format!("an Any that does not decode as {name}: {e}"));
        }
        Ok(())
    }
}

/// Of the members of a oneof found set, only the one set last holds (setting a member
/// clears the others).
fn drop_replaced_oneof_members(
    plan: &Plan,
    all: &[Occurrence],
    fields: &mut Vec<(usize, Vec<&Occurrence>)>,
) {
    let oneof_of = |at: usize| plan.fields[at].shape.oneof;
    if fields
        .iter()
        .filter(|(at, _)| oneof_of(*at).is_some())
        .count()
        < 2
    {
        return;
    }
    // Where each field was set last, by its number.
    let last = |number: u32| all.iter().rposition(|o| o.number == number);
    let kept: Vec<usize> = fields
        .iter()
        .filter(|(at, _)| {
            let Some(oneof) = oneof_of(*at) else {
                return true;
            };
            let mine = plan.fields[*at].field.number();
            // No other member of the oneof set later.
            !plan.oneof_members[oneof]
                .iter()
                .any(|other| *other != mine && last(*other) > last(mine))
        })
        .map(|(at, _)| *at)
        .collect();
    fields.retain(|(at, _)| kept.contains(at));
}

/// A scalar field's value as it sits (its last occurrence), decoded as protobuf does;
/// `None` for a kind that is not a scalar.
fn scalar(kind: &Kind, o: &Occurrence, bytes: &[u8]) -> Option<Result<Value, String>> {
    use prost::encoding::{self, DecodeContext, WireType};
    let wire = match (o.delimited, o.payload.len()) {
        (true, _) => WireType::LengthDelimited,
        (false, 8) if matches!(kind, Kind::Fixed64 | Kind::Sfixed64 | Kind::Double) => {
            WireType::SixtyFourBit
        }
        (false, 4) if matches!(kind, Kind::Fixed32 | Kind::Sfixed32 | Kind::Float) => {
            WireType::ThirtyTwoBit
        }
        (false, _) => WireType::Varint,
    };
    // A length-delimited field's contents are read with their length in front.
    let mut buf = &bytes[o.after_tag..o.payload.end];
    let ctx = DecodeContext::default;
    macro_rules! read {
        ($module:ident, $start:expr, $wrap:expr) => {{
            let mut v = $start;
            Some(
                encoding::$module::merge(wire, &mut v, &mut buf, ctx())
                    .map(|()| $wrap(v))
                    .map_err(|e| e.to_string()),
            )
        }};
    }
    match kind {
        Kind::String => read!(string, String::new(), Value::String),
        Kind::Bytes => read!(bytes, Vec::<u8>::new(), |v: Vec<u8>| Value::Bytes(v.into())),
        Kind::Bool => read!(bool, false, Value::Bool),
        Kind::Enum(_) => read!(int32, 0i32, Value::EnumNumber),
        Kind::Int32 => read!(int32, 0i32, Value::I32),
        Kind::Sint32 => read!(sint32, 0i32, Value::I32),
        Kind::Sfixed32 => read!(sfixed32, 0i32, Value::I32),
        Kind::Int64 => read!(int64, 0i64, Value::I64),
        Kind::Sint64 => read!(sint64, 0i64, Value::I64),
        Kind::Sfixed64 => read!(sfixed64, 0i64, Value::I64),
        Kind::Uint32 => read!(uint32, 0u32, Value::U32),
        Kind::Fixed32 => read!(fixed32, 0u32, Value::U32),
        Kind::Uint64 => read!(uint64, 0u64, Value::U64),
        Kind::Fixed64 => read!(fixed64, 0u64, Value::U64),
        Kind::Float => read!(float, 0f32, Value::F32),
        Kind::Double => read!(double, 0f64, Value::F64),
        Kind::Message(_) => None,
    }
}
