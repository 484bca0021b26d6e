//! Forward columns: for one facet, the term ordinals of every record.
//!
//! Facet counts over a large selection are cheapest as posting-list intersections (dense
//! bitmap containers, popcounts). Over a mid-size or small selection those intersections probe
//! every term's list for every selected id, so the cost grows with the number of terms; walking
//! the selection once and reading each record's ordinal costs one array read per record
//! instead. [`Catalog::facet_counts`](super::Catalog::facet_counts) picks the cheaper side.
//!
//! A record usually has one term per facet, stored inline as a `u16`; records with several
//! terms keep them in a side map. A facet with more distinct terms than a `u16` can number
//! stops being kept here (its columns are dropped) and is always counted by intersection.

use std::collections::HashMap;

use roaring::RoaringBitmap;

/// No term for this record.
const ABSENT: u16 = u16::MAX;
/// Several terms: see [`Forward::multi`].
const MULTI: u16 = u16::MAX - 1;
/// Ordinals `0..MAX_TERMS` name terms.
const MAX_TERMS: usize = MULTI as usize;

/// The forward column of one facet.
#[derive(Default)]
pub(crate) struct Forward {
    /// Per record id: an ordinal, [`ABSENT`] or [`MULTI`].
    ords: Vec<u16>,
    /// The ordinals of records holding several terms.
    multi: HashMap<u32, Vec<u16>>,
    /// Ordinal -> term. Ordinals are never reused, so a term that lost all its records
    /// keeps a slot and counts zero.
    terms: Vec<Box<str>>,
    ordinals: HashMap<Box<str>, u16>,
    /// The facet has outgrown `u16` ordinals; the columns are empty and unused.
    overflowed: bool,
}

impl Forward {
    /// Whether counting through this column is possible.
    pub(crate) fn usable(&self) -> bool {
        !self.overflowed
    }

    fn ordinal(&mut self, term: &str) -> Option<u16> {
        if let Some(ord) = self.ordinals.get(term) {
            return Some(*ord);
        }
        if self.terms.len() >= MAX_TERMS {
            self.overflow();
            return None;
        }
        let ord = self.terms.len() as u16;
        self.terms.push(term.into());
        self.ordinals.insert(term.into(), ord);
        Some(ord)
    }

    fn overflow(&mut self) {
        *self = Forward {
            overflowed: true,
            ..Forward::default()
        };
    }

    /// Records that every record in `ids` holds `term`.
    pub(crate) fn add(&mut self, ids: &RoaringBitmap, term: &str) {
        if self.overflowed || ids.is_empty() {
            return;
        }
        let Some(ord) = self.ordinal(term) else {
            return;
        };
        let needed = ids.max().map_or(0, |max| max as usize + 1);
        if self.ords.len() < needed {
            self.ords.resize(needed, ABSENT);
        }
        for id in ids {
            let slot = &mut self.ords[id as usize];
            match *slot {
                ABSENT => *slot = ord,
                MULTI => {
                    let held = self.multi.entry(id).or_default();
                    if !held.contains(&ord) {
                        held.push(ord);
                    }
                }
                one if one == ord => {}
                one => {
                    *slot = MULTI;
                    self.multi.insert(id, vec![one, ord]);
                }
            }
        }
    }

    /// Records that no record in `ids` holds `term` any more.
    pub(crate) fn remove(&mut self, ids: &RoaringBitmap, term: &str) {
        if self.overflowed {
            return;
        }
        let Some(ord) = self.ordinals.get(term).copied() else {
            return;
        };
        for id in ids {
            let Some(slot) = self.ords.get_mut(id as usize) else {
                continue;
            };
            match *slot {
                MULTI => {
                    let held = self.multi.get_mut(&id).expect("MULTI records have a list");
                    held.retain(|o| *o != ord);
                    if held.len() <= 1 {
                        *slot = held.first().copied().unwrap_or(ABSENT);
                        self.multi.remove(&id);
                    }
                }
                one if one == ord => *slot = ABSENT,
                _ => {}
            }
        }
    }

    /// Gives back the column above record id `len` (all of it absent).
    pub(crate) fn truncate(&mut self, len: usize) {
        if len < self.ords.len() {
            self.ords.truncate(len);
            self.ords.shrink_to_fit();
        }
    }

    /// The number of selected records holding each term, in term order, zero counts left out.
    /// `selection` holds record ids in ascending order, so the column is read front to back.
    pub(crate) fn count(&self, selection: &[u32]) -> Vec<(String, u64)> {
        // One slot per possible ordinal, so ABSENT and MULTI land in slots of their own and
        // the hot loop has no branch on the ordinal.
        let mut counts = vec![0_u32; usize::from(u16::MAX) + 1];
        for id in selection {
            let ord = self.ords.get(*id as usize).copied().unwrap_or(ABSENT);
            counts[usize::from(ord)] += 1;
        }
        if counts[usize::from(MULTI)] > 0 {
            for id in selection {
                if let Some(ords) = self.multi.get(id) {
                    for ord in ords {
                        counts[usize::from(*ord)] += 1;
                    }
                }
            }
        }
        let mut out: Vec<(String, u64)> = counts[..self.terms.len()]
            .iter()
            .enumerate()
            .filter(|(_, count)| **count > 0)
            .map(|(ord, count)| (self.terms[ord].to_string(), u64::from(*count)))
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[u32]) -> RoaringBitmap {
        list.iter().copied().collect()
    }

    #[test]
    fn single_and_multiple_terms_are_counted() {
        let mut f = Forward::default();
        f.add(&ids(&[0, 1]), "b");
        f.add(&ids(&[1]), "a");
        f.add(&ids(&[1]), "b");
        f.add(&ids(&[3]), "c");
        let all: Vec<u32> = (0..5).collect();
        assert_eq!(
            f.count(&all),
            vec![("a".into(), 1), ("b".into(), 2), ("c".into(), 1)]
        );
        let some = [1, 2];
        assert_eq!(f.count(&some), vec![("a".into(), 1), ("b".into(), 1)]);
    }

    #[test]
    fn removal_collapses_multi_back_to_one() {
        let mut f = Forward::default();
        f.add(&ids(&[7]), "a");
        f.add(&ids(&[7]), "b");
        f.remove(&ids(&[7]), "a");
        assert!(f.multi.is_empty());
        let all: Vec<u32> = (0..10).collect();
        assert_eq!(f.count(&all), vec![("b".into(), 1)]);
        f.remove(&ids(&[7]), "b");
        f.remove(&ids(&[7]), "never-seen");
        f.remove(&ids(&[99]), "b");
        assert_eq!(f.count(&all), Vec::new());
    }

    #[test]
    fn too_many_terms_disable_the_column() {
        let mut f = Forward::default();
        for i in 0..=MAX_TERMS {
            f.add(&ids(&[i as u32]), &format!("t{i}"));
        }
        assert!(!f.usable());
        assert!(f.ords.is_empty() && f.terms.is_empty());
    }
}
