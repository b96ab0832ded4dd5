//! Answers a node passes on without reading them: another node's answer
//! frame, as the fragments it arrived in, goes out to the requester with
//! only its tag rewritten (BlueDBM §3.3: the entry node maps the tag back,
//! it does not rebuild the message). A page is never decoded and encoded
//! again at the entry node.

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::{FrameHeader, HEADER_LEN_BYTES, MAX_BODY_BYTES};
use crate::{ProtoError, Response, Tag, PROTOCOL_VERSION};

/// What a served request is answered with.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A message this node encodes.
    Message(Response),
    /// Another node's answer frame, passed on as it arrived.
    Relayed(RelayedFrame),
    /// A service's [`Response::Reply`] whose body is these pieces in order:
    /// a chunk as the pages the device read it into, sent without being
    /// joined into one buffer first.
    ReplyPieces(Vec<Bytes>),
}

impl Answer {
    /// The answer as a message, for a caller that reads it here: reply
    /// pieces are joined (a copy). A relayed frame stays what it is.
    pub fn into_message(self) -> Result<Response, RelayedFrame> {
        match self {
            Answer::Message(response) => Ok(response),
            Answer::Relayed(frame) => Err(frame),
            Answer::ReplyPieces(pieces) => Ok(Response::Reply(join_pieces(&pieces))),
        }
    }

    /// The whole answer frame under `tag`, as pieces whose concatenation is
    /// the frame: payloads stay the `Bytes` their producer holds. An answer
    /// that cannot be encoded (a body past the frame limit) becomes an
    /// error answer naming why.
    pub fn frame_pieces(&self, tag: Tag) -> Vec<Bytes> {
        let encoded = match self {
            Answer::Relayed(frame) => return frame.pieces_under(tag),
            Answer::Message(response) => crate::encode_response_pieces(tag, response),
            Answer::ReplyPieces(pieces) => crate::wire::encode_reply_pieces(tag, pieces),
        };
        encoded.unwrap_or_else(|e| {
            let fallback = Response::Error {
                status: crate::Status::Internal,
                message: format!("answer could not be encoded: {e}"),
            };
            let mut buf = BytesMut::new();
            // An error answer with a bounded message always encodes.
            if let Err(e) = crate::encode_response(tag, &fallback, &mut buf) {
                tracing::error!(tag, "dropping answer: {e}");
            }
            vec![buf.freeze()]
        })
    }
}

/// `pieces` as one buffer: the one piece itself, or a copy of them joined.
pub fn join_pieces(pieces: &[Bytes]) -> Bytes {
    match pieces {
        [] => Bytes::new(),
        [one] => one.clone(),
        _ => {
            let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            for piece in pieces {
                joined.put_slice(piece);
            }
            joined.freeze()
        }
    }
}

impl From<Response> for Answer {
    fn from(response: Response) -> Answer {
        Answer::Message(response)
    }
}

/// A whole answer frame in the pieces it arrived in, checked to be one
/// well-formed answer frame of this protocol version, so passing it on can
/// never desynchronise the requester's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayedFrame {
    header: FrameHeader,
    pieces: Vec<Bytes>,
}

/// Most pieces a relayed frame may arrive in (a maximal body in 2 KiB
/// fragments, and some).
pub const MAX_RELAYED_PIECES: usize = (MAX_BODY_BYTES as usize).div_ceil(2048) + 8;

impl RelayedFrame {
    /// Checks that `pieces`, in order, are exactly one answer frame: its
    /// header sound, its body as long as the header says.
    pub fn new(pieces: Vec<Bytes>) -> Result<RelayedFrame, ProtoError> {
        let bad = |reason: String| ProtoError::Malformed {
            what: "relayed answer",
            reason,
        };
        if pieces.len() > MAX_RELAYED_PIECES {
            return Err(bad(format!("{} pieces", pieces.len())));
        }
        let total: usize = pieces.iter().map(Bytes::len).sum();
        let mut head = [0u8; HEADER_LEN_BYTES];
        let mut filled = 0;
        for piece in &pieces {
            let take = (HEADER_LEN_BYTES - filled).min(piece.len());
            head[filled..filled + take].copy_from_slice(&piece[..take]);
            filled += take;
            if filled == HEADER_LEN_BYTES {
                break;
            }
        }
        if filled < HEADER_LEN_BYTES {
            return Err(bad(format!("{total} bytes, shorter than a header")));
        }
        let header = FrameHeader::parse(&head)?;
        if header.version != PROTOCOL_VERSION || header.opcode & 0x80 == 0 {
            return Err(bad(format!(
                "version {} opcode {:#04x} is not an answer of version {PROTOCOL_VERSION}",
                header.version, header.opcode
            )));
        }
        if total != HEADER_LEN_BYTES + header.body_len_bytes as usize {
            return Err(bad(format!(
                "{total} bytes for a body of {}",
                header.body_len_bytes
            )));
        }
        Ok(RelayedFrame { header, pieces })
    }

    /// The frame's header as it arrived.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// Appends the frame to `dst` under `tag`: the header written anew
    /// (the only field that changes is the tag), then the body's bytes.
    /// This is the one copy of the body at this node; it gathers the
    /// answers ready at once into one write system call.
    pub fn write_into(&self, tag: Tag, dst: &mut BytesMut) {
        let header = FrameHeader { tag, ..self.header };
        dst.reserve(HEADER_LEN_BYTES + self.header.body_len_bytes as usize);
        header.put(dst);
        let mut skip = HEADER_LEN_BYTES;
        for piece in &self.pieces {
            let from = skip.min(piece.len());
            skip -= from;
            dst.put_slice(&piece[from..]);
        }
    }

