//! Gzip sources (RFC 1952), inflated ahead of the reader.
//!
//! [`Members`] reads the members of a gzip stream one after the other (a file may hold several,
//! as `cat a.gz b.gz` makes them) and inflates their data; [`Inflated`] lends that data as a
//! [`BufRead`] and checks each member's CRC-32 and size against the member's trailer. A source
//! that can move to a thread (a file, a download) is inflated in one of its own ([`threaded`]),
//! ahead of the parser, as `zcat | parser` would: inflating is the slower side, so that thread
//! does nothing else, and the CRC-32 is computed on the reader's side, beside it.
//!
//! A stream cut short is `UnexpectedEof`; a bad header, corrupt deflate data or a trailer that
//! does not match is `InvalidInput` or `InvalidData` (both reported as a truncated or corrupt
//! source by [`crate::source::SourceName::read_error`]). The tests hold this reading to flate2's
//! `MultiGzDecoder`, stream by stream, good and bad.

use std::io::{self, BufRead, Read};
use std::sync::mpsc;

use flate2::{Crc, Decompress, FlushDecompress, Status};

/// Inflated bytes handed over at a time. Each call to inflate ends by copying the last 32 KiB
/// it wrote into its window: a quarter of a MiB makes that copy small, and still fits in a
/// core's L2 cache, where the reader finds it.
const CHUNK: usize = 256 * 1024;

/// The header flags (RFC 1952, 2.3.1).
const FHCRC: u8 = 1 << 1;
const FEXTRA: u8 = 1 << 2;
const FNAME: u8 = 1 << 3;
const FCOMMENT: u8 = 1 << 4;
const FRESERVED: u8 = 0b1110_0000;

/// What the inflating side hands over, in order.
#[derive(Debug)]
enum Piece {
    /// Inflated bytes of the current member (never empty).
    Data(Vec<u8>),
    /// The end of a member: the CRC-32 and size (mod 2^32) of its data, as its trailer says.
    MemberEnd { crc: u32, size: u32 },
    /// The end of the stream, after the last member.
    End,
}

/// Where the inflating side is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a member's header (or the end of the stream, after a first member).
    Header,
    /// In a member's deflate data.
    Data,
    /// Before a member's trailer.
    Trailer,
    /// After the last member, or after an error.
    Done,
}

/// The members of a gzip stream read from `input`, inflated a piece at a time.
struct Members<R> {
    input: R,
    inflate: Decompress,
    state: State,
    members: u64,
}

impl<R: BufRead> Members<R> {
    fn new(input: R) -> Self {
        Members {
            input,
            inflate: Decompress::new(false),
            state: State::Header,
            members: 0,
        }
    }

    /// The next piece; `Data` fills `buffer` (made [`CHUNK`] bytes long), which comes back in
    /// it. After an error or [`Piece::End`], only `End` follows.
    fn next(&mut self, buffer: Vec<u8>) -> io::Result<Piece> {
        let piece = self.step(buffer);
        if piece.is_err() {
            self.state = State::Done;
        }
        piece
    }

    fn step(&mut self, mut buffer: Vec<u8>) -> io::Result<Piece> {
        loop {
            match self.state {
                State::Header => {
                    if self.members > 0 && self.input.fill_buf()?.is_empty() {
                        self.state = State::Done;
                        continue;
                    }
                    read_header(&mut self.input)?;
                    self.inflate.reset(false);
                    self.state = State::Data;
                }
                State::Data => {
                    // Zeroed in one sweep before inflate writes to it: a buffer handed back by
                    // the reader is still in the reader's core cache, and inflate's own stores
                    // claiming its lines one at a time made inflating the 24 MB dataset take
                    // 27-29 ms instead of 23 (the sweep included).
                    buffer.clear();
                    buffer.resize(CHUNK, 0);
                    let filled = self.inflate_into(&mut buffer)?;
                    if filled > 0 {
                        buffer.truncate(filled);
                        return Ok(Piece::Data(buffer));
                    }
                }
                State::Trailer => {
                    let mut trailer = [0u8; 8];
                    self.input.read_exact(&mut trailer)?;
                    let [c0, c1, c2, c3, s0, s1, s2, s3] = trailer;
                    self.members += 1;
                    self.state = State::Header;
                    return Ok(Piece::MemberEnd {
                        crc: u32::from_le_bytes([c0, c1, c2, c3]),
                        size: u32::from_le_bytes([s0, s1, s2, s3]),
                    });
                }
                State::Done => return Ok(Piece::End),
            }
        }
    }

