//! A nanosecond sleep that keeps the runtime serving sockets meanwhile.

use std::time::Duration;

/// A non-blocking CLOCK_MONOTONIC timerfd registered with the runtime: a
/// sleep with nanosecond resolution (tokio's own timers have 1 ms) that
/// still lets the runtime serve sockets meanwhile.
pub(crate) struct TimerFd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl TimerFd {
    pub(crate) fn new() -> std::io::Result<TimerFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall; the fd is owned by the OwnedFd below.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: an OwnedFd stays open and keeps its descriptor for as long as
        // the AsyncFd owns it.
        let afd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) };
        Ok(TimerFd(afd?))
    }

    /// Sleeps for `d` (> 0).
    pub(crate) async fn sleep(&self, d: Duration) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.0.get_ref().as_raw_fd();
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                // At least 1 ns: an all-zero value would disarm the timer.
                tv_nsec: (d.subsec_nanos().max(u32::from(d.as_secs() == 0))) as libc::c_long,
            },
        };
        // SAFETY: `fd` is our timerfd; `spec` is a valid local.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        loop {
            let mut guard = self.0.readable().await?;
            let mut expirations = 0u64;
            // SAFETY: reads 8 bytes into a local u64, as timerfd requires.
            let n = unsafe { libc::read(fd, (&mut expirations as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            guard.clear_ready();
        }
    }
}
