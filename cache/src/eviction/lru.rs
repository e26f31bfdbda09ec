//! LRU eviction, as OCF's: lists threaded through the cache's slots, every class with a list of
//! clean lines and a list of dirty lines, most recently used at the head. Touching a line is
//! O(1) and the clean victim of a class is the tail of its clean list, however many dirty
//! lines are older.

use super::Eviction;
use crate::metadata::Shard;
use crate::ClassId;

pub(crate) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for List {
    fn default() -> List {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl List {
    pub fn len(&self) -> usize {
        self.len
    }
}

/// The links of a shard's slots (numbered from `base` in the whole cache): a slot is on at
/// most one list at a time.
pub(crate) struct Links {
    base: u32,
    prev: Vec<u32>,
    next: Vec<u32>,
}

impl Links {
    pub fn new(base: u32, slots: usize) -> Links {
        Links {
            base,
            prev: vec![NIL; slots],
            next: vec![NIL; slots],
        }
    }

    fn at(&self, s: u32) -> usize {
        (s - self.base) as usize
    }

    pub fn push_front(&mut self, list: &mut List, s: u32) {
        let i = self.at(s);
        self.prev[i] = NIL;
        self.next[i] = list.head;
        if list.head != NIL {
            let h = self.at(list.head);
            self.prev[h] = s;
        } else {
            list.tail = s;
        }
        list.head = s;
        list.len += 1;
    }

    pub fn remove(&mut self, list: &mut List, s: u32) {
        let i = self.at(s);
        let (p, n) = (self.prev[i], self.next[i]);
        if p != NIL {
            let p = self.at(p);
            self.next[p] = n;
        } else {
            list.head = n;
        }
        if n != NIL {
            let n = self.at(n);
            self.prev[n] = p;
        } else {
            list.tail = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        list.len -= 1;
    }

    /// The list's slots from the least recently used on.
    pub fn oldest_first<'a>(&'a self, list: &List) -> impl Iterator<Item = u32> + 'a {
        let mut at = list.tail;
        std::iter::from_fn(move || {
            (at != NIL).then(|| {
                let s = at;
                at = self.prev[self.at(s)];
                s
            })
        })
    }
}

/// The least recently used clean line of a class that no request holds.
pub(crate) struct Lru;

impl Eviction for Lru {
    fn victim(&self, g: &Shard, class: ClassId) -> Option<u32> {
        let cl = g.classes.get(class as usize)?.as_ref()?;
        g.links.oldest_first(&cl.clean).find(|&s| {
            let sl = &g.slots[s as usize];
            !sl.busy && sl.dirty == 0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_recency_order_through_moves() {
        let mut links = Links::new(0, 8);
        let (mut clean, mut dirty) = (List::default(), List::default());
        for s in 0..5 {
            links.push_front(&mut clean, s);
        }
        assert_eq!(
            links.oldest_first(&clean).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        // Touch 1 (to the head), move 0 and 3 to the dirty list.
        links.remove(&mut clean, 1);
        links.push_front(&mut clean, 1);
        links.remove(&mut clean, 0);
        links.push_front(&mut dirty, 0);
        links.remove(&mut clean, 3);
        links.push_front(&mut dirty, 3);
        assert_eq!(links.oldest_first(&clean).collect::<Vec<_>>(), [2, 4, 1]);
        assert_eq!(links.oldest_first(&dirty).collect::<Vec<_>>(), [0, 3]);
        assert_eq!((clean.len(), dirty.len()), (3, 2));
        for s in [2, 4, 1] {
            links.remove(&mut clean, s);
        }
        assert_eq!(clean.len(), 0);
        assert_eq!(links.oldest_first(&clean).count(), 0);
    }
}
