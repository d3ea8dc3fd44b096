//! Load schedules (`shortfirst load --load-schedule`): piecewise-constant
//! multipliers of the replay rate over the run's wall time, repeated until the
//! trace or `--duration` ends, and the time warp that turns them into send
//! times. Pure: no clock, no I/O except reading a schedule file in [`LoadSchedule::parse`].
//!
//! # The time warp
//!
//! Without a schedule, a request whose trace time is `t` is due
//! `b = (t − t0) / speed` after the run's start (`speed` from
//! `--load`/`--rate`/`--speed`). With a schedule whose multiplier at wall time
//! `u` is `m(u)`, the replay clock runs `m(u)` times as fast as the plain
//! replay, so the request is due at the wall time `w` with
//! `∫₀ʷ m(u) du = b`: each inter-arrival gap of the trace is divided by the
//! multiplier in force while it elapses. This is the overload paper's method
//! ("to achieve a load x times higher, divide all interarrival times by x",
//! §2.3) applied phase by phase. The trace's order and request mix are kept;
//! only the spacing changes. Phases are wall-clock durations, so `25s@1.2`
//! means 25 seconds of the run at 1.2 times the base rate, whatever stretch of
//! the trace that consumes (30 base-rate seconds of it).
//!
//! The warp is a fixed, non-decreasing function of `b` alone, so a request's
//! scheduled time still never depends on earlier responses (no coordinated
//! omission), lateness is still `start − scheduled`, and the generator's
//! lateness rule applies unchanged. [`LoadSchedule::wall_time_s`] is
//! non-decreasing in floating point too (clamped at phase and period ends),
//! not just in exact arithmetic, so the dispatcher never sees time run
//! backwards.
//!
//! # Spec grammar
//!
//! ```text
//! SPEC  = PHASE {"," PHASE}   phases in order, repeated: 25s@0.2,25s@1.2
//!       | "const@" MULT       persistent load: MULT for the whole run
//!       | "file:" PATH        one "DURATION MULTIPLIER" per line; `#` starts a comment
//!       | "w1" … "w10"        the overload paper's workloads (Table 1; see [`PRESETS`])
//! PHASE = DURATION "@" MULT
//! ```
//!
//! DURATION is spelled as every duration of the command line (`25s`, `500ms`,
//! `1m30s`, `13.3`; a plain number is seconds) and must be at least
//! [`MIN_PHASE_S`]; MULT is a positive decimal number of at most
//! [`MAX_MULTIPLIER`]. `const@M` is
//! one phase of 1 s at M, repeated: the same warp as any other length.
//!
//! Limits: at most [`MAX_PHASES`] phases (more is an error naming the limit,
//! and in a file the first line beyond it); a schedule file of at most
//! [`MAX_FILE_BYTES`] (larger: an error, nothing is read past the limit).

use shortfirst_core::units::{self, BareUnit};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most phases in one schedule; beyond it, parsing fails with an error naming
/// the limit (and the line, in a file). Lookups are a binary search over the
/// phases, so the limit is about typos (a runaway generated file), not cost.
pub const MAX_PHASES: usize = 10_000;
/// Longest schedule file read (1 MiB; 10,000 lines of `DURATION MULT` plus
/// comments fit many times over). A larger file is refused.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Shortest phase: 1 ms, below the dispatcher's timing resolution (its
/// batch window is up to 2 ms) a phase could not be told from its neighbours.
pub const MIN_PHASE_S: f64 = 1e-3;
/// Largest multiplier: a million times the base rate. Beyond it a value is a
/// typo (a missing decimal point), and the bound keeps every product of a
/// duration and a multiplier far inside `f64`.
pub const MAX_MULTIPLIER: f64 = 1e6;
/// The length of the one phase of `const@M`.
const CONST_PHASE_S: f64 = 1.0;

/// One phase: `duration_s` of wall time at `multiplier` × the base rate.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Phase {
    pub duration_s: f64,
    pub multiplier: f64,
}

