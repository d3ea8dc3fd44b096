//! `getsockopt(TCP_INFO)` into our own struct, then into core's plain
//! [`TcpSnapshot`].
//!
//! glibc's `struct tcp_info` (`netinet/tcp.h`) stops after `tcpi_total_retrans`
//! (104 bytes) and lacks every field SRRT needs beyond the basics
//! (`tcpi_notsent_bytes`, `tcpi_min_rtt`, `tcpi_delivery_rate`, `tcpi_bytes_sent`,
//! `tcpi_snd_wnd`…), so [`KernelTcpInfo`] mirrors the kernel's uapi layout
//! (`include/uapi/linux/tcp.h`, 280 bytes on 6.18). The kernel copies
//! `min(our length, its length)` bytes and reports how many; a field not wholly
//! inside what it wrote is absent (`None`), so an older kernel degrades the
//! estimate (`srtt` for `min_rtt`, no `notsent`) instead of reading zeros.

use std::mem::{offset_of, size_of};
use std::os::fd::RawFd;

use shortfirst_core::srrt::{CaState, TcpSnapshot};

/// The kernel's `struct tcp_info` as of Linux 6.18. Bitfields are folded into
/// whole bytes (`wscale`, `flags`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelTcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    /// `tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4`.
    pub wscale: u8,
    /// `tcpi_delivery_rate_app_limited : 1, tcpi_fastopen_client_fail : 2`.
    pub flags: u8,
    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time: u64,
    pub rwnd_limited: u64,
    pub sndbuf_limited: u64,
    pub delivered: u32,
    pub delivered_ce: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub rehash: u32,
    pub total_rto: u16,
    pub total_rto_recoveries: u16,
    pub total_rto_time: u32,
    pub received_ce: u32,
    pub delivered_e1_bytes: u32,
    pub delivered_e0_bytes: u32,
    pub delivered_ce_bytes: u32,
    pub received_e1_bytes: u32,
    pub received_e0_bytes: u32,
    pub received_ce_bytes: u32,
    pub accecn_fail_mode: u16,
    pub accecn_opt_seen: u16,
}

/// `tcpi_min_rtt` reads `~0U` before the first RTT sample.
const NO_MIN_RTT: u32 = u32::MAX;

/// A `TCP_INFO` read: the struct and how many bytes of it the kernel filled.
#[derive(Clone, Copy, Debug)]
pub struct TcpInfo {
    pub raw: KernelTcpInfo,
    pub len_bytes: usize,
}

macro_rules! present {
    ($info:expr, $field:ident) => {
        $info.len_bytes >= offset_of!(KernelTcpInfo, $field) + size_of_field(&$info.raw.$field)
    };
}

fn size_of_field<T>(_: &T) -> usize {
    size_of::<T>()
}

impl TcpInfo {
    /// The fields SRRT uses, `None` where the kernel did not write them.
    pub fn snapshot(&self) -> TcpSnapshot {
        let r = &self.raw;
        let opt32 = |present: bool, v: u32| present.then_some(v);
        let opt64 = |present: bool, v: u64| present.then_some(v);
        TcpSnapshot {
            srtt_us: r.rtt,
            min_rtt_us: opt32(present!(self, min_rtt), r.min_rtt).filter(|&m| m != NO_MIN_RTT && m > 0),
            rto_us: r.rto,
            cwnd_segments: r.snd_cwnd,
            mss_bytes: r.snd_mss,
            ssthresh_segments: r.snd_ssthresh,
            ca_state: CaState::from_kernel(r.ca_state),
            backoff: r.backoff,
            retransmits: r.retransmits,
            unacked_segments: r.unacked,
            notsent_bytes: opt32(present!(self, notsent_bytes), r.notsent_bytes),
            delivery_rate_bytes_per_s: opt64(present!(self, delivery_rate), r.delivery_rate),
            delivery_rate_app_limited: present!(self, flags) && r.flags & 1 == 1,
            bytes_sent: opt64(present!(self, bytes_sent), r.bytes_sent),
            bytes_retrans: opt64(present!(self, bytes_retrans), r.bytes_retrans),
            snd_wnd_bytes: opt32(present!(self, snd_wnd), r.snd_wnd),
            last_data_sent_ms: r.last_data_sent,
            // Not in TCP_INFO: a namespace setting the driver fills in.
            restarts_after_idle: false,
        }
    }
}

/// The fields every kernel since 2.6 writes (through `tcpi_total_retrans`); a
/// shorter answer is not a TCP socket's.
pub const MIN_LEN_BYTES: usize = offset_of!(KernelTcpInfo, pacing_rate);

