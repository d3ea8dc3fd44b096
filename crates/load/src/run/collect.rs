//! The collector thread: writes each finished request's row to
//! `requests.csv`, keeps the run's histograms and counters, writes the
//! per-second HDR interval log (`response-times.hlog`) and the progress line.

use super::config::Config;
use super::sys::set_realtime;
use super::worker::Msg;
use super::LoadError;
use crate::record::{PhaseTag, RecordWriter, RequestOutcome};
use crate::schedule::LoadSchedule;
use hdrhistogram::serialization::interval_log::{IntervalLogWriter, IntervalLogWriterBuilder};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How often the collector looks for new rows when the queue is empty.
const COLLECT_POLL: Duration = Duration::from_millis(2);
/// Histogram range: 1 µs to 1 hour, 3 significant digits.
const HIST_MAX_US: u64 = 3_600_000_000;

/// What the collector gathered.
pub(super) struct Collected {
    pub(super) rows: u64,
    pub(super) by_outcome: BTreeMap<RequestOutcome, u64>,
    pub(super) failures: BTreeMap<String, u64>,
    pub(super) not_sent: u64,
    pub(super) retries: u64,
    pub(super) requested_bytes_sent: u64,
    pub(super) bytes_received: u64,
    pub(super) wire_bytes: u64,
    pub(super) first_start_s: Option<f64>,
    pub(super) last_start_s: f64,
    pub(super) last_done_s: f64,
    pub(super) resp_sched: Histogram<u64>,
    pub(super) resp_start: Histogram<u64>,
    pub(super) lateness: Histogram<u64>,
    pub(super) dispatch: Histogram<u64>,
    pub(super) handoff: Histogram<u64>,
    pub(super) send: Histogram<u64>,
    pub(super) resp_sched_sum_us: f64,
    pub(super) resp_start_sum_us: f64,
    /// With a load schedule: rows per phase index (by scheduled time), and
    /// the latest scheduled time.
    pub(super) by_phase: Vec<u64>,
    pub(super) last_scheduled_s: f64,
}

/// An empty histogram over the collector's range.
pub(super) fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("valid histogram bounds")
}

fn us(s: f64) -> u64 {
    ((s * 1e6).round() as u64).clamp(1, HIST_MAX_US)
}

impl Collected {
    fn new(phases: usize) -> Collected {
        Collected {
            rows: 0,
            by_outcome: BTreeMap::new(),
            failures: BTreeMap::new(),
            not_sent: 0,
            retries: 0,
            requested_bytes_sent: 0,
            bytes_received: 0,
            wire_bytes: 0,
            first_start_s: None,
            last_start_s: 0.0,
            last_done_s: 0.0,
            resp_sched: hist(),
            resp_start: hist(),
            lateness: hist(),
            dispatch: hist(),
            handoff: hist(),
            send: hist(),
            resp_sched_sum_us: 0.0,
            resp_start_sum_us: 0.0,
            by_phase: vec![0; phases],
            last_scheduled_s: 0.0,
        }
    }

    /// Counts one row; returns its response time from the scheduled send
    /// (µs) if it has one, for the interval log.
    fn add(&mut self, m: &Msg) -> Option<u64> {
        let r = &m.rec;
        self.rows += 1;
        *self.by_outcome.entry(r.outcome).or_insert(0) += 1;
        if let Some(reason) = m.fail_reason {
            *self.failures.entry(reason.to_string()).or_insert(0) += 1;
        }
        if r.attempts == 0 {
            self.not_sent += 1;
        } else {
            self.retries += u64::from(r.attempts - 1);
            self.requested_bytes_sent += r.size_bytes;
            self.first_start_s = Some(self.first_start_s.map_or(r.start_s, |f| f.min(r.start_s)));
            self.last_start_s = self.last_start_s.max(r.start_s);
        }
        self.bytes_received += r.bytes_received;
        self.wire_bytes += m.wire_bytes;
        if let Some(d) = r.done_s {
            self.last_done_s = self.last_done_s.max(d);
        }
        let mut from_scheduled_us = None;
        if let (Some(a), Some(b)) = (r.response_from_scheduled_s(), r.response_from_start_s()) {
            let (a, b) = (us(a), us(b));
            self.resp_sched.saturating_record(a);
            self.resp_start.saturating_record(b);
            from_scheduled_us = Some(a);
            self.resp_sched_sum_us += a as f64;
            self.resp_start_sum_us += b as f64;
        }
        if let Some(l) = m.lateness_us {
            self.lateness.saturating_record(l.clamp(1, HIST_MAX_US));
        }
        if let Some(t) = m.timing {
            self.dispatch.saturating_record(t.dispatch_us);
            self.handoff.saturating_record(t.handoff_us);
            if let Some(s) = t.send_us {
                self.send.saturating_record(s);
            }
        }
        from_scheduled_us
    }

