//! The wire-level HTTP/1.1 pieces, each in its own module: request parsing
//! ([`parse`]), response-head writing ([`response`]), conditional and range
//! requests ([`precondition`]), chunked request bodies ([`chunked`]), and cached
//! dates ([`date`]).

pub mod chunked;
pub mod date;
pub mod parse;
pub mod precondition;
pub mod response;

/// A response status: code and reason phrase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: u16,
    pub reason: &'static str,
}

impl Status {
    pub const OK: Status = Status { code: 200, reason: "OK" };
    pub const PARTIAL_CONTENT: Status = Status { code: 206, reason: "Partial Content" };
    pub const MOVED_PERMANENTLY: Status = Status { code: 301, reason: "Moved Permanently" };
    pub const NOT_MODIFIED: Status = Status { code: 304, reason: "Not Modified" };
    pub const PERMANENT_REDIRECT: Status = Status { code: 308, reason: "Permanent Redirect" };
    pub const BAD_REQUEST: Status = Status { code: 400, reason: "Bad Request" };
    pub const FORBIDDEN: Status = Status { code: 403, reason: "Forbidden" };
    pub const NOT_FOUND: Status = Status { code: 404, reason: "Not Found" };
    pub const METHOD_NOT_ALLOWED: Status = Status { code: 405, reason: "Method Not Allowed" };
    pub const REQUEST_TIMEOUT: Status = Status { code: 408, reason: "Request Timeout" };
    pub const LENGTH_REQUIRED: Status = Status { code: 411, reason: "Length Required" };
    pub const PRECONDITION_FAILED: Status = Status { code: 412, reason: "Precondition Failed" };
    pub const CONTENT_TOO_LARGE: Status = Status { code: 413, reason: "Content Too Large" };
    pub const URI_TOO_LONG: Status = Status { code: 414, reason: "URI Too Long" };
    pub const RANGE_NOT_SATISFIABLE: Status = Status { code: 416, reason: "Range Not Satisfiable" };
    pub const MISDIRECTED_REQUEST: Status = Status { code: 421, reason: "Misdirected Request" };
    pub const HEADER_FIELDS_TOO_LARGE: Status = Status { code: 431, reason: "Request Header Fields Too Large" };
    pub const INTERNAL_SERVER_ERROR: Status = Status { code: 500, reason: "Internal Server Error" };
    pub const NOT_IMPLEMENTED: Status = Status { code: 501, reason: "Not Implemented" };
    pub const SERVICE_UNAVAILABLE: Status = Status { code: 503, reason: "Service Unavailable" };
    pub const VERSION_NOT_SUPPORTED: Status = Status { code: 505, reason: "HTTP Version Not Supported" };

    pub fn is_error(self) -> bool {
        self.code >= 400
    }
}
