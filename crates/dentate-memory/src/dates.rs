//! Relative dates: finds expressions such as "yesterday", "last Friday",
//! "two weeks ago", "next month", "in two days", "this weekend" or "last
//! May" in a text and resolves them against the day the text was said
//! (UTC, proleptic Gregorian calendar, weeks Monday to Sunday).
//!
//! [`find`] returns every expression it recognises with its byte span and
//! what it resolves to ([`When`]: a day, a week, a weekend, a month or a
//! year); [`annotate`] appends the resolutions to a text, e.g. `I went
//! there yesterday. (yesterday = 7 May 2023)`. PREMem uses it for the time
//! of its offline fragments (§3.1: relative expressions become absolute
//! dates); HEMA and Nemori can annotate their items with it
//! (`resolve_dates` in their settings).
//!
//! The rules, where English is ambiguous:
//! - `last <weekday>` is the most recent such day strictly before the
//!   reference day; `this <weekday>` the first on or after it; `next
//!   <weekday>` the first strictly after it; `on <weekday>` is read as
//!   `last` in a past-tense sentence and as `this` otherwise.
//! - `last week` / `this week` / `next week` are the weeks before, of and
//!   after the reference day's week; weekends likewise (the Saturday and
//!   Sunday of that week); `this past weekend` is `last weekend`.
//! - `N days ago` is a day; `N weeks ago` the week holding the day 7·N days
//!   back; `N months ago` and `N years ago` the calendar month and year;
//!   `in N days` (and `N days from now`) likewise forward, but only in a
//!   sentence that speaks of the future ("I did it in two days" is a
//!   duration).
//! - `last May` is the most recent May before the reference month, `next
//!   May` the first after it, `this May` that of the reference year, `in
//!   May` the most recent one (past tense) or the next one (otherwise).
//!   Month names count only when capitalised ("may" is a verb).
//! - Explicit dates (`5 May 2023`, `May 5th`, `March 2022`) are found too;
//!   one without a year takes the year that puts it in the past (or, in a
//!   future sentence, the future) of the reference day, and is marked
//!   relative.
//! - Weekday abbreviations (`Fri`, `Thurs`) count only when capitalised.
//! - Numbers are digits or the words `a`/`an`/`one` … `twelve`, `fifteen`,
//!   `twenty`, `thirty` and `a couple of`. Vague phrases ("the other day",
//!   "recently", "a few weeks ago") are not resolved.
//!
//! The tense of a sentence ([`tense`]) is a word test: future when it
//! holds `will`, `'ll`, `gonna`, `going to`, `plan(s/ning) to`, `hope to`,
//! `next`, `tomorrow`, `soon`, `upcoming`, `can't wait` or `looking
//! forward`; past otherwise (conversations mostly recount). For the
//! ambiguous date forms a present progressive ("is moving … in June")
//! also reads as future.

use crate::time::{MONTH_NAMES, WEEKDAY_NAMES, civil_from_secs, days_from_civil, days_in_month, human_date};
use unicode_segmentation::UnicodeSegmentation;

/// What a date expression resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum When {
    /// One day, as days since 1970-01-01.
    Day(i64),
    /// The Monday-to-Sunday week starting on this day (a Monday).
    Week(i64),
    /// The weekend starting on this day (a Saturday).
    Weekend(i64),
    /// A calendar month.
    Month {
        /// Year.
        year: i64,
        /// Month, 1–12.
        month: u32,
    },
    /// A calendar year.
    Year(i64),
}

impl When {
    /// The first day it covers (days since 1970-01-01).
    pub fn first_day(&self) -> i64 {
        match *self {
            When::Day(d) | When::Week(d) | When::Weekend(d) => d,
            When::Month { year, month } => days_from_civil(year, month, 1),
            When::Year(y) => days_from_civil(y, 1, 1),
        }
    }

    /// Unix seconds of the start of its first day.
    pub fn secs(&self) -> i64 {
        self.first_day() * 86_400
    }

    /// How prompts show it: `7 May 2023`, `the week of 1 May 2023`, `the
    /// weekend of 6 May 2023`, `May 2023`, `2023`.
    pub fn render(&self) -> String {
        match *self {
            When::Day(d) => human_date(d * 86_400),
            When::Week(d) => format!("the week of {}", human_date(d * 86_400)),
            When::Weekend(d) => format!("the weekend of {}", human_date(d * 86_400)),
            When::Month { year, month } => {
                let name = MONTH_NAMES.get(month as usize - 1).copied().unwrap_or("?");
                format!("{name} {year}")
            }
            When::Year(y) => y.to_string(),
        }
    }
}

