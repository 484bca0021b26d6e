//! The resolver: a segment trie over absolute keys, one node per cut (never per object),
//! mapping an object key to a blob instance, hot, pinned or unmanaged.
//!
//! Lookups never fail and never allocate: a [`Resolution`] borrows from the [`Trie`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{Blob, Bucket, KeyEncoding, METADATA_BASENAMES, Manifest};

/// The marker a trie node carries; the deepest one on a key's path decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Hot,
    Blob(u32),
}

/// One node of the trie. Pins live in the same nodes as the markers, so one walk down a key
/// answers both "is any prefix pinned?" and "which marker is deepest?".
#[derive(Debug, Default)]
struct Node {
    children: Children,
    marker: Option<Marker>,
    pinned: bool,
}

/// Up to this many children are scanned linearly: most nodes have one or a few, and comparing
/// a few short strings is cheaper than hashing the segment.
const SMALL_CHILDREN: usize = 8;

/// A node's children by segment name.
#[derive(Debug)]
enum Children {
    /// Each name with its [`tag`], so a mismatch is usually decided without reading the
    /// name from the heap.
    Few(Vec<(u64, Box<str>, u32)>),
    Many(FxHashMap<Box<str>, u32>),
}

impl Default for Children {
    fn default() -> Self {
        Self::Few(Vec::new())
    }
}

/// The first up to 7 bytes of a segment and its length (capped at 255) in one word: for
/// names of up to 7 bytes, equal tags mean equal names.
#[inline]
fn tag(segment: &str) -> u64 {
    let bytes = segment.as_bytes();
    let mut word = [0u8; 8];
    let n = bytes.len().min(7);
    word[..n].copy_from_slice(&bytes[..n]);
    word[7] = u8::try_from(bytes.len()).unwrap_or(u8::MAX);
    u64::from_le_bytes(word)
}

impl Children {
    #[inline]
    fn get(&self, segment: &str) -> Option<u32> {
        match self {
            Self::Few(few) => {
                let wanted = tag(segment);
                // Up to 7 bytes the tag holds the whole name: equal tags are equal names.
                let short = segment.len() <= 7;
                few.iter()
                    .find(|(t, name, _)| *t == wanted && (short || name.as_ref() == segment))
                    .map(|&(_, _, child)| child)
            }
            Self::Many(many) => many.get(segment).copied(),
        }
    }

    fn insert(&mut self, segment: &str, child: u32) {
        match self {
            Self::Few(few) if few.len() < SMALL_CHILDREN => {
                few.push((tag(segment), segment.into(), child));
            }
            Self::Few(few) => {
                let mut many: FxHashMap<Box<str>, u32> =
                    few.drain(..).map(|(_, name, c)| (name, c)).collect();
                many.insert(segment.into(), child);
                *self = Self::Many(many);
            }
            Self::Many(many) => {
                many.insert(segment.into(), child);
            }
        }
    }
}

/// A blob definition together with the scope of the manifest it came from.
///
/// Ids are unique only within a scope (every small store has a `b_root`), so the tier state
/// is keyed by `(scope, instance id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRule {
    /// Scope of the defining manifest, slashes stripped.
    pub scope: Arc<str>,
    /// The definition.
    pub blob: Blob,
}

/// What a key resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution<'t> {
    /// Archivable: the key belongs to blob instance `<rule.blob.id>_<n>`.
    Blob {
        /// The matched definition and its scope.
        rule: &'t BlobRule,
        /// The bucket number (chunk indices are not bounded: a digit string of up to 38
        /// digits resolves, as it names a chunk an appended array may have).
        n: u128,
    },
    /// Metadata, a coordinate or a small array: never archived.
    Hot,
    /// Under a pin: kept hot on purpose.
    Pinned,
    /// Nothing claims the key; it stays where it is. Normal and safe, never an error.
    Unmanaged,
}

/// The four kinds of [`Resolution`], without their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Archivable.
    Blob,
    /// Structurally hot.
    Hot,
    /// Deliberately hot.
    Pinned,
    /// Claimed by nothing.
    Unmanaged,
}

impl Kind {
    /// The lower-case name (`blob`, `hot`, `pinned`, `unmanaged`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Blob => "blob",
            Self::Hot => "hot",
            Self::Pinned => "pinned",
            Self::Unmanaged => "unmanaged",
        }
    }
}

