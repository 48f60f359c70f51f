//! A plan's records, shared between copies of the plan until one of them
//! changes.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of plan records that copies of a plan share. A carried plan is
/// copied on every turn to change two counts, and its records (one per
/// cleared message, growing with the thread) rarely change: copying is a
/// reference count, and the first change copies the list. Reads and writes
/// go through `Vec`'s own methods (`Deref`, `DerefMut`).
#[derive(Clone, PartialEq, Eq)]
pub struct Records<T>(Arc<Vec<T>>);

impl<T> Default for Records<T> {
    fn default() -> Self {
        Records(Arc::new(Vec::new()))
    }
}

impl<T> Deref for Records<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T: Clone> DerefMut for Records<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> From<Vec<T>> for Records<T> {
    fn from(v: Vec<T>) -> Self {
        Records(Arc::new(v))
    }
}

impl<T> FromIterator<T> for Records<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Records(Arc::new(iter.into_iter().collect()))
    }
}

impl<T: Clone> IntoIterator for Records<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        Arc::unwrap_or_clone(self.0).into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Records<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T: Clone> IntoIterator for &'a mut Records<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        Arc::make_mut(&mut self.0).iter_mut()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Records<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Records<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Records<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::deserialize(d).map(Records::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `a` and `b` are the same list, not only equal.
    fn same<T>(a: &Records<T>, b: &Records<T>) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    #[test]
    fn copies_share_until_one_changes() {
        let a: Records<u32> = vec![1, 2, 3].into();
        let mut b = a.clone();
        assert!(same(&a, &b));
        b.push(4);
        assert!(!same(&a, &b), "the change copied the list");
        assert_eq!((&a[..], &b[..]), (&[1, 2, 3][..], &[1, 2, 3, 4][..]));
        assert_eq!(
            serde_json::to_string(&b).expect("json"),
            "[1,2,3,4]",
            "serialized as the list it holds"
        );
        let back: Records<u32> = serde_json::from_str("[1,2,3]").expect("parse");
        assert_eq!(back, a);
        assert_eq!(format!("{a:?}"), "[1, 2, 3]");
    }
}
