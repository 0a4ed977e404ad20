//! Doubly-linked lists threaded through a shared array of links, indexed by slot (or ghost)
//! number. Several lists (T1/T2, active/inactive) share one link array; an entry is on at
//! most one list at a time. O(1) push/remove/move without allocation on the hot path.

pub const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
    /// Which list the entry is on (`NIL` = none).
    list: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Head {
    /// Most recently used end.
    head: u32,
    /// Least recently used end.
    tail: u32,
    len: usize,
}

#[derive(Debug)]
pub struct Lists {
    links: Vec<Link>,
    heads: Vec<Head>,
}

impl Lists {
    pub fn new(entries: usize, lists: usize) -> Self {
        Lists {
            links: vec![
                Link {
                    prev: NIL,
                    next: NIL,
                    list: NIL
                };
                entries
            ],
            heads: vec![
                Head {
                    head: NIL,
                    tail: NIL,
                    len: 0
                };
                lists
            ],
        }
    }

    pub fn len(&self, list: usize) -> usize {
        self.heads[list].len
    }

    /// The list `e` is on, if any.
    pub fn list_of(&self, e: u32) -> Option<usize> {
        let l = self.links[e as usize].list;
        (l != NIL).then_some(l as usize)
    }

    pub fn lru(&self, list: usize) -> Option<u32> {
        let t = self.heads[list].tail;
        (t != NIL).then_some(t)
    }

    /// The entry one step towards the MRU end from `e`.
    pub fn newer(&self, e: u32) -> Option<u32> {
        let p = self.links[e as usize].prev;
        (p != NIL).then_some(p)
    }

    pub fn push_mru(&mut self, list: usize, e: u32) {
        debug_assert_eq!(self.links[e as usize].list, NIL);
        let h = self.heads[list];
        self.links[e as usize] = Link {
            prev: NIL,
            next: h.head,
            list: list as u32,
        };
        if h.head != NIL {
            self.links[h.head as usize].prev = e;
        } else {
            self.heads[list].tail = e;
        }
        self.heads[list].head = e;
        self.heads[list].len += 1;
    }

    pub fn remove(&mut self, e: u32) -> bool {
        let Link { prev, next, list } = self.links[e as usize];
        if list == NIL {
            return false;
        }
        let l = list as usize;
        if prev != NIL {
            self.links[prev as usize].next = next;
        } else {
            self.heads[l].head = next;
        }
        if next != NIL {
            self.links[next as usize].prev = prev;
        } else {
            self.heads[l].tail = prev;
        }
        self.heads[l].len -= 1;
        self.links[e as usize] = Link {
            prev: NIL,
            next: NIL,
            list: NIL,
        };
        true
    }

    pub fn move_mru(&mut self, list: usize, e: u32) {
        self.remove(e);
        self.push_mru(list, e);
    }

    pub fn pop_lru(&mut self, list: usize) -> Option<u32> {
        let t = self.lru(list)?;
        self.remove(t);
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_move_pop_keep_order_and_lengths() {
        let mut l = Lists::new(8, 2);
        for e in 0..4 {
            l.push_mru(0, e);
        }
        assert_eq!(l.len(0), 4);
        l.move_mru(1, 0);
        l.move_mru(0, 1);
        assert_eq!(l.len(0), 3);
        assert_eq!(l.list_of(0), Some(1));
        assert_eq!(l.pop_lru(0), Some(2));
        assert_eq!(l.pop_lru(0), Some(3));
        assert_eq!(l.pop_lru(0), Some(1));
        assert_eq!(l.pop_lru(0), None);
        assert!(l.remove(0));
        assert!(!l.remove(0));
        assert_eq!(l.len(1), 0);
    }
}
