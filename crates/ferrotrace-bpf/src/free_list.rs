//! The free parts of a preallocated array (the shared unwind rows, the page index): modules' ranges
//! are taken first fit and given back when their module is no longer mapped, so that a recording
//! of hours (`profile --every`) reuses the space of the files it saw earlier.

/// Free ranges of an array of `capacity` entries.
#[derive(Debug)]
pub(crate) struct FreeList {
    /// (start, length), sorted by start, never adjacent (given-back neighbours are merged).
    free: Vec<(usize, usize)>,
    capacity: usize,
}

impl FreeList {
    /// Every entry free.
    pub(crate) fn new(capacity: usize) -> FreeList {
        FreeList {
            free: vec![(0, capacity)],
            capacity,
        }
    }

    /// The start of `len` entries taken from the first free range that holds them.
    pub(crate) fn take(&mut self, len: usize) -> Option<usize> {
        let i = self.free.iter().position(|&(_, l)| l >= len)?;
        let (start, l) = self.free[i];
        if l == len {
            self.free.remove(i);
        } else {
            self.free[i] = (start + len, l - len);
        }
        Some(start)
    }

    /// Gives `len` entries from `start` back (taken before, not given back since).
    pub(crate) fn give(&mut self, start: usize, len: usize) {
        if len == 0 {
            return;
        }
        let i = self.free.partition_point(|&(s, _)| s < start);
        self.free.insert(i, (start, len));
        // With the next range, then with the previous one.
        if i + 1 < self.free.len() && start + len == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == start {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }

    /// Whether `len` entries could be taken in one range.
    pub(crate) fn fits(&self, len: usize) -> bool {
        self.free.iter().any(|&(_, l)| l >= len)
    }

    /// Entries taken.
    pub(crate) fn used(&self) -> usize {
        self.capacity - self.free.iter().map(|&(_, l)| l).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::FreeList;

    #[test]
    fn ranges_given_back_are_merged_and_taken_again_first_fit() {
        let mut f = FreeList::new(100);
        assert_eq!(f.take(30), Some(0));
        assert_eq!(f.take(30), Some(30));
        assert_eq!(f.take(30), Some(60));
        assert_eq!(f.take(30), None, "10 left");
        assert_eq!(f.used(), 90);
        f.give(30, 30);
        // The first range that holds 20 is the one given back, not the 10 at the end.
        assert_eq!(f.take(20), Some(30));
        assert!(!f.fits(20) && f.fits(10));
        assert_eq!(f.take(20), None, "10 and 10 apart");
        f.give(0, 30);
        f.give(60, 30);
        // 0..30 and 50..100 (60..90 merged with 90..100, then with 50..60).
        assert_eq!(f.take(50), Some(50));
        assert_eq!(f.used(), 70);
        f.give(30, 20);
        f.give(50, 50);
        assert_eq!(f.used(), 0);
        assert_eq!(f.take(100), Some(0), "all of it in one range again");
    }
}
