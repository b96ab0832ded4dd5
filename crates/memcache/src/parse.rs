//! Finding one command at the front of a buffer: its line, its data block,
//! and what to do when either is bad or not there yet.

use bytes::{Buf, Bytes, BytesMut};

use crate::classic::{parse_line, LineOutcome};
use crate::{Command, Limits, ProtocolError, Rejection};

/// What [`parse`] found at the front of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A whole command, with its data block for a storage command.
    Complete {
        /// The command.
        command: Command,
        /// Its bytes at the front of the buffer, data block included
        /// ([`parse_bytes`] and [`CommandReader`] have taken them off).
        consumed: usize,
    },
    /// More bytes are needed. The buffer never needs to grow past
    /// `max_line_bytes` (`max_get_line_bytes` for a `get`) plus one data
    /// block of at most `max_value_bytes` and its `\r\n`: past that the
    /// parse answers `Invalid`.
    Incomplete,
    /// A refused command: answer [`Rejection::reply`], drop
    /// `consumed` bytes, discard `swallow_bytes` more as they come, and
    /// close if `close`.
    Invalid(Rejection),
}

/// Parses the command at the front of `buf`, copying its data block.
/// Reading a socket into a [`BytesMut`], [`parse_bytes`] or
/// [`CommandReader`] avoid the copy.
pub fn parse(buf: &[u8], limits: &Limits) -> Parsed {
    match frame(buf, 0, limits) {
        Frame::Incomplete { .. } => Parsed::Incomplete,
        Frame::Rejected(rejection) => Parsed::Invalid(rejection),
        Frame::Command { command, consumed } => Parsed::Complete { command, consumed },
        Frame::WithData {
            mut command,
            line_bytes,
            data_bytes,
        } => {
            if let Some(data) = command.data_mut() {
                *data = Bytes::copy_from_slice(&buf[line_bytes..line_bytes + data_bytes]);
            }
            Parsed::Complete {
                command,
                consumed: line_bytes + data_bytes + 2,
            }
        }
    }
}

/// Parses the command at the front of `buf` and takes its bytes off it
/// (`consumed` of them, in `Complete` and in `Invalid`); a data block is
/// split off without a copy. It shares the buffer's allocation, so a store
/// that keeps many small values for long may prefer to copy them (keys are
/// always copies).
pub fn parse_bytes(buf: &mut BytesMut, limits: &Limits) -> Parsed {
    take_frame(buf, frame(buf, 0, limits), 0)
}

/// Data blocks shorter than this are copied out of a [`CommandReader`]'s
/// buffer rather than split off it. A split-off block shares the buffer's
/// allocation: a connection that reads one small set at a time would then
/// allocate (and fault in) a new read buffer for every read, each pinned
/// by the one value a store keeps of it. Copying 16 KiB costs about a
/// microsecond here; a 64 KiB buffer's allocation and first touches cost
/// more, and pin sixty times the value's size.
pub const COPY_DATA_BELOW_BYTES: usize = 16 << 10;

fn take_frame(buf: &mut BytesMut, frame: Frame, copy_below_bytes: usize) -> Parsed {
    match frame {
        Frame::Incomplete { .. } => Parsed::Incomplete,
        Frame::Rejected(rejection) => {
            buf.advance(rejection.consumed);
            Parsed::Invalid(rejection)
        }
        Frame::Command { command, consumed } => {
            buf.advance(consumed);
            Parsed::Complete { command, consumed }
        }
        Frame::WithData {
            mut command,
            line_bytes,
            data_bytes,
        } => {
            buf.advance(line_bytes);
            let data = if data_bytes < copy_below_bytes {
                let data = Bytes::copy_from_slice(&buf[..data_bytes]);
                buf.advance(data_bytes);
                data
            } else {
                buf.split_to(data_bytes).freeze()
            };
            buf.advance(2);
            if let Some(slot) = command.data_mut() {
                *slot = data;
            }
            Parsed::Complete {
                command,
                consumed: line_bytes + data_bytes + 2,
            }
        }
    }
}

