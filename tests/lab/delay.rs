//! Distance for the lab. This kernel has no netem (nor fq or etf, so a tc-BPF program cannot hold
//! a packet either: an `skb->tstamp` departure time needs fq to be honoured), so the lab makes
//! its own: two TUN devices, one in each of two namespaces, joined by a forwarder in this
//! process that holds every packet a fixed time in each direction ([`TunLink`]).
//!
//! Built for bulk traffic as well as probes:
//! - the devices carry a `virtio_net_hdr` and accept TCP segmentation offload (TSO4/6, checksum
//!   offload), so one `read()` moves a whole GSO super-segment (up to 64 KiB) and the kernels on
//!   both sides keep segmenting lazily, as they do on a veth or a NIC with GRO: the forwarder
//!   makes a few thousand system calls a second at many Gbit/s, not one per 1500-byte packet;
//! - one thread per direction both reads and writes (no hand-off between threads): it sleeps in
//!   `ppoll` until the device is readable or the oldest held packet is due, reads every packet
//!   waiting (stamped with one clock read per batch), and writes every packet that is due. The
//!   delay of a direction is constant, so packets fall due in the order they came: the deadline
//!   queue is a FIFO;
//! - the threads ask for SCHED_FIFO (priority 1) and a 1 ns timer slack, so a loaded machine
//!   (the lab runs servers, diagnose and busy loops on two cores) wakes them on time; where the
//!   real-time class is refused they run as ordinary threads;
//! - a direction holds at most [`QUEUE_BYTES`] (a router's buffer): beyond, packets are dropped
//!   and counted;
//! - the devices are not persistent: they vanish with their descriptors, which the threads own,
//!   when the link is dropped (also on a panic's unwinding) or this process dies.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::netns::Netns;

/// The most bytes one direction holds at once: 64 MiB, a 20 ms one-way delay at 25 Gbit/s.
pub const QUEUE_BYTES: usize = 64 << 20;

/// The largest packet a read returns: a 64 KiB GSO super-segment and its `virtio_net_hdr`.
const PACKET_MAX: usize = 65536 + 64;

/// The most bytes read in a row before the packets that fell due meanwhile are written: a few
/// GSO super-segments, tens of µs of copying.
const BATCH_BYTES: usize = 256 << 10;

/// The most hold times kept between two [`TunLink::take_held`] calls (probes need tens).
const HELD_KEPT: usize = 100_000;

/// The delay of each direction of a link between a (the client's side) and b (the server's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delay {
    /// Packets from a to b are held this long.
    pub to_b: Duration,
    /// Packets from b to a are held this long.
    pub to_a: Duration,
}

impl Delay {
    /// A round trip of `rtt`, half each way (as a path's propagation delay is).
    pub fn rtt(rtt: Duration) -> Delay {
        Delay {
            to_b: rtt / 2,
            to_a: rtt - rtt / 2,
        }
    }

