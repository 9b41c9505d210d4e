//! What the plan reads of regorus's AST: references and their segments, every
//! expression of a rule or statement (walked without a wildcard arm), source text.

use regorus::unstable::{Expr, Literal, LiteralStmt, Module, Query, Rule};

type Node<T> = regorus::unstable::Ref<T>;

/// One segment of a reference: a name (`.x` or `["x"]`) or an expression (`[e]`).
pub(super) enum Seg<'a> {
    Name(String),
    Expr(&'a Expr),
}

/// The source text of `span`. regorus's spans of string literals leave their quotes
/// out, so a statement or expression that starts or ends with one would lose it: a
/// quote just before or after the span is taken in (no statement or expression is
/// otherwise next to one).
pub(super) fn text(span: &regorus::unstable::Span) -> String {
    let contents = span.source.contents();
    let (mut start, mut end) = (span.start as usize, span.end as usize);
    let quote = |c: Option<char>| matches!(c, Some('"' | '`'));
    if start > 0 && quote(contents.get(..start).and_then(|s| s.chars().last())) {
        start -= 1;
    }
    if quote(contents.get(end..).and_then(|s| s.chars().next())) {
        end += 1;
    }
    contents
        .get(start..end)
        .unwrap_or_default()
        .trim()
        .to_string()
}

pub(super) fn var_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Var { value, .. } => value.as_string().ok().map(|s| s.to_string()),
        _ => None,
    }
}

pub(super) fn literal_string(expr: &Expr) -> Option<String> {
    match expr {
        Expr::String { value, .. } | Expr::RawString { value, .. } => {
            value.as_string().ok().map(|s| s.to_string())
        }
        _ => None,
    }
}

/// A reference chain's root variable and its segments (`data.inventory.x[y]` →
/// `data`, [inventory, x, y]); `None` when `expr` is not a reference.
pub(super) fn chain(expr: &Expr) -> Option<(String, Vec<Seg<'_>>)> {
    let mut segs = Vec::new();
    let mut at = expr;
    loop {
        match at {
            Expr::RefDot { refr, field, .. } => {
                segs.push(Seg::Name(field.1.as_string().ok()?.to_string()));
                at = refr;
            }
            Expr::RefBrack { refr, index, .. } => {
                segs.push(match literal_string(index) {
                    Some(name) => Seg::Name(name),
                    None => Seg::Expr(index),
                });
                at = refr;
            }
            Expr::Var { .. } if !segs.is_empty() => {
                segs.reverse();
                return Some((var_name(at)?, segs));
            }
            _ => return None,
        }
    }
}

/// Calls `f` on `expr` and every expression inside it; `f` says whether to go on into
/// the children. No wildcard arm: a kind of expression added to the AST must be
/// walked here before this compiles.
pub(super) fn walk<'a>(expr: &'a Expr, f: &mut dyn FnMut(&'a Expr) -> bool) {
    if !f(expr) {
        return;
    }
    match expr {
        Expr::String { .. }
        | Expr::RawString { .. }
        | Expr::Number { .. }
        | Expr::Bool { .. }
        | Expr::Null { .. }
        | Expr::Var { .. } => {}
        Expr::Array { items, .. } | Expr::Set { items, .. } => {
            for item in items {
                walk(item, f);
            }
        }
        Expr::Object { fields, .. } => {
            for (_, key, value) in fields {
                walk(key, f);
                walk(value, f);
            }
        }
        Expr::ArrayCompr { term, query, .. } | Expr::SetCompr { term, query, .. } => {
            walk(term, f);
            walk_query(query, f);
        }
        Expr::ObjectCompr {
            key, value, query, ..
        } => {
            walk(key, f);
            walk(value, f);
            walk_query(query, f);
        }
        Expr::Call { fcn, params, .. } => {
            walk(fcn, f);
            for param in params {
                walk(param, f);
            }
        }
        Expr::UnaryExpr { expr, .. } => walk(expr, f),
        Expr::RefDot { refr, .. } => walk(refr, f),
        Expr::RefBrack { refr, index, .. } => {
            walk(refr, f);
            walk(index, f);
        }
        Expr::BinExpr { lhs, rhs, .. }
        | Expr::BoolExpr { lhs, rhs, .. }
        | Expr::ArithExpr { lhs, rhs, .. }
        | Expr::AssignExpr { lhs, rhs, .. } => {
            walk(lhs, f);
            walk(rhs, f);
        }
        Expr::Membership {
            key,
            value,
            collection,
            ..
        } => walk_membership(key.as_ref(), value, collection, f),
    }
}

