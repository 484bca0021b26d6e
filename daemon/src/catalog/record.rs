//! A catalogue record (one file or object) and its JSON Lines ingest format.
//!
//! One JSON object per line: `file` (required), `uri` (default: `file`), `fs_type` (default
//! `posix`), any standard facet as a string or an array of strings, `time` as
//! `[<start> TO <end>]`, `bbox` as `[min_lon, min_lat, max_lon, max_lat]`, `version`, and an
//! optional boolean `latest`. Unknown keys reject the line: a typo must not silently drop a facet.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::facet;
use super::time::TimeRange;

/// One indexed file or object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Location on the file system; the record's identity.
    pub file: String,
    /// Location as a URI (defaults to `file`).
    pub uri: String,
    /// Standard facet name to its original values, including `fs_type` and `user` but not
    /// `time`, `bbox` and `version`.
    pub facets: BTreeMap<String, Vec<String>>,
    /// The time range as given, e.g. `[1979-01 TO 2014-12]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// `[min_lon, min_lat, max_lon, max_lat]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbox: Option<[f64; 4]>,
    /// Dataset version, e.g. `v20191108`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Explicit newest-version flag; when absent it is computed from `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<bool>,
}

impl Record {
    /// A record with only a location; `fs_type` is `posix`.
    pub fn new(file: impl Into<String>) -> Self {
        let file = file.into();
        let mut facets = BTreeMap::new();
        facets.insert("fs_type".to_string(), vec!["posix".to_string()]);
        Record {
            uri: file.clone(),
            file,
            facets,
            time: None,
            bbox: None,
            version: None,
            latest: None,
        }
    }

    /// Parses one ingest line.
    ///
    /// # Errors
    /// A message naming the offending key when the line is not a valid record.
    pub fn from_json_line(line: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
        let Value::Object(object) = value else {
            return Err("a record must be a JSON object".into());
        };
        Self::from_object(object)
    }

    /// Builds a record from a JSON object in the ingest format.
    ///
    /// # Errors
    /// A message naming the offending key.
    pub fn from_object(object: Map<String, Value>) -> Result<Self, String> {
        let file = match object.get("file") {
            Some(Value::String(f)) if !f.trim().is_empty() => f.clone(),
            Some(Value::String(_)) => return Err("'file' must not be empty".into()),
            Some(_) => return Err("'file' must be a string".into()),
            None => return Err("'file' is required".into()),
        };
        let mut record = Record::new(file);
        for (key, value) in object {
            record.set(&key, value)?;
        }
        record.validate()?;
        Ok(record)
    }

    fn set(&mut self, key: &str, value: Value) -> Result<(), String> {
        match key {
            "file" => {}
            "uri" => self.uri = string(key, value)?,
            "time" => self.time = Some(string(key, value)?),
            "version" => self.version = Some(string_or_number(key, value)?),
            "latest" => match value {
                Value::Bool(b) => self.latest = Some(b),
                _ => return Err("'latest' must be true or false".into()),
            },
            "bbox" => self.bbox = Some(bbox(value)?),
            _ if facet::is_term_facet(key) => {
                let values = strings(key, value)?;
                if !values.is_empty() {
                    self.facets.insert(key.to_string(), values);
                }
            }
            _ => return Err(format!("unknown key '{key}'")),
        }
        Ok(())
    }

    /// Checks the cross-field rules: parsable time, sane bbox, non-empty uri.
    ///
    /// # Errors
    /// A message naming the offending key.
    pub fn validate(&self) -> Result<(), String> {
        if self.uri.trim().is_empty() {
            return Err("'uri' must not be empty".into());
        }
        // NUL separates the parts of identities and dataset keys in the store.
        for (key, text) in [("file", &self.file), ("uri", &self.uri)] {
            if text.contains('\0') {
                return Err(format!("'{key}' must not contain the NUL character"));
            }
        }
        if let Some(owner) = self.user()
            && owner.contains('\0')
        {
            return Err("'user' must not contain the NUL character".into());
        }
        if let Some(time) = &self.time {
            TimeRange::parse_record(time).map_err(|e| format!("'time': {e}"))?;
        }
        if let Some([min_lon, min_lat, max_lon, max_lat]) = self.bbox {
            let lon_ok = (-180.0..=180.0).contains(&min_lon) && (-180.0..=180.0).contains(&max_lon);
            let lat_ok = (-90.0..=90.0).contains(&min_lat) && (-90.0..=90.0).contains(&max_lat);
            if !lon_ok || !lat_ok || min_lat > max_lat || min_lon > max_lon {
                return Err(format!(
                    "'bbox' {:?} is not [min_lon, min_lat, max_lon, max_lat] within [-180, -90, 180, 90]",
                    [min_lon, min_lat, max_lon, max_lat]
                ));
            }
        }
        Ok(())
    }

    /// The parsed time range, if the record has one.
    pub fn time_range(&self) -> Option<TimeRange> {
        self.time
            .as_deref()
            .and_then(|t| TimeRange::parse_record(t).ok())
    }

