//! Tests against real bare repositories on disk (and a real `git daemon` for a remote that
//! runs hooks); no mocks.

use super::*;
use git2::Signature;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use tempfile::TempDir;

/// A bare "config repo" whose `main` holds one file committed by a person.
fn bare_remote(root: &Path) -> PathBuf {
    let path = root.join("config.git");
    let repo = Repository::init_bare(&path).unwrap();
    repo.set_head("refs/heads/main").unwrap();
    let mut index = git2::Index::new().unwrap();
    let empty = repo.find_tree(index.write_tree_to(&repo).unwrap()).unwrap();
    let files = [change("services/checkout.yaml", "buckets: [pay]\n")];
    let tree = repo
        .find_tree(tree::apply(&repo, &empty, &files).unwrap())
        .unwrap();
    let sig = person();
    repo.commit(
        Some("refs/heads/main"),
        &sig,
        &sig,
        "initial intent\n",
        &tree,
        &[],
    )
    .unwrap();
    path
}

fn person() -> Signature<'static> {
    Signature::now("Pat Person", "pat@example.com").unwrap()
}

fn change(path: &str, content: &str) -> FileChange {
    FileChange {
        path: path.into(),
        content: content.into(),
    }
}

fn proposal(content: &str) -> Proposal {
    Proposal {
        files: vec![change("limits/checkout.yaml", content)],
        message: "Update limits\n\nRlc-Run: 20261129T201500Z-ab12\n".into(),
        description: "| bucket | old | new |".into(),
    }
}

type BuildResult = Result<Option<Proposal>, Box<dyn std::error::Error + Send + Sync>>;

/// A person's push of one file to `branch` (created from `main` if missing), from their own
/// clone.
fn person_push(remote: &Path, branch: &str, path: &str, content: &str) -> Oid {
    let dir = TempDir::new().unwrap();
    let repo = Repository::clone(remote.to_str().unwrap(), dir.path()).unwrap();
    let parent_ref = repo
        .refname_to_id(&format!("refs/remotes/origin/{branch}"))
        .or_else(|_| repo.refname_to_id("refs/remotes/origin/main"))
        .unwrap();
    let parent = repo.find_commit(parent_ref).unwrap();
    let tree_id = tree::apply(&repo, &parent.tree().unwrap(), &[change(path, content)]).unwrap();
    let tree = repo.find_tree(tree_id).unwrap();
    let sig = person();
    let id = repo
        .commit(None, &sig, &sig, "person edit\n", &tree, &[&parent])
        .unwrap();
    let mut remote = repo.find_remote("origin").unwrap();
    remote
        .push(&[format!("{id}:refs/heads/{branch}")], None)
        .unwrap();
    id
}

fn tip(remote: &Path, branch: &str) -> Option<Oid> {
    Repository::open_bare(remote)
        .unwrap()
        .refname_to_id(&format!("refs/heads/{branch}"))
        .ok()
}

fn read(remote: &Path, branch: &str, path: &str) -> Option<String> {
    let repo = Repository::open_bare(remote).unwrap();
    let commit = repo
        .find_commit(repo.refname_to_id(&format!("refs/heads/{branch}")).ok()?)
        .ok()?;
    let entry = commit.tree().unwrap().get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).unwrap();
    Some(String::from_utf8(blob.content().to_vec()).unwrap())
}

fn setup() -> (TempDir, PathBuf, GitStore) {
    let tmp = TempDir::new().unwrap();
    let remote = bare_remote(tmp.path());
    let store = GitStore::open(remote.to_str().unwrap(), &tmp.path().join("work")).unwrap();
    (tmp, remote, store)
}

#[test]
fn direct_commit_lands_on_main() {
    let (_tmp, remote, mut store) = setup();
    let before = tip(&remote, "main").unwrap();
    let out = store.publish(PublishMode::Direct, 3, |co| {
        assert_eq!(co.commit, before.to_string());
        assert!(
            co.dir.join("services/checkout.yaml").exists(),
            "checkout has main's files"
        );
        Ok(Some(proposal("pay: 120\n")))
    });
    let PublishOutcome::Committed {
        commit,
        branch,
        base,
        attempts,
    } = out.unwrap()
    else {
        panic!("expected a commit");
    };
    assert_eq!(
        (branch.as_str(), base, attempts),
        ("main", before.to_string(), 1)
    );
    assert_eq!(tip(&remote, "main").unwrap().to_string(), commit);
    assert_eq!(
        read(&remote, "main", "limits/checkout.yaml").as_deref(),
        Some("pay: 120\n")
    );
    assert_eq!(
        read(&remote, "main", "services/checkout.yaml").as_deref(),
        Some("buckets: [pay]\n")
    );
    assert_eq!(
        store
            .file_at(&commit, "limits/checkout.yaml")
            .unwrap()
            .as_deref(),
        Some("pay: 120\n")
    );
    assert_eq!(store.file_at(&commit, "limits/none.yaml").unwrap(), None);
}

