//! What GNU wc 9.1 prints, and the locale it counts words in.

use std::ffi::CStr;
use std::sync::OnceLock;

use quarry_kernels_api::{Output, TargetOutput, WcLocale};

/// Whether a locale's codeset (`nl_langinfo(CODESET)`) is UTF-8.
pub fn is_utf8_codeset(codeset: &[u8]) -> bool {
    codeset.eq_ignore_ascii_case(b"UTF-8") || codeset.eq_ignore_ascii_case(b"utf8")
}

/// The word rule of the locale this process runs under, picked as GNU wc
/// picks its locale: `setlocale(LC_CTYPE, "")` reads `LC_ALL`, then
/// `LC_CTYPE`, then `LANG`, and leaves the C locale when the named one is
/// not installed here (`LANG=en_US.UTF-8` without that locale counts as C
/// in wc too). A UTF-8 codeset means UTF-8; every other locale counts as C.
/// Read once, before any thread of ours runs (setlocale is not thread
/// safe), and the process's locale is put back.
pub fn wc_locale() -> WcLocale {
    static LOCALE: OnceLock<WcLocale> = OnceLock::new();
    *LOCALE.get_or_init(|| {
        // SAFETY: setlocale and nl_langinfo are called with valid C strings;
        // the strings they return are copied before the next call.
        unsafe {
            let before = libc::setlocale(libc::LC_CTYPE, std::ptr::null());
            let before = (!before.is_null()).then(|| CStr::from_ptr(before).to_owned());
            let chosen = libc::setlocale(libc::LC_CTYPE, c"".as_ptr());
            let codeset = libc::nl_langinfo(libc::CODESET);
            let utf8 = !chosen.is_null()
                && !codeset.is_null()
                && is_utf8_codeset(CStr::from_ptr(codeset).to_bytes());
            if let Some(before) = before {
                libc::setlocale(libc::LC_CTYPE, before.as_ptr());
            }
            if utf8 {
                WcLocale::Utf8
            } else {
                WcLocale::C
            }
        }
    })
}

/// What GNU wc (coreutils 9) prints for these outputs: each count right
/// aligned to the width of the total byte count (1 for a single count of a
/// single target), a "total" line for several targets.
pub fn format_wc(outputs: &[TargetOutput], lines: bool, words: bool, bytes: bool) -> String {
    let counts: Vec<(&str, [u64; 3])> = outputs
        .iter()
        .filter_map(|t| match &t.output {
            Output::Wc(w) => Some((t.target.as_str(), [w.lines, w.words, w.bytes])),
            _ => None,
        })
        .collect();
    let total: [u64; 3] = counts.iter().fold([0; 3], |acc, (_, c)| {
        [acc[0] + c[0], acc[1] + c[1], acc[2] + c[2]]
    });
    let shown = [lines, words, bytes];
    let single = counts.len() == 1 && shown.iter().filter(|s| **s).count() == 1;
    let width = if single {
        1
    } else {
        total_size_digits(outputs)
    };
    let mut out = String::new();
    let mut row = |name: &str, c: &[u64; 3]| {
        let cols: Vec<String> = (0..3)
            .filter(|&i| shown[i])
            .map(|i| format!("{:>width$}", c[i]))
            .collect();
        out.push_str(&cols.join(" "));
        out.push(' ');
        out.push_str(name);
        out.push('\n');
    };
    for (name, c) in &counts {
        row(name, c);
    }
    if counts.len() > 1 {
        row("total", &total);
    }
    out
}

fn total_size_digits(outputs: &[TargetOutput]) -> usize {
    let total: u64 = outputs.iter().map(|t| t.size_bytes).sum();
    total.max(1).to_string().len()
}
