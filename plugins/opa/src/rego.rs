//! Rego policies, evaluated in-process by regorus.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use regorus::utils::limits::ExecutionTimerConfig;

use crate::{Data, Policy, Prepared, Verdict, messages};

pub struct RegoPolicy {
    name: String,
    /// The rules asked for: `data.<package>.deny` / `.warn`, when the module has them.
    deny: Option<String>,
    warn: Option<String>,
    /// Whether the source mentions `data.inventory` (or reads `data` as a whole).
    inventory: bool,
    /// The parsed policy; cloned for each build (the clone shares the parsed modules).
    engine: Mutex<regorus::Engine>,
}

impl RegoPolicy {
    /// Parses `text`; the error names the file, line and column.
    pub fn load(name: &str, text: &str, timeout: Duration) -> Result<RegoPolicy, String> {
        let mut engine = regorus::Engine::new();
        engine.set_execution_timer_config(ExecutionTimerConfig {
            limit: timeout,
            check_interval: NonZeroU32::MIN,
        });
        // Rego v1 (OPA 1.0); a policy written before it (`deny[msg] { … }`, as
        // kube-mgmt's and Gatekeeper's are) is read as v0.
        let mut v0 = engine.clone();
        let package = match engine.add_policy(name.to_string(), text.to_string()) {
            Ok(package) => package,
            Err(v1_error) => {
                v0.set_rego_v0(true);
                let package = v0
                    .add_policy(name.to_string(), text.to_string())
                    .map_err(|_| one_line(&v1_error.to_string(), name))?;
                engine = v0;
                package
            }
        };
        let rule = |rule: &str| -> Result<Option<String>, String> {
            let declared = engine
                .has_declared_rule_rooted_at(name, rule)
                .map_err(|e| format!("{name}: {e}"))?;
            Ok(declared.then(|| format!("{package}.{rule}")))
        };
        // Gatekeeper's shape: `violation` denies.
        let deny = match rule("deny")? {
            Some(deny) => Some(deny),
            None => rule("violation")?,
        };
        let warn = rule("warn")?;
        if deny.is_none() && warn.is_none() {
            return Err(format!(
                "{name}: package {package} has neither a deny (or violation) nor a warn rule"
            ));
        }
        // A policy that never names `data.inventory` (nor indexes `data` by a variable)
        // cannot read it.
        let inventory = text.contains("inventory") || text.contains("data[");
        Ok(RegoPolicy {
            name: name.to_string(),
            deny,
            warn,
            inventory,
            engine: Mutex::new(engine),
        })
    }
}

impl Policy for RegoPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn reads_inventory(&self) -> bool {
        self.inventory
    }

    fn prepare(&self, data: &Data) -> Result<Box<dyn Prepared + '_>, String> {
        let mut engine = self
            .engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        engine.add_data(data.rego()).map_err(|e| e.to_string())?;
        Ok(Box::new(PreparedRego {
            policy: self,
            engine,
        }))
    }
}

struct PreparedRego<'a> {
    policy: &'a RegoPolicy,
    engine: regorus::Engine,
}

impl PreparedRego<'_> {
    fn rule(&mut self, rule: &Option<String>) -> Result<Vec<String>, String> {
        let Some(rule) = rule else {
            return Ok(Vec::new());
        };
        let value = self
            .engine
            .eval_rule(rule.clone())
            .map_err(|e| e.to_string())?;
        if value == regorus::Value::Undefined {
            return Ok(Vec::new());
        }
        let json: serde_json::Value =
            serde_json::from_str(&value.to_json_str().map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        messages(&json, rule)
    }
}

impl Prepared for PreparedRego<'_> {
    fn evaluate(&mut self, input: &serde_json::Value) -> Result<Verdict, String> {
        self.engine.set_input(regorus::Value::from(input.clone()));
        let deny = self.rule(&self.policy.deny.clone())?;
        let warn = self.rule(&self.policy.warn.clone())?;
        Ok(Verdict { deny, warn })
    }
}

/// regorus reports a parse error as a source excerpt (`--> file:line:col`, the line, a
/// caret, `error: why`); start-up wants one line: `file:line:col: why`.
pub(crate) fn one_line(text: &str, name: &str) -> String {
    let at = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("--> "))
        .map(str::trim);
    let why = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map(str::trim);
    match (at, why) {
        (Some(at), Some(why)) => format!("{at}: {why}"),
        _ => format!("{name}: {}", text.trim()),
    }
}
