//! What GNU grep 3.8 prints for the kernel's answers: [`format_grep`], used
//! by `quarry grep` and by the mount's `grep` files.
//!
//! A block of selected lines ([`LineBlock`]) is printed as it came, in one
//! write, when nothing goes before its lines (no name, `-n` or `-b`) and no
//! binary data lies in it; otherwise line by line, its numbers and offsets
//! counted from its first.

use std::io::{self, Write};

use quarry_kernels_api::{GrepOutput, LineBlock, LineRun, MatchLine, Output, TargetOutput};

/// GNU grep 3.8 reads a file in pieces of 96 KiB (its first read, and every
/// later one while lines are shorter than a page) and treats the data as
/// binary from the piece that holds its first NUL byte on.
const GNU_GREP_READ_BYTES: u64 = 96 * 1024;

/// Bytes of numbered lines put together before they are written.
const SCRATCH_BYTES: usize = 64 << 10;

/// `-l` or `-L`: only names are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFiles {
    /// `-l`: the targets with a selected line.
    WithMatches,
    /// `-L`: the targets without one.
    WithoutMatch,
}

/// How the lines are printed: GNU grep's output flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrepFormat {
    /// `-c`: a count per target.
    pub count: bool,
    /// `-n`.
    pub line_number: bool,
    /// `-b`.
    pub byte_offset: bool,
    /// Each line begins with its target's name.
    pub names: bool,
    /// `-l` or `-L` (these win over `-c`).
    pub list: Option<ListFiles>,
    /// `-o`: the matches, each on a line of its own.
    pub only_matching: bool,
    /// `-v` (with `-o`, the matches of context lines are printed).
    pub invert: bool,
    /// `-A`, `-B` or `-C` was given (0 too): groups of lines that are not
    /// adjacent are separated by `--`.
    pub group_separators: bool,
    /// Lines of context after a selected line (`-A`).
    pub after_context: u64,
}

/// What GNU grep prints for a set of outputs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GrepPrint {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// The targets whose matching lines it withheld as binary data; it says
    /// "binary file matches" for each on standard error.
    pub binary_matches: Vec<String>,
}

/// What GNU grep prints for these outputs. Lines of binary data are
/// withheld as GNU grep withholds them: from the 96 KiB piece of the target
/// that holds its first NUL byte on, no line is printed, and a target with a
/// selected line there is named in [`GrepPrint::binary_matches`]. (GNU grep
/// also reads NULs as line ends from there on; the kernel counts that way.)
pub fn format_grep(outputs: &[TargetOutput], format: &GrepFormat) -> GrepPrint {
    let mut printer = GrepPrinter::new(*format);
    let mut print = GrepPrint::default();
    for t in outputs {
        // Writing into a Vec does not fail.
        let _ = printer.target(&mut print.stdout, t);
    }
    print.binary_matches = printer.binary_matches;
    print
}

/// GNU grep's output made as a command's output streams: lines of a
/// target as they come ([`GrepPrinter::lines`], all before the target's
/// binary data, if any), then its answer ([`GrepPrinter::target`]).
#[derive(Debug)]
pub struct GrepPrinter {
    format: GrepFormat,
    /// GNU grep writes `--` before a group once any target had a selected
    /// line, printed or not.
    used: bool,
    at: TargetState,
    /// The targets whose matching lines were withheld as binary data.
    pub binary_matches: Vec<String>,
    /// Where a line is put together before it is written.
    scratch: Vec<u8>,
}

/// Where the printer is in the current target.
#[derive(Debug, Default)]
struct TargetState {
    last_line: Option<u64>,
    /// Context lines still owed after the last selected line printed.
    pending: u64,
    /// The lines GNU grep's reading NULs as line ends adds.
    nul_lines: u64,
}

