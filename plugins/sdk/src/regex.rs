//! Checks a user's regular expression before it can reach Envoy, whose RE2 engine would
//! otherwise reject the whole RouteConfiguration (and every later update with it).

use regex_syntax::ast::{self, Ast, ClassSetItem, Visitor};

/// RE2's limit on a counted repetition (`x{1001}` is rejected).
const MAX_REPEAT: u32 = 1000;
/// A bound on the compiled program, well under the `re2.max_program_size.error_level`
/// Isobar's bootstrap sets (2^20 instructions), so a regex never trips it.
const MAX_NFA_STATES: usize = 100_000;

/// `Ok` when RE2 (as Envoy runs it) accepts `pattern` within the program size limit.
pub fn check_re2(pattern: &str) -> Result<(), String> {
    let ast = ast::parse::Parser::new().parse(pattern).map_err(|e| {
        format!(
            "{pattern:?} is not a valid regular expression: {}",
            e.kind()
        )
    })?;
    ast::visit(&ast, Re2Subset)
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
struct Re2Subset;

impl Visitor for Re2Subset {
    type Output = ();
    type Err = &'static str;

    fn finish(self) -> Result<(), &'static str> {
        Ok(())
    }

    fn visit_pre(&mut self, ast: &Ast) -> Result<(), &'static str> {
        match ast {
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
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn visit_class_set_item_pre(&mut self, item: &ClassSetItem) -> Result<(), &'static str> {
        match item {
            ClassSetItem::Bracketed(_) => Err("it nests a character class"),
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

fn check_flags(flags: &ast::Flags) -> Result<(), &'static str> {
    for item in &flags.items {
        if let ast::FlagsItemKind::Flag(ast::Flag::IgnoreWhitespace | ast::Flag::CRLF) = item.kind {
            return Err("it uses the x or R flag");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_re2;

    #[test]
    fn accepts_what_re2_accepts() {
        for ok in [
            "/api/v[0-9]+",
            "^/a(b|c)*$",
            "(?i)/Foo",
            "/\\d{1,3}",
            "[a-z]+-[^/]",
        ] {
            assert!(check_re2(ok).is_ok(), "{ok}: {:?}", check_re2(ok));
        }
    }

    #[test]
    fn rejects_what_re2_rejects() {
        for bad in [
            "/(",
            "/a{1001}",
            "/(?=x)",
            "/\\1",
            "[a-z&&[^m]]",
            "(?x)a b",
            "\\<word",
            "[[a]]",
            "(a{1000}){1000}",
        ] {
            assert!(check_re2(bad).is_err(), "{bad} was accepted");
        }
    }
}
