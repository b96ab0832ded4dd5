//! Message bodies: the binary encoding of the hot messages (page reads,
//! programs, erases) and JSON for the rare, structured ones (NodeInfo, Cluster).

use bytes::{BufMut, Bytes, BytesMut};
use quarry_geometry::{BlockAddr, PageAddr, MAX_OOB_SIZE_BYTES, MAX_PAGE_SIZE_BYTES};

use crate::frame::{
    Frame, FrameHeader, HEADER_LEN_BYTES, MAX_ADDR_BYTES, MAX_BODY_BYTES, MAX_CLUSTER_MEMBERS,
    MAX_ERROR_MESSAGE_BYTES,
};
use crate::{
    GlobalBlockAddr, GlobalPageAddr, NodeEntry, NodeInfo, ProtoError, Request, Response,
    RoutesInfo, Service, ServiceCall, Status, Tag,
};

/// Opcode numbers; requests have the top bit clear, answers have it set.
pub mod opcode {
    /// Request: liveness check (empty body).
    pub const PING: u8 = 0x01;
    /// Request: read one page.
    pub const READ_PAGE: u8 = 0x02;
    /// Request: program one page.
    pub const PROGRAM_PAGE: u8 = 0x03;
    /// Request: erase one block.
    pub const ERASE_BLOCK: u8 = 0x04;
    /// Request: describe one node.
    pub const NODE_INFO: u8 = 0x05;
    /// Request: list the cluster.
    pub const CLUSTER: u8 = 0x06;
    /// Request: one node's links and routing table.
    pub const ROUTES: u8 = 0x07;
    /// Request: a call to a node's service.
    pub const CALL: u8 = 0x08;
    /// Answer to PING (empty body).
    pub const PONG: u8 = 0x81;
    /// Answer to READ_PAGE.
    pub const PAGE: u8 = 0x82;
    /// Success without data (program, erase).
    pub const DONE: u8 = 0x83;
    /// Answer to NODE_INFO (JSON).
    pub const NODE_INFO_ANSWER: u8 = 0x85;
    /// Answer to CLUSTER (JSON).
    pub const CLUSTER_ANSWER: u8 = 0x86;
    /// Answer to ROUTES (JSON).
    pub const ROUTES_ANSWER: u8 = 0x87;
    /// Answer to CALL: the service's answer bytes.
    pub const REPLY: u8 = 0x88;
    /// Failure: the status byte says how, the body (UTF-8) says what.
    pub const ERROR: u8 = 0xFF;
}

/// The opcode a request is sent under.
pub fn request_opcode(request: &Request) -> u8 {
    match request {
        Request::Ping => opcode::PING,
        Request::ReadPage(_) => opcode::READ_PAGE,
        Request::ProgramPage { .. } => opcode::PROGRAM_PAGE,
        Request::EraseBlock(_) => opcode::ERASE_BLOCK,
        Request::NodeInfo(_) => opcode::NODE_INFO,
        Request::Cluster => opcode::CLUSTER,
        Request::Routes(_) => opcode::ROUTES,
        Request::Call(_) => opcode::CALL,
    }
}

/// Checks that `request` fits the protocol's limits, so that encoding it later
/// cannot fail.
pub fn check_request(request: &Request) -> Result<(), ProtoError> {
    if let Request::ProgramPage { data, oob, .. } = request {
        check_page_parts(data.len(), oob.len())?;
    }
    Ok(())
}

fn check_page_parts(data_len_bytes: usize, oob_len_bytes: usize) -> Result<(), ProtoError> {
    if data_len_bytes > MAX_PAGE_SIZE_BYTES as usize {
        return Err(ProtoError::TooLarge {
            what: "page data bytes",
            len: data_len_bytes,
            limit: MAX_PAGE_SIZE_BYTES as usize,
        });
    }
    if oob_len_bytes > MAX_OOB_SIZE_BYTES as usize {
        return Err(ProtoError::TooLarge {
            what: "OOB bytes",
            len: oob_len_bytes,
            limit: MAX_OOB_SIZE_BYTES as usize,
        });
    }
    Ok(())
}