impl Resolution<'_> {
    /// The kind without data.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Self::Blob { .. } => Kind::Blob,
            Self::Hot => Kind::Hot,
            Self::Pinned => Kind::Pinned,
            Self::Unmanaged => Kind::Unmanaged,
        }
    }

    /// The instance id `<id>_<n>` for a blob, else `None`.
    #[must_use]
    pub fn blob_id(&self) -> Option<String> {
        match self {
            Self::Blob { rule, n } => Some(rule.blob.instance(*n)),
            _ => None,
        }
    }
}

/// The instance id for a blob, the kind name otherwise (what `svcd manifest resolve` prints).
impl fmt::Display for Resolution<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Blob { rule, n } => write!(f, "{}_{n}", rule.blob.id),
            other => f.write_str(other.kind().as_str()),
        }
    }
}

/// Blob definitions of any number of manifests, indexed by key segment.
///
/// # Lookup rules
/// 1. A key is split on `/`, empty segments dropped; no segments is unmanaged.
/// 2. A last segment in the hot-basename set (the five metadata names plus every
///    `**/<name>` pattern of any manifest) is hot, anywhere, even outside every scope.
/// 3. A pin on the key's path (at any depth) makes it pinned.
/// 4. Otherwise the deepest marker on the path decides: hot (a `hot_always` prefix) or a
///    blob, whose bucket number comes from the chunk index after the prefix. A chunk index
///    that is missing or not plain ASCII digits makes the key unmanaged.
///
/// Markers on the same node: the later insert wins (blobs after hot prefixes within a
/// manifest, later manifests over earlier ones). The deepest *marker* wins, not the deepest
/// scope: keys a nested manifest does not claim fall through to the parent's markers.
///
/// # `hot_always` dialect
/// `**/<name>` adds a global basename (`**/a/b` is inert, as it never equals one segment);
/// anything else has trailing `*` and `/` stripped and marks that prefix hot. Wildcards in
/// the middle are literal segment names.
///
/// ```
/// use svc_manifests::{Blob, Bucket, KeyEncoding, Manifest, Trie};
/// let mut manifest = Manifest::new("cordex/a.zarr");
/// manifest.hot_always.push("time/**".into());
/// manifest.blobs.push(Blob {
///     id: "b_tas".into(),
///     prefixes: vec!["tas/c".into()],
///     bucket: Some(Bucket { index: 0, width: 2048, key_encoding: KeyEncoding::V3Slash }),
/// });
/// let trie = Trie::from_manifests([&manifest]);
/// assert_eq!(trie.lookup("cordex/a.zarr/tas/c/5000/0/0").to_string(), "b_tas_2");
/// assert_eq!(trie.lookup("cordex/a.zarr/time/c/0").to_string(), "hot");
/// assert_eq!(trie.lookup("cordex/a.zarr/lat/c/0").to_string(), "unmanaged");
/// ```
#[derive(Debug)]
pub struct Trie {
    nodes: Vec<Node>,
    hot_basenames: FxHashSet<Box<str>>,
    /// Bit `n` is set when some hot basename is `n` bytes long (bit 63: 63 or more), so most
    /// chunk keys skip the set lookup.
    hot_lengths: u64,
    rules: Vec<BlobRule>,
    epochs: BTreeMap<String, u64>,
}

impl Default for Trie {
    fn default() -> Self {
        Self {
            nodes: vec![Node::default()],
            hot_basenames: METADATA_BASENAMES.iter().map(|&n| n.into()).collect(),
            hot_lengths: METADATA_BASENAMES
                .iter()
                .fold(0, |bits, n| bits | length_bit(n)),
            rules: Vec::new(),
            epochs: BTreeMap::new(),
        }
    }
}

