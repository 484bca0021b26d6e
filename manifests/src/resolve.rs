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

/// A node of the trie under construction.
#[derive(Debug, Default)]
struct BuildNode {
    children: BTreeMap<Box<str>, u32>,
    marker: Option<Marker>,
    pinned: bool,
}

/// One node of the built trie, stored in the edge that leads to it (the root's on its own),
/// so a step down the key reads one edge: the child's name and everything about the child.
/// Its own child edges are `edges[first..first + count]`. Pins live in the same nodes as the
/// markers, so one walk down a key answers both "is any prefix pinned?" and "which marker
/// is deepest?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    first: u32,
    count: u32,
    /// The marker ([`Node::NO_MARKER`], [`Node::HOT`] or a blob rule's index plus 2) and,
    /// in bit 31, whether the node is pinned.
    state: u32,
}

impl Node {
    const NO_MARKER: u32 = 0;
    const HOT: u32 = 1;
    const PINNED: u32 = 1 << 31;

    fn new(first: u32, count: u32, marker: Option<Marker>, pinned: bool) -> Self {
        let marker = match marker {
            None => Self::NO_MARKER,
            Some(Marker::Hot) => Self::HOT,
            Some(Marker::Blob(index)) => {
                assert!(index < Self::PINNED - 2, "fewer than 2^31 - 2 blob rules");
                index + 2
            }
        };
        let pinned = if pinned { Self::PINNED } else { 0 };
        Self {
            first,
            count,
            state: marker | pinned,
        }
    }

    #[inline]
    fn pinned(self) -> bool {
        self.state & Self::PINNED != 0
    }

    #[inline]
    fn marker(self) -> Option<Marker> {
        match self.state & !Self::PINNED {
            Self::NO_MARKER => None,
            Self::HOT => Some(Marker::Hot),
            blob => Some(Marker::Blob(blob - 2)),
        }
    }
}

/// Nodes with more children than this find a child through [`Trie::wide`]; up to it, the
/// node's contiguous [`Trie::tags`] are all compared, without a branch per child.
const FEW_CHILDREN: u32 = 16;

/// A name's first 16 bytes as two zero-filled little-endian words, and its length: for
/// names of up to 16 bytes, equal heads are equal names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    words: [u64; 2],
    len: u32,
}

/// Names longer than this are confirmed on their bytes after their heads match.
const HEAD_BYTES: usize = 16;

impl Head {
    /// The head of a whole name.
    fn of(name: &[u8]) -> Self {
        let mut padded = [0u8; HEAD_BYTES];
        let n = name.len().min(HEAD_BYTES);
        padded[..n].copy_from_slice(&name[..n]);
        let (w0, w1) = padded.split_at(8);
        Self {
            words: [
                u64::from_le_bytes(w0.try_into().expect("8 bytes")),
                u64::from_le_bytes(w1.try_into().expect("8 bytes")),
            ],
            len: u32::try_from(name.len()).unwrap_or(u32::MAX),
        }
    }

    /// A 64-bit hash of the whole name: the head, and for a long name the bytes after the
    /// 16th. Siblings almost never share a tag; when they do, the lookup falls back to
    /// comparing names.
    #[inline]
    fn tag(&self, name: &[u8]) -> u64 {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        let mut tag = (self.words[0] ^ u64::from(self.len).rotate_left(32))
            .wrapping_mul(K)
            .rotate_left(26)
            ^ self.words[1];
        if name.len() > HEAD_BYTES {
            tag ^= hash_bytes(&name[HEAD_BYTES..]);
        }
        tag.wrapping_mul(K).rotate_left(26)
    }
}

/// A hash of the bytes after a long name's first 16.
#[cold]
fn hash_bytes(bytes: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(bytes)
}

/// A child edge: the child's name (its [`Head`], flattened to keep an edge at 32 bytes) and
/// the child node.
#[derive(Debug, Clone, Copy)]
struct Edge {
    words: [u64; 2],
    len: u32,
    node: Node,
}

