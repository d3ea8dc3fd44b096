//! The few system calls the driver needs, each wrapped once: the TUN device,
//! interface ioctls, `ppoll` with a nanosecond timeout, a signalfd, timer slack,
//! the monotonic clock and CPU time. Everything unsafe in the crate is here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `struct ifreq`: a name and a 24-byte union (flags, int, ...).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {name:?}")));
        }
        let mut r = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        r.name[..bytes.len()].copy_from_slice(bytes);
        Ok(r)
    }
    fn set_short(&mut self, v: i16) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }
    fn short(&self) -> i16 {
        i16::from_ne_bytes([self.data[0], self.data[1]])
    }
    fn set_int(&mut self, v: i32) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Opens (creating if absent, attaching if persistent) the layer-3 TUN
/// `name`: `IFF_TUN | IFF_NO_PI`, no `IFF_VNET_HDR`, so the kernel hands over
/// whole wire-size packets with finished checksums, never GSO super-packets.
/// Non-blocking.
pub fn open_tun(name: &str) -> io::Result<OwnedFd> {
    let path = CString::new("/dev/net/tun").expect("no NUL");
    // SAFETY: a valid C string; the fd is owned right away.
    let fd = check(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
    // SAFETY: fd was just opened and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq::new(name)?;
    req.set_short((libc::IFF_TUN | libc::IFF_NO_PI) as i16);
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `req` is.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) })?;
    Ok(fd)
}

fn ifreq_ioctl(request: libc::c_ulong, req: &mut IfReq) -> io::Result<()> {
    // SAFETY: a throwaway datagram socket for interface ioctls.
    let sock = check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: sock is ours; closed by OwnedFd.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: the SIOC*IF* requests used here read/write one ifreq.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), request as _, req as *mut IfReq) })?;
    Ok(())
}

/// `ip link set NAME txqueuelen N up`.
pub fn set_txqueuelen_and_up(name: &str, txqueuelen: u32) -> io::Result<()> {
    let mut req = IfReq::new(name)?;
    req.set_int(txqueuelen as i32);
    ifreq_ioctl(libc::SIOCSIFTXQLEN, &mut req)?;
    let mut req = IfReq::new(name)?;
    ifreq_ioctl(libc::SIOCGIFFLAGS, &mut req)?;
    let flags = req.short() | libc::IFF_UP as i16;
    req.set_short(flags);
    ifreq_ioctl(libc::SIOCSIFFLAGS, &mut req)
}

/// Timer slack of the calling thread, ns (default 50 µs would blur every release).
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// SCHED_FIFO at `priority` for this process: a packet's release then waits
/// for no ordinary (CFS) task, however busy the machine.
pub fn set_sched_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 is this process; param is valid.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) })?;
    Ok(())
}

/// CLOCK_MONOTONIC in ns (never steps with NTP, unlike CLOCK_REALTIME).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// User and system CPU seconds of this process.
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: rusage is plain data, filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// SIGTERM, SIGINT, SIGHUP (stop) and SIGUSR1 (write the counters) blocked and
/// read from a descriptor, so they wake `ppoll` like a packet does.
pub struct Signals {
    fd: OwnedFd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Stop,
    Dump,
}

impl Signals {
    pub fn new() -> io::Result<Signals> {
        // SAFETY: sigset manipulation on a local set, then masking this thread
        // (the driver is single-threaded, so the mask covers the process).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1] {
                libc::sigaddset(&mut set, s);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            let fd = check(libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC))?;
            Ok(Signals { fd: OwnedFd::from_raw_fd(fd) })
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The next pending signal, if any.
    pub fn next(&self) -> io::Result<Option<Signal>> {
        // SAFETY: plain data filled by read().
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading at most `size` bytes into `info`.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), &mut info as *mut _ as *mut libc::c_void, size) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        Ok(Some(if info.ssi_signo == libc::SIGUSR1 as u32 { Signal::Dump } else { Signal::Stop }))
    }
}

/// Waits until one of `fds` is readable or `timeout_ns` passes (None: forever).
/// Returns the readable flags per fd; EINTR counts as a timeout.
pub fn ppoll_readable<const N: usize>(fds: [RawFd; N], timeout_ns: Option<u64>) -> io::Result<[bool; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds is a valid array of N pollfds; ts_ptr null or valid.
    let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), N as libc::nfds_t, ts_ptr, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok([false; N]);
        }
        return Err(e);
    }
    Ok(pfds.map(|p| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0))
}

/// One `read`; Ok(None) when nothing is pending.
pub fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// One `write` of a whole packet.
pub fn write_packet(fd: RawFd, packet: &[u8]) -> io::Result<()> {
    // SAFETY: packet is valid for packet.len() bytes.
    let n = unsafe { libc::write(fd, packet.as_ptr() as *const libc::c_void, packet.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != packet.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short TUN write"));
    }
    Ok(())
}
