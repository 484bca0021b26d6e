use std::path::Path;

use netcdf::Options;
use netcdf::types::NcVariableType;
use serde_json::{Value, json};
use zarrs::array::Array;
use zarrs::filesystem::FilesystemStore;

use super::metadata::layout;
use super::write::Reserve;
use super::*;
use crate::stores::request::AccessPattern;

/// How tests read chunks of numbers (which hold no strings to bound).
const NUMBERS: write::StringBounds<'static> = write::StringBounds {
    claims: None,
    cap: metadata::MAX_CHUNK_BYTES,
    stop: None,
};

fn blosc() -> Value {
    Compressor::Lz4.codec()
}

/// A NetCDF-4 file with a packed integer variable, fill values, a 0-d variable, a char
/// variable, an unlimited time axis, a NaN attribute and a group.
fn netcdf4(path: &Path) {
    let mut file = netcdf::create_with(path, Options::NETCDF4).unwrap();
    file.add_attribute("title", "test <data>").unwrap();
    file.add_attribute("missing", f64::NAN).unwrap();
    file.add_unlimited_dimension("time").unwrap();
    file.add_dimension("lat", 3).unwrap();
    file.add_dimension("lon", 4).unwrap();
    file.add_dimension("strlen", 5).unwrap();
    let mut time = file.add_variable::<f64>("time", &["time"]).unwrap();
    time.put_attribute("units", "days since 2000-01-01")
        .unwrap();
    time.put_attribute("calendar", "noleap").unwrap();
    time.put_values(&[0.0, 1.0], ..).unwrap();
    let mut tas = file
        .add_variable::<i16>("tas", &["time", "lat", "lon"])
        .unwrap();
    tas.set_fill_value(-32767_i16).unwrap();
    tas.put_attribute("scale_factor", 0.01_f32).unwrap();
    tas.put_attribute("add_offset", 273.15_f64).unwrap();
    tas.put_attribute("valid_range", vec![-1000_i16, 1000])
        .unwrap();
    let values: Vec<i16> = (0..24)
        .map(|v| if v == 5 { -32767 } else { v * 100 })
        .collect();
    tas.put_values(&values, ..).unwrap();
    let mut height = file.add_variable::<f64>("height", &[]).unwrap();
    height.put_attribute("units", "m").unwrap();
    height.put_value(2.0, ..).unwrap();
    let mut label = file
        .add_variable_with_type("label", &["strlen"], &NcVariableType::Char)
        .unwrap();
    label.put_attribute("long_name", "a label").unwrap();
    let mut ocean = file.add_group("ocean").unwrap();
    ocean.add_attribute("realm", "ocean").unwrap();
    ocean.add_dimension("depth", 2).unwrap();
    let mut thetao = ocean.add_variable::<f32>("thetao", &["depth"]).unwrap();
    thetao.set_fill_value(f32::NAN).unwrap();
    thetao.put_values(&[1.5_f32, 2.5], ..).unwrap();
    file.close().unwrap();
}

/// `source` converted into `store` with LZ4, no reserve, never stopped.
fn convert_lz4(
    source: &Source,
    store: &Path,
    chunking: &Chunking,
) -> Result<(StoreLayout, write::Written), String> {
    let stop = crate::jobs::Stop::default();
    convert_file(
        source,
        store,
        chunking,
        Compressor::Lz4,
        Reserve::NONE,
        &stop,
    )
}

fn map(primary: u32) -> Chunking {
    Chunking {
        access_pattern: AccessPattern::Map,
        map_primary_chunksize: primary,
        chunk_size_mib: 16.0,
    }
}

#[test]
fn a_netcdf4_file_becomes_zarr_v2_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.nc");
    netcdf4(&path);
    let file = netcdf::open(&path).unwrap();
    let layout = layout(&file, None, &map(1), &blosc()).unwrap();
    let doc = |key: &str| layout.documents.get(key).unwrap_or_else(|| panic!("{key}"));
    let keys: Vec<&str> = layout.documents.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            ".zgroup",
            ".zattrs",
            "time/.zarray",
            "time/.zattrs",
            "tas/.zarray",
            "tas/.zattrs",
            "height/.zarray",
            "height/.zattrs",
            "label/.zarray",
            "label/.zattrs",
            "ocean/.zgroup",
            "ocean/.zattrs",
            "ocean/thetao/.zarray",
            "ocean/thetao/.zattrs",
        ]
    );
    assert_eq!(doc(".zgroup"), &json!({"zarr_format": 2}));
    assert_eq!(
        doc(".zattrs"),
        &json!({"title": "test <data>", "missing": "NaN"})
    );
    assert_eq!(
        doc("tas/.zarray"),
        &json!({
            "compressor": blosc(),
            "filters": null,
            "chunks": [1, 3, 4],
            "dtype": "<i2",
            "fill_value": -32767,
            "order": "C",
            "shape": [2, 3, 4],
            "zarr_format": 2,
        })
    );
    let tas_attrs = doc("tas/.zattrs");
    assert_eq!(tas_attrs["valid_range"], json!([-1000, 1000]));
    assert_eq!(tas_attrs["add_offset"], json!(273.15));
    assert!((tas_attrs["scale_factor"].as_f64().unwrap() - 0.01).abs() < 1e-6);
    assert_eq!(
        tas_attrs["_ARRAY_DIMENSIONS"],
        json!(["time", "lat", "lon"])
    );
    assert!(
        tas_attrs.get("_FillValue").is_none(),
        "it is the fill_value"
    );
    // Coordinates are one chunk; undecoded time keeps its units and calendar.
    assert_eq!(doc("time/.zarray")["chunks"], json!([2]));
    assert_eq!(doc("time/.zarray")["fill_value"], Value::Null);
    assert_eq!(doc("time/.zattrs")["calendar"], json!("noleap"));
    assert_eq!(doc("height/.zarray")["shape"], json!([]));
    assert_eq!(doc("height/.zarray")["chunks"], json!([]));
    assert_eq!(doc("height/.zattrs")["_ARRAY_DIMENSIONS"], json!([]));
    assert_eq!(doc("label/.zarray")["dtype"], json!("|S1"));
    assert_eq!(doc("ocean/.zattrs"), &json!({"realm": "ocean"}));
    assert_eq!(doc("ocean/thetao/.zarray")["fill_value"], json!("NaN"));
    assert_eq!(doc("ocean/thetao/.zarray")["dtype"], json!("<f4"));
    let thetao = layout
        .arrays
        .iter()
        .find(|a| a.variable == "thetao")
        .unwrap();
    assert_eq!(thetao.path, "ocean/thetao");
    assert_eq!(thetao.groups, ["ocean"]);
    // Every document is valid JSON (no NaN literal) and .zmetadata holds them all.
    let consolidated = layout.consolidated();
    let text = consolidated.to_string();
    assert!(!text.contains("NaN,") && !text.contains(":NaN"), "{text}");
    assert_eq!(consolidated["zarr_consolidated_format"], json!(1));
    assert_eq!(
        consolidated["metadata"].as_object().unwrap().len(),
        keys.len()
    );
}

#[test]
fn a_netcdf3_file_and_the_plan_of_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classic.nc");
    let mut file = netcdf::create_with(&path, Options::_64BIT_OFFSET).unwrap();
    file.add_dimension("time", 3650).unwrap();
    file.add_dimension("lat", 192).unwrap();
    file.add_dimension("lon", 384).unwrap();
    file.add_variable::<f32>("tas", &["time", "lat", "lon"])
        .unwrap();
    file.add_variable::<i8>("flag", &["lat", "lon"]).unwrap();
    file.add_variable::<f64>("lat", &["lat"]).unwrap();
    file.close().unwrap();
    let file = netcdf::open(&path).unwrap();
    let map24 = layout(&file, None, &map(24), &blosc()).unwrap();
    assert_eq!(
        map24.documents["tas/.zarray"]["chunks"],
        json!([24, 192, 384])
    );
    assert_eq!(map24.documents["flag/.zarray"]["dtype"], json!("|i1"));
    assert_eq!(map24.documents["lat/.zarray"]["chunks"], json!([192]));
    let series = Chunking {
        access_pattern: AccessPattern::TimeSeries,
        ..map(1)
    };
    let series = layout(&file, None, &series, &blosc()).unwrap();
    assert_eq!(
        series.documents["tas/.zarray"]["chunks"],
        json!([3650, 192, 4])
    );
    assert!(
        !series.documents.contains_key("ocean/.zgroup"),
        "classic files have no groups"
    );
}