    /// From the first request's start to the last one's (s).
    pub(super) fn send_span_s(&self) -> f64 {
        self.first_start_s.map(|f| self.last_start_s - f).unwrap_or(0.0)
    }

    /// From the first request's start to the last one's end (s).
    pub(super) fn busy_span_s(&self) -> f64 {
        self.first_start_s.map(|f| self.last_done_s - f).unwrap_or(0.0)
    }

    /// The progress line on stderr (overwritten in place each second).
    fn print_progress(&self, elapsed: Duration, rows_last_second: u64, in_flight: usize) {
        let lp99 = self.lateness.value_at_quantile(0.99) as f64 / 1000.0;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{:7.1}s] done {:>9} ({:>7}/s)  in flight {:>6}  not ok {:>7}  lateness p99 {:6.3} ms ",
            elapsed.as_secs_f64(),
            self.rows,
            rows_last_second,
            in_flight,
            self.rows - self.by_outcome.get(&RequestOutcome::Ok).copied().unwrap_or(0),
            lp99
        );
        let _ = err.flush();
    }
}

/// Starts the collector thread on `rx`; it ends when every sender is gone.
pub(super) fn spawn_collector(
    cfg: &Config,
    rx: mpsc::Receiver<Msg>,
    writer: RecordWriter,
    run_start: Instant,
    in_flight: Arc<AtomicUsize>,
) -> Result<JoinHandle<Result<Collected, LoadError>>, LoadError> {
    let hlog = cfg.out_dir.join("response-times.hlog");
    let progress = cfg.progress && std::io::stderr().is_terminal();
    let realtime = cfg.realtime;
    let schedule = cfg.load_schedule.clone();
    std::thread::Builder::new()
        .name("collector".into())
        .spawn(move || {
            if realtime {
                // The collector inherits SCHED_FIFO from this thread, but
                // must not have it: a sender preempted on the collector's
                // CPU between claiming a channel slot and filling it
                // (the spinning dispatcher is SCHED_OTHER) leaves the
                // collector's try_recv spinning on that slot, and a FIFO
                // thread yields to no SCHED_OTHER one: it spun until RT
                // throttling stopped it, ~950 ms (measured with perf
                // sched: every request of that second ~1 s late).
                let _ = set_realtime(false);
            }
            collect(rx, writer, &hlog, run_start, in_flight, progress, schedule.as_ref())
        })
        .map_err(|source| LoadError::Io { path: "collector thread".into(), source })
}

/// The HDR interval log as the collector writes it.
type HLog<'a, 'b> = IntervalLogWriter<'a, 'b, BufWriter<File>, V2DeflateSerializer>;

