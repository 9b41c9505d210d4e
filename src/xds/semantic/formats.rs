//! Envoy's string formats: substitution format strings in header values, RE2 patterns.

use super::*;

/// Whether a header value is a valid substitution format string for Envoy's parser:
/// each `%` starts `%%` or a command `%NAME(args):len%`. `Err`: the position of the
/// first `%` that does neither.
pub fn substitution_format(value: &str) -> Result<(), usize> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        if bytes.get(i + 1) == Some(&b'%') {
            i += 2;
            continue;
        }
        // A command: [A-Z0-9_]+, then optionally (...) without ')', then :digits, then %.
        let mut j = i + 1;
        while j < bytes.len()
            && (bytes[j].is_ascii_uppercase() || bytes[j].is_ascii_digit() || bytes[j] == b'_')
        {
            j += 1;
        }
        if j == i + 1 {
            return Err(i);
        }
        if bytes.get(j) == Some(&b'(') {
            match bytes[j..].iter().position(|b| *b == b')') {
                Some(close) => j += close + 1,
                None => return Err(i),
            }
        }
        if bytes.get(j) == Some(&b':') {
            let start = j + 1;
            j = start;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
            if j == start {
                return Err(i);
            }
        }
        if bytes.get(j) != Some(&b'%') {
            return Err(i);
        }
        i = j + 1;
    }
    Ok(())
}

/// The cap on a regex's RE2 program size under Isobar's runtime layer.
pub use crate::xds::runtime::RE2_PROGRAM_MAX;

/// Whether Envoy compiles `pattern`: RE2's syntax is checked with Rust's regex parser
/// (both refuse look-around and back-references), RE2's own limit on counted
/// repetition (1,000, nested counts multiplied) is applied, and the program RE2 would
/// build is no bigger than Envoy allows ([`RE2_PROGRAM_MAX`]; measured from below by
/// [`re2_program_size_at_least`]).
pub fn re2(pattern: &str) -> Result<(), String> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .map_err(|e| {
            format!(
                "{pattern:?} does not compile as RE2: {}",
                one_line(&e.to_string())
            )
        })?;
    let size = program_size(&hir);
    if size > RE2_PROGRAM_MAX {
        return Err(format!(
            "regex {pattern:?}: its RE2 program size is at least {size}, past Envoy's limit of {RE2_PROGRAM_MAX}"
        ));
    }
    let n = repetition(&hir);
    if n > u64::from(RE2_REPEAT_MAX) {
        return Err(format!(
            "{pattern:?} does not compile as RE2: invalid repetition size (counts multiplying to {n}; RE2's limit is {RE2_REPEAT_MAX})"
        ));
    }
    Ok(())
}

/// The largest product of nested repetition counts (RE2 refuses one past 1,000).
fn repetition(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::HirKind;
    match hir.kind() {
        HirKind::Repetition(r) => {
            let n = u64::from(r.max.unwrap_or(r.min)).max(1);
            n.saturating_mul(repetition(&r.sub))
        }
        HirKind::Capture(c) => repetition(&c.sub),
        HirKind::Concat(items) | HirKind::Alternation(items) => {
            items.iter().map(repetition).max().unwrap_or(1)
        }
        _ => 1,
    }
}

/// A lower bound of the size of the program RE2 compiles `pattern` to (its instruction
/// count, which Envoy caps): never above RE2's own figure, so a pattern it finds too big
/// is too big. `None` when the pattern does not parse.
pub fn re2_program_size_at_least(pattern: &str) -> Option<u64> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .ok()?;
    Some(program_size(&hir))
}

/// The whole program: the regex, a match instruction and the fail instruction RE2
/// starts every program with (the unanchored `.*?` prefix is left out: counted from
/// below).
fn program_size(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::{HirKind, Look};
    // A literal right after a leading `^` is RE2's required prefix, matched outside
    // the program.
    if let HirKind::Concat(items) = hir.kind()
        && matches!(
            items.first().map(|h| h.kind()),
            Some(HirKind::Look(Look::Start))
        )
    {
        let rest = items
            .iter()
            .skip(1)
            .skip_while(|h| matches!(h.kind(), HirKind::Literal(_)));
        return rest
            .map(size_of)
            .fold(0, u64::saturating_add)
            .saturating_add(2);
    }
    size_of(hir).saturating_add(2)
}

fn size_of(hir: &regex_syntax::hir::Hir) -> u64 {
    use regex_syntax::hir::{Class, HirKind};
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        // One byte-range instruction per ASCII byte (past ASCII, counted from below: 0).
        HirKind::Literal(l) => l.0.iter().filter(|b| b.is_ascii()).count() as u64,
        // At least one instruction per ASCII range (an upper-case range may ride on its
        // lower-case one, which RE2 matches folded; what lies past ASCII may share).
        HirKind::Class(Class::Unicode(c)) => {
            let ascii = c
                .ranges()
                .iter()
                .filter(|r| u32::from(r.start()) < 0x80)
                .filter(|r| !(r.start().is_ascii_uppercase() && r.end().is_ascii_uppercase()))
                .count() as u64;
            ascii.max(1)
        }
        HirKind::Class(Class::Bytes(c)) => (c.ranges().len() as u64).max(1),
        // x{n,m}: n copies, then m-n nested optional copies (one branch each); x{n,}: n
        // copies, the last looping (one branch).
        HirKind::Repetition(r) => {
            let sub = size_of(&r.sub);
            let min = u64::from(r.min);
            match r.max {
                Some(max) => min
                    .saturating_mul(sub)
                    .saturating_add(u64::from(max).saturating_sub(min).saturating_mul(sub + 1)),
                // x* was measured at one instruction over x's own.
                None if min == 0 => sub,
                None => min.saturating_mul(sub).saturating_add(1),
            }
        }
        // Two capture instructions.
        HirKind::Capture(c) => size_of(&c.sub) + 2,
        HirKind::Concat(items) => items.iter().map(size_of).fold(0, u64::saturating_add),
        // RE2 factors common prefixes out of alternations: only the largest branch is
        // sure to be there whole.
        HirKind::Alternation(items) => items.iter().map(size_of).max().unwrap_or(0),
    }
}
