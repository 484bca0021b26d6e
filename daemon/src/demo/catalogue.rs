//! What the demo tree holds: CMIP6, CMIP5, CORDEX and observational datasets chosen so that
//! every facet, several versions, the CF calendars and the kinds of grids occur.

use super::dataset::{Dataset, GLOBAL_180, Layout};
use super::grid::Grid;
use super::period::{Period, Sampling};

/// `files` consecutive periods of `years` years of monthly means from January of `first_year`.
fn years(first_year: i64, years: u32, files: u32) -> Vec<Period> {
    (0..files)
        .map(|k| Period::Months {
            year: first_year + i64::from(k * years),
            month: 1,
            count: years * 12,
        })
        .collect()
}

/// One file of daily means per month, `files` months from `year`-`month`.
fn months_of_days(year: i64, month: u32, files: u32) -> Vec<Period> {
    (0..files)
        .map(|k| {
            let index = year * 12 + i64::from(month - 1 + k);
            Period::DaysOfMonth {
                year: index / 12,
                month: (index % 12) as u32 + 1,
            }
        })
        .collect()
}

/// One file per day of steps of `minutes`, `files` days from `day`.
fn days_of_steps(
    day: (i64, u32, u32),
    minutes: i64,
    files: u32,
    sampling: Sampling,
) -> Vec<Period> {
    let count = (24 * 60 / minutes) as u32;
    (0..files)
        .map(|k| Period::Steps {
            start: (day.0, day.1, day.2 + k, 0),
            minutes,
            count,
            sampling,
        })
        .collect()
}

/// A European box, as the German HYRAS data cover.
const GERMANY: Grid = Grid::Regular {
    west: 5.5,
    east: 15.5,
    south: 47.0,
    north: 55.5,
    nlat: 4,
    nlon: 8,
    cell_bounds: true,
};

/// The EUR-11 CORDEX domain on a coarse rotated grid.
const EUR_11: Grid = Grid::Rotated {
    pole_lat: 39.25,
    pole_lon: -162.0,
    rlat: (-23.375, 21.835),
    rlon: (-28.375, 18.155),
    nrlat: 4,
    nrlon: 8,
};

/// The AFR-44 CORDEX domain: its pole is the true pole, so rotated and true coordinates agree.
const AFR_44: Grid = Grid::Rotated {
    pole_lat: 90.0,
    pole_lon: 180.0,
    rlat: (-45.76, 42.24),
    rlon: (-24.64, 60.28),
    nrlat: 4,
    nrlon: 8,
};

/// All demo datasets.
pub(crate) fn datasets() -> Vec<Dataset> {
    let mut all = cmip6();
    all.extend(cmip5());
    all.extend(cordex());
    all.extend(observations());
    all
}

fn cmip6() -> Vec<Dataset> {
    let cmip6 = |drs| Dataset::new(Layout::Cmip6, drs);
    vec![
        cmip6("CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/Amon/tas/gn")
            .periods(years(2000, 5, 3))
            .versions(&[("v20190710", 2), ("v20190815", 3)]),
        cmip6("CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/Amon/pr/gn")
            .periods(years(2000, 5, 3))
            .versions(&[("v20190710", 3)]),
        cmip6("ScenarioMIP/MPI-M/MPI-ESM1-2-LR/ssp585/r1i1p1f1/Amon/tas/gn")
            .periods(years(2015, 5, 3))
            .versions(&[("v20190710", 1), ("v20190815", 2), ("v20200101", 3)]),
        cmip6("CMIP/CSIRO-ARCCSS/ACCESS-CM2/amip/r1i1p1f1/Amon/ua/gn")
            .periods(years(1979, 5, 2))
            .versions(&[("v20191108", 1), ("v20201108", 2)]),
        cmip6("CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/fx/orog/gn")
            .versions(&[("v20190710", 1)]),
        cmip6("CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/fx/sftlf/gn")
            .versions(&[("v20190710", 1)]),
        cmip6("CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/Lmon/mrso/gn")
            .periods(years(2005, 5, 2))
            .versions(&[("v20190710", 2)]),
        // CESM counts days since year 1 in a calendar without leap days.
        cmip6("CMIP/NCAR/CESM2/historical/r1i1p1f1/day/tas/gn")
            .calendar("noleap")
            .time_base("days", (1, 1, 1))
            .periods(months_of_days(2014, 1, 2))
            .versions(&[("v20190308", 2)]),
        cmip6("CMIP/NOAA-GFDL/GFDL-CM4/historical/r1i1p1f1/Omon/tos/gn")
            .grid(Grid::Curvilinear { nj: 4, ni: 8 })
            .calendar("noleap")
            .periods(years(2005, 5, 2))
            .versions(&[("v20180701", 2)]),
        cmip6("CMIP/MOHC/UKESM1-0-LL/historical/r1i1p1f2/Amon/psl/gn")
            .calendar("360_day")
            .periods(years(1990, 5, 2))
            .versions(&[("v20190406", 1), ("v20190627", 2)]),
        cmip6("CMIP/EC-Earth-Consortium/EC-Earth3/historical/r1i1p1f1/3hr/pr/gr")
            .grid(GLOBAL_180)
            .periods(days_of_steps((2014, 12, 30), 180, 2, Sampling::Mean))
            .versions(&[("v20200310", 2)]),
        cmip6("CMIP/EC-Earth-Consortium/EC-Earth3/historical/r1i1p1f1/E1hr/psl/gr")
            .grid(GLOBAL_180)
            .periods(days_of_steps((2014, 12, 30), 60, 2, Sampling::Point))
            .versions(&[("v20200310", 2)]),
    ]
}