impl Edge {
    #[inline]
    fn head(&self) -> Head {
        Head {
            words: self.words,
            len: self.len,
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
/// manifest, later manifests over earlier ones; [`crate::ManifestStore::load_all`] gives
/// parents first ([`crate::sort_parents_first`]), so a deeper scope wins). The deepest *marker* wins, not the deepest
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
    root: Node,
    /// Every other node, in the edge leading to it. Each node's child edges are contiguous,
    /// and the blocks are in depth-first order, so a store's nodes sit together.
    edges: Vec<Edge>,
    /// The [`Head::tag`] of each edge's name, parallel to `edges`.
    tags: Vec<u64>,
    /// Each edge's name in `names` (read only to confirm a name over 16 bytes, or after
    /// two siblings' tags collide).
    name_spans: Vec<(u32, u32)>,
    names: String,
    /// `(node's first edge, tag)` to the edge with that tag, for nodes with more than
    /// [`FEW_CHILDREN`] children (the first such edge, should two siblings share a tag).
    wide: FxHashMap<(u32, u64), u32>,
    hot_basenames: FxHashSet<Box<str>>,
    /// Bit `n` is set when some hot basename is `n` bytes long (bit 63: 63 or more), so most
    /// chunk keys skip the set lookup.
    hot_lengths: u64,
    rules: Vec<BlobRule>,
    epochs: BTreeMap<String, u64>,
}

impl Default for Trie {
    fn default() -> Self {
        Self::from_manifests([])
    }
}

/// Collects manifests into [`BuildNode`]s; [`Builder::finish`] lays them out for lookups.
struct Builder {
    nodes: Vec<BuildNode>,
    hot_basenames: FxHashSet<Box<str>>,
    rules: Vec<BlobRule>,
    epochs: BTreeMap<String, u64>,
}

impl Builder {
    fn new() -> Self {
        Self {
            nodes: vec![BuildNode::default()],
            hot_basenames: METADATA_BASENAMES.iter().map(|&n| n.into()).collect(),
            rules: Vec::new(),
            epochs: BTreeMap::new(),
        }
    }

    /// Adds one manifest's hot prefixes, blobs and pins, and records its epoch.
    fn add(&mut self, manifest: &Manifest) {
        let scope = manifest.scope.trim_matches('/');
        self.epochs.insert(scope.to_owned(), manifest.epoch);
        let shared_scope: Arc<str> = scope.into();
        for pattern in &manifest.hot_always {
            if let Some(name) = pattern.strip_prefix("**/") {
                self.hot_basenames.insert(name.into());
            } else {
                let prefix = pattern.trim_end_matches(['*', '/']);
                let node = self.insert(scope, prefix);
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
                let node = self.insert(scope, prefix);
                self.nodes[node].marker = Some(Marker::Blob(index));
            }
        }
        for pin in &manifest.pinned {
            let node = self.insert(scope, &pin.prefix);
            self.nodes[node].pinned = true;
        }
    }

    /// Creates the path for `scope` then `prefix` (empty segments dropped) and returns the
    /// index of its node.
    fn insert(&mut self, scope: &str, prefix: &str) -> usize {
        let mut at = 0;
        for segment in scope.split('/').chain(prefix.split('/')) {
            if segment.is_empty() {
                continue;
            }
            at = match self.nodes[at].children.get(segment) {
                Some(&child) => child as usize,
                None => {
                    let child = self.nodes.len();
                    self.nodes.push(BuildNode::default());
                    let id = u32::try_from(child).expect("fewer than 2^32 trie nodes");
                    self.nodes[at].children.insert(segment.into(), id);
                    child
                }
            };
        }
        at
    }

    /// Lays the nodes out for lookups: each node's child edges in one block, the blocks in
    /// depth-first order.
    fn finish(self) -> Trie {
        let Self {
            nodes: built,
            hot_basenames,
            rules,
            epochs,
        } = self;
        // where each node's block of child edges starts, in depth-first order
        let mut first = vec![0u32; built.len()];
        let mut order = Vec::with_capacity(built.len());
        let mut next = 0u32;
        let mut stack = vec![0usize];
        while let Some(at) = stack.pop() {
            let children = &built[at].children;
            first[at] = next;
            next = next
                .checked_add(u32::try_from(children.len()).expect("fewer than 2^32 edges"))
                .expect("fewer than 2^32 edges");
            order.push(at);
            stack.extend(children.values().rev().map(|&c| c as usize));
        }
        let node = |at: usize| {
            let n = &built[at];
            let count = u32::try_from(n.children.len()).expect("fewer than 2^32 edges");
            Node::new(first[at], count, n.marker, n.pinned)
        };
        let edges = built.len() - 1;
        let mut trie = Trie {
            root: node(0),
            edges: Vec::with_capacity(edges),
            tags: Vec::with_capacity(edges),
            name_spans: Vec::with_capacity(edges),
            names: String::new(),
            wide: FxHashMap::default(),
            hot_lengths: hot_basenames.iter().fold(0, |bits, n| bits | length_bit(n)),
            hot_basenames,
            rules,
            epochs,
        };
        for at in order {
            let parent = node(at);
            for (name, &child) in &built[at].children {
                let head = Head::of(name.as_bytes());
                let tag = head.tag(name.as_bytes());
                if parent.count > FEW_CHILDREN {
                    let edge = u32::try_from(trie.edges.len()).expect("fewer than 2^32 edges");
                    trie.wide.entry((parent.first, tag)).or_insert(edge);
                }
                let start = u32::try_from(trie.names.len()).expect("names under 4 GiB");
                trie.names.push_str(name);
                trie.name_spans.push((start, head.len));
                trie.edges.push(Edge {
                    words: head.words,
                    len: head.len,
                    node: node(child as usize),
                });
                trie.tags.push(tag);
            }
        }
        trie
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
        let mut builder = Builder::new();
        for manifest in manifests {
            builder.add(manifest);
        }
        builder.finish()
    }

    /// Resolves an absolute key (scope included). Never fails and never allocates.
    #[must_use]
    pub fn lookup<'t>(&'t self, key: &str) -> Resolution<'t> {
        let bytes = key.as_bytes();
        let Some(last) = last_segment(key) else {
            return Resolution::Unmanaged;
        };
        if self.hot_lengths & length_bit(last) != 0 && self.hot_basenames.contains(last) {
            return Resolution::Hot;
        }
        let mut node = self.root;
        if node.pinned() {
            return Resolution::Pinned;
        }
        // the deepest marker, and the byte offset in the key after its node's segment
        let mut best = node.marker().map(|m| (m, 0));
        let mut at = 0;
        while node.count > 0
            && let Some(segment) = Segment::next(bytes, at)
        {
            let Some(child) = self.child(node, &segment, bytes) else {
                break;
            };
            node = child;
            at = segment.end;
            if node.pinned() {
                return Resolution::Pinned;
            }
            if let Some(marker) = node.marker() {
                best = Some((marker, at));
            }
        }
        match best {
            None => Resolution::Unmanaged,
            Some((Marker::Hot, _)) => Resolution::Hot,
            Some((Marker::Blob(index), at)) => {
                let rule = &self.rules[index as usize];
                match bucket_number(rule.blob.bucket.as_ref(), bytes, at) {
                    Some(n) => Resolution::Blob { rule, n },
                    None => Resolution::Unmanaged,
                }
            }
        }
    }