/// Reads chunk `index` of the array at `path` of a store directory, decoded.
fn decoded_chunk<T: zarrs::array::ElementOwned>(dir: &Path, path: &str, index: &[u64]) -> Vec<T> {
    let store = std::sync::Arc::new(FilesystemStore::new(dir).unwrap());
    let array = Array::open(store, &format!("/{path}")).unwrap();
    array.retrieve_chunk::<Vec<T>>(index).unwrap()
}

#[test]
fn a_converted_store_holds_the_source_values_in_every_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("a.nc");
    netcdf4(&source);
    let store = dir.path().join("store");
    let chunking = Chunking {
        access_pattern: AccessPattern::TimeSeries,
        map_primary_chunksize: 1,
        chunk_size_mib: 0.5,
    };
    let (layout, written) =
        convert_lz4(&Source::open(&source).unwrap(), &store, &chunking).unwrap();
    assert_eq!(written, write::Written::Complete);
    let consolidated: Value =
        serde_json::from_slice(&std::fs::read(store.join(".zmetadata")).unwrap()).unwrap();
    assert_eq!(consolidated, layout.consolidated());
    let file = netcdf::open(&source).unwrap();
    let tas = layout.arrays.iter().find(|a| a.path == "tas").unwrap();
    let expected: Vec<i16> = file.variable("tas").unwrap().get_values(..).unwrap();
    let mut seen = 0;
    for index in write::chunk_indices(tas) {
        let chunk: Vec<i16> = decoded_chunk(&store, "tas", &index);
        assert_eq!(chunk.len() as u64, tas.chunks.iter().product::<u64>());
        // Compare the chunk's in-range elements with the source, index by index.
        for (n, value) in chunk.iter().enumerate() {
            let mut rest = n as u64;
            let mut position = vec![0u64; tas.shape.len()];
            for d in (0..tas.shape.len()).rev() {
                position[d] = index[d] * tas.chunks[d] + rest % tas.chunks[d];
                rest /= tas.chunks[d];
            }
            if position.iter().zip(&tas.shape).all(|(p, len)| p < len) {
                let flat = position
                    .iter()
                    .zip(&tas.shape)
                    .fold(0u64, |acc, (p, len)| acc * len + p);
                assert_eq!(*value, expected[flat as usize], "tas {position:?}");
                seen += 1;
            }
        }
    }
    assert_eq!(seen, expected.len(), "every value is in exactly one chunk");
    let height: Vec<f64> = decoded_chunk(&store, "height", &[]);
    assert_eq!(height, [2.0]);
    let time: Vec<f64> = decoded_chunk(&store, "time", &[0]);
    assert_eq!(time, [0.0, 1.0]);
    let thetao: Vec<f32> = decoded_chunk(&store, "ocean/thetao", &[0]);
    assert_eq!(thetao, [1.5, 2.5]);
    assert!(store.join("label/0").exists());
}

#[test]
fn a_source_written_to_while_it_is_converted_fails_the_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("a.nc");
    netcdf4(&source);
    let chunking = map(1);
    let stop = crate::jobs::Stop::default();
    let touch = |seconds: u64| {
        let file = std::fs::File::options().write(true).open(&source).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(seconds);
        file.set_modified(later).unwrap();
    };
    let unchanged = Source::open(&source).unwrap();
    let store = dir.path().join("unchanged");
    let (_, written) = convert_lz4(&unchanged, &store, &chunking).unwrap();
    assert_eq!(written, write::Written::Complete);
    // Written to after the conversion opened it (its modification time says so): one
    // source, and one of a conversion of several.
    let opened = Source::open(&source).unwrap();
    touch(60);
    let store = dir.path().join("one");
    let err = convert_lz4(&opened, &store, &chunking).unwrap_err();
    assert!(
        err.contains("a.nc: changed while it was converted"),
        "{err}"
    );
    let sources = [Source::open(&source).unwrap()];
    touch(120);
    let store = dir.path().join("several");
    let err = convert_sources(
        &sources,
        None,
        None,
        &store,
        &chunking,
        Compressor::Lz4,
        Reserve::NONE,
        &stop,
    )
    .unwrap_err();
    assert!(
        err.contains("a.nc: changed while it was converted"),
        "{err}"
    );
    // Or its size alone (cut short, its modification time set back as it was).
    let opened = Source::open(&source).unwrap();
    assert_eq!(opened.unchanged(), Ok(()));
    let before = std::fs::metadata(&source).unwrap();
    let file = std::fs::File::options().write(true).open(&source).unwrap();
    file.set_len(before.len() / 2).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
    assert!(opened.unchanged().is_err());
    // Or written in place, its size and modification time kept as they were: its change
    // time, which its owner cannot set, tells (a clock tick later, as file times go).
    let opened = Source::open(&source).unwrap();
    let before = std::fs::metadata(&source).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::os::unix::fs::FileExt::write_at(&file, &[0xff; 8], 0).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
    let after = std::fs::metadata(&source).unwrap();
    assert_eq!(
        (after.len(), after.modified().unwrap()),
        (before.len(), before.modified().unwrap())
    );
    assert!(opened.unchanged().is_err());
}

#[test]
fn a_conversion_stops_where_the_hot_tier_keeps_its_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let source = Source::open(&{
        let path = dir.path().join("a.nc");
        netcdf4(&path);
        path
    })
    .unwrap();
    let stop = crate::jobs::Stop::default();
    let store = dir.path().join("store");
    // More room kept than any file system has: nothing but the metadata is written.
    let everything = Reserve {
        bytes: u64::MAX,
        ..Reserve::NONE
    };
    let err =
        convert_file(&source, &store, &map(1), Compressor::Lz4, everything, &stop).unwrap_err();
    assert!(err.contains("the hot tier is nearly full"), "{err}");
    assert!(!store.join("tas").read_dir().unwrap().any(|entry| {
        let name = entry.unwrap().file_name();
        !name.to_string_lossy().starts_with('.')
    }));
    // A reserve the file system has room for: written whole.
    let store = dir.path().join("kept");
    let room = Reserve {
        bytes: 1 << 20,
        ..Reserve::NONE
    };
    let (_, written) =
        convert_file(&source, &store, &map(1), Compressor::Lz4, room, &stop).unwrap();
    assert_eq!(written, write::Written::Complete);
}

#[test]
fn the_reserve_is_what_is_set_else_a_hundredth_of_the_file_system_up_to_a_gib() {
    let dir = tempfile::tempdir().unwrap();
    use crate::config::MibOrAuto;
    assert_eq!(Reserve::of(MibOrAuto::Mib(5), dir.path()).bytes, 5 << 20);
    assert_eq!(Reserve::of(MibOrAuto::Mib(0), dir.path()).bytes, 0);
    let stat = nix::sys::statvfs::statvfs(dir.path()).unwrap();
    let size = stat.blocks() * stat.fragment_size();
    assert_eq!(
        Reserve::of(MibOrAuto::Auto, dir.path()).bytes,
        (size / 100).min(1 << 30)
    );
}

