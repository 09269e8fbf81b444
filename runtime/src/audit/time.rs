//! UTC timestamps for audit records, without a date crate.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// The current UTC time as RFC 3339 with microseconds: `2026-11-22T03:11:01.123456Z`.
pub(crate) fn now_rfc3339() -> String {
    let (secs, micros) = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => (since.as_secs() as i64, since.subsec_micros()),
        // A clock set before 1970: count backwards so the text still names the right instant.
        Err(before) => {
            let before = before.duration();
            let micros = before.subsec_micros();
            let secs = -(before.as_secs() as i64);
            if micros == 0 {
                (secs, 0)
            } else {
                (secs - 1, 1_000_000 - micros)
            }
        }
    };
    format_rfc3339(secs, micros)
}

/// Formats seconds since the Unix epoch plus microseconds (below 1,000,000) as RFC 3339 UTC.
pub(crate) fn format_rfc3339(secs: i64, micros: u32) -> String {
    let days = secs.div_euclid(86_400);
    let second_of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        // More than four digits, or a sign: as `fmt` writes it, for clocks this far off.
        let mut text = String::with_capacity(32);
        let _ = write!(
            text,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60,
        );
        return text;
    }
    let mut text = Vec::with_capacity(27);
    digits(&mut text, year as u32, 4);
    text.push(b'-');
    digits(&mut text, month, 2);
    text.push(b'-');
    digits(&mut text, day, 2);
    text.push(b'T');
    digits(&mut text, (second_of_day / 3600) as u32, 2);
    text.push(b':');
    digits(&mut text, (second_of_day / 60 % 60) as u32, 2);
    text.push(b':');
    digits(&mut text, (second_of_day % 60) as u32, 2);
    text.push(b'.');
    digits(&mut text, micros, 6);
    text.push(b'Z');
    // Only ASCII digits and separators were written.
    String::from_utf8(text).unwrap_or_default()
}

/// `value` in decimal, zero-padded to `width` digits (`value` has at most `width` digits).
fn digits(out: &mut Vec<u8>, mut value: u32, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
///
/// Works in 400-year eras starting on March 1st, so that the leap day is the last day of its year and
/// needs no special case.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097); // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365; // [0, 399]
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100); // [0, 365]
    let shifted_month = (5 * day_of_year + 2) / 153; // [0, 11], March = 0
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day counted from 1970-01-01 of a proleptic Gregorian date: the inverse of
/// [`civil_from_days`].
#[cfg(any(feature = "policy-file", test))]
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400); // [0, 399]
    let shifted_month = i64::from((month + 9) % 12); // March = 0
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1; // [0, 365]
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Microseconds since the Unix epoch of a record's time as the log writes it
/// (`2026-11-22T03:11:01.123456Z`); `None` for any other text.
#[cfg(any(feature = "policy-file", test))]
pub(crate) fn micros_of_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 27 || bytes[26] != b'Z' {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        let part = text.get(from..to)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let separators = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ];
    if separators.iter().any(|&(at, c)| bytes[at] != c) {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month as u32, day as u32);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(seconds * 1_000_000 + number(20, 26)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every day of four centuries and a second of each: the text written is read back as the
    // instant it names.
    #[test]
    fn a_written_time_reads_back_as_its_instant() {
        for days in (-719_468_i64 / 4)..(146_097 * 2) {
            let secs = days * 86_400 + (days.rem_euclid(86_400));
            let micros = (days.rem_euclid(1_000_000)) as u32;
            let text = format_rfc3339(secs, micros);
            assert_eq!(
                micros_of_rfc3339(&text),
                Some(secs * 1_000_000 + i64::from(micros)),
                "{text}"
            );
        }
        for bad in [
            "2026-11-22T03:11:01.123456",
            "2026-11-22 03:11:01.123456Z",
            "2026-13-22T03:11:01.123456Z",
            "2026-11-22T03:11:01.12345aZ",
            "+026-11-22T03:11:01.123456Z",
        ] {
            assert_eq!(micros_of_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn known_instants() {
        let cases: [(i64, u32, &str); 14] = [
            (0, 0, "1970-01-01T00:00:00.000000Z"),
            (-86_400, 0, "1969-12-31T00:00:00.000000Z"),
            (-1, 999_999, "1969-12-31T23:59:59.999999Z"),
            (68_169_600, 0, "1972-02-29T00:00:00.000000Z"),
            (946_684_799, 999_999, "1999-12-31T23:59:59.999999Z"),
            (946_684_800, 0, "2000-01-01T00:00:00.000000Z"),
            (951_782_400, 1, "2000-02-29T00:00:00.000001Z"),
            (951_868_800, 0, "2000-03-01T00:00:00.000000Z"),
            (1_709_164_800, 0, "2024-02-29T00:00:00.000000Z"),
            (1_795_317_061, 123_456, "2026-11-22T03:11:01.123456Z"),
            // 2100 is not a leap year: February 28th is followed by March 1st.
            (4_107_542_400, 0, "2100-03-01T00:00:00.000000Z"),
            (253_402_300_799, 0, "9999-12-31T23:59:59.000000Z"),
            (253_402_300_800, 7, "10000-01-01T00:00:00.000007Z"),
            (-62_167_219_201, 0, "-001-12-31T23:59:59.000000Z"),
        ];
        for (secs, micros, expected) in cases {
            assert_eq!(format_rfc3339(secs, micros), expected, "{secs}.{micros}");
        }
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        // From 1600 to 2400: each day is the day after the one before, and only leap years have Feb 29.
        let month_len = |y: i64, m: u32| match m {
            2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut previous = civil_from_days(-135_141); // the day before 1600-01-01
        assert_eq!(previous, (1599, 12, 31));
        let mut leap_days = 0;
        for days in -135_140..157_000 {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=month_len(y, m)).contains(&d), "{y}-{m}-{d}");
            let (py, pm, pd) = previous;
            let last_of_month = pd == month_len(py, pm);
            let follows = (y == py && m == pm && d == pd + 1)
                || (last_of_month && y == py && m == pm + 1 && d == 1)
                || (last_of_month && pm == 12 && y == py + 1 && m == 1 && d == 1);
            assert!(follows, "{py}-{pm}-{pd} then {y}-{m}-{d}");
            leap_days += usize::from(m == 2 && d == 29);
            previous = (y, m, d);
        }
        assert_eq!(previous, (2399, 11, 7));
        // 1600..2400 has 200 years divisible by 4, minus 1700, 1800, 1900, 2100, 2200, 2300.
        assert_eq!(leap_days, 194);
    }

    #[test]
    fn now_has_the_documented_shape() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 27, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T' && now.as_bytes()[19] == b'.');
        assert!(now.as_str() > "2020");
    }
}
