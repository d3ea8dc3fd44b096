//! Source addresses by client identity (`shortfirst load --source-addrs`):
//! one load process stands for several client groups (subnets) by binding
//! each request's connection to the address of its client before connecting,
//! so that a router or emulator in between can tell the groups apart.
//!
//! Spec forms:
//! - `ADDR[,ADDR…]`: client `c` uses `ADDR[c mod n]` (round robin by client id);
//! - `file:PATH`: a CSV of `client,addr` rows (an optional `client,addr`
//!   header, blank lines and `#` comments are skipped); a row `*,ADDR` gives
//!   the address of every client not listed. Without such a row, a request of
//!   an unlisted client stops the run (before it is sent) with an error naming
//!   the client and the file: a group experiment must not silently send a
//!   client from the host's default address.
//!
//! The mapping is a pure function of the client id, fixed for the run; idle
//! kept-alive connections are pooled per client, so a connection is only
//! ever reused by requests of the same source address.
//!
//! Limits: at most [`MAX_FILE_BYTES`] and [`MAX_FILE_ROWS`] rows in a file, and [`MAX_ADDRS`]
//! distinct addresses (each is probed once before the run); beyond, the spec
//! is refused.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// Most `client,addr` rows read from a file.
pub const MAX_FILE_ROWS: usize = 1 << 20;
/// Largest file read (ample for [`MAX_FILE_ROWS`] rows of IPv6 addresses).
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Most distinct source addresses in one spec.
pub const MAX_ADDRS: usize = 65_536;

/// A spec we cannot use, or an address this host cannot send from.
#[derive(Debug, thiserror::Error)]
pub enum SourceAddrsError {
    #[error("--source-addrs `{spec}`: {message}")]
    Spec { spec: String, message: String },
    // The I/O errors are in the message, not chained as a source: printed
    // with its chain, the error would say them twice.
    #[error("--source-addrs {}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    #[error("--source-addrs {}: no `client,addr` rows", path.display())]
    Empty { path: PathBuf },
    #[error("--source-addrs {}:{line}: {message}", path.display())]
    Line { path: PathBuf, line: usize, message: String },
    #[error("--source-addrs: {addr} ({origin}) is {family} but the target {target} is not")]
    Family { addr: IpAddr, origin: String, family: &'static str, target: SocketAddr },
    #[error("--source-addrs: cannot bind {addr} ({origin}): {}", bind_reason(error))]
    Bind { addr: IpAddr, origin: String, error: io::Error },
    #[error("--source-addrs {}: client {client} has no row and there is no `*` row for unlisted clients", path.display())]
    Unmapped { client: u32, path: PathBuf },
}

fn bind_reason(e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
        format!("the address is not on this host ({e}); add it to an interface or fix the spec")
    } else {
        e.to_string()
    }
}

/// Which source address each client id connects from.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SourceAddrs {
    /// The kernel chooses (no bind).
    #[default]
    Any,
    /// Client `c` uses `addrs[c mod addrs.len()]` (never empty).
    RoundRobin(Vec<IpAddr>),
    /// Explicit rows, with an optional default for unlisted clients.
    Map { path: PathBuf, by_client: HashMap<u32, IpAddr>, default: Option<IpAddr>, lines: BTreeMap<IpAddr, usize> },
}

