//! Checks a user's regular expression before it can reach Envoy, whose RE2 engine would
//! otherwise reject the whole RouteConfiguration (and every later update with it).

use regex_syntax::ast::{self, Ast, ClassSetItem, Visitor};

/// RE2's limit on a counted repetition (`x{1001}` is rejected), also on the product of
/// nested ones (`((a{30}){30}){30}`: "bad repetition operator").
const MAX_REPEAT: u32 = 1000;

/// RE2's Unicode general categories (`\pL`, `\p{Lu}`); its scripts are checked apart.
const RE2_CATEGORIES: &[&str] = &[
    "C", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N",
    "Nd", "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So",
    "Z", "Zl", "Zp", "Zs",
];
/// A bound on the compiled program, well under the `re2.max_program_size.error_level`
/// Isobar's bootstrap sets (2^20 instructions), so a regex never trips it.
const MAX_NFA_STATES: usize = 100_000;

/// `Ok` when RE2 (as Envoy runs it) accepts `pattern` within the program size limit.
pub fn check_re2(pattern: &str) -> Result<(), String> {
    // Envoy's RegexMatcher needs at least one character (found by the fuzzer).
    if pattern.is_empty() {
        return Err(
            "an empty regular expression matches everything; Envoy needs a pattern".to_string(),
        );
    }
    let ast = ast::parse::Parser::new().parse(pattern).map_err(|e| {
        format!(
            "{pattern:?} is not a valid regular expression: {}",
            e.kind()
        )
    })?;
    ast::visit(&ast, Re2Subset::default())
        .map_err(|why| format!("{pattern:?}: {why}, which RE2 does not support"))?;
    regex_syntax::Parser::new()
        .parse(pattern)
        .map_err(|_| format!("{pattern:?} is not a valid regular expression"))?;
    let nfa = regex_automata::nfa::thompson::NFA::compiler()
        .configure(regex_automata::nfa::thompson::Config::new().nfa_size_limit(Some(16 << 20)))
        .build(pattern)
        .map_err(|_| format!("{pattern:?} is too large a regular expression"))?;
    if nfa.states().len() > MAX_NFA_STATES {
        return Err(format!("{pattern:?} is too large a regular expression"));
    }
    Ok(())
}

/// Rejects the syntax regex-syntax accepts but RE2 does not.
#[derive(Default)]
struct Re2Subset {
    /// The counts of the counted repetitions around the node being visited.
    counts: Vec<u32>,
}

/// The count RE2 weighs a repetition by: its maximum, or its minimum when unbounded;
/// `None` for `*`, `+`, `?` (not counted).
fn repeat_count(r: &ast::Repetition) -> Option<u32> {
    match r.op.kind {
        ast::RepetitionKind::Range(
            ast::RepetitionRange::Exactly(n)
            | ast::RepetitionRange::AtLeast(n)
            | ast::RepetitionRange::Bounded(_, n),
        ) => Some(n),
        _ => None,
    }
}

impl Visitor for Re2Subset {
    type Output = ();
    type Err = &'static str;

