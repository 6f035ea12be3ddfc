//! Calendar arithmetic (proleptic Gregorian, UTC) and the timestamp forms
//! the ingestion formats use, without a date-time dependency.

/// Whether `year` is a leap year.
pub(crate) fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Days in `month` (1–12) of `year`; 0 for an invalid month.
pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a date (Howard Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // [0, 399]
    let mp = (month + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + day - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of Unix seconds (UTC) (Hinnant's `civil_from_days`).
pub(crate) fn civil_from_secs(secs: i64) -> (i64, i64, i64) {
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `YYYY-MM-DD` of Unix seconds (UTC).
pub fn date_string(secs: i64) -> String {
    let (y, m, d) = civil_from_secs(secs);
    format!("{y:04}-{m:02}-{d:02}")
}

/// English month names, January first.
pub(crate) const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// English weekday names, Monday first.
pub(crate) const WEEKDAY_NAMES: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Whether `w` is a month's full name (any case).
pub(crate) fn is_month(w: &str) -> bool {
    MONTH_NAMES.iter().any(|m| m.eq_ignore_ascii_case(w))
}

/// Whether `w` is a month's or a weekday's full name (any case): calendar
/// words, never names or content keys.
pub(crate) fn is_calendar_word(w: &str) -> bool {
    is_month(w) || WEEKDAY_NAMES.iter().any(|d| d.eq_ignore_ascii_case(w))
}

/// `8 May 2023` of Unix seconds (UTC): the unambiguous form prompts show.
pub fn human_date(secs: i64) -> String {
    let (y, m, d) = civil_from_secs(secs);
    let month = usize::try_from(m - 1)
        .ok()
        .and_then(|i| MONTH_NAMES.get(i))
        .copied()
        .unwrap_or("?");
    format!("{d} {month} {y}")
}

fn num<T: std::str::FromStr>(s: &str, len: usize) -> Option<T> {
    (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Unix seconds of an ISO-8601 date or date-time: `YYYY-MM-DD`,
/// `YYYY-MM-DDTHH:MM[:SS[.fff]]` (a space may replace `T`), with `Z`, an
/// offset `±HH:MM`, or nothing (read as UTC).
pub fn parse_iso8601(s: &str) -> Option<i64> {
    let s = s.trim();
    if !s.is_ascii() {
        return None;
    }
    let (date, rest) = if s.len() > 10 { s.split_at(10) } else { (s, "") };
    let mut d = date.split('-');
    let (y, m, day): (i64, u32, u32) = (num(d.next()?, 4)?, num(d.next()?, 2)?, num(d.next()?, 2)?);
    if d.next().is_some() || !(1..=12).contains(&m) || day == 0 || day > days_in_month(y, m) {
        return None;
    }
    let mut secs = days_from_civil(y, m, day) * 86_400;
    if rest.is_empty() {
        return Some(secs);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (clock, offset) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let clock = clock.split('.').next()?;
    let mut c = clock.split(':');
    let (h, mi): (i64, i64) = (num(c.next()?, 2)?, num(c.next()?, 2)?);
    let sec: i64 = match c.next() {
        Some(x) => num(x, 2)?,
        None => 0,
    };
    if c.next().is_some() || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    secs += h * 3600 + mi * 60 + sec;
    match offset {
        "" | "Z" | "z" => Some(secs),
        o => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (oh, om) = o[1..].split_once(':').unwrap_or((&o[1..], "00"));
            let (oh, om): (i64, i64) = (num(oh, 2)?, num(om, 2)?);
            Some(secs - sign * (oh * 3600 + om * 60))
        }
    }
}

/// The earliest time a message may carry: 0000-01-01T00:00:00Z.
pub const MIN_TIME: i64 = -62_167_219_200;
/// The latest time a message may carry: 9999-12-31T23:59:59Z.
pub const MAX_TIME: i64 = 253_402_300_799;

/// Whether Unix seconds `t` lie in years 0–9999 ([`MIN_TIME`]..=[`MAX_TIME`]):
/// the times ingestion accepts, so that every later date computation
/// (calendar dates, relative dates, time gaps) stays far from overflow.
pub fn in_range(t: i64) -> bool {
    (MIN_TIME..=MAX_TIME).contains(&t)
}

/// Unix seconds of a timestamp in any form ingestion accepts: ISO 8601
/// or LoCoMo's `1:56 pm on 8 May, 2023`, in years 0–9999.
pub fn parse_time(s: &str) -> Option<i64> {
    parse_iso8601(s)
        .or_else(|| parse_locomo_date(s))
        .filter(|&t| in_range(t))
}

/// Parses a LoCoMo session timestamp such as `"1:56 pm on 8 May, 2023"` into Unix seconds, reading the time as UTC.
///
/// Accepted shape: `<h>:<mm> [am|pm] on <day> <month>[,] <yyyy>`, case-insensitive, where `<month>` is an English
/// month name or an unambiguous prefix of at least three letters (`"Sep"`, `"Sept"`), `<day>` may carry an ordinal
/// suffix (`"8th"`), and `"<month> <day>, <yyyy>"` order is also accepted. With `am`/`pm` the hour must be `1..=12`
/// (`12 am` is midnight, `12 pm` noon); without it the hour is read as 24-hour `0..=23`. Returns `None` for anything
/// else, including impossible dates such as 29 February of a non-leap year.
pub fn parse_locomo_date(s: &str) -> Option<i64> {
    let lower = s.trim().to_ascii_lowercase();
    let (time, date) = lower.split_once(" on ")?;
    let (hour, minute) = parse_clock(time.trim())?;
    let (year, month, day) = parse_calendar_date(date.trim())?;
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + i64::from(hour) * 3_600 + i64::from(minute) * 60)
}

/// `"1:56 pm"` / `"10:37am"` / `"13:05"` → (hour 0..=23, minute).
fn parse_clock(time: &str) -> Option<(u32, u32)> {
    let (clock, meridiem) = if let Some(c) = time.strip_suffix("am").or_else(|| time.strip_suffix("a.m.")) {
        (c.trim_end(), Some(false))
    } else if let Some(c) = time.strip_suffix("pm").or_else(|| time.strip_suffix("p.m.")) {
        (c.trim_end(), Some(true))
    } else {
        (time, None)
    };
    let (h, m) = clock.split_once(':')?;
    if h.len() > 2 || m.len() != 2 {
        return None;
    }
    let (hour, minute) = (parse_digits(h)?, parse_digits(m)?);
    if minute > 59 {
        return None;
    }
    let hour = match meridiem {
        None if hour <= 23 => hour,
        Some(pm) if (1..=12).contains(&hour) => (hour % 12) + if pm { 12 } else { 0 },
        _ => return None,
    };
    Some((hour, minute))
}

/// `"8 may, 2023"` / `"may 8, 2023"` → (year, month 1..=12, day).
fn parse_calendar_date(date: &str) -> Option<(i64, u32, u32)> {
    let tokens: Vec<&str> = date
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .collect();
    let [first, second, year] = tokens.as_slice() else {
        return None;
    };
    let (day, month) = if first.starts_with(|c: char| c.is_ascii_digit()) {
        (first, second)
    } else {
        (second, first)
    };
    let day = day.strip_suffix("st").or_else(|| day.strip_suffix("nd")).unwrap_or(day);
    let day = day.strip_suffix("rd").or_else(|| day.strip_suffix("th")).unwrap_or(day);
    if year.len() != 4 || day.len() > 2 {
        return None;
    }
    let year = i64::from(parse_digits(year)?);
    let month = month_number(month)?;
    let day = parse_digits(day)?;
    if day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some((year, month, day))
}

/// English month names in lower case, January first: what
/// [`month_number`] compares with ([`parse_locomo_date`] lowers its input
/// once, so no comparison folds case again).
const MONTHS_LOWER: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Month 1–12 of a lower-case month name or a prefix of it of three
/// letters or more (`jan`, `sept`).
fn month_number(name: &str) -> Option<u32> {
    if name.len() < 3 {
        return None;
    }
    MONTHS_LOWER
        .iter()
        .position(|m| m.starts_with(name))
        .and_then(|i| u32::try_from(i + 1).ok())
}

/// Parses a non-empty run of ASCII digits (no sign) that fits a `u32`.
pub(crate) fn parse_digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(date_string(0), "1970-01-01");
        assert_eq!(date_string(1_683_554_160), "2023-05-08");
        assert_eq!(human_date(1_683_554_160), "8 May 2023");
        assert_eq!(human_date(-86_400), "31 December 1969");
        assert_eq!(date_string(951_782_400), "2000-02-29");
        assert_eq!(date_string(-86_400), "1969-12-31");
        for d in [-700_000i64, -1, 0, 59, 60, 11_016, 19_000, 2_932_896] {
            let s = date_string(d * 86_400);
            assert_eq!(parse_iso8601(&s), Some(d * 86_400), "{s}");
        }
    }

    #[test]
    fn iso_forms() {
        assert_eq!(parse_iso8601("2023-05-08"), Some(1_683_504_000));
        assert_eq!(parse_iso8601("2023-05-08T13:56:00Z"), Some(1_683_554_160));
        assert_eq!(parse_iso8601("2023-05-08 13:56"), Some(1_683_554_160));
        assert_eq!(parse_iso8601("2023-05-08T15:56:00.250+02:00"), Some(1_683_554_160));
        assert_eq!(parse_iso8601("2023-05-08T08:56:00-05:00"), Some(1_683_554_160));
        for bad in [
            "",
            "2023-13-01",
            "2023-02-29",
            "2023-05-08T25:00",
            "08/05/2023",
            "2023-05-08X",
            "２０２３-05-08",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
        assert_eq!(parse_time("1:56 pm on 8 May, 2023"), Some(1_683_554_160));
    }

    #[test]
    fn dates_parse() {
        assert_eq!(parse_locomo_date("1:56 pm on 8 May, 2023"), Some(1_683_554_160));
        assert_eq!(parse_locomo_date("10:37 am on 27 June, 2023"), Some(1_687_862_220));
        assert_eq!(parse_locomo_date("  10:37 AM on 27 june, 2023 "), Some(1_687_862_220));
        assert_eq!(parse_locomo_date("10:37am on 27 Jun 2023"), Some(1_687_862_220));
        assert_eq!(parse_locomo_date("10:37 am on June 27th, 2023"), Some(1_687_862_220));
        assert_eq!(parse_locomo_date("10:37 on 27 June, 2023"), Some(1_687_862_220));
        assert_eq!(parse_locomo_date("12:00 am on 1 January, 1970"), Some(0));
        assert_eq!(parse_locomo_date("11:00 pm on 31 December, 1969"), Some(-3600));
        assert_eq!(parse_locomo_date("11:59 pm on 31 December, 2023"), Some(1_704_067_140));
    }

    #[test]
    fn month_names_and_prefixes_in_any_case() {
        for (i, m) in MONTH_NAMES.iter().enumerate() {
            assert_eq!(MONTHS_LOWER[i], m.to_ascii_lowercase());
            let n = i64::try_from(i + 1).unwrap();
            for cut in 3..=m.len() {
                for form in [
                    m[..cut].to_string(),
                    m[..cut].to_ascii_uppercase(),
                    m[..cut].to_ascii_lowercase(),
                ] {
                    let t = parse_locomo_date(&format!("9:05 am on 1 {form}, 2021")).unwrap();
                    assert_eq!(civil_from_secs(t).1, n, "{form}");
                }
            }
        }
        for bad in ["ma", "mayo", "junee", "sep.", "jan uary", "decembers"] {
            assert_eq!(parse_locomo_date(&format!("9:05 am on 1 {bad}, 2021")), None, "{bad}");
        }
    }

    #[test]
    fn dates_twelve_oclock() {
        // 12 am is midnight (start of the day), 12 pm is noon.
        assert_eq!(parse_locomo_date("12:19 am on 4 January, 2024"), Some(1_704_327_540));
        assert_eq!(parse_locomo_date("12:00 pm on 29 February, 2000"), Some(951_825_600));
        assert_eq!(
            parse_locomo_date("12:00 am on 29 February, 2000"),
            Some(951_825_600 - 12 * 3600)
        );
        assert_eq!(
            parse_locomo_date("1:00 am on 29 February, 2000"),
            Some(951_825_600 - 11 * 3600)
        );
        assert_eq!(
            parse_locomo_date("11:59 am on 29 February, 2000"),
            Some(951_825_600 - 60)
        );
        assert_eq!(parse_locomo_date("0:00 am on 1 May, 2023"), None);
        assert_eq!(parse_locomo_date("13:00 pm on 1 May, 2023"), None);
    }

    #[test]
    fn dates_leap_years() {
        assert_eq!(parse_locomo_date("12:05 am on 29 February, 2024"), Some(1_709_165_100));
        assert_eq!(
            parse_locomo_date("12:05 am on 1 March, 2024"),
            Some(1_709_165_100 + 86_400)
        );
        assert_eq!(parse_locomo_date("1:00 pm on 29 February, 2023"), None);
        assert_eq!(parse_locomo_date("1:00 pm on 29 February, 1900"), None);
        assert!(parse_locomo_date("1:00 pm on 29 February, 2000").is_some());
        assert_eq!(parse_locomo_date("1:00 pm on 31 April, 2023"), None);
        assert!(parse_locomo_date("1:00 pm on 30 April, 2023").is_some());
        // Every day of a leap and a common year is consecutive.
        for year in [2023_i64, 2024] {
            let mut expected = days_from_civil(year, 1, 1);
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(days_from_civil(year, month, day), expected);
                    expected += 1;
                }
            }
            assert_eq!(expected, days_from_civil(year + 1, 1, 1));
        }
    }

    #[test]
    fn dates_invalid() {
        for bad in [
            "",
            "on",
            "1:56 pm",
            "8 May, 2023",
            "1:56 pm on 8 May",
            "1:56 pm on 8 Mayo, 2023",
            "1:56 pm on 8 Ma, 2023",
            "1:56 pm on 0 May, 2023",
            "1:56 pm on 32 May, 2023",
            "1:60 pm on 8 May, 2023",
            "1:5 pm on 8 May, 2023",
            "24:00 on 8 May, 2023",
            "x:56 pm on 8 May, 2023",
            "1:56 xm on 8 May, 2023",
            "1:56 pm on 8 May, 23",
            "1:56 pm on 8 May, 2023 extra",
            "-1:56 pm on 8 May, 2023",
            "1:56 pm on +8 May, 2023",
            "sometime in spring",
        ] {
            assert_eq!(parse_locomo_date(bad), None, "{bad:?}");
        }
    }
}