#[test]
fn a_source_that_is_not_netcdf_fails_with_a_reason_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("notes.nc");
    std::fs::write(&source, "not a netcdf file").unwrap();
    let err = convert_lz4(
        &Source::open(&source).unwrap(),
        &dir.path().join("s"),
        &map(1),
    )
    .unwrap_err();
    assert!(
        err.contains("notes.nc") && err.contains("not a NetCDF file"),
        "{err}"
    );
    let missing = dir.path().join("missing.nc");
    let err = Source::open(&missing).unwrap_err();
    assert!(err.contains("missing.nc"), "{err}");
    // A FIFO is refused at once, not waited on.
    let fifo = dir.path().join("fifo.nc");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let err = Source::open(&fifo).unwrap_err();
    assert!(
        err.contains("fifo.nc") && err.contains("not a regular file"),
        "{err}"
    );
}

#[test]
fn chunks_computed_on_demand_are_the_chunks_the_conversion_writes() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("a.nc");
    netcdf4(&source);
    let stop = crate::jobs::Stop::default();
    let source = Source::open(&source).unwrap();
    for compressor in [Compressor::Lz4, Compressor::Zstd] {
        let store = dir.path().join(format!("{compressor:?}"));
        let chunking = map(1);
        let (layout, _) =
            convert_file(&source, &store, &chunking, compressor, Reserve::NONE, &stop).unwrap();
        let mut compared = 0;
        for array in &layout.arrays {
            let zarray = &layout.documents[&format!("{}/.zarray", array.path)];
            assert_eq!(zarray["compressor"], compressor.codec());
            for index in write::chunk_indices(array) {
                let key = format!("{}/{}", array.path, write::chunk_key(&index));
                // Readers name a 0-d array's chunk `0`.
                let asked = if index.is_empty() { vec![0] } else { index };
                let computed = chunk_on_demand(
                    &source,
                    &chunking,
                    compressor,
                    &array.path,
                    &asked,
                    zarray,
                    64 << 20,
                )
                .unwrap();
                assert_eq!(
                    computed,
                    Some(std::fs::read(store.join(&key)).unwrap()),
                    "{key}"
                );
                compared += 1;
            }
        }
        assert!(compared > 5);
        // Metadata the source no longer gives (another chunking here): not computed.
        let tas = &layout.documents["tas/.zarray"];
        let other = chunk_on_demand(
            &source,
            &map(2),
            compressor,
            "tas",
            &[0, 0, 0],
            tas,
            64 << 20,
        );
        assert_eq!(other.unwrap(), None);
        let gone = chunk_on_demand(&source, &chunking, compressor, "nope", &[0], tas, 64 << 20);
        assert_eq!(gone.unwrap(), None);
    }
}

#[test]
fn string_variables_become_vlen_utf8_arrays_with_every_string() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("s.nc");
    let mut file = netcdf::create_with(&source, Options::NETCDF4).unwrap();
    file.add_dimension("station", 3).unwrap();
    file.add_dimension("x", 2).unwrap();
    let names = ["Hamburg", "Zürich", ""];
    let mut station = file.add_string_variable("station", &["station"]).unwrap();
    for (i, name) in names.iter().enumerate() {
        station.put_string(name, [i]).unwrap();
    }
    let mut codes = file
        .add_string_variable("codes", &["x", "station"])
        .unwrap();
    for x in 0..2 {
        for i in 0..3 {
            codes.put_string(&format!("c{x}{i}"), [x, i]).unwrap();
        }
    }
    let mut only = file.add_string_variable("only", &[]).unwrap();
    only.put_string("one <value>", ..).unwrap();
    file.close().unwrap();

    let chunking = Chunking {
        access_pattern: AccessPattern::Map,
        map_primary_chunksize: 1,
        chunk_size_mib: 16.0,
    };
    let store = dir.path().join("store");
    let opened = Source::open(&source).unwrap();
    let (layout, _) = convert_lz4(&opened, &store, &chunking).unwrap();
    let zarray = &layout.documents["codes/.zarray"];
    assert_eq!(zarray["dtype"], json!("|O"));
    assert_eq!(zarray["filters"], json!([{"id": "vlen-utf8"}]));
    assert_eq!(zarray["fill_value"], Value::Null);
    let store_handle = std::sync::Arc::new(FilesystemStore::new(&store).unwrap());
    let read = |path: &str| -> Vec<String> {
        let array = Array::open(store_handle.clone(), &format!("/{path}")).unwrap();
        array
            .retrieve_array_subset::<Vec<String>>(&array.subset_all())
            .unwrap()
    };
    assert_eq!(read("station"), names);
    assert_eq!(read("codes"), ["c00", "c01", "c02", "c10", "c11", "c12"]);
    let only: Vec<String> = decoded_chunk(&store, "only", &[]);
    assert_eq!(only, ["one <value>"]);

    // A chunk at the array's edge is padded with empty strings.
    let file = netcdf::open(&source).unwrap();
    let mut codes = layout
        .arrays
        .iter()
        .find(|a| a.path == "codes")
        .unwrap()
        .clone();
    codes.chunks = vec![1, 2];
    let variable = file.variable("codes").unwrap();
    let stored = StoredFile::open(&source).unwrap();
    let claims = write::claims(stored.as_ref(), &codes, &variable);
    let bounds = |cap| write::StringBounds {
        claims: claims.as_ref(),
        cap,
        stop: None,
    };
    let values = write::chunk_values(&variable, &codes, &[1, 1], &bounds(64 << 20)).unwrap();
    assert_eq!(values.as_strings().unwrap(), ["c12", ""]);
    // The strings of a chunk are bounded by what they claim and then by what they take:
    // "c00" and "c01" take 6 bytes of text and 8 bytes for each of 3 ends.
    let taken = 6 + 3 * 8;
    assert!(write::chunk_values(&variable, &codes, &[0, 0], &bounds(taken)).is_ok());
    let refused = write::chunk_values(&variable, &codes, &[0, 0], &bounds(taken - 1))
        .err()
        .expect("strings past the bound are refused");
    assert!(
        refused.contains("codes chunk [0, 0]") && refused.contains("strings claim more than"),
        "{refused}"
    );
    // A conversion that is stopping reads no more strings.
    let stopping = crate::jobs::Stop::default();
    stopping.request();
    let stopped = write::StringBounds {
        claims: claims.as_ref(),
        cap: 64 << 20,
        stop: Some(&stopping),
    };
    let refused = write::chunk_values(&variable, &codes, &[0, 0], &stopped)
        .err()
        .expect("a stopping conversion reads no strings");
    assert!(refused.contains("the conversion is stopping"), "{refused}");
    // Padding past the array's edge counts 8 bytes for its end, as a string does.
    let edge = 3 + 3 * 8;
    assert!(write::chunk_values(&variable, &codes, &[1, 1], &bounds(edge)).is_ok());
    assert!(write::chunk_values(&variable, &codes, &[1, 1], &bounds(edge - 1)).is_err());
    // The scalar: 11 bytes of text, two ends.
    let only = layout.arrays.iter().find(|a| a.path == "only").unwrap();
    let scalar = file.variable("only").unwrap();
    let claims = write::claims(stored.as_ref(), only, &scalar);
    let bounds = |cap| write::StringBounds {
        claims: claims.as_ref(),
        cap,
        stop: None,
    };
    let values = write::chunk_values(&scalar, only, &[], &bounds(11 + 16)).unwrap();
    assert_eq!(values.as_strings().unwrap(), ["one <value>"]);
    assert!(write::chunk_values(&scalar, only, &[], &bounds(11 + 15)).is_err());
}