/// A date expression found in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mention {
    /// Byte offset of its first character.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
    /// What it resolves to.
    pub when: When,
    /// Whether it needed the reference date (`yesterday`, `May 5`); an
    /// explicit date with its year (`5 May 2023`) is not relative.
    pub relative: bool,
}

impl Mention {
    /// The expression as written in `text` (the text it was found in).
    pub fn phrase<'a>(&self, text: &'a str) -> &'a str {
        text.get(self.start..self.end).unwrap_or("")
    }
}

/// Whether a sentence speaks of the past or of the future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tense {
    /// What happened (the default).
    Past,
    /// What will or may happen: plans, hopes, schedules.
    Future,
}

/// A word of a text: its byte span, its lower-case form, and whether it
/// starts with a capital letter.
#[derive(Debug, Clone)]
struct Tok {
    start: usize,
    end: usize,
    lower: String,
    capital: bool,
}

/// Alphanumeric runs (an apostrophe splits a word: "I'll" is `i`, `ll`).
fn tokens(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let w = &text[s..i];
                out.push(Tok {
                    start: s,
                    end: i,
                    lower: w.to_lowercase(),
                    capital: w.chars().next().is_some_and(char::is_uppercase),
                });
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// The tense of a sentence (see the module notes).
pub fn tense(sentence: &str) -> Tense {
    tense_of(&tokens(sentence))
}

fn tense_of(toks: &[Tok]) -> Tense {
    let w = |i: usize| toks.get(i).map_or("", |t| t.lower.as_str());
    for i in 0..toks.len() {
        let future = match w(i) {
            "will" | "ll" | "gonna" | "tomorrow" | "soon" | "upcoming" | "next" => true,
            "going" | "plan" | "plans" | "planning" | "hope" | "hoping" => w(i + 1) == "to",
            "can" => w(i + 1) == "t" && w(i + 2) == "wait",
            "cannot" => w(i + 1) == "wait",
            "looking" => w(i + 1) == "forward",
            _ => false,
        };
        if future {
            return Tense::Future;
        }
    }
    Tense::Past
}

/// Adjectives in -ing that follow "is" without making a progressive.
const ING_ADJECTIVES: &[&str] = &[
    "amazing",
    "interesting",
    "exciting",
    "boring",
    "relaxing",
    "inspiring",
    "loving",
    "caring",
    "charming",
    "stunning",
    "fascinating",
    "surprising",
    "annoying",
    "challenging",
    "rewarding",
    "refreshing",
    "touching",
    "thing",
    "something",
    "nothing",
    "everything",
    "anything",
];

/// Whether a sentence holds a present progressive (`am|is|are|'m|'re` +
/// a verb in -ing).
fn progressive(toks: &[Tok]) -> bool {
    toks.windows(2).any(|w| {
        matches!(w[0].lower.as_str(), "am" | "is" | "are" | "m" | "re")
            && w[1].lower.len() >= 5
            && w[1].lower.ends_with("ing")
            && !ING_ADJECTIVES.contains(&w[1].lower.as_str())
    })
}

/// A count written as digits or a word; returns the value and the tokens
/// it took.
fn number(toks: &[Tok], i: usize) -> Option<(i64, usize)> {
    let w = toks.get(i)?.lower.as_str();
    if w == "a" && toks.get(i + 1).is_some_and(|t| t.lower == "couple") {
        let of = usize::from(toks.get(i + 2).is_some_and(|t| t.lower == "of"));
        return Some((2, 2 + of));
    }
    let n = match w {
        "a" | "an" | "one" => 1,
        "two" => 2,
        "three" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        "eleven" => 11,
        "twelve" => 12,
        "fifteen" => 15,
        "twenty" => 20,
        "thirty" => 30,
        d if (1..=3).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()) => d.parse().ok()?,
        _ => return None,
    };
    (n > 0).then_some((n, 1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Day,
    Week,
    Month,
    Year,
}

fn unit(w: &str) -> Option<Unit> {
    match w {
        "day" | "days" => Some(Unit::Day),
        "week" | "weeks" => Some(Unit::Week),
        "month" | "months" => Some(Unit::Month),
        "year" | "years" => Some(Unit::Year),
        _ => None,
    }
}

/// Monday = 0 … Sunday = 6 of a day since 1970-01-01 (a Thursday).
fn weekday(day: i64) -> i64 {
    (day + 3).rem_euclid(7)
}

/// Monday = 0 … Sunday = 6 of a weekday name; its abbreviation (`Fri`,
/// `Thurs`) counts only when capitalised (`capital`), "sun" being a word.
fn weekday_index(w: &str, capital: bool) -> Option<i64> {
    let short: [&[&str]; 7] = [
        &["mon"],
        &["tue", "tues"],
        &["wed"],
        &["thu", "thur", "thurs"],
        &["fri"],
        &["sat"],
        &["sun"],
    ];
    WEEKDAY_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(w))
        .or_else(|| {
            if capital {
                short.iter().position(|s| s.contains(&w))
            } else {
                None
            }
        })
        .map(|i| i as i64)
}

/// Month 1–12 of a month name (or its usual three- or four-letter form).
fn month_index(w: &str) -> Option<u32> {
    let short = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    MONTH_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(w))
        .or_else(|| short.iter().position(|s| *s == w))
        .or_else(|| (w == "sept").then_some(8))
        .map(|i| i as u32 + 1)
}

