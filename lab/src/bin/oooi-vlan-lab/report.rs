//! The lab's printed account: every step with its result.

/// Counts the steps and the failed ones; prints each.
#[derive(Default)]
pub struct Report {
    pub steps: usize,
    /// The failed steps' lines, repeated in the summary so that the
    /// end of a long log names them.
    pub failed: Vec<String>,
}

impl Report {
    /// How many steps failed.
    pub fn failures(&self) -> usize {
        self.failed.len()
    }

    /// Prints step `what`; it passed when `got` is `want`.
    pub fn step(&mut self, what: &str, want: &str, got: &str) -> bool {
        let ok = got == want;
        self.steps += 1;
        let line = format!(
            "  {:<58} {:<28} {}",
            what,
            got,
            if ok {
                "ok".to_string()
            } else {
                format!("FAILED (expected {want})")
            }
        );
        println!("{line}");
        if !ok {
            self.failed.push(line);
        }
        ok
    }
}
