//! Horizontal grids of demo files: where each cell lies and how CF describes it.

use netcdf::FileMut;

/// The horizontal grid of a demo file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Grid {
    /// 1-D `lat`/`lon` axes of `nlat` x `nlon` equal cells spanning the box, with `lat_bnds`/
    /// `lon_bnds` when `cell_bounds` is set. Longitudes may run 0..360.
    Regular {
        /// Western edge, degrees east.
        west: f64,
        /// Eastern edge, degrees east.
        east: f64,
        /// Southern edge, degrees north.
        south: f64,
        /// Northern edge, degrees north.
        north: f64,
        /// Number of latitudes.
        nlat: usize,
        /// Number of longitudes.
        nlon: usize,
        /// Whether to write cell bounds.
        cell_bounds: bool,
    },
    /// A global ocean grid bent like a tripolar grid: index axes `j`/`i`, 2-D `lat`/`lon` with
    /// four-vertex bounds, longitudes from -300 to 60 as GFDL writes them, latitudes from -78
    /// to 90.
    Curvilinear {
        /// Number of rows.
        nj: usize,
        /// Number of columns.
        ni: usize,
    },
    /// A rotated-pole grid as in CORDEX: `rlat`/`rlon` axes, a `rotated_pole` grid mapping and
    /// 2-D `lat`/`lon` with four-vertex bounds.
    Rotated {
        /// `grid_north_pole_latitude`.
        pole_lat: f64,
        /// `grid_north_pole_longitude`.
        pole_lon: f64,
        /// Southern and northern cell edges in rotated latitude.
        rlat: (f64, f64),
        /// Western and eastern cell edges in rotated longitude.
        rlon: (f64, f64),
        /// Number of rotated latitudes.
        nrlat: usize,
        /// Number of rotated longitudes.
        nrlon: usize,
    },
}

/// A position on the globe, degrees.
type LatLon = (f64, f64);

impl Grid {
    /// Names and lengths of the two horizontal dimensions, y first.
    pub(crate) fn dimensions(&self) -> [(&'static str, usize); 2] {
        match *self {
            Grid::Regular { nlat, nlon, .. } => [("lat", nlat), ("lon", nlon)],
            Grid::Curvilinear { nj, ni } => [("j", nj), ("i", ni)],
            Grid::Rotated { nrlat, nrlon, .. } => [("rlat", nrlat), ("rlon", nrlon)],
        }
    }

    /// Whether the grid's 1-D bounds need a `bnds` dimension.
    pub(crate) fn needs_bnds(&self) -> bool {
        matches!(
            self,
            Grid::Regular {
                cell_bounds: true,
                ..
            }
        )
    }

    /// The value of a data variable's `coordinates` attribute naming the 2-D coordinates.
    pub(crate) fn auxiliary_coordinates(&self) -> Option<&'static str> {
        match self {
            Grid::Regular { .. } => None,
            Grid::Curvilinear { .. } | Grid::Rotated { .. } => Some("lat lon"),
        }
    }