/// A workload of the overload paper's Table 1 (B. Schroeder and M.
/// Harchol-Balter, "Web servers under overload: How scheduling can help",
/// ACM TOIT 6(1), 2006): a low-load phase, then an overload phase, repeated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    /// "alternating" (equal low and high phases) or "intermittent" (short
    /// evenly spaced spikes).
    pub kind: &'static str,
    pub low_s: f64,
    pub high_s: f64,
    /// ρ during the low and the overload phase.
    pub low_load: f64,
    pub high_load: f64,
    /// The table's average load (the time-weighted mean of the two).
    pub mean_load: f64,
}

/// Table 1 of Schroeder & Harchol-Balter (2006), "Definition of trace-based
/// workloads", row by row: duration of low load and of overload (seconds),
/// average low load, average overload, average load. The paper's loads are
/// absolute (ρ = requested bits/s ÷ uplink), so the presets' multipliers are
/// the table's ρ: run them on a base rate of ρ = 1 (`--load 1 --uplink RATE`)
/// to reproduce the paper. Each period starts with the low-load phase.
///
/// | name | type         | low (s) | overload (s) | low ρ | overload ρ | mean ρ |
/// |------|--------------|--------:|-------------:|------:|-----------:|-------:|
/// | w1   | alternating  | 25      | 25           | 0.2   | 1.2        | 0.7    |
/// | w2   | alternating  | 10      | 10           | 0.2   | 1.2        | 0.7    |
/// | w3   | alternating  | 50      | 50           | 0.2   | 1.6        | 0.9    |
/// | w4   | alternating  | 25      | 25           | 0.4   | 1.4        | 0.9    |
/// | w5   | alternating  | 10      | 10           | 0.4   | 1.4        | 0.9    |
/// | w6   | alternating  | 40      | 40           | 0.1   | 1.7        | 0.9    |
/// | w7   | intermittent | 63      | 6            | 0.4   | 5          | 0.8    |
/// | w8   | intermittent | 63      | 10           | 0.45  | 3          | 0.8    |
/// | w9   | intermittent | 20      | 3            | 0.735 | 2          | 0.9    |
/// | w10  | intermittent | 13.3    | 2            | 0.735 | 2          | 0.9    |
pub const PRESETS: [Preset; 10] = [
    preset("w1", "alternating", 25.0, 25.0, 0.2, 1.2, 0.7),
    preset("w2", "alternating", 10.0, 10.0, 0.2, 1.2, 0.7),
    preset("w3", "alternating", 50.0, 50.0, 0.2, 1.6, 0.9),
    preset("w4", "alternating", 25.0, 25.0, 0.4, 1.4, 0.9),
    preset("w5", "alternating", 10.0, 10.0, 0.4, 1.4, 0.9),
    preset("w6", "alternating", 40.0, 40.0, 0.1, 1.7, 0.9),
    preset("w7", "intermittent", 63.0, 6.0, 0.4, 5.0, 0.8),
    preset("w8", "intermittent", 63.0, 10.0, 0.45, 3.0, 0.8),
    preset("w9", "intermittent", 20.0, 3.0, 0.735, 2.0, 0.9),
    preset("w10", "intermittent", 13.3, 2.0, 0.735, 2.0, 0.9),
];

const fn preset(
    name: &'static str,
    kind: &'static str,
    low_s: f64,
    high_s: f64,
    low_load: f64,
    high_load: f64,
    mean_load: f64,
) -> Preset {
    Preset { name, kind, low_s, high_s, low_load, high_load, mean_load }
}

/// A schedule could not be parsed; each names the spec (or file and line)
/// and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("load schedule {spec:?}: {message}")]
    Spec { spec: String, message: String },
    #[error("load schedule file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("load schedule file {}: line {line}: {message}", path.display())]
    Line { path: PathBuf, line: usize, message: String },
}

/// A parsed schedule and its warp. Cheap to query: every lookup is a binary
/// search over at most [`MAX_PHASES`] phases.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSchedule {
    spec: String,
    phases: Vec<Phase>,
    /// Wall time at which phase k starts within a period; one more entry,
    /// the period, at the end (each the previous plus the phase's duration,
    /// so `starts_s[k] + duration_s[k] == starts_s[k + 1]` exactly).
    starts_s: Vec<f64>,
    /// Base-rate replay time consumed by the start of phase k within a
    /// period (∫ m over the phases before k); one more entry, a period's.
    work_s: Vec<f64>,
}