/// Commands off one connection's input: [`parse_bytes`] (copying data
/// blocks under [`COPY_DATA_BELOW_BYTES`], so the buffer stays its own and
/// is reused from read to read), plus what a
/// connection has to remember between reads (the rest of a swallowed data
/// block, and how far a long line has been searched, so that bytes
/// arriving one at a time cost no more than arriving at once). Give it the
/// same buffer every time, with what was read appended.
///
/// ```
/// use bytes::BytesMut;
/// use quarry_memcache::{Command, CommandReader, Limits, Parsed};
///
/// let mut reader = CommandReader::new(Limits::default());
/// let mut input = BytesMut::from(&b"set k 0 0 2\r\nhi\r\nget k\r\n"[..]);
/// assert!(matches!(reader.read(&mut input), Parsed::Complete { command: Command::Store(_), .. }));
/// assert!(matches!(reader.read(&mut input), Parsed::Complete { command: Command::Get(_), .. }));
/// assert_eq!(reader.read(&mut input), Parsed::Incomplete);
/// ```
#[derive(Debug, Clone)]
pub struct CommandReader {
    limits: Limits,
    swallow_bytes: usize,
    /// Nothing can change until the buffer holds this many bytes.
    wait_for_bytes: usize,
    /// The buffer's first bytes hold no newline.
    searched_bytes: usize,
}

impl CommandReader {
    /// A reader for a new connection.
    pub fn new(limits: Limits) -> Self {
        CommandReader {
            limits,
            swallow_bytes: 0,
            wait_for_bytes: 0,
            searched_bytes: 0,
        }
    }

    /// The limits it parses with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes of a swallowed data block still to come.
    pub fn swallowing_bytes(&self) -> usize {
        self.swallow_bytes
    }

    /// Takes the next command off the front of `buf`, first discarding
    /// what remains of a swallowed data block. `Incomplete` means read
    /// more into `buf` and call again; after an `Invalid` that says
    /// `close`, stop reading.
    pub fn read(&mut self, buf: &mut BytesMut) -> Parsed {
        if self.swallow_bytes > 0 {
            let discard = self.swallow_bytes.min(buf.len());
            buf.advance(discard);
            self.swallow_bytes -= discard;
            if self.swallow_bytes > 0 {
                return Parsed::Incomplete;
            }
        }
        if buf.len() < self.wait_for_bytes {
            return Parsed::Incomplete;
        }
        let frame = frame(buf, self.searched_bytes, &self.limits);
        if let Frame::Incomplete {
            wait_for_bytes,
            searched_bytes,
        } = frame
        {
            self.wait_for_bytes = wait_for_bytes;
            self.searched_bytes = searched_bytes;
            return Parsed::Incomplete;
        }
        self.wait_for_bytes = 0;
        self.searched_bytes = 0;
        let parsed = take_frame(buf, frame, COPY_DATA_BELOW_BYTES);
        if let Parsed::Invalid(rejection) = &parsed {
            self.swallow_bytes = rejection.swallow_bytes;
        }
        parsed
    }
}

/// A command found at the front of a buffer, before its data is taken.
#[derive(Debug)]
enum Frame {
    Incomplete {
        wait_for_bytes: usize,
        searched_bytes: usize,
    },
    Rejected(Rejection),
    Command {
        command: Command,
        consumed: usize,
    },
    WithData {
        command: Command,
        line_bytes: usize,
        data_bytes: usize,
    },
}

/// Finds the command at the front of `buf`, whose first `searched_bytes`
/// are known to hold no newline.
fn frame(buf: &[u8], searched_bytes: usize, limits: &Limits) -> Frame {
    let window = buf.len().min(limits.longest_line_bytes() + 1);
    let newline = buf
        .get(searched_bytes..window)
        .and_then(|rest| memchr::memchr(b'\n', rest))
        .map(|at| searched_bytes + at);
    let Some(newline) = newline else {
        if let Some(error) = line_too_long(buf, buf.len(), false, limits) {
            return close(error, buf.len());
        }
        return Frame::Incomplete {
            wait_for_bytes: buf.len() + 1,
            searched_bytes: buf.len(),
        };
    };
    if let Some(error) = line_too_long(&buf[..newline], newline, true, limits) {
        return close(error, buf.len());
    }
    let line_bytes = newline + 1;
    // memcached strips one `\r` before the `\n`, but not from a line that
    // is only "\r" (try_read_command_ascii).
    let line = match &buf[..newline] {
        [rest @ .., b'\r'] if newline > 1 => rest,
        line => line,
    };
    match parse_line(line, limits) {
        LineOutcome::Command(command) => Frame::Command {
            command,
            consumed: line_bytes,
        },
        LineOutcome::Rejected {
            error,
            noreply,
            swallow_bytes,
        } => {
            let total = line_bytes + swallow_bytes;
            let consumed = total.min(buf.len());
            Frame::Rejected(Rejection {
                error,
                consumed,
                swallow_bytes: total - consumed,
                noreply,
                close: error.closes_connection(),
            })
        }
        LineOutcome::NeedsData { command, data_len } => {
            with_data(buf, command, line_bytes, data_len)
        }
    }
}

