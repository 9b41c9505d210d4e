//! Which templates' inventory reads can be answered from an index, and the rules that
//! answer them, made of the template's own statements.

use std::collections::{BTreeSet, HashSet};

use regorus::unstable::{AssignOp, BoolOp, Expr, Literal, LiteralStmt, Module, Query, Rule};

type Node<T> = regorus::unstable::Ref<T>;

/// How a template's inventory reads are answered: the rules added to its package, and
/// how many joins they answer (rules `__isobar_index_N` and `__isobar_keys_N`).
#[derive(Debug, Clone)]
pub struct Plan {
    /// Rego of the added rules, in the template's package.
    pub source: String,
    pub joins: usize,
}

/// The name of join `n`'s index rule (`[value, path]` for each inventory object).
pub fn index_rule(package: &str, n: usize) -> String {
    format!("{package}.__isobar_index_{n}")
}

/// The name of join `n`'s keys rule (the values the judged object offers).
pub fn keys_rule(package: &str, n: usize) -> String {
    format!("{package}.__isobar_keys_{n}")
}

/// One segment of a reference: a name (`.x` or `["x"]`) or an expression (`[e]`).
enum Seg<'a> {
    Name(String),
    Expr(&'a Expr),
}

/// The source text of `span`. regorus's spans of string literals leave their quotes
/// out, so a statement or expression that starts or ends with one would lose it: a
/// quote just before or after the span is taken in (no statement or expression is
/// otherwise next to one).
fn text(span: &regorus::unstable::Span) -> String {
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

fn var_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Var { value, .. } => value.as_string().ok().map(|s| s.to_string()),
        _ => None,
    }
}

fn literal_string(expr: &Expr) -> Option<String> {
    match expr {
        Expr::String { value, .. } | Expr::RawString { value, .. } => {
            value.as_string().ok().map(|s| s.to_string())
        }
        _ => None,
    }
}