impl LoadSchedule {
    /// Parses a spec (see the module doc); `file:PATH` reads the file.
    pub fn parse(spec: &str) -> Result<LoadSchedule, ScheduleError> {
        let spec = spec.trim();
        if let Some(path) = spec.strip_prefix("file:") {
            let path = Path::new(path);
            let text = read_limited(path)?;
            let phases = parse_file_text(&text, path)?;
            return LoadSchedule::new(spec, phases)
                .map_err(|message| ScheduleError::File { path: path.to_path_buf(), message });
        }
        let err = |message: String| ScheduleError::Spec { spec: spec.to_string(), message };
        if spec.is_empty() {
            return Err(
                err("empty: give phases DURATION@MULT[,...], const@MULT, file:PATH or a preset w1..w10".into()),
            );
        }
        if let Some(p) = PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(spec)) {
            return Ok(LoadSchedule::from_preset(p));
        }
        if let Some(m) = spec.strip_prefix("const@") {
            let m = parse_multiplier(m).map_err(err)?;
            return LoadSchedule::new(spec, vec![Phase { duration_s: CONST_PHASE_S, multiplier: m }]).map_err(err);
        }
        if !spec.contains('@') {
            let known = PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
            return Err(err(format!(
                "not a preset ({known}), const@MULT, file:PATH or a list of DURATION@MULT phases"
            )));
        }
        let mut phases = Vec::new();
        for (i, item) in spec.split(',').enumerate() {
            if i >= MAX_PHASES {
                return Err(err(format!("more than {MAX_PHASES} phases")));
            }
            let at = |m: String| err(format!("phase {} `{}`: {m}", i + 1, item.trim()));
            let (d, m) = item.split_once('@').ok_or_else(|| at("expected DURATION@MULT, e.g. 25s@1.2".into()))?;
            phases.push(Phase {
                duration_s: parse_phase_duration(d).map_err(at)?,
                multiplier: parse_multiplier(m).map_err(at)?,
            });
        }
        LoadSchedule::new(spec, phases).map_err(err)
    }

    /// The schedule of a Table 1 workload: low load, then overload.
    pub fn from_preset(p: &Preset) -> LoadSchedule {
        let phases = vec![
            Phase { duration_s: p.low_s, multiplier: p.low_load },
            Phase { duration_s: p.high_s, multiplier: p.high_load },
        ];
        LoadSchedule::new(p.name, phases).expect("Table 1 rows are valid schedules")
    }

    /// A schedule of checked phases; `spec` is how it was written (for the
    /// summary). Fails on an empty list, more than [`MAX_PHASES`] phases, a
    /// phase shorter than [`MIN_PHASE_S`], a multiplier that is not positive
    /// or above [`MAX_MULTIPLIER`] (each message names the phase), or a
    /// period longer than the longest duration (100 days).
    pub fn new(spec: &str, phases: Vec<Phase>) -> Result<LoadSchedule, String> {
        if phases.is_empty() {
            return Err("no phases".into());
        }
        if phases.len() > MAX_PHASES {
            return Err(format!("{} phases, more than the limit of {MAX_PHASES}", phases.len()));
        }
        let mut starts_s = Vec::with_capacity(phases.len() + 1);
        let mut work_s = Vec::with_capacity(phases.len() + 1);
        let (mut t, mut w) = (0.0, 0.0);
        for (i, p) in phases.iter().enumerate() {
            check_duration(p.duration_s).map_err(|m| format!("phase {}: {m}", i + 1))?;
            check_multiplier(p.multiplier).map_err(|m| format!("phase {}: {m}", i + 1))?;
            starts_s.push(t);
            work_s.push(w);
            t += p.duration_s;
            w += p.duration_s * p.multiplier;
        }
        starts_s.push(t);
        work_s.push(w);
        if t > units::MAX_DURATION_S {
            return Err(format!("a period of {t} s is longer than {} s", units::MAX_DURATION_S));
        }
        Ok(LoadSchedule { spec: spec.to_string(), phases, starts_s, work_s })
    }

    /// How the schedule was written (`w1`, `const@1.4`, `file:PATH`, the phase list).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// Wall time of one pass through the phases.
    pub fn period_s(&self) -> f64 {
        self.starts_s[self.phases.len()]
    }

    /// Base-rate replay time one period consumes (period × mean multiplier).
    fn work_per_period_s(&self) -> f64 {
        self.work_s[self.phases.len()]
    }

    /// Time-weighted mean multiplier: the mean rate over whole periods is
    /// this × the base rate.
    pub fn mean_multiplier(&self) -> f64 {
        self.work_per_period_s() / self.period_s()
    }

    /// The phase in force at `wall_s` after the run's start: its index and
    /// multiplier (a boundary belongs to the phase it starts; times before
    /// the start to the first phase).
    pub fn phase_at(&self, wall_s: f64) -> (usize, f64) {
        let period = self.period_s();
        let wall_s = wall_s.max(0.0);
        let rem = wall_s - (wall_s / period).floor() * period;
        // The last start ≤ rem (rem may round to the period itself: wrap to phase 0).
        let k = self.starts_s[..self.phases.len()].partition_point(|&s| s <= rem).saturating_sub(1);
        let k = if rem >= period { 0 } else { k };
        (k, self.phases[k].multiplier)
    }

    /// Base-rate replay time elapsed at `wall_s` (∫₀ʷ m): the inverse of
    /// [`wall_time_s`](Self::wall_time_s).
    pub fn work_at_s(&self, wall_s: f64) -> f64 {
        let wall_s = wall_s.max(0.0);
        let n = (wall_s / self.period_s()).floor();
        let rem = (wall_s - n * self.period_s()).clamp(0.0, self.period_s());
        let k = self.starts_s[..self.phases.len()].partition_point(|&s| s <= rem).saturating_sub(1);
        n * self.work_per_period_s() + self.work_s[k] + (rem - self.starts_s[k]) * self.phases[k].multiplier
    }

    /// The warp: the wall time (seconds after the run's start) at which a
    /// request due `base_s` after the start without a schedule is sent, i.e.
    /// the `w` with `∫₀ʷ m = base_s`. Non-decreasing in `base_s`, also in
    /// floating point: each part is clamped to its phase and period, so a
    /// rounding error never moves a request into the next phase early or
    /// before its predecessor.
    pub fn wall_time_s(&self, base_s: f64) -> f64 {
        let base_s = base_s.max(0.0);
        let (period, per_work) = (self.period_s(), self.work_per_period_s());
        let n = (base_s / per_work).floor();
        let r = (base_s - n * per_work).clamp(0.0, per_work);
        // The phase whose work interval holds r: the last k with work_s[k] ≤ r.
        let k = self.work_s[..self.phases.len()].partition_point(|&w| w <= r).saturating_sub(1);
        let p = self.phases[k];
        let within = ((r - self.work_s[k]) / p.multiplier).clamp(0.0, p.duration_s);
        // starts_s[k] + within ≤ starts_s[k + 1] ≤ period (float addition is
        // monotone), and the next period starts at exactly (n + 1) × period.
        (n * period + (self.starts_s[k] + within)).min((n + 1.0) * period)
    }

    /// Wall time spent in each phase (by index) during `[0, span_s]`.
    pub fn time_in_phases_s(&self, span_s: f64) -> Vec<f64> {
        let span_s = span_s.max(0.0);
        let n = (span_s / self.period_s()).floor();
        let rem = (span_s - n * self.period_s()).clamp(0.0, self.period_s());
        self.phases
            .iter()
            .zip(&self.starts_s)
            .map(|(p, &s)| n * p.duration_s + (rem - s).clamp(0.0, p.duration_s))
            .collect()
    }
}