    /// The grid mapping variable a data variable names, if any.
    pub(crate) fn grid_mapping(&self) -> Option<&'static str> {
        matches!(self, Grid::Rotated { .. }).then_some("rotated_pole")
    }

    /// Cell centres in storage order (y-major).
    pub(crate) fn centres(&self) -> Vec<LatLon> {
        let [(_, ny), (_, nx)] = self.dimensions();
        (0..ny)
            .flat_map(|y| (0..nx).map(move |x| (x as f64 + 0.5, y as f64 + 0.5)))
            .map(|(x, y)| self.position(x, y))
            .collect()
    }

    /// Cell corners (counter-clockwise from south-west) in storage order.
    fn corners(&self) -> Vec<[LatLon; 4]> {
        let [(_, ny), (_, nx)] = self.dimensions();
        let mut corners = Vec::with_capacity(ny * nx);
        for y in 0..ny {
            for x in 0..nx {
                let (x, y) = (x as f64, y as f64);
                corners.push(
                    [(x, y), (x + 1.0, y), (x + 1.0, y + 1.0), (x, y + 1.0)]
                        .map(|(x, y)| self.position(x, y)),
                );
            }
        }
        corners
    }

    /// The geographic position of grid index position `(x, y)`; cell edges are at integers.
    fn position(&self, x: f64, y: f64) -> LatLon {
        match *self {
            Grid::Regular {
                west,
                east,
                south,
                north,
                nlat,
                nlon,
                ..
            } => (
                south + (north - south) * y / nlat as f64,
                west + (east - west) * x / nlon as f64,
            ),
            Grid::Curvilinear { nj, ni } => {
                let (fx, fy) = (x / ni as f64, y / nj as f64);
                let bend = 6.0
                    * (std::f64::consts::PI * fy).sin()
                    * (2.0 * std::f64::consts::PI * fx).cos();
                (-78.0 + 168.0 * fy - bend, -300.0 + 360.0 * fx)
            }
            Grid::Rotated {
                pole_lat,
                pole_lon,
                rlat,
                rlon,
                nrlat,
                nrlon,
            } => {
                let rotated_lat = rlat.0 + (rlat.1 - rlat.0) * y / nrlat as f64;
                let rotated_lon = rlon.0 + (rlon.1 - rlon.0) * x / nrlon as f64;
                unrotate(rotated_lat, rotated_lon, pole_lat, pole_lon)
            }
        }
    }

    /// Defines the grid's dimensions and coordinate variables.
    pub(crate) fn define(&self, file: &mut FileMut) -> netcdf::Result<()> {
        for (name, len) in self.dimensions() {
            file.add_dimension(name, len)?;
        }
        match *self {
            Grid::Regular { cell_bounds, .. } => {
                define_axis(file, "lat", "latitude", "degrees_north", "Y", cell_bounds)?;
                define_axis(file, "lon", "longitude", "degrees_east", "X", cell_bounds)?;
            }
            Grid::Curvilinear { .. } => {
                for (name, long_name) in [
                    ("j", "cell index along second dimension"),
                    ("i", "cell index along first dimension"),
                ] {
                    let mut index = file.add_variable::<i32>(name, &[name])?;
                    index.put_attribute("long_name", long_name)?;
                    index.put_attribute("units", "1")?;
                }
                define_2d(file, "j", "i", "vertices_latitude", "vertices_longitude")?;
            }
            Grid::Rotated {
                pole_lat, pole_lon, ..
            } => {
                define_rotated_axis(file, "rlat", "grid_latitude", "Y")?;
                define_rotated_axis(file, "rlon", "grid_longitude", "X")?;
                let mut pole = file.add_variable::<i32>("rotated_pole", &[])?;
                pole.put_attribute("grid_mapping_name", "rotated_latitude_longitude")?;
                pole.put_attribute("grid_north_pole_latitude", pole_lat)?;
                pole.put_attribute("grid_north_pole_longitude", pole_lon)?;
                define_2d(file, "rlat", "rlon", "lat_vertices", "lon_vertices")?;
            }
        }
        Ok(())
    }

    /// Writes the coordinate values (after [`Grid::define`] and `enddef`).
    pub(crate) fn write(&self, file: &mut FileMut) -> netcdf::Result<()> {
        let [(y_name, ny), (x_name, nx)] = self.dimensions();
        match *self {
            Grid::Regular { cell_bounds, .. } => {
                let lats: Vec<f64> = (0..ny)
                    .map(|y| self.position(0.0, y as f64 + 0.5).0)
                    .collect();
                let lons: Vec<f64> = (0..nx)
                    .map(|x| self.position(x as f64 + 0.5, 0.0).1)
                    .collect();
                put(file, "lat", &lats)?;
                put(file, "lon", &lons)?;
                if cell_bounds {
                    let edges = |n: usize, at: &dyn Fn(f64) -> f64| -> Vec<f64> {
                        (0..n)
                            .flat_map(|k| [at(k as f64), at(k as f64 + 1.0)])
                            .collect()
                    };
                    put(file, "lat_bnds", &edges(ny, &|y| self.position(0.0, y).0))?;
                    put(file, "lon_bnds", &edges(nx, &|x| self.position(x, 0.0).1))?;
                }
            }
            Grid::Curvilinear { .. } => {
                put_indices(file, y_name, ny)?;
                put_indices(file, x_name, nx)?;
                self.write_2d(file, "vertices_latitude", "vertices_longitude")?;
            }
            Grid::Rotated { rlat, rlon, .. } => {
                let axis = |(first, last): (f64, f64), n: usize| -> Vec<f64> {
                    (0..n)
                        .map(|k| first + (last - first) * (k as f64 + 0.5) / n as f64)
                        .collect()
                };
                put(file, "rlat", &axis(rlat, ny))?;
                put(file, "rlon", &axis(rlon, nx))?;
                self.write_2d(file, "lat_vertices", "lon_vertices")?;
            }
        }
        Ok(())
    }

    fn write_2d(
        &self,
        file: &mut FileMut,
        lat_bounds: &str,
        lon_bounds: &str,
    ) -> netcdf::Result<()> {
        let centres = self.centres();
        let corners = self.corners();
        put(
            file,
            "lat",
            &centres.iter().map(|c| c.0).collect::<Vec<_>>(),
        )?;
        put(
            file,
            "lon",
            &centres.iter().map(|c| c.1).collect::<Vec<_>>(),
        )?;
        put(
            file,
            lat_bounds,
            &corners
                .iter()
                .flat_map(|c| c.map(|p| p.0))
                .collect::<Vec<_>>(),
        )?;
        put(
            file,
            lon_bounds,
            &corners
                .iter()
                .flat_map(|c| c.map(|p| p.1))
                .collect::<Vec<_>>(),
        )
    }
}