    /// Inflates into `out` until it is full or the member's deflate data ends (then the state
    /// moves to its trailer); returns the bytes written.
    fn inflate_into(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        while filled < out.len() {
            let input = self.input.fill_buf()?;
            let at_eof = input.is_empty();
            let (read_before, written_before) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self
                .inflate
                .decompress(input, &mut out[filled..], FlushDecompress::None)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let read = usize::try_from(self.inflate.total_in() - read_before).unwrap_or(usize::MAX);
            let written =
                usize::try_from(self.inflate.total_out() - written_before).unwrap_or(usize::MAX);
            self.input.consume(read);
            filled += written;
            if status == Status::StreamEnd {
                self.state = State::Trailer;
                break;
            }
            if read == 0 && written == 0 {
                return Err(if at_eof {
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the gzip stream ends inside a member",
                    )
                } else {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the deflate data does not advance",
                    )
                });
            }
        }
        Ok(filled)
    }
}

/// Reads a member's header (RFC 1952, 2.3): the magic, deflate, no reserved flag, the optional
/// fields skipped, and the header's CRC-16 checked when it has one.
fn read_header(input: &mut impl BufRead) -> io::Result<()> {
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid gzip header: {what}"),
        )
    };
    let mut crc = Crc::new();
    let mut fixed = [0u8; 10];
    input.read_exact(&mut fixed)?;
    crc.update(&fixed);
    if fixed[..2] != [0x1f, 0x8b] {
        return Err(bad("not the gzip magic"));
    }
    if fixed[2] != 8 {
        return Err(bad("not deflate"));
    }
    let flags = fixed[3];
    if flags & FRESERVED != 0 {
        return Err(bad("reserved flags set"));
    }
    if flags & FEXTRA != 0 {
        let mut length = [0u8; 2];
        input.read_exact(&mut length)?;
        crc.update(&length);
        skip(
            input,
            &mut crc,
            |_| false,
            usize::from(u16::from_le_bytes(length)),
        )?;
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            // A zero-terminated string: up to its zero, included.
            skip(input, &mut crc, |b| b == 0, usize::MAX)?;
        }
    }
    if flags & FHCRC != 0 {
        let mut stored = [0u8; 2];
        input.read_exact(&mut stored)?;
        if u16::from_le_bytes(stored) != (crc.sum() & 0xffff) as u16 {
            return Err(bad("its CRC-16 does not match"));
        }
    }
    Ok(())
}

/// Skips `count` bytes of `input`, or fewer up to and including one for which `last` holds,
/// adding them to `crc`; the stream ending first is `UnexpectedEof`.
fn skip(
    input: &mut impl BufRead,
    crc: &mut Crc,
    last: impl Fn(u8) -> bool,
    mut count: usize,
) -> io::Result<()> {
    while count > 0 {
        let buffer = input.fill_buf()?;
        if buffer.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let window = &buffer[..buffer.len().min(count)];
        let (taken, found) = match window.iter().position(|b| last(*b)) {
            Some(i) => (i + 1, true),
            None => (window.len(), false),
        };
        crc.update(&window[..taken]);
        input.consume(taken);
        if found {
            return Ok(());
        }
        count -= taken;
    }
    Ok(())
}

/// Where an [`Inflated`] reader takes its pieces from.
trait Pieces {
    /// The next piece; `spent` is the buffer of the last one, to be filled again.
    fn next(&mut self, spent: Vec<u8>) -> io::Result<Piece>;
}

impl<R: BufRead> Pieces for Members<R> {
    fn next(&mut self, spent: Vec<u8>) -> io::Result<Piece> {
        Members::next(self, spent)
    }
}

/// The pieces of a [`Members`] inflated by a thread of its own.
struct Thread {
    pieces: mpsc::Receiver<io::Result<Piece>>,
    /// Buffers read, handed back to the thread to be filled again (no new allocation, no
    /// zeroing of fresh memory on the inflating side, which is the slower one).
    spent: mpsc::SyncSender<Vec<u8>>,
}

impl Pieces for Thread {
    fn next(&mut self, spent: Vec<u8>) -> io::Result<Piece> {
        if spent.capacity() > 0 {
            // The thread may have ended, or hold enough buffers: then this one is freed.
            let _ = self.spent.try_send(spent);
        }
        self.pieces.recv().unwrap_or_else(|_| {
            Err(io::Error::other(
                "the gzip inflating thread stopped before the end",
            ))
        })
    }
}

/// Inflates `input` in a thread of its own, a few pieces ahead of the returned reader. The
/// thread stops at the end of the stream, at its first error (passed on to the reader), or as
/// soon as the reader is dropped.
pub(crate) fn threaded(input: impl BufRead + Send + 'static) -> impl BufRead {
    let (sender, pieces) = mpsc::sync_channel(4);
    let (spent, reusable) = mpsc::sync_channel::<Vec<u8>>(8);
    let mut members = Members::new(input);
    std::thread::spawn(move || {
        loop {
            let buffer = reusable.try_recv().unwrap_or_default();
            let piece = members.next(buffer);
            let last = !matches!(piece, Ok(Piece::Data(_) | Piece::MemberEnd { .. }));
            if sender.send(piece).is_err() || last {
                return;
            }
        }
    });
    Inflated::new(Thread { pieces, spent })
}