fn check_duration(d: f64) -> Result<(), String> {
    if d.is_finite() && d >= MIN_PHASE_S {
        Ok(())
    } else if d > 0.0 {
        Err(format!("duration {d} s is shorter than the shortest phase, {} ms", MIN_PHASE_S * 1e3))
    } else {
        Err(format!("duration must be above 0 (at least {} ms), got {d} s", MIN_PHASE_S * 1e3))
    }
}

fn check_multiplier(m: f64) -> Result<(), String> {
    if !(m.is_finite() && m > 0.0) {
        Err(format!("multiplier must be a positive finite number, got {m}"))
    } else if m > MAX_MULTIPLIER {
        Err(format!("multiplier {m} is above the limit of {MAX_MULTIPLIER}"))
    } else {
        Ok(())
    }
}

/// A phase's duration: the command line's duration syntax, at least [`MIN_PHASE_S`].
fn parse_phase_duration(text: &str) -> Result<f64, String> {
    if text.trim().starts_with('-') {
        return Err(format!("duration `{}`: must be above 0", text.trim()));
    }
    let d = units::parse_duration_s(text.trim(), BareUnit::Seconds).map_err(|e| e.to_string())?;
    check_duration(d)?;
    Ok(d)
}

/// A multiplier: a decimal number (a sign is allowed so that `-1` gets the
/// message about being positive, not about syntax), positive and finite.
fn parse_multiplier(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let plain = !t.is_empty()
        && t.trim_start_matches(['-', '+']).chars().all(|c| c.is_ascii_digit() || c == '.')
        && t.chars().any(|c| c.is_ascii_digit());
    let m: f64 = match t.parse() {
        Ok(m) if plain => m,
        _ => return Err(format!("multiplier `{t}`: expected a decimal number such as 0.2 or 1.4")),
    };
    check_multiplier(m)?;
    Ok(m)
}

