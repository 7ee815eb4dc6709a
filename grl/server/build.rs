//! Compiles the subset of Envoy's rate limit service and rate limit quota service APIs under `proto/` with protox (pure
//! Rust), so no `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/envoy/config/core/v3/base.proto",
        "proto/envoy/extensions/common/ratelimit/v3/ratelimit.proto",
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/envoy/type/v3/ratelimit_unit.proto",
        "proto/envoy/type/v3/token_bucket.proto",
        "proto/envoy/type/v3/ratelimit_strategy.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