    /// The first value of a facet.
    pub fn first(&self, facet: &str) -> Option<&str> {
        self.facets
            .get(facet)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// The owner of user data (the first value of its `user` facet); `None` for a catalogue
    /// record.
    pub fn user(&self) -> Option<&str> {
        self.first("user")
    }

    /// The record's identity: its location, and for user data also its owner. A catalogue
    /// record and each user's entry at one location are different records, so nobody can
    /// claim, replace or hide a location for anyone else (see [`Identity`]).
    pub fn identity(&self) -> Identity {
        Identity::new(self.user(), &self.file)
    }

    /// The key shared by all versions of this record's dataset: its directory with the path
    /// segment that names the version blanked out, or `None` when the record has no version or
    /// no directory names it (then it is its own, newest, version).
    ///
    /// The file name is not part of the key: in a DRS tree a new version of a dataset often
    /// splits its time range differently (`..._197001-201512.nc` in `v20191108`,
    /// `..._197901-201412.nc` in `v20201108`), and the older version is still superseded.
    ///
    /// The key of user data starts with its owner, so an entry only ever competes with the
    /// same user's other versions: it never hides a catalogue record or another user's entry.
    pub fn dataset_key(&self) -> Option<String> {
        let version = self.version.as_deref()?;
        let bare = version.strip_prefix(['v', 'V']).unwrap_or(version);
        let (directory, _) = self.file.rsplit_once('/')?;
        let segments: Vec<&str> = directory.split('/').collect();
        let pos = segments.iter().rposition(|s| {
            let s_bare = s.strip_prefix(['v', 'V']).unwrap_or(s);
            !bare.is_empty() && s_bare == bare
        })?;
        let mut key = String::with_capacity(directory.len());
        if let Some(owner) = self.user() {
            key.push('\u{1}');
            key.push_str(owner);
            key.push('\u{0}');
        }
        for (i, segment) in segments.iter().enumerate() {
            if i > 0 {
                key.push('/');
            }
            key.push_str(if i == pos { "\u{0}" } else { segment });
        }
        Some(key)
    }

    /// Serialises the record into the JSON Lines ingest format.
    pub fn to_json_line(&self) -> String {
        let mut object = Map::new();
        object.insert("file".into(), Value::String(self.file.clone()));
        if self.uri != self.file {
            object.insert("uri".into(), Value::String(self.uri.clone()));
        }
        for (key, values) in &self.facets {
            object.insert(
                key.clone(),
                values.iter().cloned().map(Value::String).collect(),
            );
        }
        if let Some(t) = &self.time {
            object.insert("time".into(), Value::String(t.clone()));
        }
        if let Some(b) = self.bbox {
            object.insert("bbox".into(), b.iter().map(|v| Value::from(*v)).collect());
        }
        if let Some(v) = &self.version {
            object.insert("version".into(), Value::String(v.clone()));
        }
        if let Some(l) = self.latest {
            object.insert("latest".into(), Value::Bool(l));
        }
        Value::Object(object).to_string()
    }
}

/// What makes a record unique in the catalogue: its location, plus the owner for user data.
///
/// Encoded as the location itself for a catalogue record and as `\0 owner \0 location` for
/// user data (locations and owners never contain NUL, see [`Record::validate`]), so the
/// encoding of a catalogue record, and with it its public item id, is its location alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity(String);

impl Identity {
    /// The identity of the record at `file` owned by `owner` (`None`: the catalogue).
    pub fn new(owner: Option<&str>, file: &str) -> Self {
        match owner {
            None => Identity(file.to_string()),
            Some(owner) => Identity(format!("\0{owner}\0{file}")),
        }
    }

    /// Reads back an encoded identity.
    pub fn decode(encoded: &str) -> Self {
        Identity(encoded.to_string())
    }

    /// The encoded form: the key of the `files` column family.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owner of user data, `None` for a catalogue record.
    pub fn owner(&self) -> Option<&str> {
        self.split().0
    }

    /// The location.
    pub fn file(&self) -> &str {
        self.split().1
    }

    fn split(&self) -> (Option<&str>, &str) {
        match self
            .0
            .strip_prefix('\0')
            .and_then(|rest| rest.split_once('\0'))
        {
            Some((owner, file)) => (Some(owner), file),
            None => (None, &self.0),
        }
    }
}

fn string(key: &str, value: Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s),
        _ => Err(format!("'{key}' must be a string")),
    }
}

fn string_or_number(key: &str, value: Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(format!("'{key}' must be a string")),
    }
}

fn strings(key: &str, value: Value) -> Result<Vec<String>, String> {
    let list = match value {
        Value::String(s) => vec![s],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(s),
                _ => Err(format!("'{key}' must be a string or an array of strings")),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(format!("'{key}' must be a string or an array of strings")),
    };
    Ok(list.into_iter().filter(|s| !s.trim().is_empty()).collect())
}

