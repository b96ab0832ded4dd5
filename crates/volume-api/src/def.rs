//! A volume's definition, the naming rules and the striping arithmetic.

use serde::{Deserialize, Serialize};

use super::{BlockVolumeError, NodeId};

/// A volume with id `id` keeps its pages in space `VOLUME_SPACE_BASE + id`
/// of each member's space manager. Spaces below it belong to others (the
/// object store takes 1, 2 and 3), so volume pages never mix with theirs.
pub const VOLUME_SPACE_BASE: u32 = 1000;
/// The largest volume id (its space is `u32::MAX`).
pub const MAX_VOLUME_ID: u32 = u32::MAX - VOLUME_SPACE_BASE;
/// Longest volume name, in bytes.
pub const MAX_VOLUME_NAME_BYTES: usize = 64;
/// Most member nodes of one volume (the protocol's cluster bound).
pub const MAX_VOLUME_MEMBERS: usize = 1024;
/// Most volumes one node holds: bounds the registry file and a listing
/// answer (1024 definitions over 1024 members each still fit in one body).
pub const MAX_VOLUMES_PER_NODE: usize = 1024;
/// Most pages of one volume (2^40: 8 PiB at 8 KiB pages). Volumes are
/// thin-provisioned, so this bounds arithmetic, not what is stored.
pub const MAX_VOLUME_PAGES: u64 = 1 << 40;
/// Largest page of a volume: a volume's pages are its members' device
/// pages, and no device geometry has larger ones
/// (`quarry_geometry::MAX_PAGE_SIZE_BYTES`, which `quarry-volume`'s tests
/// check this against). A view sizes a read's buffer by the page size a
/// node's answer names, so a bound here bounds that buffer.
pub const MAX_VOLUME_PAGE_SIZE_BYTES: u32 = 64 * 1024;

/// What every member of a volume stores about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeDef {
    /// The name clients use (see [`validate_name`]).
    pub name: String,
    /// Picks the space on every member: [`VolumeDef::space`]. Unique on
    /// each member node.
    pub id: u32,
    /// Random number drawn at creation: calls carry it, so a handle to a
    /// deleted volume cannot touch a new volume of the same name.
    pub instance: u64,
    /// Logical pages.
    pub size_pages: u64,
    /// Bytes per page (every member's device page size).
    pub page_size_bytes: u32,
    /// The member nodes in stripe order: logical page `L` lives on
    /// `members[L % n]`.
    pub members: Vec<NodeId>,
    /// When it was created, Unix milliseconds.
    pub created_unix_ms: u64,
}

impl VolumeDef {
    /// The space of each member's space manager that holds the pages.
    pub fn space(&self) -> u32 {
        VOLUME_SPACE_BASE.saturating_add(self.id)
    }

    /// Logical size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_pages
            .saturating_mul(u64::from(self.page_size_bytes))
    }

    /// Where logical page `page` lives: the member's position in
    /// [`members`](Self::members), the node, and the page's index in the
    /// volume's space there. `None` past the end.
    pub fn locate(&self, page: u64) -> Option<(usize, NodeId, u64)> {
        if page >= self.size_pages || self.members.is_empty() {
            return None;
        }
        let (member, local) = stripe(page, self.members.len());
        Some((member, self.members[member], local))
    }

    /// Pages of the volume on the member at position `member`.
    pub fn member_pages(&self, member: usize) -> u64 {
        member_pages(self.size_pages, self.members.len(), member)
    }

    /// Checks every field against its rule; the error names the field.
    pub fn validate(&self) -> Result<(), BlockVolumeError> {
        validate_name(&self.name)?;
        if self.id == 0 || self.id > MAX_VOLUME_ID {
            return Err(BlockVolumeError::InvalidSize {
                reason: format!("volume id {} is outside 1..={MAX_VOLUME_ID}", self.id),
            });
        }
        if self.page_size_bytes == 0 || self.page_size_bytes > MAX_VOLUME_PAGE_SIZE_BYTES {
            return Err(BlockVolumeError::InvalidSize {
                reason: format!(
                    "a page size of {} bytes, not in 1..={MAX_VOLUME_PAGE_SIZE_BYTES}",
                    self.page_size_bytes
                ),
            });
        }
        if self.size_pages == 0 || self.size_pages > MAX_VOLUME_PAGES {
            return Err(BlockVolumeError::InvalidSize {
                reason: format!(
                    "{} pages, a volume has 1..={MAX_VOLUME_PAGES}",
                    self.size_pages
                ),
            });
        }
        validate_members(&self.members)
    }
}

