//! The text the CLI prints: sizes, the decision table, report tables and pin lines, in the
//! reference tool's layout so operators can switch between the two.

use crate::array::Array;
use crate::model::{Blob, Manifest};
use crate::pins::PinRecord;
use crate::report::Report;

/// A byte count in binary units with one decimal.
///
/// ```
/// assert_eq!(svc_manifests::text::human(1536.0), "1.5 KiB");
/// assert_eq!(svc_manifests::text::human(0.0), "0.0 B");
/// ```
#[must_use]
pub fn human(bytes: f64) -> String {
    let mut n = bytes;
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"] {
        if n < 1024.0 {
            return format!("{n:.1} {unit}");
        }
        n /= 1024.0;
    }
    format!("{n:.1} PiB")
}

/// Parses a size such as `100GiB`, `1.5G`, `2M`, `512`: binary units (`GB` means `GiB`), and
/// the number may have a fraction.
///
/// ```
/// use svc_manifests::text::parse_size;
/// assert_eq!(parse_size("1.5G"), Ok(1_610_612_736));
/// assert_eq!(parse_size(" 100gib "), Ok(100 << 30));
/// assert_eq!(parse_size("512"), Ok(512));
/// assert!(parse_size("lots").is_err());
/// ```
///
/// # Errors
/// The text is not a non-negative number with an optional unit.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let upper = text.trim().to_uppercase();
    let clean = upper.strip_suffix('B').unwrap_or(&upper);
    let clean = clean.strip_suffix('I').unwrap_or(clean);
    let (number, unit) = match clean.chars().last() {
        Some('K') => (&clean[..clean.len() - 1], 1u64 << 10),
        Some('M') => (&clean[..clean.len() - 1], 1 << 20),
        Some('G') => (&clean[..clean.len() - 1], 1 << 30),
        Some('T') => (&clean[..clean.len() - 1], 1 << 40),
        _ => (clean, 1),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (like 100GiB, 1.5G, 512)"))?;
    let bytes = value * unit as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text:?} is not a size (like 100GiB, 1.5G, 512)"));
    }
    Ok(bytes as u64)
}

/// The per-array decision table `partition` prints: objects, stored size, average object
/// and which blob (or `pinned hot`, or `UNMANAGED`) each array went to.
#[must_use]
pub fn explain(arrays: &[Array], manifest: &Manifest) -> String {
    let find = |prefix: &str| -> Option<&Blob> {
        manifest
            .blobs
            .iter()
            .rev()
            .find(|b| b.prefixes.iter().any(|p| p == prefix))
    };
    let mut lines = vec![
        format!(
            "{:14} {:>9} {:>11} {:>11}  blob",
            "array", "objects", "stored", "object"
        ),
        "-".repeat(80),
    ];
    let mut sorted: Vec<&Array> = arrays.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    for array in sorted {
        let blob = find(&array.chunk_prefix()).or_else(|| find(""));
        let avg = array.avg_object_bytes();
        let decision = if array.is_coordinate || array.total_bytes() < manifest.policy.t_hot_bytes {
            "pinned hot".to_owned()
        } else {
            match blob {
                None => "UNMANAGED".to_owned(),
                Some(Blob {
                    id,
                    bucket: Some(bucket),
                    ..
                }) => {
                    let rows = array.object_grid().first().copied().unwrap_or(0);
                    let n = rows.div_ceil(bucket.width.max(1));
                    format!(
                        "{id}_0..{}  (width={}, ~{}/blob)",
                        n as i128 - 1,
                        bucket.width,
                        human(bucket.width as f64 * avg as f64)
                    )
                }
                Some(blob) => format!("{}_0", blob.id),
            }
        };
        let path = if array.path.is_empty() {
            "."
        } else {
            &array.path
        };
        lines.push(format!(
            "{path:14} {:>9} {:>11} {:>11}  {decision}",
            array.nobjects(),
            human(array.total_bytes() as f64),
            human(avg as f64)
        ));
    }
    lines.join("\n")
}