#[test]
fn unchanged_proposal_makes_no_commit() {
    let (_tmp, remote, mut store) = setup();
    store
        .publish(PublishMode::Direct, 3, |_| Ok(Some(proposal("pay: 120\n"))))
        .unwrap();
    let after_first = tip(&remote, "main").unwrap();
    let out = store
        .publish(PublishMode::Direct, 3, |_| Ok(Some(proposal("pay: 120\n"))))
        .unwrap();
    assert_eq!(
        out,
        PublishOutcome::NoChange {
            base: after_first.to_string()
        }
    );
    let out = store
        .publish(PublishMode::Pr, 3, |_| Ok(Some(proposal("pay: 120\n"))))
        .unwrap();
    assert_eq!(
        out,
        PublishOutcome::NoChange {
            base: after_first.to_string()
        }
    );
    assert_eq!(tip(&remote, "main"), Some(after_first));
    assert_eq!(tip(&remote, PR_BRANCH), None);
}

#[test]
fn concurrent_person_commit_is_rebased_over_not_lost() {
    let (_tmp, remote, mut store) = setup();
    let mut calls = 0;
    let out = store
        .publish(PublishMode::Direct, 3, |co| {
            calls += 1;
            if calls == 1 {
                // A person pushes to main between our fetch and our push.
                person_push(
                    &remote,
                    "main",
                    "services/search.yaml",
                    "buckets: [query]\n",
                );
            } else {
                assert!(
                    co.dir.join("services/search.yaml").exists(),
                    "rebuilt on new main"
                );
            }
            Ok(Some(proposal("pay: 130\n")))
        })
        .unwrap();
    assert_eq!(calls, 2);
    assert!(
        matches!(out, PublishOutcome::Committed { attempts: 2, .. }),
        "{out:?}"
    );
    assert_eq!(
        read(&remote, "main", "services/search.yaml").as_deref(),
        Some("buckets: [query]\n")
    );
    assert_eq!(
        read(&remote, "main", "limits/checkout.yaml").as_deref(),
        Some("pay: 130\n")
    );
}

#[test]
fn gives_up_after_max_attempts_when_main_keeps_moving() {
    let (_tmp, remote, mut store) = setup();
    let mut n = 0;
    let err = store
        .publish(PublishMode::Direct, 2, |_| -> BuildResult {
            n += 1;
            person_push(&remote, "main", "services/x.yaml", &format!("v{n}\n"));
            Ok(Some(proposal("pay: 1\n")))
        })
        .unwrap_err();
    assert!(
        matches!(err, GitStoreError::Contended { attempts: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("refs/heads/main"), "{err}");
    assert_eq!(read(&remote, "main", "limits/checkout.yaml"), None);
}

#[test]
fn pr_mode_uses_branch_updates_in_place_and_keeps_person_commits() {
    let (_tmp, remote, mut store) = setup();
    let main_before = tip(&remote, "main");

    let first = store
        .publish(PublishMode::Pr, 3, |_| Ok(Some(proposal("pay: 100\n"))))
        .unwrap();
    assert!(matches!(&first, PublishOutcome::Committed { branch, .. } if branch == PR_BRANCH));
    assert_eq!(
        tip(&remote, "main"),
        main_before,
        "PR mode never touches main"
    );
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/checkout.yaml").as_deref(),
        Some("pay: 100\n")
    );

    // Second run: the branch (only RLC commits) gets main + the new proposal, in a commit on
    // top of the first one: a fast-forward, never a forced update.
    let first_tip = tip(&remote, PR_BRANCH).unwrap();
    let second = store
        .publish(PublishMode::Pr, 3, |_| Ok(Some(proposal("pay: 110\n"))))
        .unwrap();
    let PublishOutcome::Committed { commit, .. } = &second else {
        panic!("{second:?}")
    };
    let repo = Repository::open_bare(&remote).unwrap();
    let tip_commit = repo.find_commit(tip(&remote, PR_BRANCH).unwrap()).unwrap();
    assert_eq!(&tip_commit.id().to_string(), commit);
    assert_eq!(tip_commit.parent_ids().collect::<Vec<_>>(), vec![first_tip]);
    let main_tree = repo
        .find_commit(main_before.unwrap())
        .unwrap()
        .tree()
        .unwrap();
    let diff = repo
        .diff_tree_to_tree(Some(&main_tree), Some(&tip_commit.tree().unwrap()), None)
        .unwrap();
    let paths: Vec<_> = diff
        .deltas()
        .map(|d| d.new_file().path().unwrap().to_owned())
        .collect();
    assert_eq!(
        paths,
        vec![Path::new("limits/checkout.yaml").to_owned()],
        "the branch differs from main by the proposal only"
    );
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/checkout.yaml").as_deref(),
        Some("pay: 110\n")
    );

    // Same proposal again: nothing pushed.
    let same = store
        .publish(PublishMode::Pr, 3, |_| Ok(Some(proposal("pay: 110\n"))))
        .unwrap();
    assert!(matches!(same, PublishOutcome::NoChange { .. }), "{same:?}");
    assert_eq!(tip(&remote, PR_BRANCH), Some(tip_commit.id()));

    // A reviewer adds a commit to the branch; the next run builds on top of it.
    let theirs = person_push(&remote, PR_BRANCH, "limits/README.md", "reviewed\n");
    let third = store
        .publish(PublishMode::Pr, 3, |_| Ok(Some(proposal("pay: 120\n"))))
        .unwrap();
    assert!(
        matches!(third, PublishOutcome::Committed { .. }),
        "{third:?}"
    );
    let new_tip = repo.find_commit(tip(&remote, PR_BRANCH).unwrap()).unwrap();
    assert_eq!(new_tip.parent_ids().collect::<Vec<_>>(), vec![theirs]);
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/README.md").as_deref(),
        Some("reviewed\n")
    );
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/checkout.yaml").as_deref(),
        Some("pay: 120\n")
    );
    assert_eq!(tip(&remote, "main"), main_before);
}

