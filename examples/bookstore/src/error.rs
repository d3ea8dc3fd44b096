//! The bookstore's error type: one enum for generator, server and probe, so a
//! failure names what went wrong and where, and the HTTP layer can map each
//! kind to a status code.

use std::fmt;

/// Everything that can go wrong in the bookstore.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A query or transaction failed in PostgreSQL (or the connection broke).
    #[error("database error in {context}: {source}")]
    Db {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// No pooled connection became free within the pool's wait limit.
    #[error("database connection pool: {0}")]
    Pool(String),
    /// A request parameter is missing or malformed (HTTP 400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The requested row does not exist (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    /// The database rejected a write because it violates a constraint
    /// (e.g. an unknown credit-card type); the transaction was rolled back.
    #[error("rejected by the database in {context}: {message}")]
    Rejected { context: &'static str, message: String },
    /// Invalid configuration or command-line input.
    #[error("{0}")]
    Config(String),
    /// I/O on a socket or file.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps a PostgreSQL error, classifying constraint violations (which the
    /// client caused) apart from everything else (which the server caused).
    pub fn db(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Error {
        move |source| {
            if let Some(db) = source.as_db_error() {
                let code = db.code().code();
                // Class 23: integrity constraint violation.
                if code.starts_with("23") {
                    return Error::Rejected { context, message: db.message().to_string() };
                }
            }
            Error::Db { context, source }
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Error::BadRequest(_) | Error::Rejected { .. } => 400,
            Error::NotFound(_) => 404,
            Error::Pool(_) => 503,
            Error::Db { .. } | Error::Config(_) | Error::Io { .. } => 500,
        }
    }

    pub fn io(context: impl fmt::Display) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.to_string();
        move |source| Error::Io { context, source }
    }
}

/// The bookstore's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
