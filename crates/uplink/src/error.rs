//! What can go wrong installing, reading or removing the uplink tree, each
//! error naming the device, command or input involved.

use crate::rate::RateError;

#[derive(Debug, thiserror::Error)]
pub enum UplinkError {
    #[error(transparent)]
    Rate(#[from] RateError),
    #[error("--bands {bands}: the number of data bands must be between 1 and {max}", max = shortfirst_core::bands::MAX_DATA_BANDS)]
    Bands { bands: usize },
    #[error("band map: {reason}")]
    BandMap { reason: String },
    #[error("device MTU {mtu_bytes} bytes is outside 576..=65535")]
    Mtu { mtu_bytes: u32 },
    #[error("device name {dev:?} is not a valid interface name (1 to 15 bytes, no '/', ':' or whitespace)")]
    DeviceName { dev: String },
    #[error("device {dev:?} does not exist (in this network namespace; `ip link` lists the devices)")]
    NoSuchDevice { dev: String },
    #[error("{action} on {dev:?} needs CAP_NET_ADMIN: run as root (or with that capability) in the device's network namespace")]
    PermissionDenied { dev: String, action: String },
    #[error("`{tool}` was not found: install the Debian package {package} (or put `{tool}` on PATH){hint}")]
    ToolMissing { tool: &'static str, package: &'static str, hint: &'static str },
    #[error("device {dev:?} has a root qdisc `{kind} {handle}` that shortfirst did not install; remove it first (`tc qdisc del dev {dev} root`) if it may go")]
    ForeignQdisc { dev: String, kind: String, handle: String },
    #[error("device {dev:?} has no shortfirst uplink (its root qdisc is {found}); install one with `shortfirst uplink setup`")]
    NotInstalled { dev: String, found: String },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    #[error("could not run `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("could not read the output of `{command}`: {detail}")]
    Parse { command: String, detail: String },
    #[error("offloads still on for {dev:?} after `ethtool -K`: {still_on}; this device cannot turn them off, use --offloads keep to shape anyway (packets may then be larger than the MTU)")]
    OffloadsStillOn { dev: String, still_on: String },
    #[error("{source}; rolled back: the device is left with its default root qdisc")]
    RolledBack { source: Box<UplinkError> },
    #[error("{source}; rolling back also failed ({rollback}): check `tc qdisc show dev {dev}`")]
    RollbackFailed { dev: String, source: Box<UplinkError>, rollback: Box<UplinkError> },
}

/// Linux interface names: 1..=15 bytes (IFNAMSIZ - 1), no '/', ':' or
/// whitespace, not "." or "..". Checked before any command runs, so a typo
/// never reaches `tc` as some other argument.
pub fn check_device_name(dev: &str) -> Result<(), UplinkError> {
    let ok = !dev.is_empty()
        && dev.len() <= 15
        && dev != "."
        && dev != ".."
        && !dev.bytes().any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0);
    if ok {
        Ok(())
    } else {
        Err(UplinkError::DeviceName { dev: dev.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names() {
        for ok in ["eth0", "sfab12s", "veth-x_y.z", "a", "fifteen_chars15"] {
            assert!(check_device_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen_chars_16", "tab\t"] {
            assert!(matches!(check_device_name(bad), Err(UplinkError::DeviceName { .. })), "{bad:?}");
        }
    }
}
