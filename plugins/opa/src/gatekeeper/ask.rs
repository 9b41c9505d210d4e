//! One Constraint asking about objects within a build: a verdict reused while what it
//! was made from is the same, the judged object's keys and the inventory objects they
//! select for a template answered from an index, the build's budget for the others.

use super::*;

/// A verdict kept for the next build, and what it was made from.
#[derive(Clone)]
pub(super) struct Held {
    /// The object, held so that its address is not reused.
    pub(super) object: Object,
    pub(super) messages: Vec<String>,
    /// With joins: the values the object offered and the inventory objects it was
    /// judged against (the verdict holds while they are the same).
    pub(super) keys: Vec<Vec<String>>,
    pub(super) against: Vec<Object>,
    /// A template walking the whole inventory: the inventory it was judged against.
    pub(super) inventory: Option<Arc<Vec<Object>>>,
}

impl Held {
    pub(super) fn against_same(&self, objects: &[&Object]) -> bool {
        self.against.len() == objects.len()
            && self.against.iter().zip(objects).all(|(a, b)| a.ptr_eq(b))
    }
}

/// What one build carries from Constraint to Constraint.
pub(super) struct Round {
    /// What the next build may reuse.
    pub(super) kept: Verdicts,
    /// Each Constraint's violations by object, for the next build.
    pub(super) tallies: HashMap<u64, Tally>,
    /// The time spent on templates walking the whole inventory.
    pub(super) spent: Duration,
    pub(super) inventory: Arc<Vec<Object>>,
}

/// One Constraint's asking of objects within a build.
pub(super) struct Asking<'j, 'a> {
    pub(super) judge: &'j Judge<'a>,
    pub(super) compiled: &'j Compiled,
    /// The template's digest.
    pub(super) template: u64,
    pub(super) parameters: Value,
    pub(super) inventory: Arc<Vec<Object>>,
    /// The template's engine with the build's whole data.
    pub(super) engine: Option<regorus::Engine>,
    /// With joins: the template's engine without data, and the build's index.
    pub(super) keys_engine: Option<regorus::Engine>,
    pub(super) index: Option<crate::join::Index>,
}

/// What became of one object.
pub(super) enum Asked {
    Judged(Held),
    /// Left for a later build (out of time).
    Deferred,
    /// This object could not be judged.
    Failed(String),
    /// No object can be.
    Broken(String),
}

impl Asking<'_, '_> {
    fn input(&self, object: &Object) -> Value {
        let review = review(object, &crate::inventory::manifest(object));
        json!({"review": review, "parameters": self.parameters})
    }

    /// Judges `object`, or reuses `held` (its last verdict) while what that was made
    /// from is the same. `spent`: the build's time on templates walking the inventory.
    pub(super) fn ask(
        &mut self,
        object: &Object,
        held: Option<Held>,
        spent: &mut Duration,
    ) -> Asked {
        let compiled = self.compiled;
        if let Some(joins) = &compiled.joins {
            return self.ask_joined(joins, object, held);
        }
        let walks = compiled.reads_inventory;
        let inventory = walks.then(|| self.inventory.clone());
        if let Some(held) = held {
            let same = match (&held.inventory, &inventory) {
                (Some(then), Some(now)) => Arc::ptr_eq(then, now),
                (None, None) => true,
                _ => false,
            };
            if same {
                return Asked::Judged(held);
            }
        }
        if walks && self.judge.whole && *spent >= self.judge.budget {
            return Asked::Deferred;
        }
        let started = std::time::Instant::now();
        let input = self.input(object);
        let engine = match &mut self.engine {
            Some(engine) => engine,
            None => match compiled.prepare(&self.judge.data.rego()) {
                Ok(prepared) => self.engine.insert(prepared),
                Err(e) => return Asked::Broken(format!("loading data: {e}")),
            },
        };
        let judged = compiled.violations(engine, &input);
        if walks {
            *spent += started.elapsed();
        }
        match judged {
            Ok(messages) => Asked::Judged(Held {
                object: object.clone(),
                messages,
                keys: Vec::new(),
                against: Vec::new(),
                inventory,
            }),
            Err(e) => Asked::Failed(e),
        }
    }

    /// `ask` for a template whose inventory reads are answered from the index: the
    /// object is judged against the inventory objects its keys select.
    fn ask_joined(
        &mut self,
        joins: &crate::join::Joins,
        object: &Object,
        held: Option<Held>,
    ) -> Asked {
        let compiled = self.compiled;
        let mut input = None;
        let keys = match &held {
            Some(held) => held.keys.clone(),
            None => {
                let value = input.insert(self.input(object));
                let engine = self
                    .keys_engine
                    .get_or_insert_with(|| compiled.engine.clone());
                engine.set_input(regorus::Value::from(value.clone()));
                match joins.keys(engine) {
                    Ok(keys) => keys,
                    Err(e) => return Asked::Failed(e),
                }
            }
        };
        if self.index.is_none() {
            let judge = self.judge;
            match joins.index(
                &compiled.engine,
                self.template,
                judge.inventory,
                &judge.cache.index,
                judge.whole,
            ) {
                Ok(index) => self.index = Some(index),
                Err(e) => return Asked::Broken(format!("indexing the inventory: {e}")),
            }
        }
        let places = self
            .index
            .as_ref()
            .map(|index| index.places(&keys))
            .unwrap_or_default();
        let objects = self.judge.inventory.objects();
        let against: Vec<&Object> = places.iter().filter_map(|p| objects.get(p)).collect();
        if let Some(held) = held
            && held.against_same(&against)
        {
            return Asked::Judged(held);
        }
        let input = match input {
            Some(input) => input,
            None => self.input(object),
        };
        let mut engine = compiled.engine.clone();
        let data = regorus::Value::from(self.judge.inventory.subset(&places));
        if let Err(e) = engine.add_data(data) {
            return Asked::Failed(e.to_string());
        }
        match compiled.violations(&mut engine, &input) {
            Ok(messages) => Asked::Judged(Held {
                object: object.clone(),
                messages,
                keys,
                against: against.into_iter().cloned().collect(),
                inventory: None,
            }),
            Err(e) => Asked::Failed(e),
        }
    }
}