/// The collector's loop: rows until every sender is gone, an interval of the
/// HDR log (and the progress line) each second; the log is written to a
/// temporary file and renamed into place at the end. With a load schedule,
/// each row gets the phase in force at its scheduled time.
fn collect(
    rx: mpsc::Receiver<Msg>,
    mut writer: RecordWriter,
    hlog_path: &Path,
    run_start: Instant,
    in_flight: Arc<AtomicUsize>,
    progress: bool,
    schedule: Option<&LoadSchedule>,
) -> Result<Collected, LoadError> {
    let mut c = Collected::new(schedule.map_or(0, |s| s.phases().len()));
    let io = |source| LoadError::Io { path: hlog_path.to_path_buf(), source };
    let mut tmp = hlog_path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).map_err(io)?;
    let mut hlog_out = BufWriter::new(file);
    let mut serializer = V2DeflateSerializer::new();
    let base = SystemTime::now() + run_start.saturating_duration_since(Instant::now());
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment("shortfirst load: response time from scheduled send, microseconds")
        .with_start_time(base)
        .with_base_time(base)
        .begin_log_with(&mut hlog_out, &mut serializer)
        .map_err(io)?;
    let mut seconds = Seconds::new(run_start, progress, in_flight);
    loop {
        // Poll rather than block: a blocked receiver costs the sender a
        // futex wake-up per row; polling every COLLECT_POLL costs nothing per
        // row and the queue absorbs the rows in between.
        match rx.try_recv() {
            Ok(m) => {
                write_row(&mut writer, &mut c, schedule, &m)?;
                if let Some(a) = c.add(&m) {
                    seconds.interval.saturating_record(a);
                }
            }
            Err(mpsc::TryRecvError::Empty) => {
                let to_tick = seconds.next_tick.saturating_duration_since(Instant::now());
                std::thread::sleep(COLLECT_POLL.min(to_tick));
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        }
        if Instant::now() >= seconds.next_tick {
            seconds.tick(&mut log, &c).map_err(io)?;
        }
    }
    seconds.finish(&mut log).map_err(io)?;
    drop(log);
    let f = hlog_out.into_inner().map_err(|e| io(e.into_error()))?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, hlog_path).map_err(io)?;
    if progress {
        eprintln!();
    }
    writer.finish()?;
    Ok(c)
}

/// Writes one row to `requests.csv`; with a load schedule, tagged with (and
/// counted in) the phase in force at its scheduled time.
fn write_row(
    writer: &mut RecordWriter,
    c: &mut Collected,
    schedule: Option<&LoadSchedule>,
    m: &Msg,
) -> Result<(), LoadError> {
    match schedule {
        Some(s) => {
            let (phase, multiplier) = s.phase_at(m.rec.scheduled_s);
            c.by_phase[phase] += 1;
            c.last_scheduled_s = c.last_scheduled_s.max(m.rec.scheduled_s);
            writer.write_in_phase(&m.rec, PhaseTag { phase, multiplier })?;
        }
        None => writer.write(&m.rec)?,
    }
    Ok(())
}

/// The collector's once-a-second duties: the response times of the current
/// second, written to the HDR log as one interval, and the progress line.
struct Seconds {
    run_start: Instant,
    /// Response times from the scheduled send (µs) since `interval_start`.
    interval: Histogram<u64>,
    /// Since `run_start`.
    interval_start: Duration,
    next_tick: Instant,
    /// Rows collected by the previous tick.
    last_rows: u64,
    progress: bool,
    in_flight: Arc<AtomicUsize>,
}

impl Seconds {
    const TICK: Duration = Duration::from_secs(1);

    fn new(run_start: Instant, progress: bool, in_flight: Arc<AtomicUsize>) -> Seconds {
        Seconds {
            run_start,
            interval: hist(),
            interval_start: Duration::ZERO,
            next_tick: run_start + Self::TICK,
            last_rows: 0,
            progress,
            in_flight,
        }
    }

    /// The second ending at `next_tick` is over: writes its interval and the
    /// progress line, and starts the next.
    fn tick(&mut self, log: &mut HLog<'_, '_>, c: &Collected) -> std::io::Result<()> {
        let end = self.next_tick.saturating_duration_since(self.run_start);
        self.write_interval(log, end)?;
        self.interval.reset();
        self.interval_start = end;
        self.next_tick += Self::TICK;
        if self.progress {
            c.print_progress(end, c.rows - self.last_rows, self.in_flight.load(Ordering::Relaxed));
        }
        self.last_rows = c.rows;
        Ok(())
    }

    /// The run is over: writes the part of a second since the last tick, if
    /// it had any response.
    fn finish(&self, log: &mut HLog<'_, '_>) -> std::io::Result<()> {
        let end = Instant::now().saturating_duration_since(self.run_start);
        if self.interval.is_empty() {
            return Ok(());
        }
        self.write_interval(log, end)
    }

    /// Writes the current interval, from `interval_start` to `end`.
    fn write_interval(&self, log: &mut HLog<'_, '_>, end: Duration) -> std::io::Result<()> {
        log.write_histogram(&self.interval, self.interval_start, end.saturating_sub(self.interval_start), None)
            .map_err(|e| std::io::Error::other(format!("{e:?}")))
    }
}
