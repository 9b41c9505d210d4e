//! A set kept as a sorted vector of exactly its elements. Most sets Isobar keeps per
//! object hold one element (the proxy claiming a host, the cluster of a vhost, the slice
//! of a Service), and a `BTreeSet` allocates a node of eleven slots for it: about 600
//! bytes for one `ObjectKey`, megabytes at 10,000 objects. Inserting is linear in the
//! set's size, which stays small; a set holds exactly its elements up to [`EXACT_UP_TO`],
//! and grows as a vector does past it.

use std::borrow::Borrow;

/// Up to this many elements, a set's vector has no spare capacity.
pub const EXACT_UP_TO: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SmallSet<T>(Vec<T>);

impl<T> Default for SmallSet<T> {
    fn default() -> Self {
        SmallSet(Vec::new())
    }
}

impl<T: Ord> SmallSet<T> {
    pub fn new() -> Self {
        SmallSet::default()
    }

    /// Adds `value`; `false` if it was there.
    pub fn insert(&mut self, value: T) -> bool {
        match self.0.binary_search(&value) {
            Ok(_) => false,
            Err(at) => {
                if self.0.len() < EXACT_UP_TO {
                    self.0.reserve_exact(1);
                }
                self.0.insert(at, value);
                true
            }
        }
    }

    /// Removes `value`; `false` if it was not there.
    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        match self.0.binary_search_by(|v| v.borrow().cmp(value)) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains<Q: Ord + ?Sized>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.0.binary_search_by(|v| v.borrow().cmp(value)).is_ok()
    }

    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.0.retain(keep);
    }
}

impl<T> SmallSet<T> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The elements in order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a SmallSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> IntoIterator for SmallSet<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<T: Ord> FromIterator<T> for SmallSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        let mut set = SmallSet(Vec::new());
        set.extend(values);
        set
    }
}

impl<T: Ord> Extend<T> for SmallSet<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        self.0.extend(values);
        self.0.sort();
        self.0.dedup();
        if self.0.len() <= EXACT_UP_TO {
            self.0.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests;
