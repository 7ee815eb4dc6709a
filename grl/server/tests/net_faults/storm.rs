//! A retry storm (the last row): 20 callers on the zones' loadgen hosts send 600
//! first tries a second through three `grl sidecar`s (one per zone, each in front of a
//! local service) against a limit of 300, and retry every 429 at once, up to 3 times. The
//! retries are offered load too: the sidecars must admit the limit, not the limit plus
//! what the retries squeeze through.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::region::{Region, STORM_LIMIT, TIER_PORT, ZONES, spawn, wait_port};
use crate::{serial, skip};

const SIDECAR_PORT: u16 = 7400;
const CALLERS: usize = 20;
const FIRST_TRIES: f64 = 600.0;
const RETRIES: usize = 3;
/// Seconds of the storm, and the first one measured (the loop has learned the load).
const SECONDS: u64 = 25;
const FROM: u64 = 6;

/// Per second: attempts and admitted (200) over every caller.
struct Tally {
    attempts: Vec<AtomicU64>,
    admitted: Vec<AtomicU64>,
}

#[test]
fn a_retry_storm_through_three_sidecars_admits_the_limit() {
    let _serial = serial();
    if skip() {
        return;
    }
    let r = Region::start(STORM_LIMIT, &[], &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut sidecars = Vec::new();
    for (i, z) in ZONES.iter().enumerate() {
        let host = &r.aggs[i];
        let upstream = host
            .ns
            .enter(|| TcpListener::bind("127.0.0.1:8080"))
            .unwrap()
            .unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || serve_ok(upstream, &stop));
        let args: Vec<String> = [
            "sidecar",
            "--listen",
            &host.at(SIDECAR_PORT),
            "--upstream",
            "http://127.0.0.1:8080",
            "--service",
            "payments",
            "--aggregator",
            &format!("http://{}", host.at(TIER_PORT)),
            "--zone",
            z,
            "--region",
            "eu",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        sidecars.push(spawn(
            host,
            &args,
            r.dir.path().join(format!("sidecar-{z}.log")),
        ));
        wait_port(host, SIDECAR_PORT);
    }
    let tally = Arc::new(Tally {
        attempts: (0..SECONDS).map(|_| AtomicU64::new(0)).collect(),
        admitted: (0..SECONDS).map(|_| AtomicU64::new(0)).collect(),
    });
    let start = Instant::now() + Duration::from_secs(1);
    let callers: Vec<_> = (0..CALLERS)
        .map(|k| {
            let (host, sidecar) = (
                &r.lgs[k % 3],
                SocketAddr::from((r.aggs[k % 3].addr, SIDECAR_PORT)),
            );
            let conn = host
                .ns
                .enter(move || TcpStream::connect_timeout(&sidecar, Duration::from_secs(5)))
                .unwrap()
                .unwrap();
            let (tally, stop) = (tally.clone(), stop.clone());
            std::thread::spawn(move || call(conn, k, start, &tally, &stop))
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let load = |v: &[AtomicU64]| -> Vec<f64> {
        v.iter().map(|x| x.load(Ordering::Relaxed) as f64).collect()
    };
    let (attempts, admitted) = (load(&tally.attempts), load(&tally.admitted));
    let span = FROM as usize..SECONDS as usize;
    let n = span.len() as f64;
    let mean_attempts = attempts[span.clone()].iter().sum::<f64>() / n;
    let mean_admitted = admitted[span.clone()].iter().sum::<f64>() / n;
    let off = admitted[span.clone()]
        .iter()
        .filter(|x| (**x - STORM_LIMIT).abs() > STORM_LIMIT * 0.10)
        .count();
    println!(
        "measured: retry storm through 3 sidecars: {mean_attempts:.0} attempts/s offered, \
         {mean_admitted:.1} admitted/s ({:.3}x the limit of {STORM_LIMIT}), {off} of {} seconds \
         outside ±10 %; by second: {admitted:?}",
        mean_admitted / STORM_LIMIT,
        span.len()
    );
    assert!(
        mean_attempts > FIRST_TRIES * 1.5,
        "no storm: {mean_attempts:.0} attempts/s"
    );
    assert!(
        (mean_admitted - STORM_LIMIT).abs() <= STORM_LIMIT * 0.05,
        "admitted {mean_admitted:.1}/s against {STORM_LIMIT}"
    );
}

/// Caller `k`: its share of the first tries, evenly spaced (phases spread over the
/// callers), each 429 retried at once up to [`RETRIES`] times, on one keep-alive
/// connection.
fn call(conn: TcpStream, k: usize, start: Instant, tally: &Tally, stop: &AtomicBool) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    let every = Duration::from_secs_f64(CALLERS as f64 / FIRST_TRIES);
    let mut due = start + every.mul_f64(k as f64 / CALLERS as f64);
    let end = start + Duration::from_secs(SECONDS);
    while due < end && !stop.load(Ordering::Relaxed) {
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        let second = due.duration_since(start).as_secs() as usize;
        for _ in 0..=RETRIES {
            tally.attempts[second].fetch_add(1, Ordering::Relaxed);
            writer
                .write_all(b"GET /Pay/Charge HTTP/1.1\r\nHost: svc\r\nrpc-caller: gateway\r\n\r\n")
                .unwrap();
            let status = read_response(&mut reader);
            if status == 200 {
                tally.admitted[second].fetch_add(1, Ordering::Relaxed);
                break;
            }
            assert_eq!(status, 429, "the sidecar answered {status}");
        }
        due += every;
    }
}

/// Reads one HTTP/1.1 response (a `Content-Length` body or a chunked one); its status.
fn read_response(r: &mut BufReader<TcpStream>) -> u16 {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {line:?}"));
    let (mut length, mut chunked) = (0usize, false);
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if l.starts_with("transfer-encoding:") && l.contains("chunked") {
            chunked = true;
        }
    }
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let size = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut body = vec![0u8; size + 2];
            r.read_exact(&mut body).unwrap();
            if size == 0 {
                break;
            }
        }
    } else {
        let mut body = vec![0u8; length];
        r.read_exact(&mut body).unwrap();
    }
    status
}

/// The local service behind a sidecar: 200 to every request, keep-alive, until `stop`
/// (its socket closed then: the namespace can go).
fn serve_ok(l: TcpListener, stop: &AtomicBool) {
    l.set_nonblocking(true).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let conn = match l.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(_) => return,
        };
        conn.set_nonblocking(false).unwrap();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut writer = conn;
            let mut line = String::new();
            loop {
                // Each request is a head without a body.
                loop {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                if writer
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .is_err()
                {
                    return;
                }
            }
        });
    }
}