fn put_page_addr(dst: &mut BytesMut, addr: &GlobalPageAddr) {
    dst.put_u16(addr.node);
    dst.put_u32(addr.page.bus);
    dst.put_u32(addr.page.chip);
    dst.put_u32(addr.page.block);
    dst.put_u32(addr.page.page);
}

/// Writes the header with a zero length, lets `body` append, then patches the
/// length; on any failure `dst` is left as it was.
fn frame_into(
    dst: &mut BytesMut,
    header: FrameHeader,
    body: impl FnOnce(&mut BytesMut) -> Result<(), ProtoError>,
) -> Result<(), ProtoError> {
    let start = dst.len();
    header.put(dst);
    if let Err(e) = body(dst) {
        dst.truncate(start);
        return Err(e);
    }
    let body_len_bytes = dst.len() - start - HEADER_LEN_BYTES;
    if body_len_bytes > MAX_BODY_BYTES as usize {
        dst.truncate(start);
        return Err(ProtoError::BodyTooLarge {
            body_len_bytes: body_len_bytes as u64,
            limit_bytes: MAX_BODY_BYTES,
        });
    }
    let len_at = start + 12;
    dst[len_at..len_at + 4].copy_from_slice(&(body_len_bytes as u32).to_be_bytes());
    Ok(())
}

/// Appends one request frame to `dst`.
pub fn encode_request(
    tag: Tag,
    hops: u8,
    request: &Request,
    dst: &mut BytesMut,
) -> Result<(), ProtoError> {
    let header = FrameHeader::new(request_opcode(request), 0, hops, tag);
    frame_into(dst, header, |dst| {
        match request {
            Request::Ping | Request::Cluster => {}
            Request::ReadPage(addr) => put_page_addr(dst, addr),
            Request::ProgramPage { addr, data, oob } => {
                check_page_parts(data.len(), oob.len())?;
                put_page_addr(dst, addr);
                dst.put_u32(data.len() as u32);
                dst.put_u32(oob.len() as u32);
                dst.extend_from_slice(data);
                dst.extend_from_slice(oob);
            }
            Request::EraseBlock(addr) => {
                dst.put_u16(addr.node);
                dst.put_u32(addr.block.bus);
                dst.put_u32(addr.block.chip);
                dst.put_u32(addr.block.block);
            }
            Request::NodeInfo(node) | Request::Routes(node) => dst.put_u16(*node),
            Request::Call(call) => {
                dst.put_u16(call.node);
                dst.put_u8(call.service as u8);
                dst.put_u8(u8::from(call.idempotent));
                dst.extend_from_slice(&call.body);
            }
        }
        Ok(())
    })
}