impl Trie {
    /// An empty trie: only the five metadata basenames are hot.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A trie holding these manifests, added in order.
    #[must_use]
    pub fn from_manifests<'m>(manifests: impl IntoIterator<Item = &'m Manifest>) -> Self {
        let mut trie = Self::new();
        for manifest in manifests {
            trie.add(manifest);
        }
        trie
    }

    /// Adds one manifest's hot prefixes, blobs and pins, and records its epoch.
    pub fn add(&mut self, manifest: &Manifest) {
        let scope = manifest.scope.trim_matches('/');
        self.epochs.insert(scope.to_owned(), manifest.epoch);
        let shared_scope: Arc<str> = scope.into();
        for pattern in &manifest.hot_always {
            if let Some(name) = pattern.strip_prefix("**/") {
                self.hot_lengths |= length_bit(name);
                self.hot_basenames.insert(name.into());
            } else {
                let prefix = pattern.trim_end_matches(['*', '/']);
                let node = insert(&mut self.nodes, scope, prefix);
                self.nodes[node].marker = Some(Marker::Hot);
            }
        }
        for blob in &manifest.blobs {
            let index = u32::try_from(self.rules.len()).expect("fewer than 2^32 blob rules");
            self.rules.push(BlobRule {
                scope: Arc::clone(&shared_scope),
                blob: blob.clone(),
            });
            for prefix in &blob.prefixes {
                let node = insert(&mut self.nodes, scope, prefix);
                self.nodes[node].marker = Some(Marker::Blob(index));
            }
        }
        for pin in &manifest.pinned {
            let node = insert(&mut self.nodes, scope, &pin.prefix);
            self.nodes[node].pinned = true;
        }
    }

    /// Resolves an absolute key (scope included). Never fails.
    #[must_use]
    pub fn lookup<'t>(&'t self, key: &str) -> Resolution<'t> {
        let mut bounds = [(0u32, 0u32); MAX_SEGMENTS];
        match split_into(key, &mut bounds) {
            Some(n) => self.lookup_split(key, &bounds[..n]),
            None => self.lookup_long(key),
        }
    }

    /// The common path: the key's segments were cut once, so every step below indexes them.
    #[inline]
    fn lookup_split<'t>(&'t self, key: &str, bounds: &[(u32, u32)]) -> Resolution<'t> {
        let segment = |i: usize| {
            let (start, end) = bounds[i];
            &key[start as usize..end as usize]
        };
        let Some(&(start, end)) = bounds.last() else {
            return Resolution::Unmanaged;
        };
        let last = &key[start as usize..end as usize];
        if self.hot_lengths & length_bit(last) != 0 && self.hot_basenames.contains(last) {
            return Resolution::Hot;
        }
        let mut node = &self.nodes[0];
        if node.pinned {
            return Resolution::Pinned;
        }
        let mut best = node.marker.map(|m| (m, 0));
        for (depth, &(start, end)) in bounds.iter().enumerate() {
            let Some(child) = node.children.get(&key[start as usize..end as usize]) else {
                break;
            };
            node = &self.nodes[child as usize];
            if node.pinned {
                return Resolution::Pinned;
            }
            if let Some(marker) = node.marker {
                best = Some((marker, depth + 1));
            }
        }
        let (index, depth) = match best {
            None => return Resolution::Unmanaged,
            Some((Marker::Hot, _)) => return Resolution::Hot,
            Some((Marker::Blob(index), depth)) => (index, depth),
        };
        let rule = &self.rules[index as usize];
        let n = match rule.blob.bucket {
            None => Some(0),
            Some(bucket) => usize::try_from(bucket.index).ok().and_then(|field| {
                let raw = match bucket.key_encoding {
                    KeyEncoding::V2Flat if depth < bounds.len() => {
                        segment(depth).split('.').nth(field)?
                    }
                    KeyEncoding::V2Flat => return None,
                    KeyEncoding::V3Slash | KeyEncoding::V2Slash => {
                        let at = depth.checked_add(field)?;
                        if at >= bounds.len() {
                            return None;
                        }
                        segment(at)
                    }
                };
                let width = bucket.width.max(1);
                match parse_digits(raw) {
                    Some(value) => Some(u128::from(value / width)),
                    None => parse_long_digits(raw).map(|value| value / u128::from(width)),
                }
            }),
        };
        match n {
            Some(n) => Resolution::Blob { rule, n },
            None => Resolution::Unmanaged,
        }
    }

    /// Keys with more than [`MAX_SEGMENTS`] segments: the same rules, scanning as it goes.
    fn lookup_long<'t>(&'t self, key: &str) -> Resolution<'t> {
        let Some(last) = last_segment(key) else {
            return Resolution::Unmanaged;
        };
        if self.hot_lengths & length_bit(last) != 0 && self.hot_basenames.contains(last) {
            return Resolution::Hot;
        }
        match walk(&self.nodes, key) {
            Walk::Pinned => Resolution::Pinned,
            Walk::Deepest(None) => Resolution::Unmanaged,
            Walk::Deepest(Some((Marker::Hot, _))) => Resolution::Hot,
            Walk::Deepest(Some((Marker::Blob(index), rest))) => {
                let rule = &self.rules[index as usize];
                match bucket_number(rule.blob.bucket.as_ref(), rest) {
                    Some(n) => Resolution::Blob { rule, n },
                    None => Resolution::Unmanaged,
                }
            }
        }
    }

    /// Resolves a key relative to `scope` (the one-off form of [`Trie::lookup`]).
    #[must_use]
    pub fn lookup_in<'t>(&'t self, scope: &str, key: &str) -> Resolution<'t> {
        let scope = scope.trim_matches('/');
        if scope.is_empty() {
            return self.lookup(key);
        }
        self.lookup(&format!("{scope}/{key}"))
    }

    /// The epoch of every loaded manifest, by scope (slashes stripped).
    #[must_use]
    pub fn epochs(&self) -> &BTreeMap<String, u64> {
        &self.epochs
    }

    /// The number of trie nodes below the root: one per cut or pin, not per object.
    #[must_use]
    pub fn node_count(&self) -> usize {
        self.nodes.len() - 1
    }
}