/// (year, month) `n` months after (`n` may be negative).
fn add_months(year: i64, month: u32, n: i64) -> (i64, u32) {
    let total = year * 12 + i64::from(month) - 1 + n;
    (total.div_euclid(12), total.rem_euclid(12) as u32 + 1)
}

/// The reference day's calendar fields.
struct Reference {
    day: i64,
    year: i64,
    month: u32,
    monday: i64,
}

impl Reference {
    fn new(said_at: i64) -> Self {
        let day = said_at.div_euclid(86_400);
        let (year, month, _) = civil_from_secs(said_at);
        Reference {
            day,
            year,
            month: month as u32,
            monday: day - weekday(day),
        }
    }

    /// `n` units from the reference day (negative: back).
    fn offset(&self, u: Unit, n: i64) -> When {
        match u {
            Unit::Day => When::Day(self.day + n),
            Unit::Week => When::Week(self.monday + 7 * n),
            Unit::Month => {
                let (year, month) = add_months(self.year, self.month, n);
                When::Month { year, month }
            }
            Unit::Year => When::Year(self.year + n),
        }
    }

    /// Weekday `wd` (Monday = 0) by `rule`: `last`, `this` or `next`.
    fn weekday(&self, wd: i64, rule: &str) -> When {
        let today = weekday(self.day);
        let (back, ahead) = ((today - wd).rem_euclid(7), (wd - today).rem_euclid(7));
        When::Day(match rule {
            "last" => self.day - if back == 0 { 7 } else { back },
            "next" => self.day + if ahead == 0 { 7 } else { ahead },
            _ => self.day + ahead,
        })
    }

    /// Month `m` by `rule`: `last`, `next`, `this`, or `in` (past or
    /// future by `tense`).
    fn month(&self, m: u32, rule: &str, tense: Tense) -> When {
        let year = match (rule, tense) {
            ("last", _) => self.year - i64::from(m >= self.month),
            ("next", _) => self.year + i64::from(m <= self.month),
            ("this", _) => self.year,
            (_, Tense::Past) => self.year - i64::from(m > self.month),
            (_, Tense::Future) => self.year + i64::from(m < self.month),
        };
        When::Month { year, month: m }
    }

    /// Day `d` of month `m` without a year: the year that puts it on or
    /// before the reference day (past) or on or after it (future).
    /// A day that exists only in leap years (29 February) goes back or
    /// forward to the nearest one.
    fn day_of_month(&self, m: u32, d: u32, tense: Tense) -> Option<When> {
        let step = match tense {
            Tense::Past => -1,
            Tense::Future => 1,
        };
        let mut year = self.year;
        for _ in 0..9 {
            if d >= 1 && d <= days_in_month(year, m) {
                let day = days_from_civil(year, m, d);
                let fits = match tense {
                    Tense::Past => day <= self.day,
                    Tense::Future => day >= self.day,
                };
                if fits {
                    return Some(When::Day(day));
                }
            }
            year += step;
        }
        None
    }
}

