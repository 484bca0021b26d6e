//! GeoJSON geometries of the `intersects` search parameter, tested against item boxes.
//!
//! Items have axis-aligned boxes, so "the item geometry intersects G" is exact with three
//! tests: a vertex of G lies in the box, an edge of G crosses the box, or the box lies inside
//! a polygon of G. Coordinates are taken as plain longitude/latitude (no antimeridian
//! wrapping, as for `bbox`).

use serde_json::Value;

use crate::error::{Error, Fault, Result};

type Point = [f64; 2];

/// The most positions an `intersects` geometry may have. Testing a geometry against the
/// items in its bounds costs positions × items, so a search with a large geometry would hold
/// a request slot for seconds; 2,000 positions keep a whole-catalogue search well under a
/// second while a country outline or a simplified coastline still fits.
pub(crate) const MAX_POSITIONS: usize = 2_000;

/// A parsed geometry: its points, its line strings, and its polygons (outer ring first, then
/// holes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shape {
    /// The geometry as given, for the links of later pages.
    source: Value,
    points: Vec<Point>,
    lines: Vec<Vec<Point>>,
    polygons: Vec<Vec<Vec<Point>>>,
}

impl Shape {
    /// Parses a GeoJSON geometry object.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] ([`Fault::Syntax`]) naming what is wrong.
    pub fn parse(value: &Value) -> Result<Self> {
        let mut shape = Shape {
            source: value.clone(),
            ..Shape::default()
        };
        shape.add(value)?;
        let positions = shape.points.len()
            + shape.lines.iter().map(Vec::len).sum::<usize>()
            + shape.polygons.iter().flatten().map(Vec::len).sum::<usize>();
        if positions == 0 {
            return Err(malformed("the geometry has no coordinates"));
        }
        if positions > MAX_POSITIONS {
            return Err(malformed(&format!(
                "it has {positions} positions, at most {MAX_POSITIONS} are allowed; simplify it"
            )));
        }
        Ok(shape)
    }

    fn add(&mut self, value: &Value) -> Result<()> {
        let kind = value["type"].as_str().unwrap_or_default();
        let coordinates = &value["coordinates"];
        match kind {
            "Point" => self.points.push(point(coordinates)?),
            "MultiPoint" => {
                for p in array(coordinates)? {
                    self.points.push(point(p)?);
                }
            }
            "LineString" => self.lines.push(line(coordinates, 2)?),
            "MultiLineString" => {
                for l in array(coordinates)? {
                    self.lines.push(line(l, 2)?);
                }
            }
            "Polygon" => self.polygons.push(polygon(coordinates)?),
            "MultiPolygon" => {
                for p in array(coordinates)? {
                    self.polygons.push(polygon(p)?);
                }
            }
            "GeometryCollection" => {
                for g in array(&value["geometries"])? {
                    self.add(g)?;
                }
            }
            _ => {
                return Err(malformed(&format!(
                    "unknown geometry type {:?}",
                    value["type"]
                )));
            }
        }
        Ok(())
    }

    /// The geometry as given.
    pub fn geojson(&self) -> &Value {
        &self.source
    }

    /// `[min_lon, min_lat, max_lon, max_lat]` around every coordinate.
    pub fn bounds(&self) -> [f64; 4] {
        let all = self
            .points
            .iter()
            .chain(self.lines.iter().flatten())
            .chain(self.polygons.iter().flatten().flatten());
        all.fold(
            [
                f64::INFINITY,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NEG_INFINITY,
            ],
            |b, p| {
                [
                    b[0].min(p[0]),
                    b[1].min(p[1]),
                    b[2].max(p[0]),
                    b[3].max(p[1]),
                ]
            },
        )
    }

