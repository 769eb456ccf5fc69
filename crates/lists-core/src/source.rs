//! Opening a source: a file, an http(s) URL or stdin (`-`), plain or gzip, as a stream.
//!
//! Nothing is read whole into memory: [`open`] gives a [`BufRead`], and [`each_line`] lends its
//! lines one at a time. Gzip (see the `gzip` module) is recognised by its magic bytes, not by a name or a header, so a `.gz` served as
//! `application/octet-stream` and a plain file named `.gz` both work. Errors that happen while
//! streaming (a timeout in the middle of the body, a cut gzip stream) are turned into
//! [`ListError`] by [`SourceName::read_error`], so they name the source too.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::time::Duration;

use crate::error::ListError;
use crate::gzip;

/// Reader buffer: large enough that line parsing, not syscalls, dominates.
const BUFFER: usize = 256 * 1024;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A source as given (path, URL or `-`), and its name as shown in logs and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceName {
    /// What to open.
    pub location: String,
    /// What to show: URLs without user info or query string (they may carry keys).
    pub shown: String,
    /// The timeout that applied, to word a timeout error.
    pub timeout: Duration,
}

impl SourceName {
    pub fn new(location: &str, timeout: Duration) -> Self {
        SourceName {
            location: location.to_string(),
            shown: redact(location),
            timeout,
        }
    }

    /// The data of this source is not in the format expected (see [`ListError::Format`]).
    pub fn format_error(&self, message: impl Into<String>) -> ListError {
        ListError::Format {
            name: self.shown.clone(),
            message: message.into(),
            remote: self.is_remote(),
        }
    }

    fn is_remote(&self) -> bool {
        self.location.starts_with("http://") || self.location.starts_with("https://")
    }

    /// Turns an I/O error met while reading this source into the error to report.
    pub fn read_error(&self, err: io::Error) -> ListError {
        let name = self.shown.clone();
        let detail = err.to_string();
        match err.kind() {
            io::ErrorKind::TimedOut => ListError::Timeout {
                name,
                seconds: self.timeout.as_secs(),
            },
            // flate2 reports a cut stream as UnexpectedEof, a corrupt one as InvalidInput or
            // InvalidData; a body shorter than its Content-Length is UnexpectedEof too.
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::InvalidData => ListError::Truncated { name, detail },
            _ if self.is_remote() => ListError::Unreachable { name, detail },
            _ => ListError::Unreadable { name, detail },
        }
    }
}

/// Hides what may be a secret in a URL: `https://user:key@host/p?key=v` shows as
/// `https://***@host/p?***`. Paths and `-` are shown as they are.
pub fn redact(location: &str) -> String {
    let Some((scheme, rest)) = location.split_once("://") else {
        return location.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_string(),
    };
    let path = match path.split_once('?') {
        Some((p, _)) => format!("{p}?***"),
        None => path.to_string(),
    };
    format!("{scheme}://{authority}{path}")
}

/// Opens `source` (stdin when it is `-`) and returns a buffered reader of its decoded bytes.
/// A gzip file or download is inflated in a thread of its own, ahead of the parser (as
/// `zcat | parser` would), so that decoding and parsing overlap.
pub fn open<'a>(
    source: &SourceName,
    stdin: &'a mut dyn Read,
) -> Result<Box<dyn BufRead + 'a>, ListError> {
    if source.location == "-" {
        let mut reader = BufReader::with_capacity(BUFFER, stdin);
        let head = reader.fill_buf().map_err(|err| source.read_error(err))?;
        return Ok(if head.starts_with(&GZIP_MAGIC) {
            Box::new(gzip::inline(reader))
        } else {
            Box::new(reader)
        });
    }
    let raw: Box<dyn Read + Send> = if source.is_remote() {
        Box::new(fetch(source)?)
    } else {
        let file = File::open(&source.location).map_err(|err| ListError::Unreadable {
            name: source.shown.clone(),
            detail: err.to_string(),
        })?;
        Box::new(file)
    };
    let mut reader = BufReader::with_capacity(BUFFER, raw);
    let head = reader.fill_buf().map_err(|err| source.read_error(err))?;
    if head.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(gzip::threaded(reader)))
    } else {
        Ok(Box::new(reader))
    }
}

