//! A reader that reads ahead in its own thread (here: the zstd decompression), so that producing
//! the bytes overlaps with consuming them (encrypting and sending over SSH). The consumer reads
//! the chunks in place (`BufRead`), and hands each one back to be filled again: no copy and no
//! fresh, page-faulting allocation per megabyte.

use std::io::{self, BufRead, Read};
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};
use std::thread;

/// Chunks of this many bytes, at most `DEPTH` of them waiting.
const CHUNK: usize = 1 << 20;
const DEPTH: usize = 8;

/// Reads `inner` ahead in a thread; an error there is returned by `read` here, in order.
#[derive(Debug)]
pub struct ReadAhead {
    chunks: Receiver<io::Result<Vec<u8>>>,
    /// Consumed chunks, back to the reading thread.
    spent: Sender<Vec<u8>>,
    current: Vec<u8>,
    position: usize,
    done: bool,
}

impl ReadAhead {
    pub fn new<R: Read + Send + 'static>(mut inner: R) -> Self {
        let (sender, chunks) = sync_channel(DEPTH);
        let (spent, recycled) = channel::<Vec<u8>>();
        thread::spawn(move || {
            loop {
                let mut chunk = recycled.try_recv().unwrap_or_default();
                chunk.resize(CHUNK, 0);
                let mut filled = 0;
                let result = loop {
                    match inner.read(chunk.get_mut(filled..).unwrap_or_default()) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            filled += n;
                            if filled == CHUNK {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                chunk.truncate(filled);
                let last = filled < CHUNK;
                let message = match result {
                    Ok(()) => Ok(chunk),
                    Err(e) => Err(e),
                };
                let failed = message.is_err();
                // The reader went away: stop.
                if sender.send(message).is_err() || last || failed {
                    return;
                }
            }
        });
        ReadAhead {
            chunks,
            spent,
            current: Vec::new(),
            position: 0,
            done: false,
        }
    }
}

impl BufRead for ReadAhead {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.position == self.current.len() && !self.done {
            match self.chunks.recv() {
                Ok(Ok(chunk)) => {
                    self.done = chunk.len() < CHUNK;
                    let spent = std::mem::replace(&mut self.current, chunk);
                    self.position = 0;
                    // The thread may have finished: the chunk is then simply dropped.
                    let _ = self.spent.send(spent);
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => return Err(io::Error::other("the read-ahead thread stopped")),
            }
        }
        Ok(self.current.get(self.position..).unwrap_or_default())
    }

    fn consume(&mut self, amount: usize) {
        self.position = (self.position + amount).min(self.current.len());
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = self.fill_buf()?;
        let n = rest.len().min(buf.len());
        if let (Some(to), Some(from)) = (buf.get_mut(..n), rest.get(..n)) {
            to.copy_from_slice(from);
        }
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn it_yields_the_same_bytes_across_chunk_boundaries() {
        for size in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            let mut out = Vec::new();
            ReadAhead::new(io::Cursor::new(data.clone()))
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, data, "size {size}");
        }
    }

    #[test]
    fn an_error_of_the_inner_reader_comes_through() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("corrupt frame"))
            }
        }
        let err = ReadAhead::new(Broken)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert_eq!(err.to_string(), "corrupt frame");
    }

    #[test]
    fn chunks_read_in_place_yield_the_same_bytes() {
        let data: Vec<u8> = (0..5 * CHUNK + 3).map(|i| (i * 13 % 253) as u8).collect();
        let mut reader = ReadAhead::new(io::Cursor::new(data.clone()));
        let mut out = Vec::new();
        loop {
            let chunk = reader.fill_buf().unwrap();
            if chunk.is_empty() {
                break;
            }
            // Take part of a chunk at a time, as a short write would.
            let n = chunk.len().min(CHUNK / 3 + 1);
            out.extend_from_slice(&chunk[..n]);
            reader.consume(n);
        }
        assert_eq!(out, data);
    }
}
