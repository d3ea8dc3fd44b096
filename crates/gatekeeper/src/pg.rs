//! The gatekeeper at the database tier: a PostgreSQL wire-protocol (3.x) proxy that admits
//! transactions. This part: framing the byte stream ([`frame`]) and reading the fields the
//! gate needs from the messages ([`message`]).

pub mod frame;
pub mod message;