    /// The frame under `tag` as pieces whose concatenation is the frame: a
    /// new header, then the body as the pieces it arrived in (no copy).
    pub fn pieces_under(&self, tag: Tag) -> Vec<Bytes> {
        let mut head = BytesMut::with_capacity(HEADER_LEN_BYTES);
        FrameHeader { tag, ..self.header }.put(&mut head);
        let mut out = Vec::with_capacity(self.pieces.len() + 1);
        out.push(head.freeze());
        let mut skip = HEADER_LEN_BYTES;
        for piece in &self.pieces {
            let from = skip.min(piece.len());
            skip -= from;
            if from < piece.len() {
                out.push(piece.slice(from..));
            }
        }
        out
    }

    /// The whole frame as one buffer (a copy), for a caller that decodes it.
    pub fn to_contiguous(&self) -> BytesMut {
        let mut buf =
            BytesMut::with_capacity(HEADER_LEN_BYTES + self.header.body_len_bytes as usize);
        for piece in &self.pieces {
            buf.put_slice(piece);
        }
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_response, encode_response, FrameCodec};
    use tokio_util::codec::Decoder;

    fn encoded(tag: Tag, response: &Response) -> BytesMut {
        let mut buf = BytesMut::new();
        encode_response(tag, response, &mut buf).unwrap();
        buf
    }

    fn cut(frame: &[u8], every: usize) -> Vec<Bytes> {
        frame.chunks(every).map(Bytes::copy_from_slice).collect()
    }

    fn decoded(pieces: &[Bytes]) -> (Tag, Response) {
        let mut buf = BytesMut::new();
        for piece in pieces {
            buf.put_slice(piece);
        }
        let frame = FrameCodec.decode(&mut buf).unwrap().expect("one frame");
        assert!(buf.is_empty(), "nothing after the frame");
        (frame.header.tag, decode_response(&frame).unwrap())
    }

    #[test]
    fn reply_pieces_go_out_as_one_reply_without_being_joined() {
        let body = [
            Bytes::from_static(b"head"),
            Bytes::from(vec![7u8; 5000]),
            Bytes::new(),
            Bytes::from(vec![9u8; 3000]),
        ];
        let answer = Answer::ReplyPieces(body.to_vec());
        let pieces = answer.frame_pieces(42);
        // The large pieces are the ones given, not copies.
        assert!(pieces.iter().any(|p| p.as_ptr() == body[1].as_ptr()));
        let joined: Vec<u8> = body.iter().flat_map(|b| b.iter().copied()).collect();
        assert_eq!(
            decoded(&pieces),
            (42, Response::Reply(Bytes::from(joined.clone())))
        );
        assert_eq!(
            answer.into_message().unwrap(),
            Response::Reply(Bytes::from(joined))
        );
    }

    #[test]
    fn reply_pieces_past_the_frame_limit_become_an_error_answer() {
        let big = Bytes::from(vec![0u8; MAX_BODY_BYTES as usize]);
        let answer = Answer::ReplyPieces(vec![big.clone(), big]);
        match decoded(&answer.frame_pieces(7)) {
            (7, Response::Error { status, message }) => {
                assert_eq!(status, crate::Status::Internal);
                assert!(message.contains("could not be encoded"), "{message}");
            }
            other => panic!("expected an error answer, got {other:?}"),
        }
    }

    #[test]
    fn a_relayed_frame_goes_out_as_it_came_under_the_new_tag() {
        let page = Response::Page {
            data: Bytes::from(vec![7u8; 700]),
            oob: Bytes::from_static(b"oob"),
            erased: false,
            corrected_bytes: 2,
        };
        let frame = encoded(0, &page);
        for every in [1, 3, 16, 17, 2048, frame.len()] {
            let relayed = RelayedFrame::new(cut(&frame, every)).unwrap();
            let mut out = BytesMut::new();
            relayed.write_into(0xABCD, &mut out);
            assert_eq!(out, encoded(0xABCD, &page), "cut every {every}");
            let decoded = FrameCodec.decode(&mut out).unwrap().unwrap();
            assert_eq!(decoded.header.tag, 0xABCD);
            assert_eq!(decode_response(&decoded).unwrap(), page);
        }
    }

    #[test]
    fn what_is_not_one_answer_frame_is_refused() {
        let frame = encoded(0, &Response::Reply(Bytes::from_static(b"answer")));
        let error = |pieces: Vec<Bytes>| RelayedFrame::new(pieces).unwrap_err().to_string();
        assert!(error(cut(&frame[..10], 4)).contains("shorter than a header"));
        assert!(error(cut(&frame[..frame.len() - 1], 4)).contains("for a body of"));
        let mut longer = frame.to_vec();
        longer.push(0);
        assert!(error(cut(&longer, 4)).contains("for a body of"));
        let mut request = frame.to_vec();
        request[3] = 0x01; // Ping: a request, not an answer
        assert!(error(cut(&request, 4)).contains("is not an answer"));
        let mut magic = frame.to_vec();
        magic[0] = b'X';
        assert!(RelayedFrame::new(cut(&magic, 4)).is_err());
        assert!(error(vec![Bytes::new(); MAX_RELAYED_PIECES + 1]).contains("pieces"));
    }
}
