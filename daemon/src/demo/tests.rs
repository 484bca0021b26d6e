//! Round trip: the demo tree written, then crawled back with `Drs::Auto`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::*;
use crate::catalog::Record;
use crate::crawl::{Drs, find_netcdf_files, read_record};

fn crawl(root: &Path) -> Vec<Record> {
    let files = find_netcdf_files(root).unwrap();
    files
        .iter()
        .map(|f| read_record(f, Drs::Auto).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect()
}

fn find<'a>(records: &'a [Record], suffix: &str) -> &'a Record {
    records
        .iter()
        .find(|r| r.file.ends_with(suffix))
        .unwrap_or_else(|| panic!("no record ends with {suffix}"))
}

fn facet<'a>(record: &'a Record, name: &str) -> &'a str {
    record
        .first(name)
        .unwrap_or_else(|| panic!("{} has no {name}", record.file))
}

fn assert_bbox_near(record: &Record, expected: [f64; 4], tolerance: f64) {
    let bbox = record
        .bbox
        .unwrap_or_else(|| panic!("{} has no bbox", record.file));
    let near = bbox
        .iter()
        .zip(expected)
        .all(|(a, b)| (a - b).abs() <= tolerance);
    assert!(
        near,
        "{}: bbox {bbox:?}, expected {expected:?}",
        record.file
    );
}

#[test]
fn demo_tree_crawls_back_with_the_right_facets() {
    let dir = tempfile::tempdir().unwrap();
    let mut calls = Vec::new();
    let summary =
        write_demo_tree(dir.path(), &mut |done, total| calls.push((done, total))).unwrap();
    assert!((60..=120).contains(&summary.files), "{summary:?}");
    assert!(summary.bytes < 5_000_000, "{summary:?}");
    assert_eq!(calls.len(), summary.files);
    assert_eq!(calls.last(), Some(&(summary.files, summary.files)));

    let records = crawl(dir.path());
    assert_eq!(records.len(), summary.files);
    for record in &records {
        for name in [
            "project",
            "product",
            "institute",
            "model",
            "experiment",
            "ensemble",
            "variable",
            "time_frequency",
            "realm",
        ] {
            facet(record, name);
        }
        assert!(
            record.version.is_some() && record.bbox.is_some(),
            "{}",
            record.file
        );
        assert_eq!(
            record.time.is_none(),
            facet(record, "time_frequency") == "fx",
            "{}",
            record.file
        );
    }
    check_cmip6(&records);
    check_cmip5(&records);
    check_cordex(&records);
    check_observations(&records);
    check_versions(&records, summary.datasets);
}

fn check_cmip6(records: &[Record]) {
    let tas = find(
        records,
        "v20190815/tas_Amon_MPI-ESM1-2-LR_historical_r1i1p1f1_gn_201001-201412.nc",
    );
    let expected = [
        ("project", "CMIP6"),
        ("product", "CMIP"),
        ("institute", "MPI-M"),
        ("model", "MPI-ESM1-2-LR"),
        ("experiment", "historical"),
        ("ensemble", "r1i1p1f1"),
        ("cmor_table", "Amon"),
        ("variable", "tas"),
        ("grid_label", "gn"),
        ("time_frequency", "mon"),
        ("realm", "atmos"),
        ("format", "nc"),
        ("fs_type", "posix"),
    ];
    for (name, value) in expected {
        assert_eq!(facet(tas, name), value, "{name}");
    }
    assert_eq!(tas.version.as_deref(), Some("v20190815"));
    assert_eq!(
        tas.time.as_deref(),
        Some("[2010-01-01T00:00:00 TO 2015-01-01T00:00:00]")
    );
    assert_eq!(tas.bbox, Some([-180.0, -90.0, 180.0, 90.0]));

    let noleap = find(
        records,
        "tas_day_CESM2_historical_r1i1p1f1_gn_20140201-20140228.nc",
    );
    assert_eq!(
        noleap.time.as_deref(),
        Some("[2014-02-01T00:00:00 TO 2014-03-01T00:00:00]")
    );
    let day360 = find(
        records,
        "v20190627/psl_Amon_UKESM1-0-LL_historical_r1i1p1f2_gn_199501-199912.nc",
    );
    assert_eq!(
        day360.time.as_deref(),
        Some("[1995-01-01T00:00:00 TO 2000-01-01T00:00:00]")
    );
    let ocean = find(
        records,
        "tos_Omon_GFDL-CM4_historical_r1i1p1f1_gn_200501-200912.nc",
    );
    assert_eq!(
        (facet(ocean, "realm"), facet(ocean, "time_frequency")),
        ("ocean", "mon")
    );
    assert_eq!(ocean.bbox, Some([-180.0, -78.0, 180.0, 90.0]));
    let hourly = find(
        records,
        "psl_E1hr_EC-Earth3_historical_r1i1p1f1_gr_201412310000-201412312300.nc",
    );
    assert_eq!(
        (facet(hourly, "grid_label"), facet(hourly, "time_frequency")),
        ("gr", "1hr")
    );
    assert_eq!(
        hourly.time.as_deref(),
        Some("[2014-12-31T00:00:00 TO 2014-12-31T23:00:00]")
    );
    let fx = find(records, "orog_fx_MPI-ESM1-2-LR_historical_r1i1p1f1_gn.nc");
    assert_eq!(
        (fx.time.as_deref(), facet(fx, "time_frequency")),
        (None, "fx")
    );
}

