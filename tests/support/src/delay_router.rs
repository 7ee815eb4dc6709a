//! A delay-and-loss router in user space, for kernels without `netem`: in a router
//! namespace (see [`netns::Lan`](crate::netns::Lan)), every packet arriving on the given
//! links is routed into a tun device instead of straight on; this reads it, drops it with
//! the given probability, holds it for the delay (uniform jitter around it, in order within
//! each source-destination pair, as `netem` behind a FIFO would) and writes it back into
//! the tun device, from where the kernel forwards it as usual. Each direction is delayed
//! and thinned on its own.
//!
//! Stopping it (or dropping it) removes the routing rules first: the router forwards
//! straight again.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand::Rng;

use crate::netns::{Namespace, set_namespace};

const TUNSETIFF: u64 = 0x4004_54ca;
const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;
/// The routing table the rules send the links' packets to (its only route: the tun).
const TABLE: &str = "177";
const TUN: &str = "tdelay";

/// What the router does to each packet, in each direction.
#[derive(Debug, Clone, Copy)]
pub struct Impairment {
    /// Mean one-way delay.
    pub delay: Duration,
    /// Delays are uniform in `delay ± jitter`.
    pub jitter: Duration,
    /// Probability that a packet is dropped.
    pub loss: f64,
}

/// Packets forwarded and dropped so far.
#[derive(Debug, Default)]
pub struct Counts {
    /// Written back after their delay.
    pub forwarded: AtomicU64,
    /// Dropped.
    pub dropped: AtomicU64,
}

/// A running delay router; stopped when dropped.
#[derive(Debug)]
pub struct DelayRouter {
    ns: String,
    links: Vec<String>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
    /// What it did so far.
    pub counts: Arc<Counts>,
}

impl DelayRouter {
    /// Starts impairing every packet that arrives on `links` of the router namespace
    /// `router` (which forwards between them).
    pub fn start(router: &Namespace, links: &[&str], imp: Impairment) -> Result<Self> {
        let file = File::open(format!("/run/netns/{}", router.name()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (stop, counts) = (stop.clone(), counts.clone());
            std::thread::spawn(move || -> Result<()> {
                let tun = match set_namespace(&file).and_then(|()| open_tun(TUN)) {
                    Ok(t) => {
                        let _ = ready_tx.send(Ok(()));
                        t
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return Err(e);
                    }
                };
                forward(tun, imp, &stop, &counts)
            })
        };
        let mut r = Self {
            ns: router.name().to_string(),
            links: Vec::new(),
            stop,
            thread: Some(thread),
            counts,
        };
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("delay router: {e}"),
            Err(_) => bail!("delay router: the tun device was not made in 10 s"),
        }
        router.ip(&["link", "set", TUN, "up"])?;
        router.run(
            "sysctl",
            &["-qw", &format!("net.ipv4.conf.{TUN}.rp_filter=0")],
        )?;
        router.ip(&["route", "add", "default", "dev", TUN, "table", TABLE])?;
        for l in links {
            router.ip(&["rule", "add", "iif", l, "lookup", TABLE])?;
            r.links.push(l.to_string());
        }
        Ok(r)
    }

    /// Stops impairing: the rules go first (straight forwarding again), then the thread.
    pub fn stop(mut self) -> Result<()> {
        self.shut()
    }

    fn shut(&mut self) -> Result<()> {
        for l in std::mem::take(&mut self.links) {
            let _ = std::process::Command::new("ip")
                .args(["-n", &self.ns, "rule", "del", "iif", &l, "lookup", TABLE])
                .status();
        }
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t.join().expect("the delay router panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for DelayRouter {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// A tun device `name` (raw IP packets, no header) in the calling thread's namespace,
/// non-blocking.
#[allow(unsafe_code)]
fn open_tun(name: &str) -> Result<File> {
    let tun = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .context("opening /dev/net/tun")?;
    // struct ifreq: the name (16 bytes), then the flags.
    let mut req = [0u8; 40];
    req[..name.len()].copy_from_slice(name.as_bytes());
    req[16..18].copy_from_slice(&(IFF_TUN | IFF_NO_PI).to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which `req` is large enough for.
    if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF as _, req.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("TUNSETIFF");
    }
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(tun.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(tun.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok(tun)
}

/// Reads packets from `tun`, drops or holds each, and writes them back when due, until
/// `stop`.
#[allow(unsafe_code)]
fn forward(mut tun: File, imp: Impairment, stop: &AtomicBool, counts: &Counts) -> Result<()> {
    let mut rng = rand::rng();
    // (due, arrival number, packet): the earliest first.
    let mut held: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>> = BinaryHeap::new();
    // The last due time per (source, destination): a flow's packets leave in order.
    let mut last: HashMap<[u8; 8], Instant> = HashMap::new();
    let mut n = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = held
            .peek()
            .map_or(Duration::from_millis(20), |Reverse((due, ..))| {
                due.saturating_duration_since(now)
            })
            .min(Duration::from_millis(20));
        let mut pfd = libc::pollfd {
            fd: tun.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) };
        loop {
            match tun.read(&mut buf) {
                Ok(0) => break,
                Ok(len) => {
                    if rng.random::<f64>() < imp.loss {
                        counts.dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let packet = buf[..len].to_vec();
                    let mut flow = [0u8; 8];
                    if len >= 20 && packet[0] >> 4 == 4 {
                        flow.copy_from_slice(&packet[12..20]);
                    }
                    let jitter = imp.jitter.as_secs_f64() * (rng.random::<f64>() * 2.0 - 1.0);
                    let delay =
                        Duration::from_secs_f64((imp.delay.as_secs_f64() + jitter).max(0.0));
                    let mut due = Instant::now() + delay;
                    if let Some(prev) = last.get(&flow) {
                        due = due.max(*prev);
                    }
                    last.insert(flow, due);
                    n += 1;
                    held.push(Reverse((due, n, packet)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading the tun device"),
            }
        }
        let now = Instant::now();
        while held.peek().is_some_and(|Reverse((due, ..))| *due <= now) {
            let Reverse((_, _, packet)) = held.pop().expect("peeked");
            // A packet the kernel will not take (its route gone) is lost, as on a link.
            if tun.write(&packet).is_ok() {
                counts.forwarded.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}
