use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One page of one node's device: `bus:chip:block:page`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PageAddr {
    /// Bus (channel).
    pub bus: u32,
    /// Chip on the bus.
    pub chip: u32,
    /// Erase block in the chip.
    pub block: u32,
    /// Page in the block.
    pub page: u32,
}

/// One erase block: `bus:chip:block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockAddr {
    /// Bus (channel).
    pub bus: u32,
    /// Chip on the bus.
    pub chip: u32,
    /// Erase block in the chip.
    pub block: u32,
}

impl PageAddr {
    /// The block this page belongs to.
    pub fn block_addr(&self) -> BlockAddr {
        BlockAddr {
            bus: self.bus,
            chip: self.chip,
            block: self.block,
        }
    }
}

impl BlockAddr {
    /// Page `page` of this block.
    pub fn page(&self, page: u32) -> PageAddr {
        PageAddr {
            bus: self.bus,
            chip: self.chip,
            block: self.block,
            page,
        }
    }
}

impl fmt::Display for PageAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}:{}", self.bus, self.chip, self.block, self.page)
    }
}

impl fmt::Display for BlockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.bus, self.chip, self.block)
    }
}

/// Why a textual address did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad address {text:?}: {reason}")]
pub struct AddrParseError {
    /// The text as given.
    pub text: String,
    /// What was wrong with it.
    pub reason: String,
}

/// Parses exactly `n` colon-separated unsigned fields.
pub fn parse_fields(text: &str, names: &[&str]) -> Result<Vec<u32>, AddrParseError> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != names.len() {
        return Err(AddrParseError {
            text: text.to_string(),
            reason: format!("expected {} fields {}", names.len(), names.join(":")),
        });
    }
    parts
        .iter()
        .zip(names)
        .map(|(part, name)| {
            part.trim().parse::<u32>().map_err(|_| AddrParseError {
                text: text.to_string(),
                reason: format!("{name} {part:?} is not an unsigned integer"),
            })
        })
        .collect()
}

impl FromStr for PageAddr {
    type Err = AddrParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let f = parse_fields(text, &["bus", "chip", "block", "page"])?;
        Ok(PageAddr {
            bus: f[0],
            chip: f[1],
            block: f[2],
            page: f[3],
        })
    }
}

impl FromStr for BlockAddr {
    type Err = AddrParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let f = parse_fields(text, &["bus", "chip", "block"])?;
        Ok(BlockAddr {
            bus: f[0],
            chip: f[1],
            block: f[2],
        })
    }
}
