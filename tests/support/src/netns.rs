//! Hosts in network namespaces, made by a test and removed when it ends (also when it
//! fails): a [`Lan`] of two subnets, each on its own bridge, joined by a router namespace
//! (where [`delay_router`](crate::delay_router) can slow and thin the traffic between
//! them), with `iptables` drops at a receiving host ([`Host::drop_from`]).
//!
//! Every name is unique to the process and the call, so that tests running in parallel do
//! not collide; addresses live inside the namespaces only (nothing is routed from the
//! host's own network, nor to it). Needs root and `ip` (iproute2), and `iptables-legacy`
//! for drops: [`Lan::unavailable`] says why a test cannot run here.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// The `iptables` that works on a kernel without nftables' iptables layer.
const IPTABLES: &str = "iptables-legacy";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `ip ARGS…`, failing with its stderr.
fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// One network namespace, deleted when dropped.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// A new namespace named `grl<pid>-<n>-<role>`, its loopback up.
    pub fn new(role: &str) -> Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("grl{}-{n}-{role}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name (for `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME ARGS…`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `program ARGS…` in the namespace, failing with its stderr.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<()> {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command running `program` in the namespace (`ip netns exec` execs it: the child's
    /// process id is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `f` on a thread that joined the namespace (connections it opens start there),
    /// and returns what it returned.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        let file = File::open(format!("/run/netns/{}", self.name))
            .with_context(|| format!("opening namespace {}", self.name))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                set_namespace(&file)?;
                Ok(f())
            })
            .join()
            .expect("a thread in a namespace panicked")
        })
    }
}

/// Moves the calling thread into the network namespace `file` (a `/run/netns` entry).
#[allow(unsafe_code)]
pub(crate) fn set_namespace(file: &File) -> Result<()> {
    // SAFETY: setns on a valid descriptor of a network namespace; it changes the calling
    // thread's namespace only.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).context("setns");
    }
    Ok(())
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Deletes the namespaces named by [`Namespace::new`] for a process that no longer runs.
fn sweep_dead() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let pid = name
            .strip_prefix("grl")
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// A host on one of a [`Lan`]'s subnets.
#[derive(Debug)]
pub struct Host {
    /// Its namespace.
    pub ns: Namespace,
    /// Its address.
    pub addr: Ipv4Addr,
}

impl Host {
    /// Drops, at this host, every packet from `from` (an `iptables` rule on INPUT), until
    /// [`Host::accept_from`].
    pub fn drop_from(&self, from: Ipv4Addr) -> Result<()> {
        let src = from.to_string();
        self.ns
            .run(IPTABLES, &["-A", "INPUT", "-s", &src, "-j", "DROP"])
    }

    /// Removes a drop of [`Host::drop_from`].
    pub fn accept_from(&self, from: Ipv4Addr) -> Result<()> {
        let src = from.to_string();
        self.ns
            .run(IPTABLES, &["-D", "INPUT", "-s", &src, "-j", "DROP"])
    }

    /// `host:port` of this host.
    pub fn at(&self, port: u16) -> String {
        format!("{}:{port}", self.addr)
    }
}

/// Two subnets, 10.9.1.0/24 and 10.9.2.0/24, each on a bridge (in a hub namespace), joined
/// by a router namespace at .1 of each.
#[derive(Debug)]
pub struct Lan {
    /// The router between the subnets; its links are `r1` and `r2`.
    pub router: Namespace,
    hub: Namespace,
    hosts: [u8; 2],
}

impl Lan {
    /// Why namespaces cannot be made here (not root, no `ip`, no `iptables-legacy`, or
    /// making one failed), or `None`.
    #[allow(unsafe_code)]
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        for (program, arg) in [("ip", "-V"), (IPTABLES, "--version")] {
            if Command::new(program)
                .arg(arg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
            {
                return Some(format!(
                    "`{program}` is missing (Debian: iproute2, iptables)"
                ));
            }
        }
        match Namespace::new("probe") {
            Ok(_) => None,
            Err(e) => Some(format!("cannot make a network namespace: {e:#}")),
        }
    }

    /// The hub with both bridges and the router, forwarding between them. Namespaces left
    /// by a test process that was killed (its drops never ran) are removed first.
    pub fn new() -> Result<Self> {
        sweep_dead();
        let hub = Namespace::new("hub")?;
        let router = Namespace::new("router")?;
        for (i, br) in ["br1", "br2"].into_iter().enumerate() {
            hub.ip(&["link", "add", br, "type", "bridge"])?;
            hub.ip(&["link", "set", br, "up"])?;
            let (dev, port) = (format!("r{}", i + 1), format!("rp{}", i + 1));
            router.ip(&[
                "link",
                "add",
                &dev,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                hub.name(),
            ])?;
            hub.ip(&["link", "set", &port, "master", br, "up"])?;
            router.ip(&["addr", "add", &format!("10.9.{}.1/24", i + 1), "dev", &dev])?;
            router.ip(&["link", "set", &dev, "up"])?;
        }
        // Packets the delay router writes back come in on its tun device: no reverse-path
        // check may drop them.
        for key in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ] {
            router.run("sysctl", &["-qw", key])?;
        }
        Ok(Self {
            router,
            hub,
            hosts: [10, 10],
        })
    }

    /// A new host on subnet `side` (1 or 2), named after `role`, routed through the router.
    pub fn host(&mut self, role: &str, side: u8) -> Result<Host> {
        assert!(side == 1 || side == 2, "a Lan has subnets 1 and 2");
        let ns = Namespace::new(role)?;
        let n = &mut self.hosts[side as usize - 1];
        *n += 1;
        let addr = Ipv4Addr::new(10, 9, side, *n);
        let port = format!("h{side}-{n}");
        ns.ip(&[
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            &port,
            "netns",
            self.hub.name(),
        ])?;
        self.hub
            .ip(&["link", "set", &port, "master", &format!("br{side}"), "up"])?;
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
        ns.ip(&["link", "set", "eth0", "up"])?;
        ns.ip(&["route", "add", "default", "via", &format!("10.9.{side}.1")])?;
        Ok(Host { ns, addr })
    }
}