/// Cuts `message` to at most [`MAX_ERROR_MESSAGE_BYTES`] on a character boundary.
fn bounded_message(message: &str) -> &str {
    if message.len() <= MAX_ERROR_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_ERROR_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Appends one answer frame to `dst`. Error messages longer than the limit
/// are cut rather than refused, so an error can always be reported.
pub fn encode_response(
    tag: Tag,
    response: &Response,
    dst: &mut BytesMut,
) -> Result<(), ProtoError> {
    let (op, status) = match response {
        Response::Pong => (opcode::PONG, 0),
        Response::Page { .. } => (opcode::PAGE, 0),
        Response::Done => (opcode::DONE, 0),
        Response::NodeInfo(_) => (opcode::NODE_INFO_ANSWER, 0),
        Response::Cluster(_) => (opcode::CLUSTER_ANSWER, 0),
        Response::Routes(_) => (opcode::ROUTES_ANSWER, 0),
        Response::Reply(_) => (opcode::REPLY, 0),
        Response::Error { status, .. } => (opcode::ERROR, *status as u8),
    };
    frame_into(dst, FrameHeader::new(op, status, 0, tag), |dst| {
        match response {
            Response::Pong | Response::Done => {}
            Response::Page {
                data,
                oob,
                erased,
                corrected_bytes,
            } => {
                check_page_parts(data.len(), oob.len())?;
                dst.put_u8(u8::from(*erased));
                dst.put_u32(*corrected_bytes);
                dst.put_u32(data.len() as u32);
                dst.put_u32(oob.len() as u32);
                dst.extend_from_slice(data);
                dst.extend_from_slice(oob);
            }
            Response::NodeInfo(info) => {
                check_addr(&info.addr)?;
                let json = serde_json::to_vec(info).map_err(|e| ProtoError::Malformed {
                    what: "NodeInfo answer",
                    reason: e.to_string(),
                })?;
                dst.extend_from_slice(&json);
            }
            Response::Cluster(members) => {
                if members.len() > MAX_CLUSTER_MEMBERS {
                    return Err(ProtoError::TooLarge {
                        what: "cluster member count",
                        len: members.len(),
                        limit: MAX_CLUSTER_MEMBERS,
                    });
                }
                for member in members {
                    check_addr(&member.addr)?;
                }
                let json = serde_json::to_vec(members).map_err(|e| ProtoError::Malformed {
                    what: "Cluster answer",
                    reason: e.to_string(),
                })?;
                dst.extend_from_slice(&json);
            }
            Response::Routes(info) => {
                check_routes(info)?;
                let json = serde_json::to_vec(info).map_err(|e| ProtoError::Malformed {
                    what: "Routes answer",
                    reason: e.to_string(),
                })?;
                dst.extend_from_slice(&json);
            }
            Response::Reply(body) => dst.extend_from_slice(body),
            Response::Error { message, .. } => {
                dst.extend_from_slice(bounded_message(message).as_bytes())
            }
        }
        Ok(())
    })
}

fn check_addr(addr: &str) -> Result<(), ProtoError> {
    if addr.len() > MAX_ADDR_BYTES {
        return Err(ProtoError::TooLarge {
            what: "node address bytes",
            len: addr.len(),
            limit: MAX_ADDR_BYTES,
        });
    }
    Ok(())
}

fn check_routes(info: &RoutesInfo) -> Result<(), ProtoError> {
    for (what, len) in [
        ("route count", info.routes.len()),
        ("link count", info.links.len()),
    ] {
        if len > MAX_CLUSTER_MEMBERS {
            return Err(ProtoError::TooLarge {
                what,
                len,
                limit: MAX_CLUSTER_MEMBERS,
            });
        }
    }
    for link in &info.links {
        check_addr(&link.addr)?;
    }
    Ok(())
}

/// A bounds-checked cursor over a frame body; every read fails cleanly past
/// the end.
struct Cursor<'a> {
    body: &'a Bytes,
    pos: usize,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(body: &'a Bytes, what: &'static str) -> Self {
        Cursor { body, pos: 0, what }
    }

    fn malformed(&self, reason: String) -> ProtoError {
        ProtoError::Malformed {
            what: self.what,
            reason,
        }
    }

    fn take(&mut self, len: usize, field: &str) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.body.len())
            .ok_or_else(|| {
                self.malformed(format!(
                    "{field} needs {len} bytes at offset {}, body has {}",
                    self.pos,
                    self.body.len()
                ))
            })?;
        let slice = &self.body[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u8(&mut self, field: &str) -> Result<u8, ProtoError> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &str) -> Result<u16, ProtoError> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: &str) -> Result<u32, ProtoError> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A zero-copy slice of the body.
    fn bytes(&mut self, len: usize, field: &str) -> Result<Bytes, ProtoError> {
        let start = self.pos;
        self.take(len, field)?;
        Ok(self.body.slice(start..start + len))
    }

    /// The rest of the body, zero-copy.
    fn rest(&mut self) -> Bytes {
        let start = self.pos;
        self.pos = self.body.len();
        self.body.slice(start..)
    }

    fn finish(&self) -> Result<(), ProtoError> {
        if self.pos != self.body.len() {
            return Err(self.malformed(format!(
                "{} trailing bytes after {} bytes of fields",
                self.body.len() - self.pos,
                self.pos
            )));
        }
        Ok(())
    }

    fn page_addr(&mut self) -> Result<GlobalPageAddr, ProtoError> {
        Ok(GlobalPageAddr {
            node: self.u16("node")?,
            page: PageAddr {
                bus: self.u32("bus")?,
                chip: self.u32("chip")?,
                block: self.u32("block")?,
                page: self.u32("page")?,
            },
        })
    }

    /// Data and OOB lengths, checked against their limits before either is
    /// sliced out.
    fn page_parts(&mut self) -> Result<(Bytes, Bytes), ProtoError> {
        let data_len_bytes = self.u32("data length")?;
        let oob_len_bytes = self.u32("OOB length")?;
        if data_len_bytes > MAX_PAGE_SIZE_BYTES {
            return Err(self.malformed(format!(
                "page data of {data_len_bytes} bytes exceeds limit {MAX_PAGE_SIZE_BYTES}"
            )));
        }
        if oob_len_bytes > MAX_OOB_SIZE_BYTES {
            return Err(self.malformed(format!(
                "OOB of {oob_len_bytes} bytes exceeds limit {MAX_OOB_SIZE_BYTES}"
            )));
        }
        let data = self.bytes(data_len_bytes as usize, "page data")?;
        let oob = self.bytes(oob_len_bytes as usize, "OOB")?;
        Ok((data, oob))
    }
}