/// Names are 1 to 64 bytes of ASCII letters, digits, `.`, `_` and `-`,
/// starting with a letter or digit: safe in file names, URLs and shells.
pub fn validate_name(name: &str) -> Result<(), BlockVolumeError> {
    let bad = |reason: String| {
        Err(BlockVolumeError::InvalidName {
            name: name.chars().take(80).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty".into());
    }
    if name.len() > MAX_VOLUME_NAME_BYTES {
        return bad(format!(
            "{} bytes, at most {MAX_VOLUME_NAME_BYTES}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(format!(
            "{c:?} is not allowed (letters, digits, '.', '_' and '-' are)"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it must start with a letter or a digit".into());
    }
    Ok(())
}

/// A member list is 1 to [`MAX_VOLUME_MEMBERS`] distinct nodes.
pub fn validate_members(members: &[NodeId]) -> Result<(), BlockVolumeError> {
    let bad = |reason: String| Err(BlockVolumeError::InvalidMembers { reason });
    if members.is_empty() {
        return bad("no member nodes".into());
    }
    if members.len() > MAX_VOLUME_MEMBERS {
        return bad(format!(
            "{} member nodes, at most {MAX_VOLUME_MEMBERS}",
            members.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for m in members {
        if !seen.insert(*m) {
            return bad(format!("node {m} is listed twice"));
        }
    }
    Ok(())
}

/// Striping: logical page `page` of a volume over `members` nodes lives on
/// the member at position `page % members`, at index `page / members` of
/// the volume's space there. Consecutive pages go to consecutive members;
/// each member's space manager spreads its pages over buses and chips.
pub fn stripe(page: u64, members: usize) -> (usize, u64) {
    let n = members.max(1) as u64;
    ((page % n) as usize, page / n)
}

/// Pages of a volume of `size_pages` pages on the member at position
/// `member` of `members`: the count of `L < size_pages` with
/// `L % members == member`.
pub fn member_pages(size_pages: u64, members: usize, member: usize) -> u64 {
    let (n, m) = (members.max(1) as u64, member as u64);
    if m >= n || m >= size_pages {
        return 0;
    }
    (size_pages - m).div_ceil(n)
}

/// A contiguous run of one member's local pages covering part of a logical
/// range: what one data call moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The member's position in the member list.
    pub member: usize,
    /// First local index.
    pub first_local: u64,
    /// Pages.
    pub count: u64,
}

impl Run {
    /// The logical page of the run's `i`-th page, for `members` members.
    pub fn logical(&self, i: u64, members: usize) -> u64 {
        (self.first_local + i) * members as u64 + self.member as u64
    }
}

/// Splits logical pages `first..first + count` of a volume over `members`
/// into runs of at most `max_run` local pages each: windows of
/// `members * max_run` logical pages, each giving every member one
/// contiguous run. Runs come window by window, member by member, so taking
/// them in order keeps every member busy.
pub fn runs(first: u64, count: u64, members: usize, max_run: u64) -> Vec<Run> {
    let n = members.max(1) as u64;
    let window = n.saturating_mul(max_run.max(1));
    let end = first.saturating_add(count);
    let mut out = Vec::new();
    let mut start = first;
    while start < end {
        let stop = start.saturating_add(window).min(end);
        for member in 0..n {
            // The first logical page at or after `start` on this member.
            let l0 = start + (member + n - start % n) % n;
            if l0 >= stop {
                continue;
            }
            out.push(Run {
                member: member as usize,
                first_local: l0 / n,
                count: (stop - 1 - l0) / n + 1,
            });
        }
        start = stop;
    }
    out
}

/// One node's space, as its volume service reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpace {
    /// The node.
    pub node: NodeId,
    /// Its device's page size.
    pub page_size_bytes: u32,
    /// The most logical pages its space manager holds (all spaces: volumes,
    /// the object store).
    pub capacity_pages: u64,
    /// Logical pages holding data now (all spaces).
    pub live_pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_follow_the_rules() {
        for good in ["a", "disk-0", "db.data_2", "9lives"] {
            validate_name(good).unwrap();
        }
        for (bad, why) in [
            ("", "empty"),
            ("-x", "start with"),
            (".x", "start with"),
            ("a b", "' '"),
            ("a/b", "'/'"),
            ("é", "'é'"),
        ] {
            let e = validate_name(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = "x".repeat(MAX_VOLUME_NAME_BYTES + 1);
        assert!(validate_name(&long)
            .unwrap_err()
            .to_string()
            .contains("65 bytes"));
    }

    #[test]
    fn members_must_be_distinct_and_present() {
        assert!(validate_members(&[]).is_err());
        let e = validate_members(&[0, 1, 0]).unwrap_err().to_string();
        assert!(e.contains("node 0 is listed twice"), "{e}");
        validate_members(&[3, 1, 2]).unwrap();
    }

    #[test]
    fn striping_goes_round_the_members() {
        let def = VolumeDef {
            name: "v".into(),
            id: 1,
            instance: 1,
            size_pages: 10,
            page_size_bytes: 512,
            members: vec![5, 2, 7],
            created_unix_ms: 0,
        };
        let located: Vec<_> = (0..10).map(|p| def.locate(p).unwrap()).collect();
        assert_eq!(located[0], (0, 5, 0));
        assert_eq!(located[1], (1, 2, 0));
        assert_eq!(located[2], (2, 7, 0));
        assert_eq!(located[3], (0, 5, 1));
        assert_eq!(located[9], (0, 5, 3));
        assert_eq!(def.locate(10), None);
        assert_eq!(
            (0..3).map(|m| def.member_pages(m)).collect::<Vec<_>>(),
            vec![4, 3, 3]
        );
        assert_eq!(def.space(), 1001);
        assert_eq!(def.size_bytes(), 5120);
    }

    proptest! {
        #[test]
        fn runs_cover_a_range_exactly_once(
            first in 0u64..200,
            count in 1u64..300,
            members in 1usize..7,
            max_run in 1u64..9,
        ) {
            let runs = runs(first, count, members, max_run);
            let mut seen = Vec::new();
            for r in &runs {
                prop_assert!(r.count >= 1 && r.count <= max_run);
                for i in 0..r.count {
                    let l = r.logical(i, members);
                    prop_assert_eq!(stripe(l, members), (r.member, r.first_local + i));
                    seen.push(l);
                }
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, (first..first + count).collect::<Vec<_>>());
        }

        #[test]
        fn member_shares_add_up_and_match_striping(size in 1u64..500, members in 1usize..9) {
            let total: u64 = (0..members).map(|m| member_pages(size, members, m)).sum();
            prop_assert_eq!(total, size);
            for m in 0..members {
                let share = member_pages(size, members, m);
                // Local indexes 0..share on member m are exactly its pages.
                let mine = (0..size).filter(|l| stripe(*l, members).0 == m).count() as u64;
                prop_assert_eq!(mine, share);
            }
        }
    }
}
