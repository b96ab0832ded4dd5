//! Kernel and target arguments as `quarry run` and the mount's input files
//! take them.

use std::num::ParseIntError;

use quarry_kernels_api::{GrepSpec, GrepSyntax, Job, KernelSpec, RmwBatch, RmwOp, Target, WcSpec};

use crate::size::{parse_size, SizeError};
use crate::wc_output::wc_locale;

/// A kernel's arguments or a target that do not parse; the message names
/// what was wrong and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum JobParseError {
    /// Fewer arguments than the kernel takes before its targets.
    #[error("kernel {kernel} needs {needed} argument(s) before its targets")]
    MissingArguments {
        /// The kernel named.
        kernel: String,
        /// How many it takes.
        needed: usize,
    },
    /// An fgrep8 pattern that is not 8 bytes long.
    #[error("fgrep8 takes a pattern of exactly 8 bytes; {pattern:?} has {len_bytes}")]
    Fgrep8Pattern {
        /// The pattern given.
        pattern: String,
        /// Its length.
        len_bytes: usize,
    },
    /// A number that does not parse (histogram K, an rmw delta, a page).
    #[error("{what} {text:?}: {source}")]
    Number {
        /// What the number was for.
        what: &'static str,
        /// The text given.
        text: String,
        /// Why it is no number.
        source: ParseIntError,
    },
    /// An rmw operation that is not `OFFSET:DELTA`.
    #[error("rmw operation {0:?}: write OFFSET:DELTA")]
    RmwOperation(String),
    /// A kernel that does not exist.
    #[error(
        "no kernel {0:?}: fgrep8, grep, egrep, fgrep, wc, wordcount, histogram, checksum, rmw"
    )]
    NoKernel(String),
    /// A target of none of the forms.
    #[error("{text:?}: {expected}")]
    Target {
        /// The target given.
        text: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A size that does not parse.
    #[error(transparent)]
    Size(#[from] SizeError),
}

/// Parses a target as the commands name them.
pub fn parse_target(text: &str) -> Result<Target, JobParseError> {
    let bad = |expected| JobParseError::Target {
        text: text.to_string(),
        expected,
    };
    if let Some(rest) = text.strip_prefix("volume:") {
        let (name, range) = match rest.split_once('@') {
            Some((n, r)) => (n, Some(r)),
            None => (rest, None),
        };
        let (offset_bytes, len_bytes) = match range {
            None => (0, None),
            Some(r) => match r.split_once('+') {
                Some((o, l)) => (parse_size(o)?, Some(parse_size(l)?)),
                None => (parse_size(r)?, None),
            },
        };
        if name.is_empty() {
            return Err(bad("volume:NAME[@OFFSET[+LEN]] needs a volume name"));
        }
        return Ok(Target::Volume {
            name: name.to_string(),
            offset_bytes,
            len_bytes,
        });
    }
    if let Some(rest) = text.strip_prefix("linear:") {
        let Some((first, pages)) = rest.split_once('+') else {
            return Err(bad("a linear range is linear:FIRST+PAGES"));
        };
        let number = |what, text: &str| {
            text.parse().map_err(|source| JobParseError::Number {
                what,
                text: text.to_string(),
                source,
            })
        };
        return Ok(Target::Linear {
            first_page: number("first page", first)?,
            pages: number("page count", pages)?,
        });
    }
    let Some((bucket, key)) = text.split_once('/') else {
        return Err(bad("name objects as BUCKET/KEY, BUCKET/PREFIX* or BUCKET/"));
    };
    if bucket.is_empty() {
        return Err(bad("no bucket before the '/'"));
    }
    if key.is_empty() {
        return Ok(Target::Prefix {
            bucket: bucket.into(),
            prefix: String::new(),
        });
    }
    if let Some(prefix) = key.strip_suffix('*') {
        return Ok(Target::Prefix {
            bucket: bucket.into(),
            prefix: prefix.into(),
        });
    }
    Ok(Target::Object {
        bucket: bucket.into(),
        key: key.into(),
    })
}

/// Parses `quarry run KERNEL ARGS...` into a job and the remaining
/// arguments (the targets).
pub fn parse_job(kernel: &str, args: &[String]) -> Result<(Job, Vec<String>), JobParseError> {
    let need = |n: usize| -> Result<(), JobParseError> {
        if args.len() < n {
            return Err(JobParseError::MissingArguments {
                kernel: kernel.to_string(),
                needed: n,
            });
        }
        Ok(())
    };
    let job = match kernel {
        "fgrep8" => {
            need(1)?;
            let p = args[0].as_bytes();
            let Ok(pattern) = <[u8; 8]>::try_from(p) else {
                return Err(JobParseError::Fgrep8Pattern {
                    pattern: args[0].clone(),
                    len_bytes: p.len(),
                });
            };
            (Job::Scan(KernelSpec::Fgrep8 { pattern }), 1)
        }
        "grep" | "egrep" | "fgrep" => {
            need(1)?;
            let syntax = match kernel {
                "egrep" => GrepSyntax::Extended,
                "fgrep" => GrepSyntax::Fixed,
                _ => GrepSyntax::Basic,
            };
            let spec = GrepSpec::new(args[0].clone(), syntax);
            (Job::Scan(KernelSpec::Grep(spec)), 1)
        }
        "wc" => (
            Job::Scan(KernelSpec::Wc(WcSpec {
                words: true,
                word: None,
                top: None,
                locale: wc_locale(),
            })),
            0,
        ),
        "wordcount" => {
            need(1)?;
            let spec = WcSpec {
                words: false,
                word: Some(args[0].as_bytes().to_vec()),
                top: None,
                locale: wc_locale(),
            };
            (Job::Scan(KernelSpec::Wc(spec)), 1)
        }
        "histogram" => {
            need(1)?;
            let k: u32 = args[0].parse().map_err(|source| JobParseError::Number {
                what: "histogram K",
                text: args[0].clone(),
                source,
            })?;
            let spec = WcSpec {
                words: false,
                word: None,
                top: Some(k),
                locale: wc_locale(),
            };
            (Job::Scan(KernelSpec::Wc(spec)), 1)
        }
        "checksum" => (Job::Scan(KernelSpec::Checksum), 0),
        "rmw" => {
            need(2)?;
            return Ok((parse_rmw(&args[0], &args[1..])?, Vec::new()));
        }
        other => return Err(JobParseError::NoKernel(other.to_string())),
    };
    Ok((job.0, args[job.1..].to_vec()))
}

/// An rmw batch on `volume` from `OFFSET:DELTA` operations.
fn parse_rmw(volume: &str, operations: &[String]) -> Result<Job, JobParseError> {
    let mut ops = Vec::with_capacity(operations.len());
    for op in operations {
        let Some((offset, delta)) = op.split_once(':') else {
            return Err(JobParseError::RmwOperation(op.clone()));
        };
        ops.push(RmwOp {
            offset_bytes: parse_size(offset)?,
            delta: delta.parse().map_err(|source| JobParseError::Number {
                what: "rmw delta",
                text: delta.to_string(),
                source,
            })?,
        });
    }
    Ok(Job::Rmw(RmwBatch {
        volume: volume.to_string(),
        ops,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_target("b/k/x.txt").unwrap(),
            Target::Object {
                bucket: "b".into(),
                key: "k/x.txt".into()
            }
        );
        assert_eq!(
            parse_target("b/logs/*").unwrap(),
            Target::Prefix {
                bucket: "b".into(),
                prefix: "logs/".into()
            }
        );
        assert_eq!(
            parse_target("b/").unwrap(),
            Target::Prefix {
                bucket: "b".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            parse_target("volume:v@4K+1M").unwrap(),
            Target::Volume {
                name: "v".into(),
                offset_bytes: 4096,
                len_bytes: Some(1 << 20)
            }
        );
        assert_eq!(
            parse_target("linear:10+5").unwrap(),
            Target::Linear {
                first_page: 10,
                pages: 5
            }
        );
        for bad in ["nokey", "/k", "linear:5", "volume:@1", "linear:x+1"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
        let error = parse_target("linear:x+1").unwrap_err().to_string();
        assert!(error.contains("first page \"x\""), "{error}");
    }

    #[test]
    fn jobs_parse() {
        let args: Vec<String> = ["would", "b/k"].iter().map(|s| s.to_string()).collect();
        let (job, rest) = parse_job("wordcount", &args).unwrap();
        assert_eq!(job.kernel_name(), "wc");
        assert_eq!(rest, vec!["b/k".to_string()]);
        assert!(parse_job("fgrep8", &["short".to_string()]).is_err());
        assert!(parse_job("nope", &[]).is_err());
        let (job, rest) = parse_job("rmw", &["v".into(), "8:1".into(), "4K:2".into()]).unwrap();
        assert!(rest.is_empty());
        assert_eq!(
            job,
            Job::Rmw(RmwBatch {
                volume: "v".into(),
                ops: vec![
                    RmwOp {
                        offset_bytes: 8,
                        delta: 1
                    },
                    RmwOp {
                        offset_bytes: 4096,
                        delta: 2
                    }
                ]
            })
        );
        let error = parse_job("rmw", &["v".into(), "8".into()]).unwrap_err();
        assert!(error.to_string().contains("OFFSET:DELTA"), "{error}");
    }
}