fn what_of_request(op: u8) -> &'static str {
    match op {
        opcode::PING => "Ping",
        opcode::READ_PAGE => "ReadPage",
        opcode::PROGRAM_PAGE => "ProgramPage",
        opcode::ERASE_BLOCK => "EraseBlock",
        opcode::NODE_INFO => "NodeInfo",
        opcode::CLUSTER => "Cluster",
        opcode::ROUTES => "Routes",
        opcode::CALL => "Call",
        _ => "request",
    }
}

/// Decodes a request frame's body. Fails (without side effects) on an unknown
/// opcode, a short or long body, or out-of-limit lengths.
pub fn decode_request(frame: &Frame) -> Result<Request, ProtoError> {
    let op = frame.header.opcode;
    let mut c = Cursor::new(&frame.body, what_of_request(op));
    let request = match op {
        opcode::PING => Request::Ping,
        opcode::CLUSTER => Request::Cluster,
        opcode::READ_PAGE => Request::ReadPage(c.page_addr()?),
        opcode::PROGRAM_PAGE => {
            let addr = c.page_addr()?;
            let (data, oob) = c.page_parts()?;
            Request::ProgramPage { addr, data, oob }
        }
        opcode::ERASE_BLOCK => Request::EraseBlock(GlobalBlockAddr {
            node: c.u16("node")?,
            block: BlockAddr {
                bus: c.u32("bus")?,
                chip: c.u32("chip")?,
                block: c.u32("block")?,
            },
        }),
        opcode::NODE_INFO => Request::NodeInfo(c.u16("node")?),
        opcode::ROUTES => Request::Routes(c.u16("node")?),
        opcode::CALL => {
            let node = c.u16("node")?;
            let service_byte = c.u8("service")?;
            let service = Service::from_u8(service_byte)
                .ok_or_else(|| c.malformed(format!("unknown service {service_byte}")))?;
            let idempotent = match c.u8("flags")? {
                0 => false,
                1 => true,
                other => return Err(c.malformed(format!("unknown call flags 0x{other:02x}"))),
            };
            let body = c.rest();
            Request::Call(Box::new(ServiceCall {
                node,
                service,
                idempotent,
                body,
            }))
        }
        other => {
            return Err(ProtoError::UnknownOpcode {
                opcode: other,
                context: "expected a request",
            })
        }
    };
    c.finish()?;
    Ok(request)
}

