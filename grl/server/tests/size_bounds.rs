//! The size bounds the README states, at their figures, on a `grl controller` process: a
//! config of exactly 32 MiB in all (32 files of the 1 MiB a file may hold) is applied and
//! one byte more is refused before parsing; a `Control` message of exactly 40 MiB reaches
//! the controller (which refuses it as a config) and one byte more is refused by gRPC,
//! while the controller keeps its config and keeps serving.

use grl_config::bounds::{MAX_FILE_BYTES, MAX_TOTAL_BYTES};
use grl_core::proto;
use grl_core::proto::control_client::ControlClient;
use grl_core::proto::tier_client::TierClient;
use grl_core::wire::MAX_CONTROL_MESSAGE_BYTES;
use prost::Message;
use test_support::ports::free_port;

use crate::binary::{Proc, controller};
use crate::support::write_config;

/// A controller process following a config dir, with a `Control` and a `Tier` client.
struct Controller {
    control: ControlClient<tonic::transport::Channel>,
    tier: TierClient<tonic::transport::Channel>,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl Controller {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), 1000.0);
        let port = free_port();
        let proc_ = controller(port, dir.path());
        let ch = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Self {
            control: ControlClient::new(ch.clone()),
            tier: TierClient::new(ch),
            _proc: proc_,
            _dir: dir,
        }
    }

    async fn apply(
        &mut self,
        req: proto::ApplyConfigRequest,
    ) -> Result<proto::ApplyConfigResponse, tonic::Status> {
        self.control
            .apply_config(req)
            .await
            .map(tonic::Response::into_inner)
    }

    /// The version of the config in force.
    async fn version(&mut self) -> String {
        self.tier
            .status(proto::StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
            .config_version
    }
}

/// A service file `name` with one bucket, padded with comment lines to exactly `bytes`.
fn service_file(name: &str, bytes: usize) -> proto::ConfigFile {
    let mut content = format!(
        "service: {name}\nbuckets:\n  - name: b\n    match: {{ caller: c }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: 100 }}\n"
    );
    while content.len() < bytes {
        let line = (bytes - content.len()).min(1000);
        content.push_str(&"#".repeat(line - 1));
        content.push('\n');
    }
    proto::ConfigFile {
        path: format!("services/{name}.yaml"),
        content,
    }
}

fn apply(version: &str, files: Vec<proto::ConfigFile>) -> proto::ApplyConfigRequest {
    proto::ApplyConfigRequest {
        version: version.into(),
        files,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_of_32_mib_in_all_is_applied_and_one_byte_more_is_refused() {
    let mut ctl = Controller::start().await;
    let full: Vec<_> = (0..32)
        .map(|i| service_file(&format!("s{i:02}"), MAX_FILE_BYTES))
        .collect();
    let total: usize = full.iter().map(|f| f.content.len()).sum();
    assert_eq!(total, 32 * 1024 * 1024);
    assert_eq!(total, MAX_TOTAL_BYTES);

    let r = ctl
        .apply(apply("full", full.clone()))
        .await
        .expect("a config of 32 MiB in all was refused");
    assert_eq!((r.version.as_str(), r.services), ("full", 32), "{r:?}");
    assert_eq!(ctl.version().await, "full");

    // One byte more in all, every file still within its 1 MiB.
    let mut over = full;
    over.push(proto::ConfigFile {
        path: "services/one-byte.yaml".into(),
        content: "#".into(),
    });
    let e = ctl.apply(apply("over", over)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message()
            .contains("hold 33554433 bytes, more than the 33554432 allowed"),
        "{}",
        e.message()
    );
    assert_eq!(
        ctl.version().await,
        "full",
        "the refused config was applied"
    );
}

/// An `ApplyConfig` whose encoded message is exactly `len` bytes: one service file of `#`.
fn message_of(len: usize) -> proto::ApplyConfigRequest {
    let mut content = len;
    loop {
        let req = apply(
            "huge",
            vec![proto::ConfigFile {
                path: "services/huge.yaml".into(),
                content: "#".repeat(content),
            }],
        );
        match req.encoded_len() {
            n if n == len => return req,
            n => content = content + len - n,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_message_of_40_mib_is_read_and_one_byte_more_is_refused_by_grpc() {
    let mut ctl = Controller::start().await;
    let before = ctl.version().await;

    // Exactly 40 MiB: read whole, then refused as a config (a file above 1 MiB).
    let at = message_of(40 * 1024 * 1024);
    assert_eq!(at.encoded_len(), MAX_CONTROL_MESSAGE_BYTES);
    let e = ctl.apply(at).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("more than the"), "{}", e.message());

    // One byte more: refused by gRPC before any config check.
    let e = ctl
        .apply(message_of(MAX_CONTROL_MESSAGE_BYTES + 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
    assert!(
        e.message()
            .contains("found 41943041 bytes, the limit is: 41943040"),
        "{}",
        e.message()
    );

    // The controller kept its config and still takes one.
    assert_eq!(ctl.version().await, before);
    let r = ctl
        .apply(apply("small", vec![service_file("payments", 200)]))
        .await
        .expect("the controller stopped taking configs");
    assert_eq!(r.services, 1);
    assert_eq!(ctl.version().await, "small");
}
