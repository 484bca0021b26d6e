//! Posting deltas: the value format of the postings family and its merge operator.
//!
//! Every value, stored or merged in, is a delta `(adds, removes)` of record ids. Applying `d1`
//! then `d2` is again a delta: `adds = (a1 - r2) | a2`, `removes = (r1 - a2) | r2`, so the merge
//! is associative and RocksDB may combine operands in any grouping. A stored posting list is the
//! `adds` of its folded delta. Ingest writes one merge per touched term, never rewriting a large
//! list.

use roaring::RoaringBitmap;

use crate::error::{Error, Result};

use super::cf;

/// Ids to add to and remove from a posting list.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PostingDelta {
    /// Ids that now carry the term.
    pub adds: RoaringBitmap,
    /// Ids that no longer carry it.
    pub removes: RoaringBitmap,
}

const FORMAT: u8 = 1;

impl PostingDelta {
    /// Applies `next` after `self`.
    pub fn then(&mut self, next: &PostingDelta) {
        self.adds -= &next.removes;
        self.adds |= &next.adds;
        self.removes -= &next.adds;
        self.removes |= &next.removes;
    }

    /// Records that `id` gains the term (undoing an earlier removal in this delta).
    pub fn add(&mut self, id: u32) {
        self.removes.remove(id);
        self.adds.insert(id);
    }

    /// Records that `id` loses the term.
    pub fn remove(&mut self, id: u32) {
        self.adds.remove(id);
        self.removes.insert(id);
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let adds_len = self.adds.serialized_size();
        let mut out = Vec::with_capacity(5 + adds_len + self.removes.serialized_size());
        out.push(FORMAT);
        out.extend_from_slice(&(adds_len as u32).to_be_bytes());
        self.adds
            .serialize_into(&mut out)
            .expect("writing to a Vec cannot fail");
        self.removes
            .serialize_into(&mut out)
            .expect("writing to a Vec cannot fail");
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| Error::Corrupt {
            family: cf::POSTINGS,
            reason,
        };
        if bytes.len() < 5 || bytes[0] != FORMAT {
            return Err(corrupt("unknown posting format".into()));
        }
        let adds_len = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes")) as usize;
        let rest = &bytes[5..];
        if rest.len() < adds_len {
            return Err(corrupt("truncated posting".into()));
        }
        let adds = RoaringBitmap::deserialize_from(&rest[..adds_len])
            .map_err(|e| corrupt(e.to_string()))?;
        let removes = RoaringBitmap::deserialize_from(&rest[adds_len..])
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(PostingDelta { adds, removes })
    }
}

/// The posting list stored under a key.
///
/// # Errors
/// [`Error::Corrupt`] for bytes that are not a posting delta.
pub(crate) fn decode_postings(bytes: &[u8]) -> Result<RoaringBitmap> {
    Ok(PostingDelta::decode(bytes)?.adds)
}

/// A set of ids in the value format of the postings family (a delta that only adds).
pub(crate) fn encode_postings(ids: &RoaringBitmap) -> Vec<u8> {
    PostingDelta {
        adds: ids.clone(),
        removes: RoaringBitmap::new(),
    }
    .encode()
}

/// The RocksDB merge operator over posting deltas.
pub(super) fn merge(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let mut folded = match existing {
        Some(bytes) => PostingDelta::decode(bytes).ok()?,
        None => PostingDelta::default(),
    };
    for operand in operands {
        folded.then(&PostingDelta::decode(operand).ok()?);
    }
    Some(folded.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Batch, Db, posting_key};

    fn delta(adds: &[u32], removes: &[u32]) -> PostingDelta {
        PostingDelta {
            adds: adds.iter().copied().collect(),
            removes: removes.iter().copied().collect(),
        }
    }

    #[test]
    fn composition_is_associative() {
        let (a, b, c) = (
            delta(&[1, 2, 3], &[9]),
            delta(&[4], &[2, 3]),
            delta(&[2, 9], &[4]),
        );
        let mut left = a.clone();
        left.then(&b);
        left.then(&c);
        let mut bc = b.clone();
        bc.then(&c);
        let mut right = a.clone();
        right.then(&bc);
        assert_eq!(left, right);
        assert_eq!(left.adds.iter().collect::<Vec<_>>(), vec![1, 2, 9]);
    }

    #[test]
    fn merges_fold_in_rocksdb() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let key = posting_key("project", "cmip6");
        for d in [delta(&[1, 2, 3], &[]), delta(&[], &[2]), delta(&[7], &[])] {
            let mut batch = Batch::default();
            batch.merge_postings(key.clone(), &d);
            db.write(batch).unwrap();
        }
        let stored = db.get(crate::db::cf::POSTINGS, &key).unwrap().unwrap();
        assert_eq!(
            decode_postings(&stored).unwrap().iter().collect::<Vec<_>>(),
            vec![1, 3, 7]
        );
    }
}