/// One `getsockopt(TCP_INFO)`.
pub fn read(fd: RawFd) -> std::io::Result<TcpInfo> {
    let mut raw = KernelTcpInfo::default();
    let mut len = size_of::<KernelTcpInfo>() as libc::socklen_t;
    // SAFETY: `raw` is a plain-old-data repr(C) struct of `len` bytes that lives
    // for the call; the kernel writes at most `len` bytes and stores the count.
    let rc = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut raw as *mut KernelTcpInfo).cast(), &mut len)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let len_bytes = len as usize;
    if len_bytes < MIN_LEN_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("TCP_INFO returned {len_bytes} bytes, fewer than the {MIN_LEN_BYTES} of any TCP socket"),
        ));
    }
    Ok(TcpInfo { raw, len_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn layout_matches_the_kernel_uapi() {
        // Offsets from include/uapi/linux/tcp.h (the glibc struct ends at 104).
        assert_eq!(offset_of!(KernelTcpInfo, rto), 8);
        assert_eq!(offset_of!(KernelTcpInfo, rtt), 68);
        assert_eq!(offset_of!(KernelTcpInfo, snd_cwnd), 80);
        assert_eq!(MIN_LEN_BYTES, 104);
        assert_eq!(offset_of!(KernelTcpInfo, notsent_bytes), 144);
        assert_eq!(offset_of!(KernelTcpInfo, min_rtt), 148);
        assert_eq!(offset_of!(KernelTcpInfo, delivery_rate), 160);
        assert_eq!(offset_of!(KernelTcpInfo, bytes_sent), 200);
        assert_eq!(offset_of!(KernelTcpInfo, bytes_retrans), 208);
        assert_eq!(offset_of!(KernelTcpInfo, snd_wnd), 228);
        assert_eq!(size_of::<KernelTcpInfo>(), 280);
    }

    #[test]
    fn a_short_answer_leaves_the_newer_fields_absent() {
        let raw = KernelTcpInfo { rtt: 5_000, min_rtt: 4_000, notsent_bytes: 77, snd_wnd: 9, ..Default::default() };
        let full = TcpInfo { raw, len_bytes: 280 }.snapshot();
        assert_eq!((full.min_rtt_us, full.notsent_bytes, full.snd_wnd_bytes), (Some(4_000), Some(77), Some(9)));
        // A 4.x kernel: through tcpi_min_rtt but not tcpi_delivery_rate.
        let old = TcpInfo { raw, len_bytes: 152 }.snapshot();
        assert_eq!((old.min_rtt_us, old.notsent_bytes), (Some(4_000), Some(77)));
        assert_eq!((old.delivery_rate_bytes_per_s, old.bytes_sent, old.snd_wnd_bytes), (None, None, None));
        // glibc's length: only the basics.
        let glibc = TcpInfo { raw, len_bytes: 104 }.snapshot();
        assert_eq!((glibc.srtt_us, glibc.min_rtt_us, glibc.notsent_bytes), (5_000, None, None));
        // Before the first sample the kernel reports min_rtt as ~0.
        let unsampled = TcpInfo { raw: KernelTcpInfo { min_rtt: u32::MAX, ..raw }, len_bytes: 280 }.snapshot();
        assert_eq!(unsampled.min_rtt_us, None);
    }

    #[test]
    fn reads_a_real_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let payload = vec![7u8; 200_000];
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 200_000];
            client.read_exact(&mut got).unwrap();
            (client, got.len())
        });
        server.write_all(&payload).unwrap();
        // The client stays open (dropping it would move the server to CLOSE_WAIT).
        let (_client, got) = reader.join().unwrap();
        assert_eq!(got, payload.len());
        let info = read(server.as_raw_fd()).unwrap();
        assert!(info.len_bytes >= 232, "a modern kernel writes through tcpi_snd_wnd: {}", info.len_bytes);
        let s = info.snapshot();
        assert_eq!(info.raw.state, 1, "TCP_ESTABLISHED");
        assert!(s.mss_bytes > 0 && s.cwnd_segments > 0, "{s:?}");
        assert!(s.srtt_us > 0 && s.min_rtt_us.is_some_and(|m| m <= s.srtt_us.max(m)), "{s:?}");
        assert!(s.bytes_sent.is_some_and(|b| b >= payload.len() as u64), "{s:?}");
        assert_eq!(s.notsent_bytes, Some(0), "everything was read, so everything was sent");
        assert_eq!(s.ca_state, CaState::Open);
        // Not a TCP socket: an error, not garbage.
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(read(udp.as_raw_fd()).is_err());
    }
}
