//! Choices read from fuzz bytes.

/// Reads choices from bytes; past the end every read is 0, so any byte
/// string (the empty one too) decodes to a small, complete input.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Source<'a> {
    /// Choices from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Source { data, at: 0 }
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at = self.at.saturating_add(1);
        b
    }

    /// A number below `n` (0 when `n` is 0 or 1).
    pub fn below(&mut self, n: usize) -> usize {
        let v = match n {
            0 | 1 => return 0,
            2..=256 => usize::from(self.byte()),
            257..=65_536 => usize::from(u16::from_le_bytes([self.byte(), self.byte()])),
            _ => u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()]) as usize,
        };
        v % n
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One of `xs` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    /// Whether every byte has been read.
    pub fn exhausted(&self) -> bool {
        self.at >= self.data.len()
    }
}
