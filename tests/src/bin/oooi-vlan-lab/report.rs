//! The lab's printed account: every step with its result.

/// Counts the steps and the failed ones; prints each.
#[derive(Default)]
pub struct Report {
    pub failures: usize,
    pub steps: usize,
}

impl Report {
    /// Prints step `what`; it passed when `got` is `want`.
    pub fn step(&mut self, what: &str, want: &str, got: &str) -> bool {
        let ok = got == want;
        self.steps += 1;
        self.failures += usize::from(!ok);
        println!(
            "  {:<58} {:<28} {}",
            what,
            got,
            if ok {
                "ok".to_string()
            } else {
                format!("FAILED (expected {want})")
            }
        );
        ok
    }
}
