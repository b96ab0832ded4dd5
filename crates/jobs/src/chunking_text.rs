//! A bucket's chunking as people type it (`fixed:8K`, `fastcdc`,
//! `parquet:2K,8K,32K`) and read it (`fixed 8.0 KiB chunks`), the same in
//! the CLI's `quarry mb` and the Python package's `make_bucket`.

use quarry_store_api::{Chunking, StoreError};

use crate::size::{human_bytes, parse_size, SizeError};

/// A chunking text that does not parse or names chunks out of range.
#[derive(Debug, thiserror::Error)]
pub enum ChunkingTextError {
    /// Not one of the forms.
    #[error("--chunking {text:?}: {reason}")]
    Form {
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A size in it does not parse.
    #[error(transparent)]
    Size(#[from] SizeError),
    /// The sizes are out of the store's bounds.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Parses `fixed[:SIZE]`, `fastcdc[:MIN,AVG,MAX]` (or `cdc`),
/// `parquet[:MIN,AVG,MAX]` and `auto[:MIN,AVG,MAX]` (the FastCDC sizes of
/// what is not Parquet pages).
pub fn parse_chunking(text: &str) -> Result<Chunking, ChunkingTextError> {
    let (kind, params) = text.split_once(':').unwrap_or((text, ""));
    let chunking = match kind {
        "fixed" if params.is_empty() => Chunking::DEFAULT_FIXED,
        "fixed" => Chunking::fixed(size_u32(params)?)?,
        "fastcdc" | "cdc" => fastcdc_params(text, params)?,
        "parquet" => match fastcdc_params(text, params)? {
            Chunking::FastCdc { min, avg, max } => Chunking::Parquet { min, avg, max },
            other => other,
        },
        "auto" => match fastcdc_params(text, params)? {
            Chunking::FastCdc { min, avg, max } => Chunking::Auto { min, avg, max },
            other => other,
        },
        other => {
            return Err(ChunkingTextError::Form {
                text: text.to_string(),
                reason: format!(
                    "unknown kind {other:?} (fixed:SIZE, fastcdc[:MIN,AVG,MAX], \
                     parquet[:MIN,AVG,MAX] or auto[:MIN,AVG,MAX])"
                ),
            })
        }
    };
    chunking.validate()?;
    Ok(chunking)
}

fn size_u32(text: &str) -> Result<u32, ChunkingTextError> {
    let bytes = parse_size(text)?;
    u32::try_from(bytes).map_err(|_| ChunkingTextError::Form {
        text: text.to_string(),
        reason: "chunk size too large".to_string(),
    })
}

/// FastCDC `MIN,AVG,MAX` after a kind, or the default sizes.
fn fastcdc_params(text: &str, params: &str) -> Result<Chunking, ChunkingTextError> {
    if params.is_empty() {
        return Ok(Chunking::DEFAULT_FASTCDC);
    }
    let parts: Vec<&str> = params.split(',').collect();
    let [min, avg, max] = parts[..] else {
        return Err(ChunkingTextError::Form {
            text: text.to_string(),
            reason: "FastCDC takes MIN,AVG,MAX".to_string(),
        });
    };
    Ok(Chunking::fastcdc(
        size_u32(min)?,
        size_u32(avg)?,
        size_u32(max)?,
    )?)
}

/// A chunking as `quarry ls` and `quarry stat` describe it.
pub fn describe_chunking(c: &Chunking) -> String {
    let sizes = |min: u32, avg: u32, max: u32| {
        format!(
            "{} / {} / {}",
            human_bytes(u64::from(min)),
            human_bytes(u64::from(avg)),
            human_bytes(u64::from(max))
        )
    };
    match *c {
        Chunking::Fixed { size } => format!("fixed {} chunks", human_bytes(u64::from(size))),
        Chunking::FastCdc { min, avg, max } => format!("FastCDC chunks {}", sizes(min, avg, max)),
        Chunking::Parquet { min, avg, max } => {
            format!(
                "parquet (Parquet pages; else FastCDC {})",
                sizes(min, avg, max)
            )
        }
        Chunking::Auto { min, avg, max } => {
            format!(
                "auto (Parquet pages; else FastCDC {})",
                sizes(min, avg, max)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_bad_ones_say_why() {
        assert_eq!(
            parse_chunking("fixed:8K").unwrap(),
            Chunking::Fixed { size: 8192 }
        );
        assert_eq!(
            parse_chunking("fastcdc").unwrap(),
            Chunking::DEFAULT_FASTCDC
        );
        assert_eq!(
            parse_chunking("parquet").unwrap(),
            Chunking::DEFAULT_PARQUET
        );
        assert_eq!(
            parse_chunking("auto:2K,8K,32K").unwrap(),
            Chunking::Auto {
                min: 2048,
                avg: 8192,
                max: 32768
            }
        );
        let e = parse_chunking("zip").unwrap_err().to_string();
        assert!(e.contains("unknown kind \"zip\""), "{e}");
        let e = parse_chunking("parquet:2K,3K,32K").unwrap_err().to_string();
        assert!(e.contains("not a power of two"), "{e}");
        let e = parse_chunking("fastcdc:2K,8K").unwrap_err().to_string();
        assert!(e.contains("MIN,AVG,MAX"), "{e}");
        assert_eq!(
            describe_chunking(&Chunking::Fixed { size: 8192 }),
            "fixed 8.0 KiB chunks"
        );
        assert!(describe_chunking(&Chunking::DEFAULT_PARQUET).starts_with("parquet (Parquet pages"));
    }
}