/// Starts an HTTP GET; the returned reader streams the body. The timeout covers the whole
/// exchange, body included, so a source that stalls half-way is a timeout, not a hang.
fn fetch(source: &SourceName) -> Result<impl Read + Send + use<>, ListError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(source.timeout))
        .user_agent(concat!("edgepop-lists/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let name = || source.shown.clone();
    match agent.get(&source.location).call() {
        Ok(response) => Ok(response.into_body().into_reader()),
        Err(ureq::Error::StatusCode(status)) => Err(ListError::Http {
            name: name(),
            status,
        }),
        Err(ureq::Error::Timeout(_)) => Err(ListError::Timeout {
            name: name(),
            seconds: source.timeout.as_secs(),
        }),
        Err(ureq::Error::Io(err)) => Err(source.read_error(err)),
        Err(err) => Err(ListError::Unreachable {
            name: name(),
            detail: err.to_string(),
        }),
    }
}

/// Lines longer than this are cut (and reported as bad rows by the parsers, which see a row
/// that does not parse): a binary file without newlines never fills the memory.
pub const MAX_LINE: usize = 64 * 1024;

/// Calls `line` with each line of `reader` and its number (from 1), without its ending (`\n` or
/// `\r\n`), in order; stops at the first error, of reading (named after `source`) or of `line`.
/// A line longer than [`MAX_LINE`] is passed cut at that length (the rest is skipped).
///
/// The line ends are searched a whole buffer at a time (SIMD), and each line whole in the
/// reader's buffer is lent from there; only a line that the end of a buffer cuts is copied, into
/// a buffer of at most [`MAX_LINE`] bytes. This is the loop over every row of a dataset: one
/// call of `line` per line, no call through `reader` per line.
pub fn each_line(
    source: &SourceName,
    reader: &mut dyn BufRead,
    mut line: impl FnMut(u64, &[u8]) -> Result<(), ListError>,
) -> Result<(), ListError> {
    let mut number = 0u64;
    // The start of the line that the end of the last buffer cut (empty when none was cut).
    let mut head: Vec<u8> = Vec::new();
    loop {
        let buffer = reader.fill_buf().map_err(|e| source.read_error(e))?;
        if buffer.is_empty() {
            break;
        }
        let mut start = 0;
        if !head.is_empty() {
            let Some(end) = memchr::memchr(b'\n', buffer) else {
                extend_up_to_max_line(&mut head, buffer);
                let all = buffer.len();
                reader.consume(all);
                continue;
            };
            extend_up_to_max_line(&mut head, &buffer[..end]);
            number += 1;
            line(number, without_ending(&head))?;
            head.clear();
            start = end + 1;
        }
        let rest = &buffer[start..];
        let mut from = 0;
        for end in memchr::memchr_iter(b'\n', rest) {
            number += 1;
            line(number, without_ending(&rest[from..end]))?;
            from = end + 1;
        }
        extend_up_to_max_line(&mut head, &rest[from..]);
        let all = buffer.len();
        reader.consume(all);
    }
    if !head.is_empty() {
        line(number + 1, without_ending(&head))?;
    }
    Ok(())
}

/// Appends `bytes` to the cut line `head`, keeping at most [`MAX_LINE`] bytes of it.
fn extend_up_to_max_line(head: &mut Vec<u8>, bytes: &[u8]) {
    let room = MAX_LINE.saturating_sub(head.len());
    head.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// A line (without its `\n`) cut at [`MAX_LINE`], without its `\r`.
#[inline]
fn without_ending(line: &[u8]) -> &[u8] {
    let line = &line[..line.len().min(MAX_LINE)];
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Collects the rows that fail to parse, up to a tolerance, and reports them with their line
/// numbers.
#[derive(Debug)]
pub struct BadRows {
    tolerated: u64,
    count: u64,
    examples: Vec<String>,
}

impl BadRows {
    pub fn new(tolerated: u64) -> Self {
        BadRows {
            tolerated,
            count: 0,
            examples: Vec::new(),
        }
    }

    /// Records one bad row; fails as soon as the tolerance is exceeded.
    pub fn record(
        &mut self,
        source: &SourceName,
        line: u64,
        row: &[u8],
        why: &str,
    ) -> Result<(), ListError> {
        self.count += 1;
        if self.examples.len() < 5 {
            let text = String::from_utf8_lossy(row);
            let short: String = text.chars().take(80).collect();
            self.examples
                .push(format!("line {line}: {why}: `{}`", short.escape_debug()));
        }
        if self.count > self.tolerated {
            return Err(ListError::BadRows {
                name: source.shown.clone(),
                count: self.count,
                tolerated: self.tolerated,
                examples: self.examples.join("; "),
                remote: source.is_remote(),
            });
        }
        Ok(())
    }

    /// Says, as a warning, which rows were skipped (when some were).
    pub fn warn_if_any(&self, source: &SourceName) {
        if self.count > 0 {
            pop_common::warn!(
                "source {}: skipped {} row(s) that do not parse: {}",
                source.shown,
                self.count,
                self.examples.join("; ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn credentials_and_query_strings_are_redacted() {
        for (source, shown) in [
            (
                "https://u:secret@download.example/geo?license_key=k&x=1",
                "https://***@download.example/geo?***",
            ),
            (
                "https://iptoasn.com/data/ip2asn-v4.tsv.gz",
                "https://iptoasn.com/data/ip2asn-v4.tsv.gz",
            ),
            ("/data/x.csv", "/data/x.csv"),
            ("-", "-"),
        ] {
            assert_eq!(redact(source), shown, "{source}");
        }
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(u64, String)>, ListError> {
        let source = SourceName::new("-", Duration::from_secs(1));
        let mut stdin = bytes;
        let mut reader = open(&source, &mut stdin)?;
        let mut out = Vec::new();
        each_line(&source, &mut reader, |n, line| {
            out.push((n, String::from_utf8_lossy(line).into_owned()));
            Ok(())
        })?;
        Ok(out)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn plain_and_gzip_read_the_same_lines_with_numbers_and_no_line_endings() {
        let data = b"a\r\nb\n\nc";
        let expected = vec![
            (1, "a".to_string()),
            (2, "b".to_string()),
            (3, String::new()),
            (4, "c".to_string()),
        ];
        assert_eq!(read_all(data).unwrap(), expected);
        assert_eq!(read_all(&gzip(data)).unwrap(), expected);
    }

    #[test]
    fn a_truncated_gzip_stream_is_reported_as_truncated() {
        let data: Vec<u8> = (0..20000)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let full = gzip(&data);
        let cut = &full[..full.len() / 2];
        let err = read_all(cut).unwrap_err();
        assert!(matches!(err, ListError::Truncated { .. }), "{err}");
        // Only the trailer missing (CRC and length) is still a truncation.
        let err = read_all(&full[..full.len() - 4]).unwrap_err();
        assert!(matches!(err, ListError::Truncated { .. }), "{err}");
    }

    #[test]
    fn a_line_without_end_is_cut_and_the_next_one_is_read() {
        let mut data = vec![b'x'; MAX_LINE * 3];
        data.extend_from_slice(b"\nnext\n");
        let lines = read_all(&data).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].1.len(), MAX_LINE);
        assert_eq!(lines[1], (2, "next".to_string()));
    }

    /// Lines as `str::split` sees them: the reference [`each_line`] must agree with whatever
    /// the buffer boundaries are.
    fn split_lines(data: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut parts: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
        if parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        (1..)
            .zip(parts)
            .map(|(n, p)| {
                let p = &p[..p.len().min(MAX_LINE)];
                (n, p.strip_suffix(b"\r").unwrap_or(p).to_vec())
            })
            .collect()
    }

    #[test]
    fn lines_cut_by_the_end_of_a_buffer_are_joined_whatever_the_buffer_size() {
        let mut data = b"1.0.0.0,1.0.0.255,13335\r\n\n\r\n".to_vec();
        data.extend(vec![b'y'; MAX_LINE - 1]);
        data.extend(b"\r\nshort\n");
        data.extend(vec![b'z'; MAX_LINE + 5]);
        data.extend(b"\nlast without end\r");
        let expected = split_lines(&data);
        assert_eq!(expected.len(), 7);
        assert_eq!(
            expected[3].1.len(),
            MAX_LINE - 1,
            "the \\r of a line of MAX_LINE"
        );
        assert_eq!(expected[5].1.len(), MAX_LINE);
        let source = SourceName::new("-", Duration::from_secs(1));
        for capacity in [
            1,
            2,
            3,
            7,
            64,
            4096,
            MAX_LINE - 1,
            MAX_LINE + 1,
            3 * MAX_LINE,
        ] {
            let mut reader = BufReader::with_capacity(capacity, data.as_slice());
            let mut lines = Vec::new();
            each_line(&source, &mut reader, |n, line| {
                lines.push((n, line.to_vec()));
                Ok(())
            })
            .unwrap();
            assert!(lines == expected, "buffers of {capacity} bytes");
        }
    }

    #[test]
    fn the_first_error_of_a_line_stops_the_reading() {
        let source = SourceName::new("-", Duration::from_secs(1));
        let mut reader = BufReader::with_capacity(4, &b"a\nb\nc\nd\n"[..]);
        let mut seen = Vec::new();
        let err = each_line(&source, &mut reader, |n, line| {
            seen.push(n);
            if line == b"b" {
                return Err(source.format_error("b is bad"));
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "source -: b is bad");
        assert_eq!(seen, [1, 2]);
    }

    #[test]
    fn a_gzip_file_is_inflated_in_a_thread_with_the_same_lines_and_errors() {
        let dir = std::env::temp_dir().join(format!("lists-core-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..100_000)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let full = gzip(&data);
        let read_file = |bytes: &[u8]| {
            let path = dir.join("x.gz");
            std::fs::write(&path, bytes).unwrap();
            let source = SourceName::new(path.to_str().unwrap(), Duration::from_secs(1));
            let mut none: &[u8] = b"";
            let mut reader = open(&source, &mut none).unwrap();
            let mut count = 0;
            each_line(&source, &mut reader, |_, _| {
                count += 1;
                Ok(())
            })
            .map(|()| count)
        };
        assert_eq!(read_file(&full).unwrap(), 100_000);
        let err = read_file(&full[..full.len() / 2]).unwrap_err();
        assert!(matches!(err, ListError::Truncated { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_file_is_unreadable_and_names_it() {
        let source = SourceName::new("/nonexistent/asn.csv", Duration::from_secs(1));
        let mut stdin: &[u8] = b"";
        let err = open(&source, &mut stdin).err().unwrap();
        assert!(
            err.to_string()
                .starts_with("source /nonexistent/asn.csv: cannot read")
        );
    }

    #[test]
    fn bad_rows_are_tolerated_up_to_the_limit_then_reported_with_line_numbers() {
        let source = SourceName::new("/x", Duration::from_secs(1));
        let mut bad = BadRows::new(1);
        bad.record(&source, 7, b"zzz", "not an address").unwrap();
        let err = bad
            .record(&source, 9, b"yyy", "not an address")
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("2 rows fail to parse (at most 1 tolerated)"),
            "{text}"
        );
        assert!(text.contains("line 7: not an address: `zzz`"), "{text}");
        assert!(text.contains("line 9"), "{text}");
    }
}
