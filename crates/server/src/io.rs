//! Non-blocking socket writes driven by tokio readiness: `send(2)` with
//! `MSG_MORE` for a head that a body follows, and zero-copy `sendfile(2)`.
//!
//! Each call tries the syscall first and waits for writability only on
//! `EAGAIN` (`TcpStream::try_io` clears tokio's readiness then), so a socket
//! with room costs exactly one syscall per call. A wait longer than the send
//! timeout (the client stopped reading) fails with `TimedOut`.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Calls `op` (one non-blocking write on `stream`) until it does not return
/// `WouldBlock`, waiting for writability in between, at most `timeout` each time.
pub async fn write_with<F>(stream: &TcpStream, timeout: Duration, mut op: F) -> io::Result<usize>
where
    F: FnMut() -> io::Result<usize>,
{
    loop {
        match stream.try_io(Interest::WRITABLE, &mut op) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::timeout(timeout, stream.writable())
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "send timeout: client is not reading"))??;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One non-blocking `send(2)` of (a prefix of) `buf` on `fd` (`EAGAIN` → `WouldBlock`).
pub fn raw_send(fd: RawFd, buf: &[u8], more: bool) -> io::Result<usize> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // SAFETY: `fd` is an open socket of the caller; `buf` is valid for `buf.len()` bytes.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One non-blocking `sendfile(2)` of up to `count` bytes from `in_fd` at `*offset`.
pub fn raw_sendfile(out_fd: RawFd, in_fd: RawFd, offset: &mut i64, count: usize) -> io::Result<usize> {
    // SAFETY: both fds are open for the duration of the call; `offset` is a
    // valid off_t the kernel updates.
    let n = unsafe { libc::sendfile(out_fd, in_fd, offset as *mut i64, count) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Bytes written to a TCP socket that TCP has not sent yet (`SIOCOUTQNSD`:
/// `write_seq − snd_nxt`, the same as `tcpi_notsent_bytes`).
pub fn unsent_bytes(fd: RawFd) -> io::Result<u64> {
    let mut value: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one int through the pointer we pass.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCOUTQNSD, &mut value as *mut libc::c_int) };
    if rc == 0 {
        Ok(u64::try_from(value).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One `send(2)` of (a prefix of) `buf`; `more` sets `MSG_MORE` so the kernel
/// holds a short head back to share a segment with the body that follows.
pub async fn send(stream: &TcpStream, buf: &[u8], more: bool, timeout: Duration) -> io::Result<usize> {
    let fd = stream.as_raw_fd();
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    write_with(stream, timeout, || {
        // SAFETY: `fd` is the stream's open socket; `buf` is valid for `buf.len()` bytes.
        let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    })
    .await
}

/// One `sendfile(2)` of up to `count` bytes from `file` at `*offset` (advanced
/// by the kernel). `Ok(0)` means the file ended early (it shrank).
pub async fn sendfile(
    stream: &TcpStream,
    file: &File,
    offset: &mut i64,
    count: usize,
    timeout: Duration,
) -> io::Result<usize> {
    let (out_fd, in_fd) = (stream.as_raw_fd(), file.as_raw_fd());
    write_with(stream, timeout, || {
        // SAFETY: both fds are open for the duration of the call; `offset` is a
        // valid off_t the kernel updates.
        let n = unsafe { libc::sendfile(out_fd, in_fd, offset as *mut i64, count) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    })
    .await
}
