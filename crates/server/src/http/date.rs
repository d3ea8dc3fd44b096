//! Dates formatted once per second per thread: the `Date` header (IMF-fixdate),
//! the Combined Log Format timestamp and RFC 3339 for JSON logs.
//!
//! Every response needs a `Date`; formatting it per request would be a
//! measurable share of a small response's cost, so each worker thread keeps the
//! strings for the current second and reformats only when the second changes.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// The three renderings of one second.
#[derive(Clone)]
pub struct Stamp {
    unix_secs: u64,
    /// `Sun, 06 Nov 1994 08:49:37 GMT`
    pub http: [u8; 29],
    /// `06/Nov/1994:08:49:37 +0000`
    pub clf: [u8; 26],
    /// `1994-11-06T08:49:37Z`
    pub rfc3339: [u8; 20],
}

thread_local! {
    static CACHE: RefCell<Option<Stamp>> = const { RefCell::new(None) };
}

/// Seconds since the epoch now.
pub fn unix_now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Calls `f` with the stamp of the current second.
pub fn with_now<R>(f: impl FnOnce(&Stamp) -> R) -> R {
    let now = unix_now_secs();
    CACHE.with(|cell| {
        let mut cache = cell.borrow_mut();
        if cache.as_ref().is_none_or(|s| s.unix_secs != now) {
            *cache = Some(Stamp::new(now));
        }
        f(cache.as_ref().expect("just filled"))
    })
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn put2(out: &mut [u8], n: u32) {
    out[0] = b'0' + (n / 10 % 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

fn put4(out: &mut [u8], n: i64) {
    let n = n.clamp(0, 9999) as u32;
    put2(&mut out[0..2], n / 100);
    put2(&mut out[2..4], n % 100);
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` for any time (e.g. `Last-Modified`).
pub fn http_date(unix_secs: u64) -> [u8; 29] {
    Stamp::new(unix_secs).http
}

impl Stamp {
    pub fn new(unix_secs: u64) -> Stamp {
        let days = (unix_secs / 86_400) as i64;
        let secs_of_day = (unix_secs % 86_400) as u32;
        let (h, mi, s) = (secs_of_day / 3_600, secs_of_day / 60 % 60, secs_of_day % 60);
        let (y, mo, d) = civil_from_days(days);
        let month = MONTHS[(mo - 1) as usize];

        let mut http = *b"Thu, 01 Jan 1970 00:00:00 GMT";
        http[0..3].copy_from_slice(DAYS[(days % 7) as usize]);
        put2(&mut http[5..7], d);
        http[8..11].copy_from_slice(month);
        put4(&mut http[12..16], y);
        put2(&mut http[17..19], h);
        put2(&mut http[20..22], mi);
        put2(&mut http[23..25], s);

        let mut clf = *b"01/Jan/1970:00:00:00 +0000";
        put2(&mut clf[0..2], d);
        clf[3..6].copy_from_slice(month);
        put4(&mut clf[7..11], y);
        put2(&mut clf[12..14], h);
        put2(&mut clf[15..17], mi);
        put2(&mut clf[18..20], s);

        let mut rfc3339 = *b"1970-01-01T00:00:00Z";
        put4(&mut rfc3339[0..4], y);
        put2(&mut rfc3339[5..7], mo);
        put2(&mut rfc3339[8..10], d);
        put2(&mut rfc3339[11..13], h);
        put2(&mut rfc3339[14..16], mi);
        put2(&mut rfc3339[17..19], s);

        Stamp { unix_secs, http, clf, rfc3339 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn matches_httpdate_and_known_values() {
        let s = Stamp::new(784_111_777);
        assert_eq!(&s.http, b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&s.clf, b"06/Nov/1994:08:49:37 +0000");
        assert_eq!(&s.rfc3339, b"1994-11-06T08:49:37Z");
        for secs in [0u64, 951_782_400, 1_709_164_800, 4_102_444_799, 1_234_567_890] {
            let want = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            assert_eq!(std::str::from_utf8(&Stamp::new(secs).http).unwrap(), want, "{secs}");
        }
    }
}