/// A storage command once its data block is there: memcached reads
/// exactly `data_len + 2` bytes and refuses them if they do not end in
/// `\r\n` (complete_nread_ascii), then goes on after them.
fn with_data(buf: &[u8], command: Command, line_bytes: usize, data_bytes: usize) -> Frame {
    let total = line_bytes + data_bytes + 2;
    if buf.len() < total {
        return Frame::Incomplete {
            wait_for_bytes: total,
            searched_bytes: 0,
        };
    }
    if &buf[total - 2..total] != b"\r\n" {
        return Frame::Rejected(Rejection {
            error: ProtocolError::BadDataChunk,
            consumed: total,
            swallow_bytes: 0,
            noreply: command.noreply(),
            close: false,
        });
    }
    Frame::WithData {
        command,
        line_bytes,
        data_bytes,
    }
}

fn close(error: ProtocolError, consumed: usize) -> Frame {
    Frame::Rejected(Rejection {
        error,
        consumed,
        swallow_bytes: 0,
        noreply: false,
        close: true,
    })
}

/// Whether a line of `len` bytes before its newline (`start` being its
/// first bytes, `complete` whether that is all of it) is past its bound.
/// Only a line that may be a `get` or `gets` (at most 100 spaces, then
/// `get ` or `gets `) may pass `max_line_bytes`; memcached closes the
/// connection on any other, without a word.
fn line_too_long(
    start: &[u8],
    len: usize,
    complete: bool,
    limits: &Limits,
) -> Option<ProtocolError> {
    if len <= limits.max_line_bytes {
        return None;
    }
    if !may_be_long_get(start, complete) {
        return Some(ProtocolError::LineTooLong {
            limit_bytes: limits.max_line_bytes,
        });
    }
    if len > limits.longest_line_bytes() {
        return Some(ProtocolError::GetLineTooLong {
            limit_bytes: limits.max_get_line_bytes,
        });
    }
    None
}

/// Whether a line starting `start` is, or while incomplete may still turn
/// out to be, one memcached lets grow (proto_text.c,
/// try_read_command_ascii).
fn may_be_long_get(start: &[u8], complete: bool) -> bool {
    let spaces = start.iter().take_while(|&&b| b == b' ').count();
    if spaces > 100 {
        return false;
    }
    let rest = &start[spaces..];
    if rest.starts_with(b"get ") || rest.starts_with(b"gets ") {
        return true;
    }
    !complete && (b"get ".starts_with(rest) || b"gets ".starts_with(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_of(parsed: Parsed) -> Bytes {
        match parsed {
            Parsed::Complete { command, .. } => command.data().cloned().expect("a data block"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn small_data_is_copied_so_the_buffer_is_reused_and_large_data_is_shared() {
        let mut reader = CommandReader::new(Limits::default());
        let mut input = BytesMut::with_capacity(64 << 10);
        let start = input.as_ptr();
        input.extend_from_slice(b"set k 0 0 2\r\nhi\r\n");
        let small = data_of(reader.read(&mut input));
        assert_eq!(&small[..], b"hi");
        // The value kept, the buffer is still the reader's alone: room for
        // a whole next read is made in the same allocation.
        input.reserve(64 << 10);
        assert_eq!(input.as_ptr(), start);

        let big = vec![b'x'; COPY_DATA_BELOW_BYTES];
        input.extend_from_slice(format!("set k 0 0 {}\r\n", big.len()).as_bytes());
        input.extend_from_slice(&big);
        input.extend_from_slice(b"\r\n");
        let line = format!("set k 0 0 {}\r\n", big.len()).len();
        let shared = data_of(reader.read(&mut input));
        assert_eq!(&shared[..], &big[..]);
        assert_eq!(
            shared.as_ptr(),
            start.wrapping_add(line),
            "split off, not copied"
        );
    }
}
