//! Which line a packet belongs to: parse the IPv4 header, find the client group
//! by longest-prefix match on the source (client -> server, "up") or else on the
//! destination (server -> client, "down"). Pure: bytes in, a line out.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// An IPv4 subnet such as `10.78.1.0/24` (host bits must be zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Prefix {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Ipv4Prefix {
    fn mask(self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    pub fn contains(self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s.split_once('/').ok_or_else(|| format!("{s:?}: expected a subnet such as 10.78.1.0/24"))?;
        let addr: Ipv4Addr = a.parse().map_err(|_| format!("{s:?}: {a:?} is not an IPv4 address"))?;
        let len: u8 =
            l.parse().ok().filter(|l| *l <= 32).ok_or_else(|| format!("{s:?}: prefix length must be 0..=32"))?;
        let p = Ipv4Prefix { addr, len };
        if u32::from(addr) & !p.mask() != 0 {
            return Err(format!(
                "{s:?}: host bits are set (did you mean {}/{len}?)",
                Ipv4Addr::from(u32::from(addr) & p.mask())
            ));
        }
        Ok(p)
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Ipv4Prefix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Server -> client: the destination is in the group.
    Down,
    /// Client -> server: the source is in the group.
    Up,
}

/// Where a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Group {
        group: usize,
        direction: Direction,
    },
    /// IPv4 but neither address is in a group: forwarded at once, counted.
    Unmatched,
    /// Not an IPv4 packet we can read (IPv6, truncated): forwarded at once, counted.
    NotIpv4,
}

/// Longest-prefix match over every group's subnets.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    /// (prefix, group), longest prefixes first.
    table: Vec<(Ipv4Prefix, usize)>,
}

impl Classifier {
    pub fn new(groups: &[Vec<Ipv4Prefix>]) -> Classifier {
        let mut table: Vec<(Ipv4Prefix, usize)> =
            groups.iter().enumerate().flat_map(|(g, ps)| ps.iter().map(move |p| (*p, g))).collect();
        table.sort_by_key(|(p, _)| std::cmp::Reverse(p.len));
        Classifier { table }
    }

    pub fn group_of(&self, ip: Ipv4Addr) -> Option<usize> {
        self.table.iter().find(|(p, _)| p.contains(ip)).map(|(_, g)| *g)
    }

    pub fn classify(&self, packet: &[u8]) -> Class {
        let Some((src, dst)) = ipv4_addrs(packet) else { return Class::NotIpv4 };
        if let Some(group) = self.group_of(src) {
            Class::Group { group, direction: Direction::Up }
        } else if let Some(group) = self.group_of(dst) {
            Class::Group { group, direction: Direction::Down }
        } else {
            Class::Unmatched
        }
    }
}

/// Source and destination of an IPv4 packet, or None if it is not one.
pub fn ipv4_addrs(packet: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if packet.len() < 20 || packet[0] >> 4 != 4 || packet[0] & 0x0f < 5 {
        return None;
    }
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    Some((src, dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut h = vec![0u8; 40];
        h[0] = 0x45;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        h
    }

    #[test]
    fn prefixes_parse_and_refuse() {
        assert_eq!("10.78.1.0/24".parse::<Ipv4Prefix>().unwrap().to_string(), "10.78.1.0/24");
        assert!("0.0.0.0/0".parse::<Ipv4Prefix>().unwrap().contains(Ipv4Addr::new(1, 2, 3, 4)));
        for bad in ["10.78.1.0", "10.78.1.0/33", "10.78.1.1/24", "x/8", "10.0.0.0/x"] {
            assert!(bad.parse::<Ipv4Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn classifies_by_longest_prefix_source_first() {
        let p = |s: &str| s.parse::<Ipv4Prefix>().unwrap();
        let c = Classifier::new(&[vec![p("10.78.0.0/16")], vec![p("10.78.2.0/24")]]);
        let table = [
            (header([10, 78, 1, 5], [10, 77, 0, 1]), Class::Group { group: 0, direction: Direction::Up }),
            (header([10, 78, 2, 5], [10, 77, 0, 1]), Class::Group { group: 1, direction: Direction::Up }),
            (header([10, 77, 0, 1], [10, 78, 2, 9]), Class::Group { group: 1, direction: Direction::Down }),
            (header([10, 77, 0, 1], [10, 78, 9, 9]), Class::Group { group: 0, direction: Direction::Down }),
            (header([10, 77, 0, 1], [10, 77, 0, 2]), Class::Unmatched),
        ];
        for (pkt, want) in table {
            assert_eq!(c.classify(&pkt), want);
        }
        let mut v6 = header([0; 4], [0; 4]);
        v6[0] = 0x60;
        assert_eq!(c.classify(&v6), Class::NotIpv4);
        assert_eq!(c.classify(&[0x45; 10]), Class::NotIpv4);
    }
}
