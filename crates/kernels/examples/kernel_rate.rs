//! Single-core rate of each built-in kernel over generated text, folded in
//! 1 MiB blocks in memory: `cargo run --release -p quarry-kernels --example
//! kernel_rate [MiB]`.

use std::time::Instant;

use quarry_kernels::{compile, GrepSpec, GrepSyntax, KernelSpec, WcSpec};

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let words = [
        "storage", "would", "the", "of", "near", "data", "kernel", "flash", "node", "page",
    ];
    let mut text = Vec::with_capacity(mib << 20);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    while text.len() < mib << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.extend_from_slice(words[(x % 10) as usize].as_bytes());
        text.push(if x.is_multiple_of(12) { b'\n' } else { b' ' });
    }
    let specs = [
        (
            "fgrep8",
            KernelSpec::Fgrep8 {
                pattern: *b"flashes!",
            },
        ),
        (
            "grep -F",
            KernelSpec::Grep(GrepSpec {
                lines: false,
                ..GrepSpec::new("flashes", GrepSyntax::Fixed)
            }),
        ),
        (
            "wc -l",
            KernelSpec::Wc(WcSpec {
                words: false,
                word: None,
                top: None,
                locale: quarry_kernels::WcLocale::C,
            }),
        ),
        (
            "wc -w",
            KernelSpec::Wc(WcSpec {
                words: true,
                word: None,
                top: None,
                locale: quarry_kernels::WcLocale::C,
            }),
        ),
        (
            "wordcount would",
            KernelSpec::Wc(WcSpec {
                words: false,
                word: Some(b"would".to_vec()),
                top: None,
                locale: quarry_kernels::WcLocale::C,
            }),
        ),
        (
            "histogram top 10",
            KernelSpec::Wc(WcSpec {
                words: false,
                word: None,
                top: Some(10),
                locale: quarry_kernels::WcLocale::C,
            }),
        ),
        ("checksum", KernelSpec::Checksum),
    ];
    // A second argument picks the kernels whose names contain it.
    let only = std::env::args().nth(2).unwrap_or_default();
    for (name, spec) in specs {
        if !name.contains(only.as_str()) {
            continue;
        }
        let kernel = compile(&spec).expect("kernel");
        let started = Instant::now();
        let mut part = kernel.empty(0);
        for block in text.chunks(1 << 20) {
            part = kernel.fold(part, block).expect("fold");
        }
        let out = kernel.finish(part).expect("finish");
        let secs = started.elapsed().as_secs_f64();
        let rate = text.len() as f64 / secs / 1e6;
        let shown = format!("{out:?}");
        println!(
            "{name:>18}: {rate:8.0} MB/s  {}",
            &shown[..shown.len().min(60)]
        );
    }
}