/// Inflates `input` on the reader's side, as it reads (for a source that cannot move to a
/// thread, such as stdin).
pub(crate) fn inline<R: BufRead>(input: R) -> impl BufRead {
    Inflated::new(Members::new(input))
}

/// The data of a gzip stream, its members' CRC-32 and sizes checked as they end.
struct Inflated<P> {
    pieces: P,
    current: Vec<u8>,
    position: usize,
    /// The CRC-32 and size of the current member's data so far.
    crc: Crc,
    done: bool,
}

impl<P: Pieces> Inflated<P> {
    fn new(pieces: P) -> Self {
        Inflated {
            pieces,
            current: Vec::new(),
            position: 0,
            crc: Crc::new(),
            done: false,
        }
    }

    /// Takes the next pieces until one holds data (or the stream ends, or fails).
    fn next_data(&mut self) -> io::Result<()> {
        while !self.done {
            let spent = std::mem::take(&mut self.current);
            self.position = 0;
            match self.pieces.next(spent) {
                Ok(Piece::Data(data)) => {
                    self.crc.update(&data);
                    self.current = data;
                    return Ok(());
                }
                Ok(Piece::MemberEnd { crc, size }) => {
                    if crc != self.crc.sum() || size != self.crc.amount() {
                        self.done = true;
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "corrupt gzip stream: its data does not match the CRC-32 and size of its trailer",
                        ));
                    }
                    self.crc.reset();
                }
                Ok(Piece::End) => self.done = true,
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl<P: Pieces> Read for Inflated<P> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<P: Pieces> BufRead for Inflated<P> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.position >= self.current.len() {
            self.next_data()?;
        }
        Ok(&self.current[self.position.min(self.current.len())..])
    }

