//! `read_record` on files written for one property each.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::demo::{
    FileSpec, Format, GLOBAL_180 as GLOBAL, Grid, TimeAxis, Value, VariableSpec, write_netcdf,
};

fn spec(grid: Grid, time: Option<TimeAxis>) -> FileSpec {
    FileSpec {
        format: Format::Classic,
        global_attributes: Vec::new(),
        variable: VariableSpec {
            name: "tas".into(),
            standard_name: "air_temperature".into(),
            long_name: "Near-Surface Air Temperature".into(),
            units: "K".into(),
            cell_methods: Some("time: mean".into()),
            base: 280.0,
            amplitude: 20.0,
        },
        grid,
        levels: Vec::new(),
        height: Some(2.0),
        time,
    }
}

fn days(
    calendar: &str,
    since: &str,
    values: &[f64],
    bounds: Option<&[[f64; 2]]>,
) -> Option<TimeAxis> {
    Some(TimeAxis {
        units: format!("days since {since}"),
        calendar: calendar.into(),
        values: values.to_vec(),
        bounds: bounds.map(<[_]>::to_vec),
    })
}

fn written(dir: &Path, relative: &str, spec: &FileSpec) -> PathBuf {
    let path = dir.join(relative);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_netcdf(&path, spec).unwrap();
    path
}

fn record(spec: &FileSpec) -> Record {
    let dir = tempfile::tempdir().unwrap();
    read_record(&written(dir.path(), "file.nc", spec), Drs::Auto).unwrap()
}

#[test]
fn files_that_are_not_netcdf_give_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("not-netcdf.nc");
    fs::write(&text, "just text\n").unwrap();
    let err = read_record(&text, Drs::Auto).unwrap_err();
    assert!(err.starts_with("not a NetCDF file: "), "{err}");
    let err = read_record(&dir.path().join("missing.nc"), Drs::Auto).unwrap_err();
    assert!(err.starts_with("cannot resolve path"), "{err}");
}

#[test]
fn time_comes_from_bounds_when_present_and_points_otherwise() {
    let values = [15.5, 45.0];
    let bounds = [[0.0, 31.0], [31.0, 59.0]];
    let with_bounds = record(&spec(
        GLOBAL,
        days("standard", "2001-01-01", &values, Some(&bounds)),
    ));
    assert_eq!(
        with_bounds.time.as_deref(),
        Some("[2001-01-01T00:00:00 TO 2001-03-01T00:00:00]")
    );
    let points = record(&spec(GLOBAL, days("standard", "2001-01-01", &values, None)));
    assert_eq!(
        points.time.as_deref(),
        Some("[2001-01-16T12:00:00 TO 2001-02-15T00:00:00]")
    );
}

#[test]
fn each_calendar_is_applied_to_the_file() {
    let cases = [
        ("standard", "2001-03-01T12:00:00"),
        ("proleptic_gregorian", "2001-03-01T12:00:00"),
        ("julian", "2001-03-01T12:00:00"),
        ("noleap", "2001-03-01T12:00:00"),
        ("all_leap", "2001-02-28T12:00:00"),
        // 30 February exists only in the 360-day calendar: clamped to the 28th.
        ("360_day", "2001-02-28T12:00:00"),
    ];
    for (calendar, expected) in cases {
        let r = record(&spec(GLOBAL, days(calendar, "2001-01-01", &[59.5], None)));
        assert_eq!(
            r.time,
            Some(format!("[{expected} TO {expected}]")),
            "{calendar}"
        );
    }
}

#[test]
fn fixed_fields_have_no_time() {
    let r = record(&spec(GLOBAL, None));
    assert_eq!(r.time, None);
    assert_eq!(r.bbox, Some([-180.0, -90.0, 180.0, 90.0]));
}

