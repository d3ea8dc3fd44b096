//! TPC-W's vocabularies and string rules: the 24 subjects, the 92 countries,
//! `DigSyl` (digits → syllables, used for user names, author names and search
//! strings), random a-strings, and civil-date arithmetic for the fixed epoch
//! the generator uses (so data is a pure function of the seed).

use rand::Rng;

/// The 24 item subjects of TPC-W clause 4.7.1.
pub const SUBJECTS: [&str; 24] = [
    "ARTS",
    "BIOGRAPHIES",
    "BUSINESS",
    "CHILDREN",
    "COMPUTERS",
    "COOKING",
    "HEALTH",
    "HISTORY",
    "HOME",
    "HUMOR",
    "LITERATURE",
    "MYSTERY",
    "NON-FICTION",
    "PARENTING",
    "POLITICS",
    "REFERENCE",
    "RELIGION",
    "ROMANCE",
    "SELF-HELP",
    "SCIENCE-NATURE",
    "SCIENCE-FICTION",
    "SPORTS",
    "YOUTH",
    "TRAVEL",
];

/// The 92 countries of TPC-W clause 4.7.1 (COUNTRY is a fixed-size table).
pub const COUNTRIES: [&str; 92] = [
    "United States",
    "United Kingdom",
    "Canada",
    "Germany",
    "France",
    "Japan",
    "Netherlands",
    "Italy",
    "Switzerland",
    "Australia",
    "Algeria",
    "Argentina",
    "Armenia",
    "Austria",
    "Azerbaijan",
    "Bahamas",
    "Bahrain",
    "Bangla Desh",
    "Barbados",
    "Belarus",
    "Belgium",
    "Bermuda",
    "Bolivia",
    "Botswana",
    "Brazil",
    "Bulgaria",
    "Cayman Islands",
    "Chad",
    "Chile",
    "China",
    "Christmas Island",
    "Colombia",
    "Croatia",
    "Cuba",
    "Cyprus",
    "Czech Republic",
    "Denmark",
    "Dominican Republic",
    "Eastern Caribbean",
    "Ecuador",
    "Egypt",
    "El Salvador",
    "Estonia",
    "Ethiopia",
    "Falkland Island",
    "Faroe Island",
    "Fiji",
    "Finland",
    "Gabon",
    "Gibraltar",
    "Greece",
    "Guam",
    "Hong Kong",
    "Hungary",
    "Iceland",
    "India",
    "Indonesia",
    "Iran",
    "Iraq",
    "Ireland",
    "Israel",
    "Jamaica",
    "Jordan",
    "Kazakhstan",
    "Kuwait",
    "Lebanon",
    "Luxembourg",
    "Malaysia",
    "Mexico",
    "Mauritius",
    "New Zealand",
    "Norway",
    "Pakistan",
    "Philippines",
    "Poland",
    "Portugal",
    "Romania",
    "Russia",
    "Saudi Arabia",
    "Singapore",
    "Slovakia",
    "South Africa",
    "South Korea",
    "Spain",
    "Sudan",
    "Sweden",
    "Taiwan",
    "Thailand",
    "Trinidad",
    "Turkey",
    "Venezuela",
    "Zambia",
];

/// Credit-card types accepted by CC_XACTS (the schema enforces this list).
pub const CC_TYPES: [&str; 5] = ["VISA", "MASTERCARD", "DISCOVER", "AMEX", "DINERS"];
/// Shipping types of ORDERS.O_SHIP_TYPE.
pub const SHIP_TYPES: [&str; 6] = ["AIR", "UPS", "FEDEX", "SHIP", "COURIER", "MAIL"];
/// Order states of ORDERS.O_STATUS.
pub const ORDER_STATUS: [&str; 4] = ["PROCESSING", "SHIPPED", "PENDING", "DENIED"];
/// Book bindings of ITEM.I_BACKING.
pub const BACKINGS: [&str; 5] = ["HARDBACK", "PAPERBACK", "USED", "AUDIO", "LIMITED-EDITION"];

