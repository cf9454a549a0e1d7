//! Streaming readers for pcap (microsecond and nanosecond magic, either byte order) and pcapng
//! (SHB/IDB/EPB/SPB/PB, per-interface `if_tsresol`/`if_tsoffset`), either of them possibly
//! gzip-compressed (as tshark opens `.pcap.gz`), and a pcap writer with nanosecond timestamps.
//!
//! The reader keeps one refillable buffer (1 MiB, grown only for a larger record) and hands out
//! frames that borrow from it: a file of any size is read in constant memory, and the frame
//! bytes are never copied.

use std::io::{self, Read, Write};

use flate2::read::MultiGzDecoder;
use thiserror::Error;

use crate::packet::LinkType;

/// Largest record we accept. Real captures stay far below (64 KiB snap length, 256 KiB for
/// GRO'd loopback); anything bigger is garbage, reported as such rather than allocated.
pub const MAX_RECORD: usize = 16 << 20;

/// The buffer starts small (cheap for small files and fuzzing) and doubles on every refill up
/// to this size, where a large file is read in few system calls.
const BUF_SIZE: usize = 1 << 20;
const BUF_START: usize = 64 << 10;

/// Why a capture file could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The underlying read failed.
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
    /// The file is empty or shorter than a header.
    #[error("file too short to be a capture ({0} bytes); is it empty?")]
    TooShort(usize),
    /// The first bytes are not a pcap or pcapng magic number.
    #[error(
        "not a pcap or pcapng file (magic {0:#010x}); write captures with `latscope capture -w` or `tcpdump -w`"
    )]
    NotACapture(u32),
    /// A record or block header is impossible at this point of the file.
    #[error("corrupt capture at byte {offset}: {what}")]
    Corrupt {
        /// Byte offset of the record in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// One captured frame, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub number: u64,
    /// Capture timestamp, ns since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub orig_len: u32,
    /// The link layer of this frame.
    pub link: LinkType,
    /// The captured bytes (possibly cut by the snap length).
    pub data: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
struct Iface {
    link: LinkType,
    snaplen: u32,
    /// Timestamp unit: either 10^-exp (`pow2 == false`) or 2^-exp seconds.
    exp: u8,
    pow2: bool,
    offset_s: i64,
}

impl Iface {
    fn ts_to_ns(self, ts: u64) -> u64 {
        let ns = if self.pow2 {
            ((u128::from(ts) * 1_000_000_000u128) >> self.exp.min(127)) as u64
        } else if self.exp <= 9 {
            ts.saturating_mul(10u64.pow(u32::from(9 - self.exp)))
        } else {
            ts / 10u64.saturating_pow(u32::from(self.exp - 9))
        };
        (ns as i64).saturating_add(self.offset_s.saturating_mul(1_000_000_000)) as u64
    }
}

#[derive(Debug)]
enum Format {
    Pcap {
        swapped: bool,
        nanos: bool,
        link: LinkType,
    },
    PcapNg {
        swapped: bool,
        ifaces: Vec<Iface>,
    },
}

/// Which container the file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Classic pcap.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// What the reader skipped or noticed, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Bytes consumed so far.
    pub bytes: u64,
    /// pcapng blocks we do not use (name resolution, statistics, custom …).
    pub skipped_blocks: u64,
    /// The file ends in the middle of a record (a capture that was still being written, or cut).
    pub truncated_tail: bool,
}

/// Where the reader's bytes come from: the source itself, or its gzip decompression (RFC 1952;
/// every member, like `gzip -d`), which starts with the bytes already read to see the magic.
enum Source<R> {
    Plain(R),
    Gzip(Box<MultiGzDecoder<io::Chain<io::Cursor<Vec<u8>>, R>>>),
    Taken,
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(b),
            Source::Gzip(g) => g.read(b),
            Source::Taken => Ok(0),
        }
    }
}

/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The first four bytes of a classic pcap file, read little-endian: µs and ns timestamps, in
/// either byte order.
const PCAP_MAGICS: [u32; 4] = [0xa1b2_c3d4, 0xa1b2_3c4d, 0xd4c3_b2a1, 0x4d3c_b2a1];

