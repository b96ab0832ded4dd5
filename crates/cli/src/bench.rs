//! bench placeholder
use anyhow::Result;
pub fn page(_args: &crate::BenchPageArgs) -> Result<()> { anyhow::bail!("todo") }
