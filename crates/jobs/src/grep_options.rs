//! A grep's switches as GNU grep's flags name them, turned into the
//! kernel's spec the same way for `quarry grep` and the Python package.

use quarry_kernels_api::{GrepSpec, GrepSyntax};

use crate::grep_output::ListFiles;

/// The patterns and switches of a grep.
#[derive(Debug, Clone, Default)]
pub struct GrepOptions {
    /// The patterns; one holding newlines is several, as GNU grep reads it.
    pub patterns: Vec<String>,
    /// `-F`.
    pub fixed: bool,
    /// `-E`.
    pub extended: bool,
    /// `-i`.
    pub ignore_case: bool,
    /// `-v`.
    pub invert: bool,
    /// `-w`.
    pub word: bool,
    /// `-x`.
    pub whole_line: bool,
    /// `-c`.
    pub count: bool,
    /// `-l` or `-L`.
    pub list: Option<ListFiles>,
    /// `-o`.
    pub only_matching: bool,
    /// `-m`.
    pub max_count: Option<u64>,
    /// `-B` (or `-C`).
    pub before_context: Option<u64>,
    /// `-A` (or `-C`).
    pub after_context: Option<u64>,
}

/// Switches that exclude each other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fixed and extended exclude each other (grep -F and -E)")]
pub struct GrepOptionsError;

impl GrepOptions {
    /// Whether the kernel returns the selected lines (not only counts).
    pub fn lines(&self) -> bool {
        !self.count && self.list.is_none()
    }

    /// The kernel's spec.
    pub fn spec(&self) -> Result<GrepSpec, GrepOptionsError> {
        if self.fixed && self.extended {
            return Err(GrepOptionsError);
        }
        let lines = self.lines();
        // -l and -L need one selected line per target to decide.
        let max_count = match self.list {
            Some(_) => Some(self.max_count.map_or(1, |m| m.min(1))),
            None => self.max_count,
        };
        Ok(GrepSpec {
            patterns: self
                .patterns
                .iter()
                .flat_map(|p| p.split('\n'))
                .map(str::to_string)
                .collect(),
            syntax: if self.fixed {
                GrepSyntax::Fixed
            } else if self.extended {
                GrepSyntax::Extended
            } else {
                GrepSyntax::Basic
            },
            ignore_case: self.ignore_case,
            lines,
            invert: self.invert,
            word: self.word,
            whole_line: self.whole_line,
            only_matching: self.only_matching && lines,
            max_count,
            before_context: if lines {
                self.before_context.unwrap_or(0)
            } else {
                0
            },
            after_context: if lines {
                self.after_context.unwrap_or(0)
            } else {
                0
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_need_one_line_and_counts_no_context() {
        let o = GrepOptions {
            patterns: vec!["a\nb".into()],
            list: Some(ListFiles::WithMatches),
            max_count: Some(5),
            before_context: Some(2),
            ..GrepOptions::default()
        };
        let s = o.spec().unwrap();
        assert_eq!(s.patterns, ["a", "b"]);
        assert_eq!(
            (s.lines, s.max_count, s.before_context),
            (false, Some(1), 0)
        );
        let both = GrepOptions {
            fixed: true,
            extended: true,
            ..GrepOptions::default()
        };
        assert_eq!(both.spec().unwrap_err(), GrepOptionsError);
    }
}
