//! A small catalogue whose every count the tests know by construction.
//!
//! 15 catalogue records (13 newest versions) and 1 user-data record:
//! - cmip6 ACCESS-CM2 `ua`, versions v20190101 (2 files) and v20200101 (2 files), global box;
//! - cmip6 MPI-ESM1-2-LR `tas`, 1850-1899, global box;
//! - cordex EUR-11 `pr` (3hr), `tas` (day), `orog` (fx, no time), European box;
//! - 6 CPC observation files of 30 minutes each on 2016-09-02 00:00..05:30, box ±10°, slk URIs;
//! - one record with mixed-case values and no version, time or box;
//! - janedoe's user data.

use serde_json::json;

fn line(value: &serde_json::Value) -> String {
    value.to_string()
}

pub(crate) fn records() -> Vec<String> {
    let mut out = Vec::new();
    for (version, files) in [
        (
            "v20190101",
            [("1979-01", "1989-12"), ("1990-01", "1999-12")],
        ),
        (
            "v20200101",
            [("1979-01", "1999-12"), ("2000-01", "2014-12")],
        ),
    ] {
        for (n, (start, end)) in files.iter().enumerate() {
            out.push(line(&json!({
                "file": format!("/data/cmip6/CMIP6/CMIP/CSIRO-ARCCSS/ACCESS-CM2/amip/r1i1p1f1/Amon/ua/gn/{version}/ua_{n}.nc"),
                "project": "CMIP6", "product": "CMIP", "institute": "CSIRO-ARCCSS", "model": "ACCESS-CM2",
                "experiment": "amip", "ensemble": "r1i1p1f1", "cmor_table": "Amon", "variable": ["ua"],
                "time_frequency": "mon", "realm": "atmos", "grid_label": "gn", "format": "nc",
                "time": format!("[{start} TO {end}]"), "bbox": [-180.0, -90.0, 180.0, 90.0], "version": version,
            })));
        }
    }
    out.push(line(&json!({
        "file": "/data/cmip6/CMIP6/CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/day/tas/gn/v20210101/tas_0.nc",
        "project": "CMIP6", "product": "CMIP", "institute": "MPI-M", "model": "MPI-ESM1-2-LR",
        "experiment": "historical", "ensemble": "r1i1p1f1", "cmor_table": "day", "variable": "tas",
        "time_frequency": "day", "realm": "atmos", "grid_label": "gn", "format": "nc",
        "time": "[1850-01-01 TO 1899-12-31]", "bbox": [-180.0, -90.0, 180.0, 90.0], "version": "v20210101",
    })));
    for (variable, frequency, time) in [
        ("pr", "3hr", Some("[2007-01-02T01:30 TO 2007-01-02T04:30]")),
        ("tas", "day", Some("[2006-01-01 TO 2010-12-31]")),
        ("orog", "fx", None),
    ] {
        let mut record = json!({
            "file": format!("/data/cordex/output/EUR-11/GERICS/NCC-NorESM1-M/rcp85/r1i1p1/GERICS-REMO2015/v1/{frequency}/{variable}/v20181212/{variable}_EUR-11.nc"),
            "project": "cordex", "product": "EUR-11", "institute": "GERICS", "model": "NCC-NorESM1-M-GERICS-REMO2015-v1",
            "driving_model": "NCC-NorESM1-M", "rcm_name": "GERICS-REMO2015", "rcm_version": "v1",
            "experiment": "rcp85", "ensemble": "r1i1p1", "variable": variable, "time_frequency": frequency,
            "cmor_table": frequency, "realm": "atmos", "format": "nc", "bbox": [-44.6, 21.9, 64.9, 72.6], "version": "v20181212",
        });
        if let Some(t) = time {
            record["time"] = json!(t);
        }
        out.push(line(&record));
    }
    for hour in 0..6 {
        let file = format!(
            "/data/obs/grid/CPC/CPC/cmorph/30min/atmos/30min/r1i1p1/v20210618/pr/pr_{hour:02}.nc"
        );
        out.push(line(&json!({
            "file": file, "uri": format!("slk://{file}"),
            "project": "observations", "product": "grid", "institute": "CPC", "model": "CPC", "experiment": "cmorph",
            "time_frequency": "30min", "cmor_table": "30min", "realm": "atmos", "variable": "pr", "ensemble": "r1i1p1",
            "time": format!("[2016-09-02T{hour:02}:00 TO 2016-09-02T{hour:02}:30]"), "bbox": [-10.0, -10.0, 10.0, 10.0],
            "version": "v20210618",
        })));
    }
    out.push(line(&json!({"file": "/data/other/Mixed/File.nc", "project": "Mock", "variable": "TAS", "experiment": "Test"})));
    out.push(line(&json!({
        "file": "/home/janedoe/tas.nc", "user": "janedoe", "project": "cmip5", "variable": "tas",
        "time_frequency": "mon", "time": "[2000-01 TO 2000-12]",
    })));
    out
}

/// Loads the fixture into a running daemon through the command line.
pub(crate) fn load(svcd: &crate::harness::Svcd) {
    let path = crate::harness::write_lines(&svcd.data_dir, "fixture.jsonl", &records());
    let output = svcd.cli(&["index", "add", path.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "index add failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        crate::harness::stdout(&output).contains("added 16, replaced 0, rejected 0"),
        "{}",
        crate::harness::stdout(&output)
    );
}

/// Adds the fixture again: only records missing from the catalogue are new.
pub(crate) fn load_again(svcd: &crate::harness::Svcd) {
    let path = crate::harness::write_lines(&svcd.data_dir, "fixture.jsonl", &records());
    let output = svcd.cli(&["index", "add", path.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
}