    /// Whether the box `[min_lon, min_lat, max_lon, max_lat]` meets the geometry.
    pub fn intersects_box(&self, b: [f64; 4]) -> bool {
        let inside = |p: &Point| b[0] <= p[0] && p[0] <= b[2] && b[1] <= p[1] && p[1] <= b[3];
        let crosses = |chain: &[Point]| chain.windows(2).any(|e| segment_meets_box(e[0], e[1], b));
        self.points.iter().any(inside)
            || self
                .lines
                .iter()
                .any(|l| l.iter().any(inside) || crosses(l))
            || self.polygons.iter().any(|rings| {
                rings.iter().any(|r| r.iter().any(inside) || crosses(r))
                    || in_polygon([b[0], b[1]], rings)
            })
    }
}

fn malformed(why: &str) -> Error {
    Error::invalid(
        "intersects",
        Fault::Syntax,
        format!("Invalid 'intersects' geometry: {why}."),
    )
}

fn array(value: &Value) -> Result<&Vec<Value>> {
    value
        .as_array()
        .ok_or_else(|| malformed("coordinates must be arrays"))
}

fn point(value: &Value) -> Result<Point> {
    match array(value)?.as_slice() {
        [x, y, ..] => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => Ok([x, y]),
            _ => Err(malformed("a position holds a non-number")),
        },
        _ => Err(malformed("a position needs two numbers")),
    }
}

fn line(value: &Value, min: usize) -> Result<Vec<Point>> {
    let points = array(value)?
        .iter()
        .map(point)
        .collect::<Result<Vec<_>>>()?;
    if points.len() < min {
        return Err(malformed(&format!(
            "a line or ring needs at least {min} positions"
        )));
    }
    Ok(points)
}

fn polygon(value: &Value) -> Result<Vec<Vec<Point>>> {
    let rings = array(value)?
        .iter()
        .map(|r| line(r, 4))
        .collect::<Result<Vec<_>>>()?;
    if rings.is_empty() {
        return Err(malformed("a polygon needs a ring"));
    }
    Ok(rings)
}

/// Whether a point lies inside the outer ring and outside every hole (even-odd rule).
fn in_polygon(p: Point, rings: &[Vec<Point>]) -> bool {
    rings.iter().filter(|ring| in_ring(p, ring)).count() % 2 == 1
}

fn in_ring(p: Point, ring: &[Point]) -> bool {
    let mut inside = false;
    for edge in ring.windows(2) {
        let ([x1, y1], [x2, y2]) = (edge[0], edge[1]);
        if (y1 > p[1]) != (y2 > p[1]) && p[0] < x1 + (p[1] - y1) * (x2 - x1) / (y2 - y1) {
            inside = !inside;
        }
    }
    inside
}