/// The report table, worst (most unmanaged) first, with notes on unmanaged shares over 1 %
/// and on expired pins; `nothing to report` without reports. The expired-pin note names
/// `svcd manifest pin show --expired` where the reference tool names its own command.
#[must_use]
pub fn render_reports(reports: &[Report]) -> String {
    if reports.is_empty() {
        return "nothing to report".to_owned();
    }
    let width = reports
        .iter()
        .map(|r| r.scope.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines = vec![
        format!(
            "{:<width$}  {:>10}  {:>11}  {:>9}  {:>9}  {:>10}  {:>7}",
            "scope", "total", "archivable", "hot", "pinned", "unmanaged", "blobs"
        ),
        "-".repeat(width + 68),
    ];
    let mut sorted: Vec<&Report> = reports.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.unmanaged_bytes));
    for r in sorted {
        lines.push(format!(
            "{:<width$}  {:>10}  {:>11}  {:>9}  {:>9}  {:>10}  {:>7}",
            r.scope,
            human(r.total_bytes() as f64),
            human(r.archivable_bytes as f64),
            human(r.hot_bytes as f64),
            human(r.pinned_bytes as f64),
            human(r.unmanaged_bytes as f64),
            thousands(r.blobs.len() as u64)
        ));
    }
    let mut notes = Vec::new();
    for r in reports {
        let total = r.total_bytes();
        if total > 0 && r.unmanaged_bytes as f64 / total as f64 > 0.01 {
            let share = 100.0 * r.unmanaged_bytes as f64 / total as f64;
            notes.push(format!(
                "{}: {share:.0}% unmanaged. Something exists that no manifest claims -- an \
                 unpartitioned store, a variable added since the last run, or a layout the \
                 partitioner did not recognise. Run scan.",
                r.scope
            ));
        }
    }
    let expired: u64 = reports.iter().map(|r| r.expired_pins).sum();
    if expired > 0 {
        notes.push(format!(
            "{expired} pin(s) past their review date. Run: svcd manifest pin show --expired"
        ));
    }
    let mut out = lines.join("\n");
    if !notes.is_empty() {
        out.push_str("\n\n");
        out.push_str(&notes.join("\n"));
    }
    out
}

/// The `pin show` listing: one line per pin (location, who, state, reason) and a footer
/// counting expired or open-ended pins; `no pins` / `no expired pins` when empty.
#[must_use]
pub fn render_pins(records: &[PinRecord], expired_only: bool, now: &str) -> String {
    if records.is_empty() {
        return if expired_only {
            "no expired pins"
        } else {
            "no pins"
        }
        .to_owned();
    }
    let width = records
        .iter()
        .map(|r| r.location().chars().count())
        .max()
        .unwrap_or(0);
    let mut lines = Vec::new();
    let mut stale = 0;
    for record in records {
        let pin = &record.pin;
        let day = |until: &str| until.chars().take(10).collect::<String>();
        let state = match &pin.until {
            Some(until) if pin.is_expired(now) => format!("EXPIRED {}", day(until)),
            None => "no expiry".to_owned(),
            Some(until) => format!("until {}", day(until)),
        };
        if pin.until.is_none() || pin.is_expired(now) {
            stale += 1;
        }
        lines.push(format!(
            "{:<width$}  {:<10} {state:<20} {}",
            record.location(),
            pin.by,
            pin.reason
        ));
    }
    if stale > 0 {
        lines.push(format!(
            "\n{stale} pin(s) expired or open-ended -- these are how a hot pool fills"
        ));
    }
    lines.join("\n")
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_matches_the_reference() {
        assert_eq!(human(1023.0), "1023.0 B");
        assert_eq!(human(1024.0), "1.0 KiB");
        assert_eq!(human(5.0 * 1024.0 * 1024.0 * 1024.0), "5.0 GiB");
        assert_eq!(human(2f64.powi(60)), "1024.0 PiB");
    }

    #[test]
    fn thousands_separator() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn render_handles_nothing_and_empty_scopes() {
        assert_eq!(render_reports(&[]), "nothing to report");
        let empty = Report {
            scope: ".".into(),
            ..Report::default()
        };
        let text = render_reports(&[empty]);
        assert!(!text.contains("unmanaged."), "{text}");
    }

    #[test]
    fn render_puts_the_worst_first_and_warns() {
        let a = Report {
            scope: "a".into(),
            archivable_bytes: 100,
            ..Report::default()
        };
        let b = Report {
            scope: "bb".into(),
            unmanaged_bytes: 50,
            archivable_bytes: 50,
            expired_pins: 1,
            ..Report::default()
        };
        let text = render_reports(&[a, b]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("bb "), "{text}");
        assert!(text.contains("bb: 50% unmanaged."), "{text}");
        assert!(text.contains("1 pin(s) past their review date"), "{text}");
    }
}