/// Decodes an answer frame's body.
pub fn decode_response(frame: &Frame) -> Result<Response, ProtoError> {
    let op = frame.header.opcode;
    if op != opcode::ERROR && frame.header.status != Status::Ok as u8 {
        return Err(ProtoError::Malformed {
            what: "answer",
            reason: format!(
                "status {} on a non-error answer (opcode 0x{op:02x})",
                frame.header.status
            ),
        });
    }
    let response = match op {
        opcode::PONG | opcode::DONE => {
            let c = Cursor::new(
                &frame.body,
                if op == opcode::PONG { "Pong" } else { "Done" },
            );
            c.finish()?;
            if op == opcode::PONG {
                Response::Pong
            } else {
                Response::Done
            }
        }
        opcode::PAGE => decode_page_answer(frame)?,
        opcode::NODE_INFO_ANSWER => decode_node_info(frame)?,
        opcode::CLUSTER_ANSWER => decode_cluster(frame)?,
        opcode::ROUTES_ANSWER => decode_routes(frame)?,
        opcode::REPLY => Response::Reply(frame.body.clone()),
        opcode::ERROR => decode_error_answer(frame)?,
        other => {
            return Err(ProtoError::UnknownOpcode {
                opcode: other,
                context: "expected an answer",
            })
        }
    };
    Ok(response)
}

/// A page answer: flags, corrected bytes, data and OOB.
fn decode_page_answer(frame: &Frame) -> Result<Response, ProtoError> {
    let mut c = Cursor::new(&frame.body, "Page answer");
    let flags = c.u8("flags")?;
    if flags > 1 {
        return Err(c.malformed(format!("unknown page flags 0x{flags:02x}")));
    }
    let corrected_bytes = c.u32("corrected bytes")?;
    let (data, oob) = c.page_parts()?;
    c.finish()?;
    Ok(Response::Page {
        data,
        oob,
        erased: flags == 1,
        corrected_bytes,
    })
}

/// A node's info, its address checked.
fn decode_node_info(frame: &Frame) -> Result<Response, ProtoError> {
    let info: NodeInfo =
        serde_json::from_slice(&frame.body).map_err(|e| ProtoError::Malformed {
            what: "NodeInfo answer",
            reason: e.to_string(),
        })?;
    check_addr(&info.addr).map_err(|e| ProtoError::Malformed {
        what: "NodeInfo answer",
        reason: e.to_string(),
    })?;
    Ok(Response::NodeInfo(Box::new(info)))
}

/// The members of a cluster, at most [`MAX_CLUSTER_MEMBERS`], addresses checked.
fn decode_cluster(frame: &Frame) -> Result<Response, ProtoError> {
    let members: Vec<NodeEntry> =
        serde_json::from_slice(&frame.body).map_err(|e| ProtoError::Malformed {
            what: "Cluster answer",
            reason: e.to_string(),
        })?;
    if members.len() > MAX_CLUSTER_MEMBERS {
        return Err(ProtoError::Malformed {
            what: "Cluster answer",
            reason: format!(
                "{} members exceed limit {MAX_CLUSTER_MEMBERS}",
                members.len()
            ),
        });
    }
    for m in &members {
        check_addr(&m.addr).map_err(|e| ProtoError::Malformed {
            what: "Cluster answer",
            reason: e.to_string(),
        })?;
    }
    Ok(Response::Cluster(members))
}

/// A node's routes, checked.
fn decode_routes(frame: &Frame) -> Result<Response, ProtoError> {
    let info: RoutesInfo =
        serde_json::from_slice(&frame.body).map_err(|e| ProtoError::Malformed {
            what: "Routes answer",
            reason: e.to_string(),
        })?;
    check_routes(&info).map_err(|e| ProtoError::Malformed {
        what: "Routes answer",
        reason: e.to_string(),
    })?;
    Ok(Response::Routes(Box::new(info)))
}

