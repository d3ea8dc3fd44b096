//! The gatekeeper at the database tier: a PostgreSQL wire-protocol (3.x) proxy that admits
//! transactions. This part: framing the byte stream ([`frame`]), reading the fields the
//! gate needs from the messages ([`message`]), and the request type of a statement
//! ([`reqtype`], over the SQL [`lexer`]).

pub mod frame;
pub mod lexer;
pub mod message;
pub mod reqtype;

pub use reqtype::{RequestType, TypeSource};
