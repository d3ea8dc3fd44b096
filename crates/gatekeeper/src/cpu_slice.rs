//! The gatekeeper's time slice in the kernel's fair scheduler (`--cpu-slice-us`).
//!
//! Beside the database on the same CPUs, every transaction wakes the proxy twice (the
//! client's message, the server's answer), and each wake-up may wait for a backend busy
//! with a long statement. Since Linux 6.12 a fair task's slice can be set
//! (`sched_attr.sched_runtime`): EEVDF gives a task with a shorter slice an earlier
//! deadline, and a waking task with an earlier deadline preempts the running one, so the
//! proxy runs sooner without a real-time policy or a nice value that would also give it
//! more of the CPU. The slice is set on the calling thread before the runtime starts its
//! threads, which inherit it; it is read back, because an older kernel accepts the call
//! and ignores the value. A value outside the kernel's bounds is a configuration error; a
//! kernel that cannot take it is [`SliceError::Unsupported`], which the binary logs and
//! runs on (the slice is a matter of latency, not of correctness).

use std::io;
use std::time::Duration;

use crate::GatekeeperError;

/// Why the slice was not set.
#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    /// Outside the kernel's bounds: the configuration is wrong.
    #[error(transparent)]
    Invalid(#[from] GatekeeperError),
    /// The kernel refused or ignored it (custom slices need Linux 6.12 or later).
    #[error("--cpu-slice-us {slice_us}: {why} (custom slices need Linux 6.12 or later)")]
    Unsupported { slice_us: u128, why: String },
}

/// The kernel's bounds on a fair task's slice (`kernel/sched/syscalls.c`).
pub const MIN_SLICE: Duration = Duration::from_micros(100);
pub const MAX_SLICE: Duration = Duration::from_millis(100);

/// `struct sched_attr` as in `SCHED_ATTR_SIZE_VER0` (the utilisation clamps left out).
const ATTR_SIZE_BYTES: u32 = 48;

/// Gives the calling thread (and the threads it starts later) the fair scheduler's slice
/// `slice`, keeping its policy and nice value. Refused: a slice outside
/// [`MIN_SLICE`]..=[`MAX_SLICE`] (invalid), a kernel that refuses it or ignores it
/// (unsupported).
pub fn set(slice: Duration) -> Result<(), SliceError> {
    if !(MIN_SLICE..=MAX_SLICE).contains(&slice) {
        let (lo, hi) = (MIN_SLICE.as_micros(), MAX_SLICE.as_micros());
        let error = format!("--cpu-slice-us {}: outside the kernel's {lo}..={hi} µs", slice.as_micros());
        return Err(
            GatekeeperError::Setting { key: "cpu-slice-us", error: Box::new(GatekeeperError::Config(error)) }.into()
        );
    }
    let refuse = |why: String| SliceError::Unsupported { slice_us: slice.as_micros(), why };
    // SAFETY: getpriority reads the caller's nice value; errno is cleared first because -1
    // is also a valid nice value.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    };
    let mut attr = zeroed_attr();
    attr.size = ATTR_SIZE_BYTES;
    attr.sched_flags = libc::SCHED_FLAG_KEEP_POLICY as u64;
    attr.sched_nice = nice;
    attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: `attr` is a valid sched_attr of the size it states; pid 0 is the caller.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) };
    if rc != 0 {
        return Err(refuse(format!("sched_setattr: {}", io::Error::last_os_error())));
    }
    match current() {
        Ok(now) if now == slice => Ok(()),
        Ok(now) => Err(refuse(format!("the kernel kept {} µs", now.as_micros()))),
        Err(e) => Err(refuse(format!("sched_getattr: {e}"))),
    }
}

/// The calling thread's slice, as `sched_getattr` reports it.
pub fn current() -> io::Result<Duration> {
    let mut attr = zeroed_attr();
    // SAFETY: the kernel writes at most `ATTR_SIZE_BYTES` into `attr`, which is that large.
    let rc =
        unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut libc::sched_attr, ATTR_SIZE_BYTES, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::from_nanos(attr.sched_runtime))
}

fn zeroed_attr() -> libc::sched_attr {
    // SAFETY: sched_attr is plain integers; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_outside_the_kernels_bounds_is_refused_by_name() {
        for us in [0, 99, 100_001] {
            let e = set(Duration::from_micros(us)).unwrap_err().to_string();
            assert!(e.contains("--cpu-slice-us") && e.contains("outside"), "{e}");
        }
    }

    /// On a thread of its own, so the test process keeps the kernel's slice.
    #[test]
    fn a_thread_takes_the_slice_and_the_threads_it_starts_inherit_it() {
        std::thread::spawn(|| {
            let before = current().unwrap();
            match set(Duration::from_micros(300)) {
                Err(e @ SliceError::Unsupported { .. }) => {
                    eprintln!("skipped: {e}");
                    return;
                }
                r => r.unwrap(),
            }
            assert_eq!(current().unwrap(), Duration::from_micros(300));
            let child = std::thread::spawn(|| current().unwrap()).join().unwrap();
            assert_eq!(child, Duration::from_micros(300));
            assert_ne!(before, Duration::from_micros(300), "the kernel's default was already 300 µs");
        })
        .join()
        .unwrap();
    }
}