const SYLLABLES: [&str; 10] = ["BA", "OG", "AL", "RI", "RE", "SE", "AT", "UL", "IN", "NG"];

/// TPC-W's DigSyl: each decimal digit of `n` becomes a two-letter syllable
/// (0 → BA, 1 → OG, …). Customer user names are `digsyl(c_id)`; author last
/// names and the browsers' search strings are DigSyl of random numbers, so
/// searches hit real rows.
pub fn digsyl(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() * 2);
    for d in digits.bytes() {
        out.push_str(SYLLABLES[usize::from(d - b'0')]);
    }
    out
}

/// A random string of letters and digits with a length in `min..=max`
/// (TPC-W's "a-string"; no characters that COPY's text format would escape).
pub fn astring<R: Rng>(rng: &mut R, min: usize, max: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let len = rng.gen_range(min..=max);
    (0..len).map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())])).collect()
}

/// A random string of decimal digits of exactly `len` characters.
pub fn nstring<R: Rng>(rng: &mut R, len: usize) -> String {
    (0..len).map(|_| char::from(b'0' + rng.gen_range(0..10u8))).collect()
}

/// Random words separated by spaces, `min..=max` characters in total, for
/// descriptions and comments.
pub fn text<R: Rng>(rng: &mut R, min: usize, max: usize) -> String {
    let target = rng.gen_range(min..=max);
    let mut out = String::with_capacity(target + 12);
    while out.len() < target {
        if !out.is_empty() {
            out.push(' ');
        }
        let word = astring(rng, 2, 10);
        out.push_str(&word);
    }
    out.truncate(target);
    out.trim_end().to_string()
}

/// Days since 1970-01-01 of the generator's epoch, 2025-01-01: every
/// generated date is an offset from it, so the data depends on the seed only.
pub const EPOCH_DAYS: i64 = 20_089;

/// `YYYY-MM-DD` for a day number counted from 1970-01-01 (proleptic
/// Gregorian; Howard Hinnant's civil-from-days algorithm).
pub fn date_string(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let mut year = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    if month <= 2 {
        year += 1;
    }
    format!("{year:04}-{month:02}-{day:02}")
}

/// `YYYY-MM-DD HH:MM:SS` for a second count from 1970-01-01.
pub fn timestamp_string(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let rem = seconds.rem_euclid(86_400);
    format!("{} {:02}:{:02}:{:02}", date_string(days), rem / 3_600, rem % 3_600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digsyl_maps_each_digit() {
        assert_eq!(digsyl(0), "BA");
        assert_eq!(digsyl(1), "OG");
        assert_eq!(digsyl(1029), "OGBAALNG");
    }

    #[test]
    fn dates_match_the_calendar() {
        assert_eq!(date_string(0), "1970-01-01");
        assert_eq!(date_string(EPOCH_DAYS), "2025-01-01");
        assert_eq!(date_string(EPOCH_DAYS + 59), "2025-03-01");
        assert_eq!(date_string(11_016), "2000-02-29");
        assert_eq!(timestamp_string(EPOCH_DAYS * 86_400 + 3_661), "2025-01-01 01:01:01");
    }

    #[test]
    fn lists_have_tpcw_sizes() {
        assert_eq!(SUBJECTS.len(), 24);
        assert_eq!(COUNTRIES.len(), 92);
        let mut unique = COUNTRIES.to_vec();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 92);
    }

    #[test]
    fn strings_respect_length_bounds() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..200 {
            let s = astring(&mut rng, 3, 9);
            assert!((3..=9).contains(&s.len()));
            let t = text(&mut rng, 20, 100);
            assert!(t.len() <= 100 && t.len() >= 15, "{t:?}");
            assert!(!t.contains('\t') && !t.contains('\\'));
        }
    }
}
