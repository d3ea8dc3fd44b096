//! The processor time a PostgreSQL backend process has used, for the processor-time cost
//! basis (`--estimate-basis cpu`): the first field of `/proc/PID/schedstat`, nanoseconds
//! on a CPU, read at a transaction's admission and at its end.
//!
//! The pid is the one the server sent in BackendKeyData. It names the backend only where
//! the gatekeeper sees the server's processes (the same host and pid namespace) and the
//! upstream is PostgreSQL itself (PgBouncer sends keys of its own). So it is trusted only
//! when the process's command line is a PostgreSQL backend's showing the gatekeeper's end
//! of this very connection, `postgres: [CLUSTER: ]USER DB HOST(PORT) …` with PORT the
//! upstream connection's local port (PostgreSQL's default `update_process_title = on`
//! keeps it so). Otherwise the connection's transactions are sampled at their wall time.
//!
//! Precision: the kernel adds to the count when the process leaves a CPU and at each
//! scheduler tick. Read while the backend waits for its client (at admission, and at the
//! end of a transaction once it has gone back to waiting) the count is exact; read while
//! it still runs on another CPU (just after it sent ReadyForQuery) it can lag by up to
//! one tick, which the next transaction's sample then includes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// An open `/proc/PID/schedstat` of a verified backend.
#[derive(Debug)]
pub struct BackendCpu {
    schedstat: File,
}

impl BackendCpu {
    /// The backend `pid` under `proc_root` (`/proc`), if its command line shows it serving
    /// the connection whose local port is `local_port`; otherwise why not.
    pub fn open(proc_root: &Path, pid: i32, local_port: u16) -> Result<Self, String> {
        let dir = proc_root.join(pid.to_string());
        let cmdline = std::fs::read(dir.join("cmdline")).map_err(|e| format!("process {pid}: {e}"))?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        let ours = format!("({local_port})");
        if !cmdline.starts_with("postgres:") || !cmdline.contains(&ours) {
            return Err(format!(
                "process {pid} is not the PostgreSQL backend of this connection (local port {local_port}): \
                 its command line is {:?}",
                cmdline.trim_end_matches(['\0', ' '])
            ));
        }
        let schedstat = File::open(dir.join("schedstat")).map_err(|e| format!("process {pid}: schedstat: {e}"))?;
        let cpu = BackendCpu { schedstat };
        cpu.used_ns().ok_or_else(|| format!("process {pid}: schedstat is unreadable"))?;
        Ok(cpu)
    }

    /// Nanoseconds the backend has spent on a CPU so far; `None` once it is gone.
    pub fn used_ns(&self) -> Option<u64> {
        let mut buf = [0u8; 96];
        let n = self.schedstat.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().next()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(cmdline: &[u8], schedstat: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("4242");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cmdline"), cmdline).unwrap();
        std::fs::write(dir.join("schedstat"), schedstat).unwrap();
        root
    }

    #[test]
    fn a_backend_of_this_connection_is_read() {
        let root = fake_proc(b"postgres: main: bench bench 127.0.0.1(40312) idle\0\0\0", "123456789 55 7\n");
        let cpu = BackendCpu::open(root.path(), 4242, 40312).unwrap();
        assert_eq!(cpu.used_ns(), Some(123_456_789));
        std::fs::write(root.path().join("4242/schedstat"), "123999999 56 8\n").unwrap();
        assert_eq!(cpu.used_ns(), Some(123_999_999), "re-read from the start");
    }

    #[test]
    fn another_process_or_connection_is_refused_with_why() {
        let root = fake_proc(b"postgres: bench bench 127.0.0.1(40312) idle\0", "1 1 1\n");
        let e = BackendCpu::open(root.path(), 4242, 40313).unwrap_err();
        assert!(e.contains("not the PostgreSQL backend") && e.contains("40313"), "{e}");
        let root = fake_proc(b"/usr/sbin/pgbouncer\0/etc/pgbouncer.ini\0", "1 1 1\n");
        assert!(BackendCpu::open(root.path(), 4242, 40312).unwrap_err().contains("pgbouncer"));
        let e = BackendCpu::open(root.path(), 999_999, 40312).unwrap_err();
        assert!(e.starts_with("process 999999"), "{e}");
        let root = fake_proc(b"postgres: a b [local](40312) idle\0", "garbage\n");
        assert!(BackendCpu::open(root.path(), 4242, 40312).unwrap_err().contains("unreadable"));
    }
}