/// A string variable's stored elements say how long each string is, and HDF5 allocates (and
/// zeroes) that much before it reads the string, however short the string is: a file of a
/// few KiB could cost any memory. Claims are read from the file and refused first, whether
/// the strings are stored contiguous, in chunks, or deflated after shuffle.
#[test]
fn strings_are_refused_by_what_the_file_claims_before_the_library_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("claims.nc");
    let words = ["a", "bb", "ccc", "dddd"];
    let mut file = netcdf::create_with(&source, Options::NETCDF4).unwrap();
    file.add_dimension("n", 4).unwrap();
    file.add_unlimited_dimension("t").unwrap();
    for (name, dim) in [("plain", "n"), ("chunked", "t")] {
        let mut variable = file.add_string_variable(name, &[dim]).unwrap();
        for (i, word) in words.iter().enumerate() {
            variable.put_string(word, [i]).unwrap();
        }
    }
    // Two records: its four others are the fill value.
    let mut filled = file.add_string_variable("filled", &["t"]).unwrap();
    filled
        .put_attribute("_FillValue", vec!["FILL".to_string()])
        .unwrap();
    filled.put_string("a", [0]).unwrap();
    filled.put_string("bb", [1]).unwrap();
    // Two records more than `chunked` stores: its elements past them are the fill value.
    file.add_variable::<f32>("longer", &["t"])
        .unwrap()
        .put_values(&[0.0; 6], ..)
        .unwrap();
    // Stored chunks of 2 x 2 that blocks of 3 x 3 straddle: "r<row>c<column>".
    file.add_dimension("x", 5).unwrap();
    file.add_dimension("y", 5).unwrap();
    let mut grid = file.add_string_variable("grid", &["x", "y"]).unwrap();
    grid.set_chunking(&[2, 2]).unwrap();
    for x in 0..5 {
        for y in 0..5 {
            grid.put_string(&format!("r{x}c{}", "c".repeat(y)), [x, y])
                .unwrap();
        }
    }
    file.close().unwrap();
    let chunking = Chunking {
        access_pattern: AccessPattern::Map,
        map_primary_chunksize: 1,
        chunk_size_mib: 16.0,
    };
    let opened = Source::open(&source).unwrap();
    let (layout, _) = convert_lz4(&opened, &dir.path().join("store"), &chunking).unwrap();
    let stored = StoredFile::open(&source).unwrap();
    let array = |name: &str| {
        layout
            .arrays
            .iter()
            .find(|a| a.path == name)
            .unwrap()
            .clone()
    };
    let claimed = |stored: Option<&StoredFile>, array: &metadata::ArrayLayout| {
        let claims = stored.unwrap().strings(array, 0).unwrap();
        let name = &array.path;
        assert_eq!(claims.claimed(&[0], &[4], u64::MAX).unwrap(), 10, "{name}");
        assert_eq!(claims.claimed(&[1], &[2], u64::MAX).unwrap(), 5, "{name}");
        assert_eq!(claims.claimed(&[3], &[1], u64::MAX).unwrap(), 4, "{name}");
        // Counting stops past the bound.
        assert_eq!(claims.claimed(&[0], &[4], 2).unwrap(), 3, "{name}");
    };
    claimed(stored.as_ref(), &array("plain"));
    claimed(stored.as_ref(), &array("chunked"));
    assert_eq!(array("chunked").shape, [6]);
    let chunked = stored
        .as_ref()
        .unwrap()
        .strings(&array("chunked"), 0)
        .unwrap();
    assert_eq!(chunked.claimed(&[2], &[4], u64::MAX).unwrap(), 7);
    assert_eq!(chunked.claimed(&[4], &[2], u64::MAX).unwrap(), 0);
    let netcdf_file = netcdf::open(&source).unwrap();
    let filled = netcdf_file.variable("filled").unwrap();
    assert_eq!(write::fill_bytes(&filled), 4);
    let filled = write::claims(stored.as_ref(), &array("filled"), &filled)
        .unwrap()
        .unwrap();
    assert_eq!(filled.claimed(&[0], &[6], u64::MAX).unwrap(), 1 + 2 + 4 * 4);
    assert_eq!(filled.claimed(&[3], &[3], u64::MAX).unwrap(), 3 * 4);
    let grid = stored.as_ref().unwrap().strings(&array("grid"), 0).unwrap();
    for (start, count) in [
        ([1, 1], [3, 3]),
        ([0, 0], [5, 5]),
        ([3, 2], [2, 3]),
        ([4, 4], [1, 1]),
    ] {
        // "r<x>c" and one "c" per column.
        let text: u64 = (start[0]..start[0] + count[0])
            .flat_map(|_| start[1]..start[1] + count[1])
            .map(|y| 3 + y)
            .sum();
        assert_eq!(
            grid.claimed(&start, &count, u64::MAX).unwrap(),
            text,
            "{start:?}"
        );
    }
    // The NetCDF library refuses filters on strings, other writers do not.
    let filtered = dir.path().join("filtered.h5");
    {
        use hdf5_metno::types::VarLenUnicode;
        let h5 = hdf5_metno::File::create(&filtered).unwrap();
        let data: Vec<VarLenUnicode> = words.iter().map(|w| w.parse().unwrap()).collect();
        let builder = || h5.new_dataset_builder().with_data(&data[..]);
        builder()
            .chunk(3)
            .shuffle()
            .deflate(4)
            .create("deflated")
            .unwrap();
        builder().chunk(3).deflate(4).create("inflated").unwrap();
        builder()
            .layout(hdf5_metno::dataset::Layout::Compact)
            .create("compact")
            .unwrap();
    }
    let stored_h5 = StoredFile::open(&filtered).unwrap();
    let named = |name: &str| metadata::ArrayLayout {
        path: name.into(),
        variable: name.into(),
        ..array("plain")
    };
    claimed(stored_h5.as_ref(), &named("deflated"));
    claimed(stored_h5.as_ref(), &named("inflated"));
    // Strings whose claims cannot be read are not read.
    let compact = stored_h5.as_ref().unwrap().strings(&named("compact"), 0);
    assert!(compact.is_err_and(|e| e.contains("Compact")));

    // "ccc" now claims 4 GiB in the contiguous and the chunked variable.
    let (contiguous, chunk) = {
        let h5 = hdf5_metno::File::open(&source).unwrap();
        let chunked = h5.dataset("chunked").unwrap();
        let chunk = chunked.chunk_info(0).unwrap();
        assert_eq!(chunk.filter_mask, 0);
        (h5.dataset("plain").unwrap().offset().unwrap(), chunk.addr)
    };
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&source)
            .unwrap();
        for address in [contiguous, chunk] {
            // Each stored string: its length, the heap collection's address, the index.
            file.write_all_at(&0xFFFF_FFF0u32.to_le_bytes(), address + 2 * 16)
                .unwrap();
        }
        // "dddd" claims 1 byte: the library would copy its 4 into a buffer of 1.
        file.write_all_at(&1u32.to_le_bytes(), contiguous + 3 * 16)
            .unwrap();
    }
    // Why the claim of element `at` of "plain" is refused, read afresh from the file.
    let plain_refused = |at: u64| {
        let stored = StoredFile::open(&source).unwrap().unwrap();
        let plain = stored.strings(&array("plain"), 0).unwrap();
        plain.claimed(&[at], &[1], u64::MAX).unwrap_err()
    };
    let short = plain_refused(3);
    assert!(
        short.contains("a string claims 1 bytes, and its heap object") && short.contains("holds 4"),
        "{short}"
    );
    let file = netcdf::open(&source).unwrap();
    for name in ["plain", "chunked"] {
        let planned = array(name);
        let variable = file.variable(name).unwrap();
        let claims = write::claims(stored.as_ref(), &planned, &variable);
        let bounds = write::StringBounds {
            claims: claims.as_ref(),
            cap: metadata::MAX_CHUNK_BYTES,
            stop: None,
        };
        let refused = write::chunk_values(&variable, &planned, &[0], &bounds)
            .err()
            .expect("claims past the bound are refused");
        assert!(
            refused.contains(&format!(
                "{name} chunk [0]: its {} strings claim more than 4096 MiB",
                planned.shape[0]
            )) && refused.contains("A smaller `chunk_size`"),
            "{refused}"
        );
    }
    // The conversion reads through the same bound.
    let opened = Source::open(&source).unwrap();
    let failed = convert_lz4(&opened, &dir.path().join("again"), &chunking)
        .expect_err("the conversion fails");
    assert!(failed.contains("claim more than"), "{failed}");
    // "a" claims 1,000,000 bytes, and its heap object says so too, but runs past its
    // collection: the library would copy what follows the collection.
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&source)
            .unwrap();
        let mut descriptor = [0u8; 16];
        file.read_exact_at(&mut descriptor, contiguous).unwrap();
        let collection = u64::from_le_bytes(descriptor[4..12].try_into().unwrap());
        let index =
            u16::try_from(u32::from_le_bytes(descriptor[12..].try_into().unwrap())).unwrap();
        // Objects start after the 16-byte header: index, count, reserved, size, bytes.
        let mut at = collection + 16;
        loop {
            let mut header = [0u8; 16];
            file.read_exact_at(&mut header, at).unwrap();
            let size = u64::from_le_bytes(header[8..].try_into().unwrap());
            if u16::from_le_bytes([header[0], header[1]]) == index {
                break;
            }
            at += 16 + size.next_multiple_of(8);
        }
        file.write_all_at(&1_000_000u64.to_le_bytes(), at + 8)
            .unwrap();
        file.write_all_at(&1_000_000u32.to_le_bytes(), contiguous)
            .unwrap();
    }
    let past = plain_refused(0);
    assert!(
        past.contains("of 1000000 bytes runs past its end"),
        "{past}"
    );
}