    /// The round trip the link adds.
    pub fn total(self) -> Duration {
        self.to_b + self.to_a
    }
}

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Open TUN device `name` in the calling thread's namespace: no packet information, a
/// `virtio_net_hdr` before each packet and TCP offloads on when `offload`, non-blocking.
fn open_tun(name: &str, offload: bool) -> OwnedFd {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .expect("open /dev/net/tun");
    let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
    if offload {
        flags |= libc::IFF_VNET_HDR;
    }
    let mut req = IfReq {
        name: [0; 16],
        flags: flags as libc::c_short,
        _pad: [0; 22],
    };
    assert!(name.len() < 16, "interface name {name} too long");
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads/writes an ifreq, which IfReq mirrors (name + flags, padded to 40
    // bytes).
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    assert_eq!(r, 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
    if offload {
        let tcp = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
        // UDP segmentation offload (kernel 6.2+) too where the kernel has it.
        for features in [tcp | libc::TUN_F_USO4 | libc::TUN_F_USO6, tcp] {
            // SAFETY: TUNSETOFFLOAD takes the feature bits as its unsigned long argument.
            let r = unsafe {
                libc::ioctl(
                    f.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    features as libc::c_ulong,
                )
            };
            if r == 0 {
                break;
            }
        }
    }
    // SAFETY: f's descriptor is transferred into the OwnedFd (into_raw_fd gives up ownership).
    let fd = unsafe { OwnedFd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(f)) };
    // SAFETY: plain fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    fd
}

/// What one direction did, read by the test that owns the link.
#[derive(Default)]
struct Counters {
    packets: AtomicU64,
    bytes: AtomicU64,
    dropped: AtomicU64,
    /// The largest lateness seen (hold time beyond the delay), in ns.
    late_max_ns: AtomicU64,
    /// Hold times (read → written) since the last [`TunLink::take_held`].
    held: Mutex<Vec<Duration>>,
}

/// Figures of one direction of a [`TunLink`] since it was made.
#[derive(Clone, Copy, Debug)]
pub struct DirectionStats {
    pub packets: u64,
    /// Bytes forwarded, `virtio_net_hdr`s not counted.
    pub bytes: u64,
    /// Packets dropped because [`QUEUE_BYTES`] were held already.
    pub dropped: u64,
    /// The most a packet was held beyond the delay.
    pub late_max: Duration,
}

/// Two TUN devices named `dev`, one in namespace a and one in b, and the forwarder that joins
/// them, each direction with its delay. The devices come up without addresses: the caller
/// gives them theirs. Stopped, and the devices gone, on drop.
pub struct TunLink {
    pub delay: Delay,
    stop: Arc<AtomicBool>,
    /// [a→b, b→a].
    counters: [Arc<Counters>; 2],
    threads: Vec<JoinHandle<()>>,
    /// Whether the forwarder got the real-time class (accuracy under load).
    pub realtime: bool,
}

impl TunLink {
    /// The link between `a` and `b`, devices at `mtu` and up.
    pub fn new(a: &Netns, b: &Netns, dev: &str, mtu: u32, delay: Delay) -> TunLink {
        let open = |ns: &Netns| {
            let d = dev.to_string();
            ns.spawn(move || open_tun(&d, true))
                .join()
                .expect("tun device")
        };
        let (tun_a, tun_b) = (Arc::new(open(a)), Arc::new(open(b)));
        let mtu = mtu.to_string();
        for ns in [a, b] {
            ns.ip(&["link", "set", dev, "mtu", &mtu, "up"]);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let counters = [Arc::default(), Arc::default()];
        let (rt_tx, rt_rx) = std::sync::mpsc::channel();
        let threads = vec![
            forwarder(
                tun_a.clone(),
                tun_b.clone(),
                delay.to_b,
                &stop,
                &counters[0],
                rt_tx.clone(),
            ),
            forwarder(tun_b, tun_a, delay.to_a, &stop, &counters[1], rt_tx),
        ];
        let realtime = rt_rx.iter().take(2).all(|rt| rt);
        TunLink {
            delay,
            stop,
            counters,
            threads,
            realtime,
        }
    }

    /// The hold times of each direction since the last call, [a→b, b→a] (at most
    /// [`HELD_KEPT`] each).
    pub fn take_held(&self) -> [Vec<Duration>; 2] {
        self.counters
            .each_ref()
            .map(|c| std::mem::take(&mut *c.held.lock().expect("held")))
    }

    /// [a→b, b→a] since the link was made.
    pub fn stats(&self) -> [DirectionStats; 2] {
        self.counters.each_ref().map(|c| DirectionStats {
            packets: c.packets.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            late_max: Duration::from_nanos(c.late_max_ns.load(Ordering::Relaxed)),
        })
    }
}

impl Drop for TunLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Ask for the real-time class (SCHED_FIFO 1) and a 1 ns timer slack for the calling thread;
/// whether the class was granted.
fn punctual() -> bool {
    // SAFETY: PR_SET_TIMERSLACK takes a value in ns and affects only the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pthread_self() is the calling thread; param is a valid sched_param.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0 }
}

/// Wait until `fd` is readable or `timeout` has passed (ns resolution: an hrtimer).
fn wait_readable(fd: i32, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: p is a valid pollfd, ts a valid timespec; no signal mask is changed.
    unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
}

fn read_fd(fd: i32, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: buf is a writable buffer of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    (n > 0).then_some(n as usize)
}

fn write_fd(fd: i32, buf: &[u8]) {
    // SAFETY: buf is a readable buffer of buf.len() bytes. A packet the kernel refuses (the
    // other namespace is going away) is dropped, as a link would.
    unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
}

/// A packet held by one direction: when it was read, its buffer and length.
struct Held {
    read_at: Instant,
    buf: Vec<u8>,
    len: usize,
}

/// One direction's thread: from `from` to `to`, each packet held `delay` after it was read.
fn forwarder(
    from: Arc<OwnedFd>,
    to: Arc<OwnedFd>,
    delay: Duration,
    stop: &Arc<AtomicBool>,
    counters: &Arc<Counters>,
    realtime: std::sync::mpsc::Sender<bool>,
) -> JoinHandle<()> {
    let (stop, c) = (stop.clone(), counters.clone());
    let thread = std::thread::Builder::new().name(THREAD_NAME.into());
    thread
        .spawn(move || {
            let _ = realtime.send(punctual());
            let mut line = Line {
                from: from.as_raw_fd(),
                to: to.as_raw_fd(),
                delay,
                queue: std::collections::VecDeque::new(),
                pool: Vec::new(),
                queued: 0,
                held: Vec::with_capacity(1024),
                c,
            };
            while !stop.load(Ordering::Relaxed) {
                let wrote = line.release();
                let read = line.take_in();
                if wrote == 0 && read == 0 {
                    let idle = Duration::from_millis(20);
                    let wait = line.queue.front().map_or(idle, |h| {
                        (h.read_at + delay)
                            .saturating_duration_since(Instant::now())
                            .min(idle)
                    });
                    if !wait.is_zero() {
                        wait_readable(line.from, wait);
                    }
                }
            }
            // Keep the descriptors open until the loop is done with them.
            drop((from, to));
        })
        .expect("spawn a delay-line thread")
}

/// One direction's state: its devices, delay, deadline queue and buffers.
struct Line {
    from: i32,
    to: i32,
    delay: Duration,
    queue: std::collections::VecDeque<Held>,
    /// Buffers of packets written, for the next reads.
    pool: Vec<Vec<u8>>,
    /// Bytes held.
    queued: usize,
    /// Hold times not yet published to `c`.
    held: Vec<Duration>,
    c: Arc<Counters>,
}

impl Line {
    /// Read what waits on `from`, at most [`BATCH_BYTES`] (so that packets falling due meanwhile
    /// are not kept waiting behind a long run of copies); the number of packets read.
    fn take_in(&mut self) -> usize {
        let (mut n, mut bytes) = (0, 0);
        while bytes < BATCH_BYTES {
            let mut buf = self.pool.pop().unwrap_or_else(|| vec![0u8; PACKET_MAX]);
            let Some(len) = read_fd(self.from, &mut buf) else {
                self.pool.push(buf);
                break;
            };
            let read_at = Instant::now();
            bytes += len;
            if self.queued + len > QUEUE_BYTES {
                self.c.dropped.fetch_add(1, Ordering::Relaxed);
                self.pool.push(buf);
                continue;
            }
            self.queued += len;
            self.queue.push_back(Held { read_at, buf, len });
            n += 1;
        }
        n
    }

    /// Write every packet that is due; the number written.
    fn release(&mut self) -> usize {
        let (mut packets, mut bytes, mut late_max) = (0u64, 0u64, Duration::ZERO);
        while self
            .queue
            .front()
            .is_some_and(|h| h.read_at + self.delay <= Instant::now())
        {
            let h = self.queue.pop_front().expect("front");
            // Held until handed to the other side's kernel: the write itself is that kernel
            // receiving the packet (on a veth or a NIC too), not time spent on the wire.
            let took = h.read_at.elapsed();
            write_fd(self.to, &h.buf[..h.len]);
            late_max = late_max.max(took.saturating_sub(self.delay));
            self.held.push(took);
            packets += 1;
            bytes += (h.len - VNET_HDR.min(h.len)) as u64;
            self.queued -= h.len;
            self.pool.push(h.buf);
        }
        if packets > 0 {
            let c = &self.c;
            c.packets.fetch_add(packets, Ordering::Relaxed);
            c.bytes.fetch_add(bytes, Ordering::Relaxed);
            c.late_max_ns
                .fetch_max(late_max.as_nanos() as u64, Ordering::Relaxed);
            if let Ok(mut h) = c.held.lock() {
                let room = HELD_KEPT.saturating_sub(h.len());
                h.extend(self.held.drain(..).take(room));
            }
            self.held.clear();
        }
        packets as usize
    }
}

/// The forwarder threads' name (what /proc/PID/task/*/comm shows).
pub const THREAD_NAME: &str = "delay-line";

/// The size of the `virtio_net_hdr` before each packet (the legacy header, 10 bytes).
const VNET_HDR: usize = 10;