#[test]
fn commits_between_marks_rlc_commits_and_paths() {
    let (_tmp, remote, mut store) = setup();
    let start = store.fetch().unwrap().commit;
    person_push(
        &remote,
        "main",
        "services/search.yaml",
        "buckets: [query]\n",
    );
    store
        .publish(PublishMode::Direct, 3, |_| Ok(Some(proposal("pay: 5\n"))))
        .unwrap();
    let end = store.fetch().unwrap().commit;

    let commits = store.commits_between(&start, &end).unwrap();
    let summary: Vec<(bool, Vec<String>, &str)> = commits
        .iter()
        .map(|c| (c.by_rlc, c.paths.clone(), c.author_email.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                false,
                vec!["services/search.yaml".to_string()],
                "pat@example.com"
            ),
            (
                true,
                vec!["limits/checkout.yaml".to_string()],
                RLC_AUTHOR_EMAIL
            ),
        ]
    );
    assert_eq!(commits[1].author_name, RLC_AUTHOR_NAME);
    assert!(
        commits[1]
            .message
            .contains("Rlc-Run: 20261129T201500Z-ab12")
    );
    assert_eq!(store.commits_between(&end, &end).unwrap(), vec![]);

    let files = store.files_under(&end, "services").unwrap();
    assert_eq!(
        files,
        vec![
            ("services/checkout.yaml".into(), "buckets: [pay]\n".into()),
            ("services/search.yaml".into(), "buckets: [query]\n".into()),
        ]
    );
    assert!(store.files_under(&end, "nowhere").unwrap().is_empty());
}

#[test]
fn build_error_and_bad_paths_push_nothing() {
    let (_tmp, remote, mut store) = setup();
    let before = tip(&remote, "main");
    let err = store
        .publish(PublishMode::Direct, 3, |_| Err("prometheus down".into()))
        .unwrap_err();
    assert!(err.to_string().contains("prometheus down"), "{err}");
    let mut bad = proposal("x");
    bad.files[0].path = "../escape.yaml".into();
    let err = store
        .publish(PublishMode::Direct, 3, move |_| Ok(Some(bad.clone())))
        .unwrap_err();
    assert!(matches!(err, GitStoreError::InvalidPath { .. }), "{err:?}");
    assert_eq!(tip(&remote, "main"), before);
}

#[test]
fn reopening_existing_clone_fetches_again() {
    let (tmp, remote, mut store) = setup();
    store
        .publish(PublishMode::Direct, 1, |_| Ok(Some(proposal("pay: 9\n"))))
        .unwrap();
    drop(store);
    let mut again = GitStore::open(remote.to_str().unwrap(), &tmp.path().join("work")).unwrap();
    assert_eq!(
        again.fetch().unwrap().commit,
        tip(&remote, "main").unwrap().to_string()
    );
}