/// The first four bytes of a pcapng file (its Section Header Block type, the same both ways).
const PCAPNG_MAGIC: u32 = 0x0a0d_0d0a;

/// Whether a file starting with `head` is a pcap or pcapng capture: for commands that take
/// other files, to say "this is a capture" instead of failing on its bytes.
pub fn is_capture(head: &[u8]) -> bool {
    head.get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .is_some_and(|m| PCAP_MAGICS.contains(&m) || m == PCAPNG_MAGIC)
}

/// Where a frame found in the buffer lies, before it is numbered and lent out.
struct FrameAt {
    at: usize,
    len: usize,
    ts_ns: u64,
    orig_len: u32,
    link: LinkType,
}

/// A streaming capture-file reader.
pub struct CaptureReader<R> {
    src: Source<R>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    format: Format,
    next_number: u64,
    stats: ReadStats,
}

impl<R: Read> CaptureReader<R> {
    /// Read the file header and detect the format (decompressing a gzip-compressed file).
    pub fn new(src: R) -> Result<Self, ReadError> {
        let mut r = CaptureReader {
            src: Source::Plain(src),
            buf: vec![0u8; BUF_START],
            start: 0,
            end: 0,
            eof: false,
            format: Format::Pcap {
                swapped: false,
                nanos: false,
                link: LinkType::Ethernet,
            },
            next_number: 1,
            stats: ReadStats::default(),
        };
        if r.fill(2)? && r.buf[..2] == GZIP_MAGIC {
            r.inflate();
        }
        if !r.fill(24)? {
            return Err(ReadError::TooShort(r.end - r.start));
        }
        let m = r.u32_at(0, false);
        match m {
            m if PCAP_MAGICS.contains(&m) => {
                let swapped = matches!(m, 0xd4c3_b2a1 | 0x4d3c_b2a1);
                let nanos = matches!(m, 0xa1b2_3c4d | 0x4d3c_b2a1);
                // The link type field's upper bits carry FCS information (pcap spec §4).
                let link = LinkType::from_u32(r.u32_at(20, swapped) & 0x03ff_ffff);
                r.format = Format::Pcap {
                    swapped,
                    nanos,
                    link,
                };
                r.consume(24);
            }
            PCAPNG_MAGIC => {
                r.format = Format::PcapNg {
                    swapped: false,
                    ifaces: Vec::new(),
                };
                // The SHB is parsed by the block loop.
            }
            other => return Err(ReadError::NotACapture(other)),
        }
        Ok(r)
    }

    /// From here on, read the decompression of the source (the bytes buffered so far included).
    fn inflate(&mut self) {
        let Source::Plain(src) = std::mem::replace(&mut self.src, Source::Taken) else {
            return;
        };
        let head = self.buf[self.start..self.end].to_vec();
        (self.start, self.end, self.eof) = (0, 0, false);
        self.src = Source::Gzip(Box::new(MultiGzDecoder::new(
            io::Cursor::new(head).chain(src),
        )));
    }

    /// The file was gzip-compressed ([`ReadStats::bytes`] then counts decompressed bytes).
    pub fn compressed(&self) -> bool {
        matches!(self.src, Source::Gzip(_))
    }

    /// pcap or pcapng.
    pub fn kind(&self) -> FileKind {
        match self.format {
            Format::Pcap { .. } => FileKind::Pcap,
            Format::PcapNg { .. } => FileKind::PcapNg,
        }
    }

    /// The link type of a classic pcap file, or of the first pcapng interface seen so far.
    pub fn link_type(&self) -> Option<LinkType> {
        match &self.format {
            Format::Pcap { link, .. } => Some(*link),
            Format::PcapNg { ifaces, .. } => ifaces.first().map(|i| i.link),
        }
    }

