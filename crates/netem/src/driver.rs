//! The I/O driver: one thread, one TUN, one `ppoll`. Reads packets, hands them
//! to the [`Emulator`], writes them back when due, and writes the counters.
//!
//! Loop: write every due packet; `ppoll` on the TUN and a signalfd with the
//! time to the next release as a nanosecond timeout (timer slack 1 µs); read
//! up to [`READ_BUDGET`] packets; repeat. Lateness (write time minus release
//! time) goes into each line's histogram, so a busy machine shows up in the
//! counters instead of silently stretching the RTT.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Config;
use crate::emulator::{Emulator, Report, Verdict};
use crate::sys::{self, Signal, Signals};

/// Packets read per wakeup before due packets are written again, so a flood
/// in one direction cannot starve releases.
pub const READ_BUDGET: usize = 256;
/// Largest packet read from the TUN (its MTU is at most this).
pub const MAX_PACKET_BYTES: usize = 65_535;
/// Spare packet buffers kept for reuse; beyond this they are freed.
pub const POOL_MAX: usize = 16_384;
/// Timer slack asked of the kernel, ns.
pub const TIMER_SLACK_NS: u64 = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("TUN device {dev:?}: {what}: {source}")]
    Tun { dev: String, what: &'static str, source: io::Error },
    #[error("{what}: {source}")]
    Sys { what: &'static str, source: io::Error },
    #[error("writing counters to {path}: {source}")]
    Stats { path: PathBuf, source: io::Error },
}

pub struct Options {
    /// Where the counters go (JSON, replaced atomically): at exit, on SIGUSR1,
    /// and every `stats_interval_ns` if set.
    pub stats_path: Option<PathBuf>,
    pub stats_interval_ns: Option<u64>,
    /// Stop by itself after this long (tests, benchmarks); None: until a signal.
    pub duration_ns: Option<u64>,
    /// Run under SCHED_FIFO at this priority (needs root or CAP_SYS_NICE).
    pub realtime_priority: Option<i32>,
}

/// The counters file.
#[derive(Serialize)]
struct StatsFile<'a> {
    tun: &'a str,
    config: String,
    seed: u64,
    jitter_mode: crate::line::JitterMode,
    txqueuelen: u32,
    /// SCHED_FIFO priority, if the emulator ran under it.
    realtime_priority: Option<i32>,
    /// False while running (SIGUSR1, periodic), true for the exit snapshot.
    complete: bool,
    elapsed_s: f64,
    cpu_user_s: f64,
    cpu_system_s: f64,
    /// Packets read from the TUN (all lines, unmatched and non-IPv4).
    packets_in: u64,
    /// Packets written back to the TUN.
    packets_out: u64,
    read_errors: u64,
    /// Unmatched packets whose immediate write failed (dropped).
    forward_write_failed: u64,
    /// (user + system CPU) / packets_in, microseconds.
    cpu_per_packet_us: f64,
    #[serde(flatten)]
    report: Report,
}

struct Driver {
    tun: OwnedFd,
    signals: Signals,
    emu: Emulator<Vec<u8>>,
    pool: Vec<Vec<u8>>,
    scratch: Vec<u8>,
    packets_in: u64,
    packets_out: u64,
    read_errors: u64,
    forward_write_failed: u64,
    started_ns: u64,
    cpu_at_start: (f64, f64),
}

/// Runs the emulator until a stop signal or `duration_ns`, then writes the
/// final counters. Prints `ready <dev>` on stdout once the TUN is up.
pub fn run(config: &Config, opts: &Options) -> Result<Report, DriverError> {
    let tun_err = |what| move |source| DriverError::Tun { dev: config.tun.clone(), what, source };
    let signals = Signals::new().map_err(|source| DriverError::Sys { what: "signalfd", source })?;
    let tun = sys::open_tun(&config.tun).map_err(tun_err("open /dev/net/tun + TUNSETIFF"))?;
    sys::set_txqueuelen_and_up(&config.tun, config.txqueuelen).map_err(tun_err("set txqueuelen and up"))?;
    if let Some(priority) = opts.realtime_priority {
        sys::set_sched_fifo(priority).map_err(|source| DriverError::Sys { what: "SCHED_FIFO", source })?;
    }
    sys::set_timer_slack_ns(TIMER_SLACK_NS).map_err(|source| DriverError::Sys { what: "PR_SET_TIMERSLACK", source })?;
    let mut d = Driver {
        tun,
        signals,
        emu: Emulator::new(config),
        pool: Vec::new(),
        scratch: vec![0; MAX_PACKET_BYTES],
        packets_in: 0,
        packets_out: 0,
        read_errors: 0,
        forward_write_failed: 0,
        started_ns: sys::monotonic_ns(),
        cpu_at_start: sys::cpu_seconds(),
    };
    println!("ready {}", config.tun);
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let deadline = opts.duration_ns.map(|ns| d.started_ns + ns);
    let mut next_dump = opts.stats_interval_ns.map(|ns| d.started_ns + ns);
    loop {
        let now = d.release_due();
        if deadline.is_some_and(|t| now >= t) {
            break;
        }
        if let (Some(t), Some(every)) = (next_dump, opts.stats_interval_ns) {
            if now >= t {
                d.dump(config, opts, false)?;
                next_dump = Some(now + every);
            }
        }
        let wake = [d.emu.next_release_ns(), deadline, next_dump].into_iter().flatten().min();
        let timeout = wake.map(|t| t.saturating_sub(now));
        let [tun_ready, sig_ready] = sys::ppoll_readable([d.tun.as_raw_fd(), d.signals.raw_fd()], timeout)
            .map_err(|source| DriverError::Sys { what: "ppoll", source })?;
        if sig_ready {
            let mut stop = false;
            while let Some(s) = d.signals.next().map_err(|source| DriverError::Sys { what: "signalfd read", source })? {
                match s {
                    Signal::Dump => {
                        d.dump(config, opts, false)?;
                    }
                    Signal::Stop => stop = true,
                }
            }
            if stop {
                break;
            }
        }
        if tun_ready {
            d.read_batch();
        }
    }
    let report = d.dump(config, opts, true)?;
    d.emu.drain();
    Ok(report)
}

