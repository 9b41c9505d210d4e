//! Built-ins Gatekeeper's templates call that regorus does not have.

use std::collections::HashMap;
use std::sync::Mutex;

/// Built-ins Gatekeeper's library still uses that OPA has deprecated (`re_match`).
pub(super) fn add(engine: &mut regorus::Engine) -> Result<(), String> {
    engine
        .add_extension(
            "re_match".to_string(),
            2,
            Box::new(|args: Vec<regorus::Value>| {
                let pattern = args[0].as_string()?;
                let text = args[1].as_string()?;
                Ok(regorus::Value::from(re_match(pattern, text)?))
            }),
        )
        .map_err(|e| e.to_string())
}

/// `re_match` with each pattern compiled once: a template reading the inventory calls
/// it once per inventory entry for every object it judges, and compiling the pattern
/// each time was most of that cost.
fn re_match(pattern: &str, text: &str) -> Result<bool, regex::Error> {
    static COMPILED: Mutex<Option<HashMap<String, regex::Regex>>> = Mutex::new(None);
    let mut compiled = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    let compiled = compiled.get_or_insert_with(HashMap::new);
    if let Some(re) = compiled.get(pattern) {
        return Ok(re.is_match(text));
    }
    let re = regex::Regex::new(pattern)?;
    let matched = re.is_match(text);
    // Patterns built from the objects themselves would otherwise grow it without end.
    if compiled.len() >= 512 {
        compiled.clear();
    }
    compiled.insert(pattern.to_string(), re);
    Ok(matched)
}
