//! Whether other tasks want the CPU the spinning dispatcher runs on: judged
//! from that CPU's idle time (the cpuidle driver's counters) and the thread's
//! own time off the CPU, or from the kernel's CPU pressure where there is no
//! cpuidle driver.

use super::super::sys::thread_cpu_time;
use std::time::{Duration, Instant};

/// Whether other tasks want the CPU the spinning dispatcher runs on, judged on
/// that CPU alone (the CPU the server runs on is its own business): while
/// spinning, contended once the thread was off its CPU without sleeping (other
/// tasks ran, or the host took the vCPU) more than [`CONTENDED_SHARE`] of a
/// [`PRESSURE_WINDOW`]: wall time − the thread's CPU time − its timer sleeps.
/// The yields hand the CPU to any task that wants it, and CFS tasks of higher
/// weight preempt a SCHED_OTHER spinner anywhere. While sleeping (contended), no
/// longer so once the CPU sat idle more than that share (from the cpuidle
/// driver's per-CPU residency times: an idle CPU halts, and a sleeping
/// dispatcher then pays its wake-up). Where the kernel has no cpuidle driver it
/// falls back to the machine-wide [`CpuPressure`].
pub(super) struct Contention {
    source: ContentionSource,
    contended: bool,
    last_check: Instant,
    /// The thread's CPU time at the last check.
    last_cpu: Duration,
    /// Time the thread slept on its timer since the last check
    /// ([`super::wait_spinning`] adds to it).
    pub(super) slept: Duration,
}

/// What [`Contention`] reads: this CPU's idle counters, or machine-wide PSI
/// where there is no cpuidle driver.
enum ContentionSource {
    Idle(CpuIdle),
    Psi(CpuPressure),
}

impl Contention {
    pub(super) fn open() -> Contention {
        let source = CpuIdle::open().map_or_else(|| ContentionSource::Psi(CpuPressure::open()), ContentionSource::Idle);
        Contention {
            source,
            contended: false,
            last_check: Instant::now(),
            last_cpu: thread_cpu_time(),
            slept: Duration::ZERO,
        }
    }

    /// The state for the current window (re-judged once a window has passed).
    pub(super) fn contended(&mut self, now: Instant) -> bool {
        let idle = match &mut self.source {
            ContentionSource::Idle(idle) => idle,
            ContentionSource::Psi(psi) => return psi.contended(now),
        };
        let window = now.saturating_duration_since(self.last_check);
        if window < PRESSURE_WINDOW {
            return self.contended;
        }
        let cpu = thread_cpu_time();
        let off_cpu = window.saturating_sub(cpu.saturating_sub(self.last_cpu)).saturating_sub(self.slept);
        // None: just migrated to another CPU (or unreadable), no judgement this window.
        if let Some(idle_us) = idle.idle_since_last_us() {
            self.contended = next_contended(self.contended, window, Duration::from_micros(idle_us), off_cpu);
        }
        self.slept = Duration::ZERO;
        self.last_cpu = cpu;
        self.last_check = now;
        self.contended
    }
}

/// One window's judgement: spinning, contended once the thread was off its CPU
/// without sleeping more than [`CONTENDED_SHARE`] of the window; sleeping, no
/// longer contended once the CPU idled more than that share.
fn next_contended(contended: bool, window: Duration, idle: Duration, off_cpu: Duration) -> bool {
    let share = |d: Duration| d.as_secs_f64() / window.as_secs_f64().max(1e-9);
    if contended {
        share(idle) <= CONTENDED_SHARE
    } else {
        share(off_cpu) > CONTENDED_SHARE
    }
}

/// Idle time of the CPU the calling thread runs on, from the cpuidle driver's
/// residency counters (`/sys/devices/system/cpu/cpuN/cpuidle/stateK/time`, µs,
/// summed over the states; a CPU's counters only move when it leaves idle, and
/// the calling thread's CPU is not idle while it reads them).
pub(super) struct CpuIdle {
    /// The CPU of the previous read, its state files and their sum then.
    cpu: usize,
    files: Vec<std::fs::File>,
    last_us: Option<u64>,
}

/// Most cpuidle states read per CPU (drivers have a handful).
const MAX_IDLE_STATES: usize = 16;

impl CpuIdle {
    pub(super) fn open() -> Option<CpuIdle> {
        let cpu = current_cpu()?;
        let files = Self::state_files(cpu);
        (!files.is_empty()).then_some(CpuIdle { cpu, files, last_us: None })
    }