    /// What was skipped so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// Make at least `n` bytes available from `start`. Returns false at end of file.
    fn fill(&mut self, n: usize) -> Result<bool, ReadError> {
        if self.end - self.start >= n {
            return Ok(true);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if n > self.buf.len() {
            self.buf.resize(n.next_power_of_two(), 0);
        } else if self.buf.len() < BUF_SIZE && !self.eof {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        while self.end < n && !self.eof {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A compressed file cut short: what was decompressed is read, as for a plain
                // file that ends mid-record.
                Err(e) if self.compressed() && e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.eof = true
                }
                Err(e) if self.compressed() && e.kind() == io::ErrorKind::InvalidInput => {
                    return Err(self.corrupt(format!("gzip data: {e}")));
                }
                Err(e) if self.compressed() && e.kind() == io::ErrorKind::InvalidData => {
                    return Err(self.corrupt(format!("gzip data: {e}")));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(self.end - self.start >= n)
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.stats.bytes += n as u64;
    }

    #[inline]
    fn u32_at(&self, off: usize, swapped: bool) -> u32 {
        let i = self.start + off;
        let b = [
            self.buf[i],
            self.buf[i + 1],
            self.buf[i + 2],
            self.buf[i + 3],
        ];
        if swapped {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    #[inline]
    fn u16_at(&self, off: usize, swapped: bool) -> u16 {
        let i = self.start + off;
        let b = [self.buf[i], self.buf[i + 1]];
        if swapped {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }

    fn corrupt(&self, what: impl Into<String>) -> ReadError {
        ReadError::Corrupt {
            offset: self.stats.bytes,
            what: what.into(),
        }
    }

    /// The next frame, or `None` at the end of the file.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, ReadError> {
        match self.format {
            Format::Pcap {
                swapped,
                nanos,
                link,
            } => self.next_pcap(swapped, nanos, link),
            Format::PcapNg { .. } => self.next_pcapng(),
        }
    }

    fn tail(&mut self) -> Result<Option<Frame<'_>>, ReadError> {
        if self.end > self.start {
            self.stats.truncated_tail = true;
            let n = self.end - self.start;
            self.consume(n);
        }
        Ok(None)
    }

    #[inline]
    fn next_pcap(
        &mut self,
        swapped: bool,
        nanos: bool,
        link: LinkType,
    ) -> Result<Option<Frame<'_>>, ReadError> {
        if !self.fill(16)? {
            return self.tail();
        }
        let sec = u64::from(self.u32_at(0, swapped));
        let frac = u64::from(self.u32_at(4, swapped));
        let incl = self.u32_at(8, swapped) as usize;
        let orig = self.u32_at(12, swapped);
        if incl > MAX_RECORD {
            return Err(self.corrupt(format!(
                "record {} claims {incl} captured bytes (limit {MAX_RECORD}); the file is damaged after this point",
                self.next_number
            )));
        }
        if !self.fill(16 + incl)? {
            return self.tail();
        }
        let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        let at = self.start + 16;
        self.consume(16 + incl);
        let number = self.next_number;
        self.next_number += 1;
        Ok(Some(Frame {
            number,
            ts_ns,
            orig_len: orig,
            link,
            data: &self.buf[at..at + incl],
        }))
    }

    /// pcapng block types (pcapng spec §4).
    const SHB: u32 = 0x0a0d_0d0a;
    const IDB: u32 = 1;
    const OBSOLETE_PB: u32 = 2;
    const SPB: u32 = 3;
    const EPB: u32 = 6;

    fn next_pcapng(&mut self) -> Result<Option<Frame<'_>>, ReadError> {
        let at = loop {
            let Some((btype, swapped, blen)) = self.pcapng_block_header()? else {
                return self.tail();
            };
            match btype {
                Self::SHB => {
                    self.format = Format::PcapNg {
                        swapped,
                        ifaces: Vec::new(),
                    };
                    self.consume(blen);
                }
                Self::IDB => self.pcapng_interface(swapped, blen)?,
                Self::EPB | Self::OBSOLETE_PB => {
                    break self.pcapng_packet(btype == Self::EPB, swapped, blen)?;
                }
                Self::SPB => break self.pcapng_simple_packet(swapped, blen)?,
                _ => {
                    self.stats.skipped_blocks += 1;
                    self.consume(blen);
                }
            }
        };
        Ok(Some(self.lend(at)))
    }

    /// The next block's type, byte order and length, with the whole block buffered; `None` at
    /// the end of the file (or of what was written of it).
    fn pcapng_block_header(&mut self) -> Result<Option<(u32, bool, usize)>, ReadError> {
        if !self.fill(12)? {
            return Ok(None);
        }
        let Format::PcapNg { swapped, .. } = self.format else {
            return Ok(None);
        };
        let raw_type = self.u32_at(0, false);
        let (btype, swapped) = if raw_type == Self::SHB {
            // Section header: the byte-order magic decides the order for this section.
            let sw = match self.u32_at(8, false) {
                0x1a2b_3c4d => false,
                0x4d3c_2b1a => true,
                other => {
                    return Err(self.corrupt(format!("bad pcapng byte-order magic {other:#010x}")));
                }
            };
            (raw_type, sw)
        } else {
            (self.u32_at(0, swapped), swapped)
        };
        let blen = self.u32_at(4, swapped) as usize;
        if blen < 12 || blen % 4 != 0 || blen > MAX_RECORD {
            return Err(self.corrupt(format!("pcapng block length {blen} is invalid")));
        }
        if !self.fill(blen)? {
            return Ok(None);
        }
        Ok(Some((btype, swapped, blen)))
    }

    /// An interface description block: link type, snap length, `if_tsresol`, `if_tsoffset`.
    fn pcapng_interface(&mut self, swapped: bool, blen: usize) -> Result<(), ReadError> {
        if blen < 20 {
            return Err(self.corrupt("pcapng interface block too short"));
        }
        let mut iface = Iface {
            link: LinkType::from_u32(u32::from(self.u16_at(8, swapped))),
            snaplen: self.u32_at(12, swapped),
            exp: 6,
            pow2: false,
            offset_s: 0,
        };
        // Options: code u16, len u16, value padded to 4.
        let mut o = 16;
        while o + 4 <= blen - 4 {
            let code = self.u16_at(o, swapped);
            let len = usize::from(self.u16_at(o + 2, swapped));
            if code == 0 || o + 4 + len > blen - 4 {
                break;
            }
            let v = self.start + o + 4;
            if code == 9 && len >= 1 {
                let r = self.buf[v];
                iface.pow2 = r & 0x80 != 0;
                iface.exp = r & 0x7f;
            } else if code == 14 && len >= 8 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.buf[v..v + 8]);
                iface.offset_s = if swapped {
                    i64::from_be_bytes(b)
                } else {
                    i64::from_le_bytes(b)
                };
            }
            o += 4 + len.div_ceil(4) * 4;
        }
        if let Format::PcapNg { ifaces, .. } = &mut self.format {
            if ifaces.len() < 4096 {
                ifaces.push(iface);
            }
        }
        self.consume(blen);
        Ok(())
    }