/// HDF5 files may store addresses and lengths in 4 bytes: a stored string is then 12 bytes,
/// and the headers of heap collections and of their objects are still aligned to 8 (16
/// bytes), as the library reads them.
#[test]
fn strings_of_files_with_four_byte_addresses_and_lengths_are_claimed_as_stored() {
    use hdf5_metno::plist::file_create::{Sizeof, SizeofInfo};
    use hdf5_metno::types::VarLenUnicode;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.h5");
    let words = ["a", "bb", "ccc", "dddd"];
    {
        let h5 = hdf5_metno::File::with_options()
            .with_fcpl(|fcpl| {
                fcpl.sizes(SizeofInfo {
                    sizeof_addr: Sizeof::Bytes4,
                    sizeof_size: Sizeof::Bytes4,
                })
            })
            .create(&path)
            .unwrap();
        let data: Vec<VarLenUnicode> = words.iter().map(|w| w.parse().unwrap()).collect();
        h5.new_dataset_builder()
            .with_data(&data[..])
            .create("plain")
            .unwrap();
        h5.new_dataset_builder()
            .with_data(&data[..])
            .chunk(3)
            .create("chunked")
            .unwrap();
    }
    let stored = StoredFile::open(&path).unwrap().unwrap();
    for name in ["plain", "chunked"] {
        let array = metadata::ArrayLayout {
            path: name.into(),
            groups: Vec::new(),
            variable: name.into(),
            dtype: metadata::Dtype::String,
            chunks: vec![4],
            shape: vec![4],
            copied: None,
        };
        let claims = stored.strings(&array, 0).unwrap();
        assert_eq!(claims.claimed(&[0], &[4], u64::MAX).unwrap(), 10, "{name}");
        assert_eq!(claims.claimed(&[2], &[2], u64::MAX).unwrap(), 7, "{name}");
    }
}

/// A NetCDF-4 file whose variables are stored in every way the daemon decodes itself:
/// chunk shapes that do not divide the dimensions, deflate with and without shuffle, no
/// filters, big- and little-endian, one- to eight-byte types, and a variable with chunks
/// never written.
fn stored_chunks(path: &Path) {
    let mut file = netcdf::create_with(path, Options::NETCDF4).unwrap();
    file.add_unlimited_dimension("time").unwrap();
    file.add_dimension("lat", 5).unwrap();
    file.add_dimension("lon", 6).unwrap();
    let dims = ["time", "lat", "lon"];
    let mut a = file.add_variable::<f32>("a", &dims).unwrap();
    a.set_chunking(&[2, 3, 4]).unwrap();
    a.set_compression(4, true).unwrap();
    let values: Vec<f32> = (0..7 * 30).map(|v| v as f32 * 1.25 - 40.0).collect();
    a.put_values(&values, [0..7, 0..5, 0..6]).unwrap();
    let mut b = file.add_variable::<i16>("b", &dims).unwrap();
    b.set_chunking(&[3, 5, 6]).unwrap();
    b.set_compression(1, false).unwrap();
    b.set_endianness(netcdf::Endianness::Big).unwrap();
    let values: Vec<i16> = (0..7 * 30).map(|v| (v * 97 % 2000 - 1000) as i16).collect();
    b.put_values(&values, [0..7, 0..5, 0..6]).unwrap();
    let mut c = file.add_variable::<f64>("c", &["time", "lat"]).unwrap();
    c.set_chunking(&[1, 5]).unwrap();
    c.set_endianness(netcdf::Endianness::Big).unwrap();
    let values: Vec<f64> = (0..7 * 5).map(|v| f64::from(v).sqrt()).collect();
    c.put_values(&values, [0..7, 0..5]).unwrap();
    let mut d = file.add_variable::<u8>("d", &["lat", "lon"]).unwrap();
    d.set_chunking(&[5, 6]).unwrap();
    d.set_compression(9, true).unwrap();
    let values: Vec<u8> = (0..30).collect();
    d.put_values(&values, ..).unwrap();
    let mut e = file.add_variable::<i64>("e", &["lat", "lon"]).unwrap();
    e.set_chunking(&[2, 2]).unwrap();
    e.set_compression(2, true).unwrap();
    e.set_fill_value(-9_i64).unwrap();
    e.put_values(&[1_i64, 2, 3, 4], [0..2, 0..2]).unwrap();
    file.close().unwrap();
}

#[test]
fn stored_chunks_decode_to_the_values_the_netcdf_library_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stored.nc");
    stored_chunks(&path);
    let source = Source::open(&path).unwrap();
    let (file, stored, layout) = source.layout(&map(1), Compressor::Lz4).unwrap();
    let stored = stored.expect("a NetCDF-4 file");
    let (mut decoded, mut by_library) = (0, 0);
    for planned in &layout.arrays {
        let variable = file.variable(&planned.path).unwrap();
        let Some(array) = stored.array(planned) else {
            assert_eq!(
                planned.path, "time",
                "only the coordinate is not stored chunked"
            );
            continue;
        };
        // Store chunks smaller than, larger than and across the stored ones, and equal to
        // each variable's stored chunks (the first two numbers for the 2-d ones).
        let rank = planned.shape.len();
        let plans: [&[u64]; 9] = [
            &[1, 1, 1],
            &[3, 2, 5],
            &[7, 5, 6],
            &[4, 4, 4],
            &[2, 3, 4],
            &[3, 5, 6],
            &[1, 5, 6],
            &[5, 6, 6],
            &[2, 2, 2],
        ];
        for chunks in plans {
            let mut planned = planned.clone();
            planned.chunks = chunks[..rank].to_vec();
            for index in write::chunk_indices(&planned) {
                let write::ChunkValues::Fixed(expected) =
                    write::chunk_values(&variable, &planned, &index, &NUMBERS).unwrap()
                else {
                    panic!("numbers");
                };
                match array.pieces(&planned, &index) {
                    Some(pieces) => {
                        decoded += 1;
                        let values = pieces.values(&source.file).unwrap();
                        assert_eq!(values, expected, "{} chunk {index:?}", planned.path);
                    }
                    // `e`'s chunks never written, and store chunks much smaller than the
                    // stored ones, are read through the library.
                    None => by_library += 1,
                }
            }
        }
    }
    assert!(
        decoded > 250,
        "{decoded} chunks decoded, {by_library} by the library"
    );
    // `e` has one stored chunk of nine written: the store chunks that need another one are
    // read through the library, which gives them the fill value.
    assert!(by_library > 10, "{by_library} chunks read by the library");
}