fn check_cmip5(records: &[Record]) {
    let tas = find(
        records,
        "v20120315/tas/tas_Amon_MPI-ESM-LR_historical_r1i1p1_200101-200512.nc",
    );
    assert_eq!(
        (
            facet(tas, "project"),
            facet(tas, "product"),
            facet(tas, "realm")
        ),
        ("cmip5", "output1", "atmos")
    );
    assert_eq!(tas.version.as_deref(), Some("v20120315"));
    let day360 = find(
        records,
        "tas_day_HadGEM2-ES_historical_r1i1p1_19900201-19900230.nc",
    );
    assert_eq!(
        day360.time.as_deref(),
        Some("[1990-02-01T00:00:00 TO 1990-03-01T00:00:00]")
    );
    let fx = find(records, "orog_fx_MPI-ESM-LR_historical_r0i0p0.nc");
    assert_eq!(
        (fx.time.as_deref(), facet(fx, "ensemble")),
        (None, "r0i0p0")
    );
}

fn check_cordex(records: &[Record]) {
    let pr = find(
        records,
        "pr_EUR-11_NCC-NorESM1-M_rcp85_r1i1p1_GERICS-REMO2015_v1_3hr_200701010000-200701012100.nc",
    );
    assert_eq!(facet(pr, "project"), "cordex");
    assert_eq!(facet(pr, "product"), "EUR-11");
    assert_eq!(facet(pr, "driving_model"), "NCC-NorESM1-M");
    assert_eq!(facet(pr, "rcm_name"), "GERICS-REMO2015");
    assert_eq!(facet(pr, "rcm_version"), "v1");
    assert_eq!(facet(pr, "model"), "NCC-NorESM1-M-GERICS-REMO2015-v1");
    assert_eq!(pr.version.as_deref(), Some("v20181212"));
    assert_eq!(
        pr.time.as_deref(),
        Some("[2007-01-01T00:00:00 TO 2007-01-02T00:00:00]")
    );
    assert_bbox_near(pr, [-44.6, 21.9, 64.9, 72.6], 1.5);
    let africa = find(
        records,
        "pr_AFR-44_ICHEC-EC-EARTH_rcp45_r12i1p1_SMHI-RCA4_v1_mon_200601-201012.nc",
    );
    assert_bbox_near(africa, [-24.64, -45.76, 60.28, 42.24], 1e-6);
}

fn check_observations(records: &[Record]) {
    let hyras = find(
        records,
        "v20230301/tas/tas_day_DWD_hyras_r1i1p1_20190101-20190131.nc",
    );
    assert_eq!(
        (
            facet(hyras, "project"),
            facet(hyras, "product"),
            facet(hyras, "cmor_table")
        ),
        ("observations", "grid", "day")
    );
    assert_eq!(
        hyras.time.as_deref(),
        Some("[2019-01-01T00:00:00 TO 2019-02-01T00:00:00]")
    );
    assert_eq!(hyras.bbox, Some([5.5, 47.0, 15.5, 55.5]));
    // Points only: the box spans the cell centres, the time the instants.
    let cmorph = find(
        records,
        "pr_30min_CPC_cmorph_r1i1p1_201609020000-201609020030.nc",
    );
    assert_eq!(
        cmorph.time.as_deref(),
        Some("[2016-09-02T00:00:00 TO 2016-09-02T00:30:00]")
    );
    assert_eq!(cmorph.bbox, Some([-157.5, -45.0, 157.5, 45.0]));
    // ERA5's 0..360 longitudes cross the antimeridian once moved to -180..180.
    let era5 = find(
        records,
        "tas_1hr_ERA5_era5_r1i1p1_202001010000-202001012300.nc",
    );
    assert_eq!(era5.bbox, Some([-180.0, -67.5, 180.0, 67.5]));
    assert_eq!(
        facet(find(records, "sftlf_fx_ERA5_era5_r0i0p0.nc"), "realm"),
        "land"
    );
}

fn check_versions(records: &[Record], datasets: usize) {
    let mut versions: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for record in records {
        let key = record
            .dataset_key()
            .unwrap_or_else(|| panic!("{} has no dataset key", record.file));
        versions
            .entry(key)
            .or_default()
            .insert(record.version.as_deref().unwrap_or_default());
    }
    assert_eq!(versions.len(), datasets);
    let counts: Vec<usize> = versions.values().map(BTreeSet::len).collect();
    assert!(
        counts.iter().filter(|&&n| n >= 2).count() >= 4,
        "{counts:?}"
    );
    assert!(counts.contains(&3), "{counts:?}");
}

#[test]
fn demo_tree_is_deterministic() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let written = write_demo_tree(a.path(), &mut |_, _| {}).unwrap();
    write_demo_tree(b.path(), &mut |_, _| {}).unwrap();
    let files = find_netcdf_files(a.path()).unwrap();
    let relative = |root: &Path, files: &[std::path::PathBuf]| -> Vec<std::path::PathBuf> {
        let mut names: Vec<_> = files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        names.sort();
        names
    };
    assert_eq!(files.len(), written.files);
    assert!(written.files > 0);
    assert_eq!(
        relative(a.path(), &files),
        relative(b.path(), &find_netcdf_files(b.path()).unwrap()),
        "both runs write the same files"
    );
    for file in files {
        let relative = file.strip_prefix(a.path()).unwrap();
        assert_eq!(
            fs::read(&file).unwrap(),
            fs::read(b.path().join(relative)).unwrap(),
            "{}",
            relative.display()
        );
    }
}