    fn finish(self) -> Result<(), &'static str> {
        Ok(())
    }

    fn visit_post(&mut self, ast: &Ast) -> Result<(), &'static str> {
        if let Ast::Repetition(r) = ast
            && repeat_count(r).is_some_and(|n| n > 0)
        {
            self.counts.pop();
        }
        Ok(())
    }

    fn visit_pre(&mut self, ast: &Ast) -> Result<(), &'static str> {
        if let Ast::Repetition(r) = ast {
            // `a**`, `a{2}{3}`: RE2's "bad repetition operator".
            if matches!(*r.ast, Ast::Repetition(_)) {
                return Err("it repeats a repetition");
            }
            if let Some(n) = repeat_count(r).filter(|n| *n > 0) {
                self.counts.push(n);
                let product = self
                    .counts
                    .iter()
                    .try_fold(1u32, |p, c| p.checked_mul(*c).filter(|p| *p <= MAX_REPEAT));
                if product.is_none() {
                    return Err("its nested repetitions repeat more than 1000 times");
                }
            }
        }
        match ast {
            Ast::Literal(l) => match l.kind {
                ast::LiteralKind::HexFixed(ast::HexLiteralKind::X)
                | ast::LiteralKind::HexBrace(ast::HexLiteralKind::X) => Ok(()),
                ast::LiteralKind::HexFixed(_) | ast::LiteralKind::HexBrace(_) => {
                    Err("it uses a \\u or \\U escape")
                }
                ast::LiteralKind::Special(ast::SpecialLiteralKind::Space) => {
                    Err("it escapes a space")
                }
                _ => Ok(()),
            },
            Ast::ClassUnicode(c) => check_unicode_class(c),
            Ast::Assertion(a) => match a.kind {
                ast::AssertionKind::StartLine
                | ast::AssertionKind::EndLine
                | ast::AssertionKind::StartText
                | ast::AssertionKind::EndText
                | ast::AssertionKind::WordBoundary
                | ast::AssertionKind::NotWordBoundary => Ok(()),
                _ => Err("it uses a word-boundary assertion other than \\b or \\B"),
            },
            Ast::Repetition(r) => match r.op.kind {
                ast::RepetitionKind::Range(
                    ast::RepetitionRange::Exactly(n)
                    | ast::RepetitionRange::AtLeast(n)
                    | ast::RepetitionRange::Bounded(_, n),
                ) if n > MAX_REPEAT => Err("it repeats more than 1000 times"),
                _ => Ok(()),
            },
            Ast::Flags(f) => check_flags(&f.flags),
            Ast::Group(g) => match &g.kind {
                ast::GroupKind::NonCapturing(flags) => check_flags(flags),
                ast::GroupKind::CaptureName { name, .. }
                    if !name
                        .name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                {
                    Err("its group name has characters other than letters, digits and _")
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn visit_class_set_item_pre(&mut self, item: &ClassSetItem) -> Result<(), &'static str> {
        match item {
            ClassSetItem::Bracketed(_) => Err("it nests a character class"),
            ClassSetItem::Unicode(c) => check_unicode_class(c),
            ClassSetItem::Literal(ast::Literal {
                kind:
                    ast::LiteralKind::HexFixed(
                        ast::HexLiteralKind::UnicodeShort | ast::HexLiteralKind::UnicodeLong,
                    )
                    | ast::LiteralKind::HexBrace(
                        ast::HexLiteralKind::UnicodeShort | ast::HexLiteralKind::UnicodeLong,
                    ),
                ..
            }) => Err("it uses a \\u or \\U escape"),
            ClassSetItem::Range(r) => {
                for end in [&r.start, &r.end] {
                    if let ast::LiteralKind::HexFixed(
                        ast::HexLiteralKind::UnicodeShort | ast::HexLiteralKind::UnicodeLong,
                    )
                    | ast::LiteralKind::HexBrace(
                        ast::HexLiteralKind::UnicodeShort | ast::HexLiteralKind::UnicodeLong,
                    ) = end.kind
                    {
                        return Err("it uses a \\u or \\U escape");
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn visit_class_set_binary_op_pre(
        &mut self,
        _op: &ast::ClassSetBinaryOp,
    ) -> Result<(), &'static str> {
        Err("it uses a character class set operation")
    }
}

/// RE2 knows the flags i, m, s and U (Rust's u, x and R it refuses).
fn check_flags(flags: &ast::Flags) -> Result<(), &'static str> {
    for item in &flags.items {
        if let ast::FlagsItemKind::Flag(
            ast::Flag::IgnoreWhitespace | ast::Flag::CRLF | ast::Flag::Unicode,
        ) = item.kind
        {
            return Err("it uses a flag other than i, m, s and U");
        }
    }
    Ok(())
}

/// RE2 names Unicode classes by general category (`L`, `Lu`), `Any`, or script in its
/// exact spelling (`Greek`, `Old_Italic`); not by `name=value`, long category names or
/// binary properties, which it calls an "invalid character class range".
fn check_unicode_class(class: &ast::ClassUnicode) -> Result<(), &'static str> {
    let name = match &class.kind {
        ast::ClassUnicodeKind::OneLetter(c) => return check_class_name(&c.to_string()),
        ast::ClassUnicodeKind::Named(name) => name,
        ast::ClassUnicodeKind::NamedValue { .. } => {
            return Err("it names a Unicode property value");
        }
    };
    check_class_name(name)
}

fn check_class_name(name: &str) -> Result<(), &'static str> {
    if name == "Any" || RE2_CATEGORIES.contains(&name) {
        return Ok(());
    }
    let spelled = name.split('_').all(|word| {
        let mut chars = word.chars();
        chars.next().is_some_and(|c| c.is_ascii_uppercase())
            && chars.all(|c| c.is_ascii_lowercase())
    });
    let script = regex_syntax::Parser::new()
        .parse(&format!("\\p{{sc={name}}}"))
        .is_ok();
    if spelled && script {
        Ok(())
    } else {
        Err("it names a Unicode class other than a general category or script")
    }
}

#[cfg(test)]
mod tests;