    /// The pcapng interface `ifid` describes, if it was described.
    fn pcapng_iface(&self, ifid: usize) -> Option<Iface> {
        match &self.format {
            Format::PcapNg { ifaces, .. } => ifaces.get(ifid).copied(),
            Format::Pcap { .. } => None,
        }
    }

    /// An enhanced packet block, or the obsolete packet block (16-bit interface id).
    fn pcapng_packet(
        &mut self,
        enhanced: bool,
        swapped: bool,
        blen: usize,
    ) -> Result<FrameAt, ReadError> {
        if blen < 32 {
            return Err(self.corrupt("pcapng packet block too short"));
        }
        let ifid = if enhanced {
            self.u32_at(8, swapped) as usize
        } else {
            usize::from(self.u16_at(8, swapped))
        };
        let (hi, lo) = (self.u32_at(12, swapped), self.u32_at(16, swapped));
        let cap = self.u32_at(20, swapped) as usize;
        let orig_len = self.u32_at(24, swapped);
        if cap > blen - 32 {
            return Err(self.corrupt(format!(
                "packet block claims {cap} bytes in a {blen}-byte block"
            )));
        }
        let Some(iface) = self.pcapng_iface(ifid) else {
            return Err(self.corrupt(format!(
                "packet block for interface {ifid}, which was never described"
            )));
        };
        let at = FrameAt {
            at: self.start + 28,
            len: cap,
            ts_ns: iface.ts_to_ns((u64::from(hi) << 32) | u64::from(lo)),
            orig_len,
            link: iface.link,
        };
        self.consume(blen);
        Ok(at)
    }