    fn state_files(cpu: usize) -> Vec<std::fs::File> {
        (0..MAX_IDLE_STATES)
            .map_while(|k| std::fs::File::open(format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}/time")).ok())
            .collect()
    }

    fn total_us(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut sum = 0u64;
        for f in &self.files {
            let mut buf = [0u8; 32];
            let n = f.read_at(&mut buf, 0).ok()?;
            sum += std::str::from_utf8(&buf[..n]).ok()?.trim().parse::<u64>().ok()?;
        }
        Some(sum)
    }

    /// Idle µs of this thread's CPU since the previous call; None on the first
    /// call, after a migration to another CPU, or when unreadable.
    fn idle_since_last_us(&mut self) -> Option<u64> {
        let cpu = current_cpu()?;
        if cpu != self.cpu {
            self.cpu = cpu;
            self.files = Self::state_files(cpu);
            self.last_us = None;
        }
        let now = self.total_us();
        let delta = match (self.last_us, now) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        self.last_us = now;
        delta
    }
}

/// The CPU the calling thread runs on.
pub(super) fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// How often [`CpuPressure`] reads the kernel's CPU pressure: a few
/// scheduler ticks, as the kernel weighs each CPU's stall time by its busy
/// time in whole ticks (measured with HZ=250: read every 2 ms, the total did
/// not move at all; every 4-20 ms it tracked the pressure).
pub(super) const PRESSURE_WINDOW: Duration = Duration::from_millis(10);
/// Share of a window in which some task waited for a CPU above which the
/// machine counts as contended. Low enough that one task starved by the
/// spinner (100% of the window) counts; high enough that the collector's
/// brief waits for the spinner's next yield do not.
const CONTENDED_SHARE: f64 = 0.1;

/// Whether other tasks are waiting for a CPU, from the kernel's pressure
/// stall information (`/proc/pressure/cpu`, "some": time in which at least
/// one runnable task was not running), read at most once per
/// [`PRESSURE_WINDOW`] (~6 µs a read), so it notices new contention up to
/// two windows late. Machine-wide: a task waiting on
/// another CPU counts too (then the spinner sleeps although it need not; on 2
/// CPUs the server's own CPU made it sleep at 20,000/s, measured), so it is
/// only [`Contention`]'s fallback where there is no cpuidle driver.
/// Without PSI (older kernels, `psi=0`) it never reports contention.
struct CpuPressure {
    file: Option<std::fs::File>,
    last_total_us: Option<u64>,
    last_check: Instant,
    contended: bool,
}

impl CpuPressure {
    fn open() -> CpuPressure {
        CpuPressure {
            file: std::fs::File::open("/proc/pressure/cpu").ok(),
            last_total_us: None,
            last_check: Instant::now(),
            contended: false,
        }
    }

    /// Whether, over the last window, some task waited for a CPU more than
    /// [`CONTENDED_SHARE`] of the time (the answer of the last read until a
    /// window has passed).
    fn contended(&mut self, now: Instant) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.file else { return false };
        let elapsed = now.saturating_duration_since(self.last_check);
        if elapsed < PRESSURE_WINDOW && self.last_total_us.is_some() {
            return self.contended;
        }
        let mut buf = [0u8; 256];
        let total = f.read_at(&mut buf, 0).ok().and_then(|n| psi_some_total_us(&buf[..n]));
        let Some(total) = total else {
            // Unreadable or unparsable: stop asking.
            self.file = None;
            self.contended = false;
            return false;
        };
        self.update(total, elapsed);
        self.last_check = now;
        self.contended
    }

    /// Takes a new cumulative "some" total, `elapsed` after the previous one.
    fn update(&mut self, total_us: u64, elapsed: Duration) {
        if let Some(last) = self.last_total_us {
            let stalled_us = total_us.saturating_sub(last) as f64;
            self.contended = stalled_us > CONTENDED_SHARE * elapsed.as_secs_f64() * 1e6;
        }
        self.last_total_us = Some(total_us);
    }
}

/// The `total=` (µs) of the "some" line of a `/proc/pressure/*` file.
fn psi_some_total_us(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spinning: contended once the thread was off its CPU without sleeping
    /// more than 10% of the window. Sleeping: until the CPU idled more than 10%.
    #[test]
    fn contention_per_window() {
        let w = Duration::from_millis(10);
        let ms = Duration::from_millis;
        for (contended, idle, off_cpu, next) in [
            (false, ms(0), ms(0), false),
            (false, ms(9), ms(1), false),
            (false, ms(0), ms(2), true),
            (false, ms(5), ms(10), true),
            (true, ms(0), ms(0), true),
            (true, ms(1), ms(0), true),
            (true, ms(2), ms(0), false),
            (true, ms(10), ms(10), false),
        ] {
            assert_eq!(next_contended(contended, w, idle, off_cpu), next, "{contended} {idle:?} {off_cpu:?}");
        }
    }

    #[test]
    fn psi_parsing() {
        let text =
            b"some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(psi_some_total_us(text), Some(123456));
        for bad in [&b""[..], b"full total=7\n", b"some avg10=1.00\n", b"some total=x\n"] {
            assert_eq!(psi_some_total_us(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    /// Contended when some task waited for a CPU more than 10% of the window.
    #[test]
    fn pressure_threshold() {
        let mut p = CpuPressure { file: None, last_total_us: None, last_check: Instant::now(), contended: false };
        let w = Duration::from_millis(10);
        for (total_us, contended) in [(1_000, false), (1_500, false), (3_000, true), (13_000, true), (13_900, false)] {
            p.update(total_us, w);
            assert_eq!(p.contended, contended, "total {total_us}");
        }
        // Without PSI it never reports contention.
        assert!(!p.contended(Instant::now() + Duration::from_secs(1)));
    }
}
