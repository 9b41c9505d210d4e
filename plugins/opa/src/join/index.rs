//! A template's joins at run time: the index over a build's inventory, kept per object
//! version between builds, and the keys of each judged object.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use isobar_sdk::Object;

use super::plan::{index_rule, keys_rule};
use crate::inventory::{Inventory, Place};

/// A template's joins: the package its rules are in (`data.…`) and how many.
#[derive(Debug, Clone)]
pub struct Joins {
    pub package: String,
    pub count: usize,
}

/// Each join's values of one object.
type Values = Arc<Vec<Vec<String>>>;

/// Object address → the object version and its values.
type ByObject = HashMap<usize, (Object, Values)>;

/// Each inventory object's values, per template (by digest), for the object version
/// they were computed from: a build computes only the objects that changed.
#[derive(Default)]
pub struct IndexCache {
    held: Mutex<HashMap<u64, ByObject>>,
}

/// One build's index: for each join, each value → the places of the objects that have it.
#[derive(Debug, Default)]
pub struct Index {
    per_join: Vec<HashMap<String, Vec<Place>>>,
}

impl Index {
    /// The places of the objects that have one of `keys` (per join), sorted.
    pub fn places(&self, keys: &[Vec<String>]) -> Vec<Place> {
        let mut out: Vec<Place> = Vec::new();
        for (values, keys) in self.per_join.iter().zip(keys) {
            for key in keys {
                if let Some(places) = values.get(key) {
                    out.extend(places.iter().cloned());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn add(&mut self, place: &Place, values: &[Vec<String>]) {
        for (n, values) in values.iter().enumerate() {
            if let Some(index) = self.per_join.get_mut(n) {
                for value in values {
                    index.entry(value.clone()).or_default().push(place.clone());
                }
            }
        }
    }
}

/// A value as the index compares it: its JSON text (regorus writes objects and sets
/// with their keys in order, and numbers in one form).
fn canonical(value: &regorus::Value) -> Result<String, String> {
    value.to_json_str().map_err(|e| e.to_string())
}

fn set_items(value: &regorus::Value) -> Result<Vec<regorus::Value>, String> {
    match value {
        regorus::Value::Undefined => Ok(Vec::new()),
        other => Ok(other
            .as_set()
            .map_err(|e| e.to_string())?
            .iter()
            .cloned()
            .collect()),
    }
}

impl Joins {
    /// The index over `inventory`. `engine` is the template's, without data; `template`
    /// its digest. `keep`: remember the values for the next build.
    pub fn index(
        &self,
        engine: &regorus::Engine,
        template: u64,
        inventory: &Inventory,
        cache: &IndexCache,
        keep: bool,
    ) -> Result<Index, String> {
        let mut held = cache.held.lock().unwrap_or_else(|p| p.into_inner());
        let empty = HashMap::new();
        let before = held.get(&template).unwrap_or(&empty);
        let mut index = Index {
            per_join: vec![HashMap::new(); self.count],
        };
        let mut now: ByObject = HashMap::with_capacity(inventory.objects().len());
        let mut fresh: Vec<&Place> = Vec::new();
        for (place, object) in inventory.objects() {
            match before
                .get(&object.address())
                .filter(|(held, _)| held.ptr_eq(object))
            {
                Some((_, values)) => {
                    index.add(place, values);
                    now.insert(object.address(), (object.clone(), values.clone()));
                }
                None => fresh.push(place),
            }
        }
        if !fresh.is_empty() {
            let mut engine = engine.clone();
            engine
                .add_data(regorus::Value::from(
                    inventory.subset(fresh.iter().copied()),
                ))
                .map_err(|e| e.to_string())?;
            engine.set_input(regorus::Value::new_object());
            let mut by_place: HashMap<&Place, Vec<Vec<String>>> = fresh
                .iter()
                .map(|p| (*p, vec![Vec::new(); self.count]))
                .collect();
            for n in 0..self.count {
                let found = engine
                    .eval_rule(index_rule(&self.package, n))
                    .map_err(|e| e.to_string())?;
                for pair in set_items(&found)? {
                    let pair = pair.as_array().map_err(|e| e.to_string())?;
                    let (Some(value), Some(place)) = (pair.first(), pair.get(1)) else {
                        continue;
                    };
                    let Some(place) = place_of(place) else {
                        continue;
                    };
                    if let Some(values) = by_place.get_mut(&place) {
                        values[n].push(canonical(value)?);
                    }
                }
            }
            for (place, values) in by_place {
                if let Some(object) = inventory.objects().get(place) {
                    index.add(place, &values);
                    now.insert(object.address(), (object.clone(), Arc::new(values)));
                }
            }
        }
        if keep {
            // Templates edited away are not kept forever.
            if held.len() > 64 {
                held.clear();
            }
            held.insert(template, now);
        }
        Ok(index)
    }

    /// Evaluates each rule once, on whatever data and input `engine` has.
    pub fn check(&self, engine: &mut regorus::Engine) -> Result<(), String> {
        self.keys(engine)?;
        for n in 0..self.count {
            engine
                .eval_rule(index_rule(&self.package, n))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The values the judged object (`engine`'s input) offers to each join.
    pub fn keys(&self, engine: &mut regorus::Engine) -> Result<Vec<Vec<String>>, String> {
        let mut out = Vec::with_capacity(self.count);
        for n in 0..self.count {
            let found = engine
                .eval_rule(keys_rule(&self.package, n))
                .map_err(|e| e.to_string())?;
            let mut keys = set_items(&found)?
                .iter()
                .map(canonical)
                .collect::<Result<Vec<_>, _>>()?;
            keys.sort();
            keys.dedup();
            out.push(keys);
        }
        Ok(out)
    }
}

/// `["namespace", ns, apiVersion, kind, name]` → the place; other scopes hold nothing.
fn place_of(value: &regorus::Value) -> Option<Place> {
    let items = value.as_array().ok()?;
    let text = |i: usize| -> Option<String> { Some(items.get(i)?.as_string().ok()?.to_string()) };
    if text(0)? != "namespace" || items.len() != 5 {
        return None;
    }
    Some([text(1)?, text(2)?, text(3)?, text(4)?])
}
