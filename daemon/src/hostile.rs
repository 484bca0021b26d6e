//! Strategies for hostile text in the parsers' property tests: arbitrary Unicode, multibyte
//! characters next to the separators a parser splits on, empty parts and very long digit runs.
//!
//! Each parser's tests name the separators and valid examples of its own grammar; the
//! strategies here splice those with characters that break byte slicing (a multibyte
//! character where an ASCII one was expected), digit runs that overflow every integer type,
//! and the empty string.

use proptest::prelude::*;
use proptest::sample::select;

/// Pieces that break naive parsers whatever their grammar: multibyte and combining
/// characters, non-ASCII digits, control characters, case folds that change length.
const UNIVERSAL: &[&str] = &[
    "", " ", "é", "日", "𝟘", "٣", "\u{301}", "\u{200b}", "\u{0}", "\n", "\t", "İ", "ß", "ﬀ",
    "\u{feff}", "-", "+", ".", ",", "/", "\\", "\"",
];

/// A run of ASCII digits, from none to far beyond any integer type.
fn digits() -> impl Strategy<Value = String> {
    prop_oneof![
        (0usize..6).prop_map(|n| "0".repeat(n)),
        "[0-9]{1,4}",
        "[1-9][0-9]{18,60}",
    ]
}

/// One piece: a separator of the grammar, a universal troublemaker or a digit run.
fn piece(separators: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        select(separators).prop_map(str::to_string),
        select(UNIVERSAL).prop_map(str::to_string),
        digits(),
    ]
}

/// `example` with a piece put in at a random character boundary, or put in place of one
/// character: near-valid input reaches the deeper parts of a parser.
fn mutated(
    examples: &'static [&'static str],
    separators: &'static [&'static str],
) -> impl Strategy<Value = String> {
    (
        select(examples),
        any::<prop::sample::Index>(),
        piece(separators),
        any::<bool>(),
    )
        .prop_map(|(example, at, piece, replace)| {
            let boundaries: Vec<usize> = example
                .char_indices()
                .map(|(i, _)| i)
                .chain([example.len()])
                .collect();
            let start = boundaries[at.index(boundaries.len())];
            let end = if replace {
                example[start..]
                    .chars()
                    .next()
                    .map_or(start, |c| start + c.len_utf8())
            } else {
                start
            };
            format!("{}{piece}{}", &example[..start], &example[end..])
        })
}

/// Hostile text for a parser whose grammar splits on `separators` and accepts `examples`:
/// arbitrary Unicode, sequences of pieces, and mutated examples, in equal shares.
pub(crate) fn text(
    examples: &'static [&'static str],
    separators: &'static [&'static str],
) -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(piece(separators), 0..12).prop_map(|pieces| pieces.concat()),
        mutated(examples, separators),
        select(examples).prop_map(str::to_string),
    ]
}