#[test]
fn slabs_of_aggregated_sources_are_the_values_the_netcdf_library_reads() {
    use combine::Slabs as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stored.nc");
    stored_chunks(&path);
    let library = netcdf::open(&path).unwrap();
    let sources = [Source::open(&path).unwrap()];
    let mut slabs = OpenSources::new(&sources, None);
    let mut compared = 0;
    for name in ["a", "b", "c", "d", "e"] {
        let variable = library.variable(name).unwrap();
        let shape: Vec<u64> = variable
            .dimensions()
            .iter()
            .map(|d| d.len() as u64)
            .collect();
        // Slabs at every offset of a few shapes, across stored chunks and within them.
        for count in [[1, 1, 1], [2, 3, 4], [3, 5, 6], [7, 5, 6], [5, 2, 3]] {
            let count = &count[..shape.len()];
            let offsets: Vec<Vec<u64>> = combine::slab_ranges(&shape, 1)
                .map(|(start, _)| start)
                .filter(|start| {
                    start
                        .iter()
                        .zip(count)
                        .zip(&shape)
                        .all(|((s, c), n)| s + c <= *n)
                })
                .collect();
            for start in offsets {
                let expected = variable
                    .get_raw_values(write::extents(&start, count))
                    .unwrap();
                let read = slabs.read(0, name, &start, count).unwrap();
                assert_eq!(read, expected, "{name} {start:?} {count:?}");
                compared += 1;
            }
        }
    }
    assert!(compared > 500, "{compared} slabs compared");
    // The stored path was taken for the variables it can decode.
    let opened = slabs.file(0).unwrap();
    assert!(matches!(opened.arrays.get("a"), Some(Some(_))));
    assert!(matches!(opened.arrays.get("b"), Some(Some(_))));
}

#[test]
fn a_netcdf3_file_has_no_stored_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classic.nc");
    let mut file = netcdf::create_with(&path, Options::_64BIT_OFFSET).unwrap();
    file.add_dimension("x", 2).unwrap();
    file.add_variable::<f32>("v", &["x"]).unwrap();
    file.close().unwrap();
    let source = Source::open(&path).unwrap();
    assert!(
        stored::StoredFile::open(&source.opened())
            .unwrap()
            .is_none()
    );
}

/// HDF5's shuffle of `values` as `N`-byte elements.
fn shuffle<const N: usize>(values: &[u8]) -> Vec<u8> {
    (0..N)
        .flat_map(|byte| values.iter().skip(byte).step_by(N).copied())
        .collect()
}

/// Writes the stored chunk at `origin` of `dataset` as `bytes`, with the filters whose bits
/// are set in `filter_mask` marked as not applied, as the HDF5 library lets a writer do.
#[allow(unsafe_code)]
fn write_stored_chunk(
    dataset: &hdf5_metno::Dataset,
    origin: &[u64],
    filter_mask: u32,
    bytes: &[u8],
) {
    // SAFETY: the dataset is open, `origin` has one coordinate per dimension, and `bytes` is
    // a live buffer of the length given; the call is made under the library's lock.
    let status = hdf5_metno::sync::sync(|| unsafe {
        hdf5_metno_sys::h5d::H5Dwrite_chunk(
            dataset.id(),
            hdf5_metno_sys::h5p::H5P_DEFAULT,
            filter_mask,
            origin.as_ptr(),
            bytes.len(),
            bytes.as_ptr().cast(),
        )
    });
    assert!(status >= 0, "H5Dwrite_chunk");
}

#[test]
fn stored_chunks_with_filters_skipped_decode_too() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("masked.h5");
    let values: Vec<f32> = (0..36).map(|v| v as f32 / 3.0).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    {
        let file = hdf5_metno::File::create(&path).unwrap();
        let dataset = file
            .new_dataset::<f32>()
            .chunk([2, 6])
            .shuffle()
            .deflate(4)
            .shape([6, 6])
            .create("v")
            .unwrap();
        let deflate = |bytes: &[u8]| {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(4));
            encoder.write_all(bytes).unwrap();
            encoder.finish().unwrap()
        };
        let rows = |first: usize| &bytes[first * 24..(first + 2) * 24];
        // Both filters; deflate (position 1) skipped; both skipped.
        write_stored_chunk(&dataset, &[0, 0], 0, &deflate(&shuffle::<4>(rows(0))));
        write_stored_chunk(&dataset, &[2, 0], 0b10, &shuffle::<4>(rows(2)));
        write_stored_chunk(&dataset, &[4, 0], 0b11, rows(4));
    }
    let source = Source::open(&path).unwrap();
    let (file, stored, layout) = source.layout(&map(1), Compressor::Lz4).unwrap();
    let stored = stored.expect("an HDF5 file");
    let planned = layout.arrays.iter().find(|a| a.path == "v").unwrap();
    let variable = file.variable("v").unwrap();
    let mut all = Vec::new();
    let array = stored.array(planned).expect("shuffle and deflate");
    for chunks in [[2, 6], [3, 4], [6, 6]] {
        let mut planned = planned.clone();
        planned.chunks = chunks.to_vec();
        for index in write::chunk_indices(&planned) {
            let write::ChunkValues::Fixed(expected) =
                write::chunk_values(&variable, &planned, &index, &NUMBERS).unwrap()
            else {
                panic!("numbers");
            };
            let decoded = array.pieces(&planned, &index).unwrap().values(&source.file);
            assert_eq!(decoded.unwrap(), expected, "chunk {index:?} of {chunks:?}");
            if chunks == [6, 6] {
                all = expected;
            }
        }
    }
    // The library read what was written, so both sides decoded the filters as they should.
    assert_eq!(all, bytes);
    // Copied, a chunk written with a filter skipped is encoded as the array declares.
    let mut planned = planned.clone();
    planned.chunks = vec![2, 6];
    planned.copied = array.copyable(&planned.chunks);
    assert!(planned.copied.is_some());
    for index in write::chunk_indices(&planned) {
        let read = write::read_chunk(&variable, Some(&array), &planned, &index, &NUMBERS).unwrap();
        let copied = write::chunk_bytes(&planned, None, read, Some(&source.file), &index).unwrap();
        let first = usize::try_from(index[0]).unwrap() * 48;
        assert_eq!(
            decode_copied(&copied, true, false, 4, 48),
            bytes[first..first + 48],
            "chunk {index:?}"
        );
    }
}

#[test]
fn a_conversion_through_stored_chunks_writes_what_the_library_values_give() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stored.nc");
    stored_chunks(&path);
    let source = Source::open(&path).unwrap();
    let store = dir.path().join("store");
    // Two time steps per chunk: only `d` (no time axis) has stored chunks that are store
    // chunks; the others the daemon decodes are cut from several stored chunks each.
    let (layout, written) = convert_lz4(&source, &store, &map(2)).unwrap();
    assert_eq!(written, Written::Complete);
    let file = netcdf::open(&path).unwrap();
    let mut compared = 0;
    for planned in &layout.arrays {
        if planned.copied.is_some() {
            assert_eq!(planned.path, "d");
            continue;
        }
        let variable = file.variable(&planned.path).unwrap();
        let encoder = write::Encoder::new(&layout, planned).unwrap();
        for index in write::chunk_indices(planned) {
            let values = write::chunk_values(&variable, planned, &index, &NUMBERS).unwrap();
            let expected = encoder.encode(&index, values).unwrap();
            let key = format!("{}/{}", planned.path, write::chunk_key(&index));
            assert_eq!(std::fs::read(store.join(&key)).unwrap(), expected, "{key}");
            compared += 1;
        }
    }
    assert_eq!(compared, 13);
}