/// A day of the month: `5`, `5th`, `21st`.
fn day_number(w: &str) -> Option<u32> {
    let digits = w
        .strip_suffix("st")
        .or_else(|| w.strip_suffix("nd"))
        .or_else(|| w.strip_suffix("rd"))
        .or_else(|| w.strip_suffix("th"))
        .unwrap_or(w);
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

/// A four-digit year from 1000 to 2999.
fn year_number(w: &str) -> Option<i64> {
    (w.len() == 4 && w.bytes().all(|b| b.is_ascii_digit()))
        .then(|| w.parse().ok())
        .flatten()
        .filter(|y| (1000..3000).contains(y))
}

/// One match at token `i`: what it resolves to, tokens taken, relative.
type Match = (When, usize, bool);

/// The expression starting at token `i` of a sentence, if any.
fn match_at(toks: &[Tok], i: usize, r: &Reference, tense: Tense) -> Option<Match> {
    let w = |j: usize| toks.get(j).map_or("", |t| t.lower.as_str());
    let cap = |j: usize| toks.get(j).is_some_and(|t| t.capital);
    // Fixed phrases.
    let (skip_the, rest) = if w(i) == "the" { (1, i + 1) } else { (0, i) };
    if w(rest) == "day" && w(rest + 2) == "yesterday" && w(rest + 1) == "before" {
        return Some((When::Day(r.day - 2), skip_the + 3, true));
    }
    if w(rest) == "day" && w(rest + 2) == "tomorrow" && w(rest + 1) == "after" {
        return Some((When::Day(r.day + 2), skip_the + 3, true));
    }
    match w(i) {
        "yesterday" => return Some((When::Day(r.day - 1), 1, true)),
        "today" | "tonight" => return Some((When::Day(r.day), 1, true)),
        "tomorrow" => return Some((When::Day(r.day + 1), 1, true)),
        _ => {}
    }
    // N units ago / in N units / N units from now.
    if let Some((n, took)) = number(toks, i)
        && let Some(u) = unit(w(i + took))
    {
        if w(i + took + 1) == "ago" {
            return Some((r.offset(u, -n), took + 2, true));
        }
        if w(i + took + 1) == "from" && w(i + took + 2) == "now" {
            return Some((r.offset(u, n), took + 3, true));
        }
    }
    if w(i) == "in"
        && tense == Tense::Future
        && let Some((n, took)) = number(toks, i + 1)
        && let Some(u) = unit(w(i + 1 + took))
        && w(i + 2 + took) != "ago"
    {
        return Some((r.offset(u, n), took + 2, true));
    }
    // last / this / next + a unit, a weekday or a month.
    let (rule, at) = match w(i) {
        "this" if w(i + 1) == "past" => ("last", i + 2),
        "last" => ("last", i + 1),
        "this" => ("this", i + 1),
        "next" | "coming" => ("next", i + 1),
        "on" => ("on", i + 1),
        "in" => ("in", i + 1),
        _ => ("", i),
    };
    if !rule.is_empty() {
        let took = at - i + 1;
        let sign = match rule {
            "last" => -1,
            "next" => 1,
            _ => 0,
        };
        match w(at) {
            "night" if rule == "last" => return Some((When::Day(r.day - 1), took, true)),
            "morning" | "afternoon" | "evening" if rule == "this" => return Some((When::Day(r.day), took, true)),
            "weekend" if rule != "on" && rule != "in" => {
                return Some((When::Weekend(r.monday + 5 + 7 * sign), took, true));
            }
            u @ ("week" | "month" | "year") if rule != "on" && rule != "in" => {
                return Some((r.offset(unit(u)?, sign), took, true));
            }
            _ => {}
        }
        if let Some(wd) = weekday_index(w(at), cap(at))
            && rule != "in"
        {
            let rule = match (rule, tense) {
                ("on", Tense::Past) => "last",
                ("on", Tense::Future) => "this",
                (r, _) => r,
            };
            return Some((r.weekday(wd, rule), took, true));
        }
        if rule != "on"
            && cap(at)
            && let Some(m) = month_index(w(at))
            && w(at).len() >= 3
        {
            // "in May 2021" is explicit; "May 5" is handled below.
            if let Some(y) = year_number(w(at + 1)) {
                return Some((When::Month { year: y, month: m }, took + 1, false));
            }
            if day_number(w(at + 1)).is_none() {
                return Some((r.month(m, rule, tense), took, true));
            }
        }
    }
    // Explicit dates: "May 5[, 2023]", "5[th] [of] May [2023]", "May 2023".
    if cap(i)
        && let Some(m) = month_index(w(i))
        && w(i).len() >= 3
    {
        if let Some(d) = day_number(w(i + 1)) {
            return match year_number(w(i + 2)) {
                Some(y) => (d <= days_in_month(y, m)).then(|| (When::Day(days_from_civil(y, m, d)), 3, false)),
                None => r.day_of_month(m, d, tense).map(|when| (when, 2, true)),
            };
        }
        if let Some(y) = year_number(w(i + 1)) {
            return Some((When::Month { year: y, month: m }, 2, false));
        }
    }
    if let Some(d) = day_number(w(i)) {
        let of = usize::from(w(i + 1) == "of");
        let at = i + 1 + of;
        if cap(at)
            && let Some(m) = month_index(w(at))
            && w(at).len() >= 3
        {
            return match year_number(w(at + 1)) {
                Some(y) => (d <= days_in_month(y, m)).then(|| (When::Day(days_from_civil(y, m, d)), 3 + of, false)),
                None => r.day_of_month(m, d, tense).map(|when| (when, 2 + of, true)),
            };
        }
    }
    None
}

/// Every date expression of `text` resolved against `said_at` (Unix
/// seconds), in order, without overlaps. Sentences are read one at a time
/// (the tense of each decides ambiguous forms).
pub fn find(text: &str, said_at: i64) -> Vec<Mention> {
    let r = Reference::new(said_at);
    let mut out = Vec::new();
    for (offset, sentence) in text.split_sentence_bound_indices() {
        let toks = tokens(sentence);
        // A present progressive with a date is a plan ("Clara is moving to
        // Porto in June").
        let tense = if progressive(&toks) {
            Tense::Future
        } else {
            tense_of(&toks)
        };
        let mut i = 0;
        while i < toks.len() {
            match match_at(&toks, i, &r, tense) {
                Some((when, took, relative)) if took > 0 => {
                    let last = &toks[(i + took - 1).min(toks.len() - 1)];
                    out.push(Mention {
                        start: offset + toks[i].start,
                        end: offset + last.end,
                        when,
                        relative,
                    });
                    i += took;
                }
                _ => i += 1,
            }
        }
    }
    out
}

/// `text` with the resolution of each relative expression appended, e.g.
/// `I went yesterday. (yesterday = 7 May 2023)`; `text` unchanged when it
/// has none. The original text stays a prefix of the result.
pub fn annotate(text: &str, said_at: i64) -> String {
    let parts: Vec<String> = find(text, said_at)
        .iter()
        .filter(|m| m.relative)
        .map(|m| format!("{} = {}", m.phrase(text), m.when.render()))
        .collect();
    if parts.is_empty() {
        text.to_string()
    } else {
        format!("{text} ({})", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_iso8601;

    /// Unix seconds of noon on an ISO date.
    fn at(date: &str) -> i64 {
        parse_iso8601(date).expect("date") + 12 * 3600
    }

    fn day(date: &str) -> When {
        When::Day(parse_iso8601(date).expect("date") / 86_400)
    }

    fn week(monday: &str) -> When {
        let d = parse_iso8601(monday).expect("date") / 86_400;
        assert_eq!(weekday(d), 0, "{monday} is a Monday");
        When::Week(d)
    }

    fn weekend(saturday: &str) -> When {
        let d = parse_iso8601(saturday).expect("date") / 86_400;
        assert_eq!(weekday(d), 5, "{saturday} is a Saturday");
        When::Weekend(d)
    }

    fn month(year: i64, month: u32) -> When {
        When::Month { year, month }
    }

    /// The single expression of `text` said on `said`.
    fn one(text: &str, said: &str) -> (String, When) {
        let found = find(text, at(said));
        assert_eq!(found.len(), 1, "{text:?} on {said}: {found:?}");
        (found[0].phrase(text).to_string(), found[0].when)
    }

    #[test]
    fn relative_days_cross_month_year_and_leap_boundaries() {
        // 2024 is a leap year, 2023 and 1900 are not, 2000 is.
        let table = [
            ("I went there yesterday.", "2023-05-08", "yesterday", day("2023-05-07")),
            ("Yesterday was fun.", "2024-03-01", "Yesterday", day("2024-02-29")),
            ("I went there yesterday.", "2023-03-01", "yesterday", day("2023-02-28")),
            ("I went there yesterday.", "2000-03-01", "yesterday", day("2000-02-29")),
            ("I went there yesterday.", "1900-03-01", "yesterday", day("1900-02-28")),
            ("It happened yesterday.", "2024-01-01", "yesterday", day("2023-12-31")),
            ("I'm busy today.", "2023-05-08", "today", day("2023-05-08")),
            ("Tomorrow we fly.", "2023-12-31", "Tomorrow", day("2024-01-01")),
            ("We met last night.", "2023-01-01", "last night", day("2022-12-31")),
            ("I ran 3 days ago.", "2024-03-02", "3 days ago", day("2024-02-28")),
            (
                "I ran three days ago.",
                "2023-03-02",
                "three days ago",
                day("2023-02-27"),
            ),
            (
                "It was a couple of days ago.",
                "2023-05-08",
                "a couple of days ago",
                day("2023-05-06"),
            ),
            (
                "We saw it the day before yesterday.",
                "2023-05-01",
                "the day before yesterday",
                day("2023-04-29"),
            ),
            (
                "I will call in two days.",
                "2023-12-30",
                "in two days",
                day("2024-01-01"),
            ),
            ("I will call in 2 days.", "2024-02-28", "in 2 days", day("2024-03-01")),
            (
                "We leave 10 days from now.",
                "2023-02-25",
                "10 days from now",
                day("2023-03-07"),
            ),
        ];
        for (text, said, phrase, want) in table {
            assert_eq!(one(text, said), (phrase.to_string(), want), "{text} on {said}");
        }
    }

    #[test]
    fn weekdays_weeks_and_weekends() {
        // 8 May 2023 is a Monday; 12 May a Friday; 13 May a Saturday.
        let table = [
            ("I met her last Friday.", "2023-05-08", day("2023-05-05")),
            ("Last Fri I took the kids out.", "2023-07-15", day("2023-07-14")),
            ("I met her last Friday.", "2023-05-12", day("2023-05-05")),
            ("I met her last Friday.", "2023-05-13", day("2023-05-12")),
            ("Let's meet this Friday.", "2023-05-08", day("2023-05-12")),
            ("Let's meet this Friday.", "2023-05-12", day("2023-05-12")),
            ("Let's meet next Friday.", "2023-05-12", day("2023-05-19")),
            ("Let's meet next Monday.", "2023-05-08", day("2023-05-15")),
            ("I saw it on Sunday.", "2023-05-08", day("2023-05-07")),
            ("I will see it on Sunday.", "2023-05-08", day("2023-05-14")),
            ("Last Saturday was great.", "2023-01-02", day("2022-12-31")),
            ("It was busy last week.", "2023-05-10", week("2023-05-01")),
            ("It was busy last week.", "2023-01-04", week("2022-12-26")),
            ("It is busy this week.", "2023-05-14", week("2023-05-08")),
            ("It will be busy next week.", "2023-12-28", week("2024-01-01")),
            ("I moved two weeks ago.", "2023-05-10", week("2023-04-24")),
            ("We will go in three weeks.", "2023-05-10", week("2023-05-29")),
            ("We hiked last weekend.", "2023-05-10", weekend("2023-05-06")),
            ("We hiked last weekend.", "2023-05-14", weekend("2023-05-06")),
            ("We hiked this past weekend.", "2023-05-08", weekend("2023-05-06")),
            ("We hike this weekend.", "2023-05-10", weekend("2023-05-13")),
            ("We hike next weekend.", "2023-05-10", weekend("2023-05-20")),
            ("We hike this weekend.", "2023-12-27", weekend("2023-12-30")),
        ];
        for (text, said, want) in table {
            assert_eq!(one(text, said).1, want, "{text} on {said}");
        }
    }

    #[test]
    fn months_and_years() {
        let table = [
            ("It started last month.", "2024-01-15", month(2023, 12)),
            ("It starts next month.", "2023-12-10", month(2024, 1)),
            ("It starts this month.", "2023-12-10", month(2023, 12)),
            ("It started 3 months ago.", "2023-05-31", month(2023, 2)),
            ("It started 14 months ago.", "2023-02-01", month(2021, 12)),
            ("We will marry in six months.", "2023-09-10", month(2024, 3)),
            ("I graduated last year.", "2024-02-29", When::Year(2023)),
            ("I graduate next year.", "2023-05-08", When::Year(2024)),
            ("It was a year ago.", "2024-02-29", When::Year(2023)),
            ("It was 10 years ago.", "2023-05-08", When::Year(2013)),
            ("We married last May.", "2023-05-20", month(2022, 5)),
            ("We married last May.", "2023-06-20", month(2023, 5)),
            ("We marry next May.", "2023-05-20", month(2024, 5)),
            ("We marry next January.", "2023-12-20", month(2024, 1)),
            ("We married this March.", "2023-06-20", month(2023, 3)),
            ("I moved in December.", "2024-01-10", month(2023, 12)),
            ("I will move in December.", "2024-01-10", month(2024, 12)),
            ("Clara is moving to Porto in June.", "2023-11-14", month(2024, 6)),
            ("It is amazing what we did in June.", "2023-11-14", month(2023, 6)),
            ("I'm flying to Oslo on Friday.", "2023-05-08", day("2023-05-12")),
            ("I moved in February.", "2024-02-10", month(2024, 2)),
        ];
        for (text, said, want) in table {
            assert_eq!(one(text, said).1, want, "{text} on {said}");
        }
    }

    #[test]
    fn explicit_dates_and_missing_years() {
        let found = find("We met on 5 May 2023 and again on May 20th.", at("2023-06-01"));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].when, found[0].relative), (day("2023-05-05"), false));
        assert_eq!((found[1].when, found[1].relative), (day("2023-05-20"), true));
        // Without a year: the past one, or in a plan the next one.
        assert_eq!(one("I was born on 29 February.", "2023-06-01").1, day("2020-02-29"));
        assert_eq!(one("We will marry on 29 February.", "2024-03-01").1, day("2028-02-29"));
        assert_eq!(one("The party was on December 24.", "2024-01-03").1, day("2023-12-24"));
        assert_eq!(
            one("The party will be on the 3rd of January.", "2023-12-20").1,
            day("2024-01-03")
        );
        assert_eq!(one("I visited in March 2022.", "2023-06-01").1, month(2022, 3));
        // 30 February does not exist: only the month is taken.
        let found = find("It was on 30 February 2023.", at("2023-06-01"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].when, found[0].relative), (month(2023, 2), false));
    }

    #[test]
    fn not_dates() {
        for text in [
            "May I ask you something?",
            "You may like it.",
            "I finished the puzzle in two days.",
            "It happened the other day.",
            "A few weeks ago I started.",
            "I waited an hour ago? no, two hours ago.",
            "I have 3 cats and 2 dogs.",
            "We march together.",
            "We sat in the sun on the last sun lounger.",
            "Last but not least, thanks.",
        ] {
            assert_eq!(find(text, at("2023-05-08")), Vec::new(), "{text}");
        }
    }

    #[test]
    fn several_mentions_and_annotation() {
        let text = "I quit yesterday. Next month I start a new job, and I will visit Oslo next Friday!";
        let found = find(text, at("2023-05-08"));
        let phrases: Vec<&str> = found.iter().map(|m| m.phrase(text)).collect();
        assert_eq!(phrases, ["yesterday", "Next month", "next Friday"]);
        let a = annotate(text, at("2023-05-08"));
        assert_eq!(
            a,
            format!("{text} (yesterday = 7 May 2023; Next month = June 2023; next Friday = 12 May 2023)")
        );
        assert!(a.starts_with(text));
        assert_eq!(annotate("Nothing dated here.", at("2023-05-08")), "Nothing dated here.");
        // Explicit dates need no annotation.
        assert_eq!(
            annotate("On 5 May 2023 we met.", at("2023-05-08")),
            "On 5 May 2023 we met."
        );
    }

    #[test]
    fn renders_and_tense() {
        assert_eq!(day("2023-05-07").render(), "7 May 2023");
        assert_eq!(week("2023-05-01").render(), "the week of 1 May 2023");
        assert_eq!(weekend("2023-05-06").render(), "the weekend of 6 May 2023");
        assert_eq!(month(2023, 6).render(), "June 2023");
        assert_eq!(When::Year(2022).render(), "2022");
        assert_eq!(month(2024, 2).secs(), parse_iso8601("2024-02-01").unwrap());
        assert_eq!(tense("I'll go there."), Tense::Future);
        assert_eq!(tense("I'm going to paint."), Tense::Future);
        assert_eq!(tense("I can't wait to see it."), Tense::Future);
        assert_eq!(tense("I was going home."), Tense::Past);
        assert_eq!(tense("I painted a lake."), Tense::Past);
    }
}