    fn consume(&mut self, amount: usize) {
        self.position += amount;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ListError;
    use crate::source::SourceName;
    use flate2::{Compression, GzBuilder};
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// Text over several chunks and deflate blocks: numbered rows, and bytes from a xorshift
    /// generator so that it does not all compress to nothing.
    fn text(rows: u32) -> Vec<u8> {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut out = Vec::new();
        for i in 0..rows {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            writeln!(out, "{i},{state:x},{}", i % 977).unwrap();
        }
        out
    }

    fn member(data: &[u8], builder: GzBuilder) -> Vec<u8> {
        let mut encoder = builder.write(Vec::new(), Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    /// A member whose header carries a CRC-16 (FHCRC), which GzBuilder does not write.
    fn member_with_header_crc(data: &[u8], right: bool) -> Vec<u8> {
        let plain = member(data, GzBuilder::new().filename("x.csv"));
        let header_len = 10 + b"x.csv\0".len();
        let mut header = plain[..header_len].to_vec();
        header[3] |= FHCRC;
        let mut crc = Crc::new();
        crc.update(&header);
        let stored = (crc.sum() & 0xffff) as u16 ^ u16::from(!right);
        header.extend(stored.to_le_bytes());
        header.extend(&plain[header_len..]);
        header
    }

    /// What a reader makes of a stream: the size and CRC-32 of its data (short to print when
    /// they differ), or the error a source reports.
    type Outcome = Result<(usize, u32), String>;

    fn outcome(reader: &mut dyn BufRead) -> Outcome {
        let source = SourceName::new("/x.gz", Duration::from_secs(1));
        let mut data = Vec::new();
        let digest = |data: Vec<u8>| {
            let mut crc = Crc::new();
            crc.update(&data);
            (data.len(), crc.sum())
        };
        reader
            .read_to_end(&mut data)
            .map(|_| digest(data))
            .map_err(|e| {
                match source.read_error(e) {
                    ListError::Truncated { .. } => "truncated or corrupt",
                    ListError::Unreadable { .. } => "unreadable",
                    _ => "other",
                }
                .to_string()
            })
    }

    fn ours_threaded(stream: &[u8]) -> Outcome {
        outcome(&mut threaded(io::Cursor::new(stream.to_vec())))
    }

    fn ours_inline(stream: &[u8]) -> Outcome {
        outcome(&mut inline(stream))
    }

    fn flate2s(stream: &[u8]) -> Outcome {
        outcome(&mut io::BufReader::new(
            flate2::bufread::MultiGzDecoder::new(stream),
        ))
    }

    #[test]
    fn members_read_as_flate2_reads_them_whole_cut_or_corrupt() {
        let big = text(60_000);
        assert!(big.len() > 3 * CHUNK);
        let small = text(10);
        let plain = member(&big, GzBuilder::new());
        let fields = member(
            &small,
            GzBuilder::new()
                .filename("asn.csv")
                .comment("a comment")
                .extra(vec![b'A', b'S', 2, 0, 7, 7])
                .mtime(1),
        );
        let empty = member(b"", GzBuilder::new());
        let corrupt = |at: usize, xor: u8| {
            let mut s = plain.clone();
            s[at] ^= xor;
            s
        };
        let n = plain.len();
        let mut streams: Vec<(&str, Vec<u8>)> = vec![
            ("one member", plain.clone()),
            ("header fields", fields.clone()),
            ("header CRC-16", member_with_header_crc(&small, true)),
            ("empty member", empty.clone()),
            (
                "members one after the other",
                [
                    plain.clone(),
                    empty,
                    fields.clone(),
                    member_with_header_crc(&small, true),
                ]
                .concat(),
            ),
            (
                "a wrong header CRC-16",
                member_with_header_crc(&small, false),
            ),
            ("a reserved flag", corrupt(3, 0x20)),
            ("not deflate", corrupt(2, 0x01)),
            ("a wrong CRC-32", corrupt(n - 6, 0x01)),
            ("a wrong size", corrupt(n - 2, 0x01)),
            ("corrupt deflate data", corrupt(11, 0xff)),
            (
                "garbage after a member",
                [fields.clone(), b"garbage".to_vec()].concat(),
            ),
            (
                "a cut second member",
                [fields.clone(), plain[..n / 2].to_vec()].concat(),
            ),
        ];
        for cut in [1, 2, 9, 10, 11, n / 3, n - 8, n - 5, n - 1] {
            streams.push(("cut", plain[..cut].to_vec()));
        }
        for (what, stream) in &streams {
            let expected = flate2s(stream);
            assert_eq!(
                ours_threaded(stream),
                expected,
                "{what} ({} bytes), threaded",
                stream.len()
            );
            assert_eq!(
                ours_inline(stream),
                expected,
                "{what} ({} bytes), inline",
                stream.len()
            );
        }
        // The oracle itself tells the good streams from the bad ones as expected.
        let good: Vec<bool> = streams.iter().map(|(_, s)| flate2s(s).is_ok()).collect();
        assert_eq!(good.iter().filter(|ok| **ok).count(), 5, "{good:?}");
        let mut all = Vec::new();
        inline(streams[4].1.as_slice())
            .read_to_end(&mut all)
            .unwrap();
        assert!(all == [big, Vec::new(), small.clone(), small].concat());
    }

    /// An input that says, when it is dropped, how many of its bytes were taken (`u64::MAX`
    /// before), and panics after `panic_after` bytes.
    struct Watched {
        bytes: io::Cursor<Vec<u8>>,
        panic_after: u64,
        taken: Arc<AtomicU64>,
    }

    impl Read for Watched {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.fill_buf()?.len().min(out.len());
            out[..n].copy_from_slice(&self.fill_buf()?[..n]);
            self.consume(n);
            Ok(n)
        }
    }

    impl BufRead for Watched {
        fn fill_buf(&mut self) -> io::Result<&[u8]> {
            assert!(self.bytes.position() < self.panic_after, "the input fails");
            // A few bytes at a time, as a network would give them.
            let rest = self.bytes.fill_buf()?;
            Ok(&rest[..rest.len().min(4096)])
        }

        fn consume(&mut self, n: usize) {
            self.bytes.consume(n);
        }
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            self.taken.store(self.bytes.position(), Ordering::SeqCst);
        }
    }

    fn watched(stream: Vec<u8>, panic_after: u64) -> (Watched, Arc<AtomicU64>) {
        let taken = Arc::new(AtomicU64::new(u64::MAX));
        let input = Watched {
            bytes: io::Cursor::new(stream),
            panic_after,
            taken: Arc::clone(&taken),
        };
        (input, taken)
    }

    #[test]
    fn a_reader_dropped_early_stops_the_thread_before_the_end() {
        let stream = member(&text(400_000), GzBuilder::new());
        let total = stream.len() as u64;
        let (input, taken) = watched(stream, u64::MAX);
        let mut reader = threaded(input);
        assert!(!reader.fill_buf().unwrap().is_empty());
        drop(reader);
        // The thread's next hand-over fails and it returns, dropping its input; bounded wait.
        for _ in 0..1000 {
            let taken = taken.load(Ordering::SeqCst);
            if taken != u64::MAX {
                assert!(taken < total, "the thread read all {total} bytes");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the inflating thread still holds its input after the reader was dropped");
    }

    #[test]
    fn a_thread_that_dies_is_an_error_not_an_early_end() {
        let stream = member(&text(100_000), GzBuilder::new());
        let (input, _) = watched(stream, 20_000);
        let err = threaded(input).read_to_end(&mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("stopped before the end"), "{err}");
    }
}
