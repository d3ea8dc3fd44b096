//! No-load cost probe: runs every interaction in turn, one at a time, against
//! the database and reports each one's mean service time next to the
//! Gatekeeper paper's Table 1 (MySQL, 10,000 items, 2004 hardware).
//!
//! Absolute times are not comparable across 20 years of hardware and two
//! databases; the *shape* is: each column is also shown relative to its own
//! Home, and the paper's claim to check is the spread — Best Sellers and
//! Admin Confirm ("Admin Response") orders of magnitude above Home and
//! Product Detail.
//!
//! The probe calls the interactions in-process (no HTTP), with the same
//! random defaults an emulated browser would get, round-robin so that every
//! interaction sees the same cache state. Like the real workload it writes:
//! carts, orders and item updates accumulate in the database.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::interactions::{Interaction, Request, Store};

/// One interaction's measured no-load cost.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    pub code: &'static str,
    pub interaction: &'static str,
    pub samples: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub max_ms: f64,
}

/// A row of `tpcw-costs-gatekeeper-table1.csv`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct PaperRow {
    pub interaction: String,
    pub no_load_ms: f64,
    pub high_load_ms: f64,
    pub frequency_percent: f64,
}

/// Runs `rounds` rounds (after one unrecorded warm-up round) of all 14
/// interactions, stopping early once `budget` has elapsed (at least one
/// recorded round always runs). Any failed interaction aborts the probe:
/// a cost measured over failures would be meaningless.
pub async fn measure(store: &Store, rounds: usize, budget: Duration) -> Result<Vec<Measured>> {
    if rounds == 0 {
        return Err(Error::Config("--rounds must be at least 1".into()));
    }
    let mut samples: BTreeMap<Interaction, Vec<f64>> = BTreeMap::new();
    let started = Instant::now();
    for round in 0..=rounds {
        if round >= 2 && started.elapsed() > budget {
            break;
        }
        for which in Interaction::ALL {
            let req = Request::default();
            let t0 = Instant::now();
            store.handle(which, &req).await.map_err(|e| match e {
                Error::Config(m) => Error::Config(format!("{}: {m}", which.name())),
                other => other,
            })?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if round > 0 {
                samples.entry(which).or_default().push(ms);
            }
        }
    }
    Ok(Interaction::ALL
        .iter()
        .map(|w| {
            let mut v = samples.remove(w).unwrap_or_default();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1);
            let pct = |p: f64| v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
            Measured {
                code: w.code(),
                interaction: w.name(),
                samples: v.len(),
                mean_ms: v.iter().sum::<f64>() / n as f64,
                p50_ms: pct(0.5),
                p90_ms: pct(0.9),
                max_ms: v.last().copied().unwrap_or(f64::NAN),
            }
        })
        .collect())
}

/// The paper's Table 1, vendored from `shared/data/tpcw-costs-gatekeeper-table1.csv`
/// so the probe works without the shared data directory.
pub const PAPER_TABLE1_CSV: &str = include_str!("../data/tpcw-costs-gatekeeper-table1.csv");

/// Reads the paper's Table 1 CSV, naming the file and line on bad input.
pub fn read_paper_table(path: &Path) -> Result<Vec<PaperRow>> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path.display()))?;
    parse_paper_table(&text, &path.display().to_string())
}

/// Parses Table 1 CSV text; `origin` names the source in errors.
pub fn parse_paper_table(text: &str, origin: &str) -> Result<Vec<PaperRow>> {
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for (k, r) in rdr.deserialize::<PaperRow>().enumerate() {
        rows.push(r.map_err(|e| Error::Config(format!("{origin} line {}: {e}", k + 2)))?);
    }
    Ok(rows)
}

/// One line of the comparison.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    pub code: &'static str,
    pub interaction: &'static str,
    pub measured_mean_ms: f64,
    pub measured_p50_ms: f64,
    pub measured_vs_home: f64,
    pub paper_name: Option<&'static str>,
    pub paper_no_load_ms: Option<f64>,
    pub paper_high_load_ms: Option<f64>,
    pub paper_no_load_vs_home: Option<f64>,
    pub frequency_percent: Option<f64>,
}

