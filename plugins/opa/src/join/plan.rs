//! Which templates' inventory reads can be answered from an index, and the rules that
//! answer them, made of the template's own statements.

use std::collections::{BTreeSet, HashSet};

use regorus::unstable::{AssignOp, BoolOp, Expr, Literal, LiteralStmt, Module, Rule};

use super::ast::{Seg, chain, package_of, rule_exprs, rule_name, text, var_name, walk, walk_stmt};

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
    let names_reading_input = names_reading_input(modules, &packages);
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
    let source = index_source(package, &joins, v1);
    Ok(Some(Plan {
        source,
        joins: joins.len(),
    }))
}

/// Rules whose value depends on `input` (through other rules too): the index may not
/// call them, as it is computed once for every judged object.
fn names_reading_input(modules: &[Node<Module>], packages: &HashSet<String>) -> HashSet<String> {
    let mut names_reading_input: HashSet<String> = HashSet::new();
    loop {
        let before = names_reading_input.len();
        for module in modules {
            for rule in &module.policy {
                let Some(name) = rule_name(rule) else {
                    continue;
                };
                let mut reads = Reads::default();
                rule_exprs(rule, &mut |e| reads.visit(e, packages));
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
    names_reading_input
}

/// The index and keys rules of `joins`, as a module of `package` (Rego v1 syntax when
/// `v1`).
fn index_source(package: &str, joins: &[(String, String)], v1: bool) -> String {
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
    source
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
#[path = "plan_tests.rs"]
mod tests;