/// Keys with up to this many segments are cut once into offsets on the stack.
const MAX_SEGMENTS: usize = 32;

/// Cuts `key` into the byte ranges of its non-empty segments; `None` when there are more
/// than [`MAX_SEGMENTS`] (or the key is longer than 4 GiB).
#[inline]
fn split_into(key: &str, out: &mut [(u32, u32); MAX_SEGMENTS]) -> Option<usize> {
    let bytes = key.as_bytes();
    u32::try_from(bytes.len()).ok()?;
    let mut n = 0;
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'/' {
            if i > start {
                *out.get_mut(n)? = (start as u32, i as u32);
                n += 1;
            }
            start = i + 1;
        }
    }
    if bytes.len() > start {
        *out.get_mut(n)? = (start as u32, bytes.len() as u32);
        n += 1;
    }
    Some(n)
}

#[inline]
fn length_bit(name: &str) -> u64 {
    1 << name.len().min(63)
}

/// Creates the path for `scope` then `prefix` (empty segments dropped) and returns the
/// index of its node.
fn insert(nodes: &mut Vec<Node>, scope: &str, prefix: &str) -> usize {
    let mut at = 0;
    for segment in scope.split('/').chain(prefix.split('/')) {
        if segment.is_empty() {
            continue;
        }
        at = match nodes[at].children.get(segment) {
            Some(child) => child as usize,
            None => {
                let child = nodes.len();
                nodes.push(Node::default());
                let id = u32::try_from(child).expect("fewer than 2^32 trie nodes");
                nodes[at].children.insert(segment, id);
                child
            }
        };
    }
    at
}

/// The last non-empty `/`-separated segment of `key`.
#[inline]
fn last_segment(key: &str) -> Option<&str> {
    let bytes = key.as_bytes();
    let end = bytes.iter().rposition(|&b| b != b'/')? + 1;
    let start = bytes[..end]
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1);
    Some(&key[start..end])
}

/// The next non-empty segment of `key` at or after byte `from`, with the byte after it.
/// Scans bytes: `/` is ASCII, so every cut is a char boundary.
#[inline]
fn next_segment(key: &str, from: usize) -> Option<(&str, usize)> {
    let bytes = key.as_bytes();
    let mut start = from;
    while start < bytes.len() && bytes[start] == b'/' {
        start += 1;
    }
    if start == bytes.len() {
        return None;
    }
    let mut end = start;
    while end < bytes.len() && bytes[end] != b'/' {
        end += 1;
    }
    Some((&key[start..end], end))
}

/// What a walk down the trie found.
enum Walk<'k> {
    /// A pin on the key's path.
    Pinned,
    /// The deepest marker, with the rest of the key after its node.
    Deepest(Option<(Marker, &'k str)>),
}

/// Walks `key` down the trie: stops at the first pin, else finds the deepest marker.
#[inline]
fn walk<'k>(nodes: &[Node], key: &'k str) -> Walk<'k> {
    let mut node = &nodes[0];
    if node.pinned {
        return Walk::Pinned;
    }
    let mut best = node.marker.map(|m| (m, key));
    let mut at = 0;
    while let Some((segment, end)) = next_segment(key, at) {
        let Some(child) = node.children.get(segment) else {
            break;
        };
        node = &nodes[child as usize];
        at = end;
        if node.pinned {
            return Walk::Pinned;
        }
        if let Some(marker) = node.marker {
            best = Some((marker, &key[end..]));
        }
    }
    Walk::Deepest(best)
}