/// Geographic position of a point given in a grid rotated so that its north pole lies at
/// (`pole_lat`, `pole_lon`): the point's unit vector turned about the y axis by the pole's
/// colatitude, then about the z axis to the pole's meridian.
fn unrotate(rotated_lat: f64, rotated_lon: f64, pole_lat: f64, pole_lon: f64) -> LatLon {
    let (lat, lon) = (rotated_lat.to_radians(), rotated_lon.to_radians());
    let (x, y, z) = (lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin());
    let tilt = (90.0 - pole_lat).to_radians();
    let (x, z) = (
        x * tilt.cos() - z * tilt.sin(),
        x * tilt.sin() + z * tilt.cos(),
    );
    let turn = (pole_lon + 180.0).to_radians();
    let (x, y) = (
        x * turn.cos() - y * turn.sin(),
        x * turn.sin() + y * turn.cos(),
    );
    (
        z.clamp(-1.0, 1.0).asin().to_degrees(),
        y.atan2(x).to_degrees(),
    )
}

fn define_axis(
    file: &mut FileMut,
    name: &str,
    standard_name: &str,
    units: &str,
    axis: &str,
    cell_bounds: bool,
) -> netcdf::Result<()> {
    let mut variable = file.add_variable::<f64>(name, &[name])?;
    variable.put_attribute("standard_name", standard_name)?;
    variable.put_attribute("long_name", capitalised(standard_name))?;
    variable.put_attribute("units", units)?;
    variable.put_attribute("axis", axis)?;
    if cell_bounds {
        let bounds = format!("{name}_bnds");
        variable.put_attribute("bounds", bounds.as_str())?;
        file.add_variable::<f64>(&bounds, &[name, "bnds"])?;
    }
    Ok(())
}

fn define_rotated_axis(
    file: &mut FileMut,
    name: &str,
    standard_name: &str,
    axis: &str,
) -> netcdf::Result<()> {
    let mut variable = file.add_variable::<f64>(name, &[name])?;
    variable.put_attribute("standard_name", standard_name)?;
    variable.put_attribute(
        "long_name",
        format!("{} in rotated pole grid", &standard_name[5..]),
    )?;
    variable.put_attribute("units", "degrees")?;
    variable.put_attribute("axis", axis)?;
    Ok(())
}

fn define_2d(
    file: &mut FileMut,
    y: &str,
    x: &str,
    lat_bounds: &str,
    lon_bounds: &str,
) -> netcdf::Result<()> {
    file.add_dimension("vertices", 4)?;
    for (name, standard_name, units, bounds) in [
        ("lat", "latitude", "degrees_north", lat_bounds),
        ("lon", "longitude", "degrees_east", lon_bounds),
    ] {
        let mut variable = file.add_variable::<f64>(name, &[y, x])?;
        variable.put_attribute("standard_name", standard_name)?;
        variable.put_attribute("long_name", format!("{standard_name} coordinate"))?;
        variable.put_attribute("units", units)?;
        variable.put_attribute("bounds", bounds)?;
        file.add_variable::<f64>(bounds, &[y, x, "vertices"])?;
    }
    Ok(())
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

fn put_indices(file: &mut FileMut, name: &str, n: usize) -> netcdf::Result<()> {
    let values: Vec<i32> = (0..n).map(|k| k as i32).collect();
    let mut variable = file.variable_mut(name).ok_or_else(|| missing(name))?;
    variable.put_values(&values, ..)
}

/// Writes all values of a variable defined earlier.
pub(crate) fn put(file: &mut FileMut, name: &str, values: &[f64]) -> netcdf::Result<()> {
    let mut variable = file.variable_mut(name).ok_or_else(|| missing(name))?;
    variable.put_values(values, ..)
}

/// The error for a variable that [`Grid::define`] should have created.
pub(crate) fn missing(name: &str) -> netcdf::Error {
    netcdf::Error::NotFound(format!("variable '{name}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: LatLon, b: LatLon) -> bool {
        (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9
    }

    #[test]
    fn unrotating_moves_the_origin_and_pole_where_cf_says() {
        // EUR-CORDEX: the rotated origin lies at 18E 50.75N, the rotated pole at 162W 39.25N.
        assert!(close(unrotate(0.0, 0.0, 39.25, -162.0), (50.75, 18.0)));
        assert!(close(unrotate(90.0, 0.0, 39.25, -162.0), (39.25, -162.0)));
        // A pole at 90N/180E is no rotation at all.
        assert!(close(unrotate(10.0, 20.0, 90.0, 180.0), (10.0, 20.0)));
    }

    #[test]
    fn regular_centres_sit_mid_cell() {
        let grid = Grid::Regular {
            west: 0.0,
            east: 360.0,
            south: -90.0,
            north: 90.0,
            nlat: 4,
            nlon: 8,
            cell_bounds: true,
        };
        let centres = grid.centres();
        assert_eq!(centres.len(), 32);
        assert_eq!(centres[0], (-67.5, 22.5));
        assert_eq!(centres[31], (67.5, 337.5));
    }
}