    /// The child of `node` named by `segment` of `key`.
    #[inline]
    fn child(&self, node: Node, segment: &Segment, key: &[u8]) -> Option<Node> {
        let (first, count) = (node.first as usize, node.count as usize);
        let found = if node.count <= FEW_CHILDREN {
            // every tag compared, so the loop's exit does not depend on where the name is
            let mut hits = 0u32;
            for (i, &tag) in self.tags[first..first + count].iter().enumerate() {
                hits |= u32::from(tag == segment.tag) << i;
            }
            if hits == 0 {
                return None;
            }
            first + hits.trailing_zeros() as usize
        } else {
            *self.wide.get(&(node.first, segment.tag))? as usize
        };
        let name = &key[segment.start..segment.end];
        if self.edge_named(found, segment.head, name) {
            return Some(self.edges[found].node);
        }
        // two siblings share the tag: compare the names themselves
        (first..first + count)
            .find(|&e| self.edge_named(e, segment.head, name))
            .map(|e| self.edges[e].node)
    }

    /// Whether edge `e` is named `name` (whose head is `head`).
    #[inline]
    fn edge_named(&self, e: usize, head: Head, name: &[u8]) -> bool {
        self.edges[e].head() == head
            && (name.len() <= HEAD_BYTES || {
                let (start, len) = self.name_spans[e];
                &self.names.as_bytes()[start as usize..(start + len) as usize] == name
            })
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
        self.edges.len()
    }
}

/// One non-empty segment of a key: its byte range and [`Head`].
#[derive(Debug)]
struct Segment {
    start: usize,
    end: usize,
    head: Head,
    tag: u64,
}

impl Segment {
    /// The next non-empty segment of `key` at or after byte `at`. Reads the key a word at a
    /// time: the words that find the segment's end are the ones its head is made of.
    #[inline]
    fn next(key: &[u8], mut at: usize) -> Option<Self> {
        while *key.get(at)? == b'/' {
            at += 1;
        }
        let remaining = key.len() - at;
        let w0 = word_at(key, at);
        let in_w0 = first_slash(w0);
        if in_w0 < 8 || remaining <= 8 {
            let len = in_w0.min(remaining);
            return Some(Self::from_words(key, at, len, w0, 0));
        }
        let w1 = word_at(key, at + 8);
        let in_w1 = first_slash(w1);
        if in_w1 < 8 || remaining <= HEAD_BYTES {
            let len = 8 + in_w1.min(remaining - 8);
            return Some(Self::from_words(key, at, len, w0, w1));
        }
        let rest = &key[at + HEAD_BYTES..];
        let len = HEAD_BYTES + rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        Some(Self::from_words(key, at, len, w0, w1))
    }