/// A `git daemon` serving `root` with pushes enabled, so that hooks run.
struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(root: &Path) -> Daemon {
        let port = test_support::ports::free_port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
            ])
            .arg(format!("--base-path={}", root.display()))
            .args(["--listen=127.0.0.1", &format!("--port={port}")])
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("`git daemon` must be installed for this test");
        let mut daemon = Daemon { child, port };
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return daemon;
            }
            if let Some(status) = daemon.child.try_wait().unwrap() {
                panic!("git daemon exited early: {status}");
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("git daemon did not listen on port {}", daemon.port);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn refusing_remote_is_an_error_naming_the_ref_and_main_is_unchanged() {
    let tmp = TempDir::new().unwrap();
    let remote = bare_remote(tmp.path());
    let hook = remote.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'limits are frozen' >&2\nexit 1\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let before = tip(&remote, "main");
    let daemon = Daemon::start(tmp.path());
    let url = format!("git://127.0.0.1:{}/config.git", daemon.port);
    let mut store = GitStore::open(&url, &tmp.path().join("work")).unwrap();

    let err = store
        .publish(PublishMode::Direct, 3, |_| Ok(Some(proposal("pay: 1\n"))))
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, GitStoreError::Refused { .. }), "{err:?}");
    assert!(
        msg.contains(&format!("git remote {url} refused push of refs/heads/main")),
        "{msg}"
    );
    assert!(
        msg.contains("pre-receive hook declined"),
        "the remote's reason is kept: {msg}"
    );
    assert_eq!(tip(&remote, "main"), before);

    let err = store
        .publish(PublishMode::Pr, 3, |_| Ok(Some(proposal("pay: 1\n"))))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("refused push of refs/heads/rlc/limits"),
        "{err}"
    );
    assert_eq!(tip(&remote, PR_BRANCH), None);
}

fn two_files(checkout: &str, search: &str) -> Proposal {
    let mut p = proposal(checkout);
    p.files.push(change("limits/search.yaml", search));
    p
}

#[test]
fn reviewer_push_between_fetch_and_push_is_kept_and_the_rlc_builds_on_it() {
    let (_tmp, remote, mut store) = setup();
    store
        .publish(PublishMode::Pr, 1, |_| {
            Ok(Some(two_files("pay: 100\n", "q: 1\n")))
        })
        .unwrap();
    let co = store.fetch().unwrap();
    assert_eq!(
        co.review_tip,
        tip(&remote, PR_BRANCH).map(|t| t.to_string())
    );

    // A reviewer fixes a limit on the open pull request after our fetch, before our push.
    let theirs = person_push(&remote, PR_BRANCH, "limits/checkout.yaml", "pay: 90\n");
    let out = store
        .publish_on(&co, PublishMode::Pr, &two_files("pay: 130\n", "q: 2\n"))
        .unwrap();
    assert!(
        matches!(&out, PushOutcome::Moved { refname, .. } if refname == "refs/heads/rlc/limits"),
        "{out:?}"
    );
    assert_eq!(tip(&remote, PR_BRANCH), Some(theirs), "nothing pushed");

    // Next attempt: on top of the reviewer's commit, leaving the file they changed alone.
    let co = store.fetch().unwrap();
    let out = store
        .publish_on(&co, PublishMode::Pr, &two_files("pay: 130\n", "q: 2\n"))
        .unwrap();
    let PushOutcome::Pushed { commit, .. } = out else {
        panic!("{out:?}")
    };
    let repo = Repository::open_bare(&remote).unwrap();
    let new_tip = repo.find_commit(Oid::from_str(&commit).unwrap()).unwrap();
    assert_eq!(new_tip.parent_ids().collect::<Vec<_>>(), vec![theirs]);
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/checkout.yaml").as_deref(),
        Some("pay: 90\n"),
        "the reviewer's fix is kept"
    );
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/search.yaml").as_deref(),
        Some("q: 2\n")
    );

    // Only the reviewer's file would change: the update waits (nothing pushed).
    let co = store.fetch().unwrap();
    let out = store
        .publish_on(&co, PublishMode::Pr, &two_files("pay: 140\n", "q: 2\n"))
        .unwrap();
    assert_eq!(out, PushOutcome::UpToDate);
    assert_eq!(tip(&remote, PR_BRANCH), Some(new_tip.id()));
}