    /// A simple packet block: interface 0, no timestamp, captured length from the snap length.
    fn pcapng_simple_packet(&mut self, swapped: bool, blen: usize) -> Result<FrameAt, ReadError> {
        let Some(iface) = self.pcapng_iface(0) else {
            return Err(self.corrupt("simple packet block before any interface block"));
        };
        let orig_len = self.u32_at(8, swapped);
        let mut cap = (orig_len as usize).min(blen - 16);
        if iface.snaplen > 0 {
            cap = cap.min(iface.snaplen as usize);
        }
        let at = FrameAt {
            at: self.start + 12,
            len: cap,
            ts_ns: 0,
            orig_len,
            link: iface.link,
        };
        self.consume(blen);
        Ok(at)
    }

    /// Number the frame found at `f` and lend its bytes out (consumed, but still in the buffer
    /// until the next refill).
    fn lend(&mut self, f: FrameAt) -> Frame<'_> {
        let number = self.next_number;
        self.next_number += 1;
        Frame {
            number,
            ts_ns: f.ts_ns,
            orig_len: f.orig_len,
            link: f.link,
            data: &self.buf[f.at..f.at + f.len],
        }
    }
}

/// Writes classic pcap with the nanosecond magic (0xa1b23c4d), little-endian, version 2.4.
pub struct PcapWriter<W: Write> {
    w: W,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Write the file header.
    pub fn new(mut w: W, link: LinkType, snaplen: u32) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&link.to_u32().to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w, snaplen })
    }

    /// Append one frame; `data` beyond the snap length is cut.
    pub fn write_frame(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> io::Result<()> {
        let cap = data.len().min(self.snaplen as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.max(cap as u32).to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(&data[..cap])
    }

    /// Flush buffered output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The inner writer.
    pub fn into_inner(self) -> W {
        self.w
    }
}

/// Writes pcapng: one section header, one interface (`if_tsresol` = 9, nanoseconds), then an
/// enhanced packet block per frame.
pub struct PcapNgWriter<W: Write> {
    w: W,
    snaplen: u32,
}

fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

impl<W: Write> PcapNgWriter<W> {
    /// Write the section header and the interface description.
    pub fn new(mut w: W, link: LinkType, snaplen: u32, if_name: &str) -> io::Result<Self> {
        let mut b = Vec::with_capacity(128);
        // SHB: type, length, byte-order magic, version 1.0, section length unknown (-1).
        b.extend_from_slice(&0x0a0d_0d0au32.to_le_bytes());
        b.extend_from_slice(&28u32.to_le_bytes());
        b.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
        b.extend_from_slice(&28u32.to_le_bytes());
        // IDB with if_name (2), if_tsresol (9) = 9, end of options.
        let name = &if_name.as_bytes()[..if_name.len().min(64)];
        let opts_len = 4 + pad4(name.len()) + 4 + 4 + 4;
        let len = (20 + opts_len) as u32;
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&(link.to_u32() as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&snaplen.to_le_bytes());
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(name);
        b.resize(b.len() + pad4(name.len()) - name.len(), 0);
        b.extend_from_slice(&9u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&[9, 0, 0, 0]);
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(&len.to_le_bytes());
        w.write_all(&b)?;
        Ok(PcapNgWriter { w, snaplen })
    }

    /// Append one frame as an enhanced packet block.
    pub fn write_frame(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> io::Result<()> {
        let cap = data.len().min(self.snaplen as usize);
        let len = (32 + pad4(cap)) as u32;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&6u32.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(ts_ns as u32).to_le_bytes());
        h[20..24].copy_from_slice(&(cap as u32).to_le_bytes());
        h[24..28].copy_from_slice(&orig_len.max(cap as u32).to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(&data[..cap])?;
        self.w.write_all(&[0u8; 3][..pad4(cap) - cap])?;
        self.w.write_all(&len.to_le_bytes())
    }

    /// Flush buffered output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The inner writer.
    pub fn into_inner(self) -> W {
        self.w
    }
}

/// A pcap or pcapng writer, chosen at run time.
pub enum CaptureWriter<W: Write> {
    /// Classic pcap, nanosecond magic.
    Pcap(PcapWriter<W>),
    /// pcapng.
    PcapNg(PcapNgWriter<W>),
}

impl<W: Write> CaptureWriter<W> {
    /// Append one frame.
    pub fn write_frame(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> io::Result<()> {
        match self {
            CaptureWriter::Pcap(w) => w.write_frame(ts_ns, orig_len, data),
            CaptureWriter::PcapNg(w) => w.write_frame(ts_ns, orig_len, data),
        }
    }
    /// Flush buffered output.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            CaptureWriter::Pcap(w) => w.flush(),
            CaptureWriter::PcapNg(w) => w.flush(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn pcap_bytes() -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, 65535).unwrap();
        w.write_frame(1_700_000_000_123_456_789, 60, &[1u8; 60])
            .unwrap();
        w.write_frame(1_700_000_001_000_000_001, 100, &[2u8; 40])
            .unwrap();
        w.into_inner()
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    /// The two frames [`pcap_bytes`] holds, and nothing after them.
    fn assert_pcap_bytes_frames<R: std::io::Read>(r: &mut CaptureReader<R>) {
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(
            (f.number, f.ts_ns, f.data.len()),
            (1, 1_700_000_000_123_456_789, 60)
        );
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!((f.number, f.orig_len, f.data[0]), (2, 100, 2));
        assert!(r.next_frame().unwrap().is_none());
    }

    /// A gzip-compressed capture reads like the plain one; cut short, it keeps what was
    /// decompressed and says the tail is missing; damaged, it is a corrupt capture.
    #[test]
    fn gzip_capture_reads_transparently() {
        let plain = pcap_bytes();
        let gz = gzip(&plain);
        let mut r = CaptureReader::new(&gz[..]).unwrap();
        assert!(r.compressed());
        assert_pcap_bytes_frames(&mut r);
        assert_eq!(r.stats().bytes, plain.len() as u64);
        assert!(!CaptureReader::new(&plain[..]).unwrap().compressed());

        let cut = &gz[..gz.len() - 12];
        let mut r = CaptureReader::new(cut).unwrap();
        let mut n = 0;
        while let Ok(Some(_)) = r.next_frame() {
            n += 1;
        }
        assert!(n >= 1);

        let mut bad = gz.clone();
        for b in &mut bad[10..] {
            *b ^= 0x5a;
        }
        assert!(matches!(
            CaptureReader::new(&bad[..]),
            Err(ReadError::Corrupt { .. })
        ));
    }

    #[test]
    fn pcap_roundtrip_ns() {
        let b = pcap_bytes();
        let mut r = CaptureReader::new(&b[..]).unwrap();
        assert_pcap_bytes_frames(&mut r);
        assert!(!r.stats().truncated_tail);
    }

    #[test]
    fn pcap_big_endian_micro() {
        let mut b = Vec::new();
        b.extend_from_slice(&0xa1b2_c3d4u32.to_be_bytes());
        b.extend_from_slice(&[
            0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1,
        ]);
        b.extend_from_slice(&5u32.to_be_bytes());
        b.extend_from_slice(&7u32.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(&[9, 9, 9]);
        let mut r = CaptureReader::new(&b[..]).unwrap();
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(f.ts_ns, 5_000_007_000);
        assert_eq!(f.data, &[9, 9, 9]);
    }

    #[test]
    fn truncated_tail_is_counted() {
        let b = pcap_bytes();
        let cut = &b[..b.len() - 5];
        let mut r = CaptureReader::new(cut).unwrap();
        assert!(r.next_frame().unwrap().is_some());
        assert!(r.next_frame().unwrap().is_none());
        assert!(r.stats().truncated_tail);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            CaptureReader::new(&b""[..]),
            Err(ReadError::TooShort(0))
        ));
        assert!(matches!(
            CaptureReader::new(&[7u8; 64][..]),
            Err(ReadError::NotACapture(_))
        ));
        let mut b = pcap_bytes();
        b.truncate(24);
        b.extend_from_slice(&[0xff; 16]);
        let mut r = CaptureReader::new(&b[..]).unwrap();
        assert!(matches!(r.next_frame(), Err(ReadError::Corrupt { .. })));
    }

    pub(crate) fn pcapng_bytes(tsresol: u8) -> Vec<u8> {
        let mut b = Vec::new();
        // SHB
        b.extend_from_slice(&0x0a0d_0d0au32.to_le_bytes());
        b.extend_from_slice(&28u32.to_le_bytes());
        b.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
        b.extend_from_slice(&[1, 0, 0, 0]);
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        b.extend_from_slice(&28u32.to_le_bytes());
        // IDB with if_tsresol
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&32u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&9u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&[tsresol, 0, 0, 0]);
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(&32u32.to_le_bytes());
        // an unknown block
        b.extend_from_slice(&0x0bad_u32.to_le_bytes());
        b.extend_from_slice(&12u32.to_le_bytes());
        b.extend_from_slice(&12u32.to_le_bytes());
        // EPB with 5 bytes (padded to 8)
        b.extend_from_slice(&6u32.to_le_bytes());
        b.extend_from_slice(&40u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1500u32.to_le_bytes());
        b.extend_from_slice(&5u32.to_le_bytes());
        b.extend_from_slice(&5u32.to_le_bytes());
        b.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
        b.extend_from_slice(&40u32.to_le_bytes());
        // SPB
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&20u32.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&[7, 7, 7, 0]);
        b.extend_from_slice(&20u32.to_le_bytes());
        b
    }

    #[test]
    fn pcapng_blocks_and_tsresol() {
        let b = pcapng_bytes(9);
        let mut r = CaptureReader::new(&b[..]).unwrap();
        assert_eq!(r.kind(), FileKind::PcapNg);
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!((f.ts_ns, f.data), (1500, &[1u8, 2, 3, 4, 5][..]));
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!((f.number, f.data), (2, &[7u8, 7, 7][..]));
        assert!(r.next_frame().unwrap().is_none());
        assert_eq!(r.stats().skipped_blocks, 1);
        // microseconds (default 6) and 2^-10
        let b6 = pcapng_bytes(6);
        let mut r = CaptureReader::new(&b6[..]).unwrap();
        assert_eq!(r.next_frame().unwrap().unwrap().ts_ns, 1_500_000);
        let b2 = pcapng_bytes(0x80 | 10);
        let mut r = CaptureReader::new(&b2[..]).unwrap();
        assert_eq!(
            r.next_frame().unwrap().unwrap().ts_ns,
            1500 * 1_000_000_000 / 1024
        );
    }

    #[test]
    fn pcapng_writer_roundtrip() {
        let mut w = PcapNgWriter::new(Vec::new(), LinkType::Raw, 65535, "eth0").unwrap();
        w.write_frame(1_700_000_000_123_456_789, 100, &[5u8; 7])
            .unwrap();
        w.write_frame(1_700_000_001_000_000_000, 8, &[6u8; 8])
            .unwrap();
        let b = w.into_inner();
        let mut r = CaptureReader::new(&b[..]).unwrap();
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(
            (f.ts_ns, f.orig_len, f.data, f.link),
            (1_700_000_000_123_456_789, 100, &[5u8; 7][..], LinkType::Raw)
        );
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(f.data, &[6u8; 8]);
        assert!(r.next_frame().unwrap().is_none());
        assert_eq!(r.stats().skipped_blocks, 0);
    }

    #[test]
    fn every_prefix_of_pcapng_is_safe() {
        let b = pcapng_bytes(9);
        for n in 0..b.len() {
            if let Ok(mut r) = CaptureReader::new(&b[..n]) {
                while let Ok(Some(_)) = r.next_frame() {}
            }
        }
    }
}