    #[inline]
    fn from_words(key: &[u8], start: usize, len: usize, w0: u64, w1: u64) -> Self {
        let end = start + len;
        let head = Head {
            words: [keep_bytes(w0, len), keep_bytes(w1, len.saturating_sub(8))],
            len: u32::try_from(len).unwrap_or(u32::MAX),
        };
        Self {
            start,
            end,
            head,
            tag: head.tag(&key[start..end]),
        }
    }
}

/// The 8 bytes of `key` from `at` (which is inside the key) as a little-endian word, the
/// bytes past the key's end zero.
#[inline]
fn word_at(key: &[u8], at: usize) -> u64 {
    if let Some(bytes) = key.get(at..at + 8) {
        u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
    } else if key.len() >= 8 {
        // the key's last 8 bytes, shifted down so byte `at` comes first (1 to 7 bytes drop)
        let tail = u64::from_le_bytes(key[key.len() - 8..].try_into().expect("8 bytes"));
        tail >> (8 * (at + 8 - key.len()))
    } else {
        key[at..]
            .iter()
            .rev()
            .fold(0, |word, &b| (word << 8) | u64::from(b))
    }
}

/// The position (0 to 7) of the first `/` byte of a little-endian word, 8 when there is
/// none. The zero-byte test of `word ^ "////////"` can flag a byte above a real zero byte
/// wrongly, never below, so the lowest flag is exact.
#[inline]
fn first_slash(word: u64) -> usize {
    const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let x = word ^ SLASHES;
    let zero = x.wrapping_sub(LOW) & !x & HIGH;
    zero.trailing_zeros() as usize / 8
}

/// The low `n` bytes of `word` (all of it from 8 on).
#[inline]
fn keep_bytes(word: u64, n: usize) -> u64 {
    if n >= 8 {
        word
    } else {
        word & ((1u64 << (8 * n)) - 1)
    }
}

#[inline]
fn length_bit(name: &str) -> u64 {
    1 << name.len().min(63)
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

/// The `index`-th non-empty segment of `key` at or after byte `at`. Unlike
/// [`Segment::next`] it computes no head or tag: a chunk index is parsed, not looked up.
#[inline]
fn nth_segment(key: &[u8], mut at: usize, index: usize) -> Option<&[u8]> {
    let mut skip = index;
    loop {
        while *key.get(at)? == b'/' {
            at += 1;
        }
        let rest = &key[at..];
        let len = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        if skip == 0 {
            return Some(&rest[..len]);
        }
        skip -= 1;
        at += len;
    }
}

/// The bucket number for a key whose blob prefix ends at byte `at`; `None` when the chunk
/// index is missing or not a plain non-negative decimal.
///
/// # Strict digits
/// The index must be ASCII digits only (leading zeros allowed). Signs, whitespace, `_`
/// separators and non-ASCII digits make the key unmanaged.
#[inline]
fn bucket_number(bucket: Option<&Bucket>, key: &[u8], at: usize) -> Option<u128> {
    let Some(bucket) = bucket else {
        return Some(0);
    };
    let index = usize::try_from(bucket.index).ok()?;
    let raw = match bucket.key_encoding {
        KeyEncoding::V2Flat => nth_segment(key, at, 0)?.split(|&b| b == b'.').nth(index)?,
        KeyEncoding::V3Slash | KeyEncoding::V2Slash => nth_segment(key, at, index)?,
    };
    let width = bucket.width.max(1);
    match parse_digits(raw) {
        Some(value) => Some(u128::from(value / width)),
        None => parse_long_digits(raw).map(|value| value / u128::from(width)),
    }
}

/// A non-empty run of ASCII digits as a number; `None` for anything else or on overflow.
#[inline]
fn parse_digits(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() {
        return None;
    }
    raw.iter().try_fold(0u64, |value, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        value.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// The slow path of [`parse_digits`] for indices beyond `u64`: up to 38 ASCII digits.
#[cold]
fn parse_long_digits(raw: &[u8]) -> Option<u128> {
    if raw.is_empty() || raw.len() > 38 {
        return None;
    }
    raw.iter().try_fold(0u128, |value, &b| {
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