#[test]
fn direct_push_after_main_moved_is_refused_and_main_keeps_the_persons_commit() {
    let (_tmp, remote, mut store) = setup();
    let co = store.fetch().unwrap();
    let theirs = person_push(&remote, "main", "services/search.yaml", "buckets: [q]\n");
    let out = store
        .publish_on(&co, PublishMode::Direct, &proposal("pay: 1\n"))
        .unwrap();
    assert!(
        matches!(&out, PushOutcome::Moved { refname, .. } if refname == "refs/heads/main"),
        "{out:?}"
    );
    assert_eq!(tip(&remote, "main"), Some(theirs));
}

#[test]
fn review_branch_created_by_someone_after_the_fetch_is_not_overwritten() {
    let (_tmp, remote, mut store) = setup();
    let co = store.fetch().unwrap();
    assert_eq!(co.review_tip, None);
    let theirs = person_push(&remote, PR_BRANCH, "limits/checkout.yaml", "pay: 7\n");
    let out = store
        .publish_on(&co, PublishMode::Pr, &proposal("pay: 1\n"))
        .unwrap();
    assert!(matches!(out, PushOutcome::Moved { .. }), "{out:?}");
    assert_eq!(tip(&remote, PR_BRANCH), Some(theirs));
}

#[test]
fn review_branch_follows_a_moved_main_with_a_merge_not_a_reset() {
    let (_tmp, remote, mut store) = setup();
    store
        .publish(PublishMode::Pr, 1, |_| Ok(Some(proposal("pay: 100\n"))))
        .unwrap();
    let old_tip = tip(&remote, PR_BRANCH).unwrap();
    let new_main = person_push(&remote, "main", "services/search.yaml", "buckets: [q]\n");
    store
        .publish(PublishMode::Pr, 1, |_| Ok(Some(proposal("pay: 110\n"))))
        .unwrap();
    let repo = Repository::open_bare(&remote).unwrap();
    let t = repo.find_commit(tip(&remote, PR_BRANCH).unwrap()).unwrap();
    assert_eq!(t.parent_ids().collect::<Vec<_>>(), vec![old_tip, new_main]);
    assert_eq!(
        read(&remote, PR_BRANCH, "services/search.yaml").as_deref(),
        Some("buckets: [q]\n"),
        "the branch carries the new main"
    );
    assert_eq!(
        read(&remote, PR_BRANCH, "limits/checkout.yaml").as_deref(),
        Some("pay: 110\n")
    );
    // Same proposal again: up to date.
    let same = store
        .publish(PublishMode::Pr, 1, |_| Ok(Some(proposal("pay: 110\n"))))
        .unwrap();
    assert!(matches!(same, PublishOutcome::NoChange { .. }), "{same:?}");
}

#[test]
fn review_branch_updates_on_a_remote_that_refuses_forced_updates() {
    let tmp = TempDir::new().unwrap();
    let remote = bare_remote(tmp.path());
    let mut cfg = Repository::open_bare(&remote).unwrap().config().unwrap();
    cfg.set_bool("receive.denyNonFastForwards", true).unwrap();
    let daemon = Daemon::start(tmp.path());
    let url = format!("git://127.0.0.1:{}/config.git", daemon.port);
    let mut store = GitStore::open(&url, &tmp.path().join("work")).unwrap();
    for (n, content) in ["pay: 100\n", "pay: 110\n", "pay: 120\n"]
        .iter()
        .enumerate()
    {
        let out = store
            .publish(PublishMode::Pr, 1, |_| Ok(Some(proposal(content))))
            .unwrap_or_else(|e| panic!("run {n}: {e}"));
        assert!(matches!(out, PublishOutcome::Committed { .. }), "{out:?}");
        assert_eq!(
            read(&remote, PR_BRANCH, "limits/checkout.yaml").as_deref(),
            Some(*content)
        );
    }
}

#[test]
fn stale_git_locks_left_by_a_dead_run_are_cleared() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("checkout");
    std::fs::create_dir_all(dir.join(".git/refs/remotes/origin")).unwrap();
    Repository::init(&dir).unwrap();
    let planted = [
        dir.join(".git/index.lock"),
        dir.join(".git/refs/remotes/origin/main.lock"),
    ];
    for p in &planted {
        std::fs::write(p, "").unwrap();
    }
    let mut removed = super::clear_stale_locks(&dir);
    removed.sort();
    let mut want = planted.to_vec();
    want.sort();
    assert_eq!(removed, want);
    assert!(planted.iter().all(|p| !p.exists()));
    assert!(super::clear_stale_locks(&dir).is_empty());
}
