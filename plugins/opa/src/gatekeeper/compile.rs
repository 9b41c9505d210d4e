//! A ConstraintTemplate's Rego compiled: its engine, the rule it is asked, and the joins
//! that answer its reads of `data.inventory` from an index.

use super::*;

/// A template compiled: the engine with its Rego and libs, and the rule to ask.
pub struct Compiled {
    pub(super) engine: regorus::Engine,
    pub(super) violation: String,
    /// Whether its Rego reads `data.inventory`.
    pub reads_inventory: bool,
    /// How its inventory reads are answered from an index (see `join`); `None` when
    /// each object is judged against the whole inventory.
    pub(super) joins: Option<crate::join::Joins>,
    /// Why its reads of `data.inventory` are not answered from an index.
    pub(super) walked: Option<String>,
}

/// The Rego sources of a template: (rego, libs, whether it is Rego v1).
fn sources(spec: &Value) -> Result<(String, Vec<String>, bool), String> {
    let target = spec
        .pointer("/targets/0")
        .ok_or("spec.targets is empty: a template needs a target with Rego")?;
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    if let Some(rego) = target.get("rego").and_then(Value::as_str) {
        return Ok((rego.to_string(), strings(target.get("libs")), false));
    }
    let code = target.get("code").and_then(Value::as_array);
    for entry in code.into_iter().flatten() {
        if entry.get("engine").and_then(Value::as_str) != Some("Rego") {
            continue;
        }
        let source = &entry["source"];
        if let Some(rego) = source.get("rego").and_then(Value::as_str) {
            let v1 = source.get("version").and_then(Value::as_str) == Some("v1");
            return Ok((rego.to_string(), strings(source.get("libs")), v1));
        }
    }
    Err("spec.targets[0] has no Rego (rego, or code with engine Rego); other engines (CEL) are not evaluated".to_string())
}

pub(super) fn compile(name: &str, spec: &Value) -> Result<Compiled, String> {
    let (rego, libs, v1) = sources(spec)?;
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(!v1);
    engine.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
        limit: std::time::Duration::from_millis(100),
        check_interval: std::num::NonZeroU32::MIN,
    });
    super::builtins::add(&mut engine)?;
    let file = format!("{name}.rego");
    let package = engine
        .add_policy(file.clone(), rego.clone())
        .map_err(|e| crate::rego::one_line(&e.to_string(), &file))?;
    for (i, lib) in libs.iter().enumerate() {
        let lib_file = format!("{name}.lib{i}.rego");
        engine
            .add_policy(lib_file.clone(), lib.clone())
            .map_err(|e| crate::rego::one_line(&e.to_string(), &lib_file))?;
    }
    let declared = engine
        .has_declared_rule_rooted_at(&file, "violation")
        .map_err(|e| format!("{file}: {e}"))?;
    if !declared {
        return Err(format!("{file}: package {package} has no violation rule"));
    }
    let reads_inventory = std::iter::once(&rego)
        .chain(&libs)
        .any(|t| t.contains("inventory") || t.contains("data["));
    let (joins, walked) = if reads_inventory {
        match joins(&mut engine, name, &package, v1) {
            Ok(joins) => (joins, None),
            Err(why) => {
                tracing::info!(
                    template = name,
                    "the template's reads of data.inventory are not answered from an index ({why}): each object is judged against the whole inventory, within plugins.opa.inventory-budget per build"
                );
                (None, Some(why))
            }
        }
    } else {
        (None, None)
    };
    Ok(Compiled {
        engine,
        violation: format!("{package}.violation"),
        reads_inventory,
        joins,
        walked,
    })
}

/// Adds the rules answering the template's inventory reads from an index (`join`) to
/// its engine, once each evaluates; `Err` says why they cannot be.
fn joins(
    engine: &mut regorus::Engine,
    name: &str,
    package: &str,
    v1: bool,
) -> Result<Option<crate::join::Joins>, String> {
    let short = package.strip_prefix("data.").unwrap_or(package);
    let modules = engine.get_modules().clone();
    let Some(plan) = crate::join::plan(&modules, short, v1)? else {
        return Ok(None);
    };
    let joins = crate::join::Joins {
        package: package.to_string(),
        count: plan.joins,
    };
    let mut trial = engine.clone();
    let file = format!("{name}.isobar-join.rego");
    trial
        .add_policy(file.clone(), plan.source)
        .map_err(|e| crate::rego::one_line(&e.to_string(), &file))?;
    // Each rule evaluates: an unsafe variable or a statement that cannot stand alone
    // shows here.
    trial.set_input(regorus::Value::new_object());
    joins.check(&mut trial)?;
    *engine = trial;
    Ok(Some(joins))
}

impl Compiled {
    /// Whether its reads of `data.inventory` are answered from an index (`join`).
    pub fn indexed(&self) -> bool {
        self.joins.is_some()
    }

    /// Why its reads of `data.inventory` are walked instead (`None`: indexed, or it
    /// does not read the inventory).
    pub fn walked_because(&self) -> Option<&str> {
        self.walked.as_deref()
    }

    /// The engine with the build's data loaded, to ask about objects one by one.
    pub(super) fn prepare(&self, data: &regorus::Value) -> Result<regorus::Engine, String> {
        let mut engine = self.engine.clone();
        engine.add_data(data.clone()).map_err(|e| e.to_string())?;
        Ok(engine)
    }

    /// The violations' messages for one input.
    pub(super) fn violations(
        &self,
        engine: &mut regorus::Engine,
        input: &Value,
    ) -> Result<Vec<String>, String> {
        engine.set_input(regorus::Value::from(input.clone()));
        let value = engine
            .eval_rule(self.violation.clone())
            .map_err(|e| e.to_string())?;
        if value == regorus::Value::Undefined {
            return Ok(Vec::new());
        }
        let json: Value = serde_json::from_str(&value.to_json_str().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        crate::messages(&json, &self.violation)
    }
}