/// An error answer: an error status and a bounded UTF-8 message.
fn decode_error_answer(frame: &Frame) -> Result<Response, ProtoError> {
    let status = Status::from_u8(frame.header.status)
        .filter(|s| *s != Status::Ok)
        .ok_or_else(|| ProtoError::Malformed {
            what: "Error answer",
            reason: format!("status byte {} is not an error status", frame.header.status),
        })?;
    if frame.body.len() > MAX_ERROR_MESSAGE_BYTES {
        return Err(ProtoError::Malformed {
            what: "Error answer",
            reason: format!(
                "message of {} bytes exceeds limit {MAX_ERROR_MESSAGE_BYTES}",
                frame.body.len()
            ),
        });
    }
    let message = std::str::from_utf8(&frame.body)
        .map_err(|e| ProtoError::Malformed {
            what: "Error answer",
            reason: format!("message is not UTF-8: {e}"),
        })?
        .to_string();
    Ok(Response::Error { status, message })
}

/// Payloads at least this large travel as pieces of their own rather than
/// being copied into the frame ([`encode_request_pieces`]).
const PIECE_BYTES_MIN: usize = 2048;

/// A frame's header and fields, its body length set to what follows them
/// in `tail`; the tail's payloads are not copied.
fn pieces_with_tail<'a>(
    header: FrameHeader,
    fields: impl FnOnce(&mut BytesMut),
    tail: impl IntoIterator<Item = &'a Bytes> + Clone,
) -> Result<Vec<Bytes>, ProtoError> {
    let mut head = BytesMut::with_capacity(64);
    header.put(&mut head);
    fields(&mut head);
    let body_len_bytes =
        head.len() - HEADER_LEN_BYTES + tail.clone().into_iter().map(Bytes::len).sum::<usize>();
    if body_len_bytes > MAX_BODY_BYTES as usize {
        return Err(ProtoError::BodyTooLarge {
            body_len_bytes: body_len_bytes as u64,
            limit_bytes: MAX_BODY_BYTES,
        });
    }
    head[12..16].copy_from_slice(&(body_len_bytes as u32).to_be_bytes());
    let mut pieces = vec![head.freeze()];
    pieces.extend(tail.into_iter().filter(|t| !t.is_empty()).cloned());
    Ok(pieces)
}

/// A [`Response::Reply`] whose body is `body` joined, as pieces whose
/// concatenation is the frame, the body's pieces not copied.
pub(crate) fn encode_reply_pieces(tag: Tag, body: &[Bytes]) -> Result<Vec<Bytes>, ProtoError> {
    pieces_with_tail(FrameHeader::new(opcode::REPLY, 0, 0, tag), |_| {}, body)
}

/// [`encode_request`] as pieces whose concatenation is the frame: a call's
/// body and a page's data and OOB are pieces of their own, the bytes the
/// caller holds, not copies (a node passing a request on sends them as
/// they are). Small requests are one piece.
pub fn encode_request_pieces(
    tag: Tag,
    hops: u8,
    request: &Request,
) -> Result<Vec<Bytes>, ProtoError> {
    let header = FrameHeader::new(request_opcode(request), 0, hops, tag);
    match request {
        Request::Call(call) if call.body.len() >= PIECE_BYTES_MIN => pieces_with_tail(
            header,
            |dst| {
                dst.put_u16(call.node);
                dst.put_u8(call.service as u8);
                dst.put_u8(u8::from(call.idempotent));
            },
            [&call.body],
        ),
        Request::ProgramPage { addr, data, oob } if data.len() >= PIECE_BYTES_MIN => {
            check_page_parts(data.len(), oob.len())?;
            pieces_with_tail(
                header,
                |dst| {
                    put_page_addr(dst, addr);
                    dst.put_u32(data.len() as u32);
                    dst.put_u32(oob.len() as u32);
                },
                [data, oob],
            )
        }
        _ => {
            let mut buf = BytesMut::new();
            encode_request(tag, hops, request, &mut buf)?;
            Ok(vec![buf.freeze()])
        }
    }
}

/// Whether [`encode_response_pieces`] gives `response`'s payload a piece
/// of its own (worth a slice in a vectored write) rather than one small
/// buffer.
pub(crate) fn has_payload_piece(response: &Response) -> bool {
    match response {
        Response::Reply(body) => body.len() >= PIECE_BYTES_MIN,
        Response::Page { data, .. } => data.len() >= PIECE_BYTES_MIN,
        _ => false,
    }
}

