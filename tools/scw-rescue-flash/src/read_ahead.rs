//! A reader that reads ahead in its own thread (here: the zstd decompression), so that producing
//! the bytes overlaps with consuming them (encrypting and sending over SSH).

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread;

/// Chunks of this many bytes, at most `DEPTH` of them waiting.
const CHUNK: usize = 1 << 20;
const DEPTH: usize = 8;

/// Reads `inner` ahead in a thread; an error there is returned by `read` here, in order.
#[derive(Debug)]
pub struct ReadAhead {
    chunks: Receiver<io::Result<Vec<u8>>>,
    current: Vec<u8>,
    position: usize,
    done: bool,
}

impl ReadAhead {
    pub fn new<R: Read + Send + 'static>(mut inner: R) -> Self {
        let (sender, chunks) = sync_channel(DEPTH);
        thread::spawn(move || {
            loop {
                let mut chunk = vec![0u8; CHUNK];
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
            current: Vec::new(),
            position: 0,
            done: false,
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.position == self.current.len() {
            if self.done {
                return Ok(0);
            }
            match self.chunks.recv() {
                Ok(Ok(chunk)) => {
                    self.done = chunk.len() < CHUNK;
                    self.current = chunk;
                    self.position = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => return Err(io::Error::other("the read-ahead thread stopped")),
            }
        }
        let rest = self.current.get(self.position..).unwrap_or_default();
        let n = rest.len().min(buf.len());
        if let (Some(to), Some(from)) = (buf.get_mut(..n), rest.get(..n)) {
            to.copy_from_slice(from);
        }
        self.position += n;
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
}
