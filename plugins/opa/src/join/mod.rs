//! Templates that read `data.inventory` judged against an index instead of the whole
//! inventory.
//!
//! A template such as unique ingress host walks every object of the inventory for each
//! object it judges (`other := data.inventory.namespace[_][v]["Ingress"][_]`) and keeps
//! those whose field equals one of the judged object's (`other.spec.rules[_].host ==
//! host`). Walked in the interpreter that is about 2 µs per inventory object: 20 ms and
//! more per object at 10,000. When every read of the inventory has that shape, the join
//! is answered from an index instead:
//!
//! - the *index* rule keeps the iteration and the definitions that depend only on the
//!   object iterated, and gives each inventory object's value of the compared side:
//!   evaluated once per object version, not per judged object;
//! - the *keys* rule keeps the statements that do not depend on the iterated object and
//!   gives the values the other side takes for the judged object;
//! - the template is then evaluated with an inventory holding only the objects whose
//!   value is among the keys.
//!
//! Both rules are made of the template's own statements, taken from its source. Leaving
//! out conjuncts only widens a rule's answers, so the keys are a superset of the values
//! the comparison can meet, and every object the template could pair with the judged
//! one is in the smaller inventory: the template's answer is the same. A template whose
//! inventory reads have any other shape (a count over the inventory, a read inside a
//! function or comprehension, `data` taken whole, `with`) is evaluated as before.

mod ast;
mod index;
mod plan;

pub use index::{Index, IndexCache, Joins};
pub use plan::plan;
