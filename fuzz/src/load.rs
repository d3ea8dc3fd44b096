//! The load generator's input readers: traces (CSV, CLF, WC98), session
//! models and load schedules.

use std::io::Cursor;
use std::path::Path;

use rand::SeedableRng;
use shortfirst_load::schedule::{parse_file_text, LoadSchedule, MAX_MULTIPLIER, MAX_PHASES, MIN_PHASE_S};
use shortfirst_load::session::SessionModel;
use shortfirst_load::trace::{
    ClfTrace, CsvTrace, Position, TraceError, TraceRecord, Wc98Trace, MAX_LINE_BYTES, WC98_RECORD_BYTES,
};

const FILE: &str = "fuzz-input";

/// Drains a trace reader, checking what every reader promises: it ends (at most
/// one item per line or record, so within `max_items`), positions only grow,
/// and every record has a path starting with `/` and a finite time.
fn drain(items: impl Iterator<Item = Result<TraceRecord, TraceError>>, max_items: usize) -> Vec<TraceRecord> {
    let mut last = 0u64;
    let mut records = Vec::new();
    for (i, item) in items.enumerate() {
        assert!(i < max_items, "reader yielded more than {max_items} items");
        match item {
            Ok(r) => {
                assert!(r.path.starts_with('/'), "path {:?} does not start with /", r.path);
                assert!(r.time_s.is_finite(), "time {}", r.time_s);
                records.push(r);
            }
            Err(e) => {
                let n = match e.position() {
                    Some(Position::Line(n) | Position::Record(n)) => *n,
                    None => panic!("I/O error from an in-memory reader: {e}"),
                };
                assert!(n > last || n == last && n > 0, "position went back: {n} after {last}");
                assert!(e.to_string().starts_with(FILE), "error does not name the file: {e}");
                last = n;
            }
        }
    }
    records
}

fn lines_bound(data: &[u8]) -> usize {
    data.iter().filter(|&&b| b == b'\n').count() + 2
}

pub fn trace_csv(data: &[u8]) {
    let Ok(reader) = CsvTrace::new(Cursor::new(data), Path::new(FILE)) else { return };
    for r in drain(reader, lines_bound(data)) {
        assert!(r.time_s >= 0.0, "negative time {}", r.time_s);
        assert!(r.path.len() <= MAX_LINE_BYTES);
    }
}

pub fn trace_clf(data: &[u8]) {
    for r in drain(ClfTrace::new(Cursor::new(data), Path::new(FILE)), lines_bound(data)) {
        assert!(r.client.is_some());
        assert!(r.path.len() <= MAX_LINE_BYTES);
    }
}

pub fn trace_wc98(data: &[u8]) {
    let records = data.len().div_ceil(WC98_RECORD_BYTES);
    let got = drain(Wc98Trace::new(Cursor::new(data), Path::new(FILE)), records + 1);
    // Every whole record is read, and reads back as what it encodes.
    assert_eq!(got.len(), data.len() / WC98_RECORD_BYTES);
    for (r, raw) in got.iter().zip(data.chunks_exact(WC98_RECORD_BYTES)) {
        let word = |i: usize| u32::from_be_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        assert_eq!(r.time_s, f64::from(word(0)));
        assert_eq!(r.client, Some(word(4)));
        assert_eq!(r.path, format!("/o/{}", word(8)));
        let size = word(12);
        assert_eq!(r.size_bytes, if size == u32::MAX { 0 } else { u64::from(size) });
    }
}

/// A model that loads can be walked: every state a step reaches has a page
/// starting with `/`, and a walk from the start never panics.
pub fn session_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(model) = SessionModel::parse(text, Path::new("/nonexistent/fuzz.toml")) else { return };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(data.len() as u64);
    let mut state = model.start();
    let steps = model.max_requests.unwrap_or(64).min(64);
    for seq in 1..=steps {
        let Some(next) = model.step(state, &mut rng) else { break };
        let path = model.path(next, 7, 1, seq, &mut rng);
        assert!(path.starts_with('/'), "state {} has page {path:?}", model.state_name(next));
        state = next;
    }
}

/// A load schedule, as a `--load-schedule` spec and as a schedule file's text:
/// what parses has valid phases, and its warp is non-decreasing and inverts
/// the integral of the multipliers; what does not gets an error naming the
/// spec (or the file).
pub fn load_schedule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let spec = if text.trim_start().starts_with("file:") {
        // Never read files named by the input.
        Err(())
    } else {
        LoadSchedule::parse(text).map_err(|e| {
            assert!(e.to_string().starts_with("load schedule "), "{e}");
        })
    };
    let file = parse_file_text(text, Path::new(FILE)).map_err(|e| {
        assert!(e.to_string().starts_with("load schedule file fuzz-input"), "{e}");
    });
    let from_file = file.ok().and_then(|phases| LoadSchedule::new(FILE, phases).ok());
    for s in spec.into_iter().chain(from_file) {
        assert!(!s.phases().is_empty() && s.phases().len() <= MAX_PHASES);
        for p in s.phases() {
            assert!(p.duration_s >= MIN_PHASE_S && p.duration_s.is_finite(), "{p:?}");
            assert!(p.multiplier > 0.0 && p.multiplier <= MAX_MULTIPLIER, "{p:?}");
        }
        let mut last = 0.0;
        for i in 0..200 {
            let base = f64::from(i) * s.period_s() * s.mean_multiplier() / 37.0;
            let wall = s.wall_time_s(base);
            assert!(wall >= last, "wall({base}) = {wall} < {last}");
            let back = s.work_at_s(wall);
            assert!((back - base).abs() <= 1e-6 * base.max(1.0), "work_at(wall({base})) = {back}");
            let (k, m) = s.phase_at(wall);
            assert_eq!(s.phases()[k].multiplier, m);
            last = wall;
        }
    }
}
