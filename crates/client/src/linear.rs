//! Reading and writing the cluster's linear page space ([`LinearSpace`]):
//! consecutive linear pages go to different nodes, then buses, then chips, so
//! one sequential stream with requests in flight keeps every node and every
//! bus busy.

use std::collections::VecDeque;

use bytes::Bytes;
use quarry_proto::PageRead;
use quarry_proto::{GlobalPageAddr, Request, Response};
use quarry_proto::{LinearSpace, LinearSpaceError};

use crate::client::{expect_done, page_of};
use crate::{Client, ClientError, Completion};

/// Most pages one [`Client::read_linear`] or [`Client::write_linear`] call
/// moves. Reads hold every page in memory until they return, so this bounds
/// the call's memory: 128 MiB at the default 8 KiB page, 1 GiB at the largest
/// (64 KiB) page. Longer streams are several calls.
pub const MAX_LINEAR_PAGES: u64 = 16 * 1024;

/// Most requests one linear call keeps in flight. The session's default
/// in-flight bound (1024 tags) is shared by every task on the connection; a
/// linear call asking for more would only wait for tags.
pub const MAX_LINEAR_QUEUE_DEPTH: usize = 1024;

impl Client {
    /// The cluster's linear page space: asks the entry node for the members
    /// ([`Request::Cluster`]), then each member for its geometry
    /// ([`Request::NodeInfo`]), and numbers their pages. Fails if a member is
    /// unreachable or the geometries differ (the error names the node).
    pub async fn linear_space(&self) -> Result<LinearSpace, ClientError> {
        let members = self.cluster().await?;
        let mut geometries = Vec::with_capacity(members.len());
        for member in &members {
            let info = self.node_info(member.id).await?;
            geometries.push((member.id, info.device.geometry));
        }
        Ok(LinearSpace::new(geometries)?)
    }

    /// Reads `count` consecutive linear pages from `first`, with up to
    /// `queue_depth` requests in flight, and returns them in linear order.
    /// Errors: `count` above [`MAX_LINEAR_PAGES`], `queue_depth` outside
    /// `1..=`[`MAX_LINEAR_QUEUE_DEPTH`], a page past the end of the space, or
    /// a page that failed ([`ClientError::LinearPage`] names the linear page
    /// and its global address). A page never programmed reads as erased
    /// (0xFF bytes, `erased` set).
    pub async fn read_linear(
        &self,
        space: &LinearSpace,
        first: u64,
        count: u64,
        queue_depth: usize,
    ) -> Result<Vec<PageRead>, ClientError> {
        check_request(space, first, count, queue_depth)?;
        let mut pages = Vec::with_capacity(count as usize);
        let requests = (first..first + count).map(|linear| {
            let addr = space.to_global(linear)?;
            Ok((linear, addr, Request::ReadPage(addr)))
        });
        self.pipeline(requests, queue_depth, |answer| {
            pages.push(page_of(answer)?);
            Ok(())
        })
        .await?;
        Ok(pages)
    }

    /// Programs `data` onto consecutive linear pages from `first`, one page
    /// per `page_size_bytes` of data (the last page padded with zero bytes),
    /// with up to `queue_depth` requests in flight, and returns the number of
    /// pages programmed (none for empty data). The pages must be erased and,
    /// within each block, next in order: the NAND rules hold here as for any
    /// program. Errors as for [`Client::read_linear`]; on an error the pages
    /// before it may have been programmed.
    ///
    /// Requests in flight are kept to at most [`LinearSpace::stride`] pages
    /// (one per chip of the cluster), because linear pages `L` and
    /// `L + stride` are consecutive pages of one block and the device takes
    /// them only in order: with a window no wider than the stride, page `L`
    /// has been answered before page `L + stride` is sent.
    pub async fn write_linear(
        &self,
        space: &LinearSpace,
        first: u64,
        data: &[u8],
        queue_depth: usize,
    ) -> Result<u64, ClientError> {
        let page_size = space.geometry().page_size_bytes as usize;
        let count = data.len().div_ceil(page_size) as u64;
        check_request(space, first, count, queue_depth)?;
        let window = queue_depth.min(usize::try_from(space.stride()).unwrap_or(usize::MAX));
        let requests = (first..first + count)
            .zip(data.chunks(page_size))
            .map(|(linear, chunk)| {
                let addr = space.to_global(linear)?;
                // One copy per page: the request must own its data (it is
                // queued on the session's writer task), and `data` is only
                // borrowed. The short last page is padded here too.
                let mut page = Vec::with_capacity(page_size);
                page.extend_from_slice(chunk);
                page.resize(page_size, 0);
                let request = Request::ProgramPage {
                    addr,
                    data: Bytes::from(page),
                    oob: Bytes::new(),
                };
                Ok((linear, addr, request))
            });
        self.pipeline(requests, window, |answer| {
            expect_done("program", answer, |r| matches!(r, Response::Done))
        })
        .await?;
        Ok(count)
    }

    /// Sends `requests` in order with at most `window` in flight and hands
    /// each answer to `on_answer` in the same order. Answers are awaited
    /// oldest first, so the requests in flight are always consecutive linear
    /// pages (which is what makes [`Client::write_linear`]'s window safe).
    async fn pipeline(
        &self,
        requests: impl Iterator<Item = Result<(u64, GlobalPageAddr, Request), ClientError>>,
        window: usize,
        mut on_answer: impl FnMut(Response) -> Result<(), ClientError>,
    ) -> Result<(), ClientError> {
        let mut in_flight: VecDeque<(u64, GlobalPageAddr, Completion)> =
            VecDeque::with_capacity(window);
        let mut finish = |(linear, addr, answer): (u64, GlobalPageAddr, Result<Response, _>)| {
            answer
                .and_then(&mut on_answer)
                .map_err(|e| linear_page_error(linear, addr, e))
        };
        for request in requests {
            let (linear, addr, request) = request?;
            if in_flight.len() >= window {
                if let Some((l, a, done)) = in_flight.pop_front() {
                    finish((l, a, done.await))?;
                }
            }
            let completion = self
                .submit(request)
                .await
                .map_err(|e| linear_page_error(linear, addr, e))?;
            in_flight.push_back((linear, addr, completion));
        }
        while let Some((l, a, done)) = in_flight.pop_front() {
            finish((l, a, done.await))?;
        }
        Ok(())
    }
}

/// Checks a linear request against the limits and the space before anything
/// is sent, so a request that cannot succeed sends nothing.
fn check_request(
    space: &LinearSpace,
    first: u64,
    count: u64,
    queue_depth: usize,
) -> Result<(), ClientError> {
    if count > MAX_LINEAR_PAGES {
        return Err(ClientError::TooManyPages {
            count,
            limit: MAX_LINEAR_PAGES,
        });
    }
    if queue_depth == 0 || queue_depth > MAX_LINEAR_QUEUE_DEPTH {
        return Err(ClientError::InvalidQueueDepth {
            queue_depth,
            limit: MAX_LINEAR_QUEUE_DEPTH,
        });
    }
    // A sum past u64 is past any space, so saturating is exact enough here.
    if first.saturating_add(count) > space.pages() {
        // Name the first page of the request that is outside the space.
        return Err(LinearSpaceError::OutOfRange {
            linear: first.max(space.pages()),
            pages: space.pages(),
        }
        .into());
    }
    Ok(())
}

fn linear_page_error(linear: u64, addr: GlobalPageAddr, error: ClientError) -> ClientError {
    ClientError::LinearPage {
        linear,
        addr,
        reason: Box::new(error),
    }
}