/// The bucket number for the key remainder after a blob's prefix; `None` when the chunk
/// index is missing or not a plain non-negative decimal.
///
/// # Strict digits
/// The index must be ASCII digits only (leading zeros allowed). Signs, whitespace, `_`
/// separators and non-ASCII digits make the key unmanaged.
fn bucket_number(bucket: Option<&Bucket>, rest: &str) -> Option<u128> {
    let Some(bucket) = bucket else {
        return Some(0);
    };
    let index = usize::try_from(bucket.index).ok()?;
    let raw = match bucket.key_encoding {
        KeyEncoding::V2Flat => next_segment(rest, 0)?.0.split('.').nth(index)?,
        KeyEncoding::V3Slash | KeyEncoding::V2Slash => {
            let mut at = 0;
            let mut segment = "";
            for _ in 0..=index {
                let (next, end) = next_segment(rest, at)?;
                segment = next;
                at = end;
            }
            segment
        }
    };
    let width = bucket.width.max(1);
    match parse_digits(raw) {
        Some(value) => Some(u128::from(value / width)),
        None => parse_long_digits(raw).map(|value| value / u128::from(width)),
    }
}

/// A non-empty run of ASCII digits as a number; `None` for anything else or on overflow.
#[inline]
fn parse_digits(raw: &str) -> Option<u64> {
    if raw.is_empty() {
        return None;
    }
    raw.bytes().try_fold(0u64, |value, b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        value.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// The slow path of [`parse_digits`] for indices beyond `u64`: up to 38 ASCII digits.
#[cold]
fn parse_long_digits(raw: &str) -> Option<u128> {
    if raw.is_empty() || raw.len() > 38 {
        return None;
    }
    raw.bytes().try_fold(0u128, |value, b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        Some(value * 10 + u128::from(digit))
    })
}

/// The trie in service, swapped whole on reload: lookups in flight finish on the trie they
/// started with, and no lookup takes a lock.
///
/// ```
/// use svc_manifests::{Manifest, Resolver, Trie};
/// let resolver = Resolver::new(Trie::new());
/// assert_eq!(resolver.current().lookup("s/x").to_string(), "unmanaged");
/// let mut manifest = Manifest::new("s");
/// manifest.blobs.push(svc_manifests::Blob { id: "b_root".into(), prefixes: vec!["".into()], bucket: None });
/// resolver.replace(Trie::from_manifests([&manifest]));
/// assert_eq!(resolver.current().lookup("s/x").to_string(), "b_root_0");
/// ```
#[derive(Debug)]
pub struct Resolver {
    current: ArcSwap<Trie>,
}

impl Resolver {
    /// A resolver serving `trie`.
    #[must_use]
    pub fn new(trie: Trie) -> Self {
        Self {
            current: ArcSwap::from_pointee(trie),
        }
    }

    /// The trie in service now.
    #[must_use]
    pub fn current(&self) -> Arc<Trie> {
        self.current.load_full()
    }

    /// Puts a new trie in service atomically and returns the old one.
    pub fn replace(&self, trie: Trie) -> Arc<Trie> {
        self.current.swap(Arc::new(trie))
    }

    /// Loads every manifest from `store` into a new trie and puts it in service when any
    /// scope's epoch differs from the trie in service. Returns whether it swapped.
    ///
    /// # Errors
    /// Listing or reading the manifest store failed, or a manifest is invalid; the trie in
    /// service is kept.
    pub async fn reload(&self, store: &crate::ManifestStore) -> crate::Result<bool> {
        let manifests = store.load_all().await?;
        let trie = Trie::from_manifests(&manifests);
        if trie.epochs() == self.current.load().epochs() {
            return Ok(false);
        }
        self.replace(trie);
        Ok(true)
    }
}

impl Default for Resolver {
    fn default() -> Self {
        Self::new(Trie::new())
    }
}

#[cfg(test)]
#[path = "resolve_test.rs"]
mod tests;
