//! Reading values: a span as `file:line: key`, and numbers, sizes, durations and words
//! checked against their rule.

use crate::{parse_duration, parse_size, ConfigError};
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(crate) enum SizeValue {
    Int(i64),
    Text(String),
}

impl std::fmt::Display for SizeValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeValue::Int(n) => write!(f, "{n}"),
            SizeValue::Text(s) => write!(f, "\"{s}\""),
        }
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) text: &'a str,
    pub(crate) path: &'a Path,
}

impl Ctx<'_> {
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    pub(crate) fn err(
        &self,
        span: Range<usize>,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            file: self.path.display().to_string(),
            line: self.line_of(span.start),
            key: key.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let line = self.line_of(span.start);
        // The key is what stands before '=' on the offending line, or the table header.
        let line_text = self.text.lines().nth(line - 1).unwrap_or("").trim();
        let key = match line_text.split_once('=') {
            Some((k, _)) => k.trim().to_string(),
            None => line_text.trim_matches(|c| c == '[' || c == ']').to_string(),
        };
        let message = e.message().replace('\n', " ").trim().to_string();
        ConfigError::Invalid {
            file: self.path.display().to_string(),
            line,
            key: if key.is_empty() { "(file)".into() } else { key },
            message,
        }
    }
}

pub(crate) const SHARE_RULE: &str = "must be a share above 0 and at most 1";

/// A profile name that must be one of `known`.
pub(crate) fn profile_of(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
    known: &[&str],
) -> Result<String, ConfigError> {
    let span = v.span();
    let profile = v.into_inner();
    if !known.contains(&profile.as_str()) {
        return Err(ctx.err(
            span,
            key,
            format!(
                "profile = \"{profile}\": must be one of {}",
                known.join(", ")
            ),
        ));
    }
    Ok(profile)
}

/// An optional bandwidth in MB/s: positive and finite.
pub(crate) fn positive_mbps(
    ctx: &Ctx,
    v: Option<Spanned<f64>>,
    key: &str,
) -> Result<Option<f64>, ConfigError> {
    positive(ctx, v, key, "must be a positive number of MB/s")
}

/// An optional number, positive and finite; `rule` names its unit.
pub(crate) fn positive(
    ctx: &Ctx,
    v: Option<Spanned<f64>>,
    key: &str,
    rule: &str,
) -> Result<Option<f64>, ConfigError> {
    v.map(|v| checked(ctx, v, key, |x| x.is_finite() && x > 0.0, rule))
        .transpose()
}

/// A number that must pass `ok`; the message is `key = value: rule`.
pub(crate) fn checked<N: Copy + std::fmt::Display>(
    ctx: &Ctx,
    v: Spanned<N>,
    key: &str,
    ok: impl Fn(N) -> bool,
    rule: &str,
) -> Result<N, ConfigError> {
    let span = v.span();
    let n = v.into_inner();
    if ok(n) {
        Ok(n)
    } else {
        let short = key.rsplit('.').next().unwrap_or(key);
        Err(ctx.err(span, key, format!("{short} = {n}: {rule}")))
    }
}

/// A count, if given, within `range`.
pub(crate) fn count_in(
    ctx: &Ctx,
    v: Option<Spanned<i64>>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    rule: &str,
) -> Result<Option<usize>, ConfigError> {
    v.map(|v| checked(ctx, v, key, |n| range.contains(&n), rule).map(|n| n as usize))
        .transpose()
}

/// A duration no longer than `max`.
pub(crate) fn duration_at_most(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
    max: Duration,
    rule: &str,
) -> Result<Duration, ConfigError> {
    let span = v.span();
    let d = duration_value(ctx, v, key)?;
    if d > max {
        return Err(ctx.err(span, key, rule));
    }
    Ok(d)
}

/// One of a few words; each option is its spellings (the first is shown) and its value.
pub(crate) fn one_of<T: Copy>(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
    options: &[(&[&str], T)],
) -> Result<T, ConfigError> {
    let span = v.span();
    let text = v.into_inner();
    if let Some((_, value)) = options
        .iter()
        .find(|(names, _)| names.contains(&text.as_str()))
    {
        return Ok(*value);
    }
    let shown: Vec<String> = options
        .iter()
        .map(|(names, _)| format!("\"{}\"", names[0]))
        .collect();
    let list = match shown.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    let short = key.rsplit('.').next().unwrap_or(key);
    Err(ctx.err(span, key, format!("{short} = \"{text}\": must be {list}")))
}

pub(crate) fn duration_value(
    ctx: &Ctx,
    v: Spanned<String>,
    key: &str,
) -> Result<Duration, ConfigError> {
    let span = v.span();
    let text = v.into_inner();
    let short = key.rsplit('.').next().unwrap_or(key);
    parse_duration(&text).map_err(|m| ctx.err(span, key, format!("{short} = \"{text}\": {m}")))
}

pub(crate) fn size_value(
    ctx: &Ctx,
    v: Spanned<SizeValue>,
    key: &str,
) -> Result<(u64, Range<usize>, SizeValue), ConfigError> {
    let span = v.span();
    let value = v.into_inner();
    let parsed = match &value {
        SizeValue::Int(n) if *n >= 0 => Ok(*n as u64),
        SizeValue::Int(_) => Err("must not be negative".to_string()),
        SizeValue::Text(t) => parse_size(t),
    };
    let short = key.rsplit('.').next().unwrap_or(key);
    match parsed {
        Ok(n) => Ok((n, span, value)),
        Err(m) => Err(ctx.err(span, key, format!("{short} = {value}: {m}"))),
    }
}
