//! What `stripefs stats` shows: the cache engine's statistics, with each class named by what
//! it is (a target by its folder's path now, an IO class by its name), the requests the cache
//! serviced of all it got, how long the oldest dirty line has waited, the policy as
//! configured and the memory the line metadata takes.

use super::{path_of, Caching};
use crate::namespace::Namespace;
use cache::Counters;
use serde_json::{json, Value};

/// Requests a class got, and those the cache serviced (all but pass-through), as OCF counts
/// "serviced requests" of "total requests".
pub fn requests(c: &Counters) -> (u64, u64) {
    let total = c.read_hits
        + c.read_partial_misses
        + c.read_full_misses
        + c.pass_through_reads
        + c.write_hits
        + c.write_partial_misses
        + c.write_full_misses
        + c.pass_through_writes;
    (total - c.pass_through_reads - c.pass_through_writes, total)
}

impl Caching {
    /// The statistics as JSON (`user.stripefs.stats`); `{"state": "detached", ...}` while
    /// the cache is detached.
    pub fn report(&self, ns: &Namespace) -> Value {
        let attached = self.cache().map(|c| c.clone());
        let Some(cache) = attached else {
            return json!({
                "state": "detached",
                "default_mode": self.default_class().map_or("pt", |d| d.mode.name()),
                "classes": [],
            });
        };
        let stats = cache.stats();
        let (oldest, per_class) = cache.dirty_for();
        let policy = cache.policy();
        let memory = cache.metadata_memory();
        let labels: Vec<(cache::ClassId, String, Option<String>)> = {
            let targets = self.targets.read();
            let classes = self.classes.read();
            targets
                .iter()
                .map(|(&dir, t)| {
                    let p = path_of(ns, dir);
                    (t.class, p.clone(), Some(p))
                })
                .chain(
                    classes
                        .iter()
                        .map(|c| (c.class, format!("class {}", c.name), None)),
                )
                .collect()
        };
        let (serviced, total) = requests(&stats.counters);
        let mut v = serde_json::to_value(&stats).unwrap_or(Value::Null);
        v["state"] = json!(if stats.failed { "failed" } else { "attached" });
        v["serviced_requests"] = json!(serviced);
        v["total_requests"] = json!(total);
        v["dirty_for_secs"] = json!(oldest.map(|d| d.as_secs_f64()));
        v["policy"] = serde_json::to_value(&policy).unwrap_or(Value::Null);
        v["metadata_memory"] = serde_json::to_value(memory).unwrap_or(Value::Null);
        if let Some(classes) = v["classes"].as_array_mut() {
            for (c, s) in classes.iter_mut().zip(&stats.classes) {
                let (serviced, total) = requests(&s.counters);
                let found = labels.iter().find(|l| l.0 == s.id);
                c["class_name"] = json!(s.name);
                if let Some((_, label, path)) = found {
                    c["name"] = json!(label);
                    c["path"] = json!(path);
                }
                c["serviced_requests"] = json!(serviced);
                c["total_requests"] = json!(total);
                c["dirty_for_secs"] = json!(per_class
                    .iter()
                    .find(|p| p.0 == s.id)
                    .map(|p| p.1.as_secs_f64()));
            }
        }
        v
    }
}