/// Joins measurements with the paper's rows (by the paper's names).
pub fn compare(measured: &[Measured], paper: &[PaperRow]) -> Vec<Comparison> {
    let home_ours = measured.iter().find(|m| m.code == "HOME").map(|m| m.mean_ms).unwrap_or(f64::NAN);
    let home_paper = paper.iter().find(|p| p.interaction == "Home").map(|p| p.no_load_ms);
    measured
        .iter()
        .map(|m| {
            let which = Interaction::from_code(m.code).unwrap_or(Interaction::Home);
            let paper_name = which.paper_name();
            let row = paper_name.and_then(|n| paper.iter().find(|p| p.interaction == n));
            Comparison {
                code: m.code,
                interaction: m.interaction,
                measured_mean_ms: m.mean_ms,
                measured_p50_ms: m.p50_ms,
                measured_vs_home: m.mean_ms / home_ours,
                paper_name: row.map(|_| paper_name.unwrap_or("")),
                paper_no_load_ms: row.map(|r| r.no_load_ms),
                paper_high_load_ms: row.map(|r| r.high_load_ms),
                paper_no_load_vs_home: row.and_then(|r| home_paper.map(|h| r.no_load_ms / h)),
                frequency_percent: row.map(|r| r.frequency_percent),
            }
        })
        .collect()
}

/// A fixed-width text table of the comparison.
pub fn render(rows: &[Comparison]) -> String {
    let opt = |x: Option<f64>, prec: usize| x.map(|v| format!("{v:.prec$}")).unwrap_or_else(|| "-".into());
    let mut out = format!(
        "{:<4} {:<22} {:>10} {:>10} {:>9}   {:<15} {:>10} {:>10} {:>9} {:>6}\n",
        "code",
        "interaction",
        "mean_ms",
        "p50_ms",
        "x_home",
        "paper (Table 1)",
        "no_load",
        "high_load",
        "x_home",
        "freq%"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<4} {:<22} {:>10.3} {:>10.3} {:>9.1}   {:<15} {:>10} {:>10} {:>9} {:>6}\n",
            r.code,
            r.interaction,
            r.measured_mean_ms,
            r.measured_p50_ms,
            r.measured_vs_home,
            r.paper_name.unwrap_or("-"),
            opt(r.paper_no_load_ms, 2),
            opt(r.paper_high_load_ms, 2),
            opt(r.paper_no_load_vs_home, 1),
            opt(r.frequency_percent, 2),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(code: &'static str, mean: f64) -> Measured {
        Measured { code, interaction: code, samples: 1, mean_ms: mean, p50_ms: mean, p90_ms: mean, max_ms: mean }
    }

    #[test]
    fn comparison_joins_by_paper_names() {
        let paper = vec![
            PaperRow { interaction: "Home".into(), no_load_ms: 2.0, high_load_ms: 3.0, frequency_percent: 16.0 },
            PaperRow {
                interaction: "Admin Response".into(),
                no_load_ms: 2000.0,
                high_load_ms: 5000.0,
                frequency_percent: 0.09,
            },
        ];
        let rows = compare(&[m("HOME", 0.5), m("ADMC", 50.0), m("CREG", 0.1)], &paper);
        assert_eq!(rows[1].paper_name, Some("Admin Response"));
        assert_eq!(rows[1].paper_no_load_vs_home, Some(1000.0));
        assert!((rows[1].measured_vs_home - 100.0).abs() < 1e-9);
        assert_eq!(rows[2].paper_no_load_ms, None);
        let text = render(&rows);
        assert!(text.contains("Admin Response"));
        assert_eq!(text.lines().count(), 4);
    }

    #[test]
    fn the_vendored_paper_table_parses() {
        let rows = parse_paper_table(PAPER_TABLE1_CSV, "vendored").unwrap();
        assert_eq!(rows.len(), 13);
        assert!(rows.iter().any(|r| r.interaction == "Best Sellers" && r.no_load_ms > 1000.0));
        // Every paper row names one of our interactions.
        for r in &rows {
            assert!(
                Interaction::ALL.iter().any(|i| i.paper_name() == Some(r.interaction.as_str())),
                "{}",
                r.interaction
            );
        }
    }

    #[test]
    fn bad_paper_rows_name_their_line() {
        let err = parse_paper_table("interaction,no_load_ms,high_load_ms,frequency_percent\nHome,x,1,1\n", "t.csv")
            .unwrap_err();
        assert!(err.to_string().contains("t.csv line 2"), "{err}");
    }
}
