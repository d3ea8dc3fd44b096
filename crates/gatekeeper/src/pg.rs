//! The gatekeeper at the database tier: a PostgreSQL wire-protocol (3.x) proxy that admits
//! transactions. This part: framing the byte stream ([`frame`]), reading the fields the
//! gate needs from the messages ([`message`]), the request type of a statement
//! ([`reqtype`], over the SQL [`lexer`]) and the transaction tracker of a connection
//! ([`txn`]).

pub mod frame;
pub mod lexer;
pub mod message;
pub mod reqtype;
pub mod txn;

pub use reqtype::{RequestType, TypeSource};
