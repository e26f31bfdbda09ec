//! Sequential cutoff's stream detection (OCF's ocf_seq_detect): the last `MAX_STREAMS`
//! streams of the volume, each an object, a direction and where its next request would start,
//! with how many bytes and requests it has had. The least recently continued stream makes room
//! for a new one, so a random request replaces an old stream, never the active ones.

use rustc_hash::FxHashMap as HashMap;

/// Streams tracked per volume (OCF: 128 per core).
pub(crate) const MAX_STREAMS: usize = 128;

/// Free lines kept in reserve by the `full` policy: it cuts once fewer lines than a request
/// needs plus this are free (OCF's margin of 512 lines, at most an eighth of a small cache).
pub(crate) fn full_reserve(lines: usize) -> usize {
    512.min(lines / 8)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stream {
    pub object: u64,
    pub write: bool,
    /// Where the next request of the stream starts.
    pub next: u64,
    pub bytes: u64,
    pub requests: u32,
}

const NIL: usize = usize::MAX;

/// The stream table: found by where a stream's next request starts, in O(1), and kept in
/// order of use (a list threaded through the entries) so the least recently continued one
/// makes room without a scan: every request of a random workload starts a stream.
#[derive(Default)]
pub(crate) struct Streams {
    list: Vec<Stream>,
    by_next: HashMap<(u64, bool, u64), usize>,
    newer: Vec<usize>,
    older: Vec<usize>,
    newest: Option<usize>,
    oldest: Option<usize>,
}

impl Streams {
    /// Whether a request at `offset` would continue a stream (one ending there): only such a
    /// request can be cut.
    pub fn continues(&self, object: u64, write: bool, offset: u64) -> bool {
        self.by_next.contains_key(&(object, write, offset))
    }

    /// Records a request: it continues the stream that ends where it starts (same object and
    /// direction), or starts a new one in place of the least recently used. Returns the stream
    /// with this request counted, and whether it continued one.
    pub fn update(&mut self, object: u64, write: bool, offset: u64, len: u64) -> (Stream, bool) {
        if let Some(i) = self.by_next.remove(&(object, write, offset)) {
            let s = &mut self.list[i];
            s.next = offset + len;
            s.bytes += len;
            s.requests = s.requests.saturating_add(1);
            let found = *s;
            self.by_next.insert((object, write, found.next), i);
            self.unlink(i);
            self.push_newest(i);
            return (found, true);
        }
        let fresh = Stream {
            object,
            write,
            next: offset + len,
            bytes: len,
            requests: 1,
        };
        let i = if self.list.len() < MAX_STREAMS {
            self.list.push(fresh);
            self.newer.push(NIL);
            self.older.push(NIL);
            self.list.len() - 1
        } else {
            let i = self.oldest.expect("a full table has an oldest stream");
            let old = self.list[i];
            if self.by_next.get(&(old.object, old.write, old.next)) == Some(&i) {
                self.by_next.remove(&(old.object, old.write, old.next));
            }
            self.unlink(i);
            self.list[i] = fresh;
            i
        };
        self.by_next.insert((object, write, fresh.next), i);
        self.push_newest(i);
        (fresh, false)
    }

    fn unlink(&mut self, i: usize) {
        let (n, o) = (self.newer[i], self.older[i]);
        match n {
            NIL => self.newest = (o != NIL).then_some(o),
            n => self.older[n] = o,
        }
        match o {
            NIL => self.oldest = (n != NIL).then_some(n),
            o => self.newer[o] = n,
        }
        self.newer[i] = NIL;
        self.older[i] = NIL;
    }

    fn push_newest(&mut self, i: usize) {
        self.newer[i] = NIL;
        self.older[i] = self.newest.unwrap_or(NIL);
        if let Some(n) = self.newest {
            self.newer[n] = i;
        }
        self.newest = Some(i);
        if self.oldest.is_none() {
            self.oldest = Some(i);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.list.len()
    }
}

/// Whether a request of `stream` (as `update` returned it) is cut: it continues a stream, the
/// stream has been seen `promotion_count` times (or has `promotion_threshold` bytes, when that
/// is not 0), and its bytes with this request reach `threshold`.
pub(crate) fn cuts(
    stream: &Stream,
    continued: bool,
    threshold: u64,
    promotion_count: u32,
    promotion_threshold: u64,
) -> bool {
    let promoted = stream.requests >= promotion_count
        || (promotion_threshold > 0 && stream.bytes >= promotion_threshold);
    continued && promoted && stream.bytes >= threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    const K64: u64 = 64 << 10;

    /// Cut decision of a request at the default promotion (count 2, no byte threshold).
    fn cut(st: &mut Streams, object: u64, write: bool, offset: u64, threshold: u64) -> bool {
        let (s, cont) = st.update(object, write, offset, K64);
        cuts(&s, cont, threshold, 2, 0)
    }

    #[test]
    fn two_interleaved_streams_on_one_file_are_both_detected() {
        let mut st = Streams::default();
        let far = 1 << 30;
        let mut cut_a = Vec::new();
        let mut cut_b = Vec::new();
        for i in 0..4 {
            cut_a.push(cut(&mut st, 1, false, i * K64, 4 * K64));
            cut_b.push(cut(&mut st, 1, false, far + i * K64, 4 * K64));
        }
        // The 4th request brings each stream to 256K: both are cut, at >= the threshold.
        assert_eq!(cut_a, [false, false, false, true]);
        assert_eq!(cut_b, [false, false, false, true]);
        assert_eq!(st.len(), 2);
    }

    #[test]
    fn a_read_stream_and_a_write_stream_are_kept_apart() {
        let mut st = Streams::default();
        // Reads and writes alternate over the same offsets: each direction has its own run.
        for i in 0..3 {
            assert!(!cut(&mut st, 1, false, i * K64, 3 * K64 + 1));
            assert!(!cut(&mut st, 1, true, i * K64, 3 * K64 + 1));
        }
        let (r, _) = st.update(1, false, 3 * K64, K64);
        let (w, _) = st.update(1, true, 3 * K64, K64);
        assert_eq!((r.bytes, r.requests, r.write), (4 * K64, 4, false));
        assert_eq!((w.bytes, w.requests, w.write), (4 * K64, 4, true));
        // A read that does not follow the read stream's end (it follows nothing) is new.
        let (x, cont) = st.update(1, false, 10 * K64, K64);
        assert!(!cont && x.requests == 1);
    }

    #[test]
    fn a_random_request_does_not_reset_another_stream() {
        let mut st = Streams::default();
        for i in 0..3 {
            st.update(1, false, i * K64, K64);
        }
        // Random requests in between, on the same file and on others, fewer than the table.
        for r in 0..(MAX_STREAMS as u64 - 2) {
            st.update(1 + r % 3, false, 7_777_777 + r * 999_999, 4096);
        }
        let (s, cont) = st.update(1, false, 3 * K64, K64);
        assert!(cont, "the stream survived");
        assert_eq!((s.bytes, s.requests), (4 * K64, 4));
        // The table never grows past its size; the least recently used stream goes first.
        for r in 0..1000u64 {
            st.update(9, true, r * 3 * K64, K64);
        }
        assert_eq!(st.len(), MAX_STREAMS);
    }

    #[test]
    fn promotion_count_and_threshold_hold_the_cut_back() {
        let mut st = Streams::default();
        let mut cut_at = None;
        for i in 0..10 {
            let (s, cont) = st.update(1, true, i * (1 << 20), 1 << 20);
            if cuts(&s, cont, 1 << 20, 8, 0) && cut_at.is_none() {
                cut_at = Some(s.requests);
            }
        }
        // 1 MiB requests reach the 1 MiB threshold at once, but the stream is cut only
        // once it was seen 8 times.
        assert_eq!(cut_at, Some(8));
        // With a promotion threshold of 2 MiB, the 2nd request already promotes it.
        let mut st = Streams::default();
        let (s, c) = st.update(2, true, 0, 1 << 20);
        assert!(
            !cuts(&s, c, 1 << 20, 8, 2 << 20),
            "a new stream is never cut"
        );
        let (s, c) = st.update(2, true, 1 << 20, 1 << 20);
        assert!(cuts(&s, c, 1 << 20, 8, 2 << 20));
    }

    #[test]
    fn the_full_reserve_is_ocfs_margin_or_an_eighth_of_a_small_cache() {
        assert_eq!(full_reserve(1 << 20), 512);
        assert_eq!(full_reserve(64), 8);
    }
}