fn cmip5() -> Vec<Dataset> {
    let cmip5 = |drs| Dataset::new(Layout::Cmip5, drs);
    vec![
        cmip5("output1/MPI-M/MPI-ESM-LR/historical/mon/atmos/Amon/r1i1p1/tas")
            .periods(years(1996, 5, 2))
            .versions(&[("v20111006", 1), ("v20120315", 2)]),
        cmip5("output1/MPI-M/MPI-ESM-LR/rcp85/mon/atmos/Amon/r1i1p1/pr")
            .periods(years(2006, 5, 2))
            .versions(&[("v20111014", 2)]),
        cmip5("output1/MOHC/HadGEM2-ES/historical/day/atmos/day/r1i1p1/tas")
            .calendar("360_day")
            .time_base("days", (1859, 12, 1))
            .periods(months_of_days(1990, 2, 2))
            .versions(&[("v20110329", 2)]),
        cmip5("output1/MPI-M/MPI-ESM-LR/historical/fx/atmos/fx/r0i0p0/orog")
            .versions(&[("v20111006", 1)]),
        cmip5("output1/MPI-M/MPI-ESM-LR/historical/mon/ocean/Omon/r1i1p1/tos")
            .grid(Grid::Regular {
                west: -180.0,
                east: 180.0,
                south: -80.0,
                north: 90.0,
                nlat: 4,
                nlon: 8,
                cell_bounds: true,
            })
            .periods(years(1996, 5, 2))
            .versions(&[("v20120315", 2)]),
    ]
}

fn cordex() -> Vec<Dataset> {
    let cordex = |drs| {
        Dataset::new(Layout::Cordex, drs)
            .grid(EUR_11)
            .time_base("days", (1949, 12, 1))
    };
    vec![
        cordex("EUR-11/GERICS/NCC-NorESM1-M/rcp85/r1i1p1/GERICS-REMO2015/v1/3hr/pr")
            .periods(days_of_steps((2007, 1, 1), 180, 4, Sampling::Mean))
            .versions(&[("v20181212", 4)]),
        cordex("EUR-11/CLMcom/MPI-M-MPI-ESM-LR/historical/r1i1p1/CLMcom-CCLM4-8-17/v1/day/tas")
            .periods(months_of_days(1949, 12, 2))
            .versions(&[("v20140515", 1), ("v20150101", 2)]),
        cordex("EUR-11/CLMcom/MPI-M-MPI-ESM-LR/historical/r0i0p0/CLMcom-CCLM4-8-17/v1/fx/orog")
            .versions(&[("v20140515", 1)]),
        cordex("EUR-11/CLMcom/MPI-M-MPI-ESM-LR/historical/r1i1p1/CLMcom-CCLM4-8-17/v1/mon/tas")
            .periods(years(1951, 5, 2))
            .versions(&[("v20140515", 2)]),
        cordex("AFR-44/SMHI/ICHEC-EC-EARTH/rcp45/r12i1p1/SMHI-RCA4/v1/mon/pr")
            .grid(AFR_44)
            .calendar("standard")
            .periods(years(2006, 5, 2))
            .versions(&[("v20131026", 2)]),
    ]
}

fn observations() -> Vec<Dataset> {
    let obs = |drs| Dataset::new(Layout::Observations, drs).calendar("gregorian");
    let half_hours = (0..12).map(|hour| Period::Steps {
        start: (2016, 9, 2, hour),
        minutes: 30,
        count: 2,
        sampling: Sampling::Point,
    });
    vec![
        obs("grid/CPC/CPC/cmorph/30min/atmos/30min/r1i1p1/pr")
            .grid(Grid::Regular {
                west: -180.0,
                east: 180.0,
                south: -60.0,
                north: 60.0,
                nlat: 4,
                nlon: 8,
                cell_bounds: false,
            })
            .time_base("seconds", (1970, 1, 1))
            .periods(half_hours)
            .versions(&[("v20210618", 12)]),
        obs("grid/DWD/DWD/hyras/day/atmos/day/r1i1p1/tas")
            .grid(GERMANY)
            .time_base("days", (1951, 1, 1))
            .periods(months_of_days(2019, 1, 3))
            .versions(&[("v20200101", 1), ("v20230301", 3)]),
        // ERA5 on 0..360 longitudes, hourly instantaneous values without bounds.
        obs("reanalysis/ECMWF/ERA5/era5/1hr/atmos/1hr/r1i1p1/tas")
            .grid(Grid::Regular {
                west: -22.5,
                east: 337.5,
                south: -90.0,
                north: 90.0,
                nlat: 4,
                nlon: 8,
                cell_bounds: false,
            })
            .time_base("hours", (1900, 1, 1))
            .periods(days_of_steps((2020, 1, 1), 60, 3, Sampling::Point))
            .versions(&[("v20220101", 3)]),
        obs("reanalysis/ECMWF/ERA5/era5/fx/land/fx/r0i0p0/sftlf")
            .grid(Grid::Regular {
                west: -22.5,
                east: 337.5,
                south: -90.0,
                north: 90.0,
                nlat: 4,
                nlon: 8,
                cell_bounds: false,
            })
            .versions(&[("v20220101", 1)]),
        obs("grid/NOAA/NOAA/oisst/day/ocean/day/r1i1p1/tos")
            .time_base("days", (1978, 1, 1))
            .periods(months_of_days(2021, 6, 2))
            .versions(&[("v20220101", 2)]),
    ]
}