/// Whether [`encode_request_pieces`] gives `request`'s payload a piece of
/// its own.
pub(crate) fn has_payload_piece_request(request: &Request) -> bool {
    match request {
        Request::Call(call) => call.body.len() >= PIECE_BYTES_MIN,
        Request::ProgramPage { data, .. } => data.len() >= PIECE_BYTES_MIN,
        _ => false,
    }
}

/// [`encode_response`] as pieces whose concatenation is the frame: a
/// reply's body and a page's data and OOB are pieces of their own, not
/// copies. Small answers are one piece.
pub fn encode_response_pieces(tag: Tag, response: &Response) -> Result<Vec<Bytes>, ProtoError> {
    match response {
        Response::Reply(body) if body.len() >= PIECE_BYTES_MIN => {
            pieces_with_tail(FrameHeader::new(opcode::REPLY, 0, 0, tag), |_| {}, [body])
        }
        Response::Page {
            data,
            oob,
            erased,
            corrected_bytes,
        } if data.len() >= PIECE_BYTES_MIN => {
            check_page_parts(data.len(), oob.len())?;
            pieces_with_tail(
                FrameHeader::new(opcode::PAGE, 0, 0, tag),
                |dst| {
                    dst.put_u8(u8::from(*erased));
                    dst.put_u32(*corrected_bytes);
                    dst.put_u32(data.len() as u32);
                    dst.put_u32(oob.len() as u32);
                },
                [data, oob],
            )
        }
        _ => {
            let mut buf = BytesMut::new();
            encode_response(tag, response, &mut buf)?;
            Ok(vec![buf.freeze()])
        }
    }
}

#[cfg(test)]
mod piece_tests {
    use super::*;
    use crate::{Service, ServiceCall};

    fn joined(pieces: &[Bytes]) -> Vec<u8> {
        pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn pieces_join_to_the_frame_and_share_the_payload() {
        let body = Bytes::from(vec![3u8; 10_000]);
        let page = Bytes::from(vec![5u8; 8192]);
        let oob = Bytes::from_static(b"spare");
        let addr = GlobalPageAddr {
            node: 2,
            page: PageAddr {
                bus: 0,
                chip: 1,
                block: 2,
                page: 3,
            },
        };
        let requests = [
            Request::Call(Box::new(ServiceCall {
                node: 3,
                service: Service::Store,
                idempotent: true,
                body: body.clone(),
            })),
            Request::ProgramPage {
                addr,
                data: page.clone(),
                oob: oob.clone(),
            },
            Request::Ping,
        ];
        for request in &requests {
            let pieces = encode_request_pieces(9, 2, request).unwrap();
            let mut whole = BytesMut::new();
            encode_request(9, 2, request, &mut whole).unwrap();
            assert_eq!(joined(&pieces), whole.to_vec(), "{request:?}");
        }
        let pieces = encode_request_pieces(9, 2, &requests[0]).unwrap();
        assert_eq!(pieces[1].as_ptr(), body.as_ptr(), "the body is not copied");
        let responses = [
            Response::Reply(body.clone()),
            Response::Page {
                data: page.clone(),
                oob,
                erased: false,
                corrected_bytes: 4,
            },
            Response::Done,
        ];
        for response in &responses {
            let pieces = encode_response_pieces(7, response).unwrap();
            let mut whole = BytesMut::new();
            encode_response(7, response, &mut whole).unwrap();
            assert_eq!(joined(&pieces), whole.to_vec(), "{response:?}");
        }
        let pieces = encode_response_pieces(7, &responses[1]).unwrap();
        assert_eq!(pieces[1].as_ptr(), page.as_ptr(), "the page is not copied");
    }

    #[test]
    fn a_body_past_the_limit_is_refused_as_pieces_too() {
        let body = Bytes::from(vec![0u8; MAX_BODY_BYTES as usize + 1]);
        let error = encode_response_pieces(1, &Response::Reply(body)).unwrap_err();
        assert!(matches!(error, ProtoError::BodyTooLarge { .. }), "{error}");
    }
}