/// The phases of a schedule file: one `DURATION MULTIPLIER` per line
/// (whitespace between, or `DURATION@MULTIPLIER`), `#` to the end of a line
/// is a comment, blank lines are skipped. Errors name the file and line.
pub fn parse_file_text(text: &str, path: &Path) -> Result<Vec<Phase>, ScheduleError> {
    let mut phases = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let bad = |message: String| ScheduleError::Line { path: path.to_path_buf(), line, message };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        if phases.len() == MAX_PHASES {
            return Err(bad(format!("more than {MAX_PHASES} phases")));
        }
        let fields: Vec<&str> =
            if content.contains('@') { content.splitn(2, '@').collect() } else { content.split_whitespace().collect() };
        let [d, m] = fields[..] else {
            return Err(bad(format!("expected `DURATION MULTIPLIER` (e.g. `25s 1.2`), got `{content}`")));
        };
        phases.push(Phase {
            duration_s: parse_phase_duration(d).map_err(bad)?,
            multiplier: parse_multiplier(m).map_err(bad)?,
        });
    }
    if phases.is_empty() {
        return Err(ScheduleError::File {
            path: path.to_path_buf(),
            message: "no phases (only comments or blank lines)".into(),
        });
    }
    Ok(phases)
}

/// Reads a schedule file of at most [`MAX_FILE_BYTES`].
fn read_limited(path: &Path) -> Result<String, ScheduleError> {
    let err = |message: String| ScheduleError::File { path: path.to_path_buf(), message };
    let f = std::fs::File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(|e| err(format!("cannot read: {e}")))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(text)
}

/// The schedule in `summary.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScheduleSummary {
    pub spec: String,
    pub period_s: f64,
    pub mean_multiplier: f64,
    pub phases: Vec<PhaseSummary>,
}

/// One phase in `summary.json`: what was asked, and what the run scheduled in
/// it (requests whose scheduled time fell in the phase, over every pass).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseSummary {
    pub duration_s: f64,
    pub multiplier: f64,
    /// Requests (rows) whose scheduled time fell in this phase.
    pub requests: u64,
    /// Wall time the run spent in this phase up to its last scheduled request.
    pub time_s: f64,
    /// `requests / time_s`, when time was spent in it.
    pub scheduled_req_per_s: Option<f64>,
}

impl LoadSchedule {
    /// The summary of a run that scheduled `requests_by_phase[k]` requests in
    /// phase k, its last at `last_scheduled_s`.
    pub fn summary(&self, requests_by_phase: &[u64], last_scheduled_s: f64) -> ScheduleSummary {
        let time = self.time_in_phases_s(last_scheduled_s);
        let phases = self
            .phases
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let requests = requests_by_phase.get(k).copied().unwrap_or(0);
                PhaseSummary {
                    duration_s: p.duration_s,
                    multiplier: p.multiplier,
                    requests,
                    time_s: time[k],
                    scheduled_req_per_s: (time[k] > 0.0).then(|| requests as f64 / time[k]),
                }
            })
            .collect();
        ScheduleSummary {
            spec: self.spec.clone(),
            period_s: self.period_s(),
            mean_multiplier: self.mean_multiplier(),
            phases,
        }
    }
}

#[cfg(test)]
mod tests;