impl Driver {
    /// Writes every packet due now; returns the time it finished.
    fn release_due(&mut self) -> u64 {
        let mut now = sys::monotonic_ns();
        while let Some((line, r)) = self.emu.pop_due(now) {
            match sys::write_packet(self.tun.as_raw_fd(), &r.payload) {
                Ok(()) => {
                    self.packets_out += 1;
                    self.emu.record_lateness(line, now.saturating_sub(r.release_ns));
                }
                Err(_) => self.emu.record_write_failed(line, r.size_bytes),
            }
            self.recycle(r.payload);
            now = sys::monotonic_ns();
        }
        now
    }

    fn read_batch(&mut self) {
        for _ in 0..READ_BUDGET {
            let n = match sys::read_packet(self.tun.as_raw_fd(), &mut self.scratch) {
                Ok(Some(n)) => n,
                Ok(None) => return,
                Err(_) => {
                    self.read_errors += 1;
                    return;
                }
            };
            self.packets_in += 1;
            let now = sys::monotonic_ns();
            let mut buf = self.pool.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(&self.scratch[..n]);
            match self.emu.ingest(now, &self.scratch[..n], buf) {
                Verdict::Queued { .. } => {}
                Verdict::Dropped { dropped, .. } => self.recycle(dropped.payload),
                Verdict::Forward(buf) => {
                    // Unmatched traffic passes undelayed.
                    if sys::write_packet(self.tun.as_raw_fd(), &buf).is_ok() {
                        self.packets_out += 1;
                    } else {
                        self.forward_write_failed += 1;
                    }
                    self.recycle(buf);
                }
            }
        }
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX {
            self.pool.push(buf);
        }
    }

    fn dump(&mut self, config: &Config, opts: &Options, complete: bool) -> Result<Report, DriverError> {
        let report = self.emu.report();
        let Some(path) = &opts.stats_path else { return Ok(report) };
        let (u0, s0) = self.cpu_at_start;
        let (u, s) = sys::cpu_seconds();
        let (cpu_user_s, cpu_system_s) = (u - u0, s - s0);
        let file = StatsFile {
            tun: &config.tun,
            config: config.source.display().to_string(),
            seed: config.seed,
            jitter_mode: config.jitter_mode,
            txqueuelen: config.txqueuelen,
            realtime_priority: opts.realtime_priority,
            complete,
            elapsed_s: (sys::monotonic_ns() - self.started_ns) as f64 / 1e9,
            cpu_user_s,
            cpu_system_s,
            packets_in: self.packets_in,
            packets_out: self.packets_out,
            read_errors: self.read_errors,
            forward_write_failed: self.forward_write_failed,
            cpu_per_packet_us: if self.packets_in == 0 {
                0.0
            } else {
                (cpu_user_s + cpu_system_s) * 1e6 / self.packets_in as f64
            },
            report,
        };
        write_atomically(path, &file).map_err(|source| DriverError::Stats { path: path.clone(), source })?;
        Ok(file.report)
    }
}

/// Writes JSON to `path` through a temporary file and a rename, so readers
/// never see half a file.
pub fn write_atomically<S: Serialize>(path: &Path, value: &S) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut text = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    text.push(b'\n');
    std::fs::write(&tmp, &text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stats.json");
        write_atomically(&path, &serde_json::json!({"a": 1})).unwrap();
        write_atomically(&path, &serde_json::json!({"a": 2})).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["a"], 2);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("stats.json")]);
    }
}