#[test]
fn longitudes_0_to_360_become_minus_180_to_180() {
    let global = Grid::Regular {
        west: 0.0,
        east: 360.0,
        south: -90.0,
        north: 90.0,
        nlat: 4,
        nlon: 8,
        cell_bounds: true,
    };
    assert_eq!(
        record(&spec(global, None)).bbox,
        Some([-180.0, -90.0, 180.0, 90.0])
    );
    let west = Grid::Regular {
        west: 190.0,
        east: 250.0,
        south: 10.0,
        north: 50.0,
        nlat: 4,
        nlon: 6,
        cell_bounds: true,
    };
    assert_eq!(
        record(&spec(west, None)).bbox,
        Some([-170.0, 10.0, -110.0, 50.0])
    );
    let points = Grid::Regular {
        west: 190.0,
        east: 250.0,
        south: 10.0,
        north: 50.0,
        nlat: 4,
        nlon: 6,
        cell_bounds: false,
    };
    assert_eq!(
        record(&spec(points, None)).bbox,
        Some([-165.0, 15.0, -115.0, 45.0])
    );
}

#[test]
fn two_dimensional_grids_use_their_vertices() {
    let ocean = record(&spec(Grid::Curvilinear { nj: 4, ni: 8 }, None));
    assert_eq!(ocean.bbox, Some([-180.0, -78.0, 180.0, 90.0]));
    assert_eq!(ocean.facets["variable"], ["tas"]);
    let rotated = Grid::Rotated {
        pole_lat: 90.0,
        pole_lon: 180.0,
        rlat: (10.0, 20.0),
        rlon: (30.0, 40.0),
        nrlat: 2,
        nrlon: 2,
    };
    let [w, s, e, n] = record(&spec(rotated, None)).bbox.unwrap();
    assert!(
        (w - 30.0).abs() < 1e-5
            && (s - 10.0).abs() < 1e-5
            && (e - 40.0).abs() < 1e-5
            && (n - 20.0).abs() < 1e-5
    );
}

#[test]
fn variable_falls_back_to_the_data_variables() {
    let r = record(&spec(
        GLOBAL,
        days("standard", "2001-01-01", &[0.5], Some(&[[0.0, 1.0]])),
    ));
    assert_eq!(r.facets["variable"], ["tas"]);
    assert_eq!(r.first("format"), Some("nc"));
    assert_eq!(r.first("fs_type"), Some("posix"));
    assert!(r.file.starts_with('/') && r.uri == r.file);
}

#[test]
fn attributes_fill_what_a_short_path_lacks() {
    let mut cmip6 = spec(GLOBAL, None);
    cmip6.format = Format::Netcdf4Classic;
    cmip6.global_attributes = vec![
        ("mip_era".into(), Value::Text("CMIP6".into())),
        ("source_id".into(), Value::Text("ACCESS-CM2".into())),
        ("variable_id".into(), Value::Text("ta".into())),
        ("realization_index".into(), Value::Int(1)),
    ];
    let r = record(&cmip6);
    assert_eq!(
        (r.first("project"), r.first("model"), r.first("variable")),
        (Some("CMIP6"), Some("ACCESS-CM2"), Some("ta"))
    );
    assert_eq!(r.version, None);
}

#[test]
fn explicit_templates_read_any_root() {
    let dir = tempfile::tempdir().unwrap();
    let relative = "any/root/CMIP/CSIRO-ARCCSS/ACCESS-CM2/amip/r1i1p1f1/Amon/ua/gn/v20191108/ua.nc";
    let mut file = spec(GLOBAL, None);
    file.global_attributes = vec![("frequency".into(), Value::Text("mon".into()))];
    let path = written(dir.path(), relative, &file);
    let r = read_record(&path, Drs::Cmip6).unwrap();
    assert_eq!(
        (r.first("project"), r.first("product")),
        (Some("root"), Some("CMIP"))
    );
    assert_eq!(
        (r.first("variable"), r.first("time_frequency")),
        (Some("ua"), Some("mon"))
    );
    assert_eq!(r.version.as_deref(), Some("v20191108"));
    // Auto finds no project segment, and `gn` in the svc version slot is no version.
    assert_eq!(
        read_record(&path, Drs::Auto).unwrap().first("project"),
        None
    );
}
