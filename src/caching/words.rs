//! The `key=value` words the `cleaner` and `params` control keys take: split, keys with `-`
//! or `_` alike, and each value checked with a message that names the word.

/// One `key=value` word of a setting line.
pub struct Word<'a> {
    /// With `-` read as `_`.
    pub key: String,
    pub value: &'a str,
}

impl Word<'_> {
    /// The message for a value that breaks `rule`.
    pub fn bad(&self, rule: &str) -> String {
        format!("{}={}: {rule}", self.key, self.value)
    }

    /// The value as a whole number from `lo` to `hi`.
    pub fn number(&self, lo: u64, hi: u64, rule: &str) -> Result<u64, String> {
        self.value
            .parse::<u64>()
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| self.bad(rule))
    }

    /// The value as a size (`64M`).
    pub fn size(&self) -> Result<u64, String> {
        mountcfg::parse_size(self.value).map_err(|e| self.bad(&e))
    }

    /// The value as a duration (`500ms`).
    pub fn duration(&self) -> Result<std::time::Duration, String> {
        mountcfg::parse_duration(self.value).map_err(|e| self.bad(&e))
    }
}

/// The words of `spec`, or why one is not `key=value`.
pub fn words(spec: &str) -> Result<Vec<Word<'_>>, String> {
    spec.split_whitespace()
        .map(|word| {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("\"{word}\": settings are key=value"))?;
            Ok(Word {
                key: key.replace('-', "_"),
                value,
            })
        })
        .collect()
}
