//! Writing a TLS connection's ciphertext to its socket without blocking: rustls's
//! `write_tls` into [`SocketWriter`], which calls `sendmsg(MSG_NOSIGNAL)` once and takes
//! at most `cap` bytes (the grant, under the user-space scheduler). `EAGAIN` comes back
//! as `WouldBlock`, for the caller's readiness loop (`TcpStream::try_io`).

use std::io::{self, IoSlice, Write};
use std::os::fd::RawFd;

/// Most buffers given to one `sendmsg` (rustls holds at most a few records).
const MAX_IOVECS: usize = 16;

/// A non-blocking socket writer taking at most `cap` bytes per call.
pub struct SocketWriter {
    pub fd: RawFd,
    pub cap: usize,
}

impl Write for SocketWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_IOVECS];
        let (mut count, mut left) = (0, self.cap);
        for b in bufs.iter().filter(|b| !b.is_empty()).take(MAX_IOVECS) {
            if left == 0 {
                break;
            }
            let len = b.len().min(left);
            iov[count] = libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: len };
            left -= len;
            count += 1;
        }
        if count == 0 {
            return Ok(0);
        }
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = count;
        // SAFETY: `fd` is the connection's open socket; every iovec points into a live
        // buffer of `bufs` for its length; sendmsg only reads them.
        let n = unsafe { libc::sendmsg(self.fd, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