impl GrepPrinter {
    /// A printer with GNU grep's output flags.
    pub fn new(format: GrepFormat) -> GrepPrinter {
        GrepPrinter {
            format,
            used: false,
            at: TargetState::default(),
            binary_matches: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Prints lines of `target` that come before its answer.
    pub fn lines<W: Write>(
        &mut self,
        out: &mut W,
        target: &str,
        lines: &[LineRun],
    ) -> io::Result<()> {
        if self.format.list.is_some() || self.format.count {
            return Ok(());
        }
        let g = GrepOutput::default();
        self.print_lines(out, target, &g, lines).map(|_| ())
    }

    /// Prints a target's answer (its lines after those printed by
    /// [`GrepPrinter::lines`]).
    pub fn target<W: Write>(&mut self, out: &mut W, t: &TargetOutput) -> io::Result<()> {
        let format = &self.format;
        let Output::Grep(g) = &t.output else {
            return Ok(());
        };
        if let Some(list) = format.list {
            if (g.matching_lines > 0) == (list == ListFiles::WithMatches) {
                out.write_all(t.target.as_bytes())?;
                out.write_all(b"\n")?;
            }
        } else if format.count {
            if format.names {
                out.write_all(t.target.as_bytes())?;
                out.write_all(b":")?;
            }
            writeln!(out, "{}", g.matching_lines)?;
        } else if self.print_lines(out, &t.target, g, &g.lines)? {
            self.binary_matches.push(t.target.clone());
        }
        self.at = TargetState::default();
        Ok(())
    }

    /// Prints lines of one target (`g` holds its first NUL, if known);
    /// true when a selected line lies in its binary data, withheld.
    fn print_lines<W: Write>(
        &mut self,
        out: &mut W,
        target: &str,
        g: &GrepOutput,
        lines: &[LineRun],
    ) -> io::Result<bool> {
        let binary_from = g.first_nul.map(|at| at - at % GNU_GREP_READ_BYTES);
        let mut binary = false;
        for run in lines {
            match run {
                LineRun::Block(b) if binary_from.is_none_or(|from| b.end_offset() < from) => {
                    self.print_block(out, target, b)?;
                }
                LineRun::Block(b) => {
                    for line in b.match_lines() {
                        binary |= self.print_line(out, target, g, &line, binary_from)?;
                    }
                }
                LineRun::One(line) => {
                    binary |= self.print_line(out, target, g, line, binary_from)?;
                }
            }
        }
        Ok(binary)
    }

    /// Prints a block of selected lines that holds no binary data.
    fn print_block<W: Write>(
        &mut self,
        out: &mut W,
        target: &str,
        b: &LineBlock,
    ) -> io::Result<()> {
        let format = &self.format;
        let adjacent = self.at.last_line.is_some_and(|n| n + 1 == b.first_line());
        if format.group_separators && self.used && !adjacent {
            out.write_all(b"--\n")?;
        }
        if format.only_matching {
            // -o sends no blocks; one that came prints what -o would of it:
            // nothing but its matches, which it does not hold.
        } else if !format.names && !format.line_number && !format.byte_offset {
            out.write_all(b.text())?;
        } else {
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            for (line_number, offset, text) in b.each() {
                line_head(&mut buf, target, line_number, offset, false, format);
                buf.extend_from_slice(text);
                buf.push(b'\n');
                if buf.len() >= SCRATCH_BYTES {
                    out.write_all(&buf)?;
                    buf.clear();
                }
            }
            let written = out.write_all(&buf);
            self.scratch = buf;
            written?;
        }
        self.at.last_line = Some(b.last_line());
        self.used = true;
        self.at.pending = format.after_context;
        Ok(())
    }

    /// Prints one line; true when it is a selected line in binary data,
    /// withheld.
    fn print_line<W: Write>(
        &mut self,
        out: &mut W,
        target: &str,
        g: &GrepOutput,
        line: &MatchLine,
        binary_from: Option<u64>,
    ) -> io::Result<bool> {
        let format = &self.format;
        let at = &mut self.at;
        // One line's bytes go out in one write.
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let newline_at = line.byte_offset + line.len_bytes;
        if let Some(from) = binary_from.filter(|&from| newline_at >= from) {
            let binary = !line.context;
            self.used |= binary;
            let owed = (at.pending, &mut at.nul_lines);
            at.pending = binary_context(&mut buf, (target, g), line, from, owed, format);
            let written = out.write_all(&buf);
            self.scratch = buf;
            return written.map(|()| binary);
        }
        let adjacent = at.last_line.is_some_and(|n| n + 1 == line.line_number);
        if format.group_separators && self.used && !adjacent {
            buf.extend_from_slice(b"--\n");
        }
        let head = |out: &mut Vec<u8>, offset: u64| {
            line_head(out, target, line.line_number, offset, line.context, format);
        };
        if format.only_matching {
            for (at, bytes) in &line.matches {
                head(&mut buf, line.byte_offset + at);
                buf.extend_from_slice(bytes);
                buf.push(b'\n');
            }
        } else {
            head(&mut buf, line.byte_offset);
            buf.extend_from_slice(&line.text);
            buf.push(b'\n');
        }
        at.last_line = Some(line.line_number);
        self.used |= !line.context;
        at.pending = if line.context {
            at.pending.saturating_sub(1)
        } else {
            format.after_context
        };
        let written = out.write_all(&buf);
        self.scratch = buf;
        written.map(|()| false)
    }
}

/// A line in a target's binary data, past `from` (where GNU grep's 96 KiB
/// piece with the first NUL starts), with `pending` context lines owed:
/// GNU grep prints no line there, except the context still owed after a
/// selected line printed before, piece by piece until a piece holds a
/// selected line, and it reads NULs there as line ends (`owed.1` counts
/// the lines that adds). Returns the context still owed.
fn binary_context(
    out: &mut Vec<u8>,
    (target, g): (&str, &GrepOutput),
    line: &MatchLine,
    from: u64,
    owed: (u64, &mut u64),
    format: &GrepFormat,
) -> u64 {
    let (pending, nul_lines) = owed;
    let piece = |l: &MatchLine| (l.byte_offset + l.len_bytes) / GNU_GREP_READ_BYTES;
    let here = piece(line);
    let selected_here = g
        .match_lines()
        .filter(|l| !l.context && l.byte_offset + l.len_bytes >= from)
        .any(|l| piece(&l) <= here);
    if !line.context || pending == 0 || selected_here || format.only_matching {
        return 0;
    }
    let mut pending = pending;
    let mut at = 0u64;
    for (i, text) in line.text.split(|&b| b == 0).enumerate() {
        if pending == 0 {
            break;
        }
        let number = line.line_number + *nul_lines + i as u64;
        line_head(out, target, number, line.byte_offset + at, true, format);
        out.extend_from_slice(text);
        out.push(b'\n');
        at += text.len() as u64 + 1;
        pending -= 1;
    }
    *nul_lines += line.text.iter().filter(|&&b| b == 0).count() as u64;
    pending
}

/// The name, line number and byte offset before a line, each followed by
/// `:` (a selected line) or `-` (a context line).
fn line_head(
    out: &mut Vec<u8>,
    target: &str,
    line_number: u64,
    offset: u64,
    context: bool,
    f: &GrepFormat,
) {
    let sep = if context { b'-' } else { b':' };
    if f.names {
        out.extend_from_slice(target.as_bytes());
        out.push(sep);
    }
    if f.line_number {
        // Into a Vec: cannot fail, and makes no String per line.
        let _ = write!(out, "{line_number}");
        out.push(sep);
    }
    if f.byte_offset {
        let _ = write!(out, "{offset}");
        out.push(sep);
    }
}