/// A NetCDF-4 file whose variables' stored chunks can be copied: chunks that do not divide
/// the dimensions (edge chunks), shuffle on and off, big- and little-endian, and a
/// big-endian variable never written.
fn copied_chunks(path: &Path) {
    let mut file = netcdf::create_with(path, Options::NETCDF4).unwrap();
    file.add_unlimited_dimension("time").unwrap();
    file.add_dimension("lat", 5).unwrap();
    file.add_dimension("lon", 6).unwrap();
    let dims = ["time", "lat", "lon"];
    let mut le = file.add_variable::<f32>("le", &dims).unwrap();
    le.set_chunking(&[2, 3, 4]).unwrap();
    le.set_compression(4, true).unwrap();
    let values: Vec<f32> = (0..7 * 30).map(|v| v as f32 * 0.75 - 9.0).collect();
    le.put_values(&values, [0..7, 0..5, 0..6]).unwrap();
    let mut be = file.add_variable::<i16>("be", &dims).unwrap();
    be.set_chunking(&[3, 5, 6]).unwrap();
    be.set_compression(1, false).unwrap();
    be.set_endianness(netcdf::Endianness::Big).unwrap();
    let values: Vec<i16> = (0..7 * 30)
        .map(|v| (v * 131 % 3000 - 1500) as i16)
        .collect();
    be.put_values(&values, [0..7, 0..5, 0..6]).unwrap();
    let mut never = file.add_variable::<f64>("never", &["lat", "lon"]).unwrap();
    never.set_chunking(&[2, 4]).unwrap();
    never.set_compression(6, true).unwrap();
    never.set_endianness(netcdf::Endianness::Big).unwrap();
    never.set_fill_value(-9.5_f64).unwrap();
    file.close().unwrap();
}

/// Decodes a copied chunk as a Zarr reader does (zlib, then shuffle if declared, in the
/// declared byte order) into the machine's order.
fn decode_copied(
    bytes: &[u8],
    shuffled: bool,
    big_endian: bool,
    item: usize,
    len: usize,
) -> Vec<u8> {
    let mut values = stored::inflate(bytes, len).unwrap();
    assert_eq!(values.len(), len);
    if shuffled {
        values = stored::unshuffle(&values, item);
    }
    if big_endian {
        for element in values.chunks_exact_mut(item) {
            element.reverse();
        }
    }
    values
}

/// The elements of chunk `index` (of shape `chunks`) that lie inside `shape`, in C order.
fn inside(index: &[u64], chunks: &[u64], shape: &[u64]) -> Vec<bool> {
    let total: u64 = chunks.iter().product();
    (0..total)
        .map(|mut n| {
            let mut within = true;
            for d in (0..chunks.len()).rev() {
                within &= index[d] * chunks[d] + n % chunks[d] < shape[d];
                n /= chunks[d];
            }
            within
        })
        .collect()
}

#[test]
fn copied_chunks_decode_to_the_values_the_netcdf_library_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copied.nc");
    copied_chunks(&path);
    let source = Source::open(&path).unwrap();
    let (file, stored, layout) = source.layout(&map(1), Compressor::Lz4).unwrap();
    let stored = stored.expect("a NetCDF-4 file");
    // name, stored chunk shape, shuffled, big-endian, bytes per element
    let cases = [
        ("le", &[2, 3, 4][..], true, false, 4),
        ("be", &[3, 5, 6][..], false, true, 2),
        ("never", &[2, 4][..], true, true, 8),
    ];
    let mut compared = 0;
    for (name, chunks, shuffled, big_endian, item) in cases {
        let mut planned = layout
            .arrays
            .iter()
            .find(|a| a.path == name)
            .unwrap()
            .clone();
        planned.chunks = chunks.to_vec();
        let array = stored.array(&planned).unwrap();
        planned.copied = array.copyable(&planned.chunks);
        let copied = planned
            .copied
            .unwrap_or_else(|| panic!("{name} is copyable"));
        assert_eq!(
            copied.dtype(planned.dtype.zarr()).starts_with('>'),
            big_endian
        );
        let variable = file.variable(name).unwrap();
        for index in write::chunk_indices(&planned) {
            let read =
                write::read_chunk(&variable, Some(&array), &planned, &index, &NUMBERS).unwrap();
            let bytes =
                write::chunk_bytes(&planned, None, read, Some(&source.file), &index).unwrap();
            let write::ChunkValues::Fixed(expected) =
                write::chunk_values(&variable, &planned, &index, &NUMBERS).unwrap()
            else {
                panic!("numbers");
            };
            let decoded = decode_copied(&bytes, shuffled, big_endian, item, expected.len());
            // Past the variable's edges a stored chunk holds what HDF5 put there; readers
            // ignore it.
            for (n, within) in inside(&index, chunks, &planned.shape)
                .into_iter()
                .enumerate()
            {
                if within {
                    let at = n * item..(n + 1) * item;
                    assert_eq!(
                        decoded[at.clone()],
                        expected[at],
                        "{name} chunk {index:?} element {n}"
                    );
                }
            }
            compared += 1;
        }
    }
    // le: 4 x 2 x 2 chunks, be: 3, never: 3 x 2.
    assert_eq!(compared, 16 + 3 + 6);
}

#[test]
fn names_that_would_leave_a_store_or_take_a_documents_place_are_refused() {
    let long = "x".repeat(256);
    for name in [
        "..", ".", "", ".zattrs", ".hidden", "a/b", "a\0b", "a\nb", "a\tb", &long,
    ] {
        let refused = super::metadata::key_segment(name.to_string(), "group", "").unwrap_err();
        assert!(
            refused.contains("a group of the file") && refused.contains(&format!("{name:?}")),
            "{refused}"
        );
        let refused =
            super::metadata::key_segment(name.to_string(), "variable", "g/h").unwrap_err();
        assert!(
            refused.contains("a variable in group \"g/h\"")
                && refused.contains(&format!("{name:?}")),
            "{refused}"
        );
    }
    let longest = "x".repeat(255);
    for name in ["tas", "_x", "a.b", "t2m..max", "Ärger", &longest] {
        assert_eq!(
            super::metadata::key_segment(name.to_string(), "variable", "").unwrap(),
            name
        );
    }
}

#[test]
fn two_arrays_or_groups_the_store_would_name_alike_are_refused() {
    let mut layout = super::metadata::StoreLayout::root(serde_json::Map::new());
    layout
        .documents
        .insert("tas/.zarray".into(), serde_json::json!({}));
    layout
        .documents
        .insert("grid/.zgroup".into(), serde_json::json!({}));
    for path in ["tas", "grid"] {
        let refused = layout.claim(path, "variable \"x\"").unwrap_err();
        assert!(
            refused.contains("variable \"x\"") && refused.contains(&format!("{path:?}")),
            "{refused}"
        );
    }
    assert!(layout.claim("pr", "variable \"pr\"").is_ok());
    assert!(layout.claim("grid/tas", "variable \"grid/tas\"").is_ok());
}

#[test]
fn a_variable_along_one_dimension_several_times_is_refused_its_terabyte_chunk() {
    // NetCDF lets a variable run along one dimension more than once; with the time axis
    // pinned at 1024 steps, one chunk of `v(time, time, time)` would be 8 GiB.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repeated.nc");
    let mut file = netcdf::create_with(&path, Options::NETCDF4).unwrap();
    file.add_dimension("time", 1024).unwrap();
    file.add_variable::<f64>("v", &["time", "time", "time"])
        .unwrap();
    file.close().unwrap();
    let source = Source::open(&path).unwrap();
    let err = convert_lz4(&source, &dir.path().join("s"), &map(1024)).unwrap_err();
    assert!(
        err.contains("variable \"v\" would be stored in chunks of [1024, 1024, 1024], 8192 MiB"),
        "{err}"
    );
    assert!(!dir.path().join("s/v").exists());
}