/// A reference chain's root variable and its segments (`data.inventory.x[y]` →
/// `data`, [inventory, x, y]); `None` when `expr` is not a reference.
fn chain(expr: &Expr) -> Option<(String, Vec<Seg<'_>>)> {
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
fn walk<'a>(expr: &'a Expr, f: &mut dyn FnMut(&'a Expr) -> bool) {
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
fn walk_membership<'a>(
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

fn walk_query<'a>(query: &'a Query, f: &mut dyn FnMut(&'a Expr) -> bool) {
    for stmt in &query.stmts {
        walk_stmt(stmt, f);
    }
}

fn walk_stmt<'a>(stmt: &'a LiteralStmt, f: &mut dyn FnMut(&'a Expr) -> bool) {
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

/// What an expression reads: its variables (function names aside), whether it reads
/// `input`, its reads of `data.inventory` (by address), and the first other read of
/// `data` that is not a package of the template's own (`data` whole, `data[x]`,
/// `data.config`, ...).
#[derive(Default)]
struct Reads {
    vars: BTreeSet<String>,
    input: bool,
    /// By address (to tell the reads apart) and text.
    inventory: Vec<(usize, String)>,
    foreign_data: Option<String>,
    /// Names called (the last segment of the function's reference).
    calls: BTreeSet<String>,
}

impl Reads {
    fn of_expr(expr: &Expr, packages: &HashSet<String>) -> Reads {
        let mut reads = Reads::default();
        reads.add(expr, packages);
        reads
    }

    fn of_stmt(stmt: &LiteralStmt, packages: &HashSet<String>) -> Reads {
        let mut reads = Reads::default();
        walk_stmt(stmt, &mut |e| reads.visit(e, packages));
        reads
    }

    fn add(&mut self, expr: &Expr, packages: &HashSet<String>) {
        walk(expr, &mut |e| self.visit(e, packages));
    }

    fn visit(&mut self, expr: &Expr, packages: &HashSet<String>) -> bool {
        match expr {
            Expr::Call { fcn, params, .. } => {
                // The function's name is not a variable; a function from a package of
                // the template (`data.lib.x.f`) is a read of that package.
                let name = match chain(fcn) {
                    Some((root, segs)) => {
                        if root == "data" {
                            self.data_chain(expr, &segs, packages);
                        }
                        match segs.last() {
                            Some(Seg::Name(n)) => Some(n.clone()),
                            _ => None,
                        }
                    }
                    None => var_name(fcn),
                };
                if let Some(name) = name {
                    self.calls.insert(name);
                }
                for param in params {
                    self.add(param, packages);
                }
                false
            }
            Expr::RefDot { .. } | Expr::RefBrack { .. } => {
                let Some((root, segs)) = chain(expr) else {
                    return true;
                };
                match root.as_str() {
                    "data" => self.data_chain(expr, &segs, packages),
                    "input" => self.input = true,
                    "_" => {}
                    _ => {
                        self.vars.insert(root);
                    }
                }
                for seg in &segs {
                    if let Seg::Expr(index) = seg {
                        self.add(index, packages);
                    }
                }
                false
            }
            Expr::Var { .. } => {
                match var_name(expr).as_deref() {
                    Some("data") => {
                        self.foreign_data.get_or_insert_with(|| "data".to_string());
                    }
                    Some("input") => self.input = true,
                    Some("_") | None => {}
                    Some(name) => {
                        self.vars.insert(name.to_string());
                    }
                }
                false
            }
            _ => true,
        }
    }

    fn data_chain(&mut self, expr: &Expr, segs: &[Seg<'_>], packages: &HashSet<String>) {
        match segs.first() {
            Some(Seg::Name(first)) if first == "inventory" => {
                self.inventory
                    .push((expr as *const Expr as usize, text(expr.span())));
            }
            Some(Seg::Name(first)) if packages.contains(first) => {}
            _ => {
                self.foreign_data.get_or_insert_with(|| text(expr.span()));
            }
        }
    }
}

/// An iteration over the inventory at object depth: `V := data.inventory.namespace[a][b][c][d]`
/// (or `cluster[a][b][c]`). The variable, and the scope's first segment.
fn iteration(stmt: &LiteralStmt) -> Option<(String, &'static str, usize)> {
    if !stmt.with_mods.is_empty() {
        return None;
    }
    let Literal::Expr { expr, .. } = &stmt.literal else {
        return None;
    };
    let Expr::AssignExpr { lhs, rhs, .. } = expr.as_ref() else {
        return None;
    };
    let var = var_name(lhs).filter(|v| v != "_")?;
    let (root, segs) = chain(rhs)?;
    if root != "data" {
        return None;
    }
    let scope = match (segs.first(), segs.get(1), segs.len()) {
        (Some(Seg::Name(i)), Some(Seg::Name(s)), 6) if i == "inventory" && s == "namespace" => {
            "namespace"
        }
        (Some(Seg::Name(i)), Some(Seg::Name(s)), 5) if i == "inventory" && s == "cluster" => {
            "cluster"
        }
        _ => return None,
    };
    Some((var, scope, rhs.as_ref() as *const Expr as usize))
}

/// The name a rule defines (`violation` for `violation[{"msg": m}] { … }`).
fn rule_name(rule: &Rule) -> Option<String> {
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
fn package_of(module: &Module) -> String {
    text(module.package.refr.span())
}

/// Every expression of a rule.
fn rule_exprs(rule: &Rule, f: &mut dyn FnMut(&Expr) -> bool) {
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

/// The plan for a template whose package is `package` (without `data.`), from the
/// modules of its engine (the template and its libs). `Err` says why its inventory
/// reads cannot be answered from an index; `Ok(None)`: it does not read the inventory.
pub fn plan(modules: &[Node<Module>], package: &str, v1: bool) -> Result<Option<Plan>, String> {
    let packages: HashSet<String> = modules
        .iter()
        .filter_map(|m| package_of(m).split('.').next().map(str::to_string))
        .collect();
    if packages.contains("inventory") {
        return Err("a package named inventory".into());
    }
    for module in modules {
        for import in &module.imports {
            let path = text(import.refr.span());
            if path == "data" || path.starts_with("data.inventory") || path.starts_with("data[") {
                return Err(format!("it imports {path}"));
            }
        }
    }
    // Rules whose value depends on `input` (through other rules too): the index may
    // not call them, as it is computed once for every judged object.
    let mut names_reading_input: HashSet<String> = HashSet::new();
    loop {
        let before = names_reading_input.len();
        for module in modules {
            for rule in &module.policy {
                let Some(name) = rule_name(rule) else {
                    continue;
                };
                let mut reads = Reads::default();
                rule_exprs(rule, &mut |e| reads.visit(e, &packages));
                if reads.input
                    || reads
                        .calls
                        .iter()
                        .chain(&reads.vars)
                        .any(|n| names_reading_input.contains(n))
                {
                    names_reading_input.insert(name);
                }
            }
        }
        if names_reading_input.len() == before {
            break;
        }
    }
    let mut joins: Vec<(String, String)> = Vec::new();
    let mut any_inventory = false;
    let mut unindexable: Option<String> = None;
    for module in modules {
        let own = package_of(module) == package;
        for rule in &module.policy {
            let name = rule_name(rule).unwrap_or_default();
            if name.starts_with("__isobar") {
                return Err(format!("a rule named {name}"));
            }
            // Reads of the inventory anywhere but an iteration statement of a
            // violation body cannot be indexed.
            let mut allowed: HashSet<usize> = HashSet::new();
            if let (true, "violation", Rule::Spec { head, bodies, .. }) =
                (own, name.as_str(), &**rule)
                && !matches!(head, regorus::unstable::RuleHead::Func { .. })
            {
                for body in bodies {
                    let stmts = &body.query.stmts;
                    for (i, stmt) in stmts.iter().enumerate() {
                        let Some((var, scope, at)) = iteration(stmt) else {
                            continue;
                        };
                        match join_of(stmts, i, &var, scope, &packages, &names_reading_input) {
                            Ok(join) => {
                                allowed.insert(at);
                                joins.push(join);
                            }
                            Err(why) => {
                                unindexable.get_or_insert_with(|| {
                                    format!("{why} (after `{}`)", text(&stmt.span))
                                });
                            }
                        }
                    }
                }
            }
            let mut reads = Reads::default();
            rule_exprs(rule, &mut |e| reads.visit(e, &packages));
            any_inventory |= !reads.inventory.is_empty();
            if let Some((_, text)) = reads.inventory.iter().find(|(at, _)| !allowed.contains(at)) {
                unindexable.get_or_insert_with(|| {
                    format!(
                        "rule {name} reads the inventory otherwise than by iterating over objects (`{text}`)"
                    )
                });
            }
            if let Some(other) = reads.foreign_data {
                unindexable.get_or_insert_with(|| format!("rule {name} reads `{other}`"));
            }
        }
    }
    if !any_inventory {
        return Ok(None);
    }
    if let Some(why) = unindexable {
        return Err(why);
    }
    let mut source = format!("package {package}\n\n");
    for (n, (index, keys)) in joins.iter().enumerate() {
        let (index_head, keys_head) = if v1 {
            (
                format!("__isobar_index_{n} contains [__isobar_k, __isobar_path] if"),
                format!("__isobar_keys_{n} contains __isobar_k if"),
            )
        } else {
            (
                format!("__isobar_index_{n}[[__isobar_k, __isobar_path]]"),
                format!("__isobar_keys_{n}[__isobar_k]"),
            )
        };
        source.push_str(&format!(
            "{index_head} {{\n{index}\n}}\n\n{keys_head} {{\n{keys}\n}}\n\n"
        ));
    }
    Ok(Some(Plan {
        source,
        joins: joins.len(),
    }))
}

/// The bodies of the index and keys rules for the iteration `stmts[at]` over `var`.
fn join_of(
    stmts: &[LiteralStmt],
    at: usize,
    var: &str,
    scope: &str,
    packages: &HashSet<String>,
    reading_input: &HashSet<String>,
) -> Result<(String, String), String> {
    if stmts.iter().any(|s| !s.with_mods.is_empty()) {
        return Err("a statement with `with`".into());
    }
    // Walk the statements in order: those reading the iterated object (or a variable
    // bound from it) depend on it; the others are independent.
    let mut dependent: HashSet<String> = HashSet::from([var.to_string()]);
    let mut bound: HashSet<String> = HashSet::new();
    let mut independent: Vec<usize> = Vec::new();
    // Variables defined from the iterated object alone (`x := f(other)`), with their
    // statements.
    let mut pure: HashSet<String> = HashSet::from([var.to_string()]);
    let mut pure_defs: Vec<usize> = Vec::new();
    let mut reads_of: Vec<Reads> = Vec::new();
    for stmt in stmts {
        reads_of.push(Reads::of_stmt(stmt, packages));
    }
    for (i, stmt) in stmts.iter().enumerate() {
        let reads = &reads_of[i];
        if i == at {
            dependent.extend(reads.vars.iter().cloned());
            continue;
        }
        if !reads.inventory.is_empty() || reads.vars.iter().any(|v| dependent.contains(v)) {
            if let Some((lhs, rhs)) = definition(stmt)
                && !bound.contains(&lhs)
                && only_object(&Reads::of_expr(rhs, packages), &pure, reading_input)
            {
                pure.insert(lhs);
                pure_defs.push(i);
            }
            for v in &reads.vars {
                if !bound.contains(v) {
                    dependent.insert(v.clone());
                }
            }
        } else {
            bound.extend(reads.vars.iter().cloned());
            independent.push(i);
        }
    }
    // The comparison: one side read from the object alone, the other from independent
    // variables only.
    let mut found = None;
    for (i, stmt) in stmts.iter().enumerate() {
        if i == at || independent.contains(&i) {
            continue;
        }
        let Some((lhs, rhs)) = comparison(stmt) else {
            continue;
        };
        for (object_side, other_side) in [(lhs, rhs), (rhs, lhs)] {
            let object_reads = Reads::of_expr(object_side, packages);
            let other_reads = Reads::of_expr(other_side, packages);
            let touches_object = object_reads.vars.iter().any(|v| pure.contains(v));
            let other_free = other_reads.inventory.is_empty()
                && other_reads.foreign_data.is_none()
                && other_reads
                    .vars
                    .iter()
                    .all(|v| bound.contains(v) && !dependent.contains(v));
            if touches_object && only_object(&object_reads, &pure, reading_input) && other_free {
                found = Some((object_side, other_side));
                break;
            }
        }
        if found.is_some() {
            break;
        }
    }
    let Some((object_side, other_side)) = found else {
        return Err(format!(
            "no comparison of {var} (or a value defined from it alone) with a value of the judged object"
        ));
    };
    let stmt_text = |i: &usize| text(&stmts[*i].span);
    let (params, path) = match scope {
        "namespace" => (
            "[__isobar_p0][__isobar_p1][__isobar_p2][__isobar_p3]",
            "[\"namespace\", __isobar_p0, __isobar_p1, __isobar_p2, __isobar_p3]",
        ),
        _ => (
            "[__isobar_p0][__isobar_p1][__isobar_p2]",
            "[\"cluster\", __isobar_p0, __isobar_p1, __isobar_p2]",
        ),
    };
    let mut index = vec![format!("{var} := data.inventory.{scope}{params}")];
    index.extend(pure_defs.iter().map(stmt_text));
    index.push(format!("__isobar_k := {}", text(object_side.span())));
    index.push(format!("__isobar_path := {path}"));
    let mut keys: Vec<String> = independent.iter().map(stmt_text).collect();
    keys.push(format!("__isobar_k := {}", text(other_side.span())));
    Ok((index.join("\n"), keys.join("\n")))
}

/// `x := e` (or `x = e`): the variable and the expression.
fn definition(stmt: &LiteralStmt) -> Option<(String, &Expr)> {
    let Literal::Expr { expr, .. } = &stmt.literal else {
        return None;
    };
    match expr.as_ref() {
        Expr::AssignExpr { lhs, rhs, .. } => Some((var_name(lhs).filter(|v| v != "_")?, rhs)),
        _ => None,
    }
}

/// `a == b` or `a = b`: the two sides.
fn comparison(stmt: &LiteralStmt) -> Option<(&Expr, &Expr)> {
    let Literal::Expr { expr, .. } = &stmt.literal else {
        return None;
    };
    match expr.as_ref() {
        Expr::BoolExpr {
            op: BoolOp::Eq,
            lhs,
            rhs,
            ..
        }
        | Expr::AssignExpr {
            op: AssignOp::Eq,
            lhs,
            rhs,
            ..
        } => Some((lhs, rhs)),
        _ => None,
    }
}

/// Whether what `reads` reads comes from the iterated object alone (and the values
/// defined from it): no `input`, no other variable, no `data`, no rule reading `input`.
fn only_object(reads: &Reads, pure: &HashSet<String>, reading_input: &HashSet<String>) -> bool {
    !reads.input
        && reads.inventory.is_empty()
        && reads.foreign_data.is_none()
        && reads.vars.iter().all(|v| pure.contains(v))
        && !reads.calls.iter().any(|c| reading_input.contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan for one Rego v0 module (`package t`), or why there is none.
    fn plan_of(rego: &str) -> Result<Option<Plan>, String> {
        let mut engine = regorus::Engine::new();
        engine.set_rego_v0(true);
        engine
            .add_policy("t.rego".into(), rego.into())
            .map_err(|e| e.to_string())?;
        let modules = engine.get_modules().clone();
        plan(&modules, "t", false)
    }

    const UNIQUE: &str = r#"package t

same_object(other, review) {
  other.metadata.namespace == review.object.metadata.namespace
  other.metadata.name == review.object.metadata.name
}

violation[{"msg": msg}] {
  input.review.kind.kind == "Ingress"
  re_match("^(extensions|networking.k8s.io)$", input.review.kind.group)
  host := input.review.object.spec.rules[_].host
  other := data.inventory.namespace[_][version]["Ingress"][_]
  re_match("^(extensions|networking.k8s.io)/.+$", version)
  other.spec.rules[_].host == host
  not same_object(other, input.review)
  msg := sprintf("%v", [host])
}
"#;

    #[test]
    fn a_join_on_a_value_is_planned_from_the_templates_statements() {
        let plan = plan_of(UNIQUE).unwrap_or_else(|e| panic!("{e}"));
        let plan = plan.unwrap_or_else(|| panic!("no plan"));
        assert_eq!(plan.joins, 1);
        assert!(
            plan.source
                .contains("__isobar_k := other.spec.rules[_].host"),
            "{}",
            plan.source
        );
        assert!(
            plan.source.contains("__isobar_k := host"),
            "{}",
            plan.source
        );
        assert!(!plan.source.contains("same_object"), "{}", plan.source);
        let mut engine = regorus::Engine::new();
        engine.set_rego_v0(true);
        engine
            .add_policy("t.rego".into(), UNIQUE.into())
            .unwrap_or_else(|e| panic!("{e}"));
        engine
            .add_policy("join.rego".into(), plan.source.clone())
            .unwrap_or_else(|e| panic!("{e}\n{}", plan.source));
    }

    /// Reads of the inventory that an index cannot answer leave the template walked,
    /// with the reason.
    #[test]
    fn other_reads_of_the_inventory_are_not_planned() {
        let body = |b: &str| format!("package t\n\nviolation[{{\"msg\": msg}}] {{\n{b}\n}}\n");
        for (case, rego, why) in [
            (
                "a count",
                body("count(data.inventory.namespace) > 3\nmsg := \"x\""),
                "otherwise than by iterating",
            ),
            (
                "a comprehension",
                body(
                    "xs := [o | o := data.inventory.namespace[_][_][\"Ingress\"][_]]\nmsg := \"x\"",
                ),
                "otherwise than by iterating",
            ),
            (
                "no comparison",
                body(
                    "other := data.inventory.namespace[_][_][\"Ingress\"][_]\nmsg := other.metadata.name",
                ),
                "no comparison",
            ),
            (
                "a comparison with the iterated object only",
                body(
                    "other := data.inventory.namespace[_][_][\"Ingress\"][_]\nother.metadata.name == other.metadata.namespace\nmsg := \"x\"",
                ),
                "no comparison",
            ),
            (
                "data whole",
                body(
                    "d := data\nother := data.inventory.namespace[_][_][\"Ingress\"][_]\nother.metadata.name == input.review.object.metadata.name\nmsg := \"x\"",
                ),
                "reads `data`",
            ),
            (
                "the object side reading input",
                format!(
                    "{}\nf(o) = x {{\n  x := concat(\"/\", [o.metadata.name, input.review.name])\n}}\n",
                    body(
                        "host := input.review.object.metadata.name\nother := data.inventory.namespace[_][_][\"Ingress\"][_]\nf(other) == host\nmsg := \"x\""
                    )
                ),
                "no comparison",
            ),
            (
                "a read in a function",
                format!(
                    "{}\nothers(n) = o {{\n  o := data.inventory.namespace[_][_][\"Ingress\"][n]\n}}\n",
                    body("x := others(input.review.object.metadata.name)\nmsg := \"x\"")
                ),
                "rule others reads the inventory",
            ),
            (
                "with",
                body(
                    "host := input.review.object.metadata.name\nother := data.inventory.namespace[_][_][\"Ingress\"][_]\nother.metadata.name == host with input as {}\nmsg := \"x\"",
                ),
                "with",
            ),
        ] {
            match plan_of(&rego) {
                Err(e) => assert!(e.contains(why), "{case}: {e}"),
                Ok(p) => panic!("{case}: planned {p:?}"),
            }
        }
        let none = plan_of(
            "package t\n\nviolation[{\"msg\": \"x\"}] {\n  input.review.object.metadata.name == \"a\"\n}\n",
        );
        assert!(matches!(none, Ok(None)), "{none:?}");
    }
}
