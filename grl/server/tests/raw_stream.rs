//! A hand-driven `Tier.Exchange` stream: the tests of the wire send reports exactly as an
//! older or newer peer would (named or packed rows, any wire version) and read the
//! instructions that come back.

use std::time::Duration;

use grl_core::proto;
use grl_core::proto::tier_client::TierClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// The reporting interval the raw peers announce.
pub(crate) const IV: Duration = Duration::from_millis(200);

/// One peer's raw stream to a tier: a client (`Level::Client`) or a zone tier.
pub(crate) struct RawStream {
    tx: mpsc::Sender<proto::Report>,
    rx: Streaming<proto::Instruction>,
    reporter_id: String,
    level: proto::Level,
    zone: &'static str,
    wire_version: u32,
    seq: u64,
}

impl RawStream {
    /// Opens a stream to the tier at `addr` as `reporter_id` at `level` in `zone` (region
    /// eu, service payments) speaking `wire_version`, and says hello (an empty report).
    pub(crate) async fn open(
        addr: std::net::SocketAddr,
        (reporter_id, level, zone): (&str, proto::Level, &'static str),
        wire_version: u32,
    ) -> Self {
        let mut c = TierClient::connect(format!("http://{addr}")).await.unwrap();
        let (tx, rx) = mpsc::channel(16);
        let mut raw = RawStream {
            tx,
            rx: c
                .exchange(ReceiverStream::new(rx))
                .await
                .unwrap()
                .into_inner(),
            reporter_id: reporter_id.into(),
            level,
            zone,
            wire_version,
            seq: 0,
        };
        raw.send(Vec::new(), None, "").await;
        raw
    }

    /// Sends a report of `rates` by name and `packed` rows, at config `version`.
    pub(crate) async fn send(
        &mut self,
        rates: Vec<proto::BucketRate>,
        packed: Option<proto::PackedRows>,
        version: &str,
    ) {
        self.seq += 1;
        let r = proto::Report {
            reporter_id: self.reporter_id.clone(),
            level: self.level as i32,
            zone: self.zone.into(),
            region: "eu".into(),
            services: vec!["payments".into()],
            config_version: version.into(),
            interval_ms: IV.as_millis() as u32,
            rates,
            seq: self.seq,
            wire_version: self.wire_version,
            packed,
            ..Default::default()
        };
        self.tx.send(r).await.unwrap();
    }

    /// The next instruction (at most 10 s away).
    pub(crate) async fn next(&mut self) -> proto::Instruction {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("no instruction within 10 s")
            .unwrap()
            .expect("stream ended")
    }
}
