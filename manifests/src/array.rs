//! One Zarr array as the partitioner sees it: shape, object shape and sizes.

use crate::model::KeyEncoding;

/// An array of a store, described from its metadata and the LIST.
///
/// ```
/// use svc_manifests::{Array, KeyEncoding};
/// let tas = Array {
///     shards: Some(vec![1280, 412, 424]),
///     ..Array::new("tas", vec![1_314_000, 412, 424], vec![128, 412, 424], 4)
/// };
/// assert_eq!(tas.object_shape(), &[1280, 412, 424]);
/// assert_eq!(tas.nobjects(), 1027);
/// assert_eq!(tas.chunk_prefix(), "tas/c");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// Path relative to the scope; empty for an array at the scope root.
    pub path: String,
    /// The array's shape.
    pub shape: Vec<u64>,
    /// The inner chunk shape.
    pub chunks: Vec<u64>,
    /// Bytes per element.
    pub itemsize: u64,
    /// The shard shape when sharded: then the shard is the stored object.
    pub shards: Option<Vec<u64>>,
    /// Bytes summed from the LIST, when any object was seen.
    pub stored_bytes: Option<u64>,
    /// Objects seen in the LIST, when any.
    pub nobjects_seen: Option<u64>,
    /// Whether it is a dimension coordinate (kept hot).
    pub is_coordinate: bool,
    /// How its chunk keys are spelled.
    pub key_encoding: KeyEncoding,
}

impl Array {
    /// An unsharded, unobserved, non-coordinate v3 array.
    #[must_use]
    pub fn new(path: &str, shape: Vec<u64>, chunks: Vec<u64>, itemsize: u64) -> Self {
        Self {
            path: path.to_owned(),
            shape,
            chunks,
            itemsize,
            shards: None,
            stored_bytes: None,
            nobjects_seen: None,
            is_coordinate: false,
            key_encoding: KeyEncoding::V3Slash,
        }
    }

    /// The stored object's shape: the shard if sharded, else the chunk.
    #[must_use]
    pub fn object_shape(&self) -> &[u64] {
        self.shards.as_deref().unwrap_or(&self.chunks)
    }

    /// Objects per dimension of the full grid.
    #[must_use]
    pub fn object_grid(&self) -> Vec<u64> {
        self.shape
            .iter()
            .zip(self.object_shape())
            .map(|(&s, &c)| if c == 0 { 0 } else { s.div_ceil(c) })
            .collect()
    }

    /// Objects in the full grid (partition for the shape it will have, not what is written).
    #[must_use]
    pub fn nobjects(&self) -> u64 {
        self.object_grid().iter().product()
    }

    /// Size of one object without compression.
    #[must_use]
    pub fn uncompressed_object_bytes(&self) -> u64 {
        self.object_shape().iter().product::<u64>() * self.itemsize
    }

    /// Stored bytes if observed, else the uncompressed size of the full grid.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.stored_bytes
            .unwrap_or_else(|| self.nobjects() * self.uncompressed_object_bytes())
    }

    /// Average object size over the objects seen (so a partly written array is not taken
    /// for one that compresses better); at least 1.
    #[must_use]
    pub fn avg_object_bytes(&self) -> u64 {
        let seen = self.nobjects_seen.unwrap_or_else(|| self.nobjects());
        (self.total_bytes() / seen.max(1)).max(1)
    }

    /// The prefix its chunk keys start with: `<path>/c` for v3 keys, `<path>` for v2 keys.
    #[must_use]
    pub fn chunk_prefix(&self) -> String {
        match (self.key_encoding, self.path.is_empty()) {
            (KeyEncoding::V3Slash, true) => "c".to_owned(),
            (KeyEncoding::V3Slash, false) => format!("{}/c", self.path),
            _ => self.path.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_shape_prefers_shard() {
        let a = Array {
            shards: Some(vec![100, 10]),
            ..Array::new("a", vec![1000, 10], vec![10, 10], 4)
        };
        assert_eq!(a.nobjects(), 10);
        assert_eq!(a.uncompressed_object_bytes(), 4000);
    }

    #[test]
    fn nobjects_is_the_full_grid_not_what_was_written() {
        let a = Array {
            stored_bytes: Some(1000),
            nobjects_seen: Some(10),
            ..Array::new("a", vec![1000], vec![10], 4)
        };
        assert_eq!(a.nobjects(), 100);
        assert_eq!(a.avg_object_bytes(), 100);
    }

    #[test]
    fn total_bytes_falls_back_to_uncompressed() {
        let a = Array::new("a", vec![100, 4], vec![10, 4], 8);
        assert_eq!(a.total_bytes(), 10 * 320);
    }

    #[test]
    fn chunk_prefix_per_encoding() {
        let mut a = Array::new("tas", vec![1], vec![1], 1);
        assert_eq!(a.chunk_prefix(), "tas/c");
        a.key_encoding = KeyEncoding::V2Slash;
        assert_eq!(a.chunk_prefix(), "tas");
        a.key_encoding = KeyEncoding::V2Flat;
        assert_eq!(a.chunk_prefix(), "tas");
    }

    #[test]
    fn root_array_chunk_prefix() {
        let mut a = Array::new("", vec![1], vec![1], 1);
        assert_eq!(a.chunk_prefix(), "c");
        a.key_encoding = KeyEncoding::V2Flat;
        assert_eq!(a.chunk_prefix(), "");
    }
}