#[test]
fn an_attribute_of_more_values_than_an_attribute_may_hold_fails_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attribute.nc");
    let mut file = netcdf::create(&path).unwrap();
    file.add_attribute("huge", vec![0_i8; (1 << 20) + 1])
        .unwrap();
    file.add_attribute("fine", vec![0_i8; 1 << 20]).unwrap();
    file.close().unwrap();
    let source = Source::open(&path).unwrap();
    let err = convert_lz4(&source, &dir.path().join("s"), &map(1)).unwrap_err();
    assert!(
        err.contains("the file: attribute \"huge\": 1048577 values"),
        "{err}"
    );
    assert!(!err.contains("fine"), "{err}");
    // Each within the bound, nine such attributes are more than the sources' in all.
    let path = dir.path().join("attributes.nc");
    let mut file = netcdf::create(&path).unwrap();
    for n in 0..9 {
        file.add_attribute(&format!("a{n}"), vec![0_i8; 1 << 20])
            .unwrap();
    }
    file.close().unwrap();
    let source = Source::open(&path).unwrap();
    let err = convert_lz4(&source, &dir.path().join("t"), &map(1)).unwrap_err();
    assert!(
        err.contains(
            "attribute \"a8\": the metadata of the sources (their variables and attributes"
        ),
        "{err}"
    );
}

#[test]
fn the_variables_of_all_the_sources_of_an_aggregation_are_bounded_together() {
    // An aggregation reads the variables of every source before it combines them: 1,000
    // sources of 100,000 variables each, each source within the bound of one store, would
    // be a hundred million. With a budget of 1,600 bytes (`a` along `time` counts as 256 + 1 + 32
    // + 4 bytes, `time` three more), the first source's four variables (1,175 bytes) fit,
    // and the second's `time`, and not its `a`.
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = (0..2)
        .map(|n| {
            let path = dir.path().join(format!("part{n}.nc"));
            let mut file = netcdf::create(&path).unwrap();
            file.add_dimension("time", 1).unwrap();
            for name in ["time", "a", "b", "c"] {
                file.add_variable::<f64>(name, &["time"]).unwrap();
            }
            file.close().unwrap();
            path
        })
        .collect();
    let sources: Vec<Source> = paths.iter().map(|p| Source::open(p).unwrap()).collect();
    let mut slabs = OpenSources::new(&sources, None);
    slabs.budget = std::rc::Rc::new(metadata::MetadataBudget::of(1600));
    let first = slabs.dataset(0, &sources[0]).unwrap();
    assert_eq!(first.vars.len(), 4);
    let err = slabs.dataset(1, &sources[1]).unwrap_err();
    assert!(
        err.starts_with(&format!(
            "{}: variable \"a\": the metadata of the sources (their variables and attributes",
            paths[1].display()
        )),
        "{err}"
    );
}

#[test]
fn indexes_longer_than_an_aggregation_reads_are_refused_before_they_are_read() {
    // Two NetCDF-4 files whose index of `x` claims 2^23 + 1 values each (one written, the
    // rest never stored): 2^24 + 2 in all, two more than a merge may align.
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str, last: f64| {
        let path = dir.path().join(name);
        let mut file = netcdf::create_with(&path, Options::NETCDF4).unwrap();
        file.add_unlimited_dimension("x").unwrap();
        let mut x = file.add_variable::<f64>("x", &["x"]).unwrap();
        x.put_values(&[last], [1 << 23]).unwrap();
        file.close().unwrap();
        Source::open(&path).unwrap()
    };
    let sources = [make("a.nc", 1.0), make("b.nc", 2.0)];
    // Merged, so aligned. (Combined by their coordinates, the order the same bound refuses
    // is given up for a concatenation along `x`, which reads no index whole.)
    let aggregation: crate::stores::request::Aggregation =
        serde_json::from_value(json!({"mode": "merge"})).unwrap();
    let stop = crate::jobs::Stop::default();
    let err = convert_sources(
        &sources,
        Some(&aggregation),
        None,
        &dir.path().join("s"),
        &map(1),
        Compressor::Lz4,
        Reserve::NONE,
        &stop,
    )
    .unwrap_err();
    assert!(
        err.contains("the indexes of \"x\" hold 16777218 values in all"),
        "{err}"
    );
}

#[test]
fn a_file_of_more_variables_than_a_store_holds_is_refused_before_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.nc");
    let mut file = netcdf::create(&path).unwrap();
    for n in 0..=100_000 {
        file.add_variable::<u8>(&format!("v{n}"), &[]).unwrap();
    }
    file.close().unwrap();
    let source = Source::open(&path).unwrap();
    let err = convert_lz4(&source, &dir.path().join("s"), &map(1)).unwrap_err();
    assert!(err.contains("more than 100000 variables"), "{err}");
}

#[test]
fn what_the_machine_has_none_of_for_a_moment_is_tried_again_and_nothing_else_is() {
    let errno = |errno: nix::errno::Errno| std::io::Error::from_raw_os_error(errno as i32);
    // Out of processes twice, then started.
    let mut tries = 0;
    let started = patiently(None, || {
        tries += 1;
        if tries < 3 {
            Err(errno(nix::errno::Errno::EAGAIN))
        } else {
            Ok(tries)
        }
    });
    assert_eq!(started.unwrap(), 3);
    // A failure that waiting does not mend is the answer at once.
    let mut tries = 0;
    let refused = patiently(None, || -> std::io::Result<()> {
        tries += 1;
        Err(errno(nix::errno::Errno::EACCES))
    });
    assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EACCES));
    assert_eq!(tries, 1);
    // Nor is anything tried again once the conversion is to stop.
    let stop = Stop::default();
    stop.request();
    let mut tries = 0;
    let stopped = patiently(Some(&stop), || -> std::io::Result<()> {
        tries += 1;
        Err(errno(nix::errno::Errno::EMFILE))
    });
    assert_eq!(stopped.unwrap_err().raw_os_error(), Some(libc::EMFILE));
    assert_eq!(tries, 1);
}

#[test]
fn what_a_process_reading_users_files_prints_is_logged_quoted_and_bounded() {
    // A forged line of the daemon's own log, a terminal escape and a carriage return each
    // stay inside one quoted entry.
    let forged = b"HDF5-DIAG: error\n2026-11-27T12:00:00Z  INFO svc_http: store deleted\n\x1b[2Jcleared\rover\n\n";
    let logged = log_messages(forged);
    assert_eq!(
        logged,
        [
            r#""HDF5-DIAG: error""#,
            r#""2026-11-27T12:00:00Z  INFO svc_http: store deleted""#,
            r#""\u{1b}[2Jcleared\rover""#,
        ]
    );
    // Bounded: lines past the first 20, and characters past 500 of a line, are left out.
    let many = "x".repeat(600) + "\n" + &"a line\n".repeat(30);
    let logged = log_messages(many.as_bytes());
    let (lines, chars) = MESSAGES_LOGGED;
    assert_eq!(logged.len(), lines + 1);
    assert_eq!(logged[0], format!("{:?} (cut)", "x".repeat(chars)));
    assert_eq!(logged[lines], "11 lines more, left out");
    // Bytes that are not UTF-8 are replaced, not passed on, and so is text written right to
    // left over the line's end.
    assert_eq!(log_messages(b"\xff\xfe\n"), ["\"\u{fffd}\u{fffd}\""]);
    assert_eq!(log_messages("\u{202e}gol".as_bytes()), [r#""\u{202e}gol""#]);
}
