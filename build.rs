//! Generates the gRPC code from `proto/` without a system `protoc`: `protox`
//! parses the files into a descriptor set, `tonic-prost-build` generates the
//! messages, server and client from it, and the encoded set is written to
//! `OUT_DIR/compactd_descriptor.bin` for server reflection.

use std::path::PathBuf;

use protox::prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["compactd/v1/compactd.proto"], ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("compactd_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;

    // The strategy plugin messages (src/plugin): their threads and
    // summaries are the API's own types.
    // The imports stay in the set (the generator inspects the messages a
    // field refers to) but are not generated again: `extern_path`.
    let plugin = protox::Compiler::new(["proto"])?
        .include_imports(true)
        .open_files(["compactd/plugin/v1/plugin.proto"])?
        .file_descriptor_set();
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .extern_path(".compactd.v1", "crate::proto::pb")
        .compile_fds(plugin)?;

    // benches/grpc_roundtrip.rs: an echo of compactd.v1.RenderRequest, the
    // transport floor the Render round trip is compared against. Only the
    // echo file is generated; its message types are the API's own
    // (`compactd::proto::pb`), so the bench sends the very same payload.
    let echo = protox::Compiler::new(["proto"])?
        .include_imports(false)
        .open_files(["compactd/bench/v1/echo.proto"])?
        .file_descriptor_set();
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .extern_path(".compactd.v1", "::compactd::proto::pb")
        .compile_fds(echo)?;
    Ok(())
}