/// Whether segment `a`-`b` meets the box (Liang-Barsky clipping).
fn segment_meets_box(a: Point, b: Point, bx: [f64; 4]) -> bool {
    let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
    let (mut t0, mut t1) = (0.0_f64, 1.0_f64);
    for (p, q) in [
        (-dx, a[0] - bx[0]),
        (dx, bx[2] - a[0]),
        (-dy, a[1] - bx[1]),
        (dy, bx[3] - a[1]),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return false;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
            if t0 > t1 {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn boxes_meet_points_lines_and_polygons() {
        let europe = [-10.0, 35.0, 30.0, 60.0];
        let point = Shape::parse(&json!({"type": "Point", "coordinates": [5.0, 50.0]})).unwrap();
        assert!(point.intersects_box(europe));
        assert!(!point.intersects_box([10.0, 0.0, 20.0, 10.0]));
        let crossing = Shape::parse(
            &json!({"type": "LineString", "coordinates": [[-20.0, 40.0], [40.0, 40.0]]}),
        )
        .unwrap();
        assert!(
            crossing.intersects_box(europe),
            "no vertex inside, the edge crosses"
        );
        let around = Shape::parse(&json!({"type": "Polygon", "coordinates": [
            [[-50.0, 0.0], [50.0, 0.0], [50.0, 80.0], [-50.0, 80.0], [-50.0, 0.0]]
        ]}))
        .unwrap();
        assert!(
            around.intersects_box(europe),
            "the box lies inside the polygon"
        );
        let holed = Shape::parse(&json!({"type": "Polygon", "coordinates": [
            [[-50.0, 0.0], [50.0, 0.0], [50.0, 80.0], [-50.0, 80.0], [-50.0, 0.0]],
            [[-40.0, 10.0], [40.0, 10.0], [40.0, 70.0], [-40.0, 70.0], [-40.0, 10.0]]
        ]}))
        .unwrap();
        assert!(!holed.intersects_box(europe), "the box lies in the hole");
        assert_eq!(holed.bounds(), [-50.0, 0.0, 50.0, 80.0]);
        let far = Shape::parse(
            &json!({"type": "MultiPoint", "coordinates": [[100.0, 0.0], [101.0, 1.0]]}),
        )
        .unwrap();
        assert!(!far.intersects_box(europe));
        for bad in [
            json!({"type": "Point", "coordinates": [1.0]}),
            json!({"type": "Polygon", "coordinates": [[[0.0, 0.0], [1.0, 1.0]]]}),
            json!({"type": "Circle", "coordinates": [0.0, 0.0]}),
            json!({"type": "MultiPoint", "coordinates": []}),
            json!("POINT(0 0)"),
        ] {
            assert!(Shape::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn large_geometries_are_refused_naming_the_limit() {
        let ring = |n: usize| -> Vec<[f64; 2]> {
            (0..n)
                .map(|i| {
                    let a = i as f64 / n as f64 * std::f64::consts::TAU;
                    [a.cos(), a.sin()]
                })
                .chain([[1.0, 0.0]])
                .collect()
        };
        let fits = json!({"type": "Polygon", "coordinates": [ring(MAX_POSITIONS - 1)]});
        assert!(Shape::parse(&fits).is_ok());
        let large = json!({"type": "Polygon", "coordinates": [ring(MAX_POSITIONS)]});
        let err = Shape::parse(&large).unwrap_err().to_string();
        assert!(err.contains("2001 positions"), "{err}");
        assert!(err.contains("at most 2000"), "{err}");
        let spread = json!({"type": "GeometryCollection", "geometries": [
            {"type": "MultiPoint", "coordinates": ring(MAX_POSITIONS / 2)},
            {"type": "LineString", "coordinates": ring(MAX_POSITIONS / 2)},
        ]});
        assert!(
            Shape::parse(&spread).is_err(),
            "positions count across members"
        );
    }

    const KINDS: &[&str] = &[
        "Point",
        "MultiPoint",
        "LineString",
        "MultiLineString",
        "Polygon",
        "MultiPolygon",
        "GeometryCollection",
    ];

    /// GeoJSON-like values: objects with geometry keys, nested arrays of numbers and junk.
    fn geojson_like() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            any::<f64>()
                .prop_map(|n| serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)),
            any::<i64>().prop_map(Value::from),
            proptest::sample::select([KINDS, &["", "é"]].concat()).prop_map(Value::from),
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
                (
                    proptest::sample::select(KINDS),
                    inner.clone(),
                    proptest::collection::vec(inner, 0..3),
                )
                    .prop_map(|(kind, coordinates, geometries)| json!({
                        "type": kind,
                        "coordinates": coordinates,
                        "geometries": geometries,
                    })),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_json_parses_or_is_refused_and_boxes_are_total(value in geojson_like()) {
            match Shape::parse(&value) {
                Ok(shape) => {
                    let b = shape.bounds();
                    proptest::prop_assert!(b[0] <= b[2] && b[1] <= b[3]);
                    proptest::prop_assert!(shape.intersects_box(b), "a shape meets its own bounds");
                }
                Err(e) => {
                    proptest::prop_assert!(e.to_string().starts_with("Invalid 'intersects' geometry"), "{e}");
                }
            }
        }
    }
}
