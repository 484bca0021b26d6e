//! Per-record search columns: the values the in-memory index keeps for every record.

use crate::error::{Error, Result};

use super::cf;

/// Time range, bounding box and (when it differs from the file path) the URI of a record.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Columns {
    /// `(start, end)` in UTC seconds.
    pub time: Option<(i64, i64)>,
    /// `[min_lon, min_lat, max_lon, max_lat]`.
    pub bbox: Option<[f32; 4]>,
    /// The URI when it is not the file path.
    pub uri: Option<String>,
}

const FORMAT: u8 = 1;
const HAS_TIME: u8 = 1;
const HAS_BBOX: u8 = 2;
const HAS_URI: u8 = 4;

impl Columns {
    /// Encodes the columns as a value of the columns family.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT, 0];
        if let Some((start, end)) = self.time {
            out[1] |= HAS_TIME;
            out.extend_from_slice(&start.to_be_bytes());
            out.extend_from_slice(&end.to_be_bytes());
        }
        if let Some(bbox) = self.bbox {
            out[1] |= HAS_BBOX;
            bbox.iter()
                .for_each(|v| out.extend_from_slice(&v.to_be_bytes()));
        }
        if let Some(uri) = &self.uri {
            out[1] |= HAS_URI;
            out.extend_from_slice(uri.as_bytes());
        }
        out
    }

    /// Decodes a value of the columns family.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a truncated or unknown value.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: &str| Error::Corrupt {
            family: cf::COLUMNS,
            reason: reason.to_string(),
        };
        let [format, flags, rest @ ..] = bytes else {
            return Err(corrupt("too short"));
        };
        if *format != FORMAT {
            return Err(corrupt("unknown format"));
        }
        let mut reader = Reader { rest };
        let mut columns = Columns::default();
        if flags & HAS_TIME != 0 {
            let start = i64::from_be_bytes(reader.take::<8>().ok_or_else(|| corrupt("truncated"))?);
            let end = i64::from_be_bytes(reader.take::<8>().ok_or_else(|| corrupt("truncated"))?);
            columns.time = Some((start, end));
        }
        if flags & HAS_BBOX != 0 {
            let mut bbox = [0f32; 4];
            for v in &mut bbox {
                *v = f32::from_be_bytes(reader.take::<4>().ok_or_else(|| corrupt("truncated"))?);
            }
            columns.bbox = Some(bbox);
        }
        if flags & HAS_URI != 0 {
            columns.uri = Some(
                String::from_utf8(reader.rest.to_vec()).map_err(|_| corrupt("uri not UTF-8"))?,
            );
        }
        Ok(columns)
    }
}

/// Reads fixed-size fields off the front of a byte slice.
struct Reader<'a> {
    rest: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, tail) = self.rest.split_first_chunk::<N>()?;
        self.rest = tail;
        Some(*head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip() {
        let cases = [
            Columns::default(),
            Columns {
                time: Some((-5, 10)),
                bbox: None,
                uri: None,
            },
            Columns {
                time: Some((1, 2)),
                bbox: Some([-10.0, -5.0, 10.0, 5.0]),
                uri: Some("slk:///a.nc".into()),
            },
            Columns {
                time: None,
                bbox: None,
                uri: Some("s3://b/k".into()),
            },
        ];
        for c in cases {
            assert_eq!(Columns::decode(&c.encode()).unwrap(), c);
        }
        assert!(Columns::decode(&[1]).is_err());
        assert!(Columns::decode(&[1, HAS_TIME, 0, 0]).is_err());
    }
}
