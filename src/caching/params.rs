//! The cache's parameters besides the cleaner (casadm's `--set-param` for seq-cutoff,
//! promotion and fallback-pt), as the `params` control key reads and takes them: one line of
//! `key=value` words (`seq_cutoff=full seq_threshold=1M seq_promotion_count=8
//! seq_promotion_threshold=0 promotion=nhit nhit_hits=3 nhit_trigger=80 error_threshold=1000`;
//! nhit's own words only with nhit).

use super::words::words;
use cache::{Policy, Promotion, SeqCutoff};

fn seq_cutoff_name(s: SeqCutoff) -> &'static str {
    match s {
        SeqCutoff::Always => "always",
        SeqCutoff::Full => "full",
        SeqCutoff::Never => "never",
    }
}

/// The settings, in the form `parse` takes (nhit's own only with nhit).
pub fn format(p: &Policy) -> String {
    let promotion = match p.promotion {
        Promotion::Always => "promotion=always".to_string(),
        Promotion::Nhit {
            insertion_threshold,
            trigger_threshold,
        } => format!(
            "promotion=nhit nhit_hits={insertion_threshold} nhit_trigger={trigger_threshold}"
        ),
    };
    format!(
        "seq_cutoff={} seq_threshold={} seq_promotion_count={} seq_promotion_threshold={} \
         {promotion} error_threshold={}",
        seq_cutoff_name(p.seq_cutoff),
        mountcfg::format_size(p.seq_threshold),
        p.seq_promotion_count,
        mountcfg::format_size(p.seq_promotion_threshold),
        p.error_threshold
    )
}

/// `base` with the settings of `spec` changed (the cleaner's stay as they are). nhit's own
/// settings given while the promotion is `always` are refused: nothing given is ignored.
pub fn parse(spec: &str, base: &Policy) -> Result<Policy, String> {
    let mut p = base.clone();
    let (mut nhit, mut hits, mut trigger) = match base.promotion {
        Promotion::Always => (false, 3, 80),
        Promotion::Nhit {
            insertion_threshold,
            trigger_threshold,
        } => (true, insertion_threshold, trigger_threshold),
    };
    let mut nhit_words = Vec::new();
    for w in words(spec)? {
        match w.key.as_str() {
            "seq_cutoff" => {
                p.seq_cutoff = match w.value {
                    "always" => SeqCutoff::Always,
                    "full" => SeqCutoff::Full,
                    "never" => SeqCutoff::Never,
                    _ => return Err(w.bad("must be always, full or never")),
                }
            }
            "seq_threshold" => {
                p.seq_threshold = w.size()?;
                if !(1..=1 << 40).contains(&p.seq_threshold) {
                    return Err(w.bad("must be from 1 byte to 1T"));
                }
            }
            "seq_promotion_count" => {
                p.seq_promotion_count =
                    w.number(1, 65535, "must be from 1 to 65535 requests")? as u32
            }
            "seq_promotion_threshold" => p.seq_promotion_threshold = w.size()?,
            "promotion" => {
                nhit = match w.value {
                    "always" => false,
                    "nhit" => true,
                    _ => return Err(w.bad("must be always or nhit")),
                }
            }
            "nhit_hits" => {
                hits = w.number(2, 1000, "must be from 2 to 1000 misses")? as u32;
                nhit_words.push(w.key.clone());
            }
            "nhit_trigger" => {
                trigger = w.number(0, 100, "must be a percent from 0 to 100")? as u8;
                nhit_words.push(w.key.clone());
            }
            "error_threshold" => {
                p.error_threshold = w.number(
                    0,
                    1_000_000,
                    "must be from 0 (never pass-through) to 1000000",
                )?
            }
            _ => {
                return Err(format!(
                    "unknown setting \"{}\": seq_cutoff, seq_threshold, \
                     seq_promotion_count, seq_promotion_threshold, promotion, nhit_hits, \
                     nhit_trigger, error_threshold",
                    w.key
                ))
            }
        }
    }
    if !nhit && !nhit_words.is_empty() {
        return Err(format!(
            "{} apply to promotion=nhit only (the promotion is always)",
            nhit_words.join(" and ")
        ));
    }
    p.promotion = if nhit {
        Promotion::Nhit {
            insertion_threshold: hits,
            trigger_threshold: trigger,
        }
    } else {
        Promotion::Always
    };
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_they_are_given() {
        let base = Policy::default();
        let same = parse(&format(&base), &base).unwrap();
        assert_eq!(format(&same), format(&base));
        let p = parse(
            "seq-cutoff=always seq_threshold=4M promotion=nhit nhit_hits=5 error_threshold=0",
            &base,
        )
        .unwrap();
        assert_eq!(p.seq_cutoff, SeqCutoff::Always);
        assert_eq!(p.seq_threshold, 4 << 20);
        assert_eq!(p.promotion, Promotion::nhit(5));
        assert_eq!(p.error_threshold, 0);
        assert_eq!(format(&parse(&format(&p), &base).unwrap()), format(&p));
        // nhit's own settings stay when another word changes.
        let q = parse("nhit_trigger=50", &p).unwrap();
        assert_eq!(
            q.promotion,
            Promotion::Nhit {
                insertion_threshold: 5,
                trigger_threshold: 50
            }
        );
        for bad in [
            "seq_cutoff=sometimes",
            "nhit_hits=1",
            "nhit_hits=3",
            "nhit_trigger=101 promotion=nhit",
            "error_threshold=-1",
            "seq_threshold=0",
            "speed=3",
            "promotion",
        ] {
            assert!(parse(bad, &base).is_err(), "{bad}");
        }
    }
}