fn bbox(value: Value) -> Result<[f64; 4], String> {
    let err = || {
        "'bbox' must be an array of four numbers [min_lon, min_lat, max_lon, max_lat]".to_string()
    };
    let Value::Array(items) = value else {
        return Err(err());
    };
    let numbers: Vec<f64> = items
        .iter()
        .map(Value::as_f64)
        .collect::<Option<_>>()
        .ok_or_else(err)?;
    numbers.try_into().map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_line_gets_defaults() {
        let r = Record::from_json_line(r#"{"file": "/a/b.nc"}"#).unwrap();
        assert_eq!(r.uri, "/a/b.nc");
        assert_eq!(r.first("fs_type"), Some("posix"));
    }

    #[test]
    fn bad_lines_name_the_key() {
        let cases = [
            (r#"{"uri": "x"}"#, "'file' is required"),
            (r#"{"file": 3}"#, "'file' must be a string"),
            (r#"{"file": "/a", "colour": "red"}"#, "unknown key 'colour'"),
            (r#"{"file": "/a", "project": 3}"#, "'project' must be"),
            (r#"{"file": "/a", "time": "fx"}"#, "'time'"),
            (r#"{"file": "/a", "bbox": [1, 2]}"#, "'bbox'"),
            (r#"{"file": "/a", "bbox": [0, 95, 1, 96]}"#, "'bbox'"),
            (r#"{"file": "/a", "latest": "yes"}"#, "'latest'"),
            ("[1]", "JSON object"),
            ("{", "invalid JSON"),
        ];
        for (line, expected) in cases {
            let err = Record::from_json_line(line).unwrap_err();
            assert!(err.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn dataset_key_blanks_the_version_segment() {
        let mut r = Record::new("/d/CMIP6/ua/gn/v20191108/ua_x.nc");
        r.version = Some("v20191108".into());
        assert_eq!(r.dataset_key().unwrap(), "/d/CMIP6/ua/gn/\u{0}");
        r.version = Some("20191108".into());
        assert_eq!(r.dataset_key().unwrap(), "/d/CMIP6/ua/gn/\u{0}");
        let mut obs = Record::new("/o/r1i1p1/v20210618/pr/pr_1.nc");
        obs.version = Some("v20210618".into());
        assert_eq!(obs.dataset_key().unwrap(), "/o/r1i1p1/\u{0}/pr");
        r.version = Some("v1".into());
        assert_eq!(r.dataset_key(), None);
        // User data is versioned per owner, apart from the catalogue.
        let mut mine = Record::new("/d/CMIP6/ua/gn/v20191108/ua_x.nc");
        mine.version = Some("v20191108".into());
        mine.facets.insert("user".into(), vec!["jane".into()]);
        assert_eq!(
            mine.dataset_key().unwrap(),
            "\u{1}jane\u{0}/d/CMIP6/ua/gn/\u{0}"
        );
    }

    #[test]
    fn identities_keep_owner_and_location_apart() {
        let catalogue = Identity::new(None, "/a/b.nc");
        assert_eq!(catalogue.as_str(), "/a/b.nc");
        assert_eq!((catalogue.owner(), catalogue.file()), (None, "/a/b.nc"));
        for owner in ["jane", "*", "-jane", "global", "", "a:b"] {
            let id = Identity::new(Some(owner), "/a/b.nc");
            let back = Identity::decode(id.as_str());
            assert_eq!((back.owner(), back.file()), (Some(owner), "/a/b.nc"));
            assert_ne!(id, catalogue);
        }
        assert!(Record::from_json_line(r#"{"file": "/a\u0000b"}"#).is_err());
    }

    #[test]
    fn json_line_round_trip() {
        let line = r#"{"file":"/a.nc","uri":"slk:///a.nc","project":["CMIP6"],"time":"[2000 TO 2001]","bbox":[-10.0,-5.0,10.0,5.0],"version":"v1","latest":true}"#;
        let r = Record::from_json_line(line).unwrap();
        assert_eq!(Record::from_json_line(&r.to_json_line()).unwrap(), r);
    }

    const LINES: &[&str] = &[
        r#"{"file":"/a.nc","uri":"slk:///a.nc","project":["CMIP6"],"time":"[2000 TO 2001]","bbox":[-10.0,-5.0,10.0,5.0],"version":"v1","latest":true}"#,
        r#"{"file":"/d/v2/b.nc","variable":"tas","version":2,"time":"[0 TO 9999]"}"#,
        r#"{"file":"/x.nc","user":["jane"],"realm":["ocean","seaIce"]}"#,
    ];
    const SEPARATORS: &[&str] = &[
        "\"", ":", ",", "[", "]", "{", "}", "\\u0000", "\\", "null", "1e999",
    ];

    proptest::proptest! {
        #[test]
        fn ingest_lines_round_trip_or_name_the_problem(line in crate::hostile::text(LINES, SEPARATORS)) {
            match Record::from_json_line(&line) {
                Ok(record) => {
                    let again = Record::from_json_line(&record.to_json_line());
                    proptest::prop_assert_eq!(again.as_ref(), Ok(&record));
                    proptest::prop_assert!(record.dataset_key().is_none_or(|k| !k.is_empty()));
                }
                Err(e) => proptest::prop_assert!(
                    e.starts_with("invalid JSON") || e.starts_with("a record") || e.contains('\''),
                    "{e}"
                ),
            }
        }
    }
}