/// `key, value in collection` (`some … in`, or a membership test).
pub(super) fn walk_membership<'a>(
    key: Option<&'a Node<Expr>>,
    value: &'a Expr,
    collection: &'a Expr,
    f: &mut dyn FnMut(&'a Expr) -> bool,
) {
    if let Some(key) = key {
        walk(key, f);
    }
    walk(value, f);
    walk(collection, f);
}

pub(super) fn walk_query<'a>(query: &'a Query, f: &mut dyn FnMut(&'a Expr) -> bool) {
    for stmt in &query.stmts {
        walk_stmt(stmt, f);
    }
}

pub(super) fn walk_stmt<'a>(stmt: &'a LiteralStmt, f: &mut dyn FnMut(&'a Expr) -> bool) {
    match &stmt.literal {
        Literal::SomeVars { .. } => {}
        Literal::SomeIn {
            key,
            value,
            collection,
            ..
        } => walk_membership(key.as_ref(), value, collection, f),
        Literal::Expr { expr, .. } | Literal::NotExpr { expr, .. } => walk(expr, f),
        Literal::Every { domain, query, .. } => {
            walk(domain, f);
            walk_query(query, f);
        }
    }
    for with in &stmt.with_mods {
        walk(&with.refr, f);
        walk(&with.r#as, f);
    }
}

/// The name a rule defines (`violation` for `violation[{"msg": m}] { … }`).
pub(super) fn rule_name(rule: &Rule) -> Option<String> {
    let refr = match rule {
        Rule::Spec { head, .. } => match head {
            regorus::unstable::RuleHead::Compr { refr, .. }
            | regorus::unstable::RuleHead::Set { refr, .. }
            | regorus::unstable::RuleHead::Func { refr, .. } => refr,
        },
        Rule::Default { refr, .. } => refr,
    };
    match chain(refr) {
        Some((root, _)) => Some(root),
        None => var_name(refr),
    }
}

/// A package's path without `data.` (`lib.helpers`).
pub(super) fn package_of(module: &Module) -> String {
    text(module.package.refr.span())
}

/// Every expression of a rule.
pub(super) fn rule_exprs(rule: &Rule, f: &mut dyn FnMut(&Expr) -> bool) {
    match rule {
        Rule::Default {
            refr, args, value, ..
        } => {
            walk(refr, f);
            for arg in args {
                walk(arg, f);
            }
            walk(value, f);
        }
        Rule::Spec { head, bodies, .. } => {
            match head {
                regorus::unstable::RuleHead::Compr { refr, assign, .. } => {
                    walk(refr, f);
                    if let Some(assign) = assign {
                        walk(&assign.value, f);
                    }
                }
                regorus::unstable::RuleHead::Set { refr, key, .. } => {
                    walk(refr, f);
                    if let Some(key) = key {
                        walk(key, f);
                    }
                }
                regorus::unstable::RuleHead::Func {
                    refr, args, assign, ..
                } => {
                    walk(refr, f);
                    for arg in args {
                        walk(arg, f);
                    }
                    if let Some(assign) = assign {
                        walk(&assign.value, f);
                    }
                }
            }
            for body in bodies {
                if let Some(assign) = &body.assign {
                    walk(&assign.value, f);
                }
                walk_query(&body.query, f);
            }
        }
    }
}