impl SourceAddrs {
    /// Parses `ADDR[,ADDR…]` or `file:PATH` (reading the file).
    pub fn parse(spec: &str) -> Result<SourceAddrs, SourceAddrsError> {
        let err = |m: String| SourceAddrsError::Spec { spec: spec.to_string(), message: m };
        if let Some(path) = spec.strip_prefix("file:") {
            if path.is_empty() {
                return Err(err("file: needs a path".into()));
            }
            let path = Path::new(path);
            let io_err = |error| SourceAddrsError::Io { path: path.into(), error };
            let bytes = std::fs::metadata(path).map_err(io_err)?.len();
            if bytes > MAX_FILE_BYTES {
                return Err(err(format!("{} is {bytes} bytes, more than {MAX_FILE_BYTES}", path.display())));
            }
            let text = std::fs::read_to_string(path).map_err(io_err)?;
            return SourceAddrs::parse_file(path, &text);
        }
        let mut addrs = Vec::new();
        for (i, item) in spec.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                return Err(err(format!("address {} is empty (expected ADDR[,ADDR…] or file:PATH)", i + 1)));
            }
            let addr = parse_ip(item).ok_or_else(|| {
                err(format!("`{item}` (address {}) is not an IP address (expected ADDR[,ADDR…] or file:PATH)", i + 1))
            })?;
            if addrs.len() == MAX_ADDRS {
                return Err(err(format!("more than {MAX_ADDRS} addresses")));
            }
            addrs.push(addr);
        }
        Ok(SourceAddrs::RoundRobin(addrs))
    }

    /// Parses the rows of a `client,addr` file (`path` is for messages).
    pub fn parse_file(path: &Path, text: &str) -> Result<SourceAddrs, SourceAddrsError> {
        let line_err = |line: usize, m: String| SourceAddrsError::Line { path: path.to_path_buf(), line, message: m };
        let mut by_client = HashMap::new();
        let mut default = None;
        let mut lines = BTreeMap::new();
        let mut rows = 0usize;
        let mut seen_data = false;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if !seen_data && fields.len() == 2 && fields[0].eq_ignore_ascii_case("client") {
                if !fields[1].eq_ignore_ascii_case("addr") {
                    return Err(line_err(n, format!("header must be `client,addr`, got `{line}`")));
                }
                seen_data = true;
                continue;
            }
            seen_data = true;
            let [client, addr] = fields[..] else {
                return Err(line_err(n, format!("expected `client,addr`, got `{line}`")));
            };
            rows += 1;
            if rows > MAX_FILE_ROWS {
                return Err(line_err(n, format!("more than {MAX_FILE_ROWS} rows")));
            }
            let c: Option<u32> = match client {
                "*" => None,
                _ => Some(
                    client
                        .parse()
                        .map_err(|_| line_err(n, format!("client `{client}` is not a client id (0..2^32) or `*`")))?,
                ),
            };
            let ip = parse_ip(addr).ok_or_else(|| line_err(n, format!("`{addr}` is not an IP address")))?;
            let duplicate = match c {
                None => default.replace(ip).is_some().then(|| "a second `*` row".to_string()),
                Some(c) => by_client.insert(c, ip).is_some().then(|| format!("client {c} is listed twice")),
            };
            if let Some(m) = duplicate {
                return Err(line_err(n, m));
            }
            if !lines.contains_key(&ip) {
                if lines.len() == MAX_ADDRS {
                    return Err(line_err(n, format!("more than {MAX_ADDRS} distinct addresses")));
                }
                lines.insert(ip, n);
            }
        }
        if by_client.is_empty() && default.is_none() {
            return Err(SourceAddrsError::Empty { path: path.to_path_buf() });
        }
        Ok(SourceAddrs::Map { path: path.to_path_buf(), by_client, default, lines })
    }

    /// The address client `client` connects from: None to let the kernel
    /// choose; an error if a file lists neither the client nor a default.
    pub fn for_client(&self, client: u32) -> Result<Option<IpAddr>, SourceAddrsError> {
        match self {
            SourceAddrs::Any => Ok(None),
            SourceAddrs::RoundRobin(a) => Ok(Some(a[client as usize % a.len()])),
            SourceAddrs::Map { path, by_client, default, .. } => by_client
                .get(&client)
                .or(default.as_ref())
                .map(|ip| Some(*ip))
                .ok_or_else(|| SourceAddrsError::Unmapped { client, path: path.clone() }),
        }
    }

    /// Each distinct address once, with where it came from (for messages).
    fn distinct(&self) -> Vec<(IpAddr, String)> {
        match self {
            SourceAddrs::Any => Vec::new(),
            SourceAddrs::RoundRobin(a) => {
                let mut seen = BTreeMap::new();
                for (i, ip) in a.iter().enumerate() {
                    seen.entry(*ip).or_insert(i + 1);
                }
                seen.into_iter().map(|(ip, i)| (ip, format!("address {i} of the list"))).collect()
            }
            SourceAddrs::Map { path, lines, .. } => {
                lines.iter().map(|(ip, n)| (*ip, format!("{}:{n}", path.display()))).collect()
            }
        }
    }

    /// Checks, before the run, that every address is of the target's family
    /// and can be bound on this host (one probe bind each), so that a missing
    /// address is one clear error at the start, not a failed row per request.
    pub fn check(&self, target: SocketAddr) -> Result<(), SourceAddrsError> {
        for (ip, origin) in self.distinct() {
            if ip.is_ipv4() != target.is_ipv4() {
                let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
                return Err(SourceAddrsError::Family { addr: ip, origin, family, target });
            }
            probe_bind(ip).map_err(|error| SourceAddrsError::Bind { addr: ip, origin, error })?;
        }
        Ok(())
    }
}

/// An address, with or without IPv6 brackets.
fn parse_ip(s: &str) -> Option<IpAddr> {
    let s = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
    s.parse().ok()
}

/// Binds a TCP socket to `ip` (any port) and closes it.
fn probe_bind(ip: IpAddr) -> io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::for_address(SocketAddr::new(ip, 0)), socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(ip, 0).into())
}

/// A non-blocking TCP socket of `target`'s family bound to `source` (port
/// chosen at connect, so that binding does not reserve a port per source
/// address for every destination), ready for `connect`.
pub fn bound_socket(source: IpAddr, target: SocketAddr) -> io::Result<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::for_address(target), socket2::Type::STREAM, None)?;
    // Best effort: without it (kernels before 4.2) bind picks the port now.
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the right size.
    unsafe {
        use std::os::fd::AsRawFd;
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    s.bind(&SocketAddr::new(source, 0).into())?;
    s.set_nonblocking(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests;
