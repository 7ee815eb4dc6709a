//! README's quick start, run as written: the commands between its `quickstart` markers, in
//! an empty directory, with the built `grl` on `PATH`, must end with the sidecar refusing
//! the calls past the bucket's limit with 429 and the headers that name the bucket.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// The ports the quick start's commands name.
const PORTS: [u16; 5] = [7300, 7301, 7400, 8080, 9102];

/// The shell commands of README's quick start, verbatim.
fn quick_start_commands(readme: &str) -> Result<String> {
    let start = readme
        .find("<!-- quickstart:begin -->")
        .context("README.md has no `<!-- quickstart:begin -->` marker")?;
    let end = readme[start..]
        .find("<!-- quickstart:end -->")
        .map(|i| start + i)
        .context("README.md has no `<!-- quickstart:end -->` after its begin marker")?;
    let block = &readme[start..end];
    let body: Vec<&str> = block
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    ensure!(
        !body.is_empty(),
        "no ```sh block between the quickstart markers"
    );
    Ok(body.join("\n") + "\n")
}

/// Waits until every port the quick start uses can be bound (another test may hold one).
fn wait_for_free_ports(timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let busy: Vec<u16> = PORTS
            .into_iter()
            .filter(|p| TcpListener::bind(("127.0.0.1", *p)).is_err())
            .collect();
        if busy.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the quick start's ports {busy:?} stayed in use for {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills the whole process group the script ran in (its background servers with it).
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .status();
    }
}

/// `uniq -c` lines of the quick start's last command: the count of each distinct answer.
fn answers(stdout: &str) -> BTreeMap<String, u32> {
    stdout
        .lines()
        .filter_map(|l| {
            let (count, answer) = l.trim_start().split_once(' ')?;
            Some((answer.to_owned(), count.parse().ok()?))
        })
        .filter(|(answer, _)| answer.starts_with("200") || answer.starts_with("429"))
        .collect()
}

#[test]
fn readme_quick_start_ends_with_the_sidecar_refusing_calls_past_the_limit() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let script = quick_start_commands(&readme)?;
    let grl = test_support::process::target_bin("grl")?;
    let bin_dir = grl.parent().context("grl has no directory")?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("quick-start.sh"), &script)?;
    wait_for_free_ports(Duration::from_secs(60))?;

    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let stderr = std::fs::File::create(dir.path().join("stderr.log"))?;
    let mut child = Command::new("bash")
        .args(["-e", "quick-start.sh"])
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .context("starting bash")?;
    let group = Group(child.id());
    let stdout = child.stdout.take().context("no stdout")?;
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            drop(group);
            let stderr = std::fs::read_to_string(dir.path().join("stderr.log"))?;
            bail!("the quick start did not finish within 120 s; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The servers it started in the background hold its stdout open until they are gone.
    drop(group);
    let stdout = reader.join().expect("reader thread")?;
    let stderr = std::fs::read_to_string(dir.path().join("stderr.log"))?;
    eprintln!("quick start printed:\n{stdout}");
    ensure!(
        status.success(),
        "the quick start's commands failed ({status}); stdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let answers = answers(&stdout);
    let passed: u32 = answers
        .iter()
        .filter(|(a, _)| a.starts_with("200"))
        .map(|(_, n)| n)
        .sum();
    let refused_line = "429 orders/checkout \"orders/checkout\";q=5;w=1 retry-after:1";
    let refused = answers.get(refused_line).copied().unwrap_or(0);
    ensure!(
        passed + refused == 100,
        "every one of the 100 calls should pass (200) or be refused naming the bucket \
         ({refused_line}); got {answers:?}"
    );
    // 100 calls in about two seconds against 5 a second: most are refused, and the first
    // ones pass (a bucket that refuses everything would fail here too).
    ensure!(
        refused >= 50 && passed >= 5,
        "{passed} calls passed and {refused} were refused; README says the first pass and \
         about 5 a second after the first half second"
    );
    // The refused calls were answered by the sidecar: the toy service logged only the rest.
    let served = stderr.matches("\"GET / HTTP/1.1\" 200").count() as u32;
    ensure!(
        served == passed,
        "the toy service served {served} calls, the sidecar let {passed} through"
    );
    Ok(())
}
